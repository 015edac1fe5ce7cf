//! A llama-architecture transformer over GGUF weights, on candle.
//!
//! Written for the embedded engine's needs rather than taken from `candle-transformers`:
//!
//! * the KV cache lives outside the weights, one [`SeqCache`] per sequence, so many sequences
//!   share one copy of the weights;
//! * [`Model::forward`] runs either one sequence's prompt (prefill, `[1, T]`) or one new token of
//!   each of `B` sequences at different positions (batched decode, `[B, 1]`): the projections
//!   and the MLP run batched, attention runs per sequence against its own cache;
//! * a pass can be given up between layers ([`Model::forward_unless`]), its caches rewound, when
//!   the callers of its sequences have gone;
//! * RoPE tables cover the model's whole `context_length`;
//! * the last position is made contiguous before the output projection (quantized matmuls
//!   need it).
//!
//! Q4_1 weights can be re-quantised to Q8_0 at load ([`WeightFormat::Q8_0`]): candle has SIMD
//! kernels for Q8_0 and not for Q4_1.

use std::path::Path;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, gguf_file};
use candle_core::{DType, Device, Module, Result, Tensor};

pub use super::kv::SeqCache;
use super::kv::{Kv, decode_attention};

/// How the weight matrices are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// As stored in the file.
    Original,
    /// Q4_0/Q4_1/Q5_0/Q5_1 matrices re-quantised to Q8_0 at load (faster on CPU: candle has
    /// SIMD kernels for Q8_0; greedy outputs can differ slightly from the original weights).
    Q8_0,
    /// Q4_1 matrices kept as stored and multiplied by rollbox's AVX2 Q4_1 × Q8_1 kernel
    /// (the same arithmetic as llama.cpp's; about half the memory traffic of Q8_0).
    Q4_1Simd,
}

impl std::str::FromStr for WeightFormat {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "original" => Ok(WeightFormat::Original),
            "q8_0" | "q8" => Ok(WeightFormat::Q8_0),
            "q4_1-simd" | "q4_1_simd" | "simd" => Ok(WeightFormat::Q4_1Simd),
            other => Err(format!(
                "unknown weight format `{other}`; use original, q8_0 or q4_1-simd"
            )),
        }
    }
}

/// Hyper-parameters read from the GGUF metadata (`llama.*`).
#[derive(Debug, Clone)]
pub struct Config {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention).
    pub n_kv_head: usize,
    /// Hidden size.
    pub d_model: usize,
    /// Per-head size.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub eps: f64,
    /// Positions the model supports.
    pub context_length: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
}

/// A weight matrix: quantized for decode, and optionally dequantized to f32 for prefill,
/// where candle's f32 GEMM reads each weight once for all prompt rows while its quantized
/// kernels are compute-bound per row (3-4x faster prefill here). Decode always takes the
/// quantized path, one row per sequence, so a sequence's tokens and logprobs do not depend on
/// which other sequences share its batch.
struct Linear {
    quantized: QMatMul,
    dense: Option<super::dense::DenseMatrix>,
    simd: Option<super::q4_1::QuantMatrix>,
}

impl Linear {
    fn forward(&self, x: &Tensor, prefill: bool) -> Result<Tensor> {
        let mut dims = x.dims().to_vec();
        let k = dims.pop().unwrap_or(0);
        let rows = x.elem_count() / k.max(1);
        // One prompt row (the output projection of the last position) reads 4x fewer bytes
        // through the quantized kernel.
        match (&self.dense, &self.simd) {
            (Some(d), simd) if prefill && (rows > 1 || simd.is_none()) => {
                let out = d.matmul(&x.flatten_all()?.to_vec1::<f32>()?, rows)?;
                dims.push(d.rows());
                Tensor::from_vec(out, dims, x.device())
            }
            (_, Some(m)) => {
                let out = m.matmul(&x.flatten_all()?.to_vec1::<f32>()?, rows);
                dims.push(m.rows());
                Tensor::from_vec(out, dims, x.device())
            }
            _ => self.quantized.forward(x),
        }
    }
}

struct Layer {
    attn_norm: Tensor,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    ffn_norm: Tensor,
    w_gate: Linear,
    w_up: Linear,
    w_down: Linear,
}

