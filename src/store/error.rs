//! Why a store call failed (what a Redis error means for the caller), and
//! the checks of script answers every call makes.

use std::time::Duration;

/// Why a store call failed. Both kinds become a 503 for the client; they
/// differ in what the operator needs to know.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Redis did not answer in time, refused the connection or dropped it.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// Redis answered with an error or a reply the script never gives:
    /// something outside waitgate changed the keys, or a bug.
    #[error("redis error: {0}")]
    Failed(String),
    /// Redis answers, without the queue's state: a script that must not run
    /// on what is left refused (see `lua/recover.lua`). The caller writes
    /// back what the instance knows ([`crate::durability`]) and calls again.
    #[error("redis has lost the queue's state")]
    Lost,
}

pub(super) fn count(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Failed(format!("negative count {value}")))
}

pub(super) fn unexpected(script: &str, code: i64) -> StoreError {
    StoreError::Failed(format!("{script} script returned unknown code {code}"))
}

/// What a Redis error means for the caller: for now ([`StoreError::Unavailable`]),
/// broken ([`StoreError::Failed`]), or the state lost ([`StoreError::Lost`]).
pub(super) fn classify(e: redis::RedisError) -> StoreError {
    use redis::{ErrorKind, ServerErrorKind};
    // A Redis that is loading its AOF after a restart, failing over or busy
    // with a long script is unavailable for now, not broken.
    // So is a Sentinel set that names no master (during a failover, or not
    // by the configured name): no Redis to answer.
    let transient = matches!(
        e.kind(),
        ErrorKind::Io
            | ErrorKind::MasterNameNotFoundBySentinel
            | ErrorKind::NoValidReplicasFoundBySentinel
            | ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::ClusterDown
            )
    );
    // So is one over `maxmemory`, which refuses writes until memory is freed
    // (cleanup and admission go on: their first writes are removals), and
    // one still running another client's script past its threshold (BUSY):
    // logged as an outage is, once a second, not once a call.
    let full = matches!(e.code(), Some("OOM" | "BUSY"));
    if e.code() == Some("WAITGATE_LOST") {
        return StoreError::Lost;
    }
    if transient
        || full
        || e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
    {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Failed(e.to_string())
    }
}

/// Whether `e` shows the connection gone (closed, reset, refused, or out of
/// step with Redis): a new one is needed. Not a timeout, nor an error
/// answer of Redis, both of which come on a connection that still works.
pub(super) fn gone(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_connection_refusal() || e.is_unrecoverable_error()
}

/// No answer within `limit`: a Redis that is down, hung or slow.
pub(super) fn no_answer(limit: Duration) -> StoreError {
    StoreError::Unavailable(format!("no answer within {} ms", limit.as_millis()))
}
