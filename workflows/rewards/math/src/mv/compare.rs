//! Equality of parsed answers as math-verify's `verify` decides it: numbers (6 decimal places
//! when a float is involved, exact otherwise; sympy's Float never equals a Rational), symbolic
//! expressions (equal at several points), sets, tuples, intervals, unions, equations, symbols.

use super::value::{N, Node, Q, Val, value_of};

/// Rounded to 6 decimal places, half to even, on the 15-significant-digit decimal expansion
/// (sympy's `round(6)` on a Float); `None` when not finite.
fn round6(x: f64) -> Option<i128> {
    if !x.is_finite() || x.abs() > 1e20 {
        return None;
    }
    let s = format!("{:.14e}", x.abs());
    let (mant, exp) = s.split_once('e')?;
    let exp: i32 = exp.parse().ok()?;
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    // value = 0.d1d2...d15 * 10^(exp+1); scaled by 10^6: shift = exp + 1 + 6 digits before the point.
    let shift = exp + 1 + 6;
    let (int_part, rest): (String, String) = if shift <= 0 {
        (String::new(), "0".repeat((-shift) as usize) + &digits)
    } else if shift as usize >= digits.len() {
        (
            digits.clone() + &"0".repeat(shift as usize - digits.len()),
            String::new(),
        )
    } else {
        (
            digits[..shift as usize].to_string(),
            digits[shift as usize..].to_string(),
        )
    };
    let mut v: i128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().ok()?
    };
    let first = rest.chars().next().unwrap_or('0');
    let beyond = rest.chars().skip(1).any(|c| c != '0');
    if first > '5' || (first == '5' && (beyond || v % 2 == 1)) {
        v += 1;
    }
    Some(if x < 0.0 { -v } else { v })
}

/// Numeric equality of two arithmetic values (math-verify's numeric then symbolic test).
fn numbers_equal(g: &Val, p: &Val) -> bool {
    let (Some(gn), Some(pn)) = (g.node(), p.node()) else {
        return false;
    };
    let symbolic = gn.has_symbols() || pn.has_symbols();
    if !symbolic {
        let (Some(a), Some(b)) = (gn.eval(&|_| 0.0), pn.eval(&|_| 0.0)) else {
            return false;
        };
        if let (N::Exact(x), N::Exact(y)) = (a, b)
            && x == y
        {
            return true;
        }
        if g.is_atomic() || p.is_atomic() {
            if g.is_float() || p.is_float() {
                // An exact integer never equals a float after rounding; exact equality remains.
                let exact_int =
                    |n: N, v: &Val| matches!(n, N::Exact(q) if q.is_int()) && !v.is_float();
                if exact_int(a, g) || exact_int(b, p) {
                    return a.f() == b.f();
                }
                return match (round6(a.f()), round6(b.f())) {
                    (Some(x), Some(y)) => x == y,
                    _ => a.f() == b.f(),
                };
            }
            // Exact against a value with a float in it: sympy's Float never equals a Rational,
            // so only an exactly equal float passes; irrational values compare numerically.
            return match (a, b) {
                (N::Exact(_), N::Exact(_)) => false,
                (N::Exact(q), N::Approx(x)) | (N::Approx(x), N::Exact(q))
                    if g.has_float() || p.has_float() =>
                {
                    float_is_exactly(x, q)
                }
                _ => close(a.f(), b.f()),
            };
        }
        return close(a.f(), b.f());
    }
    // Symbolic: equal at several points.
    let points: [&dyn Fn(&str) -> f64; 3] = [
        &|s| 0.37 + sym_seed(s) * 0.11,
        &|s| 1.93 - sym_seed(s) * 0.07,
        &|s| -2.71 + sym_seed(s) * 0.13,
    ];
    points
        .iter()
        .all(|env| match (gn.eval(*env), pn.eval(*env)) {
            (Some(a), Some(b)) => close(a.f(), b.f()),
            _ => false,
        })
}

/// Whether a float computed at 53 bits equals the rational `q` converted to 53 bits
/// (`simplify(q - x) == 0` in sympy, where the difference is a Float).
fn float_is_exactly(x: f64, q: Q) -> bool {
    x == q.f()
}

fn sym_seed(s: &str) -> f64 {
    (s.bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
        % 97) as f64
        / 13.0
}

fn close(a: f64, b: f64) -> bool {
    if a == b {
        return true;
    }
    if !a.is_finite() || !b.is_finite() {
        return false;
    }
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// math-verify's `sympy_expr_eq` for the cases rollbox meets.
pub fn expr_eq(g: &Val, p: &Val) -> bool {
    let (mut g, mut p) = (g.clone(), p.clone());
    if let Some((l, r)) = g.assignment() {
        g = Val::Eq(Box::new(l), Box::new(r));
    }
    if let Some((l, r)) = p.assignment() {
        p = Val::Eq(Box::new(l), Box::new(r));
    }
    let eq_like = |v: &Val| matches!(v, Val::Eq(..) | Val::And(..));
    if eq_like(&p) && !eq_like(&g) {
        if let Some(r) = p.last_rhs() {
            p = r;
        }
    } else if g.assignment().is_some()
        && !eq_like(&p)
        && let Some(r) = g.last_rhs()
    {
        g = r;
    }
    if g == p {
        return true;
    }
    if g.is_relation() && p.is_relation() {
        return relations_equal(&g, &p);
    }
    if g.is_set_like() || p.is_set_like() {
        return sets_equal(&g, &p);
    }
    if let Val::Matrix(a) = &g {
        return match &p {
            Val::Matrix(b) => {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(x, y)| {
                        x.len() == y.len() && x.iter().zip(y).all(|(u, v)| expr_eq(u, v))
                    })
            }
            _ => false,
        };
    }
    if matches!(p, Val::Matrix(_)) || g.is_relation() || p.is_relation() {
        return false;
    }
    if matches!(g, Val::Sym(_)) || matches!(p, Val::Sym(_)) {
        return symbols_equal(&g, &p);
    }
    numbers_equal(&g, &p)
}

