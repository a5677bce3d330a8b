//! The calls that keep a queue's promises through Redis incidents: each
//! instance's look every second (`lua/watch.lua`), the write-back of what an
//! instance knows after Redis lost a queue's state (`lua/recover.lua`), and
//! the seating again of a user whose place was lost (`lua/reseat.lua`).
//! What they are for is told in [`crate::durability`].

use redis::{FromRedisValue, Value};

use super::answers::{place, Position};
use super::connection::{Resend, Store};
use super::error::{count, StoreError};
use super::keys::QueueKeys;
use super::scripts::{pace_args, QueueRef, ReseatCode, RECOVER, RESEAT, WATCH};
use crate::config::HeartbeatConfig;

/// What one look at a queue saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// Redis's time (ms).
    pub now_ms: u64,
    /// The id of the queue's state; `None` when Redis has none (it lost the
    /// state, or never had it). Nothing else is read then.
    pub incarnation: Option<String>,
    /// The outage this look recorded (ms; 0 for none).
    pub gap_ms: u64,
    /// The last incident recorded, by anyone.
    pub incident: Option<Incident>,
    /// Active users whose state has not run out.
    pub active: u64,
    /// The control HASH, whole.
    pub control: Vec<(String, String)>,
    /// The gate's record (total, frontiers, the last decided window, rate).
    pub admission: Vec<(String, String)>,
}

impl Watched {
    /// A number of the control HASH.
    pub fn control_number(&self, field: &str) -> Option<u64> {
        number(&self.control, field)
    }

    /// A number of the gate's record.
    pub fn admission_number(&self, field: &str) -> Option<u64> {
        number(&self.admission, field)
    }
}

fn number(pairs: &[(String, String)], field: &str) -> Option<u64> {
    pairs
        .iter()
        .find(|(f, _)| f == field)
        .and_then(|(_, v)| v.parse::<f64>().ok())
        .filter(|n| n.is_finite() && *n >= 0.0)
        .map(|n| n as u64)
}

/// A Redis incident as recorded in the queue's admission HASH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incident {
    /// `outage`, `failover` or `data_loss`.
    pub kind: String,
    /// When it was noticed (Redis clock, ms).
    pub at_ms: u64,
    /// How long Redis was out of reach (ms; 0 when not known or none).
    pub length_ms: u64,
}

/// What an instance writes back after a loss of state, or gives a queue it
/// sees for the first time (see `lua/recover.lua`).
#[derive(Debug, Clone, Default)]
pub struct Recovery<'a> {
    /// The incarnation the instance knew.
    pub known: Option<&'a str>,
    /// The instance knows nothing of the queue: it only gives it an
    /// incarnation if it has none.
    pub fresh: bool,
    /// max-active in effect when the instance last looked (0: no cap).
    pub max_active: u64,
    pub active_ttl_ms: u64,
    /// Active users at the last look, and when (Redis clock, ms; 0: never).
    pub active: u64,
    pub looked_at_ms: u64,
    /// Users admitted in all, as of the last look.
    pub total: u64,
    /// The batch size and interval in effect.
    pub batch: u64,
    pub interval_ms: u64,
    pub control: &'a [(String, String)],
    pub admission: &'a [(String, String)],
    /// Revocations in force: (userId, revoked at ms).
    pub revoked: &'a [(String, u64)],
    /// Registrations this instance saw spent: (userId, arrival).
    pub spent: &'a [(String, u64)],
}

/// What a write-back did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub incarnation: String,
    /// This call recorded the loss (another instance may have first).
    pub recorded: bool,
    /// Slots of max-active held for tokens issued before the loss, until
    /// `held_until_ms` (Redis clock; both 0 for none).
    pub held: u64,
    pub held_until_ms: u64,
}

