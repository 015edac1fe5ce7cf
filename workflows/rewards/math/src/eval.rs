//! Normalising an answer string and evaluating it as arithmetic.

/// Remove presentation: `$`, `\left`/`\right`, spacing commands, `\text{..}` wrappers, units
/// after a number, `x =` prefixes, thousands separators and trailing punctuation.
pub fn normalize(answer: &str) -> String {
    let mut s = answer.trim().to_string();
    // Every pattern starts with `\`, `^` or `$`: plain answers skip the scans.
    if s.contains(['\\', '^', '$']) {
        for (from, to) in PRESENTATION {
            s = s.replace(from, to);
        }
    }
    if s.contains('\\') {
        s = unwrap_text(&s);
    }
    if let Some((lhs, rhs)) = s.rsplit_once('=')
        && lhs
            .trim()
            .chars()
            .all(|c| c.is_ascii_alphabetic() || c == ' ')
    {
        s = rhs.to_string();
    }
    let s = s.trim().trim_end_matches(['.', ',', ';']).trim();
    let s = strip_thousands(s);
    strip_units(&s).replace(' ', "")
}

/// Presentation markup removed or rewritten by [`normalize`], in order.
const PRESENTATION: [(&str, &str); 15] = [
    ("\\left", ""),
    ("\\right", ""),
    ("\\!", ""),
    ("\\,", ""),
    ("\\;", ""),
    ("\\ ", ""),
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("\\cdot", "*"),
    ("\\times", "*"),
    ("\\div", "/"),
    ("\\%", "%"),
    ("^\\circ", ""),
    ("^{\\circ}", ""),
    ("$", ""),
];

/// `\text{15 apples}` → `15 apples`; `\mbox`, `\textbf`, `\mathrm` likewise.
fn unwrap_text(s: &str) -> String {
    let mut out = s.to_string();
    for cmd in ["\\text{", "\\textbf{", "\\mbox{", "\\mathrm{"] {
        while let Some(i) = out.find(cmd) {
            let start = i + cmd.len();
            let Some(len) = out[start..].find('}') else {
                break;
            };
            let inner = out[start..start + len].to_string();
            out.replace_range(i..start + len + 1, &format!(" {inner} "));
        }
    }
    out
}

/// `1,234,567.5` → `1234567.5` (only well-formed groups of three).
fn strip_thousands(s: &str) -> String {
    let bytes: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in bytes.iter().enumerate() {
        if c == ','
            && i > 0
            && bytes[i - 1].is_ascii_digit()
            && bytes.len() >= i + 4
            && bytes[i + 1..i + 4].iter().all(|d| d.is_ascii_digit())
            && bytes.get(i + 4).is_none_or(|d| !d.is_ascii_digit())
        {
            continue;
        }
        out.push(c);
    }
    out
}

/// `15 cm` → `15`, `72 dollars` → `72`: a number followed by words keeps the number.
/// Letters right after a backslash belong to a command (`\frac`) and are kept.
fn strip_units(s: &str) -> String {
    let t = s.trim();
    let mut end = t.len();
    let mut in_command = false;
    for (i, c) in t.char_indices() {
        if c == '\\' {
            in_command = true;
        } else if c.is_ascii_alphabetic() {
            if !in_command {
                end = i;
                break;
            }
        } else {
            in_command = false;
        }
    }
    let (num, rest) = t.split_at(end);
    if end < t.len()
        && num.chars().any(|c| c.is_ascii_digit())
        && rest
            .chars()
            .all(|c| c.is_alphabetic() || c == ' ' || c == '.')
    {
        return num.trim().to_string();
    }
    t.to_string()
}

/// Evaluate a normalised answer: numbers, `+ - * / ^`, parentheses, `\frac{a}{b}`,
/// `\sqrt{x}`, a trailing `%` (ignored here; the caller compares both readings). `None` when
/// it is not arithmetic or not finite.
pub fn evaluate(s: &str) -> Option<f64> {
    let s = s.strip_suffix('%').unwrap_or(s);
    let tokens = tokenize(s)?;
    let mut p = Parser { t: &tokens, i: 0 };
    let v = p.expr()?;
    (p.i == tokens.len() && v.is_finite()).then_some(v)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Op(char),
    Frac,
    Sqrt,
}

/// Bounds recursion on hostile input (deeply nested parentheses).
const MAX_DEPTH: usize = 64;

