// AReaL 1.0.4's RLVRWorkflow in JavaScript, compiled to a rollbox workflow component with
// componentize-js (scripts/guests/build-js-component.mjs workflow workflows/rlvr/rlvr.js OUT.wasm).
//
// The same steps as areal/workflow/rlvr.py and the Rust and Python rlvr: the row's chat
// messages (or its text as one user message: `messages`, `prompt`, `question`, `problem`, or
// the config's `prompt_key`, with `prompt_suffix` and `system_prompt`) through the host chat
// template with the generation prompt; one sample with the config's `gconfig` plus the
// tokenizer's pad and eos ids as stop ids; the reward named in the config (`math` by default)
// on (decoded prompt, decoded completion, prompt ids, completion ids, row); AReaL's tensors.

import { generate } from 'rollbox:workflow/engine@0.1.2';
import { applyChatTemplate, decode, specialTokens } from 'rollbox:workflow/tokenizer@0.1.2';
import { score } from 'rollbox:workflow/rewards@0.1.2';
import { Tensor } from 'rollbox:workflow/tensor@0.1.2';
import { stat } from 'rollbox:workflow/log@0.1.2';

const PROMPT_KEYS = ['messages', 'prompt', 'question', 'problem'];

// AReaL's GenerationHyperparameters defaults, in the WIT record's field names.
const GCONFIG_DEFAULTS = {
  nSamples: 1, maxNewTokens: 16384, minNewTokens: 0, maxTokens: 32768, greedy: false,
  temperature: 1.0, topP: 1.0, topK: 100000000, stopTokenIds: [], stop: [], ignoreEos: false,
  skipSpecialTokens: true, frequencyPenalty: 0.0, seed: undefined, excludeDefaultStopIds: false,
};
const IGNORED_GCONFIG = new Set(['lora_name', 'use_beam_search']);

const camel = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

function lookup(row, key) {
  return key.split('.').reduce((v, part) => (v && typeof v === 'object' ? v[part] : undefined), row);
}

// Host errors arrive as exceptions whose `payload` is the WIT `error` variant.
function hostCall(what, f) {
  try {
    return f();
  } catch (e) {
    const p = e && e.payload;
    throw new Error(p && p.tag ? `${what}: ${p.tag}: ${p.val}` : `${what}: ${e}`);
  }
}

function promptMessages(data, config) {
  const keys = typeof config.prompt_key === 'string' ? [config.prompt_key] : PROMPT_KEYS;
  const key = keys.find((k) => lookup(data, k) !== undefined && lookup(data, k) !== null);
  if (key === undefined) {
    const names = keys.map((k) => `\`${k}\``).join(', ');
    throw new Error(`the row has no prompt: none of ${names} (set prompt_key in the config to the column that holds it)`);
  }
  const value = lookup(data, key);
  let messages;
  if (Array.isArray(value)) {
    value.forEach((m, i) => {
      if (!m || typeof m.role !== 'string') {
        throw new Error(`\`${key}\`[${i}] is not a {"role", "content"} message`);
      }
    });
    messages = [...value];
  } else if (typeof value === 'string') {
    messages = [{ role: 'user', content: value + (config.prompt_suffix || '') }];
  } else {
    throw new Error(`\`${key}\` must be a list of {"role", "content"} messages or a text`);
  }
  if (typeof config.system_prompt === 'string' && !(messages.length && messages[0].role === 'system')) {
    messages.unshift({ role: 'system', content: config.system_prompt });
  }
  return messages;
}

function rewardData(data, config) {
  if (typeof config.answer_key !== 'string') return data;
  const answer = lookup(data, config.answer_key);
  if (answer === undefined || answer === null) {
    throw new Error(`the row has no \`${config.answer_key}\` (the config's answer_key)`);
  }
  return { ...data, answer };
}

