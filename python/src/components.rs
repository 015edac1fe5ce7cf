//! [`Components`]: rewards and tools without a workflow, for the trainers' own reward
//! functions and tools (`rollbox.verl`, `rollbox.trl`). Each call runs in a fresh sandbox under
//! the component's call policy and comes back as a dict: a faulting component is a value with
//! its fault's kind, never an exception or a hang.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use rollbox_host::HostSpec;
use rollbox_runtime::{Called, GuestFault, RewardCall, Setting};

use crate::{components_of, engine, json_value};

/// Reward and tool components, ready to be called outside any episode.
#[pyclass(module = "rollbox._native", frozen)]
pub struct Components {
    inner: Arc<rollbox_host::Components>,
}

/// The hint to change `setting` for one component, as `Components(...)` takes it.
fn hint(setting: &Setting, kind: &str, name: &str) -> String {
    match setting {
        Setting::Limit(key) => format!(
            "raise it for this {kind} with {kind}s={{\"{name}\": {{\"path\": ..., \"{key}\": ...}}}}"
        ),
        Setting::HostMemory => {
            "raise Components(max_host_memory=...) or make fewer calls at once".into()
        }
        Setting::Concurrency => "make fewer calls at once".into(),
    }
}

/// `fut`'s result as an awaitable of its dict ([`to_dict`]); an error of the call itself (no
/// such component) raises `ValueError`.
fn called_dict<'py, T, F>(
    py: Python<'py>,
    fut: F,
    value_key: &'static str,
    kind: &'static str,
    name: String,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Clone + Send + 'static,
    F: std::future::Future<Output = anyhow::Result<Called<T>>> + Send + 'static,
{
    crate::gate::awaitable(py, fut, move |py, called| {
        let called = called.map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        Ok(to_dict(py, &called, value_key, kind, &name)?
            .into_any()
            .unbind())
    })
}

/// `called` as a dict: `value_key` (the value, None on a fault), `fault` (the fault's kind,
/// None on success), `error` (what happened and what to change), `wall_s`, `fuel`,
/// `peak_memory_bytes`, `attempts` and `logs` (the last attempt's `{"level", "message"}`).
fn to_dict<'py, T: IntoPyObject<'py> + Clone>(
    py: Python<'py>,
    called: &Called<T>,
    value_key: &str,
    kind: &str,
    name: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match &called.result {
        Ok(v) => {
            d.set_item(value_key, v.clone())?;
            d.set_item("fault", py.None())?;
            d.set_item("error", py.None())?;
        }
        Err(f) => {
            d.set_item(value_key, py.None())?;
            d.set_item("fault", f.kind())?;
            d.set_item("error", describe(f, kind, name, called.attempts))?;
        }
    }
    d.set_item("wall_s", called.wall.as_secs_f64())?;
    d.set_item("fuel", called.fuel_consumed)?;
    d.set_item("peak_memory_bytes", called.peak_memory_bytes)?;
    d.set_item("attempts", called.attempts)?;
    let logs = PyList::empty(py);
    for line in &called.logs {
        let l = PyDict::new(py);
        l.set_item("level", line.level)?;
        l.set_item("message", &line.message)?;
        logs.append(l)?;
    }
    d.set_item("logs", logs)?;
    Ok(d)
}

fn describe(f: &GuestFault, kind: &str, name: &str, attempts: u32) -> String {
    let what = f.explain(|s| hint(s, kind, name));
    format!("{kind} `{name}` failed on all {attempts} attempts: {what}")
}

