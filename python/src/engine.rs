//! The caller's engine as a rollbox backend: each `generate` awaits `engine.agenerate(req)`
//! (through `rollbox._bridge.agenerate`, which builds AReaL's `ModelRequest` when AReaL is
//! installed) on the event loop that called `arun_episode`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_async_runtimes::TaskLocals;
use rollbox_engines::{
    EngineError, GenerateRequest, GenerateResponse, InferenceBackend, StopReason,
};

/// `obj` as JSON text (`rollbox._bridge.dumps`: numpy scalars and arrays become numbers and
/// lists).
pub fn dumps(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    py.import("rollbox._bridge")?
        .call_method1("dumps", (obj,))?
        .extract()
}

struct Caller {
    engine: Py<PyAny>,
    locals: TaskLocals,
}

/// The engines of the episodes in flight, by episode id.
#[derive(Default)]
pub struct PyEngine {
    callers: Mutex<HashMap<String, Arc<Caller>>>,
}

/// Removes an episode's engine when the episode ends (or its future is dropped).
pub struct Registered {
    owner: Arc<PyEngine>,
    id: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut m) = self.owner.callers.lock() {
            m.remove(&self.id);
        }
    }
}

impl PyEngine {
    /// Use `engine` for episode `id`, on the running event loop.
    pub fn register(
        self: &Arc<Self>,
        py: Python<'_>,
        id: &str,
        engine: Bound<'_, PyAny>,
    ) -> PyResult<Registered> {
        if !engine.hasattr("agenerate")? {
            return Err(PyTypeError::new_err(format!(
                "the engine ({}) has no `agenerate`: pass an object with `async agenerate(ModelRequest) -> ModelResponse` (AReaL's InferenceEngine)",
                engine.get_type().name()?
            )));
        }
        let locals = pyo3_async_runtimes::tokio::get_current_locals(py)?;
        let caller = Arc::new(Caller {
            engine: engine.unbind(),
            locals,
        });
        self.callers
            .lock()
            .map_err(|_| PyTypeError::new_err("engine registry poisoned"))?
            .insert(id.to_string(), caller);
        Ok(Registered {
            owner: self.clone(),
            id: id.to_string(),
        })
    }

    /// The caller of the episode that made a request: the episode the host stamped on it,
    /// never the guest's `rid` (a workflow that forged another episode's rid would be answered
    /// by that episode's engine), and no other episode's engine as a fallback.
    fn caller(&self, request: &GenerateRequest) -> Result<Arc<Caller>, EngineError> {
        let Some(origin) = &request.origin else {
            return Err(unavailable(
                "a request from outside an episode; the Python engine answers only episodes".into(),
            ));
        };
        let m = self
            .callers
            .lock()
            .map_err(|_| unavailable("engine registry poisoned".into()))?;
        m.get(&origin.episode).cloned().ok_or_else(|| {
            unavailable(format!(
                "no engine for episode `{}`: it ended or was cancelled",
                origin.episode
            ))
        })
    }
}

fn exiting() -> EngineError {
    unavailable("the Python interpreter is exiting".into())
}

fn unavailable(message: String) -> EngineError {
    EngineError::Unavailable {
        backend: "python",
        message,
    }
}

#[async_trait]
impl InferenceBackend for PyEngine {
    fn name(&self) -> &'static str {
        "python"
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        let caller = self.caller(&request)?;
        let future = crate::gate::attach(|py| -> PyResult<_> {
            let s = &request.sampling;
            let d = PyDict::new(py);
            d.set_item("rid", &request.rid)?;
            d.set_item("input_ids", &request.input_ids)?;
            d.set_item("image_data", &request.image_data)?;
            if let Some(messages) = &request.chat_messages {
                d.set_item("chat_messages", messages.to_string())?;
            }
            let g = PyDict::new(py);
            g.set_item("n_samples", 1)?;
            g.set_item("max_new_tokens", s.max_new_tokens)?;
            g.set_item("min_new_tokens", s.min_new_tokens)?;
            g.set_item("greedy", s.greedy)?;
            g.set_item("temperature", s.temperature)?;
            g.set_item("top_p", s.top_p)?;
            g.set_item("top_k", s.top_k)?;
            g.set_item("stop_token_ids", &s.stop_token_ids)?;
            g.set_item("stop", &s.stop)?;
            g.set_item("ignore_eos", s.ignore_eos)?;
            g.set_item("frequency_penalty", s.frequency_penalty)?;
            d.set_item("gconfig", g)?;
            let coro = py
                .import("rollbox._bridge")?
                .call_method1("agenerate", (caller.engine.bind(py), d))?;
            pyo3_async_runtimes::into_future_with_locals(&caller.locals, coro)
        })
        .ok_or_else(exiting)?
        .map_err(|e| unavailable(format!("calling engine.agenerate: {e}")))?;
        let out = future
            .await
            .map_err(|e| unavailable(format!("engine.agenerate raised {e}")))?;
        crate::gate::attach(|py| -> PyResult<GenerateResponse> {
            let o = out.bind(py);
            let stop: String = o.get_item("stop_reason")?.extract()?;
            Ok(GenerateResponse {
                output_tokens: o.get_item("output_tokens")?.extract()?,
                output_logprobs: o.get_item("output_logprobs")?.extract()?,
                output_versions: o.get_item("output_versions")?.extract()?,
                stop_reason: match stop.as_str() {
                    "length" => StopReason::Length,
                    "tool_calls" => StopReason::ToolCalls,
                    "abort" => StopReason::Abort,
                    _ => StopReason::Stop,
                },
                ttft: o.get_item("ttft")?.extract()?,
            })
        })
        .ok_or_else(exiting)?
        .map_err(|e| unavailable(format!("engine.agenerate returned something unusable: {e}")))
    }
}
