//! The plain-text (`Expr`) side of extraction: numbers and arithmetic expressions after a
//! prefix, and the anchored forms ("final answer is", "answer:", "answer"), each enumerating its
//! possible match ends in the order a backtracking regex engine tries them.

use super::value::Val;

#[inline]
pub(crate) fn ws(c: char) -> bool {
    c.is_whitespace()
}

#[inline]
pub(crate) fn digit(c: char) -> bool {
    c.is_ascii_digit()
}

#[inline]
pub(crate) fn at(t: &[char], i: usize) -> Option<char> {
    t.get(i).copied()
}

#[inline]
pub(crate) fn starts(t: &[char], i: usize, s: &str) -> bool {
    (i..).zip(s.chars()).all(|(k, c)| at(t, k) == Some(c))
}

/// Case-insensitive `starts` for an ASCII lowercase pattern.
#[inline]
pub(crate) fn starts_ci(t: &[char], i: usize, s: &str) -> bool {
    let s = s.as_bytes();
    t.len() >= i + s.len()
        && t[i..i + s.len()]
            .iter()
            .zip(s)
            .all(|(x, &c)| x.to_ascii_lowercase() == char::from(c))
}

fn digits_from(t: &[char], i: usize) -> usize {
    t[i.min(t.len())..]
        .iter()
        .take_while(|c| digit(**c))
        .count()
}

/// One way a NUMBER can match: its end, and the spans of its integer and decimal parts.
#[derive(Debug, Clone)]
pub(crate) struct NumMatch {
    pub end: usize,
    integer: (usize, usize),
    decimal: (usize, usize),
    percent: bool,
}

impl NumMatch {
    /// The value and the fallback string (the normalised number text).
    pub fn value(&self, t: &[char]) -> (Option<Val>, String) {
        let decimal: String = t[self.decimal.0..self.decimal.1].iter().collect();
        let mut int: String = t[self.integer.0..self.integer.1]
            .iter()
            .filter(|c| **c != ',' && **c != ' ')
            .collect();
        int = int.trim_start_matches('0').to_string();
        if int.is_empty() {
            int = "0".into();
        }
        let text = format!("{int}{}", decimal.replace(',', "."));
        let v = Val::number(&text).map(|v| match v {
            Val::Num(q, f) if self.percent => Val::Pct(q, f),
            v => v,
        });
        (v, text)
    }
}

fn percent_end(t: &[char], i: usize) -> Option<usize> {
    let w = t[i.min(t.len())..].iter().take_while(|c| ws(**c)).count();
    let k = i + w;
    if at(t, k) == Some('%') {
        return Some(k + 1);
    }
    for word in [
        "percent",
        "Percent",
        "percentage",
        "Percentage",
        "pct",
        "Pct",
    ] {
        if starts(t, k, word) {
            return Some(k + word.chars().count());
        }
    }
    None
}

