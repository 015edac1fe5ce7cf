//! Pure functions of the vision prompt: the row's images, placeholder substitution and the
//! expansion of each image token into the copies its image takes.

use serde_json::Value;

/// The images of `row[key]` as the host's `process-images` decodes them (base64 text or a
/// `data:` URL, as bytes, checked to be one of those): a list (or a single item) of base64
/// strings, `data:image/...;base64,` URLs, or objects with such a string under `bytes` (a
/// Hugging Face `Image` column). A path cannot be read in the sandbox and is an error naming
/// the fix.
pub fn row_images(row: &Value, key: &str) -> Result<Vec<Vec<u8>>, String> {
    let value = row.get(key).filter(|v| !v.is_null()).ok_or_else(|| {
        format!(
            "the row has no `{key}` (the images, base64-encoded; set image_key in the config to the column that holds them)"
        )
    })?;
    let items: Vec<&Value> = match value {
        Value::Array(a) => a.iter().collect(),
        v => vec![v],
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| image_of(item).map_err(|e| format!("`{key}`[{i}]: {e}")))
        .collect()
}

fn image_of(item: &Value) -> Result<Vec<u8>, String> {
    let text = match item {
        Value::String(s) => s.as_str(),
        Value::Object(o) => match (o.get("bytes"), o.get("path")) {
            (Some(Value::String(s)), _) => s.as_str(),
            (_, Some(Value::String(p))) => {
                return Err(format!(
                    "is a path ({p:?}), and the sandbox reads no files: put the image's bytes in the row, base64-encoded"
                ));
            }
            _ => return Err("an object without a base64 `bytes` string".into()),
        },
        other => {
            return Err(format!(
                "is {}, not a base64 string or a data URL",
                kind(other)
            ));
        }
    };
    // Line-wrapped base64 (MIME's 76 columns) is the same data.
    let cleaned: String;
    let text = if text.contains(|c: char| c.is_ascii_whitespace()) {
        cleaned = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        cleaned.as_str()
    } else {
        text
    };
    let base64 = match text.strip_prefix("data:") {
        Some(rest) => match rest.split_once(";base64,") {
            Some((_, payload)) => payload,
            None => {
                return Err("is a data URL that is not base64 (`data:<mime>;base64,...`)".into());
            }
        },
        None => text,
    };
    if base64.is_empty() {
        return Err("is empty".into());
    }
    if let Some(c) = base64
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "+/=".contains(*c)))
    {
        return Err(format!(
            "is not base64 (it contains {c:?}): {:?}; if it is a path or URL, the sandbox reads no files or network: put the image's bytes in the row, base64-encoded",
            text.chars().take(80).collect::<String>()
        ));
    }
    Ok(text.as_bytes().to_vec())
}

