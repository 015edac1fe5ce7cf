//! Loading by path: world checks, refused files, the compiled-component cache, and one
//! sandboxed reward call.

use std::path::Path;
use std::sync::Arc;

use rollbox_runtime::{
    GuestFault, Limits, RewardCall, Runtime, RuntimeConfig, Services, WorldKind,
};
use rollbox_tests::components as c;
use rollbox_tests::{runtime, test_cache_dir};
use serde_json::json;

#[test]
fn inspect_reports_world_hash_and_imports() {
    let rt = runtime();
    let info = rt.inspect(Path::new(c::WORKFLOW_ECHO)).expect("inspect");
    assert_eq!(info.world, Some(WorldKind::Workflow));
    assert_eq!(info.sha256.len(), 64);
    assert!(info.exports.iter().any(|e| e == "run-episode"));
    assert!(
        info.imports
            .iter()
            .any(|i| i == "rollbox:workflow/engine@0.1.0")
    );
    let reward = rt
        .inspect(Path::new(c::REWARD_CONST))
        .expect("inspect reward");
    assert_eq!(reward.world, Some(WorldKind::Reward));
    assert!(
        reward.imports.iter().all(|i| i.starts_with("wasi:")
            || i.starts_with("rollbox:workflow/log")
            || i.starts_with("rollbox:workflow/types")),
        "{:?}",
        reward.imports
    );
}

#[test]
fn a_component_for_the_wrong_world_is_refused_with_the_fix() {
    let rt = runtime();
    let err = rt
        .load_workflow(Path::new(c::REWARD_CONST))
        .err()
        .expect("reward as workflow");
    let msg = err.to_string();
    assert!(msg.contains("exports `score`, expected `run-episode`: is this a reward component? load it with --reward"), "{msg}");
    let err = rt
        .load_reward(Path::new(c::WORKFLOW_ECHO))
        .err()
        .expect("workflow as reward");
    let msg = err.to_string();
    assert!(
        msg.contains("expected `score`: is this a workflow component?"),
        "{msg}"
    );
    let err = rt
        .load_tool(Path::new(c::TRIVIAL))
        .err()
        .expect("workflow as tool");
    assert!(err.to_string().contains("expected `call`"), "{err}");
}

#[test]
fn missing_files_core_modules_and_garbage_are_refused() {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let err = rt
        .load_workflow(&dir.path().join("nope.wasm"))
        .err()
        .expect("missing");
    assert!(
        format!("{err:#}").contains("cannot read component"),
        "{err:#}"
    );
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").expect("write");
    let err = rt.load_workflow(&core).err().expect("core module");
    assert!(
        err.to_string()
            .contains("core WebAssembly module, not a component"),
        "{err}"
    );
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm\x0d\0\x01\0garbage").expect("write");
    let err = rt.load_workflow(&junk).err().expect("junk");
    assert!(
        format!("{err:#}").contains("not a valid WebAssembly component"),
        "{err:#}"
    );
}

#[test]
fn compiled_components_are_cached_by_sha256() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().join("cache")),
        max_instances: 8,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::new(config.clone(), Services::new()).expect("runtime");
    let info = rt.inspect(Path::new(c::TRIVIAL)).expect("compile");
    let entries: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
        .expect("cache dir written")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(
        entries[0].starts_with(&info.sha256) && entries[0].ends_with(".cwasm"),
        "{entries:?}"
    );
    // A second runtime loads from the cache and gets a working component.
    let rt2 = Runtime::new(config, Services::new()).expect("runtime");
    rt2.load_workflow(Path::new(c::TRIVIAL))
        .expect("cached load");
    // A corrupted entry is discarded and recompiled, never trusted.
    let path = dir.path().join("cache").join(&entries[0]);
    std::fs::write(&path, b"corrupt").expect("corrupt");
    rt2.load_workflow(Path::new(c::TRIVIAL))
        .expect("recompiled");
    assert!(std::fs::metadata(&path).expect("rewritten").len() > 7);
    let _ = test_cache_dir();
}

#[tokio::test]
async fn a_reward_component_scores_in_its_own_sandbox() {
    let rt = runtime();
    let reward = rt
        .load_reward(Path::new(c::REWARD_CONST))
        .expect("reward loads");
    let call = RewardCall {
        data: json!({"value": 0.25}),
        ..RewardCall::default()
    };
    let r = rt
        .call_reward(&reward, call, Arc::new(Limits::untrusted_call()))
        .await;
    assert_eq!(r.result, Ok(0.25));
    assert!(r.peak_memory_bytes > 0);
    let bad = RewardCall {
        data: json!("not an object"),
        ..RewardCall::default()
    };
    let r = rt
        .call_reward(&reward, bad, Arc::new(Limits::untrusted_call()))
        .await;
    assert_eq!(
        r.result,
        Ok(1.0),
        "a missing value falls back to the component's default"
    );
    let r = rt
        .call_reward(
            &reward,
            RewardCall::default(),
            Arc::new(Limits {
                max_memory_bytes: 1,
                ..Limits::untrusted_call()
            }),
        )
        .await;
    assert!(
        matches!(r.result, Err(GuestFault::MemoryLimit { .. })),
        "{:?}",
        r.result
    );
}

#[tokio::test]
async fn a_tool_component_is_called_in_its_own_sandbox() {
    let rt = runtime();
    let tool = rt.load_tool(Path::new(c::TOOL_ECHO)).expect("tool loads");
    let r = rt
        .call_tool(
            &tool,
            "calc".into(),
            "{\"x\":1}".into(),
            Arc::new(Limits::untrusted_call()),
        )
        .await;
    assert_eq!(r.result, Ok("calc:{\"x\":1}".to_string()));
    let err = rt
        .load_reward(Path::new(c::TOOL_ECHO))
        .err()
        .expect("tool as reward");
    assert!(
        err.to_string()
            .contains("is this a tool component? load it with --tool"),
        "{err}"
    );
}
