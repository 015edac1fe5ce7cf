//! Guest programs for the integration tests; each `src/bin/*.rs` is one component.
