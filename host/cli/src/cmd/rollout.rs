//! `rollbox rollout`: the main job, a dataset through a workflow into GRPO groups and
//! safetensors batches; and the setup flags `rollbox serve` shares.

use std::path::PathBuf;

use clap::Args;
use rollbox_engines::EngineSpec;
use rollbox_host::{ComponentSpec, HostSpec, builtin, process};
use rollbox_rollout::dataset::{Dataset, OnBadRow};
use rollbox_rollout::group::{Filter, Normalization};
use rollbox_rollout::{OutputDir, Progress, RolloutOptions, Stats};

use super::{ComponentArgs, Registration, parse_object};
use crate::limits::LimitArgs;

/// What every job needs: the workflow, engine, rewards, tools, config, groups and limits.
#[derive(Args, Debug)]
pub struct SetupArgs {
    /// The workflow component: a .wasm file, or a built-in's name (`rlvr`, `multi-turn`;
    /// `rollbox components` lists them).
    #[arg(long, default_value = "rlvr")]
    workflow: PathBuf,
    #[command(flatten)]
    pub components: ComponentArgs,
    /// The workflow's configuration, a JSON object.
    #[arg(
        long,
        default_value = r#"{"reward": "math", "gconfig": {"max_new_tokens": 192, "temperature": 1.0}}"#
    )]
    config: String,
    /// Episodes per row (GRPO group size).
    #[arg(long, default_value_t = 4)]
    n_samples: u32,
    /// Episodes in flight at most.
    #[arg(long, default_value_t = 64)]
    max_concurrent: usize,
    /// Drop groups with fewer accepted episodes than --n-samples (default: keep them, with
    /// their true size recorded).
    #[arg(long)]
    drop_incomplete_groups: bool,
    /// Normalise rewards within each group: `--normalize` or `--normalize=zscore` (GRPO),
    /// `--normalize=mean` (Dr. GRPO); raw rewards kept as `original_rewards`.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "zscore")]
    normalize: Option<Normalization>,
    /// Group filter: `non-constant` drops groups whose rewards are all equal (DAPO).
    #[arg(long)]
    filter: Option<Filter>,
    /// Base seed for episode seeds.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A TOML file of these flags (`n_samples = 8`, `[workflow_config]`, `[limits]`);
    /// flags on the command line win.
    #[arg(long)]
    pub config_file: Option<PathBuf>,
    #[command(flatten)]
    limits: LimitArgs,
}

impl SetupArgs {
    /// The engine: `--engine`, else the embedded model.
    pub fn engine(&self) -> EngineSpec {
        self.components
            .engine
            .clone()
            .unwrap_or(EngineSpec::Embedded { model: None })
    }
}

/// Flags of `rollbox rollout`.
#[derive(Args, Debug)]
pub struct RolloutArgs {
    /// The dataset: JSONL (one JSON object per line), a JSON array of objects, or Parquet
    /// (verl's layout, Hugging Face exports; nested columns become JSON); each row is the
    /// workflow's `data`. All three are streamed, not held in memory. Default: the
    /// built-in `arith` (16 arithmetic word problems).
    #[arg(default_value = builtin::ARITH_NAME)]
    dataset: PathBuf,
    /// Output directory (batches, trajectories.jsonl, stats.json); re-running resumes.
    #[arg(long, default_value = "rollout-out")]
    out: PathBuf,
    /// Groups per safetensors batch.
    #[arg(long, default_value_t = 8)]
    batch_size: usize,
    /// AReaL's staleness limit (off by default for offline runs).
    #[arg(long)]
    max_head_offpolicyness: Option<u64>,
    /// Malformed dataset lines: skip (reported) or fatal.
    #[arg(long, default_value = "skip")]
    on_bad_row: OnBadRow,
    /// Run at most this many rows not yet done.
    #[arg(long)]
    max_rows: Option<usize>,
    /// No progress bar and no summary.
    #[arg(long)]
    quiet: bool,
    /// Print stats.json's content as JSON at the end (no progress bar).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub setup: SetupArgs,
}

