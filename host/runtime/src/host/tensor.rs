//! Host side of the `tensor` interface: tensors live in the store's resource table; the
//! guest holds handles.
//!
//! Limits: `max_handles` live tensors and `max_tensor_bytes` of tensor data created per
//! episode, each tensor's bytes reserved from the host-wide memory budget (all soft: reported
//! once as `limit-exceeded`, then a trap). A shape that does not match
//! the data, a bad dim or mismatched dicts are `invalid-argument` values. Using a handle that
//! is not live traps (the guest's bindings cannot produce one).

use rollbox_tensor::{HostTensor, TensorData as Data, TensorError};
use wasmtime::component::Resource;

use crate::bindings::tensor::{self, Dtype, TensorData};
use crate::bindings::types::Error;
use crate::budget::TENSOR_RESERVATION_CHUNK;
use crate::limits::Setting;
use crate::views::TensorView;

fn from_wit(data: TensorData) -> Data {
    match data {
        TensorData::I32(v) => Data::I32(v),
        TensorData::I64(v) => Data::I64(v),
        TensorData::F32(v) => Data::F32(v),
        TensorData::Bf16(v) => Data::BF16(v),
        TensorData::Bool(v) => Data::Bool(v),
        TensorData::U8(v) => Data::U8(v),
    }
}

fn to_wit(data: Data) -> TensorData {
    match data {
        Data::I32(v) => TensorData::I32(v),
        Data::I64(v) => TensorData::I64(v),
        Data::F32(v) => TensorData::F32(v),
        Data::BF16(v) => TensorData::Bf16(v),
        Data::Bool(v) => TensorData::Bool(v),
        Data::U8(v) => TensorData::U8(v),
    }
}

fn invalid(e: TensorError) -> Error {
    Error::InvalidArgument(e.to_string())
}

impl TensorView<'_> {
    /// Tensor bytes this episode may still create.
    pub(crate) fn tensor_budget(&self) -> usize {
        self.call
            .limits
            .max_tensor_bytes
            .saturating_sub(self.ledger.tensor_bytes)
    }

    /// A refused or failed tensor operation as the guest sees it: a result over the episode's
    /// tensor bytes is a soft limit (planned before any allocation), anything else an
    /// `invalid-argument` value.
    fn tensor_error(&mut self, e: TensorError) -> wasmtime::Result<Error> {
        match e {
            TensorError::TooLarge { .. } => {
                let max = self.call.limits.max_tensor_bytes;
                self.call.refuse(
                    Setting::Limit("max_tensor_bytes"),
                    format!(
                        "{e}: this episode may create {max} bytes of tensors in all (`max_tensor_bytes`)"
                    ),
                )
            }
            other => Ok(invalid(other)),
        }
    }

    /// Admit a new tensor against the episode's limits and put it in the table.
    pub(crate) fn admit(
        &mut self,
        t: HostTensor,
    ) -> wasmtime::Result<Result<Resource<HostTensor>, Error>> {
        let bytes = t.size_in_bytes();
        let limits = self.call.limits.clone();
        if self.ledger.tensor_bytes.saturating_add(bytes) > limits.max_tensor_bytes {
            return Ok(Err(self.call.refuse(
                Setting::Limit("max_tensor_bytes"),
                format!(
                    "this episode created more than {} bytes of tensors (`max_tensor_bytes`)",
                    limits.max_tensor_bytes
                ),
            )?));
        }
        if self.ledger.live_tensors >= limits.max_handles {
            return Ok(Err(self.call.refuse(
                Setting::Limit("max_handles"),
                format!(
                    "this episode holds {} live tensors, the limit (`max_handles`); drop tensors it no longer needs",
                    limits.max_handles
                ),
            )?));
        }
        // Reserved from the host budget a chunk at a time (the exact amount when a chunk
        // does not fit).
        let host = self.services.host_memory().clone();
        let missing = (self.ledger.tensor_bytes + bytes).saturating_sub(self.ledger.memory.bytes());
        if missing > 0
            && !self
                .ledger
                .memory
                .grow_bulk(&host, missing.max(TENSOR_RESERVATION_CHUNK))
            && !self.ledger.memory.grow_bulk(&host, missing)
        {
            return Ok(Err(self
                .call
                .refuse(Setting::HostMemory, host.exhausted("a tensor", bytes))?));
        }
        let handle = self.table.push(t)?;
        self.ledger.tensor_bytes += bytes;
        self.ledger.live_tensors += 1;
        Ok(Ok(handle))
    }
}