fn symbols_equal(g: &Val, p: &Val) -> bool {
    let word = |v: &Val| match v {
        Val::Sym(s) => Some(s.to_lowercase()),
        Val::Expr(n) => n.symbol_word().map(|w| w.to_lowercase()),
        _ => None,
    };
    if let (Some(a), Some(b)) = (word(g), word(p)) {
        return a == b;
    }
    // str(gold) == str(pred): an integer prints as its digits.
    let text = |v: &Val| match v {
        Val::Sym(s) => Some(s.clone()),
        Val::Num(q, false) if q.is_int() => Some(q.n.to_string()),
        _ => None,
    };
    matches!((text(g), text(p)), (Some(a), Some(b)) if a == b)
}

fn relations_equal(g: &Val, p: &Val) -> bool {
    let diff =
        |l: &Val, r: &Val| -> Option<Val> { Some(Val::Expr(Node::minus(l.node()?, r.node()?))) };
    match (g, p) {
        (Val::And(a), Val::And(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| relations_equal(x, y))
        }
        (Val::Eq(gl, gr), Val::Eq(pl, pr)) => {
            let (Some(gd), Some(pd), Some(pf)) = (diff(gl, gr), diff(pl, pr), diff(pr, pl)) else {
                return false;
            };
            numbers_equal(&gd, &pd) || numbers_equal(&gd, &pf)
        }
        (Val::Rel(gk, gl, gr), Val::Rel(pk, pl, pr)) => {
            let (Some(gd), Some(pd), Some(pf)) = (diff(gl, gr), diff(pl, pr), diff(pr, pl)) else {
                return false;
            };
            (gk == pk && numbers_equal(&gd, &pd)) || (gk.flip() == *pk && numbers_equal(&gd, &pf))
        }
        _ => false,
    }
}

fn sets_equal(g: &Val, p: &Val) -> bool {
    if let (Val::Union(a), Val::Union(b)) = (g, p) {
        let key = |v: &Val| match v {
            Val::Interval { lo, .. } => value_of(lo).unwrap_or(f64::MAX),
            other => value_of(other).unwrap_or(f64::MAX),
        };
        let sort = |v: &[Val]| {
            let mut v = v.to_vec();
            v.sort_by(|x, y| key(x).total_cmp(&key(y)));
            v
        };
        return a.len() == b.len() && sort(a).iter().zip(&sort(b)).all(|(x, y)| sets_equal(x, y));
    }
    if matches!(g, Val::Union(_)) || matches!(p, Val::Union(_)) {
        return false;
    }
    let wrap = |v: &Val| match v {
        Val::Set(_) | Val::Tuple(_) | Val::Interval { .. } => v.clone(),
        other => Val::Set(vec![other.clone()]),
    };
    let (g, p) = (wrap(g), wrap(p));
    let as_tuple = |v: &Val| match v {
        Val::Interval {
            lo,
            hi,
            lo_open: true,
            hi_open: true,
        } => Val::Tuple(vec![(**lo).clone(), (**hi).clone()]),
        other => other.clone(),
    };
    match (&g, &p) {
        (
            Val::Interval {
                lo: a,
                hi: b,
                lo_open: ao,
                hi_open: bo,
            },
            Val::Interval {
                lo: c,
                hi: d,
                lo_open: co,
                hi_open: d_o,
            },
        ) => ao == co && bo == d_o && expr_eq(a, c) && expr_eq(b, d),
        (Val::Interval { .. }, Val::Set(x) | Val::Tuple(x))
        | (Val::Set(x) | Val::Tuple(x), Val::Interval { .. }) => {
            let (g2, p2) = (as_tuple(&g), as_tuple(&p));
            if matches!(g2, Val::Interval { .. })
                || matches!(p2, Val::Interval { .. })
                || x.len() != 2
            {
                return false;
            }
            sets_equal(&g2, &p2)
        }
        (Val::Set(a), Val::Set(b) | Val::Tuple(b)) => {
            if a.len() != b.len() {
                return false;
            }
            let sort = |v: &[Val]| {
                let mut v = v.to_vec();
                v.sort_by(|x, y| {
                    value_of(x)
                        .unwrap_or(f64::MAX)
                        .total_cmp(&value_of(y).unwrap_or(f64::MAX))
                });
                v
            };
            let (a, b) = (sort(a), sort(b));
            a.iter().zip(&b).all(|(x, y)| expr_eq(x, y))
        }
        (Val::Tuple(a), Val::Set(b) | Val::Tuple(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| expr_eq(x, y))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_half_even_on_six_places() {
        assert_eq!(round6(2.0000005), Some(2_000_000));
        assert_eq!(round6(2.0000015), Some(2_000_002));
        assert_eq!(round6(1.0 / 3.0), Some(333_333));
        assert_eq!(round6(-0.1234567), Some(-123_457));
    }

    #[test]
    fn integers_and_floats() {
        let n = |s: &str| Val::number(s).expect("number");
        assert!(expr_eq(&n("18"), &n("18.00")));
        assert!(!expr_eq(&n("18"), &n("18.0000004")));
        assert!(expr_eq(&n("18.0"), &n("18.0000004")));
        assert!(expr_eq(&n("0.18"), &Val::Pct(Q::int(18), false)));
        assert!(!expr_eq(&n("18"), &Val::Pct(Q::int(18), false)));
    }
}
