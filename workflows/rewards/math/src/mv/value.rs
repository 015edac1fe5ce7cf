//! Values as math-verify's sympy objects behave for comparison: exact integers and rationals,
//! decimal literals (floats), unevaluated percentages, compound expressions (with symbols and
//! constants), symbols, sets, tuples, intervals, equations and matrices.

/// An exact rational `n / d` (`d > 0`, reduced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Q {
    pub n: i128,
    pub d: i128,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Q {
    pub fn int(n: i128) -> Q {
        Q { n, d: 1 }
    }

    pub fn new(n: i128, d: i128) -> Option<Q> {
        if d == 0 {
            return None;
        }
        let g = gcd(n, d).max(1);
        let s = if d < 0 { -1 } else { 1 };
        Some(Q {
            n: s * n / g,
            d: s * d / g,
        })
    }

    pub fn is_int(self) -> bool {
        self.d == 1
    }

    pub fn f(self) -> f64 {
        self.n as f64 / self.d as f64
    }

    fn add(self, o: Q) -> Option<Q> {
        Q::new(
            self.n
                .checked_mul(o.d)?
                .checked_add(o.n.checked_mul(self.d)?)?,
            self.d.checked_mul(o.d)?,
        )
    }

    fn mul(self, o: Q) -> Option<Q> {
        Q::new(self.n.checked_mul(o.n)?, self.d.checked_mul(o.d)?)
    }

    fn recip(self) -> Option<Q> {
        Q::new(self.d, self.n)
    }

    fn pow(self, e: i128) -> Option<Q> {
        if !(-64..=64).contains(&e) {
            return None;
        }
        let mut r = Q::int(1);
        for _ in 0..e.abs() {
            r = r.mul(self)?;
        }
        if e < 0 { r.recip() } else { Some(r) }
    }

    /// The exact square root when `self` is the square of a rational.
    fn sqrt(self) -> Option<Q> {
        fn isqrt(x: i128) -> Option<i128> {
            if x < 0 {
                return None;
            }
            let r = (x as f64).sqrt().round() as i128;
            (r.checked_mul(r)? == x).then_some(r)
        }
        Q::new(isqrt(self.n)?, isqrt(self.d)?)
    }
}

/// A number as evaluated: exact, or approximate (a float was involved, or the value is
/// irrational).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum N {
    Exact(Q),
    Approx(f64),
}

impl N {
    pub fn f(self) -> f64 {
        match self {
            N::Exact(q) => q.f(),
            N::Approx(x) => x,
        }
    }

    fn lift(a: N, b: N, exact: impl Fn(Q, Q) -> Option<Q>, approx: impl Fn(f64, f64) -> f64) -> N {
        if let (N::Exact(x), N::Exact(y)) = (a, b)
            && let Some(q) = exact(x, y)
        {
            return N::Exact(q);
        }
        N::Approx(approx(a.f(), b.f()))
    }

    pub fn plus(a: N, b: N) -> N {
        N::lift(a, b, Q::add, |x, y| x + y)
    }

    pub fn times(a: N, b: N) -> N {
        N::lift(a, b, Q::mul, |x, y| x * y)
    }

    /// `a * b^-1`, as sympy computes a quotient: with floats, the reciprocal is rounded first.
    pub fn over(a: N, b: N) -> N {
        N::lift(a, b, |x, y| x.mul(y.recip()?), |x, y| x * (1.0 / y))
    }

    pub fn negated(a: N) -> N {
        N::times(N::Exact(Q::int(-1)), a)
    }

    pub fn pow(a: N, b: N) -> N {
        if let (N::Exact(x), N::Exact(y)) = (a, b) {
            if y.is_int()
                && let Some(q) = x.pow(y.n)
            {
                return N::Exact(q);
            }
            if y == (Q { n: 1, d: 2 })
                && let Some(q) = x.sqrt()
            {
                return N::Exact(q);
            }
        }
        N::Approx(a.f().powf(b.f()))
    }
}

/// A compound expression (sympy's Add, Mul, Pow, functions) over numbers, symbols and
/// constants.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// A literal: exact, or a decimal literal (`float`).
    Num(Q, bool),
    Float(f64),
    Sym(String),
    Pi,
    E,
    Inf,
    Add(Box<Node>, Box<Node>),
    Mul(Box<Node>, Box<Node>),
    Div(Box<Node>, Box<Node>),
    Pow(Box<Node>, Box<Node>),
    Neg(Box<Node>),
    Fact(Box<Node>),
    Pct(Box<Node>),
}

