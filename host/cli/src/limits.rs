//! `--max-*` flags: every sandbox limit, overridable from the command line.

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

use rollbox_runtime::{CallPolicy, Limits};

/// Sandbox limits for workflow episodes. Unset flags keep `Limits::default()`, whose values the
/// help texts print (so they are written in one place, the runtime).
#[derive(Args, Debug, Clone, Default)]
pub struct LimitArgs {
    #[arg(long, value_name = "SIZE", help = help("Linear memory per instance (e.g. 512MiB, 1GiB)", size(D.max_memory_bytes as usize)))]
    pub max_memory: Option<String>,
    #[arg(long, value_name = "DURATION", help = help("Wall-clock time per episode (e.g. 600s, 1.5s, 250ms)", format!("{}s", D.timeout.as_secs_f64())))]
    pub timeout: Option<String>,
    /// Fuel (≈ wasm instructions) per episode; enables fuel metering. Default: unmetered.
    #[arg(long)]
    pub fuel: Option<u64>,
    #[arg(long, value_name = "SIZE", help = help("Bytes a guest may move into the host in one call", size(D.max_boundary_bytes)))]
    pub max_boundary_bytes: Option<String>,
    #[arg(long, help = help("Live tensor handles per episode", D.max_handles))]
    pub max_handles: Option<usize>,
    #[arg(long, value_name = "SIZE", help = help("Bytes of tensors an episode may create", size(D.max_tensor_bytes)))]
    pub max_tensor_bytes: Option<String>,
    #[arg(long, help = help("Generate requests per episode", D.max_generate_calls))]
    pub max_generate_calls: Option<u32>,
    #[arg(long, help = help("Generated tokens per episode", D.max_generated_tokens))]
    pub max_episode_tokens: Option<u64>,
    #[arg(long, value_name = "SIZE", help = help("Captured stdout and stderr bytes each per episode", size(D.max_stdout_bytes)))]
    pub max_output_bytes: Option<String>,
    #[arg(long, value_name = "SIZE", help = help("Input bytes one tokenizer call takes (encode text, chat messages)", size(D.max_tokenizer_input_bytes)))]
    pub max_tokenizer_bytes: Option<String>,
}

/// The defaults the help texts show.
const D: Limits = Limits::DEFAULT;

/// `what. Default value.`
fn help(what: &str, value: impl std::fmt::Display) -> String {
    format!("{what}. Default {value}.")
}

/// `n` bytes the way the flags take sizes (`512MiB`).
fn size(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => n.to_string(),
    }
}

impl LimitArgs {
    /// The defaults with every given flag applied.
    pub fn to_limits(&self) -> anyhow::Result<Limits> {
        let mut l = Limits::default();
        if let Some(s) = &self.max_memory {
            l.max_memory_bytes = parse_size(s).context("--max-memory")? as u64;
        }
        if let Some(s) = &self.timeout {
            l.timeout = parse_duration(s).context("--timeout")?;
        }
        l.fuel = self.fuel.or(l.fuel);
        if let Some(s) = &self.max_boundary_bytes {
            l.max_boundary_bytes = parse_size(s).context("--max-boundary-bytes")?;
        }
        l.max_handles = self.max_handles.unwrap_or(l.max_handles);
        if let Some(s) = &self.max_tensor_bytes {
            l.max_tensor_bytes = parse_size(s).context("--max-tensor-bytes")?;
        }
        l.max_generate_calls = self.max_generate_calls.unwrap_or(l.max_generate_calls);
        l.max_generated_tokens = self.max_episode_tokens.unwrap_or(l.max_generated_tokens);
        if let Some(s) = &self.max_output_bytes {
            let n = parse_size(s).context("--max-output-bytes")?;
            l.max_stdout_bytes = n;
            l.max_stderr_bytes = n;
        }
        if let Some(s) = &self.max_tokenizer_bytes {
            l.max_tokenizer_input_bytes = parse_size(s).context("--max-tokenizer-bytes")?;
        }
        l.validate().map_err(anyhow::Error::msg)?;
        Ok(l)
    }
}

/// A `--reward`/`--tool` registration: `NAME=PATH[,timeout=15s][,retries=3][,memory=256MiB][,fuel=N]`.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The name workflows use.
    pub name: String,
    /// The component file.
    pub path: PathBuf,
    /// Its limits and retries (AReaL's defaults: 15 s, 3 retries, 256 MiB).
    pub policy: CallPolicy,
}

