//! The isolation canary: checks that a pool slot handed to a new instance holds nothing of the
//! previous one.
//!
//! The pooling allocator resets a used slot's memory for its next instance by rewriting only
//! the pages the Linux `PAGEMAP_SCAN` ioctl reports dirty within the keep-resident prefix
//! (scan after scan, 64 regions at a time: rollbox's wasmtime patch 0002) and releasing the
//! rest, or, without the scan, by rewriting the whole prefix. That trusts something outside
//! rollbox (the kernel's page categories, the scan's resume logic). The canary does not: a
//! module writes a random secret into pages spread over its memory (the data segment's page, a
//! run of pages, every other page so that there are far more separate dirty regions than a
//! scan reports in one go, pages never touched before, pages past the keep-resident prefix,
//! and pages it grows into) and is dropped; a second instance of the same module, which the
//! allocator places in the same slot (module affinity), counts the places that do not hold
//! the image's bytes. `Runtime::new` runs it on every pool and turns the dirty-page scan off
//! when it fails.

use wasmtime::{Engine, Instance, Module, Store};

/// Pages of the canary's memory in the default pool: 20 MiB, past its 16 MiB kept resident
/// (the pages past it are released, not rewritten), and over 300 separate dirty regions
/// (a scan reports 64 at a time).
pub(crate) const DEFAULT_POOL_PAGES: u32 = 320;

/// Pages of the canary's memory in the snapshot pool: 44 MiB, past its 40 MiB kept resident,
/// and over 700 separate dirty regions.
pub(crate) const SNAPSHOT_POOL_PAGES: u32 = 704;

/// The canary module for a memory of `pages` (at least 8). `write(secret)` stores the secret
/// at two offsets of every touched page (pages 0-7, then every even page) and of 16 pages it
/// grows into; `check()` returns how many of those places, in a fresh instance, do not hold
/// the image's bytes (`rollbox!` at offset 0, zero elsewhere), plus 1000 if the memory did not
/// start at its initial size and 1000 if it could not grow by 16 pages from there.
fn canary_wat(pages: u32) -> String {
    let grown = pages + 16;
    format!(
        r#"
(module
  (memory {pages})
  (data (i32.const 0) "rollbox!")
  (func $touched (param $p i32) (result i32)
    (i32.or (i32.lt_u (local.get $p) (i32.const 8))
            (i32.eqz (i32.and (local.get $p) (i32.const 1)))))
  (func $image (param $addr i32) (result i64)
    (if (result i64) (i32.eqz (local.get $addr))
      (then (i64.const 0x21786f626c6c6f72))
      (else (i64.const 0))))
  (func (export "write") (param $secret i64)
    (local $p i32)
    (loop $pages
      (if (call $touched (local.get $p))
        (then
          (i64.store (i32.mul (local.get $p) (i32.const 65536)) (local.get $secret))
          (i64.store (i32.add (i32.mul (local.get $p) (i32.const 65536)) (i32.const 40000))
                     (local.get $secret))))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br_if $pages (i32.lt_u (local.get $p) (i32.const {pages}))))
    (drop (memory.grow (i32.const 16)))
    (loop $grown
      (i64.store (i32.mul (local.get $p) (i32.const 65536)) (local.get $secret))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br_if $grown (i32.lt_u (local.get $p) (i32.const {grown})))))
  (func (export "check") (result i32)
    (local $p i32) (local $bad i32) (local $addr i32)
    (if (i32.ne (memory.size) (i32.const {pages}))
      (then (local.set $bad (i32.const 1000))))
    (loop $pages
      (if (call $touched (local.get $p))
        (then
          (local.set $addr (i32.mul (local.get $p) (i32.const 65536)))
          (if (i64.ne (i64.load (local.get $addr)) (call $image (local.get $addr)))
            (then (local.set $bad (i32.add (local.get $bad) (i32.const 1)))))
          (if (i64.ne (i64.load (i32.add (local.get $addr) (i32.const 40000))) (i64.const 0))
            (then (local.set $bad (i32.add (local.get $bad) (i32.const 1)))))))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br_if $pages (i32.lt_u (local.get $p) (i32.const {pages}))))
    (if (i32.ne (memory.grow (i32.const 16)) (i32.const {pages}))
      (then (local.set $bad (i32.add (local.get $bad) (i32.const 1000)))))
    (loop $grown
      (if (i64.ne (i64.load (i32.mul (local.get $p) (i32.const 65536))) (i64.const 0))
        (then (local.set $bad (i32.add (local.get $bad) (i32.const 1)))))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br_if $grown (i32.lt_u (local.get $p) (i32.const {grown}))))
    (local.get $bad))
)
"#
    )
}

/// Places the canary writes its secret to in a memory of `pages`: two per touched page, one
/// per grown page.
fn places(pages: u32) -> u32 {
    2 * (8 + (pages - 8) / 2) + 16
}

/// What one canary run saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanaryReport {
    /// Places the secret was written to.
    pub places: u32,
    /// Places that still held the secret (or anything but the image) in the writer's own
    /// instance: `places` when the writes landed, which shows the check can fail.
    pub seen_by_writer: u32,
    /// Places that did not hold the image's bytes in the next instance of the slot: 0 when
    /// the slot was reset completely.
    pub leaked: u32,
}

/// A store for the canary on `engine`: no deadline to speak of, unlimited fuel when metered.
fn store(engine: &Engine) -> Store<()> {
    let mut store = Store::new(engine, ());
    store.set_epoch_deadline(1 << 40);
    // Errors only when the engine does not meter fuel.
    let _ = store.set_fuel(u64::MAX);
    store
}

impl CanaryReport {
    /// The writes landed and the next instance saw none of them.
    pub fn passed(&self) -> bool {
        self.leaked == 0 && self.seen_by_writer == self.places
    }
}

/// Run the canary once on `engine`'s allocator, with a memory of `pages`.
pub(crate) fn run(engine: &Engine, pages: u32) -> anyhow::Result<CanaryReport> {
    let module = Module::new(engine, wat::parse_str(canary_wat(pages))?)?;
    let secret = random_nonzero();
    let seen_by_writer = {
        let mut store = store(engine);
        let instance = Instance::new(&mut store, &module, &[])?;
        let write = instance.get_typed_func::<i64, ()>(&mut store, "write")?;
        let check = instance.get_typed_func::<(), u32>(&mut store, "check")?;
        write.call(&mut store, secret)?;
        // The writer's own memory has grown by 16 pages: subtract the size mismatch and the
        // failed grow that `check` counts on top of the places.
        check.call(&mut store, ())?.saturating_sub(2000)
    };
    let mut store = store(engine);
    let instance = Instance::new(&mut store, &module, &[])?;
    let check = instance.get_typed_func::<(), u32>(&mut store, "check")?;
    let leaked = check.call(&mut store, ())?;
    Ok(CanaryReport {
        places: places(pages),
        seen_by_writer,
        leaked,
    })
}

/// A random nonzero secret (the process's hash keys and the clock).
fn random_nonzero() -> i64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() | 1) as i64
}
