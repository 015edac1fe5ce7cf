//! `rollbox._native`: the Python extension behind the `rollbox` package (PyO3).
//!
//! [`Host`] loads a workflow component and its rewards and tools once per process, and runs
//! episodes as Python awaitables on a tokio runtime. Each `generate` the component makes is
//! answered by the caller's engine: an object with AReaL's `async agenerate(ModelRequest)`,
//! awaited from Rust on the caller's event loop (the GIL released while Rust waits), so the
//! trainer's own SGLang/vLLM client, version stamping and pauses apply ([`PyEngine`]). A spec
//! string (`replay:FILE`, `sglang:URL`, `embedded`) selects one of rollbox's own backends
//! instead. Tensors come back as numpy arrays that own the data read out of the host tensors
//! (one copy; `torch.from_numpy` shares it).

mod engine;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use rollbox::cmd::ComponentArgs;
use rollbox::limits::{parse_registration, parse_tool_registration};
use rollbox_runtime::{EpisodeRequest, Limits, Runtime, RuntimeConfig, WorkflowComponent};

use engine::PyEngine;

pyo3::create_exception!(
    _native,
    EpisodeError,
    pyo3::exceptions::PyRuntimeError,
    "An episode failed: `kind` is the fault (`trap`, `timeout`, `guest_error`, ...)."
);

/// A workflow component with its rewards and tools, ready to run episodes.
#[pyclass(module = "rollbox._native", frozen)]
struct Host {
    runtime: Arc<Runtime>,
    workflow: WorkflowComponent,
    /// The caller's engines by episode, when no engine spec was given.
    engine: Option<Arc<PyEngine>>,
    config: serde_json::Value,
    limits: Arc<Limits>,
    next: AtomicU64,
}

/// A registration string (`PATH[,timeout=5s,...]`) from a dict value: a path, a string with
/// options, or `{"path", "timeout", "retries", "memory", "fuel"}`.
fn registration(
    name: &str,
    value: &Bound<'_, PyAny>,
    parse: fn(&str) -> anyhow::Result<rollbox::limits::Registration>,
) -> PyResult<rollbox::limits::Registration> {
    let text = if let Ok(s) = value.extract::<String>() {
        format!("{name}={s}")
    } else if let Ok(p) = value.extract::<PathBuf>() {
        format!("{name}={}", p.display())
    } else if let Ok(d) = value.cast::<PyDict>() {
        let path: PathBuf = d
            .get_item("path")?
            .ok_or_else(|| PyValueError::new_err(format!("`{name}` needs a `path`")))?
            .extract()?;
        let mut s = format!("{name}={}", path.display());
        for (k, v) in d.iter() {
            let k: String = k.extract()?;
            if k != "path" {
                s.push_str(&format!(",{k}={}", v.str()?));
            }
        }
        s
    } else {
        return Err(PyTypeError::new_err(format!(
            "`{name}` must be a path, \"PATH,timeout=5s,...\" or {{\"path\": ..., \"timeout\": ...}}"
        )));
    };
    parse(&text).map_err(|e| PyValueError::new_err(format!("{e:#}")))
}

fn registrations(
    what: &Option<Bound<'_, PyDict>>,
    parse: fn(&str) -> anyhow::Result<rollbox::limits::Registration>,
) -> PyResult<Vec<rollbox::limits::Registration>> {
    let mut out = Vec::new();
    if let Some(d) = what {
        for (k, v) in d.iter() {
            out.push(registration(&k.extract::<String>()?, &v, parse)?);
        }
    }
    Ok(out)
}

/// The keys `limits=` takes: one per `rollbox run`/`rollout` limit flag (`--max-memory` is
/// `memory` or `max_memory`). A fuel budget turns fuel metering on.
const LIMIT_KEYS: [&str; 12] = [
    "timeout",
    "memory",
    "max_memory",
    "fuel",
    "max_boundary_bytes",
    "max_handles",
    "max_tensor_bytes",
    "max_generate_calls",
    "max_episode_tokens",
    "max_output_bytes",
    "max_tokenizer_bytes",
    "max_host_memory",
];

