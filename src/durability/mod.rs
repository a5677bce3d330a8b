//! Keeping the queue's promise through Redis incidents.
//!
//! A waiting user is promised their place. Three kinds of incident threaten
//! it, and each instance does its part, with no leader:
//!
//! - **Outage**: Redis out of reach (down, hung, restarting, failing over),
//!   or no instance running. Polls fail, so heartbeats would run out. Every
//!   instance stamps each queue as seen once a second (`lua/watch.lua`);
//!   a gap of more than 3 s between stamps is recorded as an outage window,
//!   which, with the grace clients need to come back
//!   (`heartbeat.outage-grace-ms`), does not count against any heartbeat
//!   (`outage_cutoff` in `lua/lib.lua`).
//! - **Failover**: a replica promoted. Noticed by its replication id
//!   (`lua/watch.lua`); the outage it took is an outage as above.
//! - **Data loss**: Redis answering without a queue's state (a restart
//!   without persistence, a failover to a replica that was behind, a
//!   flush). Each queue's state carries an id, its incarnation; register,
//!   admit and reseat refuse to run on a queue without one
//!   ([`StoreError::Lost`]), and admit also on a queue with fewer operator
//!   changes or admissions than the instance has seen. Every instance
//!   remembers, from its look each second, what it would need to put back
//!   ([`Memory`]); the first to find the state lost writes it back
//!   (`lua/recover.lua`) before anybody is admitted or joins, the others
//!   merge what they knew (the operator's settings among it: a pause, a
//!   closure and its message). Tokens issued before the loss still count
//!   against `max-active`: slots are held for them for `active-ttl-ms`
//!   (a resume ends the hold). Waiting users come back with their
//!   credential and are seated again at its arrival (`lua/reseat.lua`).
//!
//! Each instance logs each incident it sees once (a data loss at ERROR,
//! the others at WARN) and counts it in `waitgate_redis_incidents_total`.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;

use crate::edge::revoked::Revoked;
use crate::metrics::Metrics;
use crate::queues::Queue;
use crate::store::{GateRecord, Incident, Recovery, Store, StoreError, Watched};

/// Registrations this instance saw spent (dropouts and seatings it made),
/// per queue, to write back after a loss: the oldest are forgotten past
/// this many (about 100 bytes each).
const SPENT_MARKS_KEPT: usize = 100_000;

/// What an instance knows of a queue's state, from its last look.
struct Memory {
    /// The id of the state it knows; `None` before its first look.
    incarnation: Option<String>,
    control: Vec<(String, String)>,
    admission: Vec<(String, String)>,
    /// Active users at the last look, and when (Redis clock, ms).
    active: u64,
    looked_at_ms: u64,
    /// The operator's changes and the admissions it has seen: Redis having
    /// fewer lost state.
    version: u64,
    total: u64,
    spent: LruCache<String, u64>,
    /// The time of the last incident this instance logged (`None` before
    /// its first look, which logs none it finds recorded already).
    incident_at_ms: Option<u64>,
    /// When the last look ended: a call refused as lost before then needs
    /// no look of its own.
    looked: Option<std::time::Instant>,
}

impl Memory {
    fn new() -> Memory {
        Memory {
            incarnation: None,
            control: Vec::new(),
            admission: Vec::new(),
            active: 0,
            looked_at_ms: 0,
            version: 0,
            total: 0,
            spent: LruCache::new(NonZeroUsize::new(SPENT_MARKS_KEPT).expect("not zero")),
            incident_at_ms: None,
            looked: None,
        }
    }

    fn learn(&mut self, w: &Watched) {
        self.incarnation = w.incarnation.clone();
        self.control = w.control.clone();
        self.admission = w.admission.clone();
        self.active = w.active;
        self.looked_at_ms = w.now_ms;
        self.version = w.control_number("version").unwrap_or(0);
        self.total = w.admission_number("total").unwrap_or(0);
    }

    fn number(pairs: &[(String, String)], field: &str) -> Option<u64> {
        pairs
            .iter()
            .find(|(f, _)| f == field)
            .and_then(|(_, v)| v.parse().ok())
    }
}

/// The part of every instance that keeps the queue's state through Redis
/// incidents: the queue API and the background tasks share one.
pub struct Durability {
    store: Arc<Store>,
    revoked: Arc<Revoked>,
    metrics: Arc<Metrics>,
    /// Per queue; one look or write-back at a time.
    memories: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Memory>>>>,
    /// Per queue, what the last look saw, for readers that must not wait
    /// behind a look in progress (the fairness answer, receipts).
    last_looks: Mutex<HashMap<String, Arc<LastLook>>>,
}

/// What one look saw of a queue's control HASH and gate record.
#[derive(Debug, Default)]
pub struct LastLook {
    /// Redis's time of the look (ms).
    pub now_ms: u64,
    pub control: Vec<(String, String)>,
    pub admission: Vec<(String, String)>,
}

