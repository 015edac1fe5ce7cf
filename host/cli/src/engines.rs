//! `--engine` specs: `embedded[:MODEL.gguf]`, `sglang:http://a,http://b`,
//! `openai:http://host:port` (vLLM-style token-id server), `openai+llamacpp:http://...`
//! (llama-cpp-python's server, ids recovered and checked), `replay:FILE`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicI32;

use anyhow::{Context as _, bail};
use rollbox_engines::InferenceBackend;
use rollbox_engines::embedded::{EmbeddedBackend, EmbeddedOptions, default_model_path};
use rollbox_engines::openai::{OpenAiBackend, OpenAiOptions, OpenAiServer};
use rollbox_engines::replay::ReplayBackend;
use rollbox_engines::sglang::{SglangBackend, SglangOptions};
use rollbox_tokenizer::HostTokenizer;

/// A backend and, for the embedded engine, the model's own tokenizer.
pub struct Engine {
    pub backend: Arc<dyn InferenceBackend>,
    pub tokenizer: Option<Arc<HostTokenizer>>,
}

/// The engine kind of an `--engine` spec: `embedded`, `sglang`, ... (the part before `:`).
pub fn kind(spec: &str) -> &str {
    spec.split_once(':').map_or(spec, |(k, _)| k)
}

/// Build the backend named by `spec`. `tokenizer` is the host tokenizer when one was given
/// (needed by `openai+llamacpp`); `version` is the host's policy version counter.
pub fn build(
    spec: &str,
    tokenizer: Option<&Arc<HostTokenizer>>,
    version: Arc<AtomicI32>,
) -> anyhow::Result<Engine> {
    let (kind, arg) = (kind(spec), spec.split_once(':').map_or("", |(_, a)| a));
    let plain = |backend: Arc<dyn InferenceBackend>| Engine {
        backend,
        tokenizer: None,
    };
    Ok(match kind {
        "replay" => {
            if arg.is_empty() {
                bail!("--engine replay needs a file: --engine replay:responses.jsonl");
            }
            plain(Arc::new(ReplayBackend::from_file(Path::new(arg))?))
        }
        "embedded" => {
            let model = if arg.is_empty() {
                default_model_path()
            } else {
                arg.into()
            };
            let backend = EmbeddedBackend::load(EmbeddedOptions {
                model,
                ..EmbeddedOptions::default()
            })?;
            let tokenizer = Some(backend.tokenizer());
            Engine {
                backend: Arc::new(backend),
                tokenizer,
            }
        }
        "sglang" => {
            let addrs: Vec<&str> = arg.split(',').filter(|a| !a.is_empty()).collect();
            if addrs.is_empty() {
                bail!(
                    "--engine sglang needs addresses: --engine sglang:http://10.0.0.1:30000,http://10.0.0.2:30000"
                );
            }
            plain(Arc::new(SglangBackend::new(
                SglangOptions::new(addrs),
                version,
            )?))
        }
        "openai" => plain(Arc::new(OpenAiBackend::new(OpenAiOptions::new(arg))?)),
        "openai+llamacpp" => {
            let tok = tokenizer
                .context("--engine openai+llamacpp needs --tokenizer (the served model's GGUF) to check token ids")?
                .clone();
            let detokenize: rollbox_engines::openai::Detokenizer =
                Arc::new(move |ids: &[u32]| tok.decode(ids, false).map_err(|e| e.to_string()));
            let options = OpenAiOptions {
                server: OpenAiServer::LlamaCppPython { detokenize },
                ..OpenAiOptions::new(arg)
            };
            plain(Arc::new(OpenAiBackend::new(options)?))
        }
        other => bail!(
            "unknown engine `{other}`; available: embedded[:MODEL.gguf], sglang:URL[,URL...], openai:URL, openai+llamacpp:URL, replay:FILE"
        ),
    })
}
