// AReaL 1.0.4's RLVRWorkflow in C, compiled to a rollbox workflow component with zig
// (scripts/guests/build-c-component.sh workflow workflows/rlvr/rlvr.c OUT.wasm): the same steps as
// areal/workflow/rlvr.py and the Rust, Python and JavaScript rlvr. The row's chat messages (or
// its text as one user message: `messages`, `prompt`, `question`, `problem`, or the config's
// `prompt_key`, with `prompt_suffix` and `system_prompt`) through the host chat template; one
// sample with the config's `gconfig` numbers and flags plus the tokenizer's pad and eos ids as
// stop ids; the reward named in the config (`math` by default) on (decoded prompt, decoded
// completion, prompt ids, completion ids, row); AReaL's tensors.
//
// Ownership follows wit-bindgen's C conventions: arguments to imports are borrowed, results
// of imports are owned (freed here), and what the export returns is handed to the host.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rollbox_json.h"
#include "workflow.h"

typedef rollbox_workflow_types_error_t host_error;

static const char *const KINDS[] = {"invalid-argument", "limit-exceeded", "unknown",       "unavailable",
                                    "timeout",          "trapped",        "invalid-output", "unsupported"};

static workflow_string_t borrow(const char *s, size_t n) { return (workflow_string_t){(uint8_t *)s, n}; }

// Set the export's error to `what: text` (owned by the host afterwards) and return false.
static bool fail(workflow_string_t *err, const char *what, const char *text, size_t n) {
  rj_buf b = {0};
  rj_puts(&b, what);
  rj_puts(&b, ": ");
  rj_put(&b, text, n);
  *err = borrow(b.p, b.n);
  return false;
}

static bool fail_host(workflow_string_t *err, const char *what, host_error *e) {
  char head[96];
  snprintf(head, sizeof head, "%s: %s", what, e->tag < 8 ? KINDS[e->tag] : "error");
  bool r = fail(err, head, (const char *)e->val.invalid_argument.ptr, e->val.invalid_argument.len);
  rollbox_workflow_types_error_free(e);
  return r;
}

static const char *const PROMPT_KEYS[] = {"messages", "prompt", "question", "problem"};

// The chat messages as JSON text (rj_buf owned by the caller), or an error.
static bool messages_json(rj_span row, rj_span config, rj_buf *out, workflow_string_t *err) {
  rj_span key_v, value = {0};
  char *named = rj_get(config, "prompt_key", &key_v) ? rj_string(key_v) : NULL;
  const char *key = NULL;
  if (named) {
    if (rj_get(row, named, &value)) key = named;
  } else {
    for (size_t i = 0; i < 4 && !key; i++)
      if (rj_get(row, PROMPT_KEYS[i], &value)) key = PROMPT_KEYS[i];
  }
  if (!key) {
    rj_buf m = {0};
    if (named) {
      rj_puts(&m, "none of `");
      rj_puts(&m, named);
      rj_puts(&m, "`");
    } else {
      rj_puts(&m, "none of `messages`, `prompt`, `question`, `problem`");
    }
    rj_puts(&m, " (set prompt_key in the config to the column that holds it)");
    free(named);
    bool r = fail(err, "the row has no prompt", m.p, m.n);
    free(m.p);
    return r;
  }
  rj_span system_v;
  char *system = rj_get(config, "system_prompt", &system_v) ? rj_string(system_v) : NULL;
  rj_span first_role = {0};
  if (value.p[0] == '[') {
    size_t s = rj_ws(value, 1), e = rj_value_end(value, s);
    rj_span first = {value.p + s, e > s ? e - s : 0}, role;
    if (e > s && rj_get(first, "role", &role)) first_role = role;
  }
  int prepend = system && !(first_role.n == 8 && memcmp(first_role.p, "\"system\"", 8) == 0);
  rj_puts(out, "[");
  if (prepend) {
    rj_puts(out, "{\"role\":\"system\",\"content\":");
    rj_put_string(out, system, strlen(system));
    rj_puts(out, "}");
  }
  if (value.p[0] == '[') {
    rj_span inner = rj_trim((rj_span){value.p + 1, value.n - 2});
    if (prepend && inner.n) rj_puts(out, ",");
    rj_put(out, inner.p, inner.n);
  } else if (value.p[0] == '"') {
    size_t n = 0;
    char *text = rj_string_n(value, &n);
    rj_span suffix_v;
    char *suffix = rj_get(config, "prompt_suffix", &suffix_v) ? rj_string(suffix_v) : NULL;
    rj_buf content = {0};
    rj_put(&content, text, n);
    if (suffix) rj_puts(&content, suffix);
    if (prepend) rj_puts(out, ",");
    rj_puts(out, "{\"role\":\"user\",\"content\":");
    rj_put_string(out, content.p ? content.p : "", content.n);
    rj_puts(out, "}");
    free(text), free(suffix), free(content.p);
  } else {
    free(named), free(system);
    return fail(err, key, "must be a list of {\"role\", \"content\"} messages or a text", 57);
  }
  rj_puts(out, "]");
  free(named), free(system);
  return true;
}