#[pymethods]
impl Components {
    /// Load the rewards, tools and environments (each a `.wasm` path, a built-in's name,
    /// `"PATH,timeout=5s"` or `{"path": ..., "timeout": ..., "retries": ..., <limit key>: ...}`).
    /// `max_host_memory` is the budget every call's memory is reserved from.
    #[new]
    #[pyo3(signature = (*, rewards=None, tools=None, environments=None, max_host_memory=None))]
    fn new(
        py: Python<'_>,
        rewards: Option<Bound<'_, PyDict>>,
        tools: Option<Bound<'_, PyDict>>,
        environments: Option<Bound<'_, PyDict>>,
        max_host_memory: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Components> {
        // The workflow of the spec is not read by `build_components`.
        let mut spec = HostSpec::new(PathBuf::new());
        spec.rewards = components_of(py, &rewards)?;
        spec.tools = components_of(py, &tools)?;
        spec.environments = components_of(py, &environments)?;
        if let Some(m) = max_host_memory {
            let text = match m.extract::<String>() {
                Ok(s) => s,
                Err(_) => m.extract::<u64>()?.to_string(),
            };
            spec.set_host_text("max_host_memory", &text)
                .map_err(PyValueError::new_err)?;
        }
        let inner = py
            .detach(|| spec.build_components())
            .map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        Ok(Components {
            inner: Arc::new(inner),
        })
    }

    /// Score `completion` with the reward `name`, in a fresh sandbox. Awaitable; gives a dict:
    /// `score` (None when the call faulted), `fault` (`timeout`, `trap`, `out_of_fuel`,
    /// `memory_limit`, ...; None on success), `error`, `wall_s`, `fuel`, `peak_memory_bytes`,
    /// `attempts`, `logs`. `data` is the row the reward reads its reference from (e.g. `answer`).
    #[pyo3(signature = (name, completion, *, prompt=String::new(), data=None, prompt_ids=Vec::new(), completion_ids=Vec::new()))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn score<'py>(
        &self,
        py: Python<'py>,
        name: String,
        completion: String,
        prompt: String,
        data: Option<Bound<'py, PyAny>>,
        prompt_ids: Vec<u32>,
        completion_ids: Vec<u32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = match data {
            None => serde_json::json!({}),
            Some(d) => json_value(py, &d)?,
        };
        let call = RewardCall {
            prompt,
            completion,
            prompt_ids,
            completion_ids,
            data,
        };
        let inner = self.inner.clone();
        let label = name.clone();
        called_dict(
            py,
            async move { inner.score(&name, call).await },
            "score",
            "reward",
            label,
        )
    }

    /// Call the tool `name` with `args` (a JSON string or a dict), in a fresh sandbox.
    /// Awaitable; gives a dict as `score` does, with the tool's text under `output`.
    fn call_tool<'py>(
        &self,
        py: Python<'py>,
        name: String,
        args: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = if args.is_instance_of::<PyString>() {
            args.extract::<String>()?
        } else {
            engine::dumps(py, &args)?
        };
        let inner = self.inner.clone();
        let label = name.clone();
        called_dict(
            py,
            async move { inner.call_tool(&name, args).await },
            "output",
            "tool",
            label,
        )
    }

    /// Open a session of the tool `name`: one sandboxed instance kept for any number of calls,
    /// so what a call leaves in it (a Python interpreter's modules and variables) is there for
    /// the next. Awaitable; gives a `Session` (`await session.call(args)`, `await
    /// session.close()`). A session ends at its first fault, and holds its memory until it is
    /// closed or dropped.
    fn open_session<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        crate::gate::awaitable(
            py,
            async move { inner.open_session(&name).await },
            |py, r| {
                let session = r.map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
                Ok(Py::new(
                    py,
                    Session {
                        inner: Arc::new(session),
                    },
                )?
                .into_any())
            },
        )
    }

    /// Open an episode of the environment `name`: one sandboxed instance kept for its `reset`
    /// and `step`s. Awaitable; gives an `Environment`.
    fn open_environment<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        crate::gate::awaitable(
            py,
            async move { inner.open_environment(&name).await },
            |py, r| {
                let env = r.map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
                Ok(Py::new(
                    py,
                    Environment {
                        inner: Arc::new(env),
                    },
                )?
                .into_any())
            },
        )
    }

    /// The environments' names.
    #[getter]
    fn environment_names(&self) -> Vec<String> {
        self.inner.environment_names()
    }

    /// The registered tools' OpenAI schemas (a list of dicts, in name order), each from the
    /// tool's own `describe`: what a workflow gets from `tools.schemas`. Blocks while the tools
    /// describe themselves (each in a fresh sandbox), with the GIL released.
    fn tool_schemas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        let schemas = py
            .detach(|| pyo3_async_runtimes::tokio::get_runtime().block_on(inner.tool_schemas()))
            .map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        py.import("json")?
            .call_method1("loads", (schemas.to_string(),))
    }

    /// The registered rewards' names.
    #[getter]
    fn reward_names(&self) -> Vec<String> {
        self.inner.reward_names()
    }

    /// The registered tools' names.
    #[getter]
    fn tool_names(&self) -> Vec<String> {
        self.inner.tool_names()
    }

    /// rollbox's version and each component's sha256.
    #[getter]
    fn provenance(&self) -> std::collections::BTreeMap<String, String> {
        self.inner.provenance().clone()
    }
}

