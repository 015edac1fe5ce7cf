//! Host bindings generated from `wit/` (the only `bindgen!` calls of the crate).
//!
//! One module per world. The reward and tool worlds reuse the workflow world's interface
//! modules through `with`, so each host interface is implemented once.

/// The `workflow` world: every host interface imported, `run-episode` exported.
pub mod workflow {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "workflow",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "rollbox:workflow/tensor.tensor": rollbox_tensor::HostTensor,
        },
    });
}

/// The `reward` world: imports `log` and `tools`, exports `score`.
pub mod reward {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "reward",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "rollbox:workflow/types": super::workflow::rollbox::workflow::types,
            "rollbox:workflow/log": super::workflow::rollbox::workflow::log,
            "rollbox:workflow/tools": super::workflow::rollbox::workflow::tools,
        },
    });
}

/// The `tool` world: imports `log` only, exports `call`.
pub mod tool {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "tool",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "rollbox:workflow/log": super::workflow::rollbox::workflow::log,
        },
    });
}

/// The `environment` world: imports `log` and `tools`, exports `reset` and `step`.
pub mod environment {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "environment",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "rollbox:workflow/types": super::workflow::rollbox::workflow::types,
            "rollbox:workflow/log": super::workflow::rollbox::workflow::log,
            "rollbox:workflow/tools": super::workflow::rollbox::workflow::tools,
        },
    });
}

pub use workflow::rollbox::workflow::{
    engine, episode, log, rewards, tensor, tokenizer, tools, types, vision,
};
