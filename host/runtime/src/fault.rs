//! Classification of how a guest call ended badly: a typed [`GuestFault`] that names what
//! happened and, with [`GuestFault::setting`], which setting to raise; each entry point phrases
//! that hint in its own words (a flag, a keyword argument, a JSON key). The host never panics
//! on guest behaviour; every failure of a guest call lands here.

use std::time::Duration;

use serde::Serialize;
use wasmtime::Trap;

use crate::limits::Setting;

/// A soft limit was refused twice: the guest ignored the first refusal.
#[derive(Debug, thiserror::Error)]
#[error("{0}; the guest kept going after this limit was reported to it")]
pub(crate) struct LimitTrap(pub String, pub Setting);

/// A linear memory could not grow because the host-wide memory budget is exhausted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct HostMemoryExhausted(pub String);

/// A guest tried to grow its memory past its `max_memory` limit.
#[derive(Debug, thiserror::Error)]
#[error("linear memory limit of {limit} bytes exceeded (the guest asked for {requested} bytes)")]
pub(crate) struct MemoryLimitExceeded {
    /// The limit, bytes.
    pub limit: usize,
    /// The size the guest asked for, bytes.
    pub requested: usize,
}

/// Why a guest call failed.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GuestFault {
    /// The wall-clock limit was reached; the guest was interrupted.
    #[error("timed out after {} ms", limit_ms)]
    Timeout {
        /// The limit, milliseconds.
        limit_ms: u64,
    },
    /// The guest tried to grow a linear memory past its limit.
    #[error("{message}")]
    MemoryLimit {
        /// Details.
        message: String,
    },
    /// The guest ran out of fuel.
    #[error("ran out of fuel ({fuel} units)")]
    OutOfFuel {
        /// The fuel budget.
        fuel: u64,
    },
    /// The guest moved more bytes across the boundary in one call than allowed.
    #[error("moved more than {limit} bytes across the host boundary in one call")]
    BoundaryLimit {
        /// The limit, bytes.
        limit: usize,
    },
    /// A per-episode soft limit (generate calls, tokens, tensors) was reported to the guest and
    /// the guest kept going or failed.
    #[error("limit exceeded: {message}")]
    LimitExceeded {
        /// Which limit, in words.
        message: String,
        /// The setting that was exceeded.
        setting: Option<Setting>,
    },
    /// The guest's call stack overflowed.
    #[error("stack overflow (deep or infinite recursion)")]
    StackOverflow,
    /// The guest panicked or aborted (`unreachable` executed).
    #[error("guest panicked{}", detail_suffix(message))]
    Panic {
        /// The panic message from the guest's stderr, when there is one.
        message: String,
    },
    /// Any other trap.
    #[error("trap: {message}")]
    Trap {
        /// The trap and its wasm backtrace.
        message: String,
    },
    /// The guest called `exit`.
    #[error("guest exited with code {code}")]
    Exit {
        /// The exit code.
        code: i32,
    },
    /// The guest returned something the host cannot accept.
    #[error("invalid output: {message}")]
    InvalidOutput {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The guest returned an error of its own (`err(message)`).
    #[error("guest error: {message}")]
    GuestError {
        /// The guest's message (truncated).
        message: String,
    },
    /// The host could not create an instance (e.g. the instance pool is exhausted).
    #[error("could not instantiate: {message}")]
    Instantiate {
        /// The underlying error.
        message: String,
    },
    /// A limit was asked for that this runtime cannot enforce (a fuel budget on a runtime
    /// built without fuel metering). Nothing ran: a limit is enforced or refused, never
    /// silently ignored.
    #[error("limit not enforceable: {message}")]
    Unenforceable {
        /// Which limit and how to build a runtime that enforces it.
        message: String,
    },
}

