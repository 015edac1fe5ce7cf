//! Per-store state: the WASI context (empty), the resource table, the memory limiter, and the
//! call's state ([`CallCtx`]: limits, captured stdio, logs and stats, deadline), which an
//! episode's state extends (`episode::EpisodeCtx`).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::bindings::tools::{Session, ToolCall, ToolResult};
use crate::bindings::types::Error;
use crate::budget::{HostMemory, LINEAR_MEMORY_ALLOWANCE, Reservation};
use crate::fault::{HostMemoryExhausted, LimitTrap, MemoryLimitExceeded};
use crate::limits::{Limits, Setting};

/// Everything a store holds: the WASI context (empty), the resource table, the memory limiter
/// and `ctx`, the call's own state: an episode's (`episode::EpisodeCtx`) or a reward's or tool
/// call's ([`CallCtx`], nothing more: their worlds import only `log`).
pub(crate) struct StoreState<C> {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) ctx: C,
}

impl<C: Send> WasiView for StoreState<C> {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A store's call state: the [`CallCtx`] every guest call has, and (for an episode) more.
pub(crate) trait Sandboxed: Send + 'static {
    /// The call's limits, output, logs and deadline.
    fn call(&self) -> &CallCtx;
    /// The same, mutably.
    fn call_mut(&mut self) -> &mut CallCtx;
}

impl Sandboxed for CallCtx {
    fn call(&self) -> &CallCtx {
        self
    }
    fn call_mut(&mut self) -> &mut CallCtx {
        self
    }
}

impl<C: Sandboxed> StoreState<C> {
    /// A state with a deny-everything WASI context: no preopens, no env, no args, no network,
    /// closed stdin, captured and bounded stdout/stderr, and random numbers from a generator
    /// seeded with `seed` (so a re-run of the same call sees the same numbers; nothing in the
    /// sandbox needs unpredictable ones). Clocks are the host's. `ctx` makes the call's state
    /// around its [`CallCtx`].
    pub(crate) fn with(
        id: String,
        limits: Arc<Limits>,
        host: Arc<HostMemory>,
        seed: u64,
        ctx: impl FnOnce(CallCtx) -> C,
    ) -> Self {
        use rand10::SeedableRng as _;
        let stdout = CapturedOutput::new(limits.max_output_bytes);
        let stderr = CapturedOutput::new(limits.max_output_bytes);
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
            limiter: MemoryLimiter::new(limits.max_memory, host),
            ctx: ctx(CallCtx {
                id,
                limits,
                stdout,
                stderr,
                refused: None,
                logs: Vec::new(),
                stats: Vec::new(),
                dropped_logs: 0,
                deadline,
                host_cpu: std::time::Duration::ZERO,
                host_fuel_debt: 0,
                nested: None,
                sessions: Default::default(),
            }),
        }
    }
}

/// What every guest call's store holds beyond WASI: its id and limits, captured output, the
/// first soft limit refused, what it logged, its deadline and the host work done for it. A
/// reward's or tool call's store holds this alone; an episode's embeds it.
pub(crate) struct CallCtx {
    pub(crate) id: String,
    pub(crate) limits: Arc<Limits>,
    pub(crate) stdout: CapturedOutput,
    pub(crate) stderr: CapturedOutput,
    /// The first soft limit refused to the guest, and the setting it names; a later refusal
    /// traps.
    pub(crate) refused: Option<(String, Setting)>,
    pub(crate) logs: Vec<LogLine>,
    pub(crate) stats: Vec<(String, f64)>,
    pub(crate) dropped_logs: u64,
    /// When the call's wall-clock limit ends (host work is not started past it).
    pub(crate) deadline: std::time::Instant,
    /// CPU time of host work done for the call (`host_work`).
    pub(crate) host_cpu: std::time::Duration,
    /// Fuel charged for host work and not yet taken from the store.
    pub(crate) host_fuel_debt: u64,
    /// The registered tools a reward call may call (`tools` in the reward world); `None` for
    /// tool calls and episodes (an episode reaches them through its own services).
    pub(crate) nested: Option<Arc<dyn RewardTools>>,
    /// The tool sessions the guest holds open (`tools.session`), closed with the store.
    pub(crate) sessions: OpenSessions,
}

