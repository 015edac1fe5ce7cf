//! Per-store state: the WASI context (empty), the resource table, the memory limiter, captured
//! stdio and the episode's counters, logs and stats.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::budget::{LINEAR_MEMORY_ALLOWANCE, Reservation, host_memory};
use crate::fault::{HostMemoryExhausted, LimitTrap, MemoryLimitExceeded};
use crate::limits::{Limits, Setting};
use crate::services::Services;

/// Everything a store holds for one episode or one reward/tool call.
pub struct StoreState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) ctx: EpisodeCtx,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl StoreState {
    /// A state with a deny-everything WASI context: no preopens, no env, no args, no network,
    /// closed stdin, captured and bounded stdout/stderr, and random numbers from a generator
    /// seeded with `seed` (so a re-run of the same episode sees the same numbers; nothing in
    /// the sandbox needs unpredictable ones). Clocks are the host's.
    pub(crate) fn new(id: String, limits: Arc<Limits>, services: Arc<Services>, seed: u64) -> Self {
        use rand10::SeedableRng as _;
        let stdout = CapturedOutput::new(limits.max_stdout_bytes);
        let stderr = CapturedOutput::new(limits.max_stderr_bytes);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .max_random_size(1 << 20)
            .secure_random(rand10::rngs::StdRng::seed_from_u64(seed))
            .insecure_random(rand10::rngs::StdRng::seed_from_u64(!seed))
            .insecure_random_seed(u128::from(seed));
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.max_handles.saturating_add(16));
        let deadline = std::time::Instant::now() + limits.timeout;
        StoreState {
            wasi: wasi.build(),
            table,
            limiter: MemoryLimiter::new(limits.max_memory_bytes),
            ctx: EpisodeCtx {
                id,
                limits,
                services,
                stdout,
                stderr,
                generate_calls: 0,
                generated_tokens: 0,
                tensor_bytes: 0,
                live_tensors: 0,
                refused: None,
                logs: Vec::new(),
                stats: Vec::new(),
                dropped_logs: 0,
                rid_counter: 0,
                reward_calls: Vec::new(),
                sample_index: 0,
                prompt_repeats: std::collections::HashMap::new(),
                tool_calls: None,
                deadline,
                host_cpu: std::time::Duration::ZERO,
                host_fuel_debt: 0,
                memory: Reservation::default(),
            },
        }
    }
}

/// The episode side of the store: counters checked by the host calls, and what the guest
/// logged. Read back after the call into an `EpisodeReport`.
pub struct EpisodeCtx {
    pub(crate) id: String,
    pub(crate) limits: Arc<Limits>,
    pub(crate) services: Arc<Services>,
    pub(crate) stdout: CapturedOutput,
    pub(crate) stderr: CapturedOutput,
    pub(crate) generate_calls: u32,
    pub(crate) generated_tokens: u64,
    pub(crate) tensor_bytes: usize,
    pub(crate) live_tensors: usize,
    /// The first soft limit refused to the guest, and the setting it names; a later refusal
    /// traps.
    pub(crate) refused: Option<(String, Setting)>,
    pub(crate) logs: Vec<LogLine>,
    pub(crate) stats: Vec<(String, f64)>,
    pub(crate) dropped_logs: u64,
    pub(crate) rid_counter: u64,
    pub(crate) reward_calls: Vec<RewardRecord>,
    /// The episode's sample index (stamped on its generate requests' origin).
    pub(crate) sample_index: u32,
    /// Generate requests made so far per prompt (by hash), for each request's origin.
    pub(crate) prompt_repeats: std::collections::HashMap<u64, u32>,
    /// The episode's tool calls in flight ([`crate::services::tool_calls_per_episode`]),
    /// made on its first tool call.
    pub(crate) tool_calls: Option<Arc<crate::slots::Slots>>,
    /// When the episode's wall-clock limit ends (host work is not started past it).
    pub(crate) deadline: std::time::Instant,
    /// CPU time of host work done for the episode (`host_work`).
    pub(crate) host_cpu: std::time::Duration,
    /// Fuel charged for host work and not yet taken from the store.
    pub(crate) host_fuel_debt: u64,
    /// The host tensors' share of the host-wide memory budget (as cumulative as
    /// `tensor_bytes`, taken in `TENSOR_RESERVATION_CHUNK`s); an accepted episode's trajectory
    /// takes it over.
    pub(crate) memory: Reservation,
}

/// One reward call made by the episode, with its accounting.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RewardRecord {
    /// The reward's registered name.
    pub name: String,
    /// The score, when there is one.
    pub value: Option<f64>,
    /// True when the value is the 0.0 timeout fallback.
    pub timed_out: bool,
    /// Wall time over all attempts, µs.
    pub wall_us: u64,
    /// Fuel over all attempts, when metered.
    pub fuel: Option<u64>,
    /// Largest linear memory of any attempt, bytes.
    pub peak_memory_bytes: u64,
    /// Attempts made.
    pub attempts: u32,
    /// The error returned to the workflow, if any.
    pub error: Option<String>,
}