fn detail_suffix(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

impl GuestFault {
    /// The fault in words, with what to change when a setting caused it: `hint` phrases the
    /// setting as the caller's entry point takes it (a flag, a keyword, a component option).
    pub fn explain(&self, hint: impl FnOnce(&Setting) -> String) -> String {
        match self.setting() {
            Some(s) => format!("{self}; {}", hint(&s)),
            None => self.to_string(),
        }
    }

    /// The setting to raise for this fault not to happen again, when a setting caused it:
    /// the entry point phrases the hint (`--timeout`, `limits={"timeout": ...}`).
    pub fn setting(&self) -> Option<Setting> {
        match self {
            GuestFault::Timeout { .. } => Some(Setting::Limit("timeout")),
            GuestFault::MemoryLimit { .. } => Some(Setting::Limit("max_memory")),
            GuestFault::OutOfFuel { .. } => Some(Setting::Limit("fuel")),
            GuestFault::BoundaryLimit { .. } => Some(Setting::Limit("max_boundary_bytes")),
            GuestFault::LimitExceeded { setting, .. } => setting.clone(),
            _ => None,
        }
    }

    /// A short stable name for counters and stats (`timeout`, `memory_limit`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            GuestFault::Timeout { .. } => "timeout",
            GuestFault::MemoryLimit { .. } => "memory_limit",
            GuestFault::OutOfFuel { .. } => "out_of_fuel",
            GuestFault::BoundaryLimit { .. } => "boundary_limit",
            GuestFault::LimitExceeded { .. } => "limit_exceeded",
            GuestFault::StackOverflow => "stack_overflow",
            GuestFault::Panic { .. } => "panic",
            GuestFault::Trap { .. } => "trap",
            GuestFault::Exit { .. } => "exit",
            GuestFault::InvalidOutput { .. } => "invalid_output",
            GuestFault::GuestError { .. } => "guest_error",
            GuestFault::Instantiate { .. } => "instantiate",
            GuestFault::Unenforceable { .. } => "unenforceable",
        }
    }
}

/// What the classifier needs to know about the call besides the error.
pub(crate) struct FaultContext<'a> {
    pub timeout: Duration,
    pub fuel: Option<u64>,
    pub max_boundary_bytes: usize,
    /// The first soft limit refused to the guest and its setting, if any.
    pub refused: Option<&'a (String, Setting)>,
    /// Captured stderr (a Rust panic message lands there).
    pub stderr: &'a str,
}

/// Whether the trap's wasm backtrace (its innermost frames) is one or two functions calling
/// each other over and over: at least 16 frames, all from at most two functions.
fn recursing(err: &wasmtime::Error) -> bool {
    let Some(bt) = err.downcast_ref::<wasmtime::WasmBacktrace>() else {
        return false;
    };
    let frames = bt.frames();
    if frames.len() < 16 {
        return false;
    }
    let mut seen: Vec<u32> = Vec::with_capacity(2);
    for f in &frames[..16] {
        if !seen.contains(&f.func_index()) {
            if seen.len() == 2 {
                return false;
            }
            seen.push(f.func_index());
        }
    }
    true
}

/// Turn a wasmtime error from instantiate or call into a typed fault.
pub(crate) fn classify(err: &wasmtime::Error, cx: &FaultContext<'_>) -> GuestFault {
    if let Some(m) = err.downcast_ref::<MemoryLimitExceeded>() {
        return GuestFault::MemoryLimit {
            message: m.to_string(),
        };
    }
    if let Some(l) = err.downcast_ref::<LimitTrap>() {
        return GuestFault::LimitExceeded {
            message: l.to_string(),
            setting: Some(l.1.clone()),
        };
    }
    if let Some(h) = err.downcast_ref::<HostMemoryExhausted>() {
        return GuestFault::LimitExceeded {
            message: h.to_string(),
            setting: Some(Setting::HostMemory),
        };
    }
    if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return GuestFault::Exit { code: exit.0 };
    }
    let full = format!("{err:#}");
    if let Some(trap) = err.downcast_ref::<Trap>() {
        match trap {
            Trap::Interrupt => {
                return GuestFault::Timeout {
                    limit_ms: cx.timeout.as_millis() as u64,
                };
            }
            Trap::OutOfFuel => {
                return GuestFault::OutOfFuel {
                    fuel: cx.fuel.unwrap_or(0),
                };
            }
            Trap::StackOverflow => return GuestFault::StackOverflow,
            // Rust and C guests keep a shadow stack in linear memory, growing down from its
            // start; running past it wraps the stack pointer to the top of the address space.
            // Depending on the frame, the faulting access lands just below 4 GiB, just above it,
            // or in a bulk-memory builtin that reports no address at all; the backtrace of a
            // runaway recursion gives it away in every case.
            Trap::MemoryOutOfBounds
                if full.contains("memory fault at wasm address 0xffff") || recursing(err) =>
            {
                return GuestFault::StackOverflow;
            }
            Trap::UnreachableCodeReached => {
                if let Some((refused, setting)) = cx.refused {
                    return GuestFault::LimitExceeded {
                        message: format!("{refused} (the guest then panicked)"),
                        setting: Some(setting.clone()),
                    };
                }
                return GuestFault::Panic {
                    message: panic_message(cx.stderr),
                };
            }
            _ => {
                return GuestFault::Trap {
                    message: truncate(&full, MAX_FAULT_MESSAGE_BYTES),
                };
            }
        }
    }
    if full.contains("fuel allocated for hostcalls") {
        return GuestFault::BoundaryLimit {
            limit: cx.max_boundary_bytes,
        };
    }
    if full.contains("instance count too high")
        || full.contains("maximum concurrent")
        || full.contains("pooling allocator")
    {
        return GuestFault::Instantiate {
            message: truncate(&full, MAX_FAULT_MESSAGE_BYTES),
        };
    }
    if let Some((refused, setting)) = cx.refused {
        return GuestFault::LimitExceeded {
            message: format!("{refused} ({})", truncate(&format!("{err}"), 512)),
            setting: Some(setting.clone()),
        };
    }
    GuestFault::Trap {
        message: truncate(&full, MAX_FAULT_MESSAGE_BYTES),
    }
}

