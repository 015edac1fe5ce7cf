//! The `/v1/episodes` answer: the request's batch as one safetensors file, sent a part at a
//! time ([`rollbox_tensor::SafetensorsParts`], at most 4 MiB of tensor data each) while the host
//! memory it takes stays reserved.
//!
//! The batch (kept by the [`MemorySink`] with its episodes' reservations), a join of several
//! batches (reserved before it is made), and one part at a time (reserved before the first is
//! sent) are what an answer holds; a 1.5 GiB answer used to be held three times over,
//! uncharged (5.5 GB with a 2 GiB budget, issue 52). What the budget cannot hold is refused,
//! 503 naming `max_host_memory`, before anything is sent.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rollbox_rollout::{MAX_BATCH_TENSOR_BYTES, MemorySink, OverBudget, Stats};
use rollbox_runtime::{HostMemory, Reservation};
use rollbox_tensor::{SafetensorsParts, TensorError};

/// The answer of a run whose batches are in `sink`, with `stats` in the header; else the
/// status and message refusing it (503 when the host budget cannot hold it, 500 when it cannot
/// be encoded).
pub(super) fn batch_answer(
    sink: MemorySink,
    provenance: std::collections::BTreeMap<String, String>,
    stats: &Stats,
    host: &std::sync::Arc<HostMemory>,
) -> Result<Response, (StatusCode, String)> {
    let internal = |e: &dyn std::fmt::Display| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the answer cannot be encoded: {e}"),
        )
    };
    let (batch, memory) = sink
        .into_batch(provenance, MAX_BATCH_TENSOR_BYTES, host)
        .map_err(|e| match e.downcast_ref::<OverBudget>() {
            Some(_) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")),
            None => internal(&format!("{e:#}")),
        })?;
    let mut header = batch.header().map_err(|e| internal(&e))?;
    let stats = serde_json::to_string(stats).map_err(|e| internal(&e))?;
    header.insert("stats".into(), stats);
    let parts = SafetensorsParts::new(batch.tensors, &header).map_err(|e| internal(&e))?;
    // One part at a time, reserved before the first is sent.
    let largest = parts.largest_part();
    let part = host.try_reserve_bulk(largest).ok_or_else(|| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            host.exhausted("sending the answer", largest),
        )
    })?;
    let len = parts.len();
    let body = PartsBody {
        state: State::Idle(Some(parts)),
        left: len,
        _held: (memory, part),
    };
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        axum::body::Body::new(body),
    )
        .into_response())
}

/// Where the body is: the parts left, one being made on the blocking pool, or done.
enum State {
    Idle(Option<SafetensorsParts>),
    Making(tokio::task::JoinHandle<Made>),
    Done,
}

/// The parts left and the part just made (`None`: none was left).
type Made = (SafetensorsParts, Option<Result<Vec<u8>, TensorError>>);

/// A safetensors file as a response body: each part made on the blocking pool when the
/// connection asks for it (copying megabytes is CPU work; a slow reader holds no thread), the
/// memory held until the body is dropped.
struct PartsBody {
    state: State,
    /// Bytes not yet sent (the exact length, so the answer has a Content-Length).
    left: u64,
    _held: (Vec<std::sync::Arc<Reservation>>, Reservation),
}

impl hyper::body::Body for PartsBody {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        loop {
            match &mut self.state {
                State::Idle(parts) => {
                    let Some(mut parts) = parts.take() else {
                        self.state = State::Done;
                        return Poll::Ready(None);
                    };
                    self.state = State::Making(tokio::task::spawn_blocking(move || {
                        let part = parts.next();
                        (parts, part)
                    }));
                }
                State::Making(job) => {
                    let made = match Pin::new(job).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(made) => made,
                    };
                    match made {
                        Ok((parts, Some(Ok(bytes)))) => {
                            self.left = self.left.saturating_sub(bytes.len() as u64);
                            self.state = State::Idle(Some(parts));
                            let frame = hyper::body::Frame::data(axum::body::Bytes::from(bytes));
                            return Poll::Ready(Some(Ok(frame)));
                        }
                        Ok((_, None)) => {
                            self.state = State::Done;
                            return Poll::Ready(None);
                        }
                        Ok((_, Some(Err(e)))) => {
                            self.state = State::Done;
                            return Poll::Ready(Some(Err(std::io::Error::other(e.to_string()))));
                        }
                        Err(e) => {
                            self.state = State::Done;
                            return Poll::Ready(Some(Err(std::io::Error::other(e.to_string()))));
                        }
                    }
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.left)
    }
}