/// The matches of NUMBER at `q`, in backtracking order, until `f` accepts one.
pub(crate) fn numbers_at<R>(
    t: &[char],
    q: usize,
    f: &mut dyn FnMut(NumMatch) -> Option<R>,
) -> Option<R> {
    if q > 0 && at(t, q - 1).is_some_and(digit) {
        return None;
    }
    let text = |a: usize, b: usize| (a, b);
    let mut push = |end: usize, integer: (usize, usize), decimal: (usize, usize)| -> Option<R> {
        if let Some(p) = percent_end(t, end)
            && let Some(r) = f(NumMatch {
                end: p,
                integer,
                decimal,
                percent: true,
            })
        {
            return Some(r);
        }
        f(NumMatch {
            end,
            integer,
            decimal,
            percent: false,
        })
    };
    let sign = usize::from(at(t, q) == Some('-'));
    let d0 = q + sign;
    // F1: -?[1-9]\d{0,2}(?:[ ,]\d{3})+(\.\d+)?
    if at(t, d0).is_some_and(|c| ('1'..='9').contains(&c)) {
        let lead_max = digits_from(t, d0 + 1).min(2);
        for lead in (0..=lead_max).rev() {
            let mut ends = Vec::new();
            let mut k = d0 + 1 + lead;
            while matches!(at(t, k), Some(' ' | ',')) && digits_from(t, k + 1) >= 3 {
                k += 4;
                ends.push(k);
            }
            for &g in ends.iter().rev() {
                let dec_digits = if at(t, g) == Some('.') {
                    digits_from(t, g + 1)
                } else {
                    0
                };
                for dl in (1..=dec_digits).rev() {
                    if let Some(r) = push(g + 1 + dl, text(q, g), text(g, g + 1 + dl)) {
                        return Some(r);
                    }
                }
                if let Some(r) = push(g, text(q, g), (0, 0)) {
                    return Some(r);
                }
            }
        }
    }
    // F2: -?\d+[.,]\d+
    let n = digits_from(t, d0);
    if n > 0 && matches!(at(t, d0 + n), Some('.' | ',')) {
        let m = digits_from(t, d0 + n + 1);
        for dl in (1..=m).rev() {
            if let Some(r) = push(
                d0 + n + 1 + dl,
                text(q, d0 + n),
                text(d0 + n, d0 + n + 1 + dl),
            ) {
                return Some(r);
            }
        }
    }
    // F3: \.\d+
    if at(t, q) == Some('.') {
        let m = digits_from(t, q + 1);
        for dl in (1..=m).rev() {
            if let Some(r) = push(q + 1 + dl, (0, 0), text(q, q + 1 + dl)) {
                return Some(r);
            }
        }
    }
    // F4: -?\d+
    for l in (1..=n).rev() {
        if let Some(r) = push(d0 + l, text(q, d0 + l), (0, 0)) {
            return Some(r);
        }
    }
    None
}

const OPS: &str = "+-*×/^()÷";

fn is_op(c: char) -> bool {
    OPS.contains(c)
}

fn is_c(c: char) -> bool {
    digit(c) || c == '.' || ws(c) || is_op(c)
}

/// One way an arithmetic expression can match: the expression's span and the match end
/// (after the suffix).
#[derive(Debug, Clone)]
pub(crate) struct ExprMatch {
    pub start: usize,
    pub stop: usize,
    pub end: usize,
}

fn suffix_ends(t: &[char], e: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut terms = |k: usize| match at(t, k) {
        Some(c) if ".,:)$".contains(c) || ws(c) => out.push(k + 1),
        None => out.push(k),
        _ => {}
    };
    if starts(t, e, "**") {
        terms(e + 2);
    }
    terms(e);
    out
}

/// The matches of EXPR followed by its suffix at `q`, in backtracking order, until `f` accepts
/// one.
pub(crate) fn exprs_at<R>(
    t: &[char],
    q: usize,
    f: &mut dyn FnMut(ExprMatch) -> Option<R>,
) -> Option<R> {
    // The expression needs a digit near `q` and an operator somewhere after it.
    if !t[q.min(t.len())..].iter().take(4).any(|c| digit(*c)) {
        return None;
    }
    let mut heads = Vec::new();
    for s1 in if at(t, q) == Some('-') {
        vec![1, 0]
    } else {
        vec![0]
    } {
        let a = q + s1;
        for p in if at(t, a) == Some('(') {
            vec![1, 0]
        } else {
            vec![0]
        } {
            let b = a + p;
            for s2 in if at(t, b) == Some('-') {
                vec![1, 0]
            } else {
                vec![0]
            } {
                let c = b + s2;
                if at(t, c).is_some_and(digit) {
                    heads.push(c);
                }
            }
        }
    }
    for k in heads {
        let mut r = k + 1;
        while at(t, r).is_some_and(is_c) {
            r += 1;
        }
        // C* ends at i (t[i] is the operator), C+ at j.
        for i in (k + 1..r).rev() {
            if !is_op(t[i]) {
                continue;
            }
            for j in (i + 2..=r).rev() {
                let mut stops = Vec::new();
                if at(t, j) == Some(')') {
                    stops.push(j + 1);
                }
                stops.push(j);
                for e in stops {
                    for end in suffix_ends(t, e) {
                        if let Some(r) = f(ExprMatch {
                            start: q,
                            stop: e,
                            end,
                        }) {
                            return Some(r);
                        }
                    }
                }
            }
        }
    }
    None
}

const CURRENCY: &str = "$€£¥₹₽₪₩₫฿₡₢₣₤₥₦₧₨₭₮₯₰₱₲₳₴₵₶₷₸₺₻₼₾₿";

