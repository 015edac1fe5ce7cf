//! Group-level reward processing: GRPO normalisation and acceptance filters.

/// z-score of each value against the group's references: `(x - mean) / (std + eps)`, with the
/// unbiased standard deviation of `references` (0 for a group of one), as AReaL's group
/// reward normalisation computes it.
pub fn normalize(values: &[f32], references: &[f32], eps: f32) -> Vec<f32> {
    let n = references.len();
    if n == 0 {
        return values.to_vec();
    }
    let mean = references.iter().map(|&r| f64::from(r)).sum::<f64>() / n as f64;
    let std = if n > 1 {
        let var = references
            .iter()
            .map(|&r| (f64::from(r) - mean).powi(2))
            .sum::<f64>()
            / (n - 1) as f64;
        var.sqrt()
    } else {
        0.0
    };
    values
        .iter()
        .map(|&x| ((f64::from(x) - mean) / (std + f64::from(eps))) as f32)
        .collect()
}

/// Group acceptance filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Drop groups whose episodes all have the same reference reward (no learning signal,
    /// as DAPO's dynamic sampling does).
    NonConstant,
}

impl std::str::FromStr for Filter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "non-constant" | "dapo" => Ok(Filter::NonConstant),
            other => Err(format!("unknown filter `{other}`; available: non-constant")),
        }
    }
}

impl Filter {
    /// Whether a group with these reference rewards is kept.
    pub fn accepts(self, references: &[f32]) -> bool {
        match self {
            Filter::NonConstant => references.windows(2).any(|w| w[0] != w[1]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zscore_with_unbiased_std() {
        let refs = [1.0, 0.0, 0.0, 1.0];
        // mean 0.5, unbiased std sqrt(1/3) = 0.57735.
        let z = normalize(&refs, &refs, 1e-6);
        for (got, want) in z.iter().zip([0.866_025, -0.866_025, -0.866_025, 0.866_025]) {
            assert!((got - want).abs() < 1e-4, "{z:?}");
        }
        // Rows of a multi-row episode are normalised against the episodes' references.
        let rows = normalize(&[2.0], &[1.0, 0.0], 0.0);
        assert!((rows[0] - (2.0 - 0.5) / std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-5);
        // A constant group maps to 0, a group of one to 0.
        assert_eq!(normalize(&[3.0, 3.0], &[3.0, 3.0], 1e-6), vec![0.0, 0.0]);
        assert_eq!(normalize(&[3.0], &[3.0], 1e-6), vec![0.0]);
    }

    #[test]
    fn non_constant_filter() {
        assert!(!Filter::NonConstant.accepts(&[1.0, 1.0, 1.0]));
        assert!(Filter::NonConstant.accepts(&[1.0, 0.0, 1.0]));
        assert!(!Filter::NonConstant.accepts(&[0.5]));
    }
}