/// The base64 payload of an image [`row_images`] returned (its `data:...;base64,` prefix
/// dropped), as SGLang's `image_data` takes it, in the same buffer.
pub fn base64_payload(encoded: Vec<u8>) -> String {
    let mut text = String::from_utf8(encoded)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    if text.starts_with("data:")
        && let Some(at) = text.find(";base64,")
    {
        text.drain(..at + ";base64,".len());
    }
    text
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// `text` with each `placeholder` replaced by `replacement` (AReaL's dataset loaders turn
/// geometry3k's `<image>` into `<|vision_start|><|image_pad|><|vision_end|>`).
pub fn substitute(value: &mut Value, placeholder: &str, replacement: &str) {
    match value {
        Value::String(s) if s.contains(placeholder) => *s = s.replace(placeholder, replacement),
        Value::Array(a) => a
            .iter_mut()
            .for_each(|v| substitute(v, placeholder, replacement)),
        Value::Object(o) => o
            .values_mut()
            .for_each(|v| substitute(v, placeholder, replacement)),
        _ => {}
    }
}

/// The prompt ids with the `i`-th occurrence of `image_token` repeated `tokens[i]` times
/// (what the Qwen2-VL processor does to the text before tokenising it), and the
/// `mm_token_type_ids` of the result: 1 on every image token, 0 elsewhere.
pub fn expand(
    ids: &[u32],
    image_token: u32,
    tokens: &[u32],
) -> Result<(Vec<u32>, Vec<i32>), String> {
    let found = ids.iter().filter(|&&t| t == image_token).count();
    if found != tokens.len() {
        return Err(format!(
            "the prompt has {found} image placeholder(s) and the row has {} image(s): put one placeholder per image in the prompt (a `{{\"type\": \"image\"}}` content part for the chat template, or the image token in a rendered prompt)",
            tokens.len()
        ));
    }
    let extra: usize = tokens.iter().map(|&n| n as usize).sum::<usize>();
    let mut out = Vec::with_capacity(ids.len() + extra);
    let mut types = Vec::with_capacity(ids.len() + extra);
    let mut next = tokens.iter();
    for &id in ids {
        if id == image_token {
            let n = *next.next().unwrap_or(&0) as usize;
            out.extend(std::iter::repeat_n(image_token, n));
            types.extend(std::iter::repeat_n(1, n));
        } else {
            out.push(id);
            types.push(0);
        }
    }
    Ok((out, types))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn images_from_strings_data_urls_and_hf_objects() {
        let row = json!({"images": ["iVBORw0KGgo=", "data:image/png;base64,AAAA", {"bytes": "QUJD", "path": null}]});
        let got = row_images(&row, "images").expect("images");
        assert_eq!(got.len(), 3);
        assert_eq!(got[1], b"data:image/png;base64,AAAA");
        let payloads: Vec<String> = got.into_iter().map(base64_payload).collect();
        assert_eq!(payloads, ["iVBORw0KGgo=", "AAAA", "QUJD"]);
        let one = row_images(&json!({"image": "QUJD"}), "image").expect("single");
        assert_eq!(one.len(), 1);
        let wrapped = row_images(&json!({"i": " QU\nJD\r\n"}), "i").expect("wrapped");
        assert_eq!(&wrapped[0][..], b"QUJD");
        assert_eq!(base64_payload(wrapped[0].clone()), "QUJD");
    }

    #[test]
    fn paths_numbers_and_missing_columns_are_named() {
        let e = row_images(&json!({"images": [{"path": "/data/a.png"}]}), "images")
            .expect_err("refused");
        assert!(
            e.contains("`images`[0]") && e.contains("reads no files"),
            "{e}"
        );
        let e = row_images(&json!({"images": ["/data/a.png"]}), "images").expect_err("refused");
        assert!(e.contains("not base64 (it contains '.')"), "{e}");
        // A JPEG's base64 starts with `/9j/`: not a path.
        assert!(row_images(&json!({"images": ["/9j/4AAQ"]}), "images").is_ok());
        let e = row_images(&json!({"images": [3]}), "images").expect_err("refused");
        assert!(e.contains("a number"), "{e}");
        let e =
            row_images(&json!({"images": ["data:image/png,abc"]}), "images").expect_err("refused");
        assert!(e.contains("not base64"), "{e}");
        let e = row_images(&json!({"x": 1}), "images").expect_err("refused");
        assert!(e.contains("image_key"), "{e}");
    }

    #[test]
    fn expansion_repeats_each_placeholder_by_its_image() {
        let (ids, types) = expand(&[1, 9, 2, 9, 3], 9, &[2, 3]).expect("expanded");
        assert_eq!(ids, [1, 9, 9, 2, 9, 9, 9, 3]);
        assert_eq!(types, [0, 1, 1, 0, 1, 1, 1, 0]);
        let e = expand(&[1, 9], 9, &[2, 2]).expect_err("refused");
        assert!(
            e.contains("1 image placeholder(s)") && e.contains("2 image(s)"),
            "{e}"
        );
    }

    #[test]
    fn substitution_reaches_nested_message_text() {
        let mut m =
            json!([{"role": "user", "content": [{"type": "text", "text": "<image> What is x?"}]}]);
        substitute(&mut m, "<image>", "<V>");
        assert_eq!(m[0]["content"][0]["text"], "<V> What is x?");
    }
}
