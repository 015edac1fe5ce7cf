//! Host side of the `log` interface: log lines and scalar stats attributed to the episode.
//!
//! Limits: `max_log_lines` entries (lines and stats together) per store and
//! `max_log_line_bytes` per entry; past them entries are counted and dropped. Never traps.

use crate::bindings::log::{self, Level};
use crate::fault::truncate;
use crate::state::{CallCtx, LogLine};
use crate::text::escape_control;

impl CallCtx {
    fn log_room(&mut self) -> bool {
        let used = self.logs.len() + self.stats.len();
        if used >= self.limits.max_log_lines {
            self.dropped_logs += 1;
            return false;
        }
        true
    }
}

impl log::Host for CallCtx {
    async fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        if !self.log_room() {
            return Ok(());
        }
        let message = truncate(&message, self.limits.max_log_line_bytes);
        let level = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        tracing::debug!(
            episode = %escape_control(&self.id),
            level,
            "guest: {}",
            escape_control(&message)
        );
        self.logs.push(LogLine { level, message });
        Ok(())
    }

    async fn stat(&mut self, key: String, value: f64) -> wasmtime::Result<()> {
        if !self.log_room() {
            return Ok(());
        }
        let key = truncate(&key, self.limits.max_log_line_bytes);
        self.stats.push((key, value));
        Ok(())
    }
}
