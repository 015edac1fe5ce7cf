//! The `rollbox` command line as a library: one module per subcommand under [`cmd`] and the
//! flags they share. The flags become a [`rollbox_host::HostSpec`]; everything a run is built
//! from lives in `rollbox-host`, which the Python package and the bench use too. The `rollbox`
//! binary (`main.rs`) parses and dispatches.

pub mod alloc;
pub mod cmd;
pub mod config_file;
pub mod limits;
