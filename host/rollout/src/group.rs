//! The group stage: what becomes of a finished group, as pure functions of its episodes and a
//! [`GroupPolicy`] — kept with its (normalised) rewards, or dropped with a [`DropReason`].
//!
//! A new normalisation is a [`Normalization`] variant with its arm in [`Normalization::apply`]
//! and its name in `FromStr`; a new filter is a [`Filter`] variant with its arm in
//! [`Filter::accepts`]. Both reach `rollbox rollout` (`--normalize NAME`, `--filter NAME`)
//! without another change.

use rollbox_runtime::Trajectory;
use rollbox_tensor::DType;

/// Why a group was dropped; `stats.json`'s `groups_dropped` and `dropped-rows.jsonl` name it
/// by [`DropReason::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// Every episode was rejected or failed.
    NoAcceptedEpisodes,
    /// Fewer accepted episodes than `n_samples`, with `drop_incomplete_groups`.
    Incomplete,
    /// An episode's keys differ from the batch's.
    KeyMismatch,
    /// An episode's keys match the batch's but a dtype or rank differs.
    SchemaMismatch,
    /// Normalisation or a filter needs `rewards` and an episode has none.
    MissingRewards,
    /// The group filter refused it.
    Filtered,
    /// The group alone is over the batch size cap.
    TooLarge,
    /// The group's tensors could not be assembled or serialised.
    AssemblyFailed,
}

impl DropReason {
    /// The name in `stats.json` and `dropped-rows.jsonl`.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::NoAcceptedEpisodes => "no_accepted_episodes",
            DropReason::Incomplete => "incomplete",
            DropReason::KeyMismatch => "key_mismatch",
            DropReason::SchemaMismatch => "schema_mismatch",
            DropReason::MissingRewards => "missing_rewards",
            DropReason::Filtered => "filtered",
            DropReason::TooLarge => "too_large",
            DropReason::AssemblyFailed => "assembly_failed",
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What decides a group's fate (from [`crate::RolloutOptions::group_policy`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupPolicy {
    /// Episodes per group.
    pub n_samples: u32,
    /// Drop groups with fewer accepted episodes than `n_samples`.
    pub drop_incomplete: bool,
    /// Reward normalisation within the group.
    pub normalize: Option<Normalization>,
    /// Acceptance filter.
    pub filter: Option<Filter>,
}

/// Each key's dtype and rank, sorted by key: what AReaL's concat requires every trajectory of
/// a batch to share.
pub type Schema = Vec<(String, DType, usize)>;

/// The schema of one trajectory.
pub fn schema_of(t: &Trajectory) -> Schema {
    let mut schema: Schema = t
        .tensors
        .iter()
        .map(|(k, x)| (k.clone(), x.dtype(), x.rank()))
        .collect();
    schema.sort_by(|a, b| a.0.cmp(&b.0));
    schema
}

/// An accepted episode of a kept group, scored.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The episode's sample index in its group.
    pub sample: u32,
    /// Its `rewards`, one per row, as the workflow returned them (empty without `rewards`).
    pub raw: Vec<f32>,
    /// The rewards to train on: `raw`, or normalised against the group.
    pub rewards: Vec<f32>,
    /// Whether `rewards` were normalised (then the batch gets `rewards` replaced and
    /// `original_rewards` added).
    pub normalized: bool,
}

