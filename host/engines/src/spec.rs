//! Engine specs as the command line and config files name them: `embedded[:MODEL.gguf]`,
//! `sglang:URL[,URL...]`, `openai:URL` (a vLLM-style server returning token ids),
//! `openai+llamacpp:URL` (llama-cpp-python's server, ids recovered and checked) and
//! `replay:FILE`.
//!
//! Parsing is always available; building a backend needs the feature that holds it
//! (`embedded`, `http`), and a spec whose feature is off is refused with the feature to enable.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicI32;

use rollbox_tokenizer::HostTokenizer;

use crate::{EngineError, InferenceBackend};

/// What `--engine` accepts, for help texts and errors.
pub const ENGINE_SPECS: &str =
    "embedded[:MODEL.gguf], sglang:URL[,URL...], openai:URL, openai+llamacpp:URL, replay:FILE";

/// A parsed engine spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineSpec {
    /// The in-process model (`None`: the default model path).
    Embedded {
        /// The GGUF file.
        model: Option<PathBuf>,
    },
    /// SGLang servers.
    Sglang {
        /// Server addresses.
        addresses: Vec<String>,
    },
    /// An OpenAI-compatible completions server that returns token ids.
    OpenAi {
        /// Server address.
        address: String,
    },
    /// llama-cpp-python's OpenAI-compatible server (ids recovered with the host tokenizer).
    OpenAiLlamaCpp {
        /// Server address.
        address: String,
    },
    /// Recorded answers.
    Replay {
        /// The JSONL file.
        path: PathBuf,
    },
}

impl std::str::FromStr for EngineSpec {
    type Err = EngineError;

    fn from_str(spec: &str) -> Result<Self, EngineError> {
        let (kind, arg) = spec.split_once(':').unwrap_or((spec, ""));
        let invalid = |message: String| EngineError::InvalidRequest {
            backend: "spec",
            message,
        };
        Ok(match kind {
            "embedded" => EngineSpec::Embedded {
                model: (!arg.is_empty()).then(|| arg.into()),
            },
            "sglang" => {
                let addresses: Vec<String> = arg
                    .split(',')
                    .filter(|a| !a.is_empty())
                    .map(String::from)
                    .collect();
                if addresses.is_empty() {
                    return Err(invalid(
                        "the engine `sglang` needs addresses: sglang:http://10.0.0.1:30000,http://10.0.0.2:30000".into(),
                    ));
                }
                EngineSpec::Sglang { addresses }
            }
            "openai" | "openai+llamacpp" if arg.is_empty() => {
                return Err(invalid(format!(
                    "the engine `{kind}` needs an address: {kind}:http://127.0.0.1:8000"
                )));
            }
            "openai" => EngineSpec::OpenAi {
                address: arg.into(),
            },
            "openai+llamacpp" => EngineSpec::OpenAiLlamaCpp {
                address: arg.into(),
            },
            "replay" if arg.is_empty() => {
                return Err(invalid(
                    "the engine `replay` needs a file: replay:responses.jsonl".into(),
                ));
            }
            "replay" => EngineSpec::Replay { path: arg.into() },
            other => {
                return Err(invalid(format!(
                    "unknown engine `{other}`; available: {ENGINE_SPECS}"
                )));
            }
        })
    }
}

/// The spec as `--engine` takes it (parses back to the same spec).
impl std::fmt::Display for EngineSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineSpec::Embedded { model: None } => f.write_str("embedded"),
            EngineSpec::Embedded { model: Some(m) } => write!(f, "embedded:{}", m.display()),
            EngineSpec::Sglang { addresses } => write!(f, "sglang:{}", addresses.join(",")),
            EngineSpec::OpenAi { address } => write!(f, "openai:{address}"),
            EngineSpec::OpenAiLlamaCpp { address } => write!(f, "openai+llamacpp:{address}"),
            EngineSpec::Replay { path } => write!(f, "replay:{}", path.display()),
        }
    }
}

/// A backend and, for the embedded engine, the model's own tokenizer.
pub struct Engine {
    /// The backend.
    pub backend: Arc<dyn InferenceBackend>,
    /// The model's tokenizer when the backend holds one.
    pub tokenizer: Option<Arc<HostTokenizer>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.backend.name())
            .field("tokenizer", &self.tokenizer.is_some())
            .finish()
    }
}

