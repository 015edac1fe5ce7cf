//! Fuzzes loading by path with generated and mutated component files:
//!
//! * `wasm-smith` core modules with the `tool` world's core exports (`call`, `describe`,
//!   `cabi_realloc`, `memory`) and random bodies, start functions, data segments and tables, wrapped into
//!   components with the world's metadata (`wit-component`), written to a file, loaded and
//!   called;
//! * real components (a workflow, a reward, a tool) with random byte changes, truncations,
//!   repeats and splices, loaded as every world and, when they load, run.
//!
//! Any load error or typed fault is fine; a host panic or a call that outlives its deadline by
//! [`HANG_GRACE`] fails, leaving the file in `target/fuzz-crashes/`. Runs for
//! `ROLLBOX_FUZZ_COMPONENT_SECS` (default 5 s, 20 s in CI: `ROLLBOX_LONG_TESTS=1`;
//! `scripts/stress/fuzz.sh` sets more);
//! `ROLLBOX_FUZZ_SEED` repeats a run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rollbox_runtime::{
    EpisodeRequest, Limits, RewardComponent, Runtime, RuntimeConfig, Scope, Services,
    ToolComponent, ToolInput, WorkflowComponent,
};
use rollbox_tests::components as c;
use serde_json::json;

/// Wall-clock limit of one call of a generated component.
const CALL_TIMEOUT: Duration = Duration::from_millis(300);
/// How long past its deadline a call may run before the host counts as hung.
const HANG_GRACE: Duration = Duration::from_secs(5);

fn secs() -> f64 {
    rollbox_tests::soak_budget("ROLLBOX_FUZZ_COMPONENT_SECS", 5.0, 20.0)
}

fn limits() -> Arc<Limits> {
    Arc::new(Limits {
        timeout: CALL_TIMEOUT,
        max_memory: 16 << 20,
        ..Limits::untrusted_call()
    })
}

/// A core module with the tool world's core exports, whose bodies wasm-smith generates.
const TOOL_EXPORTS: &str = r#"(module
    (memory (export "memory") 1)
    (func (export "call") (param i32 i32 i32 i32) (result i32) (i32.const 0))
    (func (export "describe") (result i32) (i32.const 0))
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 8)))"#;

fn generated_tool(rng: &mut StdRng, exports: &[u8]) -> Option<Vec<u8>> {
    let mut entropy = vec![0u8; rng.random_range(64..4096)];
    rng.fill(&mut entropy[..]);
    let mut u = arbitrary::Unstructured::new(&entropy);
    let config = wasm_smith::Config {
        exports: Some(exports.to_vec()),
        max_imports: 0,
        max_memories: 1,
        max_tables: 2,
        allow_start_export: true,
        // The proposals rollbox's engine does not enable: a module using one is only a
        // validation error (mutated components still reach that path).
        gc_enabled: false,
        exceptions_enabled: false,
        memory64_enabled: false,
        threads_enabled: false,
        reference_types_enabled: false,
        tail_call_enabled: false,
        ..wasm_smith::Config::default()
    };
    let module = wasm_smith::Module::new(config, &mut u).ok()?;
    rollbox_tests::component_from_core(module.to_bytes(), "tool").ok()
}

/// `base` with a few random byte changes, truncations, repeats or splices.
fn mutated(rng: &mut StdRng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = b.len().max(1);
        match rng.random_range(0..5) {
            0 => {
                for _ in 0..rng.random_range(1..=8) {
                    let i = rng.random_range(0..len).min(b.len().saturating_sub(1));
                    if let Some(x) = b.get_mut(i) {
                        *x = rng.random();
                    }
                }
            }
            1 => b.truncate(rng.random_range(0..len)),
            2 => {
                let from = rng.random_range(0..len).min(b.len());
                let to = (from + rng.random_range(1..256)).min(b.len());
                let stretch = b[from..to].to_vec();
                let at = rng.random_range(0..=b.len());
                b.splice(at..at, stretch);
            }
            3 => {
                let cut = rng.random_range(0..len).min(b.len());
                let from = rng.random_range(0..other.len());
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            _ => {
                // Section sizes are LEB128: bump a byte near the start of the file.
                let i = rng
                    .random_range(8..len.clamp(9, 64))
                    .min(b.len().saturating_sub(1));
                if let Some(x) = b.get_mut(i) {
                    *x = x.wrapping_add(rng.random_range(1..4));
                }
            }
        }
    }
    b
}