/// `limits={"max_host_memory": "8GiB"}`: the host-wide memory budget (`--max-host-memory`),
/// which is the process's, not one episode's.
fn host_memory_limit(d: &Option<Bound<'_, PyDict>>) -> PyResult<Option<String>> {
    match d
        .as_ref()
        .map(|d| d.get_item("max_host_memory"))
        .transpose()?
    {
        Some(Some(v)) => Ok(Some(v.str()?.to_string())),
        _ => Ok(None),
    }
}

/// `limits={"timeout": "600s", "memory": "512MiB", "fuel": N, ...}` over the CLI's defaults.
fn episode_limits(d: &Option<Bound<'_, PyDict>>) -> PyResult<Limits> {
    let mut args = rollbox::limits::LimitArgs::default();
    if let Some(d) = d {
        for (k, v) in d.iter() {
            let k: String = k.extract()?;
            let s = v.str()?.to_string();
            match k.as_str() {
                "timeout" => args.timeout = Some(s),
                "memory" | "max_memory" => args.max_memory = Some(s),
                "fuel" => args.fuel = Some(v.extract()?),
                "max_generate_calls" => args.max_generate_calls = Some(v.extract()?),
                "max_tensor_bytes" => args.max_tensor_bytes = Some(s),
                "max_boundary_bytes" => args.max_boundary_bytes = Some(s),
                "max_handles" => args.max_handles = Some(v.extract()?),
                "max_episode_tokens" => args.max_episode_tokens = Some(v.extract()?),
                "max_output_bytes" => args.max_output_bytes = Some(s),
                "max_tokenizer_bytes" => args.max_tokenizer_bytes = Some(s),
                "max_host_memory" => {} // the host's budget: `host_memory_limit`
                other => {
                    return Err(PyValueError::new_err(format!(
                        "unknown limit `{other}`; use {}",
                        LIMIT_KEYS.join(", ")
                    )));
                }
            }
        }
    }
    args.to_limits()
        .map_err(|e| PyValueError::new_err(format!("{e:#}")))
}

