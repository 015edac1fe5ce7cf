//! Math environments (`$..$`, `$$..$$`, `\[..\]`, `\(..\)`, ` [..] `, a bare `\frac`), their
//! chains ("and", "or", commas), and the LaTeX candidates of each priority.

use crate::mv::scan::{at, digit, starts, starts_ci, ws};

/// One environment of a chain: its inner text and whether a percent sign followed it.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    /// The inner text's span in the candidate's text.
    pub span: (usize, usize),
    pub pct: bool,
}

pub(super) fn text(t: &[char], a: usize, b: usize) -> String {
    t[a..b].iter().collect()
}

fn pct_end(t: &[char], i: usize) -> Option<usize> {
    let w = t[i.min(t.len())..].iter().take_while(|c| ws(**c)).count();
    let k = i + w;
    for word in [
        "\\%",
        "%",
        "percentage",
        "Percentage",
        "percent",
        "Percent",
        "pct",
        "Pct",
    ] {
        if starts(t, k, word) {
            return Some(k + word.chars().count());
        }
    }
    None
}

/// One environment at `p`: `(end, inner start, inner end)`; `boxed`: the content must hold a
/// `\boxed{`; `plain`: a bare `\frac{N}{N}` counts too.
fn env_at(t: &[char], p: usize, boxed: bool, plain: bool) -> Option<(usize, usize, usize)> {
    match at(t, p)? {
        '$' | '\\' | '-' => {}
        c if ws(c) && at(t, p + 1) == Some('[') => {}
        _ => return None,
    }
    let not_esc = |i: usize| i == 0 || at(t, i - 1) != Some('\\');
    let has_box = |a: usize, b: usize| {
        !boxed || (a..b).any(|i| starts(t, i, "\\boxed{") && t[(i + 7).min(b)..b].contains(&'}'))
    };

    // $$ .. $$
    if starts(t, p, "$$") && not_esc(p) {
        let mut k = p + 3;
        while k + 1 < t.len() {
            if starts(t, k, "$$") && not_esc(k) && has_box(p + 2, k) {
                return Some((k + 2, p + 2, k));
            }
            k += 1;
        }
    }
    // \[ .. \]
    if starts(t, p, "\\[") && not_esc(p) {
        let mut k = p + 3;
        while k + 1 < t.len() {
            if starts(t, k, "\\]") {
                if not_esc(k) && has_box(p + 2, k) {
                    return Some((k + 2, p + 2, k));
                }
                break;
            }
            k += 1;
        }
    }
    // $ .. $
    if at(t, p) == Some('$') && (p == 0 || !at(t, p - 1).is_some_and(|c| c == '\\' || digit(c))) {
        let mut k = p + 1;
        let mut units = 0;
        loop {
            match at(t, k) {
                Some('$') if units > 0 && not_esc(k) => {
                    if has_box(p + 1, k) {
                        return Some((k + 1, p + 1, k));
                    }
                    break;
                }
                Some('\\') if at(t, k + 1) == Some('$') => {
                    k += 2;
                    units += 1;
                }
                Some('$') | Some('\n') | None => break,
                Some(_) => {
                    k += 1;
                    units += 1;
                }
            }
        }
    }
    // \( .. \)
    if starts(t, p, "\\(") {
        let mut k = p + 3;
        while k + 1 < t.len() && at(t, k - 1) != Some('\n') {
            if starts(t, k, "\\)") {
                if has_box(p + 2, k) && !t[p + 2..k].contains(&'\n') {
                    return Some((k + 2, p + 2, k));
                }
                break;
            }
            k += 1;
        }
    }
    // \s[ .. ]\s
    if at(t, p).is_some_and(ws) && at(t, p + 1) == Some('[') {
        let mut k = p + 2;
        while let Some(c) = at(t, k) {
            if c == ']' {
                if k > p + 2 && at(t, k + 1).is_some_and(ws) && has_box(p + 2, k) {
                    return Some((k + 2, p + 2, k));
                }
                break;
            }
            if c == '\n' || c == '[' {
                break;
            }
            k += 1;
        }
    }
    // -?\frac{N}{N}
    if plain && !boxed {
        let mut k = p;
        if at(t, k) == Some('-') {
            k += 1;
        }
        if starts(t, k, "\\frac{") {
            let num = |k: usize| -> Option<usize> {
                let mut k = k;
                if at(t, k) == Some('-') {
                    k += 1;
                }
                let d = t[k.min(t.len())..]
                    .iter()
                    .take_while(|c| digit(**c))
                    .count();
                if d == 0 {
                    return None;
                }
                k += d;
                if matches!(at(t, k), Some('.' | ',')) {
                    let d2 = t[(k + 1).min(t.len())..]
                        .iter()
                        .take_while(|c| digit(**c))
                        .count();
                    if d2 > 0 {
                        k += 1 + d2;
                    }
                }
                Some(k)
            };
            if let Some(a) = num(k + 6)
                && starts(t, a, "}{")
                && let Some(b) = num(a + 2)
                && at(t, b) == Some('}')
            {
                return Some((b + 1, p, b + 1));
            }
        }
    }
    None
}

