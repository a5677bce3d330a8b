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
mod operator;
mod polls;
pub mod ranks;

pub use answers::{Place, Position, Registration};
pub use connection::Store;
pub use error::StoreError;
pub use keys::QueueKeys;
pub use ranks::Samples;

/// The scripts, compiled into the binary so that what runs is what was built.
/// Each is loaded after `lua/lib.lua`, the helpers they share.
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../lua/lib.lua"),
                include_str!(concat!("../../lua/", $file))
            ))
        })
    };
}
/// Read-only: the `no-writes` flag lets Redis run it on a replica and
/// refuse it any write.
macro_rules! read_only_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                "#!lua flags=no-writes\n",
                include_str!("../../lua/lib.lua"),
                include_str!(concat!("../../lua/", $file))
            ))
        })
    };
}

// After the macros, which they use.
mod health;
mod incidents;
mod scripts;
pub use incidents::{Incident, Recovered, Recovery, Watched};

pub use admission::{Admission, AdmitOutcome, Cleanup, GateRecord, NextBucket, PLACE_STEP};
pub use api::{Current, Dropout, Sample};
pub use operator::{Change, Phase, Refused, Setting, Status};
pub use polls::MAX_USERS_PER_SCRIPT;
pub use scripts::REVOKED_CHANNEL;
