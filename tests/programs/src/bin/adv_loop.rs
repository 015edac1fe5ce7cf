//! Spins forever: must be stopped by the wall-clock limit (or fuel). With `data["fill"]` true
//! it first grows its memory a page at a time, writing to every 4 KiB of each, until the host
//! refuses one (its `max_memory`), then spins holding all of it.
use rollbox_sdk::{Episode, Output, Workflow};
struct Spin;
impl Workflow for Spin {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        if e.data["fill"].as_bool() == Some(true) {
            fill();
        }
        let mut x: u64 = 0;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}

/// Grow linear memory until refused, touching each new page so it is really held.
#[cfg(target_arch = "wasm32")]
fn fill() {
    const PAGE: usize = 65536;
    loop {
        let page = core::arch::wasm32::memory_grow(0, 1);
        if page == usize::MAX {
            return;
        }
        for offset in (0..PAGE).step_by(4096) {
            // SAFETY: page `page` was just added to this memory and nothing else uses it
            // (the allocator only hands out pages it grew itself).
            unsafe { std::ptr::write_volatile((page * PAGE + offset) as *mut u8, 1) };
        }
    }
}
/// Built for the host too (the workspace's lints): there is no linear memory to fill.
#[cfg(not(target_arch = "wasm32"))]
fn fill() {}

rollbox_sdk::export_workflow!(Spin);
fn main() {}
