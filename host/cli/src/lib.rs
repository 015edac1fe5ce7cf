//! The `rollbox` command line as a library: one module per subcommand under [`cmd`], the
//! flags they share, and the process settings every rollbox binary makes (allocator, huge
//! pages). The `rollbox` binary (`main.rs`) parses and dispatches; `rollbox-bench`
//! (`host/bench`) reuses the setup code.

pub mod builtin;
pub mod cmd;
pub mod config_file;
pub mod limits;
pub mod model;
pub mod process;
