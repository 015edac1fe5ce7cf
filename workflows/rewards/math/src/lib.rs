//! `math`: a reward component that scores a completion against the row's reference answer as
//! AReaL 1.0.4's `gsm8k_reward_fn` does: math-verify 0.8's `parse` on both texts and its
//! `verify` with 6-decimal float rounding, reimplemented in Rust ([`mv`]). 1.0 when they agree,
//! 0.0 otherwise (also when either side has nothing to read).
//!
//! Checked against AReaL's own function on a recorded corpus of 5,940 completions
//! (`tests/fixtures/rewards/math_corpus.jsonl`, `scripts/fixtures/record_reward_fixtures.py`): every
//! score agrees (`tests/corpus.rs`).
//!
//! The reference is the row's `answer`, else `solution`, `reward_model.ground_truth`,
//! `ground_truth`, `final_answer`, `gold` ([`REFERENCE_KEYS`]), passed whole: a GSM8K solution
//! ending in `#### 72` is read the way math-verify reads it.

#[cfg(target_arch = "wasm32")]
mod arena;
pub mod mv;
mod reference;

/// One instance scores one call, so freed memory is never reused: see [`arena`].
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena::new();

pub use reference::{REFERENCE_KEYS, reference_of, reference_text};

/// 1.0 when `completion`'s answer agrees with `reference` (AReaL's `gsm8k_reward_fn`), else 0.0.
pub fn score(completion: &str, reference: &str) -> f64 {
    mv::reward(completion, reference)
}

#[cfg(target_arch = "wasm32")]
mod component {
    use rollbox_sdk::Reward;
    use rollbox_sdk::reward::RewardInput;

    struct Math;

    impl Reward for Math {
        fn score(input: RewardInput) -> Result<f64, rollbox_sdk::Error> {
            let Some(reference) = crate::reference_text(&input.data) else {
                return Err(format!(
                    "the row has no reference answer: none of {} holds a string or a number",
                    crate::REFERENCE_KEYS
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
                .into());
            };
            Ok(crate::score(&input.completion, &reference))
        }
    }

    rollbox_sdk::export_reward!(Math);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cases whose AReaL 1.0.4 scores were observed with `gsm8k_reward_fn` (reference first).
    #[test]
    fn areal_observed_cases() {
        let gsm8k = "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18";
        let cases: &[(&str, &str, f64)] = &[
            (gsm8k, "So she makes \\boxed{18} dollars.", 1.0),
            ("#### 18", "\\boxed{\\$18}", 1.0),
            ("#### 18", "\\boxed{18\\%}", 0.0),
            ("#### 18", "18%", 1.0),
            ("#### 0.18", "\\boxed{18\\%}", 1.0),
            ("#### 18", "The answer is 18 dollars.", 1.0),
            ("#### 18", "The answer is \\$18.", 0.0),
            ("#### 18", "eighteen", 0.0),
            ("#### 18", "\\boxed{17} \\boxed{18}", 0.0),
            ("#### 18", "So \\boxed{18}. Double-check: \\boxed{1", 1.0),
            (
                "#### 18",
                "We need 3 bags. So the answer is \\boxed{18",
                0.0,
            ),
            ("#### 1234", "1{,}234", 0.0),
            ("#### 1234", "$1{,}234$", 1.0),
            ("#### 1234", "\\boxed{1 234}", 0.0),
            ("#### 18", "18.00", 1.0),
            ("#### 18", "\\boxed{18.0000001}", 0.0),
            ("#### 18.0", "18.0000004", 1.0),
            ("#### -3", "−3", 0.0),
            ("#### -3", "$−3$", 1.0),
            ("#### 2.5", "$2\\frac{1}{2}$", 1.0),
            ("#### 2.5", "2 1/2", 0.0),
            ("$\\frac{1}{3}$", "0.333", 0.0),
            ("$(1,2)$", "$(2,1)$", 0.0),
            ("$\\{1,2\\}$", "$\\{2,1\\}$", 1.0),
            ("$[1,2)$", "$(1,2)$", 0.0),
            ("$x=5$", "$y=5$", 0.0),
            ("#### 5", "\\boxed{5 apples}", 1.0),
            ("#### 18", "\\boxed{18 dollars}", 0.0),
            (
                "#### 18",
                "To answer this, first compute 3 + 4. Then the total is 18.",
                0.0,
            ),
            ("#### 18", "#### 18\n\nQuestion: Tom has 20 apples", 0.0),
            ("$\\pi$", "3.141593", 1.0),
            ("$\\sqrt{2}$", "1.414", 0.0),
            ("$\\frac{7}{6}$", "$\\frac{3.5}{3}$", 0.0),
            ("$\\frac{13}{15}$", "$\\frac{6.5}{7.5}$", 1.0),
        ];
        for (reference, completion, want) in cases {
            assert_eq!(
                score(completion, reference),
                *want,
                "{completion:?} vs {reference:?}"
            );
        }
    }

    #[test]
    fn reference_comes_from_the_row() {
        let row = r#"{"messages": [], "answer": "3 + 4 = 7\n#### 7", "id": 3}"#;
        assert_eq!(reference_text(row).as_deref(), Some("3 + 4 = 7\n#### 7"));
        assert_eq!(
            reference_text(r#"{"answer": null, "gold": 2.5}"#).as_deref(),
            Some("2.5")
        );
        assert_eq!(
            reference_text(r#"{"reward_model": {"ground_truth": "9", "style": "rule"}}"#)
                .as_deref(),
            Some("9")
        );
        assert_eq!(
            reference_text(r#"{"solution": "\\boxed{5}"}"#).as_deref(),
            Some("\\boxed{5}")
        );
        assert_eq!(reference_text(r#"["7"]"#), None);
        assert_eq!(reference_text("not json"), None);
        assert_eq!(reference_text(r#"{"question": "no answer here"}"#), None);
        assert_eq!(score("\\boxed{7}", "3 + 4 = 7\n#### 7"), 1.0);
    }
}