/// Where the thing after PREFIX may start, in backtracking order (`s` is where PREFIX starts).
fn after_prefix(t: &[char], s: usize) -> impl Iterator<Item = usize> + use<> {
    let mut qs = [usize::MAX; 4];
    let mut n = 0;
    let mut add = |q0: usize| {
        if starts(t, q0, "**") {
            qs[n] = q0 + 2;
            n += 1;
        }
        qs[n] = q0;
        n += 1;
    };
    if s == 0 {
        add(0);
    }
    if at(t, s).is_some_and(|c| ws(c) || c == '=') {
        add(s + 1);
    }
    qs.into_iter().take(n)
}

/// A candidate from the plain-text side.
#[derive(Debug, Clone)]
pub(crate) enum Hit {
    Number(NumMatch),
    Expr(ExprMatch),
}

impl Hit {
    pub fn end(&self) -> usize {
        match self {
            Hit::Number(n) => n.end,
            Hit::Expr(e) => e.end,
        }
    }
}

/// The matches of EXPR_OR_NUMBER whose PREFIX starts at `s`, in backtracking order, until `f`
/// accepts one.
pub(crate) fn expr_or_number_at(
    t: &[char],
    s: usize,
    f: &mut dyn FnMut(Hit) -> Option<Hit>,
) -> Option<Hit> {
    if !(s == 0 || at(t, s).is_some_and(|c| ws(c) || c == '=')) {
        return None;
    }
    for q in after_prefix(t, s) {
        if let Some(h) = exprs_at(t, q, &mut |e| f(Hit::Expr(e))) {
            return Some(h);
        }
    }
    for q in after_prefix(t, s) {
        let mut qs = Vec::new();
        if at(t, q).is_some_and(|c| CURRENCY.contains(c)) {
            qs.push(q + 1);
        }
        qs.push(q);
        for q in qs {
            if let Some(h) = numbers_at(t, q, &mut |n| f(Hit::Number(n))) {
                return Some(h);
            }
        }
    }
    None
}

/// `(?!\s*=)` at `i`.
fn not_followed_by_eq(t: &[char], i: usize) -> bool {
    let w = t[i.min(t.len())..].iter().take_while(|c| ws(**c)).count();
    at(t, i + w) != Some('=')
}

/// Non-newline characters from `i`, at most `cap`.
fn line_run(t: &[char], i: usize, cap: usize) -> usize {
    t[i.min(t.len())..]
        .iter()
        .take(cap)
        .take_while(|c| **c != '\n')
        .count()
}

/// `(?i:answer)` [`:`] `(?:.{0,100}=\s*|.{0,50}?)` EXPR_OR_NUMBER `(?!\s*=)` at `s`.
fn answer_at(t: &[char], s: usize, colon: bool) -> Option<Hit> {
    if !starts_ci(t, s, "answer") {
        return None;
    }
    let mut a = s + 6;
    if colon {
        if at(t, a) != Some(':') {
            return None;
        }
        a += 1;
    }
    let first =
        |s: usize| expr_or_number_at(t, s, &mut |h| not_followed_by_eq(t, h.end()).then_some(h));
    let run = line_run(t, a, 100);
    for l in (0..=run).rev() {
        if at(t, a + l) != Some('=') {
            continue;
        }
        let w = t[(a + l + 1).min(t.len())..]
            .iter()
            .take_while(|c| ws(**c))
            .count();
        for w in (0..=w).rev() {
            if let Some(h) = first(a + l + 1 + w) {
                return Some(h);
            }
        }
    }
    for l in 0..=line_run(t, a, 50) {
        if let Some(h) = first(a + l) {
            return Some(h);
        }
    }
    None
}