fn tokenize(s: &str) -> Option<Vec<Tok>> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_ascii_digit() || (ch == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let start = i;
            while i < c.len() && (c[i].is_ascii_digit() || c[i] == '.') {
                i += 1;
            }
            out.push(Tok::Num(
                c[start..i].iter().collect::<String>().parse().ok()?,
            ));
            continue;
        }
        if ch == '\\' {
            let rest: String = c[i..].iter().take(6).collect();
            if rest.starts_with("\\frac") {
                out.push(Tok::Frac);
                i += 5;
                continue;
            }
            if rest.starts_with("\\sqrt") {
                out.push(Tok::Sqrt);
                i += 5;
                continue;
            }
            return None;
        }
        match ch {
            '+' | '-' | '*' | '/' | '^' => out.push(Tok::Op(ch)),
            '(' | '{' | '[' => out.push(Tok::Op('(')),
            ')' | '}' | ']' => out.push(Tok::Op(')')),
            ' ' => {}
            _ => return None,
        }
        i += 1;
    }
    Some(out)
}

struct Parser<'a> {
    t: &'a [Tok],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }

    fn eat(&mut self, op: char) -> bool {
        if self.peek() == Some(&Tok::Op(op)) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expr(&mut self) -> Option<f64> {
        self.expr_at(0)
    }

    fn expr_at(&mut self, depth: usize) -> Option<f64> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut v = self.term(depth)?;
        loop {
            if self.eat('+') {
                v += self.term(depth)?;
            } else if self.eat('-') {
                v -= self.term(depth)?;
            } else {
                return Some(v);
            }
        }
    }

    fn term(&mut self, depth: usize) -> Option<f64> {
        let mut v = self.unary(depth)?;
        loop {
            if self.eat('*') {
                v *= self.unary(depth)?;
            } else if self.eat('/') {
                let d = self.unary(depth)?;
                if d == 0.0 {
                    return None;
                }
                v /= d;
            } else if matches!(self.peek(), Some(Tok::Num(_) | Tok::Frac | Tok::Sqrt))
                || self.peek() == Some(&Tok::Op('('))
            {
                // Implicit multiplication: `2\sqrt{2}`, `3(4)`.
                v *= self.unary(depth)?;
            } else {
                return Some(v);
            }
        }
    }

    fn unary(&mut self, depth: usize) -> Option<f64> {
        if self.eat('-') {
            return Some(-self.unary(depth)?);
        }
        if self.eat('+') {
            return self.unary(depth);
        }
        let base = self.atom(depth)?;
        if self.eat('^') {
            let e = self.unary(depth + 1)?;
            return Some(base.powf(e));
        }
        Some(base)
    }

    fn atom(&mut self, depth: usize) -> Option<f64> {
        match self.peek()?.clone() {
            Tok::Num(n) => {
                self.i += 1;
                Some(n)
            }
            Tok::Frac => {
                self.i += 1;
                let a = self.group(depth)?;
                let b = self.group(depth)?;
                if b == 0.0 { None } else { Some(a / b) }
            }
            Tok::Sqrt => {
                self.i += 1;
                let x = self.group(depth)?;
                (x >= 0.0).then(|| x.sqrt())
            }
            Tok::Op('(') => self.group(depth),
            Tok::Op(_) => None,
        }
    }

    fn group(&mut self, depth: usize) -> Option<f64> {
        if !self.eat('(') {
            // `\frac12`: single-digit arguments without braces.
            return match self.peek()?.clone() {
                Tok::Num(n) => {
                    self.i += 1;
                    Some(n)
                }
                _ => None,
            };
        }
        let v = self.expr_at(depth + 1)?;
        self.eat(')').then_some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_arithmetic_and_latex() {
        assert_eq!(evaluate("1/2"), Some(0.5));
        assert_eq!(evaluate("\\frac{5}{6}"), Some(5.0 / 6.0));
        assert_eq!(evaluate("2^3"), Some(8.0));
        assert_eq!(evaluate("-(3+4)*2"), Some(-14.0));
        assert_eq!(evaluate("2\\sqrt{4}"), Some(4.0));
        assert_eq!(evaluate("1/0"), None);
        assert_eq!(evaluate("abc"), None);
        assert_eq!(evaluate(&"(".repeat(1000)), None);
    }

    #[test]
    fn normalizes_presentation() {
        assert_eq!(normalize("$1,234$"), "1234");
        assert_eq!(normalize("x = 3"), "3");
        assert_eq!(
            normalize("\\left( \\dfrac{1}{2} \\right)"),
            "(\\frac{1}{2})"
        );
        assert_eq!(normalize("15 cm."), "15");
        assert_eq!(normalize("\\text{B}"), "B");
    }
}