impl Node {
    pub fn int(n: i128) -> Node {
        Node::Num(Q::int(n), false)
    }

    pub fn minus(a: Node, b: Node) -> Node {
        Node::Add(Box::new(a), Box::new(Node::Neg(Box::new(b))))
    }

    /// The value with each symbol set by `env` (`None`: not a finite number).
    pub fn eval(&self, env: &dyn Fn(&str) -> f64) -> Option<N> {
        Some(match self {
            // A decimal literal is a float: arithmetic on it is approximate, as sympy's is.
            Node::Num(q, true) => N::Approx(q.f()),
            Node::Num(q, false) => N::Exact(*q),
            Node::Float(x) => N::Approx(*x),
            Node::Sym(s) => N::Approx(env(s)),
            Node::Pi => N::Approx(std::f64::consts::PI),
            Node::E => N::Approx(std::f64::consts::E),
            Node::Inf => N::Approx(f64::INFINITY),
            Node::Add(a, b) => N::plus(a.eval(env)?, b.eval(env)?),
            Node::Mul(a, b) => N::times(a.eval(env)?, b.eval(env)?),
            Node::Div(a, b) => N::over(a.eval(env)?, b.eval(env)?),
            Node::Pow(a, b) => N::pow(a.eval(env)?, b.eval(env)?),
            Node::Neg(a) => N::negated(a.eval(env)?),
            Node::Pct(a) => N::over(a.eval(env)?, N::Exact(Q::int(100))),
            Node::Fact(a) => match a.eval(env)? {
                N::Exact(q) if q.is_int() && (0..=30).contains(&q.n) => {
                    N::Exact(Q::int((1..=q.n).product::<i128>().max(1)))
                }
                _ => return None,
            },
        })
    }

    /// Whether the expression holds a float literal.
    pub fn has_float(&self) -> bool {
        match self {
            Node::Float(_) => true,
            Node::Num(_, f) => *f,
            Node::Add(a, b) | Node::Mul(a, b) | Node::Div(a, b) | Node::Pow(a, b) => {
                a.has_float() || b.has_float()
            }
            Node::Neg(a) | Node::Fact(a) | Node::Pct(a) => a.has_float(),
            _ => false,
        }
    }

    pub fn has_symbols(&self) -> bool {
        match self {
            Node::Sym(_) => true,
            Node::Add(a, b) | Node::Mul(a, b) | Node::Div(a, b) | Node::Pow(a, b) => {
                a.has_symbols() || b.has_symbols()
            }
            Node::Neg(a) | Node::Fact(a) | Node::Pct(a) => a.has_symbols(),
            _ => false,
        }
    }

    /// Symbols only, combined by products and quotients (`x`, `xy`, `x/y`).
    pub fn only_symbols(&self) -> bool {
        match self {
            Node::Sym(_) => true,
            Node::Mul(a, b) | Node::Div(a, b) => a.only_symbols() && b.only_symbols(),
            _ => false,
        }
    }

    /// The names of a product of symbols, concatenated (`E` counts as `e`).
    pub fn symbol_word(&self) -> Option<String> {
        match self {
            Node::Sym(s) => Some(s.clone()),
            Node::E => Some("e".into()),
            Node::Mul(a, b) => Some(a.symbol_word()? + &b.symbol_word()?),
            _ => None,
        }
    }
}

/// A parsed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// An atomic number: an integer or rational, or a decimal literal (`float`).
    Num(Q, bool),
    /// An unevaluated percentage of an atomic number (`n * 1/100`).
    Pct(Q, bool),
    /// Anything else arithmetic.
    Expr(Node),
    Sym(String),
    Set(Vec<Val>),
    Tuple(Vec<Val>),
    Interval {
        lo: Box<Val>,
        hi: Box<Val>,
        lo_open: bool,
        hi_open: bool,
    },
    Eq(Box<Val>, Box<Val>),
    And(Vec<Val>),
    Rel(Rel, Box<Val>, Box<Val>),
    Matrix(Vec<Vec<Val>>),
    /// A union of intervals and sets.
    Union(Vec<Val>),
}

/// Inequalities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rel {
    Lt,
    Le,
    Gt,
    Ge,
    Ne,
}

