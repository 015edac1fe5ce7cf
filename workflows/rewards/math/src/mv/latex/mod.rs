//! The LaTeX side: math environments and their chains ([`env`]), boxes and the normalisation
//! math-verify applies ([`normalize`]), and a parser from normalised LaTeX to [`Val`]
//! ([`lex`], [`grammar`]).

mod env;
mod grammar;
mod lex;

pub(crate) use lex::{MAX_LATEX_TOKENS, MAX_NESTING};
mod normalize;

pub(crate) use env::{Env, LatexHit, candidates};
pub(crate) use normalize::normalize;

use crate::mv::value::{Node, Q, Val, finite_set};
use grammar::P;

/// Juxtaposition: a product, except an integer followed by a positive rational, which is a
/// mixed number (`2\frac{1}{2}` = 5/2, and `1 234` = 235 as latex2sympy reads it).
pub(super) fn implicit(a: Node, b: Node) -> Node {
    let int_of = |n: &Node| match n {
        Node::Num(q, false) if q.is_int() => Some(q.n),
        Node::Neg(x) => match **x {
            Node::Num(q, false) if q.is_int() => Some(-q.n),
            _ => None,
        },
        _ => None,
    };
    if let (Some(i), Node::Num(r, false)) = (int_of(&a), &b)
        && r.n > 0
    {
        let whole = Q::int(i);
        let mixed = if i < 0 {
            Q::new(i * r.d - r.n, r.d)
        } else {
            Q::new(i * r.d + r.n, r.d)
        };
        if let Some(m) = mixed {
            let _ = whole;
            return Node::Num(m, false);
        }
    }
    Node::Mul(Box::new(a), Box::new(b))
}

pub(super) fn value(v: &Val) -> Option<f64> {
    let x = v.node()?.eval(&|_| f64::NAN)?.f();
    (!x.is_nan()).then_some(x)
}

/// `^\s*-?\d{1,3}(,\d{3})+(\.\d+)?\s*$`
fn comma_number(s: &str) -> Option<Val> {
    let t = s.trim();
    let body = t.strip_prefix('-').unwrap_or(t);
    let (int, dec) = match body.split_once('.') {
        Some((i, d)) if !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()) => (i, Some(d)),
        Some(_) => return None,
        None => (body, None),
    };
    let groups: Vec<&str> = int.split(',').collect();
    if groups.len() < 2
        || !(1..=3).contains(&groups[0].len())
        || groups
            .iter()
            .any(|g| !g.chars().all(|c| c.is_ascii_digit()))
        || groups[1..].iter().any(|g| g.len() != 3)
    {
        return None;
    }
    let joined = format!(
        "{}{}{}",
        if t.starts_with('-') { "-" } else { "" },
        groups.concat(),
        dec.map(|d| format!(".{d}")).unwrap_or_default()
    );
    Val::number(&joined)
}

/// Normalised LaTeX to a value; `None` when it does not parse.
pub(crate) fn parse_latex(s: &str) -> Option<Val> {
    if s.trim().is_empty() {
        return None;
    }
    if let Some(v) = comma_number(s) {
        return Some(v);
    }
    let parse_all = |s: &str| -> Option<Val> {
        let mut p = P {
            toks: lex::lex(s)?,
            i: 0,
        };
        let mut items = vec![p.relation()?];
        while p.eat_ch(',') || p.eat_ch(';') {
            items.push(p.relation()?);
        }
        if p.i != p.toks.len() {
            return None;
        }
        if items.len() == 1 {
            items.pop()
        } else {
            Some(finite_set(items))
        }
    };
    if let Some(v) = parse_all(s) {
        return Some(v);
    }
    // The equation fallback: with more than two `=` parts, the last one.
    if !s.contains(',') && !s.contains(';') {
        let parts: Vec<&str> = s.split('=').collect();
        if parts.len() > 2 {
            return parse_all(parts.last()?);
        }
    }
    None
}

/// Convert one environment's content: normalised ("all" boxes), parsed, percent applied.
pub(crate) fn convert_env(t: &[char], env: &Env) -> (Option<Val>, String) {
    let content: String = t[env.span.0..env.span.1].iter().collect();
    let s = normalize(&content, false);
    let v = parse_latex(&s).map(|v| {
        if env.pct {
            match v {
                Val::Num(q, f) => Val::Pct(q, f),
                other => match other.node() {
                    Some(n) => Val::Expr(Node::Pct(Box::new(n))),
                    None => other,
                },
            }
        } else {
            v
        }
    });
    (v, s)
}
