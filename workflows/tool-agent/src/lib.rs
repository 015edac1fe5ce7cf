//! `tool-agent`: a tool-using agent loop as a rollbox component, in the shape of verl's
//! `ToolAgentLoop` and AReaL's tool-integrated-reasoning example.
//!
//! * The prompt goes through the chat template with the offered tools' OpenAI schemas
//!   (`tools::schemas`); a template that ignores `tools` (SmolLM2's) gets them in a system
//!   message instead, in the Hermes format.
//! * Token-in/token-out: the history is never re-tokenised. Each turn appends the engine's
//!   completion ids (loss mask 1, its logprobs and versions), then the tool turn's ids: the
//!   template's turn close after the end-of-turn token (with the token itself when the engine
//!   stopped elsewhere) and the chat-template difference that the tool messages add (loss mask
//!   0, logprob 0, version -1).
//! * Calls are parsed by pure functions ([`parse`]): Hermes `<tool_call>` JSON, or AReaL TIR
//!   stop markers. Invalid JSON, unknown tools, tool faults and timeouts are observations
//!   (`error: <kind>: <detail>`), not failed episodes; a turn cut by length ends the episode
//!   as truncated.
//! * The reward component named in the config scores the whole conversation at the end.
//!
//! Outputs: AReaL's tensors plus `turn_ids`; stats `reward`, `turns`, `tool_calls`,
//! `invalid_calls`, `tool_ms`; metadata: the same counts, why the episode ended, and the
//! conversation as chat messages.

pub mod config;
pub mod parse;

use config::{Config, Parser};
use parse::{Call, Invalid, error_observation, hermes, truncate_middle};
use rollbox_sdk::tokenizer::{self, ChatOptions};
use rollbox_sdk::tools::{self, ToolCall};
use rollbox_sdk::trajectory::TrajectoryBuilder;
use rollbox_sdk::types::Error as HostError;
use rollbox_sdk::{
    Episode, Error, GenConfig, ModelRequest, ModelResponse, Output, RewardInput, StopReason,
    Workflow, engine, log, rewards,
};
use serde_json::{Value, json};

/// The assistant text templates are probed with (never shown to the model).
const PLACEHOLDER: &str = "placeholder answer.";

/// The kind an error from the host's `tools` interface is observed as.
pub fn error_kind(e: &HostError) -> (&'static str, &str) {
    match e {
        HostError::Timeout(m) => ("timeout", m),
        HostError::Trapped(m) => ("tool_fault", m),
        HostError::InvalidOutput(m) => ("tool_error", m),
        HostError::LimitExceeded(m) => ("limit_exceeded", m),
        HostError::Unknown(m) => ("unknown_tool", m),
        HostError::InvalidArgument(m) => ("invalid_argument", m),
        HostError::Unavailable(m) | HostError::Unsupported(m) => ("unavailable", m),
    }
}

/// A system message that lists `schemas` and the Hermes call syntax, for templates that do
/// not render `tools` themselves.
pub fn tool_system_prompt(schemas: &[Value]) -> String {
    let mut s = String::from(
        "You may call tools to help you answer. The tools, as JSON schemas, are listed between <tools> and </tools>:\n<tools>\n",
    );
    for schema in schemas {
        s.push_str(&schema.to_string());
        s.push('\n');
    }
    s.push_str("</tools>\nTo call a tool, write one JSON object with the tool's name and its arguments between <tool_call> and </tool_call>, for example:\n<tool_call>\n{\"name\": \"TOOL_NAME\", \"arguments\": {\"ARGUMENT\": \"VALUE\"}}\n</tool_call>\nThe results come back in the next message. When you know the answer, give it without a tool call.");
    s
}

/// `messages` with `system` added: to the first message's text when it is a system message,
/// else as a new first message.
pub fn with_system(mut messages: Vec<Value>, system: &str) -> Vec<Value> {
    match messages.first_mut() {
        Some(m) if m["role"] == "system" => {
            let old = m["content"].as_str().unwrap_or_default().to_string();
            m["content"] = Value::from(if old.is_empty() {
                system.to_string()
            } else {
                format!("{old}\n\n{system}")
            });
        }
        _ => messages.insert(0, json!({"role": "system", "content": system})),
    }
    messages
}