fn save_crash(seed: u64, n: u64, bytes: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-crashes");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("component-{seed}-{n}.wasm"));
    let _ = std::fs::write(&path, bytes);
    path
}

/// Load `bytes` (from a file) as every world and run what loads; `Err` on a host panic or hang.
async fn exercise(rt: &Arc<Runtime>, path: PathBuf) -> Result<&'static str, String> {
    let rt = rt.clone();
    let task = tokio::spawn(async move {
        let mut outcome = "refused";
        if std::env::var_os("ROLLBOX_FUZZ_VERBOSE").is_some()
            && let Err(e) = rt.load::<ToolComponent>(&path)
        {
            eprintln!("load_tool: {e:#}");
        }
        if let Ok(tool) = rt.load::<ToolComponent>(&path) {
            // Whatever `describe` returns or does, the host survives it (its output is
            // checked where schemas are built).
            let _ = rt.call_once(&tool, ToolInput::Describe, limits()).await;
            let input = ToolInput::Call {
                name: "t".into(),
                args: "{}".into(),
            };
            let r = rt.call_once(&tool, input, limits()).await;
            outcome = if r.result.is_ok() {
                "tool ok"
            } else {
                "tool fault"
            };
        }
        if let Ok(reward) = rt.load::<RewardComponent>(&path) {
            let call = rollbox_runtime::RewardCall::default();
            let r = rt.call_once(&reward, call, limits()).await;
            outcome = if r.result.is_ok() {
                "reward ok"
            } else {
                "reward fault"
            };
        }
        if let Ok(w) = rt.load::<WorkflowComponent>(&path) {
            let request = EpisodeRequest::new("r0-s0", json!({"input_ids": [1, 2, 3]}));
            let r = rt
                .run_episode(
                    &Scope::default(),
                    &w,
                    request,
                    Arc::new(Limits {
                        timeout: CALL_TIMEOUT,
                        ..Limits::default()
                    }),
                )
                .await;
            outcome = r.outcome.kind();
        }
        outcome
    });
    match tokio::time::timeout(3 * CALL_TIMEOUT + HANG_GRACE, task).await {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(e)) => Err(format!("host panic: {e}")),
        Err(_) => Err("hang: the calls did not end".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_and_mutated_components_load_or_fault() {
    let seed = rollbox_tests::fuzz_seed();
    println!("component fuzz seed {seed} (ROLLBOX_FUZZ_SEED={seed} repeats it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let rt = Arc::new(
        Runtime::new(
            RuntimeConfig {
                // Generated components are compiled once each: no cache.
                cache_dir: None,
                max_instances: 32,
                ..RuntimeConfig::default()
            },
            Services::new().with_backend(Arc::new(rollbox_tests::fixed_backend(Duration::ZERO))),
        )
        .expect("runtime"),
    );
    let exports = wat::parse_str(TOOL_EXPORTS).expect("valid WAT");
    let bases: Vec<Vec<u8>> = [c::WORKFLOW_ECHO, c::REWARD_CONST, c::TOOL_ECHO]
        .iter()
        .map(|p| std::fs::read(p).expect("component"))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let deadline = Instant::now() + Duration::from_secs_f64(secs());
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let (kind, bytes) = if n.is_multiple_of(2) {
            match generated_tool(&mut rng, &exports) {
                Some(b) => ("generated", b),
                None => {
                    *counts.entry("generated: not encodable".into()).or_default() += 1;
                    continue;
                }
            }
        } else {
            let base = &bases[rng.random_range(0..bases.len())];
            let other = &bases[rng.random_range(0..bases.len())];
            ("mutated", mutated(&mut rng, base, other))
        };
        let path = dir.path().join(format!("c{n}.wasm"));
        std::fs::write(&path, &bytes).expect("write");
        match exercise(&rt, path).await {
            Ok(outcome) => *counts.entry(format!("{kind}: {outcome}")).or_default() += 1,
            Err(e) => {
                let saved = save_crash(seed, n, &bytes);
                panic!("{e} ({kind} component saved as {})", saved.display());
            }
        }
    }
    println!("{n} components: {counts:?}");
    assert!(
        counts.keys().any(|k| k.starts_with("generated: tool")),
        "some generated components loaded and ran: {counts:?}"
    );
    // The host still serves a normal episode.
    rollbox_tests::assert_serves_echo(&rt).await;
}
