//! The `tool` world: a tool an agent workflow may call, run in its own sandbox per call.
//! Imports nothing but [`log`].

pub use crate::bindings::tool::rollbox::workflow::log;

/// A tool.
pub trait Tool {
    /// The tool's OpenAI function schema: `{"description": "...", "parameters": {JSON Schema
    /// of the arguments}}`. The host names the tool as it is registered (`--tool NAME=PATH`)
    /// and hands the schema to agent workflows (`tools::schemas`), which put it in the chat
    /// template's `tools`. Default: no description, any JSON object as arguments.
    fn describe() -> serde_json::Value {
        serde_json::json!({"description": "", "parameters": {"type": "object"}})
    }

    /// Run the tool `name` with JSON `args`; return its output.
    fn call(name: String, args: String) -> Result<String, crate::Error>;
}

#[doc(hidden)]
pub fn __call<T: Tool>(name: String, args: String) -> Result<String, String> {
    T::call(name, args).map_err(String::from)
}

#[doc(hidden)]
pub fn __describe<T: Tool>() -> String {
    T::describe().to_string()
}

/// Export a [`Tool`] implementation as the component's `call` and `describe`.
#[macro_export]
macro_rules! export_tool {
    ($ty:ty) => {
        const _: () = {
            struct __RollboxToolExport;
            impl $crate::bindings::tool::Guest for __RollboxToolExport {
                fn describe() -> ::std::string::String {
                    $crate::tool::__describe::<$ty>()
                }

                fn call(
                    name: ::std::string::String,
                    args: ::std::string::String,
                ) -> ::core::result::Result<::std::string::String, ::std::string::String> {
                    $crate::tool::__call::<$ty>(name, args)
                }
            }
            $crate::bindings::tool::__export_tool_world!(__RollboxToolExport with_types_in $crate::bindings::tool);
        };
    };
}
