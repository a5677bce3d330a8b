//! The metrics: one struct of typed collectors on a private
//! registry, created once and shared.
//!
//! Queue depth gauges are set by a background sampler, not per scrape, so a
//! scrape never touches Redis and many scrapers cost nothing extra.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

#[cfg(target_os = "linux")]
mod process;
mod upstream;

use crate::config::Config;
use crate::edge::jwt::Reject;

/// A family of series, whose one series a set of label values names.
trait Labelled {
    /// Creates the series of these values, if it is not there yet.
    fn touch(&self, values: &[&str]);
    /// Drops the series of these values, if it is there.
    fn forget(&self, values: &[&str]);
}

impl<P: prometheus::core::MetricVecBuilder> Labelled for prometheus::core::MetricVec<P> {
    fn touch(&self, values: &[&str]) {
        self.with_label_values(values);
    }
    fn forget(&self, values: &[&str]) {
        let _ = self.remove_label_values(values);
    }
}

pub struct Metrics {
    registry: Registry,
    /// Per upstream and address: requests, their time, health.
    pub upstreams: upstream::UpstreamMetrics,
    pub queue_waiting: IntGaugeVec,
    pub queue_active: IntGaugeVec,
    /// Users admitted per second, as the gate observes it (from Redis).
    pub admission_rate: GaugeVec,
    pub admitted: IntCounterVec,
    /// Users admitted after someone behind them in arrival (or draw) order:
    /// should stay 0 (src/fairness/).
    pub admitted_out_of_order: IntCounterVec,
    /// Arrival to admission of each user admitted (by the deciding
    /// instance: summed over instances, each admission once).
    pub admitted_wait: HistogramVec,
    /// How far off the wait estimate a sample of users was last given,
    /// `early` or `late` (see `queue_api::estimates`).
    pub wait_estimate_error: HistogramVec,
    pub cleanup_removed: IntCounterVec,
    pub registrations: IntCounterVec,
    pub tokens_issued: IntCounterVec,
    pub jwt_rejected: IntCounterVec,
    pub redis_errors: IntCounterVec,
    pub http_requests: IntCounterVec,
    pub http_duration: HistogramVec,
    /// Open client connections on the proxy listeners (plain and TLS).
    pub connections: IntGauge,
    /// Open connections on the admin listener.
    pub admin_connections: IntGauge,
    /// 1 while Redis answers the probe, 0 while it does not.
    pub redis_up: IntGauge,
    /// SIGHUP reloads, by result (`ok`, `refused`).
    pub reloads: IntCounterVec,
    /// 1 while an operator has paused a queue's admission (sampled).
    pub queue_paused: IntGaugeVec,
    /// 1 while an operator has closed a queue (sampled).
    pub queue_closed: IntGaugeVec,
    /// How many samples of the waiting set this instance holds, from which
    /// ranks far back are derived (0: every rank is exact).
    pub rank_samples: IntGaugeVec,
    /// 1 for the phase a queue's event is in, 0 for the others (sampled).
    pub event_phase: IntGaugeVec,
    /// Queue API requests refused by a per-client limit, by route (see
    /// [`LIMITED_ROUTES`]).
    pub rate_limited: IntCounterVec,
    /// Admin API changes, by queue and action.
    pub admin_changes: IntCounterVec,
    /// Revocations this instance made, by source (`admin`, `release`).
    pub revocations: IntCounterVec,
    /// Early releases by the backend (`X-Waitgate-Release`).
    pub releases: IntCounterVec,
    /// Revoked users this instance refuses tokens of.
    pub revoked_users: IntGauge,
    /// Redis incidents this instance saw, by kind (see `durability`).
    pub redis_incidents: IntCounterVec,
    /// Slots of max-active held for tokens issued before Redis lost a
    /// queue's state (0: none).
    pub admission_held: IntGaugeVec,
    /// Places seated again after a loss of state.
    pub reseated: IntCounterVec,
    /// Rank polls answered, by how (`store::PollPath`).
    pub rank_polls: IntCounterVec,
    /// How old the samples were that a poll's rank far back could be
    /// derived from, by how the poll was answered.
    pub rank_sample_age: HistogramVec,
    /// Users in each coalesced Redis call, by the call.
    pub batch_users: HistogramVec,
    /// Proof-of-work challenges issued.
    pub challenges: IntCounterVec,
    /// Registers refused for their proof of work, by reason (see
    /// [`PROOF_REFUSALS`]).
    pub proof_refused: IntCounterVec,
    /// Registers refused for their invite, by reason (see
    /// [`INVITE_REFUSALS`]).
    pub invite_refused: IntCounterVec,
}

