//! The scripts of `lua/`, compiled into the binary so that what runs is
//! what was built, and the helpers every call shares.

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation};

use super::error::StoreError;
use crate::config::HeartbeatConfig;

pub(super) static REGISTER: LazyLock<Script> = script!("register.lua");

pub(super) static RANK: LazyLock<Script> = script!("rank.lua");

pub(super) static DROPOUT: LazyLock<Script> = script!("dropout.lua");

pub(super) static ADMIT: LazyLock<Script> = script!("admit.lua");

pub(super) static CLEANUP: LazyLock<Script> = script!("cleanup.lua");

pub(super) static SWEEP: LazyLock<Script> = script!("sweep.lua");

pub(super) static RECHECK: LazyLock<Script> = script!("recheck.lua");

pub(super) static CONTROL: LazyLock<Script> = script!("control.lua");

pub(super) static SAMPLES: LazyLock<Script> = read_only_script!("samples.lua");

pub(super) static REVOKE: LazyLock<Script> = script!("revoke.lua");

/// The channel revocations are pushed on (`lua/revoke.lua` publishes; every
/// instance subscribes, see `edge::revoked`).
pub const REVOKED_CHANNEL: &str = "waitgate:revoked";

pub(super) static TOKEN: LazyLock<Script> = read_only_script!("token.lua");

pub(super) static CURRENT: LazyLock<Script> = read_only_script!("current.lua");

pub(super) static STATUS: LazyLock<Script> = read_only_script!("status.lua");

/// The heartbeat settings a script reads (`heartbeat_args` in
/// `lua/lib.lua`): the timeout and the bounds of the poll advice, in ms.
pub(super) fn heartbeat_args(invocation: &mut ScriptInvocation<'_>, heartbeat: &HeartbeatConfig) {
    invocation
        .arg(heartbeat.timeout.as_millis() as u64)
        .arg(heartbeat.poll_min.as_millis() as u64)
        .arg(heartbeat.poll_max.as_millis() as u64);
}

/// The one answer of a batch of one.
pub(super) fn one<T>(script: &'static str, mut answers: Vec<T>) -> Result<T, StoreError> {
    match (answers.pop(), answers.is_empty()) {
        (Some(answer), true) => Ok(answer),
        _ => Err(StoreError::Failed(format!("{script}: not one answer"))),
    }
}

/// A batched script's flat answer, `width` numbers per user, checked to be
/// one answer per user asked.
pub(super) fn answers<'a>(
    script: &'static str,
    flat: &'a [i64],
    width: usize,
    asked: usize,
) -> Result<std::slice::ChunksExact<'a, i64>, StoreError> {
    if flat.len() != width * asked {
        return Err(StoreError::Failed(format!(
            "{script}: {} numbers for {asked} users",
            flat.len()
        )));
    }
    Ok(flat.chunks_exact(width))
}
