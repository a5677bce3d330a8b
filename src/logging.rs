//! Log set-up: `tracing` events, one line each, filtered by `RUST_LOG`.
//!
//! Pingora logs through the `log` crate; the subscriber's `log` bridge turns
//! those records into events too, so one filter governs both.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter when `RUST_LOG` is unset: waitgate's own events, and only
/// warnings from its dependencies (Pingora is chatty at info).
const DEFAULT_FILTER: &str = "warn,waitgate=info";

pub fn init() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    // A second init (tests build several servers) is harmless: keep the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