/// Parse a `--reward` registration `NAME=PATH[,key=value...]` (AReaL's reward defaults:
/// 15 s, 256 MiB, 3 retries).
pub fn parse_registration(s: &str) -> anyhow::Result<Registration> {
    parse_with(s, CallPolicy::default())
}

/// Parse a `--tool` registration `NAME=PATH[,key=value...]` (tool defaults: 5 s, 128 MiB, no
/// retries).
pub fn parse_tool_registration(s: &str) -> anyhow::Result<Registration> {
    parse_with(s, CallPolicy::tool())
}

fn parse_with(s: &str, defaults: CallPolicy) -> anyhow::Result<Registration> {
    let mut parts = s.split(',');
    let head = parts.next().unwrap_or_default();
    // `NAME` alone: the built-in component of that name (a name, not a path).
    let bare = !head.contains('=')
        && head
            .trim()
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let (name, path) = head.split_once('=').unwrap_or((head, head));
    if name.trim().is_empty() || path.trim().is_empty() || !(bare || head.contains('=')) {
        bail!(
            "`{s}` should be NAME=PATH or a built-in's NAME [,timeout=15s,retries=3,memory=256MiB,fuel=N]"
        );
    }
    let mut limits = (*defaults.limits).clone();
    let mut retries = defaults.retries;
    for opt in parts {
        let Some((k, v)) = opt.split_once('=') else {
            bail!("option `{opt}` in `{s}` should be key=value");
        };
        match k.trim() {
            "timeout" => limits.timeout = parse_duration(v)?,
            "retries" => retries = v.trim().parse().with_context(|| format!("retries `{v}`"))?,
            "memory" => limits.max_memory_bytes = parse_size(v)? as u64,
            "fuel" => limits.fuel = Some(v.trim().parse().with_context(|| format!("fuel `{v}`"))?),
            other => {
                bail!("unknown option `{other}` in `{s}`; use timeout, retries, memory or fuel")
            }
        }
    }
    limits.validate().map_err(anyhow::Error::msg)?;
    Ok(Registration {
        name: name.trim().to_string(),
        path: PathBuf::from(path.trim()),
        policy: CallPolicy {
            limits: Arc::new(limits),
            retries,
        },
    })
}

/// `123`, `64KiB`, `512MiB`, `1GiB` (also `KB`/`MB`/`GB` as powers of 1000).
pub fn parse_size(s: &str) -> anyhow::Result<usize> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .with_context(|| format!("`{s}` is not a size like 512MiB"))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "kb" => 1000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => bail!("unknown size unit `{other}` in `{s}`; use B, KiB, MiB or GiB"),
    };
    n.checked_mul(mult)
        .with_context(|| format!("`{s}` is too large"))
}