impl Rel {
    pub(crate) fn flip(self) -> Rel {
        match self {
            Rel::Lt => Rel::Gt,
            Rel::Le => Rel::Ge,
            Rel::Gt => Rel::Lt,
            Rel::Ge => Rel::Le,
            Rel::Ne => Rel::Ne,
        }
    }
}

impl Val {
    /// A number literal: an integer, or a float when it has a decimal part.
    pub fn number(text: &str) -> Option<Val> {
        let t = text.trim();
        if let Some((i, f)) = t.split_once('.') {
            let neg = i.starts_with('-');
            let i = i.trim_start_matches('-');
            if !i.chars().all(|c| c.is_ascii_digit()) || !f.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let digits = format!("{i}{f}");
            let n: i128 = if digits.is_empty() {
                return None;
            } else {
                // Too many digits for an i128: no value (never a wrong one).
                match digits.trim_start_matches('0') {
                    "" => 0,
                    d => d.parse().ok()?,
                }
            };
            let d = 10i128.checked_pow(u32::try_from(f.len()).ok()?)?;
            let q = Q::new(if neg { -n } else { n }, d)?;
            return Some(Val::Num(q, true));
        }
        Some(Val::Num(Q::int(t.parse().ok()?), false))
    }

    /// As an expression tree, when arithmetic.
    pub fn node(&self) -> Option<Node> {
        Some(match self {
            Val::Num(q, f) => Node::Num(*q, *f),
            Val::Pct(q, f) => Node::Pct(Box::new(Node::Num(*q, *f))),
            Val::Expr(n) => n.clone(),
            Val::Sym(s) => Node::Sym(s.clone()),
            _ => return None,
        })
    }

    pub(crate) fn is_atomic(&self) -> bool {
        matches!(self, Val::Num(..) | Val::Pct(..))
    }

    /// An atomic float (a decimal literal, or a percentage of one).
    pub(crate) fn is_float(&self) -> bool {
        matches!(self, Val::Num(_, true) | Val::Pct(_, true))
    }

    pub(crate) fn has_float(&self) -> bool {
        self.node().is_some_and(|n| n.has_float())
    }

    pub(crate) fn is_relation(&self) -> bool {
        matches!(self, Val::Eq(..) | Val::And(..) | Val::Rel(..))
    }

    pub(crate) fn is_set_like(&self) -> bool {
        matches!(
            self,
            Val::Set(_) | Val::Tuple(_) | Val::Interval { .. } | Val::Union(_)
        )
    }

    /// `x = ...` whose left side is symbols only (an assignment), as `(lhs, last rhs)`.
    pub(crate) fn assignment(&self) -> Option<(Val, Val)> {
        match self {
            Val::Eq(l, r) if l.node().is_some_and(|n| n.only_symbols()) => {
                Some(((**l).clone(), (**r).clone()))
            }
            Val::And(eqs) => {
                let Some(Val::Eq(l, _)) = eqs.first() else {
                    return None;
                };
                let Some(Val::Eq(_, r)) = eqs.last() else {
                    return None;
                };
                l.node()
                    .is_some_and(|n| n.only_symbols())
                    .then(|| ((**l).clone(), (**r).clone()))
            }
            _ => None,
        }
    }

    /// The right side of the last relation of an equation.
    pub(crate) fn last_rhs(&self) -> Option<Val> {
        match self {
            Val::Eq(_, r) => Some((**r).clone()),
            Val::And(eqs) => eqs.last()?.last_rhs(),
            _ => None,
        }
    }
}

/// The value of an arithmetic `Val` with no symbols (of an equation: its right side), for
/// ordering set elements.
pub(crate) fn value_of(v: &Val) -> Option<f64> {
    if let Val::Eq(_, r) = v {
        return value_of(r);
    }
    Some(v.node()?.eval(&|_| f64::NAN)?.f())
}

/// A FiniteSet of `items`: deduplicated, sorted by value (sympy's canonical order for numbers).
pub fn finite_set(items: Vec<Val>) -> Val {
    let mut out: Vec<Val> = Vec::new();
    for v in items {
        let v = match v {
            Val::Set(inner) => {
                for x in inner {
                    if !out.iter().any(|o| same(o, &x)) {
                        out.push(x);
                    }
                }
                continue;
            }
            v => v,
        };
        if !out.iter().any(|o| same(o, &v)) {
            out.push(v);
        }
    }
    Val::Set(out)
}

fn same(a: &Val, b: &Val) -> bool {
    match (value_of(a), value_of(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}