#[pymethods]
impl Host {
    /// Load `workflow` (a `.wasm` path) with its rewards and tools. `engine` is either a spec
    /// string for one of rollbox's backends or None: then each `arun_episode` passes the
    /// caller's engine object.
    #[new]
    #[pyo3(signature = (workflow, *, rewards=None, tools=None, tokenizer=None, engine=None, config=None, limits=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        workflow: PathBuf,
        rewards: Option<Bound<'_, PyDict>>,
        tools: Option<Bound<'_, PyDict>>,
        tokenizer: Option<PathBuf>,
        engine: Option<Bound<'_, PyAny>>,
        config: Option<Bound<'_, PyAny>>,
        limits: Option<Bound<'_, PyDict>>,
    ) -> PyResult<Host> {
        let spec = match &engine {
            None => None,
            Some(e) if e.is_instance_of::<PyString>() => Some(
                e.extract::<String>()?
                    .parse()
                    .map_err(|e| PyValueError::new_err(format!("engine: {e}")))?,
            ),
            Some(_) => {
                return Err(PyTypeError::new_err(
                    "Host(engine=...) takes a spec string (replay:FILE, sglang:URL, embedded); pass an engine object to arun_episode(data, engine=...)",
                ));
            }
        };
        let args = ComponentArgs {
            engine: spec,
            tokenizer,
            rewards: registrations(&rewards, parse_registration)?,
            tools: registrations(&tools, parse_tool_registration)?,
            record: None,
            max_host_memory: host_memory_limit(&limits)?,
        };
        let config_text = match config {
            None => "{}".to_string(),
            Some(c) if c.is_instance_of::<PyString>() => c.extract()?,
            Some(c) => engine::dumps(py, &c)?,
        };
        let config: serde_json::Value = serde_json::from_str(&config_text)
            .map_err(|e| PyValueError::new_err(format!("config is not JSON: {e}")))?;
        if !config.is_object() {
            return Err(PyValueError::new_err("config must be a JSON object"));
        }
        let limits = Arc::new(episode_limits(&limits)?);
        let load = || -> anyhow::Result<(Runtime, WorkflowComponent, Option<Arc<PyEngine>>)> {
            let (mut services, _) = args.services()?;
            let py_engine = if args.engine.is_none() {
                let e = Arc::new(PyEngine::default());
                services = services.with_backend(e.clone());
                Some(e)
            } else {
                None
            };
            let runtime = Runtime::new(
                RuntimeConfig {
                    fuel: limits.fuel.is_some() || args.wants_fuel(),
                    ..RuntimeConfig::default()
                },
                services,
            )?;
            args.register(&runtime)?;
            let wf = rollbox::builtin::resolve("workflow", &workflow)
                .and_then(|path| runtime.load_workflow(&path))
                .map_err(|e| e.context(format!("loading the workflow {}", workflow.display())))?;
            Ok((runtime, wf, py_engine))
        };
        let (runtime, workflow, engine) = py
            .detach(load)
            .map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        Ok(Host {
            runtime: Arc::new(runtime),
            workflow,
            engine,
            config,
            limits,
            next: AtomicU64::new(0),
        })
    }

    /// Run one episode on `data` (a dict: the dataset row). Returns AReaL's tensor dict (numpy
    /// arrays, batch dimension first), None for a rejected episode, or raises `EpisodeError`.
    /// With `report=True`, returns `(tensors_or_none, report)` and does not raise for a failed
    /// episode (the report says why).
    #[pyo3(signature = (data, engine=None, *, report=false, sample_index=0, seed=None))]
    fn arun_episode<'py>(
        &self,
        py: Python<'py>,
        data: Bound<'py, PyAny>,
        engine: Option<Bound<'py, PyAny>>,
        report: bool,
        sample_index: u32,
        seed: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("py{n}-s{sample_index}");
        let guard = match (&self.engine, engine) {
            (Some(e), Some(obj)) => Some(e.register(py, &id, obj)?),
            (Some(_), None) => {
                return Err(PyTypeError::new_err(
                    "arun_episode needs engine=...: an object with `async agenerate(ModelRequest) -> ModelResponse` (AReaL's InferenceEngine), or give Host(engine=\"replay:FILE\" | \"sglang:URL\" | ...)",
                ));
            }
            (None, _) => None,
        };
        let json = engine::dumps(py, &data)?;
        let data: serde_json::Value =
            serde_json::from_str(&json).map_err(|e| PyValueError::new_err(format!("data: {e}")))?;
        let mut request = EpisodeRequest::new(id, data);
        request.config = (&self.config).into();
        request.sample_index = sample_index;
        if let Some(s) = seed {
            request.seed = s;
        }
        let (runtime, workflow, limits) = (
            self.runtime.clone(),
            self.workflow.clone(),
            self.limits.clone(),
        );
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let r = runtime.run_episode(&workflow, request, limits).await;
            drop(guard);
            Python::attach(|py| report::to_python(py, r, report))
        })
    }

    /// Set the policy (weight) version stamped on tokens the engine does not stamp itself.
    fn set_version(&self, version: i32) {
        self.runtime.services().set_version(version);
    }

    /// The current policy version.
    #[getter]
    fn version(&self) -> i32 {
        self.runtime.services().version()
    }

    /// The workflow component's sha256.
    #[getter]
    fn sha256(&self) -> String {
        self.workflow.info().sha256.clone()
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Host>()?;
    m.add("EpisodeError", m.py().get_type::<EpisodeError>())?;
    Ok(())
}