/// `600s`, `1.5s`, `250ms`, `2m`, or plain seconds.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("`{s}` is not a duration like 30s or 250ms"))?;
    if !v.is_finite() || v <= 0.0 {
        bail!("`{s}` must be a positive duration");
    }
    Ok(Duration::from_secs_f64(v * scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_shows_the_runtime_defaults() {
        assert_eq!(size(512 << 20), "512MiB");
        assert_eq!(size(1 << 30), "1GiB");
        assert_eq!(size(1000), "1000");
        assert_eq!(
            parse_size(&size(D.max_memory_bytes as usize)).expect("size") as u64,
            D.max_memory_bytes
        );
    }

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("512MiB").expect("size"), 512 << 20);
        assert_eq!(parse_size("4096").expect("size"), 4096);
        assert_eq!(parse_size("1 GiB").expect("size"), 1 << 30);
        assert!(parse_size("12 parsecs").is_err());
        assert_eq!(
            parse_duration("250ms").expect("d"),
            Duration::from_millis(250)
        );
        assert_eq!(
            parse_duration("1.5s").expect("d"),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("2m").expect("d"), Duration::from_secs(120));
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn registrations_parse_with_per_component_settings() {
        let r = parse_registration("math=rewards/math.wasm,timeout=2s,retries=1,memory=64MiB")
            .expect("parse");
        assert_eq!(r.name, "math");
        assert_eq!(r.path, PathBuf::from("rewards/math.wasm"));
        assert_eq!(r.policy.retries, 1);
        assert_eq!(r.policy.limits.timeout, Duration::from_secs(2));
        assert_eq!(r.policy.limits.max_memory_bytes, 64 << 20);
        let t = parse_tool_registration("py=x.wasm").expect("tool defaults");
        assert_eq!(t.policy.retries, 0);
        assert_eq!(t.policy.limits.timeout, Duration::from_secs(5));
        assert_eq!(t.policy.limits.max_memory_bytes, 128 << 20);
        let t = parse_tool_registration("py=x.wasm,timeout=30s,retries=1").expect("tool");
        assert_eq!(
            (t.policy.limits.timeout, t.policy.retries),
            (Duration::from_secs(30), 1)
        );
        let d = parse_registration("m=x.wasm").expect("defaults");
        assert_eq!(d.policy.retries, 3);
        assert_eq!(d.policy.limits.timeout, Duration::from_secs(15));
        assert!(parse_registration("x.wasm").is_err());
        // A built-in's name alone registers it under that name.
        let b = parse_registration("math,timeout=5s").expect("a built-in");
        assert_eq!(
            (b.name.as_str(), b.path.clone()),
            ("math", PathBuf::from("math"))
        );
        assert_eq!(b.policy.limits.timeout, Duration::from_secs(5));
        assert!(parse_registration("m=x.wasm,colour=red").is_err());
    }

    /// Every limit flag lands in the `Limits` field it names, changed from the default (the
    /// runtime's tests enforce each field), so no flag is accepted and dropped on the way.
    #[test]
    fn every_limit_flag_changes_its_limit() {
        type Set = fn(&mut LimitArgs);
        type Get = fn(&Limits) -> String;
        let table: [(&str, Set, Get); 10] = [
            (
                "max_memory",
                |a| a.max_memory = Some("64MiB".into()),
                |l| l.max_memory_bytes.to_string(),
            ),
            (
                "timeout",
                |a| a.timeout = Some("2s".into()),
                |l| format!("{:?}", l.timeout),
            ),
            ("fuel", |a| a.fuel = Some(1000), |l| format!("{:?}", l.fuel)),
            (
                "max_boundary_bytes",
                |a| a.max_boundary_bytes = Some("1MiB".into()),
                |l| l.max_boundary_bytes.to_string(),
            ),
            (
                "max_handles",
                |a| a.max_handles = Some(7),
                |l| l.max_handles.to_string(),
            ),
            (
                "max_tensor_bytes",
                |a| a.max_tensor_bytes = Some("1MiB".into()),
                |l| l.max_tensor_bytes.to_string(),
            ),
            (
                "max_generate_calls",
                |a| a.max_generate_calls = Some(3),
                |l| l.max_generate_calls.to_string(),
            ),
            (
                "max_episode_tokens",
                |a| a.max_episode_tokens = Some(9),
                |l| l.max_generated_tokens.to_string(),
            ),
            (
                "max_output_bytes",
                |a| a.max_output_bytes = Some("1KiB".into()),
                |l| format!("{} {}", l.max_stdout_bytes, l.max_stderr_bytes),
            ),
            (
                "max_tokenizer_bytes",
                |a| a.max_tokenizer_bytes = Some("4KiB".into()),
                |l| l.max_tokenizer_input_bytes.to_string(),
            ),
        ];
        for (name, set, get) in table {
            let mut args = LimitArgs::default();
            set(&mut args);
            let l = args.to_limits().expect(name);
            assert_ne!(get(&l), get(&Limits::default()), "--{name} changed nothing");
        }
        // Registrations: each option changes its own setting.
        let d = parse_registration("m=x.wasm").expect("defaults");
        type Changed = fn(&Registration) -> bool;
        let options: [(&str, Changed); 4] = [
            ("timeout=2s", |r: &Registration| {
                r.policy.limits.timeout != Duration::from_secs(15)
            }),
            ("retries=0", |r: &Registration| r.policy.retries != 3),
            ("memory=64MiB", |r: &Registration| {
                r.policy.limits.max_memory_bytes != 256 << 20
            }),
            ("fuel=1000", |r: &Registration| {
                r.policy.limits.fuel.is_some()
            }),
        ];
        for (opt, changed) in options {
            assert!(!changed(&d));
            let r = parse_registration(&format!("m=x.wasm,{opt}")).expect(opt);
            assert!(changed(&r), "{opt} changed nothing");
        }
    }

    #[test]
    fn flags_override_defaults_and_are_validated() {
        let args = LimitArgs {
            max_memory: Some("64MiB".into()),
            timeout: Some("2s".into()),
            max_generate_calls: Some(3),
            ..LimitArgs::default()
        };
        let l = args.to_limits().expect("valid");
        assert_eq!(l.max_memory_bytes, 64 << 20);
        assert_eq!(l.timeout, Duration::from_secs(2));
        assert_eq!(l.max_generate_calls, 3);
        let bad = LimitArgs {
            max_memory: Some("8GiB".into()),
            ..LimitArgs::default()
        };
        assert!(bad.to_limits().is_err());
    }
}