static double number_or(rj_span obj, const char *key, double fallback) {
  rj_span v;
  return rj_get(obj, key, &v) ? strtod(v.p, NULL) : fallback;
}

static bool flag_or(rj_span obj, const char *key, bool fallback) {
  rj_span v;
  if (!rj_get(obj, key, &v)) return fallback;
  return v.n == 4 && memcmp(v.p, "true", 4) == 0;
}

// AReaL's GenerationHyperparameters defaults with the config's `gconfig` numbers and flags,
// then new_with_stop_and_pad_token_ids (pad first, then eos). `ids` backs stop_token_ids.
static rollbox_workflow_types_gen_config_t gconfig_of(rj_span config, uint32_t ids[2]) {
  rj_span g = {"{}", 2};
  rj_get(config, "gconfig", &g);
  rollbox_workflow_types_gen_config_t c = {
      .n_samples = 1,
      .max_new_tokens = (uint32_t)number_or(g, "max_new_tokens", 16384),
      .min_new_tokens = (uint32_t)number_or(g, "min_new_tokens", 0),
      .max_tokens = (uint32_t)number_or(g, "max_tokens", 32768),
      .greedy = flag_or(g, "greedy", false),
      .temperature = (float)number_or(g, "temperature", 1.0),
      .top_p = (float)number_or(g, "top_p", 1.0),
      .top_k = (uint32_t)number_or(g, "top_k", 100000000),
      .ignore_eos = flag_or(g, "ignore_eos", false),
      .skip_special_tokens = flag_or(g, "skip_special_tokens", true),
      .frequency_penalty = (float)number_or(g, "frequency_penalty", 0.0),
      .exclude_default_stop_ids = flag_or(g, "exclude_default_stop_ids", false),
  };
  rj_span seed;
  if (rj_get(g, "seed", &seed)) c.seed = (workflow_option_u64_t){true, strtoull(seed.p, NULL, 10)};
  rollbox_workflow_tokenizer_special_token_ids_t special;
  rollbox_workflow_tokenizer_special_tokens(&special);
  size_t n = 0;
  if (special.pad.is_some) ids[n++] = special.pad.val;
  if (special.eos.is_some && !(n && ids[0] == special.eos.val)) ids[n++] = special.eos.val;
  c.stop_token_ids = (workflow_list_u32_t){ids, n};
  return c;
}

typedef rollbox_workflow_tensor_tuple2_string_own_tensor_t entry;

static bool tensor(entry *slot, const char *name, uint8_t tag, void *data, size_t n, uint32_t *shape,
                   size_t rank, workflow_string_t *err) {
  rollbox_workflow_tensor_tensor_data_t d = {.tag = tag};
  d.val.i32 = (workflow_list_s32_t){data, n};  // every case is {ptr, len}
  workflow_list_u32_t s = {shape, rank};
  host_error e;
  size_t len = strlen(name);
  char *key = malloc(len);
  memcpy(key, name, len);
  slot->f0 = borrow(key, len);
  if (!rollbox_workflow_tensor_static_tensor_create(&d, &s, &slot->f1, &e)) return fail_host(err, name, &e);
  return true;
}

static const char *const STOP_REASONS[] = {"stop", "length", "tool_calls", "abort"};

