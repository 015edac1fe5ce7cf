//! `math`: a reward component that checks a completion's final answer against the row's
//! reference answer, in the spirit of AReaL's `gsm8k_reward_fn` (math-verify with 6-digit
//! float rounding). 1.0 when they agree, 0.0 otherwise (also when either cannot be read).
//!
//! * Reference: `data["answer"]` (GSM8K's `"... #### 72"` is cut to `72`), else
//!   `data["solution"]`, else `data["gold"]`.
//! * Prediction, in order: the last `\boxed{...}`/`\fbox{...}`, the text after the last
//!   `####`, the text after the last "the answer is", else the last number in the completion.
//! * Both sides are normalised (`$`, `\left`/`\right`, `\dfrac`/`\tfrac`, `\text{..}`, `\cdot`,
//!   thousands separators, `x = 3`, trailing units and punctuation) and evaluated as arithmetic
//!   (`+ - * / ^`, parentheses, `\frac{a}{b}`, `\sqrt{x}`, percentages); numbers are equal when
//!   they agree to 6 significant digits. Non-numeric answers (e.g. `B`) compare as normalised
//!   text.

mod eval;
mod extract;

pub use eval::{evaluate, normalize};
pub use extract::{ReferenceFields, extract_prediction, reference_answer, reference_from};

/// 1.0 when `completion`'s final answer equals `reference`, else 0.0.
pub fn score(completion: &str, reference: &str) -> f64 {
    let Some(pred) = extract_prediction(completion) else {
        return 0.0;
    };
    if answers_match(&pred, reference) {
        1.0
    } else {
        0.0
    }
}

/// Whether two answer strings denote the same value.
pub fn answers_match(pred: &str, gold: &str) -> bool {
    let (p, g) = (normalize(pred), normalize(gold));
    if p.is_empty() || g.is_empty() {
        return false;
    }
    match (evaluate(&p), evaluate(&g)) {
        (Some(a), Some(b)) => {
            let percent_p = p.ends_with('%');
            let percent_g = g.ends_with('%');
            same_number(a, b)
                || (percent_p && !percent_g && same_number(a / 100.0, b))
                || (percent_g && !percent_p && same_number(a, b / 100.0))
        }
        (None, None) => p == g,
        _ => false,
    }
}

/// Equal after rounding both to 6 significant digits.
fn same_number(a: f64, b: f64) -> bool {
    if !a.is_finite() || !b.is_finite() {
        return false;
    }
    if a == b {
        return true;
    }
    // Two numbers with the same 6-digit rounding r differ by at most one unit in its last
    // digit, i.e. by less than 1.0001e-5 of the larger magnitude: anything further apart
    // differs without formatting either.
    if (a - b).abs() > 2e-5 * a.abs().max(b.abs()) {
        return false;
    }
    format!("{a:.5e}") == format!("{b:.5e}")
}

#[cfg(target_arch = "wasm32")]
mod component {
    use rollbox_sdk::Reward;
    use rollbox_sdk::reward::RewardInput;

    struct Math;

    impl Reward for Math {
        fn score(input: RewardInput) -> Result<f64, rollbox_sdk::Error> {
            let row = crate::ReferenceFields::parse(&input.data);
            let Some(reference) = crate::reference_from(&row) else {
                return Err(
                    "the row has no `answer` (or `solution`, `gold`) to check against".into(),
                );
            };
            Ok(crate::score(&input.completion, &reference))
        }
    }

    rollbox_sdk::export_reward!(Math);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areal_documented_cases() {
        let cases: &[(&str, &str, f64)] = &[
            ("The answer is \\boxed{0.5}", "1/2", 1.0),
            ("\\boxed{1/2}", "0.5", 1.0),
            ("so \\boxed{\\frac{5}{6}}", "\\frac{5}{6}", 1.0),
            ("\\boxed{2^3}", "8", 1.0),
            ("\\boxed{8}", "2^3", 1.0),
            ("\\boxed{0.0666668}", "0.066666793", 1.0),
            ("\\boxed{2.232}", "2.23", 0.0),
            ("\\boxed{x = 3}", "3", 1.0),
            ("the answer is 0.6666667", "\\frac{2}{3}", 1.0),
            ("\\boxed{7}", "8", 0.0),
            ("", "8", 0.0),
            ("I don't know", "8", 0.0),
        ];
        for (completion, gold, want) in cases {
            assert_eq!(score(completion, gold), *want, "{completion:?} vs {gold:?}");
        }
    }