function gconfigOf(config) {
  const g = { ...GCONFIG_DEFAULTS, stopTokenIds: [], stop: [] };
  for (const [key, value] of Object.entries(config.gconfig || {})) {
    if (IGNORED_GCONFIG.has(key)) continue;
    const name = camel(key);
    if (!(name in GCONFIG_DEFAULTS)) throw new Error(`unknown gconfig field \`${key}\``);
    g[name] = name === 'stop' && typeof value === 'string' ? [value] : value ?? GCONFIG_DEFAULTS[name];
  }
  // new_with_stop_and_pad_token_ids: pad first, then eos.
  const special = specialTokens();
  for (const id of [special.pad, special.eos]) {
    if (id !== undefined && !g.stopTokenIds.includes(id)) g.stopTokenIds.push(id);
  }
  g.nSamples = 1;
  return g;
}

const row2 = (n) => Uint32Array.of(1, n);

// The `workflow` world's export: `run-episode(input) -> result<option<episode-output>, string>`.
// An exception fails the episode with its message and stack: componentize-js lowers the
// `err` case from the thrown value's `payload`.
export function runEpisode(input) {
  try {
    return episode(input);
  } catch (e) {
    const message = e instanceof Error ? `${e.name}: ${e.message}\n${e.stack || ''}` : String(e);
    const err = new Error(message);
    err.payload = message;
    throw err;
  }
}

function episode(input) {
  const data = input.data.trim() ? JSON.parse(input.data) : {};
  const config = input.config.trim() ? JSON.parse(input.config) : {};
  const rewardName = config.reward || 'math';
  const enableThinking = Boolean(config.enable_thinking);

  const options = { addGenerationPrompt: true, tools: undefined, extra: JSON.stringify({ enable_thinking: enableThinking }) };
  const inputIds = hostCall('apply_chat_template', () => applyChatTemplate(JSON.stringify(promptMessages(data, config)), options));
  const req = { rid: '', inputIds, gconfig: gconfigOf(config), imageData: [], metadata: '{}' };
  const promptStr = hostCall('decode', () => decode(inputIds, false));

  const resp = hostCall('generate', () => generate(req));
  const completionsStr = hostCall('decode', () => decode(resp.outputTokens, false));
  const reward = hostCall(`reward \`${rewardName}\``, () => score(rewardName, {
    prompt: promptStr,
    completion: completionsStr,
    promptIds: resp.inputTokens,
    completionIds: resp.outputTokens,
    data: JSON.stringify(rewardData(data, config)),
  })).value;
  stat('reward', reward);

  // Build result tensor dict with batch dim 1
  const inputLen = resp.inputTokens.length;
  const outputLen = resp.outputTokens.length;
  const n = inputLen + outputLen;
  const seq = new Int32Array(n);
  seq.set(resp.inputTokens);
  seq.set(resp.outputTokens, inputLen);
  const logprobs = new Float32Array(n);
  logprobs.set(resp.outputLogprobs.subarray(0, outputLen), inputLen);
  const lossMask = new Int32Array(n).fill(1, inputLen);
  const versions = new Int32Array(n).fill(-1);
  versions.set(resp.outputVersions.subarray(0, outputLen), inputLen);
  const attention = new Array(n).fill(true);

  const tensors = [
    ['input_ids', Tensor.create({ tag: 'i32', val: seq }, row2(n))],
    ['loss_mask', Tensor.create({ tag: 'i32', val: lossMask }, row2(n))],
    ['logprobs', Tensor.create({ tag: 'f32', val: logprobs }, row2(n))],
    ['versions', Tensor.create({ tag: 'i32', val: versions }, row2(n))],
    ['attention_mask', Tensor.create({ tag: 'bool', val: attention }, row2(n))],
    ['rewards', Tensor.create({ tag: 'f32', val: Float32Array.of(reward) }, Uint32Array.of(1))],
  ];
  const metadata = { prompt: promptStr, completion: completionsStr, stop_reason: resp.stopReason };
  return { tensors, metadata: JSON.stringify(metadata) };
}