impl tensor::HostTensor for TensorView<'_> {
    async fn create(
        &mut self,
        data: TensorData,
        shape: Vec<u32>,
    ) -> wasmtime::Result<Result<Resource<HostTensor>, Error>> {
        let shape = shape.into_iter().map(|d| d as usize).collect();
        let device = self.services.device().clone();
        match HostTensor::new_on(from_wit(data), shape, &device) {
            Ok(t) => self.admit(t),
            Err(e) => Ok(Err(invalid(e))),
        }
    }

    async fn shape(&mut self, this: Resource<HostTensor>) -> wasmtime::Result<Vec<u32>> {
        let t = self.table.get(&this)?;
        Ok(t.shape().iter().map(|&d| d as u32).collect())
    }

    async fn dtype(&mut self, this: Resource<HostTensor>) -> wasmtime::Result<Dtype> {
        Ok(match self.table.get(&this)?.dtype() {
            rollbox_tensor::DType::I32 => Dtype::I32,
            rollbox_tensor::DType::I64 => Dtype::I64,
            rollbox_tensor::DType::F32 => Dtype::F32,
            rollbox_tensor::DType::BF16 => Dtype::Bf16,
            rollbox_tensor::DType::Bool => Dtype::Bool,
            rollbox_tensor::DType::U8 => Dtype::U8,
        })
    }

    async fn unsqueeze(
        &mut self,
        this: Resource<HostTensor>,
        dim: u32,
    ) -> wasmtime::Result<Result<Resource<HostTensor>, Error>> {
        match self.table.get(&this)?.unsqueeze(dim as usize) {
            Ok(t) => self.admit(t),
            Err(e) => Ok(Err(invalid(e))),
        }
    }

    async fn data(&mut self, this: Resource<HostTensor>) -> wasmtime::Result<TensorData> {
        let data = self.table.get(&this)?.data()?;
        Ok(to_wit(data))
    }

    async fn drop(&mut self, this: Resource<HostTensor>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        self.ledger.live_tensors = self.ledger.live_tensors.saturating_sub(1);
        Ok(())
    }
}

impl tensor::Host for TensorView<'_> {
    async fn concat(
        &mut self,
        tensors: Vec<Resource<HostTensor>>,
    ) -> wasmtime::Result<Result<Resource<HostTensor>, Error>> {
        let budget = self.tensor_budget();
        let out = {
            let mut refs = Vec::with_capacity(tensors.len());
            for r in &tensors {
                refs.push(self.table.get(r)?);
            }
            rollbox_tensor::concat_within(&refs, budget)
        };
        match out {
            Ok(t) => self.admit(t),
            Err(e) => Ok(Err(self.tensor_error(e)?)),
        }
    }

    async fn concat_padded(
        &mut self,
        dicts: Vec<Vec<(String, Resource<HostTensor>)>>,
        pad_value: f64,
    ) -> wasmtime::Result<Result<Vec<(String, Resource<HostTensor>)>, Error>> {
        let budget = self.tensor_budget();
        let out = {
            let mut views = Vec::with_capacity(dicts.len());
            for dict in &dicts {
                let mut view = Vec::with_capacity(dict.len());
                for (k, r) in dict {
                    view.push((k.clone(), self.table.get(r)?));
                }
                views.push(view);
            }
            rollbox_tensor::concat_padded_within(&views, pad_value, budget)
        };
        let out = match out {
            Ok(o) => o,
            Err(e) => return Ok(Err(self.tensor_error(e)?)),
        };
        let mut handles = Vec::with_capacity(out.len());
        for (k, t) in out {
            match self.admit(t)? {
                Ok(h) => handles.push((k, h)),
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(handles))
    }
}