/// The `reason` label of `waitgate_invite_refused_total`: `required` (none
/// sent), and each of `entry::invite::InviteRefused`.
pub const INVITE_REFUSALS: [&str; 6] = [
    "required",
    "invalid",
    "expired",
    "other_queue",
    "other_user",
    "spent",
];

/// The `reason` label of `waitgate_proof_refused_total`: `required` (none
/// sent), and each of `entry::challenge::Refused`.
pub const PROOF_REFUSALS: [&str; 7] = [
    "required",
    "malformed",
    "forged",
    "expired",
    "stale_difficulty",
    "wrong",
    "reused",
];

/// Label values of `waitgate_redis_incidents_total{kind}`.
pub const INCIDENT_KINDS: [&str; 3] = ["outage", "failover", "data_loss"];

/// Label values of `waitgate_event_phase{phase}`.
pub const EVENT_PHASES: [&str; 4] = ["scheduled", "prequeue", "placing", "open"];

/// Label values of `waitgate_admin_changes_total{action}`.
pub const ADMIN_ACTIONS: [&str; 8] = [
    "pause",
    "resume",
    "close",
    "reopen",
    "admission",
    "event",
    "end_event",
    "revoke",
];

/// Label values of `waitgate_revocations_total{source}`.
pub const REVOKED_BY_ADMIN: &str = "admin";
pub const REVOKED_BY_RELEASE: &str = "release";

/// Label values of `waitgate_cleanup_removed_total{reason}`.
pub const CLEANUP_HEARTBEAT: &str = "heartbeat_timeout";
pub const CLEANUP_EXPIRED: &str = "active_expired";
/// A heartbeat with no place behind it (see `lua/sweep.lua`).
pub const CLEANUP_STRAY: &str = "stray_heartbeat";

/// Label values of `waitgate_registrations_total{result}`.
pub const REGISTERED_NEW: &str = "new";
pub const REGISTERED_AGAIN: &str = "already_waiting";
pub const REGISTERED_ACTIVE: &str = "already_active";
pub const REGISTERED_NOT_OPEN: &str = "not_open";
pub const REGISTERED_CLOSED: &str = "closed";
const REGISTERED: [&str; 5] = [
    REGISTERED_NEW,
    REGISTERED_AGAIN,
    REGISTERED_ACTIVE,
    REGISTERED_NOT_OPEN,
    REGISTERED_CLOSED,
];

/// The `route` label of a request a per-client limit refused: `register`,
/// `rank`, `token`, or `page` for a waiting-room page load (counted
/// against the register limit).
pub const LIMITED_ROUTES: [&str; 4] = ["register", "rank", "token", "page"];

/// The `direction` label of `waitgate_wait_estimate_error_seconds`:
/// admitted before the estimate, or after it.
pub const ESTIMATE_DIRECTIONS: [&str; 2] = ["early", "late"];

/// Latency buckets: the queue API answers in well under a millisecond when
/// Redis is local; the tail up to the command timeout and beyond matters.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Waits in a queue: seconds to hours.
const WAIT_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
];

/// The age of rank samples: they are taken every few seconds.
const SAMPLE_AGE_BUCKETS: &[f64] = &[0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0];

/// Users in one coalesced call: one to the scripts' 500.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 500.0];

/// The `call` label of `waitgate_redis_batch_users`.
pub const BATCH_CALLS: [&str; 3] = ["register", "rank", "token"];

