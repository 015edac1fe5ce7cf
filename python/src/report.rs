//! An episode's report as Python values: the tensor dict as numpy arrays (each owning the
//! vector read out of the host tensor, without a further copy), None for a rejection,
//! `EpisodeError` for a failure; with `report=True`, the accounting too.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use rollbox_runtime::{EpisodeOutcome, EpisodeReport, GuestFault, Setting};
use rollbox_tensor::TensorData;

use crate::EpisodeError;

fn array<'py, T: numpy::Element>(
    py: Python<'py>,
    v: Vec<T>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let flat = PyArray1::from_vec(py, v);
    Ok(flat.reshape(shape.to_vec())?.into_any())
}

fn tensors<'py>(py: Python<'py>, t: &rollbox_runtime::Trajectory) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, tensor) in &t.tensors {
        let shape = tensor.shape();
        let data = tensor
            .data()
            .map_err(|e| EpisodeError::new_err(format!("reading `{name}`: {e}")))?;
        let a = match data {
            TensorData::I32(v) => array(py, v, shape)?,
            TensorData::I64(v) => array(py, v, shape)?,
            TensorData::F32(v) => array(py, v, shape)?,
            TensorData::Bool(v) => array(py, v, shape)?,
            TensorData::U8(v) => array(py, v, shape)?,
            TensorData::BF16(v) => array(py, v, shape)?,
        };
        d.set_item(name, a)?;
    }
    Ok(d)
}

fn accounting<'py>(py: Python<'py>, r: &EpisodeReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", &r.id)?;
    d.set_item("outcome", r.outcome.kind())?;
    if let EpisodeOutcome::Failed(f) = &r.outcome {
        d.set_item("error", failure(f))?;
    }
    d.set_item("wall_s", r.wall.as_secs_f64())?;
    d.set_item("generate_calls", r.generate_calls)?;
    d.set_item("generated_tokens", r.generated_tokens)?;
    d.set_item("peak_memory_bytes", r.peak_memory_bytes)?;
    d.set_item("fuel", r.fuel_consumed)?;
    d.set_item("stats", r.stats.clone())?;
    let calls = PyList::empty(py);
    for c in &r.reward_calls {
        let e = PyDict::new(py);
        e.set_item("name", &c.name)?;
        e.set_item("value", c.value)?;
        e.set_item("timed_out", c.timed_out)?;
        e.set_item("wall_s", c.wall_us as f64 / 1e6)?;
        e.set_item("attempts", c.attempts)?;
        e.set_item("peak_memory_bytes", c.peak_memory_bytes)?;
        calls.append(e)?;
    }
    d.set_item("reward_calls", calls)?;
    d.set_item(
        "logs",
        r.logs
            .iter()
            .map(|l| format!("{}: {}", l.level, l.message))
            .collect::<Vec<_>>(),
    )?;
    d.set_item("stdout", &r.stdout)?;
    d.set_item("stderr", &r.stderr)?;
    if let EpisodeOutcome::Accepted(t) = &r.outcome {
        d.set_item("metadata", t.metadata_json.as_str())?;
    }
    Ok(d)
}

/// The hint to change `setting`, as `Host(...)`'s keyword arguments say it.
fn hint(setting: &Setting) -> String {
    match setting {
        Setting::Limit(key) => format!("raise it with Host(limits={{\"{key}\": ...}})"),
        Setting::HostMemory => {
            "raise Host(limits={\"max_host_memory\": ...}) or run fewer episodes at once".into()
        }
        Setting::Concurrency => "run fewer episodes at once".into(),
    }
}

/// A failed episode's fault with the keyword to change, when a setting caused it.
fn failure(f: &GuestFault) -> String {
    f.explain(hint)
}

/// What `arun_episode` returns for report `r`.
pub fn to_python(py: Python<'_>, r: EpisodeReport, with_report: bool) -> PyResult<Py<PyAny>> {
    let value: Bound<'_, PyAny> = match &r.outcome {
        EpisodeOutcome::Accepted(t) => tensors(py, t)?.into_any(),
        EpisodeOutcome::Rejected => py.None().into_bound(py),
        EpisodeOutcome::Failed(f) if !with_report => {
            let err = EpisodeError::new_err(format!("episode {} failed: {}", r.id, failure(f)));
            err.value(py).setattr("kind", f.kind())?;
            return Err(err);
        }
        EpisodeOutcome::Failed(_) => py.None().into_bound(py),
    };
    if !with_report {
        return Ok(value.unbind());
    }
    Ok(PyTuple::new(py, [value, accounting(py, &r)?.into_any()])?
        .into_any()
        .unbind())
}