impl EpisodeCtx {
    /// Record a soft-limit refusal of `setting`. Returns the guest-visible message, or a trap
    /// if the guest already ignored one refusal.
    pub(crate) fn refuse(&mut self, setting: Setting, message: String) -> wasmtime::Result<String> {
        if let Some((first, setting)) = &self.refused {
            return Err(wasmtime::Error::new(LimitTrap(
                first.clone(),
                setting.clone(),
            )));
        }
        self.refused = Some((message.clone(), setting));
        Ok(message)
    }
}

/// One log line written by the guest.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LogLine {
    /// Severity (`trace` .. `error`).
    pub level: &'static str,
    /// The text, truncated to the per-line limit.
    pub message: String,
}

/// A `ResourceLimiter` capping each linear memory, reserving what the memories grow to from
/// the host-wide budget (`budget`), and recording the peak.
pub struct MemoryLimiter {
    max_bytes: usize,
    peak_bytes: usize,
    /// The store's linear memories together, bytes.
    total_bytes: usize,
    reserved: Reservation,
}

impl MemoryLimiter {
    fn new(max_bytes: u64) -> Self {
        MemoryLimiter {
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            peak_bytes: 0,
            total_bytes: 0,
            reserved: Reservation::default(),
        }
    }

    /// The largest memory size reached, bytes.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            return Err(wasmtime::Error::new(MemoryLimitExceeded {
                limit: self.max_bytes,
                requested: desired,
            }));
        }
        // Called with current = 0 when a memory is created, so every byte of every memory of
        // the store past its first `LINEAR_MEMORY_ALLOWANCE` is reserved, until the store is
        // dropped.
        self.total_bytes = self
            .total_bytes
            .saturating_add(desired.saturating_sub(current));
        let more = self
            .total_bytes
            .saturating_sub(LINEAR_MEMORY_ALLOWANCE)
            .saturating_sub(self.reserved.bytes());
        let host = host_memory();
        if more > 0 && !self.reserved.grow(host, more) {
            return Err(wasmtime::Error::new(HostMemoryExhausted(
                host.exhausted("growing a linear memory", more),
            )));
        }
        self.peak_bytes = self.peak_bytes.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Table elements per table. Guards host memory against a guest growing its function table;
/// Python and JS runtimes need a few thousand.
pub const MAX_TABLE_ELEMENTS: usize = 100_000;

/// A bounded, truncating stdout/stderr sink. Writes past the capacity are counted and
/// dropped; the guest never sees an error (a full `MemoryOutputPipe` makes Rust guests panic).
#[derive(Clone)]
pub struct CapturedOutput {
    inner: Arc<Mutex<Vec<u8>>>,
    capacity: usize,
    dropped: Arc<AtomicU64>,
}

impl CapturedOutput {
    fn new(capacity: usize) -> Self {
        CapturedOutput {
            inner: Arc::new(Mutex::new(Vec::new())),
            capacity,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut buf = match self.inner.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        let room = self.capacity.saturating_sub(buf.len());
        let take = room.min(bytes.len());
        buf.extend_from_slice(&bytes[..take]);
        let lost = (bytes.len() - take) as u64;
        if lost > 0 {
            self.dropped.fetch_add(lost, Ordering::Relaxed);
        }
    }

    /// What was captured (lossy UTF-8) and how many bytes were dropped.
    pub fn take(&self) -> (String, u64) {
        let buf = match self.inner.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        (
            String::from_utf8_lossy(&buf).into_owned(),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(OUTPUT_WRITE_PERMIT)
    }
}

/// Bytes a guest may write per `check-write` permit; the sink itself never fills up.
const OUTPUT_WRITE_PERMIT: usize = 64 << 10;

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_output_truncates_and_counts() {
        let out = CapturedOutput::new(4);
        out.push(b"hello");
        out.push(b"!!");
        assert_eq!(out.take(), ("hell".to_string(), 3));
    }

    #[test]
    fn memory_limiter_refuses_past_the_limit_and_tracks_peak() {
        use wasmtime::ResourceLimiter;
        let mut l = MemoryLimiter::new(1 << 20);
        assert!(l.memory_growing(0, 65536, None).expect("within"));
        let err = l.memory_growing(65536, 2 << 20, None).expect_err("over");
        assert!(
            err.to_string()
                .contains("linear memory limit of 1048576 bytes")
        );
        assert_eq!(l.peak_bytes(), 65536);
    }
}