    #[test]
    fn gsm8k_and_latex_forms() {
        let cases: &[(&str, &str, f64)] = &[
            ("She pays 3 * 24 = 72 dollars.\n#### 72", "72", 1.0),
            ("Total: $1,234.50", "1234.5", 1.0),
            ("\\boxed{\\dfrac{3}{4}}", "0.75", 1.0),
            (
                "$\\left(\\frac{1}{4}\\right)$ is it: \\boxed{\\left(\\frac{1}{4}\\right)}",
                "0.25",
                1.0,
            ),
            ("\\boxed{-12}", "-12", 1.0),
            ("\\boxed{-12}", "12", 0.0),
            ("\\boxed{50\\%}", "50", 1.0),
            ("\\boxed{50\\%}", "0.5", 1.0),
            ("\\boxed{\\text{15 apples}}", "15", 1.0),
            ("\\boxed{15\\text{ cm}}", "15", 1.0),
            ("The answer is 42.", "42", 1.0),
            ("I think it is 10, no wait, 12", "12", 1.0),
            ("\\boxed{\\sqrt{4}}", "2", 1.0),
            ("\\boxed{3 \\cdot 4}", "12", 1.0),
            ("\\boxed{B}", "B", 1.0),
            ("\\boxed{B}", "C", 0.0),
            ("\\boxed{1/0}", "1", 0.0),
            ("\\boxed{}", "1", 0.0),
        ];
        for (completion, gold, want) in cases {
            assert_eq!(score(completion, gold), *want, "{completion:?} vs {gold:?}");
        }
    }

    #[test]
    fn reference_comes_from_the_row() {
        let row = serde_json::json!({"answer": "Natalia sold 48/2 = 24 clips.\n#### 72"});
        assert_eq!(reference_answer(&row).as_deref(), Some("72"));
        let row = serde_json::json!({"solution": "\\boxed{5}"});
        assert_eq!(reference_answer(&row).as_deref(), Some("5"));
        let row = serde_json::json!({"answer": 18});
        assert_eq!(reference_answer(&row).as_deref(), Some("18"));
        assert_eq!(reference_answer(&serde_json::json!({})), None);
    }

    #[test]
    fn far_apart_numbers_differ_without_formatting() {
        // The fast rejection agrees with comparing the 6-digit roundings.
        let rounded_equal = |a: f64, b: f64| format!("{a:.5e}") == format!("{b:.5e}");
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let a = (next() % 2_000_001) as f64 / 1000.0 - 1000.0;
            // Relative offsets from 1e-12 to ~1, either sign: around 1e-5 both paths run.
            let sign = if next() % 2 == 0 { 1.0 } else { -1.0 };
            let rel = sign * (next() % 1000) as f64 * 10f64.powi(-((next() % 10) as i32) - 3);
            let b = a * (1.0 + rel);
            assert_eq!(same_number(a, b), a == b || rounded_equal(a, b), "{a} {b}");
        }
        assert!(same_number(9.999996, 10.0));
        assert!(!same_number(1.0, -1.0));
        assert!(!same_number(72.0, 73.0));
    }

    #[test]
    fn reference_fields_read_from_row_text() {
        let read = |text: &str| reference_from(&ReferenceFields::parse(text));
        let row = r#"{"messages": [{"role": "user", "content": "How many?"}], "answer": "3 + 4 = 7\n#### 7", "id": 3}"#;
        assert_eq!(read(row).as_deref(), Some("7"));
        assert_eq!(
            read(r#"{"answer": null, "gold": 2.5}"#).as_deref(),
            Some("2.5")
        );
        assert_eq!(
            read(r#"{"answer": ["x"], "solution": "\\boxed{9}"}"#).as_deref(),
            Some("9")
        );
        assert_eq!(read(r#"["7"]"#), None);
        assert_eq!(read("not json"), None);
        assert_eq!(read(r#"{"question": "no answer here"}"#), None);
    }
}