/// An environment chain at `p`: its end and environments.
pub(crate) fn chain_at(t: &[char], p: usize, boxed: bool) -> Option<(usize, Vec<Env>)> {
    let one = |p: usize| -> Option<(usize, Env)> {
        let (mut end, a, b) = env_at(t, p, boxed, true)?;
        let pct = match pct_end(t, end) {
            Some(e) => {
                end = e;
                true
            }
            None => false,
        };
        Some((end, Env { span: (a, b), pct }))
    };
    let (mut end, first) = one(p)?;
    let mut envs = vec![first];
    for _ in 0..5 {
        let skip_ws = |i: usize| i + t[i.min(t.len())..].iter().take_while(|c| ws(**c)).count();
        let base = if boxed { skip_ws(end) } else { end };
        let mut k = skip_ws(base);
        let mut sep = None;
        for s in [",and", ",or", "and", "or", ","] {
            if starts(t, k, s) {
                sep = Some(k + s.chars().count());
                break;
            }
        }
        let Some(after) = sep else {
            if boxed {
                end = base;
            }
            break;
        };
        k = skip_ws(after);
        match one(k) {
            Some((e, env)) => {
                envs.push(env);
                end = e;
            }
            None => {
                if boxed {
                    end = base;
                }
                break;
            }
        }
    }
    if boxed {
        end += t[end.min(t.len())..].iter().take_while(|c| ws(**c)).count();
    }
    Some((end, envs))
}

/// A LaTeX candidate.
#[derive(Debug, Clone)]
pub(crate) enum LatexHit {
    Chain(Vec<Env>),
    /// `\boxed{` .. the last `}` of the text.
    Boxed(String),
}

/// Only positions whose character passes `first` are tried.
fn find_all(
    t: &[char],
    first: impl Fn(char) -> bool,
    f: impl Fn(&[char], usize) -> Option<(usize, LatexHit)>,
) -> Vec<(usize, usize, LatexHit)> {
    let mut out = Vec::new();
    let mut s = 0;
    while s < t.len() {
        if !first(t[s]) {
            s += 1;
            continue;
        }
        match f(t, s) {
            Some((e, h)) => {
                out.push((s, e, h));
                s = e.max(s + 1);
            }
            None => s += 1,
        }
    }
    out
}

fn anchored(t: &[char], s: usize, word: &str, colon: bool) -> Option<(usize, LatexHit)> {
    if !starts_ci(t, s, word) {
        return None;
    }
    let mut a = s + word.chars().count();
    if colon {
        if at(t, a) != Some(':') {
            return None;
        }
        a += 1;
    }
    for l in 0..=50 {
        if a + l > t.len() {
            break;
        }
        if let Some((e, envs)) = chain_at(t, a + l, false) {
            return Some((e, LatexHit::Chain(envs)));
        }
    }
    None
}

/// The LaTeX candidates of priority `level`: `(priority, start, end, hit)`.
/// `text` is the string `t` holds; `anchors` says which anchor words it contains (a pattern
/// whose anchor is absent cannot match and is skipped).
pub(crate) fn candidates(
    t: &[char],
    text: &str,
    level: u32,
    anchors: &crate::mv::Anchors,
) -> Vec<(u32, usize, usize, LatexHit)> {
    let mut out = Vec::new();
    let mut add = |prio: u32, needs: bool, v: &dyn Fn() -> Vec<(usize, usize, LatexHit)>| {
        if prio == level && needs {
            out.extend(v().into_iter().map(|(s, e, h)| (prio, s, e, h)));
        }
    };
    let f = |c: char| c == 'f' || c == 'F';
    let a = |c: char| c == 'a' || c == 'A';
    let env = |c: char| c == '$' || c == '\\' || c == '-' || ws(c);
    // final answer is .. I hope
    add(0, anchors.final_answer_is, &|| {
        find_all(t, f, |t, s| {
            if !starts_ci(t, s, "final answer is") {
                return None;
            }
            let mut a = s + 15;
            if at(t, a) == Some(':') {
                a += 1;
            }
            a += t[a.min(t.len())..].iter().take_while(|c| ws(**c)).count();
            let (e, envs) = chain_at(t, a, false)?;
            let mut k = e;
            if at(t, k) == Some('.') {
                k += 1;
            }
            if at(t, k).is_some_and(ws) && !starts(t, k, "I hope") {
                k += 1;
            }
            starts(t, k, "I hope").then(|| (k + 6, LatexHit::Chain(envs)))
        })
    });
    // final answer.{0,100}?\s+is:?\s* CHAIN
    add(50, anchors.final_answer, &|| {
        find_all(t, f, |t, s| {
            if !starts_ci(t, s, "final answer") {
                return None;
            }
            let a = s + 12;
            for l in 0..=100 {
                if a + l >= t.len() {
                    break;
                }
                let w = t[a + l..].iter().take_while(|c| ws(**c)).count();
                if w == 0 || !starts(t, a + l + w, "is") {
                    continue;
                }
                let mut k = a + l + w + 2;
                if at(t, k) == Some(':') {
                    k += 1;
                }
                k += t[k.min(t.len())..].iter().take_while(|c| ws(**c)).count();
                if let Some((e, envs)) = chain_at(t, k, false) {
                    return Some((e, LatexHit::Chain(envs)));
                }
            }
            None
        })
    });
    add(100, anchors.answer, &|| {
        find_all(t, a, |t, s| anchored(t, s, "answer", true))
    });
    add(200, anchors.answer, &|| {
        find_all(t, a, |t, s| anchored(t, s, "answer", false))
    });
    add(300, true, &|| {
        find_all(t, env, |t, s| {
            chain_at(t, s, false).map(|(e, envs)| (e, LatexHit::Chain(envs)))
        })
    });
    add(50, anchors.boxed, &|| {
        find_all(t, env, |t, s| {
            chain_at(t, s, true).map(|(e, envs)| (e, LatexHit::Chain(envs)))
        })
    });
    // \boxed{.+} (DOTALL, greedy): the first `\boxed{` to the last `}`.
    let s = if level == 50 { text } else { "" };
    if let Some(b) = s.find("\\boxed{")
        && let Some(last) = s.rfind('}')
        && last > b + 7
    {
        let start = s[..b].chars().count();
        let end = s[..=last].chars().count();
        out.push((50, start, end, LatexHit::Boxed(s[b..=last].to_string())));
    }
    out
}