/// A boxed future of a host call.
pub(crate) type HostFuture<'a, T> = Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The tools a reward call reaches (`tools` in the reward world): a trait, so that the sandbox
/// core names no interface; `host::tools` implements it over the calling scope.
pub(crate) trait RewardTools: Send + Sync {
    /// `call`: one tool by name.
    fn call(&self, name: String, args: String) -> HostFuture<'_, Result<ToolResult, Error>>;
    /// `call-many`: several at once, results in order.
    fn call_many(
        &self,
        calls: Vec<ToolCall>,
    ) -> HostFuture<'_, wasmtime::Result<Vec<Result<ToolResult, Error>>>>;
    /// `names`: the tools reached, sorted.
    fn names(&self) -> Vec<String>;
    /// `schemas`: their OpenAI schemas.
    fn schemas(&self) -> HostFuture<'_, Result<serde_json::Value, Error>>;
    /// `session.open`: a session of one tool by name.
    fn open_session(&self, name: String) -> HostFuture<'_, Result<Arc<dyn GuestSession>, Error>>;
}

/// Sessions one guest call (an episode, a reward call) holds open at once.
pub const MAX_SESSIONS_PER_CALL: usize = 8;

/// A tool session a guest holds (`tools.session`): a trait, so that the sandbox core names no
/// session type; `session.rs` implements it.
pub(crate) trait GuestSession: Send + Sync {
    /// `session.call`.
    fn call(&self, args: String) -> HostFuture<'_, Result<ToolResult, Error>>;
}

/// The sessions a guest call holds (the `session` handles it was given): at most
/// [`MAX_SESSIONS_PER_CALL`], all closed when the call's store is dropped.
#[derive(Default)]
pub(crate) struct OpenSessions {
    slots: Vec<Option<Arc<dyn GuestSession>>>,
}

impl OpenSessions {
    /// Keep `session`, giving the guest its handle; `limit-exceeded` when the call holds
    /// [`MAX_SESSIONS_PER_CALL`] already (the session is closed).
    pub(crate) fn insert(
        &mut self,
        session: Arc<dyn GuestSession>,
    ) -> Result<Resource<Session>, Error> {
        let free = self.slots.iter().position(Option::is_none);
        let index = match free {
            Some(i) => i,
            None if self.slots.len() < MAX_SESSIONS_PER_CALL => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => {
                return Err(Error::LimitExceeded(format!(
                    "this call holds {MAX_SESSIONS_PER_CALL} open tool sessions, the most one call may; drop one first"
                )));
            }
        };
        self.slots[index] = Some(session);
        Ok(Resource::new_own(index as u32))
    }

    /// The session behind a handle the guest holds.
    pub(crate) fn get(
        &self,
        handle: &Resource<Session>,
    ) -> wasmtime::Result<Arc<dyn GuestSession>> {
        self.slots
            .get(handle.rep() as usize)
            .and_then(Option::clone)
            .ok_or_else(|| wasmtime::Error::msg("no such session handle"))
    }

    /// Close the session behind a dropped handle.
    pub(crate) fn remove(&mut self, handle: Resource<Session>) {
        if let Some(slot) = self.slots.get_mut(handle.rep() as usize) {
            *slot = None;
        }
    }
}

impl CallCtx {
    /// Record a soft-limit refusal of `setting`. Returns the `limit-exceeded` value the guest
    /// gets, or a trap if the guest already ignored one refusal.
    pub(crate) fn refuse(&mut self, setting: Setting, message: String) -> wasmtime::Result<Error> {
        if let Some((first, setting)) = &self.refused {
            return Err(wasmtime::Error::new(LimitTrap(
                first.clone(),
                setting.clone(),
            )));
        }
        self.refused = Some((message.clone(), setting));
        Ok(Error::LimitExceeded(message))
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
pub(crate) struct MemoryLimiter {
    max_bytes: usize,
    peak_bytes: usize,
    /// The store's linear memories together, bytes.
    total_bytes: usize,
    reserved: Reservation,
    /// The budget `reserved` is drawn from.
    host: Arc<HostMemory>,
}

impl MemoryLimiter {
    fn new(max_bytes: u64, host: Arc<HostMemory>) -> Self {
        MemoryLimiter {
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            peak_bytes: 0,
            total_bytes: 0,
            reserved: Reservation::default(),
            host,
        }
    }

    /// The largest memory size reached, bytes.
    pub(crate) fn peak_bytes(&self) -> usize {
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
        let host = &self.host;
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
pub(crate) struct CapturedOutput {
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
    pub(crate) fn take(&self) -> (String, u64) {
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
        let mut l = MemoryLimiter::new(1 << 20, HostMemory::new(1 << 30));
        assert!(l.memory_growing(0, 65536, None).expect("within"));
        let err = l.memory_growing(65536, 2 << 20, None).expect_err("over");
        assert!(
            err.to_string()
                .contains("linear memory limit of 1048576 bytes")
        );
        assert_eq!(l.peak_bytes(), 65536);
    }
}
