//! Per-instance limits: every guest-controlled size, count and duration has a named setting
//! with a documented default here.

use std::time::Duration;

/// Upper bound on `max_memory`: a wasm32 linear memory cannot exceed 4 GiB, and the
/// pooling allocator reserves address space for this size.
pub const MAX_MEMORY_BYTES_CAP: u64 = 4 << 30;

/// Limits applied to one workflow episode (one store, one instance).
///
/// Soft limits (generate calls, tokens, tensors, log lines) are reported to the guest as a
/// `limit-exceeded` error value the first time; a guest that keeps going after a refusal is
/// trapped. Hard limits (memory, time, fuel, boundary bytes) end the instance with a typed
/// error naming the setting to raise.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Linear memory per instance, bytes. Default 512 MiB (`--max-memory`). Guards the node's
    /// memory against a guest that allocates without bound.
    pub max_memory: u64,
    /// Wall-clock time per episode, including host calls. Default 600 s (`--timeout`). Enforced
    /// by epoch interruption, so a spinning guest is really stopped.
    pub timeout: Duration,
    /// Fuel (roughly wasm instructions) per episode; `None` = unmetered. Default none
    /// (`--fuel`). Deterministic CPU budget; turning it on instruments all compiled code.
    pub fuel: Option<u64>,
    /// Bytes a guest may move into the host in one call, arguments or results
    /// (wasmtime hostcall fuel). Default 64 MiB (`--max-boundary-bytes`). Guards against huge
    /// strings and lists.
    pub max_boundary_bytes: usize,
    /// Live resource handles (tensors) per instance. Default 10 000 (`--max-handles`).
    pub max_handles: usize,
    /// Total bytes of host tensors an episode may create. Default 1 GiB
    /// (`--max-tensor-bytes`).
    pub max_tensor_bytes: usize,
    /// `generate` requests per episode (each request of `generate-many` counts). Default 1 024
    /// (`--max-generate-calls`).
    pub max_generate_calls: u32,
    /// `score` calls per episode (each runs a reward component in a fresh sandbox, and the
    /// episode's report keeps one record per call). Default 1 024 (`--max-reward-calls`).
    pub max_reward_calls: u32,
    /// Generated tokens per episode across all requests. Default 1 048 576
    /// (`--max-episode-tokens`).
    pub max_episode_tokens: u64,
    /// Captured bytes of stdout, and of stderr, per episode; output past this is dropped and
    /// counted, never an error for the guest. Default 64 KiB each (`--max-output-bytes`).
    pub max_output_bytes: usize,
    /// Log lines and stats per episode; more are counted and dropped. Default 1 000.
    pub max_log_lines: usize,
    /// Bytes per log line or stat key; longer ones are truncated. Default 4 KiB.
    pub max_log_line_bytes: usize,
    /// Bytes of input one tokenizer call takes (text to encode, chat messages and their
    /// options, 4 per id to decode); more is refused with `limit-exceeded`. Default 1 MiB
    /// (`--max-tokenizer-bytes`; a 128k-token prompt is ~0.5 MiB). Guards the host's CPU: an
    /// encode cannot be interrupted once started (~1.3 µs per byte here), so this bounds how
    /// long one call can run past the episode's deadline.
    pub max_tokenizer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

impl Limits {
    /// The tighter of `self` and `other`, field by field (no fuel budget is the loosest).
    pub(crate) fn meet(&self, other: &Limits) -> Limits {
        let Limits {
            max_memory,
            timeout,
            fuel,
            max_boundary_bytes,
            max_handles,
            max_tensor_bytes,
            max_generate_calls,
            max_reward_calls,
            max_episode_tokens,
            max_output_bytes,
            max_log_lines,
            max_log_line_bytes,
            max_tokenizer_bytes,
        } = other;
        Limits {
            max_memory: self.max_memory.min(*max_memory),
            timeout: self.timeout.min(*timeout),
            fuel: match (self.fuel, *fuel) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            max_boundary_bytes: self.max_boundary_bytes.min(*max_boundary_bytes),
            max_handles: self.max_handles.min(*max_handles),
            max_tensor_bytes: self.max_tensor_bytes.min(*max_tensor_bytes),
            max_generate_calls: self.max_generate_calls.min(*max_generate_calls),
            max_reward_calls: self.max_reward_calls.min(*max_reward_calls),
            max_episode_tokens: self.max_episode_tokens.min(*max_episode_tokens),
            max_output_bytes: self.max_output_bytes.min(*max_output_bytes),
            max_log_lines: self.max_log_lines.min(*max_log_lines),
            max_log_line_bytes: self.max_log_line_bytes.min(*max_log_line_bytes),
            max_tokenizer_bytes: self.max_tokenizer_bytes.min(*max_tokenizer_bytes),
        }
    }