/// `(?i:final answer is)\:?\s*` EXPR_OR_NUMBER `\.?\s?I hope` at `s`.
fn final_hope_at(t: &[char], s: usize) -> Option<Hit> {
    if !starts_ci(t, s, "final answer is") {
        return None;
    }
    let mut a = s + 15;
    if at(t, a) == Some(':') {
        a += 1;
    }
    let w = t[a.min(t.len())..].iter().take_while(|c| ws(**c)).count();
    for w in (0..=w).rev() {
        let hit = expr_or_number_at(t, a + w, &mut |h| {
            let k = h.end();
            for dot in [true, false] {
                let k2 = if dot {
                    if at(t, k) != Some('.') {
                        continue;
                    }
                    k + 1
                } else {
                    k
                };
                for sp in [true, false] {
                    let k3 = if sp {
                        if !at(t, k2).is_some_and(ws) {
                            continue;
                        }
                        k2 + 1
                    } else {
                        k2
                    };
                    if starts(t, k3, "I hope") {
                        return Some(match h {
                            Hit::Number(mut n) => {
                                n.end = k3 + 6;
                                Hit::Number(n)
                            }
                            Hit::Expr(mut e) => {
                                e.end = k3 + 6;
                                Hit::Expr(e)
                            }
                        });
                    }
                }
            }
            None
        });
        if hit.is_some() {
            return hit;
        }
    }
    None
}

/// `(?i:final answer.{0,100}?)\s+is\:?` EXPR_OR_NUMBER at `s`.
fn final_is_at(t: &[char], s: usize) -> Option<Hit> {
    if !starts_ci(t, s, "final answer") {
        return None;
    }
    let a = s + 12;
    for l in 0..=line_run(t, a, 100) {
        let w = t[(a + l).min(t.len())..]
            .iter()
            .take_while(|c| ws(**c))
            .count();
        for w in (1..=w).rev() {
            let k = a + l + w;
            if !starts(t, k, "is") {
                continue;
            }
            let mut k = k + 2;
            let mut colons = vec![k];
            if at(t, k) == Some(':') {
                colons.insert(0, k + 1);
            }
            for c in colons {
                k = c;
                if let Some(h) = expr_or_number_at(t, k, &mut Some) {
                    return Some(h);
                }
            }
        }
    }
    None
}

/// Python's `finditer` of an anchored pattern: non-overlapping, left to right.
/// Only positions whose character passes `first` are tried (a cheap filter for the pattern's
/// first character).
fn find_all(
    t: &[char],
    first: impl Fn(usize, char) -> bool,
    f: impl Fn(&[char], usize) -> Option<Hit>,
) -> Vec<(usize, Hit)> {
    let mut out = Vec::new();
    let mut s = 0;
    while s < t.len() {
        if !first(s, t[s]) {
            s += 1;
            continue;
        }
        match f(t, s) {
            Some(h) => {
                let e = h.end().max(s + 1);
                out.push((s, h));
                s = e;
            }
            None => s += 1,
        }
    }
    out
}

/// The plain-text candidates of priority `level`: `(priority, start, hit)`.
pub(crate) fn candidates(
    t: &[char],
    level: u32,
    anchors: &crate::mv::Anchors,
) -> Vec<(u32, usize, Hit)> {
    let mut out = Vec::new();
    let mut add = |prio: u32, v: &dyn Fn() -> Vec<(usize, Hit)>| {
        // The "final answer" patterns need their anchor; the level gate covers the others.
        let anchored = prio != 50 || anchors.final_answer;
        if prio == level && anchored {
            out.extend(v().into_iter().map(|(s, h)| (prio, s, h)));
        }
    };
    let f = |_: usize, c: char| c == 'f' || c == 'F';
    let a = |_: usize, c: char| c == 'a' || c == 'A';
    let prefix = |s: usize, c: char| s == 0 || ws(c) || c == '=';
    add(0, &|| find_all(t, f, final_hope_at));
    add(50, &|| find_all(t, f, final_is_at));
    add(100, &|| find_all(t, a, |t, s| answer_at(t, s, true)));
    add(200, &|| find_all(t, a, |t, s| answer_at(t, s, false)));
    add(300, &|| {
        find_all(t, prefix, |t, s| {
            after_prefix(t, s)
                .into_iter()
                .find_map(|q| exprs_at(t, q, &mut |e| Some(Hit::Expr(e))))
        })
    });
    add(300, &|| {
        find_all(t, prefix, |t, s| {
            after_prefix(t, s).into_iter().find_map(|q| {
                let mut qs = Vec::new();
                if at(t, q).is_some_and(|c| CURRENCY.contains(c)) {
                    qs.push(q + 1);
                }
                qs.push(q);
                qs.into_iter()
                    .find_map(|q| numbers_at(t, q, &mut |n| Some(Hit::Number(n))))
            })
        })
    });
    out
}
