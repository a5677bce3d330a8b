//! Background work, run by every instance: the global admission gate, the
//! heartbeat cleanup, the gauge sampler, the Redis probe, the revocation
//! sync and the watch over each queue's state (see `durability`).
//!
//! Each is a Pingora `BackgroundService` that runs one loop per queue and
//! stops when the server shuts down. None of them needs a leader or a lock:
//! the scripts they call are atomic, and the admission gate keeps its window
//! in Redis, so any number of instances together admit at most one batch per
//! window.

mod admission;
mod cleanup;
mod probe;
mod revocations;
mod sampler;
mod shared;
mod watch;

pub use admission::Admission;
pub use cleanup::Cleanup;
pub use probe::{Probe, PROBE_INTERVAL};
pub use revocations::{Revocations, SYNC_INTERVAL};
pub use sampler::{Sampler, SAMPLE_INTERVAL};
pub use shared::Shared;
pub use watch::{Watch, WATCH_INTERVAL};
