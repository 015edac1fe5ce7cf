use super::*;
use serde_json::json;

#[test]
fn tojson_matches_python_json_dumps() {
    let mut s = String::new();
    python_json(
        &json!({"b": [1, 2.0, "é\n"], "a": null, "c": 1e-9}),
        None,
        false,
        0,
        &mut s,
    );
    assert_eq!(s, r#"{"b": [1, 2.0, "é\n"], "a": null, "c": 1e-09}"#);
    let mut s = String::new();
    python_json(&json!({"b": 1, "a": [true]}), Some(2), true, 0, &mut s);
    assert_eq!(s, "{\n  \"a\": [\n    true\n  ],\n  \"b\": 1\n}");
    assert_eq!(python_float(1e16), "1e+16");
    assert_eq!(python_float(0.5), "0.5");
}

#[test]
fn strftime_formats_dates() {
    // 2024-02-29 13:05:09 UTC was a Thursday.
    assert_eq!(
        strftime("%Y-%m-%d %H:%M:%S %A %b %-d %B", 1_709_211_909),
        "2024-02-29 13:05:09 Thursday Feb 29 February"
    );
}

#[test]
fn templates_render_with_jinja2_semantics_and_name_the_failing_line() {
    let t = ChatTemplate::new(
            "{% for m in messages %}\n{% if m.role == 'bad' %}{{ raise_exception('bad role') }}{% endif %}\n{{ m.role.upper() }}:{{ m.content | tojson }}\n{% endfor %}{% if add_generation_prompt %}>{{ eos_token }}{% endif %}",
            [("eos_token", Some("</s>".into()))],
        )
        .expect("compiles");
    let out = t
        .render(
            &json!([{"role": "user", "content": "hi"}]),
            &ChatOptions::default(),
        )
        .expect("renders");
    assert_eq!(out, "USER:\"hi\"\n></s>");
    let err = t
        .render(
            &json!([{"role": "bad", "content": ""}]),
            &ChatOptions::default(),
        )
        .expect_err("raises");
    assert!(
        err.to_string().contains("bad role") && err.to_string().contains("line 2"),
        "{err}"
    );
    let broken = ChatTemplate::new("{% for x in %}", [])
        .err()
        .expect("syntax error");
    assert!(broken.to_string().contains("line 1"), "{broken}");
}