/// Bytes of a fault message kept (the rest of a long backtrace is cut).
pub(crate) const MAX_FAULT_MESSAGE_BYTES: usize = 4 << 10;

/// The Rust panic line from captured stderr, if any.
fn panic_message(stderr: &str) -> String {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.contains("panicked at") || l.contains("panic"))
        .map(|l| {
            // The message follows on the next line in Rust >= 1.73 output.
            let after: Vec<&str> = stderr.split(l).nth(1).into_iter().collect();
            let next = after
                .first()
                .and_then(|rest| rest.lines().find(|x| !x.trim().is_empty()))
                .unwrap_or("");
            format!("{} {}", l.trim(), next.trim())
        })
        .unwrap_or_default();
    truncate(line.trim(), 1024)
}

/// Cut `s` to at most `max` bytes on a char boundary, marking the cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes cut)", &s[..end], s.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> FaultContext<'static> {
        FaultContext {
            timeout: Duration::from_millis(250),
            fuel: Some(1000),
            max_boundary_bytes: 10,
            refused: None,
            stderr: "",
        }
    }

    #[test]
    fn traps_map_to_typed_faults() {
        let t = |trap: Trap| classify(&wasmtime::Error::new(trap), &cx());
        assert_eq!(t(Trap::Interrupt), GuestFault::Timeout { limit_ms: 250 });
        assert_eq!(t(Trap::OutOfFuel), GuestFault::OutOfFuel { fuel: 1000 });
        assert_eq!(t(Trap::StackOverflow), GuestFault::StackOverflow);
        assert_eq!(t(Trap::UnreachableCodeReached).kind(), "panic");
        assert_eq!(t(Trap::IntegerDivisionByZero).kind(), "trap");
    }

    #[test]
    fn host_errors_map_by_type_and_message() {
        let mem = wasmtime::Error::new(MemoryLimitExceeded {
            limit: 1,
            requested: 2,
        });
        assert_eq!(classify(&mem, &cx()).kind(), "memory_limit");
        let fuel = wasmtime::format_err!(
            "too much data is being copied between the host and the guest: fuel allocated for hostcalls has been exhausted"
        );
        assert_eq!(
            classify(&fuel, &cx()),
            GuestFault::BoundaryLimit { limit: 10 }
        );
        let lim = wasmtime::Error::new(LimitTrap(
            "generate calls".into(),
            Setting::Limit("max_generate_calls"),
        ));
        let f = classify(&lim, &cx());
        assert_eq!(f.kind(), "limit_exceeded");
        assert_eq!(f.setting(), Some(Setting::Limit("max_generate_calls")));
        assert_eq!(
            classify(&mem, &cx()).setting(),
            Some(Setting::Limit("max_memory"))
        );
        assert_eq!(
            classify(&wasmtime::Error::new(Trap::Interrupt), &cx()).setting(),
            Some(Setting::Limit("timeout"))
        );
    }

    #[test]
    fn panic_message_comes_from_stderr() {
        let c = FaultContext {
            stderr: "\nthread '<unnamed>' panicked at src/lib.rs:3:5:\nboom\nnote: ...",
            ..cx()
        };
        let f = classify(&wasmtime::Error::new(Trap::UnreachableCodeReached), &c);
        assert!(f.to_string().contains("boom"), "{f}");
        assert_eq!(truncate("héllo", 2), "h… (5 bytes cut)");
    }
}
