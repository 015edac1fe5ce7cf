//! The limit flags (`--max-memory`, `--timeout`, `--fuel`, ...), one per entry of the runtime's
//! [`LIMIT_KEYS`] table, and the `--reward`/`--tool` registrations.

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use rollbox_host::{ComponentSpec, HOST_KEYS, HostSpec, LimitSpec};
use rollbox_runtime::limits::{LIMIT_KEYS, LimitKey, LimitUnit};
use rollbox_runtime::{Limits, Setting};

/// The limit flags, made from [`LIMIT_KEYS`]: a limit added to the table is a flag here, with
/// its help and default, without code in this crate. A key's flag is the key itself with
/// dashes (`max_memory`, `--max-memory`).
#[derive(Debug, Clone, Default)]
pub struct LimitArgs(pub LimitSpec);

impl Args for LimitArgs {
    fn augment_args(mut cmd: Command) -> Command {
        let d = Limits::DEFAULT;
        for k in LIMIT_KEYS {
            let help = format!("{}. Default {}.", k.help, k.show(&d));
            cmd = cmd.arg(key_arg(k.key, k.unit, help));
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for LimitArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut a = LimitArgs::default();
        a.update_from_arg_matches(m)?;
        Ok(a)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for k in LIMIT_KEYS {
            if let Some(text) = m.get_one::<String>(k.key) {
                self.0.set_text(k.key, text).map_err(|e| {
                    clap::Error::raw(
                        clap::error::ErrorKind::ValueValidation,
                        format!("--{}: {e}\n", flag(k.key)),
                    )
                })?;
            }
        }
        Ok(())
    }
}

/// The host-wide flags (`--max-host-memory`, `--max-instances`), one per entry of
/// [`HOST_KEYS`], as the limit flags are made from [`LIMIT_KEYS`]: each value is kept as given
/// and set on the spec by its key ([`HostSpec::set_host_text`]).
#[derive(Debug, Clone, Default)]
pub struct HostArgs(pub Vec<(&'static str, String)>);

impl HostArgs {
    /// Set each given setting on `spec`.
    pub fn apply(&self, spec: &mut HostSpec) -> anyhow::Result<()> {
        for (key, text) in &self.0 {
            spec.set_host_text(key, text)
                .map_err(|e| anyhow::anyhow!("--{}: {e}", flag(key)))?;
        }
        Ok(())
    }
}

impl Args for HostArgs {
    fn augment_args(mut cmd: Command) -> Command {
        for k in HOST_KEYS {
            cmd = cmd.arg(key_arg(k.key, k.unit, format!("{}.", k.help)));
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for HostArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut a = HostArgs::default();
        a.update_from_arg_matches(m)?;
        Ok(a)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for k in HOST_KEYS {
            if let Some(text) = m.get_one::<String>(k.key) {
                self.0.retain(|(key, _)| *key != k.key);
                self.0.push((k.key, text.clone()));
            }
        }
        Ok(())
    }
}

/// The flag of a setting's `key`, taking a value of `unit`, with `help`.
fn key_arg(key: &'static str, unit: LimitUnit, help: String) -> Arg {
    let value_name = match unit {
        LimitUnit::Bytes => "SIZE",
        LimitUnit::Duration => "DURATION",
        LimitUnit::Count => "N",
    };
    Arg::new(key)
        .long(flag(key))
        .value_name(value_name)
        .help(help)
}

/// The command-line flag of a setting's key, without `--`: the key with dashes.
pub fn flag(key: &str) -> String {
    key.replace('_', "-")
}

/// The hint to change `setting`, in this command line's flags.
pub fn hint(setting: &Setting) -> String {
    match setting {
        Setting::Limit(key) => match LimitKey::find(key) {
            Some(k) => format!("raise it with --{}", flag(k.key)),
            None => format!("raise {setting}"),
        },
        Setting::HostMemory => {
            "raise --max-host-memory or run fewer at once (--max-concurrent)".into()
        }
        Setting::Concurrency => "lower --max-concurrent".into(),
    }
}

/// A `--reward` registration `NAME=PATH[,key=value...]`, or a built-in's `NAME[,...]`
/// (AReaL's reward defaults: 15 s, 256 MiB, 3 retries).
pub fn parse_registration(s: &str) -> Result<(String, ComponentSpec), String> {
    let head = s.split(',').next().unwrap_or_default();
    // `NAME` alone: the built-in component of that name (a name, not a path).
    let bare = !head.contains('=')
        && head
            .trim()
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let (name, rest) = match s.split_once('=') {
        Some((name, rest)) if head.contains('=') => (name, rest),
        _ if bare => (head, s),
        _ => ("", s),
    };
    if name.trim().is_empty() {
        return Err(format!(
            "`{s}` should be NAME=PATH or a built-in's NAME [,timeout=15s,retries=3,memory=256MiB,fuel=N]"
        ));
    }
    Ok((name.trim().to_string(), ComponentSpec::parse(rest)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    use rollbox_runtime::CallPolicy;

    #[test]
    fn registrations_parse_with_per_component_settings() {
        let (name, c) =
            parse_registration("math=rewards/math.wasm,timeout=2s,retries=1,memory=64MiB")
                .expect("parse");
        assert_eq!(
            (name.as_str(), c.path.clone()),
            ("math", PathBuf::from("rewards/math.wasm"))
        );
        let p = c.policy(CallPolicy::default()).expect("policy");
        assert_eq!((p.retries, p.limits.timeout), (1, Duration::from_secs(2)));
        assert_eq!(p.limits.max_memory, 64 << 20);
        assert!(parse_registration("x.wasm").is_err());
        // A built-in's name alone registers it under that name.
        let (name, b) = parse_registration("math,timeout=5s").expect("a built-in");
        assert_eq!((name.as_str(), b.path), ("math", PathBuf::from("math")));
        assert!(parse_registration("m=x.wasm,colour=red").is_err());
    }

    /// Every flag of the table is on the command line and lands in the limit it names.
    #[test]
    fn every_limit_flag_sets_its_limit() {
        let cmd = LimitArgs::augment_args(Command::new("t"));
        for k in LIMIT_KEYS {
            let value = match k.unit {
                LimitUnit::Bytes => "12KiB",
                LimitUnit::Duration => "2s",
                LimitUnit::Count => "7",
            };
            let m = cmd
                .clone()
                .try_get_matches_from(["t", &format!("--{}", flag(k.key)), value])
                .expect(k.key);
            let a = LimitArgs::from_arg_matches(&m).expect(k.key);
            let l = a.0.apply(Limits::default()).expect(k.key);
            assert_ne!(l, Limits::default(), "--{} changed nothing", k.key);
        }
        let m = cmd
            .try_get_matches_from(["t", "--max-memory", "8GiB", "--timeout", "lunch"])
            .expect("parsed as text");
        let e = LimitArgs::from_arg_matches(&m).expect_err("bad value");
        assert!(e.to_string().contains("--timeout"), "{e}");
    }

    /// Every host-wide flag is on the command line and lands in the spec's field of that name.
    #[test]
    fn every_host_flag_sets_its_setting() {
        let cmd = HostArgs::augment_args(Command::new("t"));
        let m = cmd
            .clone()
            .try_get_matches_from(["t", "--max-host-memory", "1GiB", "--max-instances", "7"])
            .expect("flags");
        let mut spec = HostSpec::new("w.wasm");
        HostArgs::from_arg_matches(&m)
            .expect("parsed")
            .apply(&mut spec)
            .expect("applied");
        assert_eq!(
            (spec.max_host_memory, spec.max_instances),
            (Some(1 << 30), Some(7))
        );
        assert_eq!(
            HOST_KEYS.len(),
            2,
            "a new host-wide key needs its case here"
        );
        let m = cmd
            .try_get_matches_from(["t", "--max-instances", "many"])
            .expect("parsed as text");
        let e = HostArgs::from_arg_matches(&m)
            .expect("kept as text")
            .apply(&mut spec)
            .expect_err("not a number");
        assert!(e.to_string().contains("--max-instances"), "{e}");
    }
}