bool exports_workflow_run_episode(workflow_episode_input_t *input, workflow_option_episode_output_t *ret,
                                  workflow_string_t *err) {
  rj_span row = {(const char *)input->data.ptr, input->data.len};
  rj_span config = {(const char *)input->config.ptr, input->config.len};
  if (!rj_trim(row).n) row = (rj_span){"{}", 2};
  if (!rj_trim(config).n) config = (rj_span){"{}", 2};
  bool ok = false;
  host_error e;
  rj_buf messages = {0}, metadata = {0};
  workflow_list_u32_t ids = {0};
  rollbox_workflow_types_model_response_t resp = {0};
  workflow_string_t prompt = {0}, completion = {0};
  char *reward_name = NULL;

  rj_span v;
  reward_name = rj_get(config, "reward", &v) ? rj_string(v) : NULL;
  if (!reward_name) reward_name = strdup("math");
  bool thinking = flag_or(config, "enable_thinking", false);
  if (!messages_json(row, config, &messages, err)) goto out;

  const char *extra = thinking ? "{\"enable_thinking\":true}" : "{\"enable_thinking\":false}";
  rollbox_workflow_tokenizer_chat_options_t options = {
      .add_generation_prompt = true,
      .extra = {true, borrow(extra, strlen(extra))},
  };
  workflow_string_t msgs = borrow(messages.p, messages.n);
  if (!rollbox_workflow_tokenizer_apply_chat_template(&msgs, &options, &ids, &e)) {
    ok = fail_host(err, "apply_chat_template", &e);
    goto out;
  }
  uint32_t stop_ids[2];
  rollbox_workflow_types_model_request_t req = {
      .input_ids = ids,
      .gconfig = gconfig_of(config, stop_ids),
      .metadata = borrow("{}", 2),
  };
  if (!rollbox_workflow_engine_generate(&req, &resp, &e)) {
    ok = fail_host(err, "generate", &e);
    goto out;
  }
  if (!rollbox_workflow_tokenizer_decode(&ids, false, &prompt, &e) ||
      !rollbox_workflow_tokenizer_decode(&resp.output_tokens, false, &completion, &e)) {
    ok = fail_host(err, "decode", &e);
    goto out;
  }
  rollbox_workflow_rewards_reward_input_t reward_input = {
      .prompt = prompt,
      .completion = completion,
      .prompt_ids = resp.input_tokens,
      .completion_ids = resp.output_tokens,
      .data = borrow(row.p, row.n),
  };
  rollbox_workflow_rewards_score_result_t scored;
  workflow_string_t name = borrow(reward_name, strlen(reward_name));
  if (!rollbox_workflow_rewards_score(&name, &reward_input, &scored, &e)) {
    ok = fail_host(err, "reward", &e);
    goto out;
  }
  workflow_string_t stat_key = borrow("reward", 6);
  rollbox_workflow_log_stat(&stat_key, scored.value);

  // Build result tensor dict with batch dim 1
  size_t in = resp.input_tokens.len, outn = resp.output_tokens.len, n = in + outn;
  int32_t *seq = malloc(n * 4 + 1), *mask = malloc(n * 4 + 1), *versions = malloc(n * 4 + 1);
  float *logprobs = malloc(n * 4 + 1), reward = (float)scored.value;
  bool *attention = malloc(n + 1);
  for (size_t i = 0; i < n; i++) {
    int out_tok = i >= in;
    size_t k = i - in;
    seq[i] = (int32_t)(out_tok ? resp.output_tokens.ptr[k] : resp.input_tokens.ptr[i]);
    mask[i] = out_tok;
    logprobs[i] = out_tok && k < resp.output_logprobs.len ? resp.output_logprobs.ptr[k] : 0.0f;
    versions[i] = out_tok && k < resp.output_versions.len ? resp.output_versions.ptr[k] : -1;
    attention[i] = true;
  }
  uint32_t row_shape[2] = {1, (uint32_t)n}, one[1] = {1};
  entry *dict = calloc(6, sizeof(entry));
  if (!tensor(&dict[0], "input_ids", ROLLBOX_WORKFLOW_TENSOR_TENSOR_DATA_I32, seq, n, row_shape, 2, err) ||
      !tensor(&dict[1], "loss_mask", ROLLBOX_WORKFLOW_TENSOR_TENSOR_DATA_I32, mask, n, row_shape, 2, err) ||
      !tensor(&dict[2], "logprobs", ROLLBOX_WORKFLOW_TENSOR_TENSOR_DATA_F32, logprobs, n, row_shape, 2, err) ||
      !tensor(&dict[3], "versions", ROLLBOX_WORKFLOW_TENSOR_TENSOR_DATA_I32, versions, n, row_shape, 2, err) ||
      !tensor(&dict[4], "attention_mask", ROLLBOX_WORKFLOW_TENSOR_TENSOR_DATA_BOOL, attention, n, row_shape, 2,
              err) ||
      !tensor(&dict[5], "rewards", ROLLBOX_WORKFLOW_TENSOR_TENSOR_DATA_F32, &reward, 1, one, 1, err)) {
    free(seq), free(mask), free(versions), free(logprobs), free(attention);
    goto out;  // the instance is dropped with the episode; handles made so far go with it
  }
  free(seq), free(mask), free(versions), free(logprobs), free(attention);

  rj_puts(&metadata, "{\"prompt\":");
  rj_put_string(&metadata, (const char *)prompt.ptr, prompt.len);
  rj_puts(&metadata, ",\"completion\":");
  rj_put_string(&metadata, (const char *)completion.ptr, completion.len);
  rj_puts(&metadata, ",\"stop_reason\":\"");
  rj_puts(&metadata, STOP_REASONS[resp.stop_reason < 4 ? resp.stop_reason : 0]);
  rj_puts(&metadata, "\"}");
  ret->is_some = true;
  ret->val.tensors = (rollbox_workflow_episode_tensor_dict_t){dict, 6};
  ret->val.metadata = borrow(metadata.p, metadata.n);
  metadata.p = NULL;  // handed to the host
  ok = true;
out:
  free(messages.p), free(metadata.p), free(reward_name);
  workflow_list_u32_free(&ids);
  rollbox_workflow_types_model_response_free(&resp);
  workflow_string_free(&prompt);
  workflow_string_free(&completion);
  workflow_episode_input_free(input);
  return ok;
}
