//! Exercises the host tokenizer: encodes `data["text"]`, decodes it back, renders and tokenizes
//! `data["messages"]`, and reports everything in the metadata.
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::tokenizer::{self, ChatOptions};
use rollbox_sdk::{Episode, Output, Workflow};
struct Tok;
impl Workflow for Tok {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let text = e.data["text"].as_str().unwrap_or("");
        let ids = tokenizer::encode(text, false).map_err(|e| format!("{e:?}"))?;
        let decoded = tokenizer::decode(&ids, false).map_err(|e| format!("{e:?}"))?;
        let options = ChatOptions {
            add_generation_prompt: true,
            tools: None,
            extra: Some("{\"enable_thinking\": false}".into()),
        };
        let messages = e.data["messages"].to_string();
        let chat_ids =
            tokenizer::apply_chat_template(&messages, &options).map_err(|e| format!("{e:?}"))?;
        let chat_text =
            tokenizer::render_chat_template(&messages, &options).map_err(|e| format!("{e:?}"))?;
        let bad = tokenizer::apply_chat_template("not json", &options)
            .err()
            .map(|e| format!("{e:?}"));
        let special = tokenizer::special_tokens();
        let t = Tensor::create(
            &TensorData::I32(ids.iter().map(|&i| i as i32).collect()),
            &[1, ids.len() as u32],
        )
        .map_err(|e| format!("{e:?}"))?;
        let mut out = Output::new(vec![("input_ids".into(), t)]);
        out.metadata = serde_json::json!({
            "ids": ids, "decoded": decoded, "chat_ids": chat_ids, "chat_text": chat_text,
            "bad": bad, "eos": special.eos, "bos": special.bos, "pad": special.pad,
        });
        Ok(Some(out))
    }
}
rollbox_sdk::export_workflow!(Tok);
fn main() {}
