//! The grammar of normalised LaTeX: relations, sums, products (with juxtaposition), powers,
//! fractions, roots, sets, tuples, intervals, unions and matrices.

use super::lex::Tok;
use super::{implicit, value};
use crate::mv::value::{Node, Q, Rel, Val, finite_set};

pub(super) struct P {
    pub(super) toks: Vec<Tok>,
    pub(super) i: usize,
}

type R<T> = Option<T>;

fn num_node(v: &Val) -> Option<Node> {
    v.node()
}

fn to_val(n: Node) -> Val {
    match n {
        Node::Num(q, f) => Val::Num(q, f),
        Node::Neg(inner) => match *inner {
            Node::Num(q, f) => Val::Num(Q { n: -q.n, d: q.d }, f),
            other => Val::Expr(Node::Neg(Box::new(other))),
        },
        Node::Pct(inner) => match *inner {
            Node::Num(q, f) => Val::Pct(q, f),
            other => Val::Expr(Node::Pct(Box::new(other))),
        },
        Node::Sym(s) => Val::Sym(s),
        other => Val::Expr(other),
    }
}

impl P {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i)
    }

    pub(super) fn eat_ch(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Ch(c)) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn eat_cmd(&mut self, name: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Cmd(n)) if n == name) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// relation := sum (relop sum)*
    pub(super) fn relation(&mut self) -> R<Val> {
        let first = self.sum_val()?;
        let mut parts = vec![first];
        let mut ops: Vec<Option<Rel>> = Vec::new();
        loop {
            let op = if self.eat_ch('=') {
                None
            } else if self.eat_ch('<') || self.eat_cmd("lt") {
                Some(Rel::Lt)
            } else if self.eat_ch('>') || self.eat_cmd("gt") {
                Some(Rel::Gt)
            } else if self.eat_cmd("le") || self.eat_cmd("leq") {
                Some(Rel::Le)
            } else if self.eat_cmd("ge") || self.eat_cmd("geq") {
                Some(Rel::Ge)
            } else if self.eat_cmd("neq") || self.eat_cmd("ne") {
                Some(Rel::Ne)
            } else if self.eat_cmd("in") {
                None
            } else if self.eat_cmd("approx") {
                // `a \approx b`: the right side when the left is symbols only, else the left.
                let rhs = self.sum_val()?;
                let last = parts.pop()?;
                let only = last.node().is_some_and(|n| n.only_symbols());
                parts.push(if only { rhs } else { last });
                continue;
            } else {
                break;
            };
            ops.push(op);
            parts.push(self.sum_val()?);
        }
        if ops.is_empty() {
            return parts.pop();
        }
        let mut rels = Vec::new();
        for (k, op) in ops.iter().enumerate() {
            let (l, r) = (Box::new(parts[k].clone()), Box::new(parts[k + 1].clone()));
            rels.push(match op {
                None => Val::Eq(l, r),
                Some(rel) => Val::Rel(*rel, l, r),
            });
        }
        if rels.len() == 1 {
            rels.pop()
        } else {
            Some(Val::And(rels))
        }
    }

    fn sum_val(&mut self) -> R<Val> {
        let save = self.i;
        // sets, tuples, intervals, unions and matrices are values of their own
        if let Some(v) = self.structured() {
            let mut parts = vec![v];
            while self.eat_cmd("cup") {
                parts.push(self.structured()?);
            }
            if self.at_end_of_operand() {
                return Some(if parts.len() == 1 {
                    parts.pop()?
                } else {
                    Val::Union(parts)
                });
            }
        }
        self.i = save;
        Some(to_val(self.sum()?))
    }

    fn at_end_of_operand(&self) -> bool {
        match self.peek() {
            None | Some(Tok::Ch('=' | '<' | '>' | ',' | ';' | ')' | ']')) => true,
            Some(Tok::Cmd(c)) => matches!(
                c.as_str(),
                "le" | "leq" | "ge" | "geq" | "lt" | "gt" | "neq" | "ne" | "in" | "approx" | "}"
            ),
            _ => false,
        }
    }

    fn structured(&mut self) -> R<Val> {
        match self.peek()? {
            Tok::Ch('(') if matches!(self.toks.get(self.i + 1), Some(Tok::Cmd(c)) if c == "begin") =>
            {
                self.i += 1;
                let m = self.matrix()?;
                if !self.eat_ch(')') {
                    return None;
                }
                Some(m)
            }
            Tok::Ch('(') | Tok::Ch('[') => {
                let open = match self.peek()? {
                    Tok::Ch(c) => *c,
                    _ => return None,
                };
                self.i += 1;
                let items = self.items(&[')', ']'])?;
                let close = match self.peek()? {
                    Tok::Ch(c) => *c,
                    _ => return None,
                };
                self.i += 1;
                if items.len() == 1 {
                    return None;
                }
                if items.len() == 2 {
                    let (a, b) = (value(&items[0]), value(&items[1]));
                    if let (Some(x), Some(y)) = (a, b)
                        && (x < y || (x == y && open == '[' && close == ']'))
                    {
                        return Some(Val::Interval {
                            lo: Box::new(items[0].clone()),
                            hi: Box::new(items[1].clone()),
                            lo_open: open == '(',
                            hi_open: close == ')',
                        });
                    }
                }
                Some(Val::Tuple(items))
            }
            Tok::Cmd(c) if c == "{" => {
                self.i += 1;
                let items = self.items(&[])?;
                if !self.eat_cmd("}") {
                    return None;
                }
                Some(finite_set(items))
            }
            Tok::Cmd(c) if c == "begin" => self.matrix(),
            _ => None,
        }
    }

    /// Comma-separated relations up to a closer (not consumed).
    fn items(&mut self, closers: &[char]) -> R<Vec<Val>> {
        let mut items = vec![self.relation()?];
        while self.eat_ch(',') || self.eat_ch(';') {
            items.push(self.relation()?);
        }
        match self.peek() {
            Some(Tok::Ch(c)) if closers.contains(c) => Some(items),
            Some(Tok::Cmd(c)) if closers.is_empty() && c == "}" => Some(items),
            _ => None,
        }
    }

    fn matrix(&mut self) -> R<Val> {
        self.i += 1;
        if !self.eat_ch('{') {
            return None;
        }
        let array = self.peek() == Some(&Tok::Sym('a'));
        while matches!(self.peek(), Some(Tok::Sym(_))) {
            self.i += 1;
        }
        if !self.eat_ch('}') {
            return None;
        }
        // `array` has a column spec: `{cc}`, `{c|c}`.
        if array && self.eat_ch('{') {
            while !self.eat_ch('}') {
                self.peek()?;
                self.i += 1;
            }
        }
        let mut rows = vec![vec![]];
        loop {
            if self.eat_cmd("end") {
                self.eat_ch('{');
                while matches!(self.peek(), Some(Tok::Sym(_))) {
                    self.i += 1;
                }
                self.eat_ch('}');
                break;
            }
            if self.eat_cmd("\\") {
                rows.push(vec![]);
                continue;
            }
            if self.eat_ch('&') {
                continue;
            }
            let v = to_val(self.sum()?);
            rows.last_mut()?.push(v);
        }
        rows.retain(|r| !r.is_empty());
        Some(Val::Matrix(rows))
    }

    fn sum(&mut self) -> R<Node> {
        let mut acc = self.term()?;
        loop {
            if self.eat_ch('+') {
                acc = Node::Add(Box::new(acc), Box::new(self.term()?));
            } else if self.eat_ch('-') {
                acc = Node::minus(acc, self.term()?);
            } else if self.eat_cmd("pm") {
                self.term()?;
            } else {
                return Some(acc);
            }
        }
    }

    fn starts_operand(&self) -> bool {
        match self.peek() {
            Some(Tok::Num(_) | Tok::Sym(_) | Tok::Text(_)) => true,
            Some(Tok::Ch('(' | '{')) => true,
            Some(Tok::Cmd(c)) => matches!(
                c.as_str(),
                "frac" | "sqrt" | "pi" | "infty" | "{" | "sin" | "cos" | "tan" | "log" | "ln"
            ),
            _ => false,
        }
    }

    fn term(&mut self) -> R<Node> {
        let mut acc = self.unary()?;
        loop {
            if self.eat_ch('*') || self.eat_cmd("times") || self.eat_cmd("cdot") {
                acc = Node::Mul(Box::new(acc), Box::new(self.unary()?));
            } else if self.eat_ch('/') || self.eat_cmd("div") {
                acc = Node::Div(Box::new(acc), Box::new(self.unary()?));
            } else if self.starts_operand() {
                let rhs = self.power()?;
                acc = implicit(acc, rhs);
            } else {
                return Some(acc);
            }
        }
    }

    fn unary(&mut self) -> R<Node> {
        if self.eat_ch('-') {
            return Some(Node::Neg(Box::new(self.unary()?)));
        }
        if self.eat_ch('+') {
            return self.unary();
        }
        self.power()
    }

    fn power(&mut self) -> R<Node> {
        let mut base = self.postfix()?;
        while self.eat_ch('^') {
            if self.eat_cmd("circ") {
                continue;
            }
            let e = if self.eat_ch('{') {
                if self.eat_cmd("circ") {
                    if !self.eat_ch('}') {
                        return None;
                    }
                    continue;
                }
                let e = self.sum()?;
                if !self.eat_ch('}') {
                    return None;
                }
                e
            } else {
                self.atom()?
            };
            base = Node::Pow(Box::new(base), Box::new(e));
            base = self.postfix_ops(base);
        }
        Some(base)
    }

    fn postfix_ops(&mut self, mut n: Node) -> Node {
        loop {
            if self.eat_ch('!') {
                n = Node::Fact(Box::new(n));
            } else if self.eat_cmd("%") || self.eat_ch('%') {
                n = Node::Pct(Box::new(n));
            } else {
                return n;
            }
        }
    }

    fn postfix(&mut self) -> R<Node> {
        let a = self.atom()?;
        Some(self.postfix_ops(a))
    }

    fn group(&mut self) -> R<Node> {
        if !self.eat_ch('{') {
            return None;
        }
        let n = self.sum()?;
        if !self.eat_ch('}') {
            return None;
        }
        Some(n)
    }

    fn atom(&mut self) -> R<Node> {
        let tok = self.peek()?.clone();
        self.i += 1;
        Some(match tok {
            Tok::Num(s) => num_node(&Val::number(&s)?)?,
            Tok::Sym(c) => {
                let c = c.to_lowercase().next().unwrap_or(c);
                if c == 'e' {
                    Node::E
                } else {
                    Node::Sym(c.to_string())
                }
            }
            Tok::Text(s) => {
                let name: String = s
                    .chars()
                    .filter(|c| !c.is_whitespace() && *c != '(' && *c != ')')
                    .collect::<String>()
                    .to_lowercase();
                Node::Sym(name)
            }
            Tok::Ch('(') => {
                let n = self.sum()?;
                if !self.eat_ch(')') {
                    return None;
                }
                n
            }
            Tok::Ch('{') => {
                let n = self.sum()?;
                if !self.eat_ch('}') {
                    return None;
                }
                n
            }
            Tok::Ch('|') => {
                let n = self.sum()?;
                if !self.eat_ch('|') {
                    return None;
                }
                n
            }
            Tok::Cmd(c) => match c.as_str() {
                "frac" => {
                    let a = self.group()?;
                    let b = self.group()?;
                    match (&a, &b) {
                        (Node::Num(x, false), Node::Num(y, false)) if x.is_int() && y.is_int() => {
                            Node::Num(Q::new(x.n, y.n)?, false)
                        }
                        _ => Node::Div(Box::new(a), Box::new(b)),
                    }
                }
                "sqrt" => {
                    let mut index = None;
                    if self.eat_ch('[') {
                        let n = self.sum()?;
                        if !self.eat_ch(']') {
                            return None;
                        }
                        index = Some(n);
                    }
                    let x = self.group()?;
                    let e = match index {
                        Some(n) => Node::Div(Box::new(Node::int(1)), Box::new(n)),
                        None => Node::Num(Q { n: 1, d: 2 }, false),
                    };
                    Node::Pow(Box::new(x), Box::new(e))
                }
                "pi" => Node::Pi,
                "infty" => Node::Inf,
                _ => return None,
            },
            _ => return None,
        })
    }
}