/// The `path` label of the rank poll metrics.
pub const POLL_PATHS: [&str; 7] = [
    "instance", "marked", "derived", "near", "walked", "again", "other",
];

/// How far off an estimate was: a second to half an hour.
const ESTIMATE_ERROR_BUCKETS: &[f64] =
    &[1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0];

fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> HistogramVec {
    let h = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .expect("static metric definition");
    registered(registry, h)
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("static metric definition");
    registered(registry, c)
}

/// Registers a collector built from static definitions; each is registered
/// once per registry.
fn registered<C: prometheus::core::Collector + Clone + 'static>(registry: &Registry, c: C) -> C {
    registry
        .register(Box::new(c.clone()))
        .expect("each metric is registered once");
    c
}

impl Metrics {
    /// Builds the collectors and pre-creates every known label set, so that a
    /// scrape shows zeros rather than missing series.
    pub fn new(config: &Config) -> Metrics {
        let registry = Registry::new();
        let int_gauge = |name: &str, help: &str| {
            registered(
                &registry,
                IntGaugeVec::new(Opts::new(name, help), &["queue"]).expect("static metric"),
            )
        };
        let queue_waiting = int_gauge(
            "waitgate_queue_waiting",
            "Users waiting, sampled from Redis.",
        );
        let queue_active = int_gauge("waitgate_queue_active", "Active users, sampled from Redis.");
        let admission_rate = registered(
            &registry,
            GaugeVec::new(
                Opts::new(
                    "waitgate_admission_rate",
                    "Users admitted per second as observed by the global gate.",
                ),
                &["queue"],
            )
            .expect("static metric"),
        );
        let http_duration = histogram(
            &registry,
            "waitgate_http_request_duration_seconds",
            "Time from request header to the end of the reply.",
            BUCKETS,
            &["route"],
        );

        let connections = registered(
            &registry,
            IntGauge::new(
                "waitgate_connections",
                "Open client connections on the proxy listener.",
            )
            .expect("static metric"),
        );
        let admin_connections = registered(
            &registry,
            IntGauge::new(
                "waitgate_admin_connections",
                "Open connections on the admin listener.",
            )
            .expect("static metric"),
        );

        let redis_up = registered(
            &registry,
            IntGauge::new(
                "waitgate_redis_up",
                "1 while Redis answers this instance's probe (every second), else 0.",
            )
            .expect("static metric"),
        );
        let build_info = registered(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "waitgate_build_info",
                    "Always 1; the labels say which build runs.",
                ),
                &["version"],
            )
            .expect("static metric"),
        );
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        // CPU seconds, resident memory, open and maximum file descriptors,
        // start time: `process_*`, as every Prometheus exporter names them.
        // Registering it twice (tests build several servers in one process)
        // is refused harmlessly by the private registry.
        // CPU seconds are ours, with their fraction (see `process`).
        #[cfg(target_os = "linux")]
        let _ = registry.register(Box::new(process::ProcessMetrics::for_self()));

        let m = Metrics {
            upstreams: upstream::UpstreamMetrics::new(&registry),
            admitted: counter(
                &registry,
                "waitgate_admitted_total",
                "Users moved from waiting to active.",
                &["queue"],
            ),
            admitted_out_of_order: counter(
                &registry,
                "waitgate_admitted_out_of_order_total",
                "Users admitted after someone behind them in arrival or draw order (by the deciding instance); should stay 0.",
                &["queue"],
            ),
            rate_limited: counter(
                &registry,
                "waitgate_rate_limited_total",
                "Queue API requests refused by a per-client limit (429), by route.",
                &["route"],
            ),
            admitted_wait: histogram(
                &registry,
                "waitgate_admitted_wait_seconds",
                "Each admitted user's wait from arrival to admission (counted by the instance that admitted).",
                WAIT_BUCKETS,
                &["queue"],
            ),
            wait_estimate_error: histogram(
                &registry,
                "waitgate_wait_estimate_error_seconds",
                "For a sample of users, how far the admission came from the last wait estimate this instance gave (direction early or late).",
                ESTIMATE_ERROR_BUCKETS,
                &["queue", "direction"],
            ),
            cleanup_removed: counter(
                &registry,
                "waitgate_cleanup_removed_total",
                "Users removed by the cleanup, by reason.",
                &["queue", "reason"],
            ),
            challenges: counter(
                &registry,
                "waitgate_challenges_issued_total",
                "Proof-of-work challenges issued.",
                &["queue"],
            ),
            proof_refused: counter(
                &registry,
                "waitgate_proof_refused_total",
                "Registers refused for their proof of work (403), by reason.",
                &["queue", "reason"],
            ),
            invite_refused: counter(
                &registry,
                "waitgate_invite_refused_total",
                "Registers refused for their invite (403), by reason.",
                &["queue", "reason"],
            ),
            registrations: counter(
                &registry,
                "waitgate_registrations_total",
                "Register calls answered, by result.",
                &["queue", "result"],
            ),
            tokens_issued: counter(
                &registry,
                "waitgate_tokens_issued_total",
                "ACTIVE_USER tokens issued.",
                &["queue"],
            ),
            jwt_rejected: counter(
                &registry,
                "waitgate_jwt_rejected_total",
                "Requests to protected routes refused at the edge, by reason.",
                &["reason"],
            ),
            redis_errors: counter(
                &registry,
                "waitgate_redis_errors_total",
                "Redis calls that failed or timed out, by operation.",
                &["op"],
            ),
            http_requests: counter(
                &registry,
                "waitgate_http_requests_total",
                "Requests answered, by route and status.",
                &["route", "status"],
            ),
            reloads: counter(
                &registry,
                "waitgate_config_reloads_total",
                "Config reloads (SIGHUP), by result: ok, or refused (the running config stays).",
                &["result"],
            ),
            admin_changes: counter(
                &registry,
                "waitgate_admin_changes_total",
                "Changes made through the admin API by this instance, by queue and action.",
                &["queue", "action"],
            ),
            revocations: counter(
                &registry,
                "waitgate_revocations_total",
                "Users whose active state this instance ended and whose tokens it revoked, by source.",
                &["queue", "source"],
            ),
            releases: counter(
                &registry,
                "waitgate_releases_total",
                "Upstream responses that released their user's slot (X-Waitgate-Release).",
                &["queue"],
            ),
            queue_paused: int_gauge(
                "waitgate_queue_paused",
                "1 while admission to the queue is paused by an operator (sampled from Redis).",
            ),
            queue_closed: int_gauge(
                "waitgate_queue_closed",
                "1 while the queue is closed by an operator: nobody joins or is admitted (sampled from Redis).",
            ),
            rank_samples: int_gauge(
                "waitgate_rank_samples",
                "Samples of the waiting set this instance derives ranks far back from (0: every rank is exact).",
            ),
            event_phase: registered(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        "waitgate_event_phase",
                        "1 for the phase the queue's event is in (scheduled, prequeue, placing, open), sampled from Redis.",
                    ),
                    &["queue", "phase"],
                )
                .expect("static metric"),
            ),
            revoked_users: registered(
                &registry,
                IntGauge::new(
                    "waitgate_revoked_users",
                    "Users this instance refuses tokens of (revoked within a token's lifetime).",
                )
                .expect("static metric"),
            ),
            redis_incidents: counter(
                &registry,
                "waitgate_redis_incidents_total",
                "Redis incidents this instance saw: outage (out of reach longer than 3 s), failover (a replica promoted), data_loss (Redis answered without a queue's state).",
                &["kind"],
            ),
            admission_held: int_gauge(
                "waitgate_admission_held_slots",
                "Slots of max-active held for tokens issued before Redis lost the queue's state (0: none).",
            ),
            reseated: counter(
                &registry,
                "waitgate_reseated_total",
                "Waiting users seated again at their credential's arrival after Redis lost the queue's state.",
                &["queue"],
            ),
            rank_polls: counter(
                &registry,
                "waitgate_rank_polls_total",
                "Rank polls answered, by path: instance (decided far back by the instance, no script), derived (by rank.lua from the samples), near (walked near the head, or in a queue too short to sample), walked (far back, walked: departures left the samples too coarse), again (asked a second time, exactly), other (not waiting).",
                &["queue", "path"],
            ),
            rank_sample_age: histogram(
                &registry,
                "waitgate_rank_poll_sample_age_seconds",
                "For polls made while this instance held samples of the queue: their age, by path.",
                SAMPLE_AGE_BUCKETS,
                &["queue", "path"],
            ),
            batch_users: histogram(
                &registry,
                "waitgate_redis_batch_users",
                "Users in each coalesced Redis call of the queue API, by call (register, rank, token).",
                BATCH_BUCKETS,
                &["call"],
            ),
            registry,
            queue_waiting,
            queue_active,
            admission_rate,
            http_duration,
            connections,
            admin_connections,
            redis_up,
        };
        m.add_queues(config.queues.keys().map(String::as_str));
        for op in REDIS_OPS {
            m.redis_errors.with_label_values(&[op]);
        }
        for kind in INCIDENT_KINDS {
            m.redis_incidents.with_label_values(&[kind]);
        }
        for result in ["ok", "refused"] {
            m.reloads.with_label_values(&[result]);
        }
        for call in BATCH_CALLS {
            m.batch_users.with_label_values(&[call]);
        }
        for route in LIMITED_ROUTES {
            m.rate_limited.with_label_values(&[route]);
        }
        for reject in Reject::ALL {
            m.jwt_rejected.with_label_values(&[reject.reason()]);
        }
        m
    }

    /// Creates every label set of these queues, so that a scrape shows
    /// zeros rather than missing series (and an alert on a new queue can
    /// see its counters from the start).
    pub fn add_queues<'a>(&self, queues: impl Iterator<Item = &'a str>) {
        for q in queues {
            self.each_series_of(q, |family, values| family.touch(values));
        }
    }

    /// Drops every series of these queues (removed by a reload), so that no
    /// gauge goes on reporting, and no alert firing on, a queue that is gone.
    pub fn remove_queues<'a>(&self, queues: impl Iterator<Item = &'a str>) {
        for q in queues {
            self.each_series_of(q, |family, values| family.forget(values));
        }
    }

    /// Calls `f` with each series a queue has, by its family and label
    /// values: the one list that both creates and drops them.
    fn each_series_of(&self, q: &str, mut f: impl FnMut(&dyn Labelled, &[&str])) {
        let by_queue: [&dyn Labelled; 14] = [
            &self.queue_waiting,
            &self.queue_active,
            &self.admission_rate,
            &self.admitted,
            &self.admitted_out_of_order,
            &self.admitted_wait,
            &self.tokens_issued,
            &self.queue_paused,
            &self.queue_closed,
            &self.rank_samples,
            &self.releases,
            &self.admission_held,
            &self.reseated,
            &self.challenges,
        ];
        let by_queue_and: [(&dyn Labelled, &[&str]); 10] = [
            (&self.wait_estimate_error, &ESTIMATE_DIRECTIONS),
            (&self.event_phase, &EVENT_PHASES),
            (&self.admin_changes, &ADMIN_ACTIONS),
            (&self.revocations, &[REVOKED_BY_ADMIN, REVOKED_BY_RELEASE]),
            (
                &self.cleanup_removed,
                &[CLEANUP_HEARTBEAT, CLEANUP_EXPIRED, CLEANUP_STRAY],
            ),
            (&self.registrations, &REGISTERED),
            (&self.proof_refused, &PROOF_REFUSALS),
            (&self.invite_refused, &INVITE_REFUSALS),
            (&self.rank_polls, &POLL_PATHS),
            (&self.rank_sample_age, &POLL_PATHS),
        ];
        for family in by_queue {
            f(family, &[q]);
        }
        for (family, second) in by_queue_and {
            for value in second {
                f(family, &[q, value]);
            }
        }
    }

    /// The registry in Prometheus text format.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        // Encoding our own well-formed families into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }

    /// Counts one answered request.
    pub fn observe_request(&self, route: &str, status: u16, seconds: f64) {
        // Three digits on the stack: this runs on every request.
        let digits = [
            b'0' + (status / 100 % 10) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
        ];
        let status = std::str::from_utf8(&digits).unwrap_or("000");
        self.http_requests.with_label_values(&[route, status]).inc();
        self.http_duration
            .with_label_values(&[route])
            .observe(seconds);
    }

    /// Counts one failed Redis call.
    /// One admission call's `users` of `queue`: each one's wait from
    /// arrival (ms), and how many were admitted out of order.
    pub fn admitted(&self, queue: &str, users: u64, waited_ms: &[u64], out_of_order: u64) {
        self.admitted.with_label_values(&[queue]).inc_by(users);
        let waits = self.admitted_wait.with_label_values(&[queue]);
        for &waited in waited_ms {
            waits.observe(waited as f64 / 1000.0);
        }
        if out_of_order > 0 {
            self.admitted_out_of_order
                .with_label_values(&[queue])
                .inc_by(out_of_order);
        }
    }

    pub fn redis_error(&self, op: &str) {
        self.redis_errors.with_label_values(&[op]).inc();
    }
}