    /// The defaults for workflow episodes (`Limits::default()`), as a constant.
    pub const DEFAULT: Limits = Limits {
        max_memory: 512 << 20,
        timeout: Duration::from_secs(600),
        fuel: None,
        max_boundary_bytes: 64 << 20,
        max_handles: 10_000,
        max_tensor_bytes: 1 << 30,
        max_generate_calls: 1024,
        max_reward_calls: 1024,
        max_episode_tokens: 1 << 20,
        max_output_bytes: 64 << 10,
        max_log_lines: 1000,
        max_log_line_bytes: 4 << 10,
        max_tokenizer_bytes: 1 << 20,
    };

    /// Defaults for sandboxed reward and tool calls: 15 s, 256 MiB, 1 MiB across the boundary,
    /// no tensors and no generation (AReaL's `AsyncRewardWrapper` timeout).
    pub fn untrusted_call() -> Self {
        Limits {
            max_memory: 256 << 20,
            timeout: Duration::from_secs(15),
            fuel: None,
            max_boundary_bytes: 1 << 20,
            max_handles: 100,
            max_tensor_bytes: 0,
            max_generate_calls: 0,
            max_reward_calls: 0,
            max_episode_tokens: 0,
            max_output_bytes: 16 << 10,
            max_log_lines: 100,
            max_log_line_bytes: 4 << 10,
            max_tokenizer_bytes: 1 << 20,
        }
    }

    /// Defaults for tool calls: [`Limits::untrusted_call`] with 5 s and 128 MiB. An agent waits
    /// on every call, and model-written code that runs longer is a loop more often than not.
    pub fn untrusted_tool() -> Self {
        Limits {
            max_memory: 128 << 20,
            timeout: Duration::from_secs(5),
            ..Self::untrusted_call()
        }
    }

    /// Check that the settings are usable, naming the first one that is not.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_memory == 0 || self.max_memory > MAX_MEMORY_BYTES_CAP {
            return Err(format!(
                "max memory {} bytes is out of range: use 1 byte ..= 4 GiB (wasm32 linear memory)",
                self.max_memory
            ));
        }
        if self.timeout.is_zero() {
            return Err("timeout must be greater than zero".into());
        }
        if self.max_boundary_bytes == 0 {
            return Err("max boundary bytes must be greater than zero".into());
        }
        if self.fuel == Some(0) {
            return Err("fuel must be greater than zero (omit it to run unmetered)".into());
        }
        Ok(())
    }
}

/// A setting a library message names, so that each entry point can phrase the hint to change
/// it in its own words: the CLI as a flag (`--max-memory`), Python as a keyword
/// (`limits={"max_memory": ...}`), a spec or HTTP body as a JSON key. [`Setting`]'s `Display`
/// is the spec's own vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Setting {
    /// A limit of each episode or call: a key of [`LIMIT_KEYS`].
    Limit(&'static str),
    /// The host-wide memory budget (`max_host_memory`).
    HostMemory,
    /// Episodes in flight at once (`max_concurrent`).
    Concurrency,
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Setting::Limit(key) => write!(f, "the `{key}` limit"),
            Setting::HostMemory => f.write_str("the host memory budget (`max_host_memory`)"),
            Setting::Concurrency => f.write_str("`max_concurrent`"),
        }
    }
}

/// How a limit's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitUnit {
    /// Bytes: `123`, `64KiB`, `512MiB`, `1GiB` ([`parse_size`]).
    Bytes,
    /// A duration: `600s`, `1.5s`, `250ms`, `2m`, or plain seconds ([`parse_duration`]).
    Duration,
    /// A plain count.
    Count,
}

