//! With `data["hoard"]`: creates 4 MiB f32 tensors and keeps every one alive until the host
//! refuses one, then fails with the refusal. Otherwise a normal episode: one generate call on
//! `[1, 2, 3]`, reward 1.0, and with `data["big_mib"] = N` a `[1, N * 2^18]` f32 tensor `blob`
//! beside its trajectory (N MiB, made of 4 MiB pieces joined on the host).
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::trajectory::single_turn;
use rollbox_sdk::{Episode, GenConfig, ModelRequest, Output, Workflow, engine};
struct Hoard;
impl Workflow for Hoard {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        if e.data["hoard"].as_bool() == Some(true) {
            let mut held = Vec::new();
            let chunk = vec![1.0f32; 1 << 20];
            loop {
                match Tensor::create(&TensorData::F32(chunk.clone()), &[1 << 20]) {
                    Ok(t) => held.push(t),
                    Err(err) => {
                        return Err(format!("refused after {} tensors: {err:?}", held.len()).into());
                    }
                }
            }
        }
        let resp = engine::generate(&ModelRequest {
            rid: String::new(),
            input_ids: vec![1, 2, 3],
            gconfig: GenConfig::default(),
            image_data: Vec::new(),
            metadata: "{}".into(),
        })
        .map_err(|e| e.to_string())?;
        let mut out = single_turn(&resp, 1.0).map_err(|e| e.to_string())?;
        if let Some(mib) = e.data["big_mib"].as_u64() {
            let piece = vec![0.5f32; 1 << 20];
            let pieces = (0..mib.div_ceil(4))
                .map(|_| Tensor::create(&TensorData::F32(piece.clone()), &[1 << 20]))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| format!("{err:?}"))?;
            let borrows: Vec<&Tensor> = pieces.iter().collect();
            let blob = rollbox_sdk::tensor::concat(&borrows)
                .and_then(|t| t.unsqueeze(0))
                .map_err(|err| format!("{err:?}"))?;
            out.tensors.push(("blob".into(), blob));
        }
        Ok(Some(out))
    }
}
rollbox_sdk::export_workflow!(Hoard);
fn main() {}
