//! The allocator of `rollbox` (mimalloc, its default feature), so the bench measures what the
//! production binary does.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

unsafe extern "C" {
    /// mimalloc's `mi_collect`, in the library the `mimalloc` crate links.
    fn mi_collect(force: bool);
}

/// Give memory freed while setting up back to the OS, as `rollbox` does before a run.
pub fn release_setup_memory() {
    // SAFETY: `mi_collect` only returns free pages to the OS; any thread may call it.
    unsafe { mi_collect(true) }
}