/// The `op` label values of `waitgate_redis_errors_total`.
pub const REDIS_OPS: [&str; 13] = [
    "register",
    "rank",
    "dropout",
    "token",
    "admit",
    "cleanup",
    "sample",
    "ping",
    "control",
    "revoke",
    "revoked_sync",
    "watch",
    "reseat",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The metrics of a configuration with these queues.
    fn metrics_of(queues: &str) -> Metrics {
        let yaml = format!(
            "redis: {{url: 'redis://x:1'}}\nqueues: {queues}\nupstreams: {{}}\nroutes: []\n"
        );
        Metrics::new(&Config::from_yaml(&yaml).unwrap())
    }

    #[test]
    fn every_documented_metric_is_exported() {
        let m = metrics_of("{baseball: {}}");
        m.observe_request("register", 200, 0.001);
        let text = String::from_utf8(m.encode()).unwrap();
        for name in [
            "waitgate_queue_waiting{queue=\"baseball\"}",
            "waitgate_queue_active{queue=\"baseball\"}",
            "waitgate_admitted_total{queue=\"baseball\"}",
            "waitgate_cleanup_removed_total{queue=\"baseball\",reason=\"heartbeat_timeout\"}",
            "waitgate_registrations_total{queue=\"baseball\",result=\"new\"}",
            "waitgate_tokens_issued_total{queue=\"baseball\"}",
            "waitgate_jwt_rejected_total{reason=\"expired\"}",
            "waitgate_http_requests_total{route=\"register\",status=\"200\"}",
            "waitgate_http_request_duration_seconds_bucket{route=\"register\"",
            "waitgate_redis_up 0",
            "waitgate_build_info{version=\"",
            "process_open_fds ",
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
        ] {
            assert!(text.contains(name), "missing {name}");
        }
    }

    #[test]
    fn a_queue_removed_by_a_reload_leaves_no_series() {
        let m = metrics_of("{kept: {}, gone: {}}");
        let text = String::from_utf8(m.encode()).unwrap();
        let gone = text.lines().filter(|l| l.contains("\"gone\"")).count();
        let kept = text.lines().filter(|l| l.contains("\"kept\"")).count();
        assert!(gone > 30 && gone == kept, "{gone} and {kept} series");
        m.remove_queues(["gone"].into_iter());
        let text = String::from_utf8(m.encode()).unwrap();
        let left: Vec<&str> = text.lines().filter(|l| l.contains("\"gone\"")).collect();
        assert!(left.is_empty(), "{left:#?}");
        assert_eq!(
            text.lines().filter(|l| l.contains("\"kept\"")).count(),
            kept
        );
    }

    #[test]
    fn the_poll_path_labels_are_the_stores() {
        let labels = crate::store::PollPath::ALL.map(|p| p.label());
        assert_eq!(labels, POLL_PATHS);
    }
}
