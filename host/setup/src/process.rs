//! Process-wide settings of rollbox's binaries: transparent huge pages, candle's thread count
//! and logging. The allocator is the binaries' own choice (`rollbox::alloc`): this crate is
//! also linked into the Python extension, which must keep the interpreter's.

/// Turn transparent huge pages off for this process unless the engine keeps model weights in
/// it; call before loading anything. See [`disable_huge_pages`].
pub fn prefer_small_pages(engine: &rollbox_engines::EngineSpec) {
    if !engine.holds_weights() {
        disable_huge_pages();
    }
}

/// Turn transparent huge pages off for this process. Without model weights the host holds many
/// small, short-lived allocations (per-episode buffers, the sandboxes' pools): with THP set to
/// `always`, each first touch takes and zeroes 2 MiB, and peak RSS at 512 episodes in flight was
/// ~140 MiB instead of ~113 (`rollbox-bench rollout`). The embedded model's weights gain from
/// huge pages (one-sequence decode 10-15% faster), so with it they stay on.
pub fn disable_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_THP_DISABLE) takes plain integers and changes only this process's
    // page-fault policy; a failure (old kernel) leaves the default in place.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Settings made once at start-up, before any thread exists: candle's thread count pinned and
/// logging to stderr (`ROLLBOX_LOG`, default `warn`).
///
/// candle asks for its thread count on every f32 matmul, and without `RAYON_NUM_THREADS` that
/// re-reads /proc/cpuinfo (about 5% of embedded decode time here); the answer it would compute
/// is set once.
///
/// # Safety
///
/// Call it first thing in `main`, before any other thread exists (it sets an environment
/// variable).
pub unsafe fn init() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = rollbox_engines::embedded::candle_thread_count();
        // SAFETY: the caller guarantees no other thread exists yet.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", n.to_string()) };
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ROLLBOX_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(colour_logs(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR"),
        ))
        .init();
}

/// Whether log lines are coloured: only on a terminal (a log file or pipe gets plain lines),
/// and not when `NO_COLOR` is set to anything but the empty string (no-color.org).
fn colour_logs(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// A multi-threaded tokio runtime with I/O and timers.
pub fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

#[cfg(test)]
mod tests {
    use super::colour_logs;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(colour_logs(true, None));
        assert!(colour_logs(true, Some("".into())));
        assert!(!colour_logs(true, Some("1".into())));
        assert!(!colour_logs(false, None));
        assert!(!colour_logs(false, Some("".into())));
    }
}