/// The weights, shared by every sequence.
pub struct Model {
    cfg: Config,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    output: Linear,
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

impl SeqCache {
    /// An empty cache with room for `capacity` tokens (it grows if needed).
    pub fn new(model: &Model, capacity: usize) -> SeqCache {
        let (nkv, hd) = (model.cfg.n_kv_head, model.cfg.head_dim);
        SeqCache {
            layers: (0..model.cfg.n_layer)
                .map(|_| Kv::new(nkv, hd, capacity.max(16)))
                .collect(),
            pos: 0,
        }
    }
}

fn meta_u32(ct: &gguf_file::Content, key: &str) -> Result<usize> {
    match ct.metadata.get(key) {
        Some(v) => Ok(v.to_u32()? as usize),
        None => candle_core::bail!("GGUF metadata has no `{key}`"),
    }
}

fn meta_f32(ct: &gguf_file::Content, key: &str, default: f32) -> Result<f32> {
    match ct.metadata.get(key) {
        Some(v) => v.to_f32(),
        None => Ok(default),
    }
}

impl Model {
    /// Load a llama-architecture GGUF file. With `dense`, weight matrices are also kept
    /// dequantized (f32) for prefill and batched decode (about 4 bytes per parameter more).
    pub fn load(path: &Path, format: WeightFormat, dense: bool, device: &Device) -> Result<Model> {
        let mut file = rollbox_tokenizer::file::open_regular(path)
            .map_err(|e| candle_core::Error::Msg(format!("{}: {e}", path.display())))?;
        let ct = gguf_file::Content::read(&mut file)?;
        let arch = ct
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok().cloned())
            .unwrap_or_default();
        if arch != "llama" {
            candle_core::bail!(
                "{}: architecture `{arch}` is not supported by the embedded engine (llama only)",
                path.display()
            );
        }
        let n_head = meta_u32(&ct, "llama.attention.head_count")?;
        let d_model = meta_u32(&ct, "llama.embedding_length")?;
        let cfg = Config {
            n_layer: meta_u32(&ct, "llama.block_count")?,
            n_head,
            n_kv_head: meta_u32(&ct, "llama.attention.head_count_kv").unwrap_or(n_head),
            d_model,
            head_dim: meta_u32(&ct, "llama.rope.dimension_count").unwrap_or(d_model / n_head),
            eps: f64::from(meta_f32(
                &ct,
                "llama.attention.layer_norm_rms_epsilon",
                1e-5,
            )?),
            context_length: meta_u32(&ct, "llama.context_length").unwrap_or(4096),
            vocab_size: 0,
        };
        let freq_base = meta_f32(&ct, "llama.rope.freq_base", 10_000.0)?;
        let mut qtensor = |name: &str| ct.tensor(&mut file, name, device);
        let embed_q = qtensor("token_embd.weight")?;
        let embed = embed_q.dequantize(device)?;
        let vocab_size = embed.dim(0)?;
        let matmul = |q: QTensor| -> Result<Linear> {
            let f32_weights = if dense {
                Some(q.dequantize(device)?)
            } else {
                None
            };
            let simd = match (format, q.dtype()) {
                (WeightFormat::Q4_1Simd, GgmlDType::Q4_1) => {
                    let (n, k) = q.shape().dims2()?;
                    super::q4_1::QuantMatrix::from_bytes(&q.data()?, n, k)
                }
                _ => None,
            };
            let q = match (format, q.dtype()) {
                (
                    WeightFormat::Q8_0,
                    GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1,
                ) => QTensor::quantize(&q.dequantize(device)?, GgmlDType::Q8_0)?,
                _ => q,
            };
            Ok(Linear {
                quantized: QMatMul::from_qtensor(q)?,
                dense: f32_weights
                    .map(super::dense::DenseMatrix::new)
                    .transpose()?,
                simd,
            })
        };
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let p = format!("blk.{i}");
            layers.push(Layer {
                attn_norm: qtensor(&format!("{p}.attn_norm.weight"))?.dequantize(device)?,
                wq: matmul(qtensor(&format!("{p}.attn_q.weight"))?)?,
                wk: matmul(qtensor(&format!("{p}.attn_k.weight"))?)?,
                wv: matmul(qtensor(&format!("{p}.attn_v.weight"))?)?,
                wo: matmul(qtensor(&format!("{p}.attn_output.weight"))?)?,
                ffn_norm: qtensor(&format!("{p}.ffn_norm.weight"))?.dequantize(device)?,
                w_gate: matmul(qtensor(&format!("{p}.ffn_gate.weight"))?)?,
                w_up: matmul(qtensor(&format!("{p}.ffn_up.weight"))?)?,
                w_down: matmul(qtensor(&format!("{p}.ffn_down.weight"))?)?,
            });
        }
        let norm = qtensor("output_norm.weight")?.dequantize(device)?;
        // Tied embeddings: no `output.weight`, the embedding matrix projects to the vocabulary.
        let output = match qtensor("output.weight") {
            Ok(q) => matmul(q)?,
            Err(_) => {
                let simd = match (format, embed_q.dtype()) {
                    (WeightFormat::Q4_1Simd, GgmlDType::Q8_0) => {
                        let (n, k) = embed_q.shape().dims2()?;
                        super::q4_1::QuantMatrix::from_q8_0_bytes(&embed_q.data()?, n, k)
                    }
                    _ => None,
                };
                Linear {
                    quantized: QMatMul::from_qtensor(embed_q)?,
                    dense: dense
                        .then(|| super::dense::DenseMatrix::new(embed.clone()))
                        .transpose()?,
                    simd,
                }
            }
        };
        let (cos, sin) = rope_tables(cfg.head_dim, cfg.context_length, freq_base, device)?;
        Ok(Model {
            cfg: Config { vocab_size, ..cfg },
            embed,
            layers,
            norm,
            output,
            cos,
            sin,
            device: device.clone(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Run `tokens` through the model and return the logits of each sequence's last position,
    /// `[B, vocab]`. Either one sequence with any number of tokens (prefill) or any number of
    /// sequences with one token each (decode); each cache advances by its tokens.
    pub fn forward(&self, tokens: &[&[u32]], caches: &mut [&mut SeqCache]) -> Result<Tensor> {
        match self.forward_unless(tokens, caches, |_, _| false)? {
            Some(logits) => Ok(logits),
            None => candle_core::bail!("a forward pass that nobody gave up was abandoned"),
        }
    }

    /// [`Model::forward`], asking `abandon(done, stages)` before each stage (the layers, then
    /// the output projection; `stages` = layers + 1, `done` of them run). When it answers
    /// `true` the pass stops there, every cache is rewound to where it was, and the result is
    /// `None`: the engine gives up a step whose callers left instead of finishing it for nobody.
    pub fn forward_unless(
        &self,
        tokens: &[&[u32]],
        caches: &mut [&mut SeqCache],
        mut abandon: impl FnMut(usize, usize) -> bool,
    ) -> Result<Option<Tensor>> {
        let b = tokens.len();
        let t = tokens.first().map_or(0, |s| s.len());
        if b == 0 || t == 0 || caches.len() != b || (b > 1 && tokens.iter().any(|s| s.len() != 1)) {
            candle_core::bail!("forward takes one sequence of T tokens or B sequences of one token")
        }
        for c in caches.iter() {
            if c.pos + t > self.cfg.context_length {
                candle_core::bail!(
                    "sequence of {} tokens exceeds the model's context length {}",
                    c.pos + t,
                    self.cfg.context_length
                )
            }
        }
        let ids: Vec<u32> = tokens.iter().flat_map(|s| s.iter().copied()).collect();
        let ids = Tensor::from_vec(ids, b * t, &self.device)?;
        let mut x = self
            .embed
            .index_select(&ids, 0)?
            .reshape((b, t, self.cfg.d_model))?;
        let (cos, sin) = if b == 1 {
            let pos = caches[0].pos;
            (self.cos.narrow(0, pos, t)?, self.sin.narrow(0, pos, t)?)
        } else {
            let pos: Vec<u32> = caches.iter().map(|c| c.pos as u32).collect();
            let pos = Tensor::from_vec(pos, b, &self.device)?;
            let half = self.cfg.head_dim / 2;
            (
                self.cos.index_select(&pos, 0)?.reshape((b, 1, half))?,
                self.sin.index_select(&pos, 0)?.reshape((b, 1, half))?,
            )
        };
        let mask = if t > 1 {
            let group = self.cfg.n_head / self.cfg.n_kv_head;
            Some(causal_mask(group, t, caches[0].pos, &self.device)?)
        } else {
            None
        };
        let prefill = t > 1;
        let stages = self.layers.len() + 1;
        for (li, layer) in self.layers.iter().enumerate() {
            if abandon(li, stages) {
                caches.iter_mut().for_each(|c| c.rewind());
                return Ok(None);
            }
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, self.cfg.eps as f32)?;
            let attn =
                self.attention(li, layer, &h, (&cos, &sin), mask.as_ref(), caches, prefill)?;
            x = (x + layer.wo.forward(&attn, prefill)?)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, self.cfg.eps as f32)?;
            let gate = candle_nn::ops::silu(&layer.w_gate.forward(&h, prefill)?)?;
            let up = layer.w_up.forward(&h, prefill)?;
            x = (x + layer.w_down.forward(&(gate * up)?, prefill)?)?;
        }
        if abandon(self.layers.len(), stages) {
            caches.iter_mut().for_each(|c| c.rewind());
            return Ok(None);
        }
        for c in caches.iter_mut() {
            c.pos += t;
        }
        let last = x.narrow(1, t - 1, 1)?.contiguous()?;
        let last = candle_nn::ops::rms_norm(&last, &self.norm, self.cfg.eps as f32)?;
        Ok(Some(self.output.forward(&last, prefill)?.squeeze(1)?))
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one layer's attention needs its weights, input, rotary tables, mask and caches"
    )]
    fn attention(
        &self,
        li: usize,
        layer: &Layer,
        h: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        caches: &mut [&mut SeqCache],
        prefill: bool,
    ) -> Result<Tensor> {
        let (b, t, _) = h.dims3()?;
        let (nh, nkv, hd) = (self.cfg.n_head, self.cfg.n_kv_head, self.cfg.head_dim);
        let q = layer
            .wq
            .forward(h, prefill)?
            .reshape((b, t, nh, hd))?
            .transpose(1, 2)?
            .contiguous()?;
        let k = layer
            .wk
            .forward(h, prefill)?
            .reshape((b, t, nkv, hd))?
            .transpose(1, 2)?
            .contiguous()?;
        let v = layer
            .wv
            .forward(h, prefill)?
            .reshape((b, t, nkv, hd))?
            .transpose(1, 2)?
            .contiguous()?;
        let q = candle_nn::rotary_emb::rope_i(&q, cos, sin)?;
        let k = candle_nn::rotary_emb::rope_i(&k, cos, sin)?;
        // Into each sequence's host cache.
        let kd = k.flatten_all()?.to_vec1::<f32>()?;
        let vd = v.flatten_all()?.to_vec1::<f32>()?;
        let per = nkv * t * hd;
        for (i, cache) in caches.iter_mut().enumerate() {
            cache.layers[li].append(&kd[i * per..(i + 1) * per], &vd[i * per..(i + 1) * per], t);
        }
        let scale = 1.0 / (hd as f64).sqrt();
        if t == 1 {
            let qd = q.flatten_all()?.to_vec1::<f32>()?;
            let kvs: Vec<&Kv> = caches.iter().map(|c| &c.layers[li]).collect();
            let out = decode_attention(&qd, &kvs, nh, scale as f32);
            return Tensor::from_vec(out, (b, 1, nh * hd), &self.device);
        }
        // Prefill (one sequence of t tokens). Grouped-query attention without copying K/V:
        // the `group` query heads that share one KV head become `group * t` rows against it.
        let group = nh / nkv;
        let (k_all, v_all) = caches[0].layers[li].tensors(&self.device)?;
        let qi = q.reshape((1, nkv, group * t, hd))?;
        let mut att = (qi.matmul(&k_all.t()?)? * scale)?;
        if let Some(m) = mask {
            att = att.broadcast_add(m)?;
        }
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let out = att.matmul(&v_all)?.reshape((1, nh, t, hd))?;
        out.transpose(1, 2)?.reshape((b, t, nh * hd))
    }
}

