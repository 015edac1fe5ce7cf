//! `GenConfig` with AReaL's `GenerationHyperparameters` defaults and overrides.

use serde_json::Value;

use crate::tokenizer::SpecialTokenIds;
use crate::{Error, GenConfig};

impl Default for GenConfig {
    /// AReaL's `GenerationHyperparameters` defaults ([`crate::gen_defaults`]).
    fn default() -> Self {
        use crate::gen_defaults as d;
        GenConfig {
            n_samples: d::N_SAMPLES,
            max_new_tokens: d::MAX_NEW_TOKENS,
            min_new_tokens: d::MIN_NEW_TOKENS,
            max_tokens: d::MAX_TOKENS,
            greedy: d::GREEDY,
            temperature: d::TEMPERATURE,
            top_p: d::TOP_P,
            top_k: d::TOP_K,
            stop_token_ids: Vec::new(),
            stop: Vec::new(),
            ignore_eos: d::IGNORE_EOS,
            skip_special_tokens: d::SKIP_SPECIAL_TOKENS,
            frequency_penalty: d::FREQUENCY_PENALTY,
            seed: None,
            exclude_default_stop_ids: false,
        }
    }
}

impl GenConfig {
    /// A copy with the fields named in `overrides` (a JSON object with AReaL's snake_case
    /// names: `max_new_tokens`, `temperature`, `stop_token_ids`, ...) replaced, like
    /// `gconfig.new(**kwargs)`. Unknown keys and wrong types are errors naming the key.
    pub fn new_with(&self, overrides: &Value) -> Result<GenConfig, Error> {
        let mut g = self.clone();
        let Some(map) = overrides.as_object() else {
            return if overrides.is_null() {
                Ok(g)
            } else {
                Err(Error::msg("gconfig must be a JSON object"))
            };
        };
        for (key, v) in map {
            let bad = || Error::msg(format!("gconfig `{key}` has the wrong type: {v}"));
            let uint = || {
                v.as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(bad)
            };
            let float = || v.as_f64().map(|x| x as f32).ok_or_else(bad);
            let boolean = || v.as_bool().ok_or_else(bad);
            match key.as_str() {
                "n_samples" => g.n_samples = uint()?,
                "max_new_tokens" => g.max_new_tokens = uint()?,
                "min_new_tokens" => g.min_new_tokens = uint()?,
                "max_tokens" => g.max_tokens = uint()?,
                "greedy" => g.greedy = boolean()?,
                "temperature" => g.temperature = float()?,
                "top_p" => g.top_p = float()?,
                "top_k" => g.top_k = uint()?,
                "ignore_eos" => g.ignore_eos = boolean()?,
                "skip_special_tokens" => g.skip_special_tokens = boolean()?,
                "frequency_penalty" => g.frequency_penalty = float()?,
                "exclude_default_stop_ids" => g.exclude_default_stop_ids = boolean()?,
                "seed" => {
                    g.seed = if v.is_null() {
                        None
                    } else {
                        Some(v.as_u64().ok_or_else(bad)?)
                    }
                }
                "stop_token_ids" => {
                    g.stop_token_ids = v
                        .as_array()
                        .ok_or_else(bad)?
                        .iter()
                        .map(|x| {
                            x.as_u64()
                                .and_then(|x| u32::try_from(x).ok())
                                .ok_or_else(bad)
                        })
                        .collect::<Result<_, _>>()?;
                }
                "stop" => {
                    g.stop = match v {
                        Value::Null => Vec::new(),
                        Value::String(s) => vec![s.clone()],
                        Value::Array(a) => a
                            .iter()
                            .map(|x| x.as_str().map(str::to_string).ok_or_else(bad))
                            .collect::<Result<_, _>>()?,
                        _ => return Err(bad()),
                    };
                }
                // Accepted for AReaL configs, meaningless here.
                "lora_name" | "use_beam_search" => {}
                other => return Err(Error::msg(format!("unknown gconfig field `{other}`"))),
            }
        }
        Ok(g)
    }

    /// AReaL's `new_with_stop_and_pad_token_ids`: append the pad id, then the eos id, to the
    /// stop ids when they are not already there.
    pub fn with_stop_and_pad_token_ids(mut self, special: &SpecialTokenIds) -> GenConfig {
        for id in [special.pad, special.eos].into_iter().flatten() {
            if !self.stop_token_ids.contains(&id) {
                self.stop_token_ids.push(id);
            }
        }
        self
    }
}