impl SetupArgs {
    /// The host spec these flags give: the engine defaults to the embedded model and the
    /// rewards to the built-in `math`.
    pub fn spec(&self) -> anyhow::Result<HostSpec> {
        let mut components = self.components.clone();
        components.engine = Some(self.engine());
        if components.rewards.is_empty() {
            components.rewards.push(Registration {
                name: "math".into(),
                spec: ComponentSpec::new("math"),
            });
        }
        components.spec(
            self.workflow.clone(),
            &self.limits,
            parse_object("config", &self.config)?,
        )
    }

    /// The run settings these flags give.
    pub fn options(&self) -> RolloutOptions {
        RolloutOptions {
            n_samples: self.n_samples,
            max_concurrent: self.max_concurrent,
            drop_incomplete_groups: self.drop_incomplete_groups,
            normalize: self.normalize,
            filter: self.filter,
            seed: self.seed,
            hint: crate::limits::hint,
            ..RolloutOptions::default()
        }
    }
}

/// Run the dataset, print a summary (or the stats as JSON).
pub async fn run(a: RolloutArgs) -> anyhow::Result<()> {
    process::prefer_small_pages(&a.setup.engine());
    let dataset = open_dataset(&a.dataset, a.on_bad_row)?;
    let spec = a.setup.spec()?;
    spec.ensure_model().await?;
    let host = spec.build()?;
    crate::alloc::release_setup_memory();
    let rollout = host.rollout(RolloutOptions {
        batch_size: a.batch_size,
        max_head_offpolicyness: a.max_head_offpolicyness,
        max_rows: a.max_rows,
        ..a.setup.options()
    });
    let mut out = OutputDir::open(&a.out)?;
    let quiet = a.quiet || a.json;
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} rows  {msg}  [{elapsed_precise}]",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    };
    // The controller runs as a task on the runtime's workers, next to its episodes (woken
    // without a thread switch), not on the main thread.
    let task_bar = bar.clone();
    let (stats, _out) = tokio::spawn(async move {
        let mut on_progress = |p: &Progress| {
            task_bar.set_length(p.rows_total as u64);
            task_bar.set_position(p.rows_done as u64);
            task_bar.set_message(format!(
                "{} episodes  {:.1} ep/s  reward {:.3}  rejected/failed {}",
                p.episodes,
                p.episodes as f64 / p.elapsed_s.max(1e-9),
                p.reward_mean,
                p.rejected_or_failed
            ));
        };
        let stats = rollout.run(dataset, &mut out, &mut on_progress).await;
        (stats, out)
    })
    .await
    .map_err(|e| anyhow::anyhow!("the rollout task failed: {e}"))?;
    let stats = stats?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else if !a.quiet {
        summary(&stats, &a.out);
    }
    Ok(())
}

/// The dataset file, or the built-in `arith` when no file of that name exists.
fn open_dataset(path: &std::path::Path, on_bad: OnBadRow) -> anyhow::Result<Dataset> {
    if !path.exists() && path.as_os_str() == builtin::ARITH_NAME {
        return Ok(Dataset::from_bytes(
            builtin::ARITH.as_bytes(),
            "arith (built in)",
        ));
    }
    Dataset::open(path, on_bad)
}

fn summary(s: &Stats, out: &std::path::Path) {
    println!("rollout  {}", out.display());
    println!(
        "rows     {} run, {} already done, {} bad lines",
        s.rows_run, s.rows_already_done, s.bad_rows_total
    );
    let episodes: Vec<String> = s.episodes.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("episodes {}", episodes.join(", "));
    let dropped: Vec<String> = s
        .groups_dropped
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "groups   {} kept{}{}",
        s.groups_kept,
        if dropped.is_empty() {
            ""
        } else {
            ", dropped: "
        },
        dropped.join(", ")
    );
    println!(
        "written  {} trajectories in {} batches",
        s.trajectories, s.batches
    );
    println!(
        "reward   mean {:.3}, std {:.3}; truncated {:.1} %",
        s.reward_mean,
        s.reward_std,
        s.truncation_rate * 100.0
    );
    println!(
        "speed    {:.2} episodes/s, {:.1} tokens/s, episode p50 {:.0} ms, p99 {:.0} ms ({:.1} s)",
        s.episodes_per_s,
        s.tokens_per_s,
        s.episode_ms.get("p50").copied().unwrap_or(0.0),
        s.episode_ms.get("p99").copied().unwrap_or(0.0),
        s.wall_s
    );
}