/// What the chat template adds around a tool turn, computed once per episode.
struct Template {
    /// The prompt messages.
    messages: Vec<Value>,
    /// Options with `add_generation_prompt` set.
    options: ChatOptions,
    /// The template's end-of-turn token (the tokenizer's eos), when it closes turns with it.
    eos: Option<u32>,
    /// Tokens the template puts after the end-of-turn token of an assistant turn.
    after_eos: Vec<u32>,
}

impl Template {
    fn new(messages: Vec<Value>, options: ChatOptions) -> Result<Template, Error> {
        let eos = tokenizer::special_tokens().eos;
        let closed = tokenizer::apply_chat_template(
            &Value::Array(Self::probe(&messages)).to_string(),
            &ChatOptions {
                add_generation_prompt: false,
                ..options.clone()
            },
        )?;
        let (eos, after_eos) = match eos.and_then(|e| closed.iter().rposition(|&t| t == e)) {
            Some(i) => (eos, closed[i + 1..].to_vec()),
            None => (None, Vec::new()),
        };
        Ok(Template {
            messages,
            options,
            eos,
            after_eos,
        })
    }

    fn probe(messages: &[Value]) -> Vec<Value> {
        let mut m = messages.to_vec();
        m.push(json!({"role": "assistant", "content": PLACEHOLDER}));
        m
    }

    /// The tokens that close an assistant turn whose completion is `output`.
    fn close(&self, output: &[u32]) -> Vec<u32> {
        match self.eos {
            Some(eos) if output.last() == Some(&eos) => self.after_eos.clone(),
            Some(eos) => std::iter::once(eos)
                .chain(self.after_eos.iter().copied())
                .collect(),
            None => Vec::new(),
        }
    }

    /// The tokens `tool_messages` add after a closed assistant turn, up to and including the
    /// next assistant header: the template difference.
    fn tool_turn(&self, tool_messages: &[Value]) -> Result<Vec<u32>, Error> {
        let before = Self::probe(&self.messages);
        let mut after = before.clone();
        after.extend_from_slice(tool_messages);
        let a = tokenizer::apply_chat_template(
            &Value::Array(before).to_string(),
            &ChatOptions {
                add_generation_prompt: false,
                ..self.options.clone()
            },
        )?;
        let b = tokenizer::apply_chat_template(&Value::Array(after).to_string(), &self.options)?;
        if !b.starts_with(&a) {
            return Err(Error::msg(
                "the chat template does not extend a chat by appending tool messages; the tool agent needs one that does",
            ));
        }
        Ok(b[a.len()..].to_vec())
    }
}

/// One episode's running state.
struct Run {
    cfg: Config,
    gconfig: GenConfig,
    ids: Vec<u32>,
    traj: TrajectoryBuilder,
    conversation: Vec<Value>,
    assistant_tokens: u64,
    turns: u32,
    tool_calls: u32,
    invalid_calls: u32,
    tool_us: u64,
    end: &'static str,
    truncated: bool,
    /// The episode's open sessions, by tool (config `sessions`).
    sessions: std::collections::HashMap<String, tools::Session>,
}

impl Run {
    /// Generate one segment from `self.ids` with the turn's budget; `None` when no budget is
    /// left (the episode then ends as truncated).
    fn generate(&mut self, stop: Option<&str>) -> Result<Option<ModelResponse>, Error> {
        let mut g = self.gconfig.clone();
        if let Some(total) = self.cfg.max_new_tokens_total {
            let left = total.saturating_sub(self.assistant_tokens);
            if left == 0 {
                self.end = "max_new_tokens_total";
                self.truncated = true;
                return Ok(None);
            }
            g.max_new_tokens = g.max_new_tokens.min(left.min(u64::from(u32::MAX)) as u32);
        }
        if self.ids.len() >= g.max_tokens as usize {
            self.end = "max_tokens";
            self.truncated = true;
            return Ok(None);
        }
        if let Some(s) = stop {
            g.stop.push(s.to_string());
        }
        let resp = engine::generate(&ModelRequest::new(self.ids.clone(), g))?;
        if resp.input_tokens != self.ids {
            return Err(Error::msg(
                "the engine's input tokens are not the conversation so far",
            ));
        }
        self.traj.output(&resp);
        self.ids.extend_from_slice(&resp.output_tokens);
        self.assistant_tokens += resp.output_tokens.len() as u64;
        Ok(Some(resp))
    }

