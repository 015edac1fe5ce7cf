//! The allocator of the `rollbox` binary: mimalloc with the `mimalloc` feature (on by default),
//! else the system's. `rollbox-bench` declares the same allocator in its own `alloc.rs`.
//!
//! It is chosen here, not in `rollbox-host`, because the Python extension links `rollbox-host`
//! and a library loaded with dlopen cannot hold mimalloc's static TLS ("cannot allocate memory
//! in static TLS block"); `cargo test --workspace` unifies features across the workspace, so a
//! feature of `rollbox-host` would reach the extension built with the tests.

/// mimalloc keeps freed pages for reuse: batch buffers (tens of MiB, allocated and freed per
/// batch) would otherwise be mmapped, page-faulted and zeroed afresh each time; that was
/// two-thirds of concat-padded's time with glibc malloc (`rollbox-bench concat`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "mimalloc")]
unsafe extern "C" {
    /// mimalloc's `mi_collect` (in the library the `mimalloc` crate links).
    fn mi_collect(force: bool);
}

/// Give the memory freed during setup back to the OS. Loading a tokenizer from GGUF builds and
/// drops ~60 MiB of intermediate JSON, which mimalloc would otherwise keep resident for the
/// whole run (an idle `rollbox serve` held 100 MiB, 51 MiB after this).
pub fn release_setup_memory() {
    // SAFETY: `mi_collect` only returns free pages to the OS; any thread may call it.
    #[cfg(feature = "mimalloc")]
    unsafe {
        mi_collect(true)
    }
}
