//! Why a store call failed, and the checks of script answers every call
//! makes.

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