    /// Append context tokens (not trained on).
    fn context(&mut self, ids: &[u32]) {
        self.traj.prompt(ids);
        self.ids.extend_from_slice(ids);
    }

    /// Text of an output for the conversation record (without a final end-of-turn token).
    fn text(resp: &ModelResponse, eos: Option<u32>) -> Result<String, Error> {
        let mut out = resp.output_tokens.as_slice();
        if let (Some(e), Some(&last)) = (eos, out.last())
            && e == last
        {
            out = &out[..out.len() - 1];
        }
        Ok(tokenizer::decode(out, false)?)
    }

    /// Run the calls of one turn: invalid ones, unknown tools and calls over the limits get
    /// error observations; the rest run concurrently through the host. Returns `(tool name,
    /// observation)` per call, in order.
    fn run_calls(
        &mut self,
        calls: Vec<Result<Call, Invalid>>,
        offered: &[String],
    ) -> Result<Vec<(String, String)>, Error> {
        let mut observed: Vec<(String, Option<String>)> = Vec::with_capacity(calls.len());
        let mut pending = Vec::new();
        for call in calls {
            let (name, obs) = match call {
                Err(invalid) => {
                    self.invalid_calls += 1;
                    (
                        String::new(),
                        Some(error_observation(invalid.kind, &invalid.detail)),
                    )
                }
                Ok(c) if !offered.contains(&c.name) => {
                    self.invalid_calls += 1;
                    let detail = format!(
                        "no tool named `{}`; the tools are: {}",
                        parse::truncate_middle(&c.name, 64),
                        offered.join(", ")
                    );
                    (c.name, Some(error_observation("unknown_tool", &detail)))
                }
                Ok(c) if pending.len() >= self.cfg.max_parallel_calls as usize => {
                    let detail = format!(
                        "at most {} tool call(s) run per turn; this one did not run",
                        self.cfg.max_parallel_calls
                    );
                    (c.name, Some(error_observation("limit_exceeded", &detail)))
                }
                Ok(c) if self.tool_calls >= self.cfg.max_tool_calls => {
                    let detail = format!(
                        "the episode's {} tool calls are used up",
                        self.cfg.max_tool_calls
                    );
                    (c.name, Some(error_observation("limit_exceeded", &detail)))
                }
                Ok(c) => {
                    self.tool_calls += 1;
                    pending.push((
                        observed.len(),
                        ToolCall {
                            name: c.name.clone(),
                            args: Value::Object(c.arguments).to_string(),
                        },
                    ));
                    (c.name, None)
                }
            };
            observed.push((name, obs));
        }
        if !pending.is_empty() {
            let calls: Vec<ToolCall> = pending.iter().map(|(_, c)| c.clone()).collect();
            // Wall time waiting on the tools (the turn's calls run concurrently: counted once).
            let start = std::time::Instant::now();
            let results = if calls.iter().any(|c| self.cfg.sessions.contains(&c.name)) {
                // A tool with a session: the turn's calls in order, each session's in its
                // instance.
                calls.iter().map(|c| self.call(c)).collect()
            } else {
                tools::call_many(&calls)
            };
            self.tool_us += start.elapsed().as_micros() as u64;
            for ((index, _), result) in pending.iter().zip(results) {
                observed[*index].1 = Some(match result {
                    Ok(r) => truncate_middle(&r.output, self.cfg.max_tool_output_chars),
                    Err(e) => {
                        let (kind, detail) = error_kind(&e);
                        error_observation(kind, &truncate_middle(detail, 512))
                    }
                });
            }
        }
        Ok(observed
            .into_iter()
            .map(|(n, o)| (n, o.unwrap_or_default()))
            .collect())
    }

