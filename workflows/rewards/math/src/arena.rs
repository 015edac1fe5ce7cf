//! The component's allocator: a bump arena for the first [`ARENA_BYTES`], then the system
//! allocator.
//!
//! Every call of a reward gets a fresh instance that is thrown away after one `score`, so
//! memory freed during the call need not be reused: bumping a pointer is all an allocation
//! has to do. Scoring allocates many short strings and vectors; with the system allocator
//! (dlmalloc) their bookkeeping was a large share of a call. Past the arena (a long
//! completion), allocations go to the system allocator as before, so memory stays bounded by
//! what the call really holds plus the arena.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// Bytes bumped before falling back to the system allocator (zero pages until touched).
pub const ARENA_BYTES: usize = 256 << 10;

#[repr(C, align(16))]
struct Bytes([u8; ARENA_BYTES]);

pub struct Arena {
    bytes: UnsafeCell<Bytes>,
    /// Offset of the first free byte.
    next: UnsafeCell<usize>,
}

// SAFETY: the component runs on one thread (wasm32 without the threads proposal), so the
// arena is never touched by two threads at once.
unsafe impl Sync for Arena {}

impl Arena {
    pub const fn new() -> Arena {
        Arena {
            bytes: UnsafeCell::new(Bytes([0; ARENA_BYTES])),
            next: UnsafeCell::new(0),
        }
    }

    fn base(&self) -> *mut u8 {
        self.bytes.get().cast()
    }

    fn owns(&self, ptr: *mut u8) -> bool {
        let base = self.base() as usize;
        (base..base + ARENA_BYTES).contains(&(ptr as usize))
    }
}

impl Default for Arena {
    fn default() -> Arena {
        Arena::new()
    }
}

// SAFETY: arena blocks are disjoint ranges of `bytes`, aligned as asked, handed out once;
// everything else is the system allocator's.
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: single-threaded (see `Sync`); `next` is only read and written here.
        let next = unsafe { &mut *self.next.get() };
        let base = self.base() as usize;
        let start = (base + *next).next_multiple_of(layout.align()) - base;
        match start.checked_add(layout.size()) {
            Some(end) if end <= ARENA_BYTES => {
                *next = end;
                // SAFETY: `start + size <= ARENA_BYTES`, inside the arena.
                unsafe { self.base().add(start) }
            }
            // SAFETY: forwarded with the caller's layout.
            _ => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !self.owns(ptr) {
            // SAFETY: not from the arena, so from `System` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.owns(ptr) {
            // SAFETY: single-threaded (see `Sync`).
            let next = unsafe { &mut *self.next.get() };
            let start = ptr as usize - self.base() as usize;
            // The last block grows (or shrinks) in place when the arena has room.
            if start + layout.size() == *next && start + new_size <= ARENA_BYTES {
                *next = start + new_size;
                return ptr;
            }
            if new_size <= layout.size() {
                return ptr;
            }
            // SAFETY: the caller's alignment with the new size is a valid layout (the
            // `GlobalAlloc::realloc` contract).
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: a fresh block of `new_size` bytes; the old one holds `layout.size()`.
            unsafe {
                let new = self.alloc(new_layout);
                if !new.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, new, layout.size());
                }
                new
            }
        } else {
            // SAFETY: not from the arena, so from `System` with this layout.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}