impl Durability {
    pub fn new(store: Arc<Store>, revoked: Arc<Revoked>, metrics: Arc<Metrics>) -> Durability {
        Durability {
            store,
            revoked,
            metrics,
            memories: Mutex::new(HashMap::new()),
            last_looks: Mutex::new(HashMap::new()),
        }
    }

    /// What the last look at `queue` saw; `None` before the first.
    pub fn last_look(&self, queue: &str) -> Option<Arc<LastLook>> {
        self.last_looks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(queue)
            .cloned()
    }

    fn memory(&self, queue: &str) -> Arc<tokio::sync::Mutex<Memory>> {
        self.memories
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(queue.to_string())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Memory::new())))
            .clone()
    }

    /// What this instance has seen of a queue's state: the operator's
    /// changes and the users admitted in all (for `Store::admit`).
    pub async fn seen(&self, queue: &Queue) -> (u64, u64) {
        let memory = self.memory(&queue.name);
        let m = memory.lock().await;
        (m.version, m.total)
    }

    /// Remembers the gate's record as this instance's admission left it:
    /// the latest there is, should Redis lose it before the next look.
    pub async fn admitted(&self, queue: &Queue, record: GateRecord, next_ms: u64) {
        let memory = self.memory(&queue.name);
        let mut m = memory.lock().await;
        m.total = m.total.max(record.total);
        for (field, value) in [
            ("total", record.total),
            ("frontier", record.frontier),
            ("frontier_prequeue", record.frontier_prequeue),
            // No window is decided again before it.
            ("next", next_ms),
        ] {
            match m.admission.iter_mut().find(|(f, _)| f == field) {
                Some((_, v)) if v.parse::<u64>().is_ok_and(|known| known >= value) => {}
                Some((_, v)) => *v = value.to_string(),
                None => m.admission.push((field.to_string(), value.to_string())),
            }
        }
    }

    /// Remembers a registration this instance saw spent (a dropout, a
    /// seating again), to write back should Redis lose it.
    pub async fn spent(&self, queue: &Queue, user: &str, arrival: u64) {
        let memory = self.memory(&queue.name);
        let mut m = memory.lock().await;
        let entry = m.spent.get_or_insert_mut(user.to_string(), || arrival);
        *entry = (*entry).max(arrival);
    }

    /// One look at a queue: stamps it as seen, notices and logs incidents,
    /// writes back what this instance knows when Redis lost the state, and
    /// remembers what it saw. The queue API and the admission loop call it
    /// too when a script refuses as lost, and call again.
    pub async fn look(&self, queue: &Queue) -> Result<(), StoreError> {
        self.look_after(queue, None).await
    }

    /// A look, unless one ended after `asked` (when a call that Redis
    /// refused as lost was made): a crowd of refused calls waits for one
    /// look rather than making one each.
    pub async fn look_after(
        &self,
        queue: &Queue,
        asked: Option<std::time::Instant>,
    ) -> Result<(), StoreError> {
        let memory = self.memory(&queue.name);
        let mut m = memory.lock().await;
        if let (Some(asked), Some(looked)) = (asked, m.looked) {
            if looked > asked {
                return Ok(());
            }
        }
        let w = self
            .store
            .watch(&queue.keys, &queue.config.heartbeat)
            .await?;
        let lost = match (&w.incarnation, &m.incarnation) {
            (None, None) => Some(Why::Fresh),
            (None, Some(_)) => Some(Why::Gone),
            // Another instance found the state lost and wrote back what it
            // knew: this one adds what it knows.
            (Some(now), Some(known)) if now != known => Some(Why::Replaced),
            (Some(_), Some(_))
                if w.control_number("version").unwrap_or(0) < m.version
                    || w.admission_number("total").unwrap_or(0) < m.total =>
            {
                Some(Why::Behind)
            }
            _ => None,
        };
        let w = match lost {
            None => w,
            Some(why) => {
                self.recover(queue, &mut m, &w, why).await?;
                // What is there now, as any later look would see it.
                self.store
                    .watch(&queue.keys, &queue.config.heartbeat)
                    .await?
            }
        };
        self.note_incident(queue, &mut m, &w);
        m.learn(&w);
        self.last_looks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                queue.name.clone(),
                Arc::new(LastLook {
                    now_ms: w.now_ms,
                    control: w.control.clone(),
                    admission: w.admission.clone(),
                }),
            );
        m.looked = Some(std::time::Instant::now());
        let held = match (w.control_number("held"), w.control_number("held_until")) {
            (Some(held), Some(until)) if until > w.now_ms => held,
            _ => 0,
        };
        self.metrics
            .admission_held
            .with_label_values(&[&queue.name])
            .set(held as i64);
        Ok(())
    }

    /// Writes back what `m` knows of the queue (`lua/recover.lua`).
    async fn recover(
        &self,
        queue: &Queue,
        m: &mut Memory,
        w: &Watched,
        why: Why,
    ) -> Result<(), StoreError> {
        let setting =
            |field: &str, configured: u64| Memory::number(&m.control, field).unwrap_or(configured);
        let revoked = self.revoked.entries(&queue.name);
        let spent: Vec<(String, u64)> = m.spent.iter().map(|(u, a)| (u.clone(), *a)).collect();
        let recovery = Recovery {
            known: m.incarnation.as_deref(),
            fresh: matches!(why, Why::Fresh),
            max_active: setting("max_active", queue.config.admission.max_active),
            active_ttl_ms: queue.config.admission.active_ttl.as_millis() as u64,
            active: m.active,
            looked_at_ms: m.looked_at_ms,
            total: m.total,
            batch: setting("batch", u64::from(queue.config.admission.batch_size)),
            interval_ms: setting(
                "interval",
                queue.config.admission.interval.as_millis() as u64,
            ),
            control: &m.control,
            admission: &m.admission,
            revoked: &revoked,
            spent: &spent,
        };
        let done = self
            .store
            .recover(&queue.keys, &queue.config.heartbeat, &recovery)
            .await?;
        if matches!(why, Why::Fresh) {
            if w.incarnation.is_none() {
                tracing::info!(queue = %queue.name, incarnation = %done.incarnation, "queue state started in redis");
            }
            return Ok(());
        }
        let paused = Memory::number(&m.control, "paused") == Some(1);
        let closed = Memory::number(&m.control, "closed") == Some(1);
        let held_until = (done.held > 0).then(|| crate::time::rfc3339(done.held_until_ms));
        if done.recorded {
            tracing::error!(
                queue = %queue.name,
                cause = why.cause(),
                paused,
                closed,
                revocations = revoked.len(),
                spent = spent.len(),
                held_slots = done.held,
                held_until,
                "redis lost the queue's state: wrote back what this instance knew (the operator's settings, the event, the gate's record, revocations in force) before anybody is admitted; waiting users are seated again when they come back with their credential"
            );
        } else {
            tracing::error!(
                queue = %queue.name,
                cause = why.cause(),
                held_slots = done.held,
                held_until,
                "redis lost the queue's state, and another instance wrote it back first: added what this instance knew"
            );
        }
        if done.held > 0 {
            tracing::warn!(
                queue = %queue.name,
                held_slots = done.held,
                held_until,
                "admission holds slots of max-active for tokens issued before the loss (POST .../resume ends the hold)"
            );
        }
        // Logged here; the look that follows sees it recorded.
        self.metrics
            .redis_incidents
            .with_label_values(&["data_loss"])
            .inc();
        m.incident_at_ms = Some(u64::MAX);
        Ok(())
    }

    /// Logs and counts an incident recorded since this instance's last look.
    fn note_incident(&self, queue: &Queue, m: &mut Memory, w: &Watched) {
        let Some(incident) = &w.incident else {
            if m.incident_at_ms.is_none() {
                m.incident_at_ms = Some(0);
            }
            return;
        };
        let new = match m.incident_at_ms {
            // Logged by the write-back just made.
            Some(u64::MAX) => false,
            Some(seen) => incident.at_ms > seen,
            // The first look: only an outage this look itself found.
            None => w.gap_ms > 0,
        };
        m.incident_at_ms = Some(incident.at_ms);
        if !new {
            return;
        }
        let Incident {
            kind, length_ms, ..
        } = incident;
        match kind.as_str() {
            "data_loss" => tracing::error!(
                queue = %queue.name,
                "redis lost the queue's state; another instance wrote back what it knew"
            ),
            _ => tracing::warn!(
                queue = %queue.name,
                kind = %kind,
                out_of_reach_ms = length_ms,
                "redis incident: the time redis was out of reach, and the grace after it, do not count against any waiting user's heartbeat"
            ),
        }
        if let Some(kind) = crate::metrics::INCIDENT_KINDS
            .iter()
            .find(|k| **k == kind.as_str())
        {
            self.metrics
                .redis_incidents
                .with_label_values(&[kind])
                .inc();
        }
    }
}

/// Why a look writes back.
#[derive(Debug, Clone, Copy)]
enum Why {
    /// The queue has no state and this instance knew none: a first start.
    Fresh,
    /// The state this instance knew is gone.
    Gone,
    /// Another instance wrote back a lost state first.
    Replaced,
    /// Redis has fewer operator changes or admissions than this instance
    /// saw: a failover to a replica that was behind.
    Behind,
}

impl Why {
    fn cause(self) -> &'static str {
        match self {
            Why::Fresh => "first start",
            Why::Gone => "the state is gone (a restart without persistence, or a flush)",
            Why::Replaced => "the state was replaced",
            Why::Behind => "redis has less than this instance saw (a replica that was behind)",
        }
    }
}
