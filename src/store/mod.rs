//! Redis: the scripts of `lua/` behind typed calls.
//!
//! Every change to queue state is one Lua script, so each API call is one
//! round-trip and no reader ever sees half a change. Scripts are sent with
//! EVALSHA; on NOSCRIPT (a restarted or flushed Redis) `redis::Script` loads
//! the script and retries, so waitgate recovers without a restart.
//!
//! Every call is bounded by `redis.command-timeout-ms`. A Redis that is down,
//! hung or slow turns into [`StoreError::Unavailable`] within that time, and
//! the caller answers 503 instead of queueing work behind it.

mod admission;
mod answers;
mod api;
pub mod coalesce;
mod connection;
mod error;
pub mod heartbeat;
mod keys;
pub mod marks;
mod operator;
mod polls;
pub mod published;
pub mod ranks;

pub use answers::{Closed, Place, Position, Registration};
pub use connection::Store;
pub use error::StoreError;
pub use keys::QueueKeys;
pub use ranks::Samples;

mod health;
mod incidents;
mod scripts;
pub use incidents::{Incident, Recovered, Recovery, Watched};

pub use admission::{Admission, AdmitOutcome, Cleanup, GateRecord, NextBucket, PLACE_STEP};
pub use api::{Current, Dropout, Joining, Sample, SpentProof};
pub use operator::{Change, Phase, Refused, Setting, Status, MAX_CLOSED_MESSAGE_BYTES};
pub use polls::{PollPath, Polled, MAX_USERS_PER_SCRIPT};
pub use scripts::QueueRef;
pub use scripts::REVOKED_CHANNEL;