/// A limit's value, in its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitValue {
    /// Bytes or a count.
    Number(u64),
    /// A duration.
    Duration(Duration),
}

impl LimitValue {
    fn number(self) -> u64 {
        match self {
            LimitValue::Number(n) => n,
            LimitValue::Duration(d) => d.as_secs(),
        }
    }

    fn duration(self) -> Duration {
        match self {
            LimitValue::Duration(d) => d,
            LimitValue::Number(n) => Duration::from_secs(n),
        }
    }
}

/// One limit a user sets: its key (`max_memory`; the flag `--max-memory`, the keyword
/// `limits={"max_memory": ...}`), what it bounds, its unit, and the [`Limits`] field it sets.
/// [`LIMIT_KEYS`] is every one of them: an entry point that takes limits takes them from this
/// table, so a limit added here reaches the CLI, the config file, Python and the spec at once.
#[derive(Debug)]
pub struct LimitKey {
    /// The key, `snake_case`.
    pub key: &'static str,
    /// What it bounds, a short sentence.
    pub help: &'static str,
    /// How its value is written.
    pub unit: LimitUnit,
    set: fn(&mut Limits, LimitValue),
    get: fn(&Limits) -> LimitValue,
}

fn bytes(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A per-episode call count, saturating at `u32::MAX`.
fn calls(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Every limit a user can set, in the order help texts list them.
pub const LIMIT_KEYS: &[LimitKey] = &[
    LimitKey {
        key: "max_memory",
        help: "Linear memory per instance (e.g. 512MiB, 1GiB)",
        unit: LimitUnit::Bytes,
        set: |l, v| l.max_memory = v.number(),
        get: |l| LimitValue::Number(l.max_memory),
    },
    LimitKey {
        key: "timeout",
        help: "Wall-clock time per episode or call (e.g. 600s, 1.5s, 250ms)",
        unit: LimitUnit::Duration,
        set: |l, v| l.timeout = v.duration(),
        get: |l| LimitValue::Duration(l.timeout),
    },
    LimitKey {
        key: "fuel",
        help: "Fuel (about one per wasm instruction) per episode or call; turns fuel metering on",
        unit: LimitUnit::Count,
        set: |l, v| l.fuel = Some(v.number()),
        get: |l| LimitValue::Number(l.fuel.unwrap_or(0)),
    },
    LimitKey {
        key: "max_boundary_bytes",
        help: "Bytes a guest may move into the host in one call",
        unit: LimitUnit::Bytes,
        set: |l, v| l.max_boundary_bytes = bytes(v.number()),
        get: |l| LimitValue::Number(l.max_boundary_bytes as u64),
    },
    LimitKey {
        key: "max_handles",
        help: "Live tensor handles per episode",
        unit: LimitUnit::Count,
        set: |l, v| l.max_handles = bytes(v.number()),
        get: |l| LimitValue::Number(l.max_handles as u64),
    },
    LimitKey {
        key: "max_tensor_bytes",
        help: "Bytes of tensors an episode may create",
        unit: LimitUnit::Bytes,
        set: |l, v| l.max_tensor_bytes = bytes(v.number()),
        get: |l| LimitValue::Number(l.max_tensor_bytes as u64),
    },
    LimitKey {
        key: "max_generate_calls",
        help: "Generate requests per episode",
        unit: LimitUnit::Count,
        set: |l, v| l.max_generate_calls = calls(v.number()),
        get: |l| LimitValue::Number(u64::from(l.max_generate_calls)),
    },
    LimitKey {
        key: "max_reward_calls",
        help: "Reward calls per episode",
        unit: LimitUnit::Count,
        set: |l, v| l.max_reward_calls = calls(v.number()),
        get: |l| LimitValue::Number(u64::from(l.max_reward_calls)),
    },
    LimitKey {
        key: "max_episode_tokens",
        help: "Generated tokens per episode",
        unit: LimitUnit::Count,
        set: |l, v| l.max_episode_tokens = v.number(),
        get: |l| LimitValue::Number(l.max_episode_tokens),
    },
    LimitKey {
        key: "max_output_bytes",
        help: "Captured stdout and stderr bytes each per episode",
        unit: LimitUnit::Bytes,
        set: |l, v| l.max_output_bytes = bytes(v.number()),
        get: |l| LimitValue::Number(l.max_output_bytes as u64),
    },
    LimitKey {
        key: "max_tokenizer_bytes",
        help: "Input bytes one tokenizer call takes (encode text, chat messages)",
        unit: LimitUnit::Bytes,
        set: |l, v| l.max_tokenizer_bytes = bytes(v.number()),
        get: |l| LimitValue::Number(l.max_tokenizer_bytes as u64),
    },
];

impl LimitKey {
    /// The entry of `key` (`memory` is `max_memory`'s short name); `None` for an unknown key.
    pub fn find(key: &str) -> Option<&'static LimitKey> {
        let key = if key == "memory" { "max_memory" } else { key };
        LIMIT_KEYS.iter().find(|k| k.key == key)
    }

    /// The keys, for messages: `max_memory, timeout, ...`.
    pub fn names() -> String {
        LIMIT_KEYS
            .iter()
            .map(|k| k.key)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `text` as a value of this limit's unit.
    pub fn parse(&self, text: &str) -> Result<LimitValue, String> {
        match self.unit {
            LimitUnit::Bytes => parse_size(text).map(|n| LimitValue::Number(n as u64)),
            LimitUnit::Duration => parse_duration(text).map(LimitValue::Duration),
            LimitUnit::Count => text
                .trim()
                .parse()
                .map(LimitValue::Number)
                .map_err(|_| format!("`{text}` is not a whole number")),
        }
    }

    /// Set this limit in `limits`.
    pub fn set(&self, limits: &mut Limits, value: LimitValue) {
        (self.set)(limits, value)
    }

    /// This limit's value in `limits`.
    pub fn get(&self, limits: &Limits) -> LimitValue {
        (self.get)(limits)
    }

    /// This limit's value in `limits` the way it is written (`512MiB`, `600s`, `1024`;
    /// `unmetered` for no fuel).
    pub fn show(&self, limits: &Limits) -> String {
        match (self.key, self.get(limits)) {
            ("fuel", _) if limits.fuel.is_none() => "unmetered".into(),
            (_, LimitValue::Duration(d)) => format!("{}s", d.as_secs_f64()),
            (_, LimitValue::Number(n)) if self.unit == LimitUnit::Bytes => show_size(n),
            (_, LimitValue::Number(n)) => n.to_string(),
        }
    }
}

/// `n` bytes the way sizes are written (`512MiB`).
pub fn show_size(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => n.to_string(),
    }
}

/// `123`, `64KiB`, `512MiB`, `1GiB` (also `KB`/`MB`/`GB` as powers of 1000).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 512MiB"))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "kb" => 1000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{s}`; use B, KiB, MiB or GiB"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// `600s`, `1.5s`, `250ms`, `2m`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
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
        .map_err(|_| format!("`{s}` is not a duration like 30s or 250ms"))?;
    if !v.is_finite() || v <= 0.0 || v * scale > 1e9 {
        return Err(format!("`{s}` must be a positive duration under 30 years"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// Whether a runtime with fuel metering `fuel` on or off can enforce `limits`: a fuel budget
/// needs metering.
pub(crate) fn enforceable(fuel: bool, limits: &Limits) -> Result<(), String> {
    match limits.fuel {
        Some(budget) if !fuel => Err(format!(
            "a fuel budget of {budget} was given, but this runtime was built without fuel \
             metering; build it with `RuntimeConfig {{ fuel: true, .. }}` whenever any \
             limit or registration sets fuel"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit_spec::LimitSpec;

    #[test]
    fn defaults_are_valid_and_reward_defaults_match_areal() {
        assert_eq!(Limits::default().validate(), Ok(()));
        let r = Limits::untrusted_call();
        assert_eq!(r.validate(), Ok(()));
        assert_eq!(r.timeout, Duration::from_secs(15));
        assert_eq!(r.max_memory, 256 << 20);
    }

    #[test]
    fn invalid_settings_are_named() {
        let l = Limits {
            max_memory: 5 << 30,
            ..Limits::default()
        };
        assert!(l.validate().expect_err("too big").contains("4 GiB"));
        let l = Limits {
            timeout: Duration::ZERO,
            ..Limits::default()
        };
        assert!(l.validate().expect_err("zero").contains("timeout"));
        let l = Limits {
            fuel: Some(0),
            ..Limits::default()
        };
        assert!(l.validate().expect_err("fuel").contains("fuel"));
    }

    /// Every key sets the field it names: each changes `Limits` from the default, and reads
    /// back as set.
    #[test]
    fn every_limit_key_sets_its_field() {
        for k in LIMIT_KEYS {
            let text = match k.unit {
                LimitUnit::Bytes => "12KiB",
                LimitUnit::Duration => "2s",
                LimitUnit::Count => "7",
            };
            let v = k.parse(text).expect(k.key);
            let mut l = Limits::default();
            k.set(&mut l, v);
            assert_ne!(l, Limits::default(), "{} changed nothing", k.key);
            assert_eq!(k.get(&l), v, "{}", k.key);
            assert_eq!(LimitKey::find(k.key).map(|f| f.key), Some(k.key));
        }
        assert_eq!(LimitKey::find("memory").map(|k| k.key), Some("max_memory"));
        assert!(LimitKey::find("colour").is_none());
        let m = LimitKey::find("max_memory").expect("memory");
        assert_eq!(m.show(&Limits::default()), "512MiB");
        assert!(m.parse("12 parsecs").is_err());
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("-1s").is_err() && parse_duration("1e300").is_err());
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
    }

    #[test]
    fn caps_lower_every_key_and_never_raise_one() {
        for base in [
            Limits::DEFAULT,
            Limits::untrusted_call(),
            Limits::untrusted_tool(),
        ] {
            for k in LIMIT_KEYS {
                let mut loose = LimitSpec::default();
                let value = match k.unit {
                    LimitUnit::Duration => LimitValue::Duration(Duration::from_secs(1 << 40)),
                    _ => LimitValue::Number(u64::MAX),
                };
                loose.set(k.key, value).expect("a key");
                let capped = base.capped(&loose);
                let unchanged = match k.key {
                    // No fuel budget is the loosest: any cap sets one.
                    "fuel" => Limits {
                        fuel: Some(u64::MAX),
                        ..base.clone()
                    },
                    _ => base.clone(),
                };
                assert_eq!(capped, unchanged, "a loose `{}` cap changes nothing", k.key);
                let mut tight = LimitSpec::default();
                let value = match k.unit {
                    LimitUnit::Duration => LimitValue::Duration(Duration::from_millis(1)),
                    _ => LimitValue::Number(1),
                };
                tight.set(k.key, value).expect("a key");
                let capped = base.capped(&tight);
                let at_most = match (k.get(&capped), value) {
                    (LimitValue::Duration(c), LimitValue::Duration(v)) => c <= v,
                    (LimitValue::Number(c), LimitValue::Number(v)) => c <= v,
                    _ => false,
                };
                assert!(at_most, "`{}` is at most its cap: {capped:?}", k.key);
                assert_eq!(base.meet(&capped), capped, "no field rose: {capped:?}");
                // Capping what is already capped changes nothing; so does the looser cap after.
                assert_eq!(capped.capped(&tight), capped);
                assert_eq!(capped.capped(&loose), capped, "`{}` never raised", k.key);
            }
        }
        let mut a = LimitSpec::default();
        a.set("timeout", LimitValue::Duration(Duration::from_secs(5)))
            .expect("a key");
        let mut b = LimitSpec::default();
        b.set("timeout", LimitValue::Duration(Duration::from_secs(2)))
            .expect("a key");
        b.set("memory", LimitValue::Number(1 << 20)).expect("a key");
        let both = a.and(&b);
        assert_eq!(
            both.get("timeout"),
            Some(LimitValue::Duration(Duration::from_secs(2)))
        );
        assert_eq!(both.get("max_memory"), Some(LimitValue::Number(1 << 20)));
    }
}
