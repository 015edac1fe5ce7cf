//! Tokens of normalised LaTeX.

use super::env::text;
use super::normalize::matching;
use crate::mv::scan::{at, digit, ws};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Num(String),
    Sym(char),
    Cmd(String),
    Text(String),
    Ch(char),
}

/// Tokens of one answer at most: a longer one does not parse (the parser recurses per nesting
/// level and builds one node per operator; a completion is guest text of any size).
pub(crate) const MAX_LATEX_TOKENS: usize = 1024;
/// Bracket nesting at most.
pub(crate) const MAX_NESTING: usize = 64;

pub(super) fn lex(s: &str) -> Option<Vec<Tok>> {
    if s.len() > 16 * MAX_LATEX_TOKENS {
        return None;
    }
    let toks = lex_all(s)?;
    let mut depth = 0usize;
    for t in &toks {
        match t {
            Tok::Ch('(' | '[' | '{') => depth += 1,
            Tok::Cmd(c) if c == "{" => depth += 1,
            Tok::Ch(')' | ']' | '}') => depth = depth.saturating_sub(1),
            Tok::Cmd(c) if c == "}" => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_NESTING {
            return None;
        }
    }
    (toks.len() <= MAX_LATEX_TOKENS).then_some(toks)
}

fn lex_all(s: &str) -> Option<Vec<Tok>> {
    let t: Vec<char> = crate::mv::chars(s);
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let c = t[i];
        if ws(c) || c == '~' {
            i += 1;
            continue;
        }
        if digit(c) || (c == '.' && at(&t, i + 1).is_some_and(digit)) {
            let mut k = i;
            while at(&t, k).is_some_and(digit) {
                k += 1;
            }
            if at(&t, k) == Some('.') {
                if !at(&t, k + 1).is_some_and(digit) {
                    return None;
                }
                k += 1;
                while at(&t, k).is_some_and(digit) {
                    k += 1;
                }
            }
            out.push(Tok::Num(text(&t, i, k)));
            i = k;
            continue;
        }
        if c == '\\' {
            let k = i + 1;
            match at(&t, k) {
                Some(x) if x.is_ascii_alphabetic() => {
                    let mut e = k;
                    while at(&t, e).is_some_and(|c| c.is_ascii_alphabetic()) {
                        e += 1;
                    }
                    let name = text(&t, k, e);
                    if name == "text" || name == "mbox" {
                        if at(&t, e) != Some('{') {
                            return None;
                        }
                        let close = matching(&t, e, '{', '}')?;
                        out.push(Tok::Text(text(&t, e + 1, close)));
                        i = close + 1;
                        continue;
                    }
                    if matches!(name.as_str(), "quad" | "qquad" | "displaystyle" | "limits") {
                        i = e;
                        continue;
                    }
                    out.push(Tok::Cmd(name));
                    i = e;
                }
                Some(',' | ';' | ':' | '!' | ' ') => i += 2,
                Some(x) => {
                    out.push(Tok::Cmd(x.to_string()));
                    i += 2;
                }
                None => return None,
            }
            continue;
        }
        if c.is_alphabetic() {
            out.push(Tok::Sym(c));
            i += 1;
            continue;
        }
        out.push(Tok::Ch(match c {
            '−' | '∸' => '-',
            '×' | '·' => '*',
            '÷' => '/',
            c => c,
        }));
        i += 1;
    }
    Some(out)
}