impl Store {
    /// One look at a queue (see `lua/watch.lua`).
    pub async fn watch(
        &self,
        keys: &QueueKeys,
        heartbeat: &HeartbeatConfig,
    ) -> Result<Watched, StoreError> {
        let mut invocation = WATCH.invoke(keys);
        invocation
            .arg(heartbeat.timeout.as_millis() as u64)
            .arg(heartbeat.outage_grace.as_millis() as u64)
            .arg(reseat_window(heartbeat).as_millis() as u64);
        // Its writes are the stamp and the marks of an incident: sent twice,
        // the second finds them made.
        let reply: Vec<Value> = self.run(invocation, Resend::Safe).await?;
        let [now_ms, incarnation, gap, kind, at, length, active, control, admission] =
            <[Value; 9]>::try_from(reply)
                .map_err(|_| StoreError::Failed("watch: a short answer".into()))?;
        let text = |v: Value| String::from_redis_value(v).map_err(failed("watch"));
        let int = |v: Value| i64::from_redis_value(v).map_err(failed("watch"));
        let pairs = |v: Value| {
            let flat = Vec::<String>::from_redis_value(v).map_err(failed("watch"))?;
            Ok::<_, StoreError>(
                flat.chunks_exact(2)
                    .map(|p| (p[0].clone(), p[1].clone()))
                    .collect::<Vec<_>>(),
            )
        };
        let incarnation = text(incarnation)?;
        let kind = text(kind)?;
        Ok(Watched {
            now_ms: count(int(now_ms)?)?,
            incarnation: (!incarnation.is_empty()).then_some(incarnation),
            gap_ms: count(int(gap)?)?,
            incident: if kind.is_empty() {
                None
            } else {
                Some(Incident {
                    kind,
                    at_ms: count(int(at)?)?,
                    length_ms: count(int(length)?)?,
                })
            },
            active: count(int(active)?)?,
            control: pairs(control)?,
            admission: pairs(admission)?,
        })
    }

    /// Writes back what an instance knows of a queue (see `lua/recover.lua`).
    pub async fn recover(
        &self,
        keys: &QueueKeys,
        heartbeat: &HeartbeatConfig,
        recovery: &Recovery<'_>,
    ) -> Result<Recovered, StoreError> {
        let mut invocation = RECOVER.invoke(keys);
        invocation
            .arg(recovery.known.unwrap_or(""))
            .arg(format!("{:032x}", rand::random::<u128>()))
            .arg(if recovery.fresh { "fresh" } else { "lost" })
            .arg(recovery.max_active)
            .arg(recovery.active_ttl_ms.max(1))
            .arg(recovery.active)
            .arg(recovery.looked_at_ms)
            .arg(recovery.total)
            .arg(recovery.batch)
            .arg(recovery.interval_ms.max(1))
            .arg(heartbeat.outage_grace.as_millis() as u64)
            .arg(reseat_window(heartbeat).as_millis() as u64);
        for list in [recovery.control, recovery.admission] {
            invocation.arg(list.len());
            for (field, value) in list {
                invocation.arg(field).arg(value);
            }
        }
        for list in [recovery.revoked, recovery.spent] {
            invocation.arg(list.len());
            for (user, n) in list {
                invocation.arg(user).arg(n);
            }
        }
        let (incarnation, recorded, held, held_until): (String, i64, i64, i64) =
            self.run_write(invocation, &keys.control).await?;
        Ok(Recovered {
            incarnation,
            recorded: recorded == 1,
            held: count(held)?,
            held_until_ms: count(held_until)?,
        })
    }

    /// Seats `user` again at the registration at `arrival`, which a checked
    /// credential names, if Redis lost that place (see `lua/reseat.lua`):
    /// where they stand then, else [`Position::NotQueued`].
    pub async fn reseat(
        &self,
        queue: QueueRef<'_>,
        user: &str,
        arrival: u64,
    ) -> Result<Position, StoreError> {
        let mut invocation = RESEAT.invoke(queue.keys);
        invocation.arg(user).arg(arrival);
        pace_args(&mut invocation, queue);
        // Not waited for by replicas, even with `wait-replicas`: most calls
        // refuse and write nothing, and a seating that a failover loses is
        // made again at the next poll.
        let (code, rank, wait_ms, advice): (i64, i64, i64, i64) =
            self.run(invocation, Resend::Never).await?;
        Ok(match ReseatCode::of(code)? {
            ReseatCode::Seated => Position::Waiting(place(rank, wait_ms, advice)?),
            ReseatCode::Prequeued => Position::Prequeued {
                opens_in_ms: count(rank)?,
                poll_after_ms: count(advice)?,
            },
            ReseatCode::Refused => Position::NotQueued,
        })
    }
}

/// How long after a loss of state a registration it took may be seated
/// again: the time its user needs to come back (the outage grace), poll
/// (the longest advice) and be late (the heartbeat timeout).
fn reseat_window(heartbeat: &HeartbeatConfig) -> std::time::Duration {
    heartbeat.outage_grace + heartbeat.poll_max + heartbeat.timeout
}

fn failed<E: std::fmt::Display>(script: &'static str) -> impl Fn(E) -> StoreError {
    move |e| StoreError::Failed(format!("{script}: {e}"))
}
