//! Loading from Hugging Face files: `tokenizer.json` + `tokenizer_config.json` (chat template and
//! special tokens as strings, as `{"content": ...}` objects, or a list of named templates).

use rollbox_tokenizer::{ChatOptions, HostTokenizer};
use serde_json::json;

fn write_tokenizer(dir: &std::path::Path, config: serde_json::Value) {
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [
            {"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 1, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
        ],
        "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}
        },
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"<s>": 0, "</s>": 1, "<unk>": 2, "hello": 3, "world": 4, "user:": 5, "bot:": 6}, "unk_token": "<unk>"}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string())
        .expect("write tokenizer.json");
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).expect("write config");
}

#[test]
fn special_tokens_and_template_come_from_the_config() {
    let tmp = tempfile_dir("hf-a");
    let dir = tmp.path().to_path_buf();
    write_tokenizer(
        &dir,
        json!({
            "bos_token": "<s>",
            "eos_token": {"content": "</s>", "special": true},
            "chat_template": "{% for m in messages %}{{ m.role }}: {{ m.content }} {{ eos_token }} {% endfor %}{% if add_generation_prompt %}bot:{% endif %}"
        }),
    );
    let tok = HostTokenizer::load(&dir).expect("loads from a directory");
    assert_eq!(
        (tok.special().bos, tok.special().eos, tok.special().pad),
        (Some(0), Some(1), None)
    );
    assert_eq!(
        tok.encode("hello world", false).expect("encode"),
        vec![3, 4]
    );
    assert_eq!(
        tok.encode("hello world", true).expect("encode"),
        vec![0, 3, 4],
        "the post-processor adds <s>"
    );
    assert_eq!(tok.encode("hello mars", false).expect("encode"), vec![3, 2]);
    let messages = json!([{"role": "user", "content": "hello"}]);
    let text = tok
        .render_chat_template(&messages, &ChatOptions::default())
        .expect("render");
    assert_eq!(text, "user: hello </s> bot:");
    assert_eq!(
        tok.apply_chat_template(&messages, &ChatOptions::default())
            .expect("ids"),
        vec![5, 3, 1, 6]
    );
    // Loading the tokenizer.json path directly finds the config next to it.
    let direct = HostTokenizer::load(&dir.join("tokenizer.json")).expect("loads from the file");
    assert_eq!(direct.special().eos, Some(1));
}

#[test]
fn named_templates_and_missing_templates() {
    let tmp = tempfile_dir("hf-b");
    let dir = tmp.path().to_path_buf();
    write_tokenizer(
        &dir,
        json!({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ messages|length }}"}]}),
    );
    let tok = HostTokenizer::load(&dir).expect("loads");
    assert_eq!(
        tok.render_chat_template(&json!([{}, {}]), &ChatOptions::default())
            .expect("render"),
        "D2"
    );
    let tmp = tempfile_dir("hf-c");
    let dir = tmp.path().to_path_buf();
    write_tokenizer(&dir, json!({}));
    let tok = HostTokenizer::load(&dir).expect("loads");
    let err = tok
        .render_chat_template(&json!([]), &ChatOptions::default())
        .expect_err("no template");
    assert!(err.to_string().contains("no chat template"), "{err}");
    let missing =
        HostTokenizer::load(&dir.join("nope").join("tokenizer.json")).expect_err("missing");
    assert!(missing.to_string().contains("nope"), "{missing}");
}

/// A fresh private folder (removed when the test ends), named `rollbox-NAME-*`.
fn tempfile_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("rollbox-{name}-"))
        .tempdir()
        .expect("temp dir")
}

#[test]
fn a_template_beside_the_config_is_used_when_the_config_has_none() {
    let template = "{% for m in messages %}{{ m.role }}: {{ m.content }} {% endfor %}";
    let messages = json!([{"role": "user", "content": "hello"}]);
    let options = ChatOptions {
        add_generation_prompt: false,
        ..ChatOptions::default()
    };
    // transformers 5's `chat_template.jinja`.
    let tmp = tempfile_dir("hf-jinja");
    let dir = tmp.path().to_path_buf();
    write_tokenizer(&dir, json!({"eos_token": "</s>"}));
    std::fs::write(dir.join("chat_template.jinja"), template).expect("write");
    let tok = HostTokenizer::load(&dir).expect("loads");
    assert_eq!(
        tok.render_chat_template(&messages, &options)
            .expect("render"),
        "user: hello "
    );
    // A vision-language model's processor template, `chat_template.json`.
    let tmp = tempfile_dir("hf-json");
    let dir = tmp.path().to_path_buf();
    write_tokenizer(&dir, json!({"eos_token": "</s>"}));
    std::fs::write(
        dir.join("chat_template.json"),
        json!({"chat_template": template}).to_string(),
    )
    .expect("write");
    let tok = HostTokenizer::load(&dir).expect("loads");
    assert_eq!(
        tok.render_chat_template(&messages, &options)
            .expect("render"),
        "user: hello "
    );
    std::fs::write(dir.join("chat_template.json"), "{\"x\": 1}").expect("write");
    let e = HostTokenizer::load(&dir)
        .expect_err("no template in it")
        .to_string();
    assert!(
        e.contains("chat_template.json") && e.contains("no `chat_template`"),
        "{e}"
    );
}