    /// Hermes: each turn one generation; its calls' results come back as `tool` messages.
    fn hermes(&mut self, template: &Template, offered: &[String]) -> Result<(), Error> {
        loop {
            let Some(resp) = self.generate(None)? else {
                return Ok(());
            };
            self.turns += 1;
            let text = tokenizer::decode(&resp.output_tokens, false)?;
            self.conversation.push(json!({
                "role": "assistant",
                "content": Self::text(&resp, template.eos)?,
            }));
            let parsed = hermes(&text);
            match resp.stop_reason {
                StopReason::Length => {
                    self.truncated = true;
                    self.end = if parsed.unclosed {
                        "length_in_tool_call"
                    } else {
                        "length"
                    };
                    return Ok(());
                }
                StopReason::Abort => {
                    self.end = "abort";
                    return Ok(());
                }
                StopReason::Stop | StopReason::ToolCalls => {}
            }
            let mut calls = parsed.calls;
            if parsed.unclosed {
                calls.push(Err(Invalid {
                    kind: "invalid_call",
                    detail: "`<tool_call>` is never closed with `</tool_call>`".into(),
                }));
            }
            if calls.is_empty() {
                self.end = "answer";
                return Ok(());
            }
            if self.turns >= self.cfg.max_turns {
                self.end = "max_turns";
                return Ok(());
            }
            let observed = self.run_calls(calls, offered)?;
            if self.invalid_calls > self.cfg.max_invalid_calls {
                self.end = "max_invalid_calls";
                return Ok(());
            }
            let messages: Vec<Value> = observed
                .into_iter()
                .map(|(name, content)| json!({"role": "tool", "name": name, "content": content}))
                .collect();
            let mut context = template.close(&resp.output_tokens);
            context.extend(template.tool_turn(&messages)?);
            self.context(&context);
            self.conversation.extend(messages);
        }
    }

    /// One call: in the episode's session of its tool when the config names the tool in
    /// `sessions` (opened on first use; a call that faults ends it, and the next call opens
    /// another), else in a fresh instance.
    fn call(&mut self, c: &ToolCall) -> Result<tools::ToolResult, HostError> {
        if !self.cfg.sessions.contains(&c.name) {
            return tools::call(&c.name, &c.args);
        }
        let session = match self.sessions.remove(&c.name) {
            Some(s) => s,
            None => tools::Session::open(&c.name)?,
        };
        let result = session.call(&c.args);
        if !matches!(
            result,
            Err(HostError::Timeout(_) | HostError::Trapped(_) | HostError::LimitExceeded(_))
        ) {
            self.sessions.insert(c.name.clone(), session);
        }
        result
    }

    /// AReaL TIR: generate until `start`, then until `end`; run the block; append the output
    /// inline; repeat.
    fn stop_markers(&mut self, eos: Option<u32>) -> Result<(), Error> {
        let Parser::StopMarkers {
            start,
            end,
            tool,
            arg,
            output,
        } = self.cfg.parser.clone()
        else {
            return Err(Error::msg("stop_markers called for another parser"));
        };
        let eos_text = match eos {
            Some(e) => Some(tokenizer::decode(&[e], false)?),
            None => None,
        };
        let mut text = String::new();
        while let Some(resp) = self.generate(Some(&start))? {
            let segment = tokenizer::decode(&resp.output_tokens, false)?;
            text.push_str(&Self::text(&resp, eos)?);
            self.turns += 1;
            if resp.stop_reason == StopReason::Length {
                self.truncated = true;
                self.end = "length";
                break;
            }
            if !parse::ends_with_marker(&segment, &start, eos_text.as_deref()) {
                self.end = "answer";
                break;
            }
            if self.turns >= self.cfg.max_turns {
                self.end = "max_turns";
                break;
            }
            let Some(code_resp) = self.generate(Some(&end))? else {
                break;
            };
            let code_text = tokenizer::decode(&code_resp.output_tokens, false)?;
            text.push_str(&Self::text(&code_resp, eos)?);
            if code_resp.stop_reason == StopReason::Length {
                self.truncated = true;
                self.end = "length_in_tool_call";
                break;
            }
            let Some(code) = parse::marked_code(&code_text, &end) else {
                // The turn ended inside the block: nothing more to run.
                self.end = "answer";
                break;
            };
            let call = Call {
                name: tool.clone(),
                arguments: [(arg.clone(), Value::from(code))].into_iter().collect(),
            };
            let observed = self.run_calls(vec![Ok(call)], std::slice::from_ref(&tool))?;
            let obs = observed.into_iter().next().map(|o| o.1).unwrap_or_default();
            let inline = output.replace("{output}", &obs);
            let ids = tokenizer::encode(&inline, false)?;
            self.context(&ids);
            text.push_str(&inline);
        }
        self.conversation
            .push(json!({"role": "assistant", "content": text}));
        Ok(())
    }
}