/// Judge a finished group: its accepted episodes (`(sample, trajectory)`, in sample order),
/// the run's batch schema (fixed by the first accepted episode of the run: `None` until then,
/// set here) and the policy.
pub fn judge(
    accepted: &[(u32, &Trajectory)],
    schema: &mut Option<Schema>,
    policy: &GroupPolicy,
) -> Result<Vec<Scored>, DropReason> {
    if accepted.is_empty() {
        return Err(DropReason::NoAcceptedEpisodes);
    }
    if policy.drop_incomplete && accepted.len() < policy.n_samples as usize {
        return Err(DropReason::Incomplete);
    }
    // Every kept episode must carry the batch's key set, each key with the batch's dtype and
    // rank: a group that cannot be assembled is dropped here instead of failing the batch.
    for (_, t) in accepted {
        let got = schema_of(t);
        match schema {
            None => *schema = Some(got),
            Some(want) if *want != got => {
                let same_keys =
                    want.len() == got.len() && want.iter().zip(&got).all(|(a, b)| a.0 == b.0);
                tracing::warn!("an episode returned {got:?}, the batch has {want:?}");
                return Err(if same_keys {
                    DropReason::SchemaMismatch
                } else {
                    DropReason::KeyMismatch
                });
            }
            Some(_) => {}
        }
    }
    // The reference of an episode: its `rollout_reward` if present, else its first reward.
    let mut references = Vec::with_capacity(accepted.len());
    let mut raw = Vec::with_capacity(accepted.len());
    for (_, t) in accepted {
        let rewards = t.f32s("rewards");
        let reference = t
            .f32s("rollout_reward")
            .and_then(|v| v.first().copied())
            .or_else(|| rewards.as_ref().and_then(|v| v.first().copied()));
        match (rewards, reference) {
            (Some(r), Some(x)) => {
                raw.push(r);
                references.push(x);
            }
            _ if policy.normalize.is_some() || policy.filter.is_some() => {
                return Err(DropReason::MissingRewards);
            }
            _ => {
                raw.push(Vec::new());
                references.push(f32::NAN);
            }
        }
    }
    if let Some(f) = policy.filter
        && !f.accepts(&references)
    {
        return Err(DropReason::Filtered);
    }
    Ok(accepted
        .iter()
        .zip(raw)
        .map(|((sample, _), raw)| {
            let rewards = match policy.normalize {
                Some(n) => n.apply(&raw, &references),
                None => raw.clone(),
            };
            Scored {
                sample: *sample,
                raw,
                rewards,
                normalized: policy.normalize.is_some(),
            }
        })
        .collect())
}

/// Group reward normalisations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalization {
    /// GRPO: `(x - mean) / (std + 1e-6)` with the unbiased std of the group's references, as
    /// AReaL's group reward normalisation computes it.
    ZScore,
    /// Dr. GRPO: `x - mean`, no division by the std (which favours groups of low variance).
    MeanOnly,
}

impl std::str::FromStr for Normalization {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "zscore" | "grpo" => Ok(Normalization::ZScore),
            "mean" | "dr-grpo" => Ok(Normalization::MeanOnly),
            other => Err(format!(
                "unknown normalisation `{other}`; available: zscore (GRPO), mean (Dr. GRPO)"
            )),
        }
    }
}

impl Normalization {
    /// Normalise `values` (one episode's rows) against the group's `references` (one per
    /// episode).
    pub fn apply(self, values: &[f32], references: &[f32]) -> Vec<f32> {
        match self {
            Normalization::ZScore => zscore(values, references, 1e-6),
            Normalization::MeanOnly => {
                let mean = mean(references);
                values
                    .iter()
                    .map(|&x| (f64::from(x) - mean) as f32)
                    .collect()
            }
        }
    }
}

fn mean(references: &[f32]) -> f64 {
    references.iter().map(|&r| f64::from(r)).sum::<f64>() / references.len().max(1) as f64
}

