//! The host side of each WIT interface the worlds import, one module per interface (as
//! wasmtime-wasi's `p2/host/` is laid out): each implements the interface's generated `Host`
//! trait for the store's state and holds the checks and limits of that interface's calls.
//!
//! | module | interface | what the guest gets |
//! |---|---|---|
//! | `engine` | `engine` | `generate`, `generate-many`: the episode's inference, within its call and token limits |
//! | `tokenizer` | `tokenizer` | encode, decode, chat templates, special tokens, within the input cap |
//! | `rewards` | `rewards` | `score`: a registered reward run in its own sandbox |
//! | `tools` | `tools` | `call`, `call-many`, `describe`: registered tools in their own sandboxes |
//! | `tensor` | `tensor` | host tensors as handles: create, concat, pad, read, within handles and bytes |
//! | `log` | `log` | log lines and stats, bounded |
//! | `vision` | `vision` | image decoding and Qwen2-VL processing into tensors |

pub(crate) mod engine;
pub(crate) mod log;
pub(crate) mod rewards;
pub(crate) mod tensor;
pub(crate) mod tokenizer;
pub(crate) mod tools;
pub(crate) mod vision;