/// cos/sin tables `[positions, head_dim / 2]` for interleaved RoPE.
fn rope_tables(
    head_dim: usize,
    positions: usize,
    base: f32,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let inv: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1.0 / base.powf(i as f32 / head_dim as f32))
        .collect();
    let n = inv.len();
    let inv = Tensor::from_vec(inv, (1, n), device)?;
    let pos = Tensor::arange(0u32, positions as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((positions, 1))?;
    let freqs = pos.broadcast_mul(&inv)?;
    Ok((freqs.cos()?, freqs.sin()?))
}

/// Additive causal mask `[group * t, past + t]`: the `group` query heads sharing a KV head are
/// stacked as `group` blocks of `t` rows (see [`Model::attention`]).
fn causal_mask(group: usize, t: usize, past: usize, device: &Device) -> Result<Tensor> {
    let s = past + t;
    let mask: Vec<f32> = (0..group * t)
        .flat_map(|r| {
            let i = r % t;
            (0..s).map(move |j| if j > past + i { f32::NEG_INFINITY } else { 0.0 })
        })
        .collect();
    Tensor::from_vec(mask, (group * t, s), device)
}

/// The logits as a vector, for sampling on the host.
pub fn row(logits: &Tensor, i: usize) -> Result<Vec<f32>> {
    logits.get(i)?.to_dtype(DType::F32)?.to_vec1()
}

/// Index of the largest logit.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best as u32
}
