//! AReaL's GSM8K reward (`gsm8k_reward_fn`, which runs math-verify 0.8's `parse` on the
//! reference and the completion and `verify` with 6-decimal float rounding), reimplemented
//! from its documented and observed behaviour:
//!
//! * **Candidates** by priority (lower first): "final answer is X. I hope" (0); "final answer
//!   ... is X" and any `\boxed{}` (50); "answer:" X (100); "answer" X (200); any number,
//!   arithmetic expression or math environment (300). Within a priority the candidate that
//!   ends last in the text is tried first; the first that converts wins.
//! * **Result**: the value, plus the text of the first candidate tried; two results agree when
//!   a value equals a value (`compare::expr_eq`: 6 decimal places for floats, exact otherwise,
//!   sets, intervals, tuples, equations) or a text equals a text.
//!
//! The plain-text side is in [`scan`], the LaTeX side in [`latex`].

mod compare;
pub(crate) mod latex;
mod pyexpr;
pub(crate) mod scan;
pub mod value;

use compare::expr_eq;
use value::{Val, finite_set};

/// What `parse` returns: a value and the first candidate's text (either may be missing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    /// The first candidate that converted.
    pub value: Option<Val>,
    /// The text of the first candidate tried.
    pub text: Option<String>,
}

impl Parsed {
    fn is_empty(&self) -> bool {
        self.value.is_none() && self.text.is_none()
    }
}

enum Cand {
    Plain(scan::Hit),
    Latex(latex::LatexHit),
}

fn convert(t: &[char], c: &Cand) -> (Option<Val>, String) {
    match c {
        Cand::Plain(scan::Hit::Number(n)) => n.value(t),
        Cand::Plain(scan::Hit::Expr(e)) => {
            let s: String = t[e.start..e.stop].iter().collect();
            (pyexpr::parse_expr(&s), s)
        }
        Cand::Latex(latex::LatexHit::Boxed(span)) => {
            let s = latex::normalize(span, true);
            (latex::parse_latex(&s), s)
        }
        Cand::Latex(latex::LatexHit::Chain(envs)) => {
            let parts: Vec<(Option<Val>, String)> =
                envs.iter().map(|e| latex::convert_env(t, e)).collect();
            if parts.len() > 1 && parts.iter().all(|(v, _)| v.is_some()) {
                let text = parts
                    .iter()
                    .map(|(_, s)| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" and ");
                let values = parts.into_iter().filter_map(|(v, _)| v).collect();
                (Some(finite_set(values)), text)
            } else {
                parts.into_iter().next().unwrap_or((None, String::new()))
            }
        }
    }
}

/// The characters of `s`, in a vector sized once.
pub(crate) fn chars(s: &str) -> Vec<char> {
    let mut v = Vec::with_capacity(s.len());
    v.extend(s.chars());
    v
}

/// Which of the anchor words the text holds, found once so that a pattern whose anchor is
/// absent is not scanned for at all (the patterns match only where their anchor starts).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Anchors {
    /// "final answer is", any ASCII case.
    pub final_answer_is: bool,
    /// "final answer", any ASCII case.
    pub final_answer: bool,
    /// "answer", any ASCII case.
    pub answer: bool,
    /// `\boxed{`.
    pub boxed: bool,
}

impl Anchors {
    fn of(text: &str) -> Anchors {
        let lower = text.to_ascii_lowercase();
        let answer = lower.contains("answer");
        let final_answer = answer && lower.contains("final answer");
        Anchors {
            final_answer_is: final_answer && lower.contains("final answer is"),
            final_answer,
            answer,
            boxed: text.contains("\\boxed{"),
        }
    }

    /// Whether any pattern of priority `level` can match.
    fn level(&self, level: u32) -> bool {
        match level {
            0 => self.final_answer_is,
            50 => self.final_answer || self.boxed,
            100 | 200 => self.answer,
            _ => true,
        }
    }
}

/// math-verify's `parse` with AReaL's configuration.
pub fn parse(text: &str) -> Parsed {
    let t: Vec<char> = crate::mv::chars(text);
    let anchors = Anchors::of(text);
    let mut first_text: Option<String> = None;
    for level in [0, 50, 100, 200, 300] {
        if !anchors.level(level) {
            continue;
        }
        // Plain-text patterns come before LaTeX ones at equal priority and position.
        let mut cands: Vec<(usize, usize, usize, Cand)> = Vec::new();
        for (_, start, hit) in scan::candidates(&t, level, &anchors) {
            cands.push((start, hit.end(), cands.len(), Cand::Plain(hit)));
        }
        for (_, start, end, hit) in latex::candidates(&t, text, level, &anchors) {
            cands.push((start, end, cands.len(), Cand::Latex(hit)));
        }
        cands.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)).then(a.2.cmp(&b.2)));
        for c in &cands {
            let (v, s) = convert(&t, &c.3);
            if first_text.is_none() && !s.is_empty() {
                first_text = Some(s);
            }
            if v.is_some() {
                return Parsed {
                    value: v,
                    text: first_text,
                };
            }
        }
    }
    Parsed {
        value: None,
        text: first_text,
    }
}

/// math-verify's `verify(gold, pred)`: any value pair or text pair agrees.
pub fn verify(gold: &Parsed, pred: &Parsed) -> bool {
    if let (Some(g), Some(p)) = (&gold.value, &pred.value)
        && expr_eq(g, p)
    {
        return true;
    }
    matches!((&gold.text, &pred.text), (Some(a), Some(b)) if !a.trim().is_empty() && a.trim() == b.trim())
}

/// AReaL's `gsm8k_reward_fn(completion, answer)`: 1.0 when both parse and agree, else 0.0.
pub fn reward(completion: &str, answer: &str) -> f64 {
    let gold = parse(answer);
    let pred = parse(completion);
    if gold.is_empty() || pred.is_empty() {
        return 0.0;
    }
    if verify(&gold, &pred) { 1.0 } else { 0.0 }
}