impl EngineSpec {
    /// The kind, as the spec names it: `embedded`, `sglang`, `openai`, `openai+llamacpp`,
    /// `replay`.
    pub fn kind(&self) -> &'static str {
        match self {
            EngineSpec::Embedded { .. } => "embedded",
            EngineSpec::Sglang { .. } => "sglang",
            EngineSpec::OpenAi { .. } => "openai",
            EngineSpec::OpenAiLlamaCpp { .. } => "openai+llamacpp",
            EngineSpec::Replay { .. } => "replay",
        }
    }

    /// Whether the backend keeps model weights in this process (the embedded engine).
    pub fn holds_weights(&self) -> bool {
        matches!(self, EngineSpec::Embedded { .. })
    }

    /// Build the backend. `tokenizer` is the host tokenizer when one was given (needed by
    /// `openai+llamacpp`); `version` is the host's policy version counter (SGLang stamps it).
    pub fn build(
        &self,
        tokenizer: Option<&Arc<HostTokenizer>>,
        version: Arc<AtomicI32>,
    ) -> Result<Engine, EngineError> {
        let plain = |backend: Arc<dyn InferenceBackend>| Engine {
            backend,
            tokenizer: None,
        };
        let _ = (&tokenizer, &version);
        Ok(match self {
            EngineSpec::Replay { path } => {
                plain(Arc::new(crate::replay::ReplayBackend::from_file(path)?))
            }
            #[cfg(feature = "embedded")]
            EngineSpec::Embedded { model } => {
                use crate::embedded::{EmbeddedBackend, EmbeddedOptions, default_model_path};
                let backend = EmbeddedBackend::load(EmbeddedOptions {
                    model: model.clone().unwrap_or_else(default_model_path),
                    ..EmbeddedOptions::default()
                })?;
                let tokenizer = Some(backend.tokenizer());
                Engine {
                    backend: Arc::new(backend),
                    tokenizer,
                }
            }
            #[cfg(feature = "http")]
            EngineSpec::Sglang { addresses } => {
                use crate::sglang::{SglangBackend, SglangOptions};
                plain(Arc::new(SglangBackend::new(
                    SglangOptions::new(addresses.clone()),
                    version,
                )?))
            }
            #[cfg(feature = "http")]
            EngineSpec::OpenAi { address } => {
                use crate::openai::{OpenAiBackend, OpenAiOptions};
                plain(Arc::new(OpenAiBackend::new(OpenAiOptions::new(
                    address.clone(),
                ))?))
            }
            #[cfg(feature = "http")]
            EngineSpec::OpenAiLlamaCpp { address } => {
                use crate::openai::{Detokenizer, OpenAiBackend, OpenAiOptions, OpenAiServer};
                let tok = tokenizer
                    .ok_or_else(|| EngineError::InvalidRequest {
                        backend: "openai",
                        message: "the engine `openai+llamacpp` needs a tokenizer (the served model's GGUF) to check token ids".into(),
                    })?
                    .clone();
                let detokenize: Detokenizer =
                    Arc::new(move |ids: &[u32]| tok.decode(ids, false).map_err(|e| e.to_string()));
                plain(Arc::new(OpenAiBackend::new(OpenAiOptions {
                    server: OpenAiServer::LlamaCppPython { detokenize },
                    ..OpenAiOptions::new(address.clone())
                })?))
            }
            #[allow(
                unreachable_patterns,
                reason = "reachable when a backend feature is off"
            )]
            other => {
                return Err(EngineError::Unavailable {
                    backend: other.kind(),
                    message: format!(
                        "this build has no `{}` engine; build rollbox-engines with the `{}` feature",
                        other.kind(),
                        if other.holds_weights() {
                            "embedded"
                        } else {
                            "http"
                        }
                    ),
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_name_the_fix() {
        let p = |s: &str| s.parse::<EngineSpec>();
        assert_eq!(
            p("embedded").expect("spec"),
            EngineSpec::Embedded { model: None }
        );
        assert_eq!(
            p("embedded:m.gguf").expect("spec"),
            EngineSpec::Embedded {
                model: Some("m.gguf".into())
            }
        );
        assert_eq!(
            p("sglang:http://a,http://b").expect("spec"),
            EngineSpec::Sglang {
                addresses: vec!["http://a".into(), "http://b".into()]
            }
        );
        assert_eq!(
            p("openai+llamacpp:http://h").expect("spec").kind(),
            "openai+llamacpp"
        );
        assert!(p("embedded").expect("spec").holds_weights());
        for s in [
            "embedded",
            "embedded:m.gguf",
            "sglang:http://a,http://b",
            "openai:http://h:1",
            "openai+llamacpp:http://h",
            "replay:r.jsonl",
        ] {
            assert_eq!(p(s).expect("spec").to_string(), s);
        }
        assert!(!p("replay:x.jsonl").expect("spec").holds_weights());
        for (bad, says) in [
            ("sglang:", "needs addresses"),
            ("replay", "needs a file"),
            ("openai", "needs an address"),
            ("vllm:x", "available: embedded"),
        ] {
            let e = p(bad).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
