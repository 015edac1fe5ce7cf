//! The workflow's configuration: parsed and checked once per episode, so a bad value fails
//! the episode with a message naming the key instead of misbehaving later.

use serde_json::Value;

/// How tool calls are found in the model's text.
#[derive(Debug, Clone, PartialEq)]
pub enum Parser {
    /// `<tool_call>{"name", "arguments"}</tool_call>`, results as `tool` messages through the
    /// chat template.
    Hermes,
    /// AReaL TIR: generate to `start`, then to `end`; the code between goes to `tool` as
    /// `{arg: code}`; the output is appended inline as `output` with `{output}` replaced.
    StopMarkers {
        /// Opens a block, e.g. "```python".
        start: String,
        /// Closes it, e.g. "```".
        end: String,
        /// The registered tool that runs the block.
        tool: String,
        /// The argument the block's text goes in.
        arg: String,
        /// The inline observation, `{output}` replaced by the tool's output.
        output: String,
    },
}

/// The episode's limits and options.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The reward component scoring the final conversation.
    pub reward: String,
    /// The tools offered (default: every registered tool).
    pub tools: Option<Vec<String>>,
    /// The call syntax.
    pub parser: Parser,
    /// Assistant turns at most (each one generation; in stop-markers mode each tool round).
    pub max_turns: u32,
    /// Assistant tokens at most, over all turns (tool and template tokens not counted).
    pub max_new_tokens_total: Option<u64>,
    /// Tool calls run at most, over the episode.
    pub max_tool_calls: u32,
    /// Invalid calls (bad JSON, unknown tool, unclosed call) tolerated; one more ends the
    /// episode.
    pub max_invalid_calls: u32,
    /// Calls of one turn that run (concurrently); the others get an error observation.
    pub max_parallel_calls: u32,
    /// Characters of one tool output kept (middle truncation with a marker).
    pub max_tool_output_chars: usize,
    /// Tools whose calls of the episode run in one session (one instance kept for the
    /// episode: python-exec's variables persist from one call to the next).
    pub sessions: Vec<String>,
}

fn uint(cfg: &Value, key: &str, default: u64, min: u64) -> Result<u64, String> {
    match &cfg[key] {
        Value::Null => Ok(default),
        v => match v.as_u64() {
            Some(n) if n >= min => Ok(n),
            _ => Err(format!(
                "config `{key}` must be an integer of at least {min}, got {v}"
            )),
        },
    }
}

fn string(cfg: &Value, key: &str, default: &str) -> Result<String, String> {
    match &cfg[key] {
        Value::Null => Ok(default.to_string()),
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        v => Err(format!(
            "config `{key}` must be a non-empty string, got {v}"
        )),
    }
}

/// A list of tool names under `key`, `None` when absent.
fn names(cfg: &Value, key: &str) -> Result<Option<Vec<String>>, String> {
    match &cfg[key] {
        Value::Null => Ok(None),
        Value::Array(a) => a
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    format!("config `{key}` must list tool names (strings), got {v}")
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        v => Err(format!("config `{key}` must be a list of names, got {v}")),
    }
}

impl Config {
    /// Read the config object; defaults as documented in the README.
    pub fn from_json(cfg: &Value) -> Result<Config, String> {
        let tools = names(cfg, "tools")?;
        let sessions = names(cfg, "sessions")?.unwrap_or_default();
        let parser = match &cfg["parser"] {
            Value::Null => Parser::Hermes,
            Value::String(s) if s == "hermes" => Parser::Hermes,
            Value::String(s) if s == "stop-markers" || s == "stop_markers" => {
                let m = &cfg["markers"];
                Parser::StopMarkers {
                    start: string(m, "start", "```python")?,
                    end: string(m, "end", "```")?,
                    tool: string(m, "tool", "python")?,
                    arg: string(m, "arg", "code")?,
                    output: string(m, "output", "```output\n{output}\n```\n")?,
                }
            }
            v => {
                return Err(format!(
                    "config `parser` must be \"hermes\" or \"stop-markers\", got {v}"
                ));
            }
        };
        let max_new_tokens_total = match &cfg["max_new_tokens_total"] {
            Value::Null => None,
            _ => Some(uint(cfg, "max_new_tokens_total", 0, 1)?),
        };
        let small = |key, default| -> Result<u32, String> {
            let n = uint(cfg, key, default, 0)?;
            u32::try_from(n).map_err(|_| format!("config `{key}` is too large: {n}"))
        };
        let config = Config {
            reward: string(cfg, "reward", "math")?,
            tools,
            parser,
            max_turns: small("max_turns", 4)?,
            max_new_tokens_total,
            max_tool_calls: small("max_tool_calls", 8)?,
            max_invalid_calls: small("max_invalid_calls", 3)?,
            max_parallel_calls: small("max_parallel_calls", 1)?,
            max_tool_output_chars: uint(cfg, "max_tool_output_chars", 1024, 16)? as usize,
            sessions,
        };
        if config.max_turns == 0 {
            return Err("config `max_turns` must be at least 1".into());
        }
        if config.max_parallel_calls == 0 {
            return Err("config `max_parallel_calls` must be at least 1".into());
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_errors_name_the_key() {
        let c = Config::from_json(&json!({})).expect("defaults");
        assert_eq!(c.parser, Parser::Hermes);
        assert_eq!(
            (c.max_turns, c.max_parallel_calls, c.max_invalid_calls),
            (4, 1, 3)
        );
        assert_eq!(c.max_tool_output_chars, 1024);
        assert_eq!(c.reward, "math");
        let tir = Config::from_json(&json!({"parser": "stop-markers"})).expect("tir");
        assert!(
            matches!(tir.parser, Parser::StopMarkers { ref start, .. } if start == "```python")
        );
        for (bad, key) in [
            (json!({"max_turns": 0}), "max_turns"),
            (json!({"max_turns": -1}), "max_turns"),
            (json!({"parser": "xml"}), "parser"),
            (json!({"tools": "python"}), "tools"),
            (json!({"tools": [1]}), "tools"),
            (json!({"max_parallel_calls": 0}), "max_parallel_calls"),
            (json!({"max_new_tokens_total": 0}), "max_new_tokens_total"),
            (json!({"max_tool_output_chars": 3}), "max_tool_output_chars"),
            (
                json!({"parser": "stop-markers", "markers": {"start": ""}}),
                "start",
            ),
        ] {
            let e = Config::from_json(&bad).expect_err("refused");
            assert!(e.contains(&format!("`{key}`")), "{bad}: {e}");
        }
    }
}