struct ToolAgent;

impl Workflow for ToolAgent {
    fn run_episode(episode: Episode) -> Result<Option<Output>, Error> {
        let cfg = Config::from_json(&episode.config).map_err(Error::msg)?;
        let registered = tools::names();
        let offered = match &cfg.tools {
            Some(list) => {
                for name in list {
                    if !registered.contains(name) {
                        return Err(Error::msg(format!(
                            "config `tools` names `{name}`, which is not registered (registered: {}); register it with --tool {name}=PATH",
                            registered.join(", ")
                        )));
                    }
                }
                list.clone()
            }
            None => registered,
        };
        let all: Vec<Value> = serde_json::from_str(&tools::schemas()?)?;
        let schemas: Vec<Value> = all
            .into_iter()
            .filter(|s| {
                s["function"]["name"]
                    .as_str()
                    .is_some_and(|n| offered.iter().any(|o| o == n))
            })
            .collect();
        let mut messages = match rollbox_sdk::prompt_messages(&episode.data, &episode.config)? {
            Value::Array(m) => m,
            _ => return Err(Error::msg("the prompt is not a list of chat messages")),
        };
        let mut options = episode.chat_options();
        if cfg.parser == Parser::Hermes && !schemas.is_empty() {
            let with_tools = ChatOptions {
                tools: Some(Value::Array(schemas.clone()).to_string()),
                ..options.clone()
            };
            let m = Value::Array(messages.clone()).to_string();
            if tokenizer::render_chat_template(&m, &with_tools)?
                == tokenizer::render_chat_template(&m, &options)?
            {
                // The template ignores `tools`: list them in the system message.
                messages = with_system(messages, &tool_system_prompt(&schemas));
            } else {
                options = with_tools;
            }
        }
        let prompt_ids =
            tokenizer::apply_chat_template(&Value::Array(messages.clone()).to_string(), &options)?;
        let template = Template::new(messages.clone(), options)?;
        let mut run = Run {
            gconfig: episode.gconfig()?,
            ids: Vec::new(),
            traj: TrajectoryBuilder::multi_turn(),
            conversation: messages,
            assistant_tokens: 0,
            turns: 0,
            tool_calls: 0,
            invalid_calls: 0,
            tool_us: 0,
            end: "answer",
            truncated: false,
            sessions: Default::default(),
            cfg,
        };
        run.context(&prompt_ids);
        match run.cfg.parser {
            Parser::Hermes => run.hermes(&template, &offered)?,
            Parser::StopMarkers { .. } => run.stop_markers(template.eos)?,
        }
        let completion_ids = run.ids[prompt_ids.len()..].to_vec();
        let scored = rewards::score(
            &run.cfg.reward,
            &RewardInput {
                prompt: tokenizer::decode(&prompt_ids, false)?,
                completion: tokenizer::decode(&completion_ids, false)?,
                prompt_ids,
                completion_ids,
                data: episode.reward_data()?,
            },
        )?;
        let tool_ms = run.tool_us as f64 / 1000.0;
        log::stat("reward", scored.value);
        log::stat("turns", f64::from(run.turns));
        log::stat("tool_calls", f64::from(run.tool_calls));
        log::stat("invalid_calls", f64::from(run.invalid_calls));
        log::stat("tool_ms", tool_ms);
        let mut traj = run.traj;
        traj.set_truncated(run.truncated);
        let mut out = traj.finish(scored.value as f32)?;
        out.metadata = json!({
            "turns": run.turns,
            "tool_calls": run.tool_calls,
            "invalid_calls": run.invalid_calls,
            "tool_ms": tool_ms,
            "end": run.end,
            "conversation": run.conversation,
        });
        Ok(Some(out))
    }
}

rollbox_sdk::export_workflow!(ToolAgent);
