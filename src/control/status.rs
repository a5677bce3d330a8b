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
    /// In effect: the live overrides, else the configured values (the
    /// same as `inEffect`, kept for clients of earlier versions).
    admission: Admission,
    /// The admission rate in effect: users per window and per second.
    rate: Rate,
    /// What the config file says.
    configured: Admission,
    /// What admits users now: a live override (`PATCH .../admission`)
    /// where there is one, else `configured`.
    in_effect: Admission,
    /// The values a live override sets (`batchSize`, `intervalMs`,
    /// `maxActive`): a reload's change to them is masked until
    /// `DELETE .../admission`.
    overridden: Vec<&'static str>,
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
    /// The draw's commitment, from the schedule on (src/fairness/).
    #[serde(skip_serializing_if = "Option::is_none")]
    commitment: Option<String>,
    /// Set once the open has started: when, by whom's seed, and how many.
    /// Its seed stays hidden, from operators too, until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    opened_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<String>,
    /// How many of the first bits of the draw's hash order a shuffled
    /// pre-queue (32; an open of an earlier version kept fewer).
    #[serde(skip_serializing_if = "Option::is_none")]
    shuffle_bits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prequeued_at_open: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placed_at: Option<String>,
}

/// The values an operator can override live: the control hash's field,
/// the API's name, and the config file's key.
pub const OVERRIDABLE: [(&str, &str, &str); 3] = [
    ("batch", "batchSize", "batch-size"),
    ("interval", "intervalMs", "interval-ms"),
    ("max_active", "maxActive", "max-active"),
];

impl Admission {
    /// What `queue`'s config file says.
    fn configured(queue: &Queue) -> Admission {
        Admission {
            batch_size: u64::from(queue.config.admission.batch_size),
            interval_ms: queue.config.admission.interval.as_millis() as u64,
            max_active: queue.config.admission.max_active,
        }
    }

    /// The value of an [`OVERRIDABLE`] field (its control hash name).
    fn value(&self, field: &str) -> u64 {
        match field {
            "batch" => self.batch_size,
            "interval" => self.interval_ms,
            _ => self.max_active,
        }
    }
}

/// What a reload from `old` to `new` changed that a live override masks:
/// each as (config key, the value configured now, the value in effect).
pub async fn masked(
    store: &Store,
    old: &Queue,
    new: &Queue,
) -> Result<Vec<(&'static str, u64, u64)>, crate::store::StoreError> {
    let (old, new_values) = (Admission::configured(old), Admission::configured(new));
    let changed: Vec<_> = OVERRIDABLE
        .iter()
        .filter(|(field, _, _)| old.value(field) != new_values.value(field))
        .collect();
    if changed.is_empty() {
        return Ok(Vec::new());
    }
    let read = store.status(&new.keys).await?;
    Ok(changed
        .into_iter()
        .filter_map(|(field, _, key)| {
            let in_effect = read.number(field)?;
            Some((*key, new_values.value(field), in_effect))
        })
        .collect())
}

impl QueueStatus {
    /// The part of the state `action` changes, as the audit line shows it
    /// before and after; `null` when Redis could not be read.
    pub fn audited(&self, action: &str) -> serde_json::Value {
        use serde_json::json;
        if !self.redis_up {
            return serde_json::Value::Null;
        }
        match action {
            "pause" | "resume" => json!({ "paused": self.paused }),
            "close" | "reopen" => json!({
                "closed": self.closed,
                "message": self.closed_message,
            }),
            "admission" => json!({
                "batchSize": self.in_effect.batch_size,
                "intervalMs": self.in_effect.interval_ms,
                "maxActive": self.in_effect.max_active,
                "overridden": self.overridden,
            }),
            "event" | "end_event" => json!({
                "phase": self.phase,
                "event": self.event.as_ref().map(|e| json!({
                    "prequeueFrom": e.prequeue_from,
                    "openAt": e.open_at,
                    "shuffle": e.shuffle,
                })),
            }),
            _ => serde_json::Value::Null,
        }
    }
}

/// The queue's state; with Redis down, what the config says and
/// `redisUp: false`.
pub async fn read(store: &Store, queue: &Queue) -> QueueStatus {
    let configured = Admission::configured(queue);
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
        in_effect: configured,
        overridden: Vec::new(),
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
    let in_effect = |field: &str| number(field).unwrap_or(configured.value(field));
    let admission = Admission {
        batch_size: in_effect("batch"),
        interval_ms: in_effect("interval"),
        max_active: in_effect("max_active"),
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
    status.in_effect = admission;
    status.overridden = OVERRIDABLE
        .iter()
        .filter(|(field, _, _)| number(field).is_some())
        .map(|(_, name, _)| *name)
        .collect();
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
        commitment: read.control.get("commitment").cloned(),
        opened_at: number("opened_at").map(rfc3339),
        seed: read
            .control
            .get("seed")
            .filter(|_| number("opened_at").is_some())
            .cloned(),
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
