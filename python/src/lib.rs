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

mod components;
mod engine;
mod gate;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use rollbox_host::{ComponentSpec, HostKey, HostSpec, LimitSpec};
use rollbox_runtime::EpisodeRequest;
use rollbox_runtime::limits::LimitKey;

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
    host: Arc<rollbox_host::Host>,
    /// The caller's engines by episode, when no engine spec was given.
    engine: Option<Arc<PyEngine>>,
    next: AtomicU64,
}

/// A Python value (str, int, float, list, dict) as JSON.
fn json_value(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    serde_json::from_str(&engine::dumps(py, v)?)
        .map_err(|e| PyValueError::new_err(format!("not JSON: {e}")))
}

/// A reward or tool from a dict value: a path, `"PATH,timeout=5s,..."`, or `{"path": ...,
/// "timeout": ..., "retries": ..., <any limit key>: ...}`.
fn component(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<ComponentSpec> {
    let invalid = |e: String| PyValueError::new_err(format!("`{name}`: {e}"));
    if let Ok(s) = value.extract::<String>() {
        return ComponentSpec::parse(&s).map_err(invalid);
    }
    if let Ok(p) = value.extract::<PathBuf>() {
        return Ok(ComponentSpec::new(p));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (k, v) in d.iter() {
            let k: String = k.extract()?;
            let v = if k == "path" {
                serde_json::Value::String(v.extract::<PathBuf>()?.display().to_string())
            } else {
                json_value(py, &v)?
            };
            map.insert(k, v);
        }
        return serde_json::from_value(serde_json::Value::Object(map))
            .map_err(|e| invalid(e.to_string()));
    }
    Err(PyTypeError::new_err(format!(
        "`{name}` must be a path, \"PATH,timeout=5s,...\" or {{\"path\": ..., \"timeout\": ...}}"
    )))
}

fn components_of(
    py: Python<'_>,
    what: &Option<Bound<'_, PyDict>>,
) -> PyResult<std::collections::BTreeMap<String, ComponentSpec>> {
    let mut out = std::collections::BTreeMap::new();
    if let Some(d) = what {
        for (k, v) in d.iter() {
            let name: String = k.extract()?;
            let spec = component(py, &name, &v)?;
            out.insert(name, spec);
        }
    }
    Ok(out)
}

/// `limits={"timeout": "600s", "memory": "512MiB", "fuel": N, ...}`: every key of the
/// runtime's limit table, and the host-wide settings (`HOST_KEYS`: `max_host_memory`, the
/// host's budget, not one episode's; `max_instances`).
fn limits(py: Python<'_>, d: &Option<Bound<'_, PyDict>>, spec: &mut HostSpec) -> PyResult<()> {
    let mut map = serde_json::Map::new();
    if let Some(d) = d {
        for (k, v) in d.iter() {
            let k: String = k.extract()?;
            let value = json_value(py, &v)?;
            if HostKey::find(&k).is_some() {
                let text = match &value {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                spec.set_host_text(&k, &text)
                    .map_err(PyValueError::new_err)?;
            } else if LimitKey::find(&k).is_none() {
                return Err(PyValueError::new_err(format!(
                    "unknown limit `{k}`; use {}, {}",
                    LimitKey::names(),
                    HostKey::names()
                )));
            } else {
                map.insert(k, value);
            }
        }
    }
    spec.limits = serde_json::from_value::<LimitSpec>(serde_json::Value::Object(map))
        .map_err(|e| PyValueError::new_err(format!("limits: {e}")))?;
    Ok(())
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
        let mut spec = HostSpec::new(workflow);
        spec.engine = match &engine {
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
        spec.rewards = components_of(py, &rewards)?;
        spec.tools = components_of(py, &tools)?;
        spec.tokenizer = tokenizer;
        self::limits(py, &limits, &mut spec)?;
        spec.config = match config {
            None => serde_json::json!({}),
            Some(c) if c.is_instance_of::<PyString>() => {
                serde_json::from_str(&c.extract::<String>()?)
                    .map_err(|e| PyValueError::new_err(format!("config is not JSON: {e}")))?
            }
            Some(c) => json_value(py, &c)?,
        };
        if !spec.config.is_object() {
            return Err(PyValueError::new_err("config must be a JSON object"));
        }
        let load = || -> anyhow::Result<(rollbox_host::Host, Option<Arc<PyEngine>>)> {
            if spec.engine.is_some() {
                pyo3_async_runtimes::tokio::get_runtime().block_on(spec.ensure_model())?;
                return Ok((spec.build()?, None));
            }
            let e = Arc::new(PyEngine::default());
            Ok((spec.build_with_engine(e.clone())?, Some(e)))
        };
        let (host, engine) = py
            .detach(load)
            .map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        Ok(Host {
            host: Arc::new(host),
            engine,
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
        request.sample_index = sample_index;
        if let Some(s) = seed {
            request.seed = s;
        }
        let host = self.host.clone();
        gate::awaitable(
            py,
            async move {
                let r = host.run_episode(request).await;
                drop(guard);
                r
            },
            move |py, r| report::to_python(py, r, report),
        )
    }

    /// Set the policy (weight) version stamped on tokens the engine does not stamp itself.
    fn set_version(&self, version: i32) {
        self.host.set_version(version);
    }

    /// The current policy version.
    #[getter]
    fn version(&self) -> i32 {
        self.host.version()
    }

    /// The workflow component's sha256.
    #[getter]
    fn sha256(&self) -> String {
        self.host.workflow().info().sha256.clone()
    }
}

/// What this build is (`rollbox.build_info()`): the package version, the commit, the WIT
/// package components target, and wasmtime with rollbox's patches, as a dict; `line` is what
/// `rollbox --version` prints after the name, `builtins` the components built in by name.
#[pyfunction]
fn build_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let info = rollbox_host::version::BuildInfo::new(env!("ROLLBOX_COMMIT"));
    let d = PyDict::new(py);
    d.set_item("version", info.version)?;
    d.set_item("commit", info.commit)?;
    d.set_item("wit", &info.wit)?;
    d.set_item("wasmtime", info.wasmtime)?;
    d.set_item("wasmtime_patches", info.wasmtime_patches.to_vec())?;
    d.set_item("line", info.to_string())?;
    let builtins: Vec<&str> = rollbox_host::builtin::BUILTINS
        .iter()
        .map(|b| b.name)
        .collect();
    d.set_item("builtins", builtins)?;
    Ok(d)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(build_info, m)?)?;
    let drain = wrap_pyfunction!(gate::drain, m)?;
    m.py()
        .import("atexit")?
        .call_method1("register", (&drain,))?;
    m.add_function(drain)?;
    m.add_class::<Host>()?;
    m.add_class::<components::Components>()?;
    m.add_class::<components::Session>()?;
    m.add_class::<components::Environment>()?;
    m.add("EpisodeError", m.py().get_type::<EpisodeError>())?;
    Ok(())
}