/// z-score of each value against the group's references: `(x - mean) / (std + eps)`, with the
/// unbiased standard deviation of `references` (0 for a group of one).
pub fn zscore(values: &[f32], references: &[f32], eps: f32) -> Vec<f32> {
    let n = references.len();
    if n == 0 {
        return values.to_vec();
    }
    let mean = mean(references);
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
    use rollbox_runtime::JsonText;
    use rollbox_tensor::{HostTensor, TensorData};

    #[test]
    fn zscore_with_unbiased_std() {
        let refs = [1.0, 0.0, 0.0, 1.0];
        // mean 0.5, unbiased std sqrt(1/3) = 0.57735.
        let z = zscore(&refs, &refs, 1e-6);
        for (got, want) in z.iter().zip([0.866_025, -0.866_025, -0.866_025, 0.866_025]) {
            assert!((got - want).abs() < 1e-4, "{z:?}");
        }
        // Rows of a multi-row episode are normalised against the episodes' references.
        let rows = zscore(&[2.0], &[1.0, 0.0], 0.0);
        assert!((rows[0] - (2.0 - 0.5) / std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-5);
        // A constant group maps to 0, a group of one to 0.
        assert_eq!(zscore(&[3.0, 3.0], &[3.0, 3.0], 1e-6), vec![0.0, 0.0]);
        assert_eq!(zscore(&[3.0], &[3.0], 1e-6), vec![0.0]);
    }

    #[test]
    fn mean_only_subtracts_the_group_mean() {
        let refs = [1.0, 0.0, 0.0, 1.0];
        assert_eq!(
            Normalization::MeanOnly.apply(&refs, &refs),
            vec![0.5, -0.5, -0.5, 0.5]
        );
        assert_eq!("dr-grpo".parse(), Ok(Normalization::MeanOnly));
        assert_eq!("zscore".parse(), Ok(Normalization::ZScore));
        assert!("minmax".parse::<Normalization>().is_err());
    }

    #[test]
    fn non_constant_filter() {
        assert!(!Filter::NonConstant.accepts(&[1.0, 1.0, 1.0]));
        assert!(Filter::NonConstant.accepts(&[1.0, 0.0, 1.0]));
        assert!(!Filter::NonConstant.accepts(&[0.5]));
    }

    fn episode(reward: Option<f32>, extra: Option<(&str, TensorData)>) -> Trajectory {
        let mut tensors = vec![(
            "input_ids".to_string(),
            HostTensor::new(TensorData::I32(vec![1, 2]), vec![1, 2]).expect("t"),
        )];
        if let Some(r) = reward {
            tensors.push((
                "rewards".into(),
                HostTensor::new(TensorData::F32(vec![r]), vec![1]).expect("t"),
            ));
        }
        if let Some((k, d)) = extra {
            tensors.push((k.into(), HostTensor::new(d, vec![1]).expect("t")));
        }
        Trajectory {
            tensors,
            metadata_json: JsonText::from(&serde_json::json!({})),
            memory: Default::default(),
        }
    }

    #[test]
    fn judge_keeps_scores_or_names_the_reason() {
        let policy = GroupPolicy {
            n_samples: 3,
            drop_incomplete: false,
            normalize: Some(Normalization::ZScore),
            filter: Some(Filter::NonConstant),
        };
        let (a, b) = (episode(Some(1.0), None), episode(Some(0.0), None));
        let mut schema = None;
        let kept = judge(&[(0, &a), (2, &b)], &mut schema, &policy).expect("kept");
        assert_eq!(kept.len(), 2);
        assert_eq!((kept[1].sample, kept[1].raw.clone()), (2, vec![0.0]));
        assert!(kept[0].rewards[0] > 0.7 && kept[0].normalized);
        assert!(schema.is_some());
        let no_schema = |accepted: &[(u32, &Trajectory)], policy: &GroupPolicy| {
            judge(accepted, &mut None, policy)
        };
        assert_eq!(no_schema(&[], &policy), Err(DropReason::NoAcceptedEpisodes));
        let strict = GroupPolicy {
            drop_incomplete: true,
            ..policy
        };
        assert_eq!(
            no_schema(&[(0, &a), (1, &b)], &strict),
            Err(DropReason::Incomplete)
        );
        assert_eq!(
            no_schema(&[(0, &a), (1, &a)], &policy),
            Err(DropReason::Filtered)
        );
        let unrewarded = episode(None, None);
        assert_eq!(
            no_schema(&[(0, &unrewarded)], &policy),
            Err(DropReason::MissingRewards)
        );
        let extra = episode(Some(1.0), Some(("x", TensorData::F32(vec![1.0]))));
        assert_eq!(
            judge(&[(0, &extra)], &mut schema, &policy),
            Err(DropReason::KeyMismatch)
        );
        let retyped = Trajectory {
            tensors: vec![
                a.tensors[0].clone(),
                (
                    "rewards".into(),
                    HostTensor::new(TensorData::I32(vec![1]), vec![1]).expect("t"),
                ),
            ],
            metadata_json: a.metadata_json.clone(),
            memory: Default::default(),
        };
        assert_eq!(
            judge(&[(0, &retyped)], &mut schema, &policy),
            Err(DropReason::SchemaMismatch)
        );
        // Without normalisation or a filter, episodes without rewards are kept as they are.
        let plain = GroupPolicy {
            normalize: None,
            filter: None,
            ..policy
        };
        let kept = no_schema(&[(0, &unrewarded)], &plain).expect("kept");
        assert!(kept[0].raw.is_empty() && !kept[0].normalized);
    }
}
