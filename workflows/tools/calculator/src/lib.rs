//! `calculator`: a tool component that evaluates arithmetic expressions without `eval`:
//! a precedence-climbing parser over `+ - * / % ^`, unary minus and parentheses.

/// Longest expression accepted, bytes. Guards the parser against huge inputs.
pub const MAX_EXPRESSION_BYTES: usize = 4096;

/// Deepest nesting accepted. Guards the recursion.
pub const MAX_NESTING: usize = 64;

/// Evaluate `expr`, or say what is wrong with it.
pub fn calculate(expr: &str) -> Result<f64, String> {
    if expr.len() > MAX_EXPRESSION_BYTES {
        return Err(format!(
            "expression longer than {MAX_EXPRESSION_BYTES} bytes"
        ));
    }
    let tokens = lex(expr)?;
    let mut pos = 0;
    let v = climb(&tokens, &mut pos, 0, 0)?;
    if pos != tokens.len() {
        return Err(format!("unexpected `{}`", tokens[pos]));
    }
    if !v.is_finite() {
        return Err("the result is not a finite number".into());
    }
    Ok(v)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Number(f64),
    Symbol(char),
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Token::Number(n) => write!(f, "{n}"),
            Token::Symbol(c) => write!(f, "{c}"),
        }
    }
}

fn lex(expr: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = expr.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c.is_ascii_digit() || c == '.' {
            let mut end = i;
            while let Some(&(j, d)) = chars.peek() {
                if d.is_ascii_digit() || d == '.' || d == '_' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let text = expr[i..end].replace('_', "");
            let n = text
                .parse()
                .map_err(|_| format!("`{text}` is not a number"))?;
            out.push(Token::Number(n));
        } else if "+-*/%^()".contains(c) {
            out.push(Token::Symbol(c));
            chars.next();
        } else {
            return Err(format!("unexpected character `{c}`"));
        }
    }
    Ok(out)
}

/// Binding power and right-associativity of a binary operator.
fn binary(op: char) -> Option<(u8, bool)> {
    match op {
        '+' | '-' => Some((1, false)),
        '*' | '/' | '%' => Some((2, false)),
        '^' => Some((3, true)),
        _ => None,
    }
}

fn climb(t: &[Token], pos: &mut usize, min: u8, depth: usize) -> Result<f64, String> {
    if depth > MAX_NESTING {
        return Err(format!("nested deeper than {MAX_NESTING} levels"));
    }
    let mut lhs = operand(t, pos, depth)?;
    while let Some(Token::Symbol(op)) = t.get(*pos) {
        let Some((power, right)) = binary(*op) else {
            break;
        };
        if power < min {
            break;
        }
        *pos += 1;
        let rhs = climb(t, pos, if right { power } else { power + 1 }, depth + 1)?;
        lhs = match op {
            '+' => lhs + rhs,
            '-' => lhs - rhs,
            '*' => lhs * rhs,
            '/' if rhs == 0.0 => return Err("division by zero".into()),
            '/' => lhs / rhs,
            '%' if rhs == 0.0 => return Err("modulo by zero".into()),
            '%' => lhs % rhs,
            _ => lhs.powf(rhs),
        };
    }
    Ok(lhs)
}

fn operand(t: &[Token], pos: &mut usize, depth: usize) -> Result<f64, String> {
    let token = t.get(*pos).ok_or("the expression ends too early")?;
    *pos += 1;
    match token {
        Token::Number(n) => Ok(*n),
        Token::Symbol('-') => Ok(-climb(t, pos, 3, depth + 1)?),
        Token::Symbol('+') => climb(t, pos, 3, depth + 1),
        Token::Symbol('(') => {
            let v = climb(t, pos, 0, depth + 1)?;
            match t.get(*pos) {
                Some(Token::Symbol(')')) => {
                    *pos += 1;
                    Ok(v)
                }
                _ => Err("missing `)`".into()),
            }
        }
        other => Err(format!("unexpected `{other}`")),
    }
}

#[cfg(target_arch = "wasm32")]
mod component {
    use rollbox_sdk::Tool;

    struct Calculator;

    impl Tool for Calculator {
        fn describe() -> serde_json::Value {
            serde_json::json!({
                "description": "Evaluate an arithmetic expression: numbers, + - * / % ^ (power), unary minus and parentheses. Returns {\"result\": number}.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "expression": {"type": "string", "description": "The expression, e.g. \"(12 + 30) * 2 ^ 3\""}
                    },
                    "required": ["expression"]
                }
            })
        }

        fn call(_name: String, args: String) -> Result<String, rollbox_sdk::Error> {
            let args: serde_json::Value =
                serde_json::from_str(&args).map_err(|e| format!("arguments are not JSON: {e}"))?;
            let expr = args["expression"]
                .as_str()
                .ok_or("arguments need `expression`, a string")?;
            let result = crate::calculate(expr)?;
            Ok(serde_json::json!({ "result": result }).to_string())
        }
    }

    rollbox_sdk::export_tool!(Calculator);
}

#[cfg(test)]
mod tests {
    use super::calculate;

    #[test]
    fn precedence_associativity_and_errors() {
        assert_eq!(calculate("2 * (3 + 4)"), Ok(14.0));
        assert_eq!(calculate("2 + 3 * 4"), Ok(14.0));
        assert_eq!(calculate("2 ^ 3 ^ 2"), Ok(512.0));
        assert_eq!(calculate("-2 ^ 2"), Ok(-4.0));
        assert_eq!(calculate("10 - 4 - 3"), Ok(3.0));
        assert_eq!(calculate("7 % 4"), Ok(3.0));
        assert_eq!(calculate("1_000 / 8"), Ok(125.0));
        assert!(
            calculate("1 / 0")
                .expect_err("div")
                .contains("division by zero")
        );
        assert!(calculate("2 +").is_err());
        assert!(calculate("(1").expect_err("paren").contains("missing"));
        assert!(calculate("import os").is_err());
        assert!(
            calculate(&"(".repeat(100))
                .expect_err("deep")
                .contains("nested")
        );
        assert!(
            calculate(&"1+".repeat(3000))
                .expect_err("long")
                .contains("longer")
        );
    }
}
