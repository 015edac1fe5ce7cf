//! Hostile host calls, one attack per episode chosen by `data["attack"]` (issue 15's
//! reproductions). Each attack reports what the host answered as the episode's error message
//! (`Err("...")`), or returns an output the host must refuse.
//!
//! * `padded_huge`: a zero-element `[0, 2^32-1, 256]` i32 tensor concat-padded against `[1,1,1]`
//!   (1 TiB planned);
//! * `dims_overflow`: create `[0, 2^32-1, 2^32-1]`;
//! * `many_borrows`: one 16 MiB tensor borrowed `data["n"]` times in one `concat`;
//! * `deep_rank`: a rank-100,000 tensor, then rank-16 tensors concat-padded;
//! * `generate_many`: `data["n"]` requests of `data["max_new"]` tokens in one `generate-many`,
//!   reporting the tokens generated;
//! * `reserved_key` / `bad_key`: an accepted output with a tensor named `__metadata__` /
//!   `data["key"]`;
//! * `long_word`: encode one word of `data["n"]` letters;
//! * `big_metadata`: an accepted output with `data["n"]` bytes of metadata;
//! * `score_flood`: `data["n"]` calls of the reward `data["reward"]`, reporting how many scored;
//! * `random`: a value derived from WASI random numbers (std's `RandomState`).
use rollbox_sdk::tensor::{self, Tensor, TensorData};
use rollbox_sdk::trajectory::single_turn;
use rollbox_sdk::{Episode, GenConfig, ModelRequest, Output, Workflow, engine, tokenizer};

struct Hostile;

/// One generate call turned into an AReaL trajectory, to attach a hostile part to.
fn accepted_output() -> Result<Output, String> {
    let resp = engine::generate(&ModelRequest {
        rid: String::new(),
        input_ids: vec![1, 2, 3],
        gconfig: GenConfig::default(),
        image_data: Vec::new(),
        metadata: "{}".into(),
    })
    .map_err(|e| e.to_string())?;
    single_turn(&resp, 1.0).map_err(|e| e.to_string())
}

fn n(e: &Episode, key: &str, default: u64) -> u64 {
    e.data[key].as_u64().unwrap_or(default)
}

fn report<T, E: std::fmt::Debug>(what: &str, r: Result<T, E>) -> String {
    match r {
        Ok(_) => format!("{what}: ok"),
        Err(e) => format!("{what}: {e:?}"),
    }
}

impl Workflow for Hostile {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let attack = e.data["attack"].as_str().unwrap_or("").to_string();
        match attack.as_str() {
            "padded_huge" => {
                let huge = Tensor::create(&TensorData::I32(vec![]), &[0, u32::MAX, 256])
                    .map_err(|e| format!("create: {e:?}"))?;
                let small = Tensor::create(&TensorData::I32(vec![1]), &[1, 1, 1])
                    .map_err(|e| format!("create: {e:?}"))?;
                let r = tensor::concat_padded(
                    &[vec![("x".into(), &huge)], vec![("x".into(), &small)]],
                    0.0,
                );
                Err(report("concat-padded", r).into())
            }
            "dims_overflow" => {
                let r = Tensor::create(&TensorData::I32(vec![]), &[0, u32::MAX, u32::MAX]);
                Err(report("create", r).into())
            }
            "many_borrows" => {
                let big = Tensor::create(&TensorData::U8(vec![0; 16 << 20]), &[1, 16 << 20])
                    .map_err(|e| format!("create: {e:?}"))?;
                let borrows: Vec<&Tensor> = (0..n(&e, "n", 200)).map(|_| &big).collect();
                Err(report("concat", tensor::concat(&borrows)).into())
            }
            "deep_rank" => {
                let shape = vec![1u32; 100_000];
                let deep = report("create", Tensor::create(&TensorData::I32(vec![1]), &shape));
                let a = Tensor::create(&TensorData::I32(vec![1]), &[1; 16])
                    .map_err(|e| format!("create: {e:?}"))?;
                let b = Tensor::create(
                    &TensorData::I32(vec![1, 2]),
                    &[1; 15].iter().copied().chain([2]).collect::<Vec<u32>>(),
                )
                .map_err(|e| format!("create: {e:?}"))?;
                let padded =
                    tensor::concat_padded(&[vec![("x".into(), &a)], vec![("x".into(), &b)]], 0.0)
                        .map(|d| d.first().map(|(_, t)| t.shape()).unwrap_or_default());
                Err(format!("{deep}; padded rank 16: {padded:?}").into())
            }
            "generate_many" => {
                let req = ModelRequest {
                    rid: String::new(),
                    input_ids: vec![1, 2, 3],
                    gconfig: GenConfig {
                        max_new_tokens: n(&e, "max_new", 16) as u32,
                        ..GenConfig::default()
                    },
                    image_data: Vec::new(),
                    metadata: "{}".into(),
                };
                let reqs = vec![req; n(&e, "n", 4) as usize];
                let results = engine::generate_many(&reqs);
                let tokens: usize = results
                    .iter()
                    .filter_map(|r| r.as_ref().ok())
                    .map(|r| r.output_tokens.len())
                    .sum();
                let errors = results.iter().filter(|r| r.is_err()).count();
                Err(format!("generated {tokens} tokens, {errors} errors").into())
            }
            "big_metadata" => {
                let mut out = accepted_output()?;
                out.metadata =
                    serde_json::json!({"blob": "x".repeat(n(&e, "n", 1 << 20) as usize)});
                Ok(Some(out))
            }
            "reserved_key" | "bad_key" => {
                let key = if attack == "reserved_key" {
                    "__metadata__".to_string()
                } else {
                    e.data["key"].as_str().unwrap_or("").to_string()
                };
                let mut out = accepted_output()?;
                let extra = Tensor::create(&TensorData::I32(vec![1]), &[1])
                    .map_err(|e| format!("create: {e:?}"))?;
                out.tensors.push((key, extra));
                Ok(Some(out))
            }
            "long_word" => {
                let word = "a".repeat(n(&e, "n", 100_000) as usize);
                match tokenizer::encode(&word, false) {
                    Ok(ids) => Err(format!("encode: ok, {} ids", ids.len()).into()),
                    Err(e) => Err(format!("encode: {e:?}").into()),
                }
            }
            "score_flood" => {
                let input = rollbox_sdk::RewardInput {
                    prompt: "What is 1 + 1?".into(),
                    completion: "\\boxed{2}".into(),
                    prompt_ids: Vec::new(),
                    completion_ids: Vec::new(),
                    data: r#"{"answer": "2"}"#.into(),
                };
                let name = e.data["reward"].as_str().unwrap_or("math").to_string();
                let calls = n(&e, "n", 100_000);
                let scored = (0..calls)
                    .filter(|_| rollbox_sdk::rewards::score(&name, &input).is_ok())
                    .count();
                Err(format!("score: {calls} calls, {scored} scored").into())
            }
            "random" => {
                use std::hash::BuildHasher;
                let h = std::collections::hash_map::RandomState::new().hash_one(12345u64);
                Err(format!("random {h}").into())
            }
            other => Err(format!("unknown attack `{other}`").into()),
        }
    }
}

rollbox_sdk::export_workflow!(Hostile);
fn main() {}
