//! `GET /admin/v1/queues/<q>`: a queue as the operator sees it.

use serde::Serialize;

use crate::queues::Queue;
use crate::store::Store;
use crate::time::rfc3339;

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    queue: String,
    redis_up: bool,
    /// `open`, `scheduled`, `prequeue` or `placing`; absent while Redis is
    /// down.
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paused: Option<bool>,
    /// Closed by an operator: nobody joins or is admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    closed: Option<bool>,
    /// While closed: the operator's message, and since when.
    #[serde(skip_serializing_if = "Option::is_none")]
    closed_message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    closed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    active: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prequeued: Option<u64>,
    /// In effect: the live overrides, else the configured values.
    admission: Admission,
    /// The admission rate in effect: users per window and per second.
    rate: Rate,
    configured: Admission,
    /// Users admitted per window and per second, as observed.
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_per_window: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    admitted_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<Event>,
    /// The last Redis incident recorded for the queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_incident: Option<LastIncident>,
    /// Slots of max-active held for tokens issued before Redis lost the
    /// queue's state (`POST .../resume` ends the hold).
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<Hold>,
    /// After Redis lost the queue's state, nobody is admitted before this,
    /// while the waiting users come back to be seated again (a resume ends
    /// it).
    #[serde(skip_serializing_if = "Option::is_none")]
    rebuild_until: Option<String>,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct LastIncident {
    /// `outage`, `failover` or `data_loss`.
    kind: String,
    at: String,
    /// How long Redis was out of reach (0 when not known or none).
    out_of_reach_ms: u64,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct Hold {
    slots: u64,
    until: String,
    reason: &'static str,
}

#[derive(Serialize, Debug, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct Rate {
    batch_size: u64,
    interval_ms: u64,
    per_second: f64,
}

impl From<Admission> for Rate {
    fn from(a: Admission) -> Rate {
        Rate {
            batch_size: a.batch_size,
            interval_ms: a.interval_ms,
            per_second: a.batch_size as f64 * 1000.0 / a.interval_ms.max(1) as f64,
        }
    }
}

#[derive(Serialize, Debug, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct Admission {
    batch_size: u64,
    interval_ms: u64,
    max_active: u64,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct Event {
    prequeue_from: Option<String>,
    open_at: String,
    shuffle: bool,
    /// Set once the open has started: when, by whom's seed, and how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    opened_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<String>,
    /// How many of the first bits of `SHA-1(seed ":" userId)` order a
    /// shuffled pre-queue (20 more than its count needs, at most 44).
    #[serde(skip_serializing_if = "Option::is_none")]
    shuffle_bits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prequeued_at_open: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placed_at: Option<String>,
}

/// The queue's state; with Redis down, what the config says and
/// `redisUp: false`.
pub async fn read(store: &Store, queue: &Queue) -> QueueStatus {
    let configured = Admission {
        batch_size: u64::from(queue.admission.batch_size),
        interval_ms: queue.admission.interval.as_millis() as u64,
        max_active: queue.admission.max_active,
    };
    let mut status = QueueStatus {
        queue: queue.name.clone(),
        redis_up: false,
        phase: None,
        paused: None,
        closed: None,
        closed_message: None,
        closed_at: None,
        waiting: None,
        active: None,
        prequeued: None,
        admission: configured,
        rate: configured.into(),
        configured,
        rate_per_window: None,
        rate_per_second: None,
        admitted_total: None,
        event: None,
        last_incident: None,
        hold: None,
        rebuild_until: None,
    };
    let Ok(read) = store.status(&queue.keys).await else {
        return status;
    };
    let number = |key: &str| read.number(key);
    let admission = Admission {
        batch_size: number("batch").unwrap_or(configured.batch_size),
        interval_ms: number("interval").unwrap_or(configured.interval_ms),
        max_active: number("max_active").unwrap_or(configured.max_active),
    };
    status.redis_up = true;
    status.phase = Some(read.phase());
    status.paused = Some(read.paused());
    status.closed = Some(read.closed().is_some());
    status.closed_message = read.closed().map(String::from);
    status.closed_at = read.closed().and(number("closed_at")).map(rfc3339);
    status.waiting = Some(read.waiting);
    status.active = Some(read.active);
    status.prequeued = Some(read.prequeued);
    status.admission = admission;
    status.rate = admission.into();
    status.rate_per_window = read.rate_per_window;
    status.rate_per_second = read
        .rate_per_window
        .map(|r| r * 1000.0 / admission.interval_ms.max(1) as f64);
    status.admitted_total = Some(read.admitted_total);
    status.event = number("open_at").map(|open_at| Event {
        prequeue_from: number("prequeue_from").map(rfc3339),
        open_at: rfc3339(open_at),
        shuffle: read.control.get("shuffle").is_some_and(|v| v == "1"),
        opened_at: number("opened_at").map(rfc3339),
        seed: read.control.get("seed").cloned(),
        shuffle_bits: number("shuffle_bits").filter(|&bits| bits > 0),
        prequeued_at_open: number("prequeued"),
        placed: number("placed_count"),
        placed_at: number("placed_at").map(rfc3339),
    });
    status.last_incident = read.incident.as_ref().map(|i| LastIncident {
        kind: i.kind.clone(),
        at: rfc3339(i.at_ms),
        out_of_reach_ms: i.length_ms,
    });
    status.hold = match (number("held"), number("held_until")) {
        (Some(slots), Some(until)) if slots > 0 && until > read.now_ms => Some(Hold {
            slots,
            until: rfc3339(until),
            reason: "tokens issued before redis lost the queue's state",
        }),
        _ => None,
    };
    status.rebuild_until = number("rebuild_until")
        .filter(|&until| until > read.now_ms)
        .map(rfc3339);
    status
}