/// A live instance of a tool ([`Components::open_session`]).
#[pyclass(module = "rollbox._native", frozen)]
pub struct Session {
    inner: Arc<rollbox_runtime::ToolSession>,
}

#[pymethods]
impl Session {
    /// Call the session's instance with `args` (a JSON string or a dict). Awaitable; gives a
    /// dict as `Components.call_tool` does. After a fault (a timeout, memory, a trap) the
    /// session has ended, and every later call gives a `limit_exceeded` fault saying why.
    fn call<'py>(&self, py: Python<'py>, args: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let args = if args.is_instance_of::<PyString>() {
            args.extract::<String>()?
        } else {
            engine::dumps(py, &args)?
        };
        let inner = self.inner.clone();
        let label = inner.name().to_string();
        called_dict(
            py,
            async move { Ok(inner.call(args).await) },
            "output",
            "tool",
            label,
        )
    }

    /// End the session now and free its instance. Awaitable.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        crate::gate::awaitable(py, async move { inner.close().await }, |py, ()| {
            Ok(py.None())
        })
    }
}

/// One episode of an environment ([`Components::open_environment`]).
#[pyclass(module = "rollbox._native", frozen)]
pub struct Environment {
    inner: Arc<rollbox_runtime::EnvSession>,
}

#[pymethods]
impl Environment {
    /// Start the episode from `row` (a dict or JSON text). Awaitable; gives a dict with
    /// `observation` (None on a fault), `fault`, `error`, `wall_s`, ...
    fn reset<'py>(&self, py: Python<'py>, row: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let row = if row.is_instance_of::<PyString>() {
            row.extract::<String>()?
        } else {
            engine::dumps(py, &row)?
        };
        let inner = self.inner.clone();
        called_dict(
            py,
            async move { Ok(inner.reset(row).await) },
            "observation",
            "environment",
            "reset".into(),
        )
    }

    /// Apply the model's `action`. Awaitable; gives a dict with `observation`, `reward`,
    /// `done` and `metadata` (None on a fault), `fault`, `error`, `wall_s`, ... A fault ends the
    /// episode's instance; every later call gives a `limit_exceeded` fault saying why.
    fn step<'py>(&self, py: Python<'py>, action: String) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        crate::gate::awaitable(
            py,
            async move { inner.step(action).await },
            move |py, called| {
                let text = called
                    .result
                    .as_ref()
                    .map(|s| {
                        serde_json::json!({
                            "observation": s.observation,
                            "reward": s.reward,
                            "done": s.done,
                            "metadata": s.metadata,
                        })
                        .to_string()
                    })
                    .map_err(Clone::clone);
                let flat = Called {
                    result: text,
                    wall: called.wall,
                    fuel_consumed: called.fuel_consumed,
                    peak_memory_bytes: called.peak_memory_bytes,
                    attempts: called.attempts,
                    logs: called.logs.clone(),
                };
                let d = to_dict(py, &flat, "step", "environment", "step")?;
                let step = d.get_item("step")?;
                d.del_item("step")?;
                // The step's fields, read once (None each on a fault).
                let step = match step {
                    Some(s) if !s.is_none() => {
                        Some(py.import("json")?.call_method1("loads", (s,))?)
                    }
                    _ => None,
                };
                for key in ["observation", "reward", "done", "metadata"] {
                    let value = match &step {
                        Some(s) => s.get_item(key)?,
                        None => py.None().into_bound(py),
                    };
                    d.set_item(key, value)?;
                }
                Ok(d.into_any().unbind())
            },
        )
    }

    /// End the episode now and free its instance. Awaitable.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        crate::gate::awaitable(py, async move { inner.close().await }, |py, ()| {
            Ok(py.None())
        })
    }
}
