//! Limits set by key ([`LimitSpec`]: what a spec, a registration or a flag gives, applied over
//! a base) and [`Caps`] (ceilings on a caller's limits that never loosen one).

use std::collections::BTreeMap;

use crate::limits::{LimitKey, LimitUnit, LimitValue, Limits};

/// Limits set by key, applied over a base ([`Limits::default`] for episodes, the kind's
/// defaults for rewards and tools). Unset keys keep the base's value.
///
/// Deserialises from a map of [`LIMIT_KEYS`](crate::LIMIT_KEYS) to values: sizes as a number of bytes or text
/// (`"512MiB"`), durations as seconds or text (`"1.5s"`), counts as numbers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitSpec(BTreeMap<&'static str, LimitValue>);

/// Why a limit could not be set.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitError {
    /// No limit has this key.
    Unknown(String),
    /// The value is not one of the limit's unit.
    Value(String),
}

impl std::fmt::Display for LimitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitError::Unknown(k) => {
                write!(f, "unknown limit `{k}`; use {}", LimitKey::names())
            }
            LimitError::Value(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for LimitError {}

impl LimitSpec {
    /// Set limit `key` (a key of [`LIMIT_KEYS`](crate::LIMIT_KEYS), or `memory`) to `value`.
    pub fn set(&mut self, key: &str, value: LimitValue) -> Result<(), LimitError> {
        let k = LimitKey::find(key).ok_or_else(|| LimitError::Unknown(key.to_string()))?;
        self.0.insert(k.key, value);
        Ok(())
    }

    /// Set limit `key` from its text (`512MiB`, `1.5s`, `1000`).
    pub fn set_text(&mut self, key: &str, text: &str) -> Result<(), LimitError> {
        let k = LimitKey::find(key).ok_or_else(|| LimitError::Unknown(key.to_string()))?;
        let v = k
            .parse(text)
            .map_err(|e| LimitError::Value(format!("{}: {e}", k.key)))?;
        self.0.insert(k.key, v);
        Ok(())
    }

    /// The value set for `key`, if any.
    pub fn get(&self, key: &str) -> Option<LimitValue> {
        LimitKey::find(key).and_then(|k| self.0.get(k.key).copied())
    }

    /// Whether fuel is set.
    pub fn sets_fuel(&self) -> bool {
        self.0.contains_key("fuel")
    }

    /// `base` with every limit set here, validated.
    pub fn apply(&self, mut base: Limits) -> anyhow::Result<Limits> {
        for (key, value) in &self.0 {
            let k = LimitKey::find(key)
                .ok_or_else(|| anyhow::anyhow!("{key} is a key of the table"))?;
            k.set(&mut base, *value);
        }
        if let Err(e) = base.validate() {
            anyhow::bail!("{e}");
        }
        Ok(base)
    }
}

impl<'de> serde::Deserialize<'de> for LimitSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let map = BTreeMap::<String, serde_json::Value>::deserialize(d)?;
        let mut spec = LimitSpec::default();
        for (key, value) in map {
            let k = LimitKey::find(&key)
                .ok_or_else(|| D::Error::custom(LimitError::Unknown(key.clone()).to_string()))?;
            let v = match (&value, k.unit) {
                (serde_json::Value::Number(n), LimitUnit::Duration) => n
                    .as_f64()
                    .map(|s| format!("{s}s"))
                    .map(|t| k.parse(&t))
                    .ok_or_else(|| format!("`{n}` is not a number of seconds"))
                    .and_then(|r| r),
                (serde_json::Value::Number(n), _) => n
                    .as_u64()
                    .map(LimitValue::Number)
                    .ok_or_else(|| format!("`{n}` is not a whole number")),
                (serde_json::Value::String(s), _) => k.parse(s),
                (other, _) => Err(format!("`{other}` is not a number or a string")),
            }
            .map_err(|e| D::Error::custom(format!("{}: {e}", k.key)))?;
            spec.0.insert(k.key, v);
        }
        Ok(spec)
    }
}

impl LimitSpec {
    /// The limits set here, key by key.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, LimitValue)> + '_ {
        self.0.iter().map(|(k, v)| (*k, *v))
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Both sets of limits at once: a key set in both takes the tighter value.
    pub fn and(&self, other: &LimitSpec) -> LimitSpec {
        let mut out = self.clone();
        for (key, value) in other.iter() {
            let v = match out.0.get(key) {
                Some(LimitValue::Number(a)) => match value {
                    LimitValue::Number(b) => LimitValue::Number((*a).min(b)),
                    d => d,
                },
                Some(LimitValue::Duration(a)) => match value {
                    LimitValue::Duration(b) => LimitValue::Duration((*a).min(b)),
                    n => n,
                },
                None => value,
            };
            out.0.insert(key, v);
        }
        out
    }
}

/// Ceilings on what a caller's episodes and calls may use (a shared server's tenant, a
/// request's own smaller limits): each limit key set here lowers that limit to its value and
/// never raises it ([`Limits::capped`]); `retries` caps a registered reward's or tool's
/// retries the same way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Caps {
    /// Limit ceilings by [`LIMIT_KEYS`](crate::LIMIT_KEYS) key.
    pub limits: LimitSpec,
    /// Retries after a failed attempt, at most.
    pub retries: Option<u32>,
}

impl Caps {
    /// Whether these caps change nothing.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.retries.is_none()
    }

    /// Both caps at once: the tighter of each.
    pub fn and(&self, other: &Caps) -> Caps {
        Caps {
            limits: self.limits.and(&other.limits),
            retries: match (self.retries, other.retries) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

impl Limits {
    /// These limits with each key `caps` sets lowered to its value, never raised: a limit
    /// already tighter than its cap stays as it is.
    pub fn capped(&self, caps: &LimitSpec) -> Limits {
        let mut set = self.clone();
        for (key, value) in caps.iter() {
            if let Some(k) = LimitKey::find(key) {
                k.set(&mut set, value);
            }
        }
        self.meet(&set)
    }
}
