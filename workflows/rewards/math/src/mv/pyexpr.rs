//! sympy's `parse_expr(s, evaluate=False)` for the arithmetic expressions the plain-text side
//! extracts: Python syntax (`+ - * / ** ( )`, int and float literals); anything else (`×`,
//! `÷`, juxtaposition) does not parse.

use super::value::{Node, Val};

struct P<'a> {
    t: &'a [char],
    i: usize,
}

impl P<'_> {
    fn skip(&mut self) {
        while self.t.get(self.i).is_some_and(|c| c.is_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip();
        let n = s.chars().count();
        if self.t.len() >= self.i + n && self.t[self.i..self.i + n].iter().copied().eq(s.chars()) {
            self.i += n;
            true
        } else {
            false
        }
    }

    fn expr(&mut self) -> Option<Node> {
        let mut a = self.term()?;
        loop {
            if self.eat("+") {
                a = Node::Add(Box::new(a), Box::new(self.term()?));
            } else if self.eat("-") {
                a = Node::minus(a, self.term()?);
            } else {
                return Some(a);
            }
        }
    }

    fn term(&mut self) -> Option<Node> {
        let mut a = self.factor()?;
        loop {
            self.skip();
            if self.t.get(self.i) == Some(&'*') && self.t.get(self.i + 1) != Some(&'*') {
                self.i += 1;
                a = Node::Mul(Box::new(a), Box::new(self.factor()?));
            } else if self.t.get(self.i) == Some(&'/') && self.t.get(self.i + 1) != Some(&'/') {
                self.i += 1;
                a = Node::Div(Box::new(a), Box::new(self.factor()?));
            } else {
                return Some(a);
            }
        }
    }

    fn factor(&mut self) -> Option<Node> {
        if self.eat("-") {
            return match self.factor()? {
                Node::Num(q, f) => Some(Node::Num(super::value::Q { n: -q.n, d: q.d }, f)),
                n => Some(Node::Neg(Box::new(n))),
            };
        }
        if self.eat("+") {
            return self.factor();
        }
        let base = self.atom()?;
        if self.eat("**") {
            return Some(Node::Pow(Box::new(base), Box::new(self.factor()?)));
        }
        Some(base)
    }

    fn atom(&mut self) -> Option<Node> {
        self.skip();
        if self.eat("(") {
            let n = self.expr()?;
            if !self.eat(")") {
                return None;
            }
            return Some(n);
        }
        let start = self.i;
        while self
            .t
            .get(self.i)
            .is_some_and(|c| c.is_ascii_digit() || *c == '.')
        {
            self.i += 1;
        }
        let s: String = self.t[start..self.i].iter().collect();
        if s.is_empty() || s.matches('.').count() > 1 || s == "." {
            return None;
        }
        let s = if s.ends_with('.') { format!("{s}0") } else { s };
        let s = if s.starts_with('.') {
            format!("0{s}")
        } else {
            s
        };
        Val::number(&s)?.node()
    }
}

/// The value of a Python arithmetic expression, unevaluated as sympy keeps it.
pub(crate) fn parse_expr(s: &str) -> Option<Val> {
    // Bounded like the LaTeX parser: the expression is guest text, and the parser recurses per
    // parenthesis and per unary sign and builds one node per operator.
    if s.len() > super::latex::MAX_LATEX_TOKENS {
        return None;
    }
    let (mut depth, mut signs) = (0usize, 0usize);
    for c in s.chars().filter(|c| !c.is_whitespace()) {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        signs = if matches!(c, '-' | '+') { signs + 1 } else { 0 };
        if depth > super::latex::MAX_NESTING || signs > super::latex::MAX_NESTING {
            return None;
        }
    }
    let text: String = s.replace('\n', " ").replace('^', "**");
    let t: Vec<char> = crate::mv::chars(&text);
    let mut p = P { t: &t, i: 0 };
    let n = p.expr()?;
    p.skip();
    if p.i != t.len() {
        return None;
    }
    Some(match n {
        Node::Num(q, f) => Val::Num(q, f),
        other => Val::Expr(other),
    })
}
