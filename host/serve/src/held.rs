//! What a request makes the server hold before any sandbox runs: its body as it is received,
//! then the values parsed from it, each counted against the host's memory budget
//! (the host's `--max-host-memory`) before the bytes are held, and the
//! bodies also against one server-wide total, [`MAX_BODY_BYTES_IN_FLIGHT`].
//!
//! One request's body is capped by [`super::MAX_BODY_BYTES`] (or its tenant's
//! `max_body_bytes`); that bounds one, not their sum: 80 unfinished bodies of just under 60 MiB
//! from two addresses held 5 GB with a 1 GiB budget (issue 52). Past the total or the budget a
//! request gets 503 with `Retry-After: 1` (the server is busy, the request is not wrong) and
//! nothing of its body is kept.
//!
//! Not counted here: hyper's read buffer per connection (at most ~400 KiB, times
//! [`super::MAX_CONNECTIONS`]) and an answer being written (counted by the handler that builds
//! it).

use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::{StatusCode, header};
use axum::response::Response;
use std::sync::Arc;

use rollbox_runtime::{HostMemory, Reservation};

use super::error;

/// Bytes of request bodies held at once, over every connection: those being received and
/// those not yet parsed. Guards against many slow or concurrent bodies, each within the
/// per-request cap, adding up to more than the machine has.
pub const MAX_BODY_BYTES_IN_FLIGHT: usize = 1 << 30;

/// Bytes of bodies held now (see [`MAX_BODY_BYTES_IN_FLIGHT`]).
static BODY_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Requests refused because their body would pass the total or the host budget.
static BODIES_REFUSED: AtomicUsize = AtomicUsize::new(0);

/// Bodies' bytes held now, server-wide.
pub fn body_bytes_held() -> usize {
    BODY_BYTES.load(Ordering::Acquire)
}

/// Requests refused so far because their body would pass the total or the host budget.
pub fn bodies_refused() -> usize {
    BODIES_REFUSED.load(Ordering::Relaxed)
}

/// A body's share of the server-wide total and of the host budget, given back when dropped.
#[derive(Debug)]
pub(super) struct BodyHold {
    bytes: usize,
    host: Reservation,
    budget: Arc<HostMemory>,
}

impl BodyHold {
    /// Nothing held yet, of the server's total and of `budget`.
    pub(super) fn new(budget: Arc<HostMemory>) -> Self {
        BodyHold {
            bytes: 0,
            host: Reservation::default(),
            budget,
        }
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Hold `n` more bytes; else the 503 to answer with (nothing more held).
    pub(super) fn grow(&mut self, n: usize) -> Result<(), Busy> {
        if n == 0 {
            return Ok(());
        }
        let taken = BODY_BYTES.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(n)
                .filter(|&t| t <= MAX_BODY_BYTES_IN_FLIGHT)
        });
        if let Err(held) = taken {
            BODIES_REFUSED.fetch_add(1, Ordering::Relaxed);
            return Err(Busy(format!(
                "the server holds {held} bytes of request bodies, of its {MAX_BODY_BYTES_IN_FLIGHT} at once: retry, or send smaller requests"
            )));
        }
        self.bytes += n;
        if !self.host.grow_bulk(&self.budget, n) {
            BODIES_REFUSED.fetch_add(1, Ordering::Relaxed);
            return Err(Busy(self.budget.exhausted("a request body", n)));
        }
        Ok(())
    }
}

impl Drop for BodyHold {
    fn drop(&mut self) {
        BODY_BYTES.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A request body's bytes with what they hold (drop `hold` once the bytes are gone).
pub(super) struct HeldBody {
    pub bytes: axum::body::Bytes,
    pub hold: BodyHold,
}

/// Reserve `bytes` from the host budget for values parsed from a request, held while the
/// request runs; else the 503 to answer with.
pub(super) fn reserve_parsed(
    host: &Arc<HostMemory>,
    bytes: usize,
    what: &str,
) -> Result<Reservation, Busy> {
    host.try_reserve_bulk(bytes)
        .ok_or_else(|| Busy(host.exhausted(what, bytes)))
}

/// The server is too busy to hold this now: answered 503 with `Retry-After: 1`.
#[derive(Debug)]
pub(super) struct Busy(String);

impl From<Busy> for Response {
    fn from(Busy(message): Busy) -> Response {
        let mut r = error(StatusCode::SERVICE_UNAVAILABLE, message);
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_count_against_one_total_and_give_it_back() {
        let before = body_bytes_held();
        let budget = HostMemory::new(usize::MAX);
        let mut a = BodyHold::new(budget.clone());
        a.grow(MAX_BODY_BYTES_IN_FLIGHT / 2).expect("half");
        let mut b = BodyHold::new(budget);
        let refused = b.grow(MAX_BODY_BYTES_IN_FLIGHT / 2 + before + 1);
        let answer = Response::from(refused.expect_err("past the total"));
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(b.bytes(), 0, "a refused grow holds nothing");
        drop(a);
        b.grow(MAX_BODY_BYTES_IN_FLIGHT / 2).expect("given back");
        drop(b);
        assert_eq!(body_bytes_held(), before);
    }
}
