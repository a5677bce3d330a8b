//! Background work against a real Redis: heartbeat cleanup, the global
//! admission gate (FIFO, several instances, max-active), wait estimates,
//! metrics and readiness. Intervals are short so each test
//! takes seconds.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::*;
use redis::Commands;

const WAITING: &str = "queue:{baseball}:waiting";
/// The heartbeats of earlier versions (see `heartbeats` in lua/lib.lua).
const LEGACY: &str = "queue:{baseball}:heartbeat";
const DUE: &str = "queue:{baseball}:due";
const CREDENTIAL: &str = "queue:{baseball}:credential";
const ACTIVE: &str = "queue:{baseball}:active";

fn start(redis: &Redis, queue_yaml: &str) -> Waitgate {
    let ports = Ports::new();
    let cfg = config_with(&redis.url(), &ports, free_port(), queue_yaml);
    Waitgate::start(&cfg, &ports)
}

fn credential_of(r: &Response) -> String {
    r.json()["queueCredential"].as_str().unwrap().to_string()
}

fn members(c: &mut redis::Connection, key: &str) -> Vec<String> {
    c.zrange(key, 0, -1).unwrap()
}

/// Parses Prometheus text format strictly enough to reject a malformed
/// scrape: `# HELP`/`# TYPE` lines, and samples `name{labels} value`.
/// Returns every sample keyed by `name{labels}` as written.
fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    let mut typed = HashSet::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let kind = parts.next().unwrap();
            let name = parts.next().expect("comment names a metric");
            assert!(kind == "HELP" || kind == "TYPE", "bad comment: {line}");
            if kind == "TYPE" {
                let t = parts.next().expect("TYPE has a type");
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                    "{line}"
                );
                typed.insert(name.to_string());
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name in {line}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                for pair in labels[1..labels.len() - 1].split("\",") {
                    let (k, v) = pair.split_once("=\"").expect("label is k=\"v\"");
                    assert!(!k.is_empty(), "{line}");
                    assert!(!v.contains('\n'), "{line}");
                }
            }
        }
        let family = name
            .trim_end_matches("_bucket")
            .trim_end_matches("_sum")
            .trim_end_matches("_count");
        assert!(
            typed.contains(family) || typed.contains(name),
            "sample before its TYPE: {line}"
        );
        let v: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        samples.insert(series.to_string(), v);
    }
    samples
}

fn scrape(wg: &Waitgate) -> BTreeMap<String, f64> {
    let r = get(wg.admin, "/metrics").unwrap();
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/plain")));
    parse_prometheus(&String::from_utf8(r.body).unwrap())
}

#[test]
fn cleanup_removes_a_silent_user_and_keeps_a_polling_one() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball:\n  heartbeat: {timeout-ms: 600, cleanup-interval-ms: 100, cleanup-batch-size: 10, poll-min-ms: 100, poll-max-ms: 200}\n  admission: {max-active: 1}",
    );
    let start = Instant::now();
    let advice = register(wg.addr, "silent").json()["pollAfterMs"]
        .as_u64()
        .unwrap();
    assert!((100..=200).contains(&advice), "{advice}");
    register(wg.addr, "polling");
    let mut c = redis.conn();
    let mut removed_after = None;
    // The silent user, who only registered, goes once its advice and the
    // timeout have passed, within a cleanup interval after that; the
    // polling one, following its advice, never.
    let due = Duration::from_millis(advice + 600);
    let watch = (due + Duration::from_millis(800)).saturating_sub(start.elapsed());
    repeat_for(watch, || {
        let r = rank(wg.addr, "polling");
        assert_eq!(r.status, 200, "the polling user must stay");
        if removed_after.is_none()
            && c.zscore::<_, _, Option<f64>>(WAITING, "silent")
                .unwrap()
                .is_none()
        {
            removed_after = Some(start.elapsed());
        }
        let next = r.json()["pollAfterMs"].as_u64().unwrap();
        std::thread::sleep(Duration::from_millis(next.min(100)));
    });
    let removed_after = removed_after.expect("the silent user is removed");
    println!(
        "silent user removed {removed_after:?} after registering (advice {advice} ms, timeout 600 ms)"
    );
    // (less the few ms between the registration's Redis time and `start`)
    assert!(
        removed_after + Duration::from_millis(20) >= due,
        "{removed_after:?} before {due:?}"
    );
    // Within a heartbeat bucket (poll-min-ms wide) and a cleanup interval,
    // and some scheduling.
    assert!(
        removed_after <= due + Duration::from_millis(100 + 100 + 150),
        "{removed_after:?}"
    );
    assert!(heartbeat_of(&mut c, "baseball", "silent").is_none());
    let cred: bool = c.hexists(CREDENTIAL, "silent").unwrap();
    assert!(!cred);
    assert_eq!(rank(wg.addr, "silent").status, 404);
    assert_eq!(members(&mut c, WAITING), ["polling"]);

    // Counters are live (only the queue gauges are sampled).
    let m = scrape(&wg);
    assert_eq!(
        m[r#"waitgate_cleanup_removed_total{queue="baseball",reason="heartbeat_timeout"}"#],
        1.0
    );
}

#[test]
fn a_poll_just_before_a_cleanup_always_keeps_the_user() {
    // The cleanup runs every 10 ms and the timeout is 300 ms; the user polls
    // every 250 ms, so many cleanups run right after a poll.
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball:\n  heartbeat: {timeout-ms: 300, cleanup-interval-ms: 10}\n  admission: {max-active: 1}",
    );
    register(wg.addr, "steady");
    let start = Instant::now();
    repeat_for(Duration::from_secs(3), || {
        let r = rank(wg.addr, "steady");
        assert_eq!(r.status, 200, "removed after {:?}", start.elapsed());
        std::thread::sleep(Duration::from_millis(250));
    });
}

#[test]
fn expired_active_entries_are_removed_with_their_credentials() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball:\n  heartbeat: {cleanup-interval-ms: 50}\n  admission: {max-active: 1}",
    );
    let cred = credential_of(&register(wg.addr, "done"));
    let mut c = redis.conn();
    admit_by_hand(&mut c, "done", redis.now_ms() + 300);
    assert!(c.hexists::<_, _, bool>(CREDENTIAL, "done").unwrap());
    assert_eq!(rank(wg.addr, "done").json()["status"], "ACTIVE");
    // Expired at 300 ms; cleaned up within a cleanup interval or so.
    wait_until(
        "the expired entry to go",
        Duration::from_millis(600),
        || {
            let still: Option<f64> = c.zscore(ACTIVE, "done").unwrap();
            still.is_none()
        },
    );
    let has: bool = c.hexists(CREDENTIAL, "done").unwrap();
    assert!(!has);
    // The holder (expiry in the year 3000) is untouched.
    let holder: Option<f64> = c.zscore(ACTIVE, HOLDER).unwrap();
    assert!(holder.is_some());
    assert_eq!(dropout(wg.addr, "done", &cred).status, 404);
    let m = scrape(&wg);
    assert_eq!(
        m[r#"waitgate_cleanup_removed_total{queue="baseball",reason="active_expired"}"#],
        1.0
    );
}

#[test]
fn admission_is_strict_fifo_and_never_loses_or_repeats_a_user() {
    let redis = Redis::start_free();
    let wg = start(
        &redis,
        "baseball:\n  admission: {interval-ms: 200, batch-size: 3}",
    );
    let users: Vec<String> = (0..12).map(|i| format!("fifo{i:02}")).collect();
    for u in &users {
        assert_eq!(register(wg.addr, u).status, 200);
    }
    let mut c = redis.conn();
    let mut k = 0;
    let all_admitted = eventually(Duration::from_secs(5), || {
        let (waiting, active) = waiting_and_active(&mut c);
        // Every user is in exactly one of the two sets...
        let mut all: Vec<&String> = waiting.iter().chain(active.iter()).collect();
        all.sort();
        all.dedup();
        assert_eq!(
            all.len(),
            users.len(),
            "waiting {waiting:?} active {active:?}"
        );
        assert_eq!(waiting.len() + active.len(), users.len());
        // ...the admitted ones are always a prefix of the arrival order...
        k = active.len();
        let admitted: HashSet<&String> = active.iter().collect();
        let prefix: HashSet<&String> = users[..k].iter().collect();
        assert_eq!(admitted, prefix, "admitted out of order");
        // ...and the waiting ones keep their order.
        assert_eq!(waiting, users[k..]);
        k == users.len()
    });
    assert!(all_admitted, "admission stalled at {k}");
    // The admitted users' heartbeats are gone; they are told they are active.
    let hb: u64 = c.hlen(DUE).unwrap();
    assert_eq!(hb, 0);
    assert_eq!(rank(wg.addr, "fifo00").json()["status"], "ACTIVE");
}

#[test]
fn three_instances_admit_at_most_one_batch_per_window_in_total() {
    const INTERVAL_MS: u64 = 400;
    const BATCH: u64 = 5;
    const TTL_MS: u64 = 600_000;
    let redis = Redis::start_free();
    let instances = admitting_instances(&redis, 3, INTERVAL_MS, BATCH, TTL_MS);
    let users = 60;
    register_across(&redis, &instances, "multi", users);
    let mut c = redis.conn();
    // Until everyone is admitted: 12 windows.
    let took = wait_until_all_admitted(&redis, users, Duration::from_secs(10));
    let counts = admitted_per_window(&redis, TTL_MS, INTERVAL_MS);
    println!("admitted per window: {counts:?} ({users} users in {took:?})");
    assert_one_batch_per_window(&counts, BATCH);
    assert!(counts.len() <= users / BATCH as usize + 1, "{counts:?}");
    let active: u64 = c.zcard(ACTIVE).unwrap();
    assert_eq!(active as usize, users);

    // Each instance's counter, and together they account for every admission.
    let counts: Vec<f64> = instances
        .iter()
        .map(|wg| scrape(wg)[r#"waitgate_admitted_total{queue="baseball"}"#])
        .collect();
    println!("admitted by instance: {counts:?}, total {active}");
    assert_eq!(counts.iter().sum::<f64>() as u64, active);
    let gate_total: u64 = c.hget("queue:{baseball}:admission", "total").unwrap();
    assert_eq!(gate_total, active);
}

#[test]
fn max_active_caps_the_active_set() {
    let redis = Redis::start_free();
    let wg = start(
        &redis,
        "baseball:\n  admission: {interval-ms: 100, batch-size: 10, max-active: 4}",
    );
    let mut creds = BTreeMap::new();
    for i in 0..20 {
        let user = format!("cap{i:02}");
        creds.insert(user.clone(), credential_of(&register(wg.addr, &user)));
    }
    std::thread::sleep(Duration::from_millis(700));
    let mut c = redis.conn();
    let active = members(&mut c, ACTIVE);
    assert_eq!(active, ["cap00", "cap01", "cap02", "cap03"]);
    let waiting: u64 = c.zcard(WAITING).unwrap();
    assert_eq!(waiting, 16);
    // Only admitted users have a credential entry, and theirs works.
    let mut admitted: Vec<String> = c.hkeys(CREDENTIAL).unwrap();
    admitted.sort();
    assert_eq!(admitted, active);
    let r = post_json(
        wg.addr,
        "/api/v1/queue/active/token",
        &format!(
            r#"{{"userId":"cap00","queueCredential":"{}"}}"#,
            creds["cap00"]
        ),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");

    // An active user who leaves frees one slot, and exactly one is admitted.
    assert_eq!(dropout(wg.addr, "cap01", &creds["cap01"]).status, 204);
    std::thread::sleep(Duration::from_millis(400));
    let active = members(&mut c, ACTIVE);
    assert_eq!(active.len(), 4, "{active:?}");
    assert!(active.contains(&"cap04".to_string()), "{active:?}");
    let waiting: u64 = c.zcard(WAITING).unwrap();
    assert_eq!(waiting, 15);
}

#[test]
fn metrics_match_redis_within_one_sampling_period() {
    let redis = Redis::start();
    let wg = start(&redis, "baseball: {admission: {max-active: 1}}");
    for i in 0..7 {
        register(wg.addr, &format!("m{i}"));
    }
    let mut c = redis.conn();
    // One sampling period is 1 s.
    std::thread::sleep(Duration::from_millis(1300));
    let m = scrape(&wg);
    let waiting: u64 = c.zcard(WAITING).unwrap();
    let active: u64 = c.zcard(ACTIVE).unwrap();
    assert_eq!(
        m[r#"waitgate_queue_waiting{queue="baseball"}"#],
        waiting as f64
    );
    assert_eq!(
        m[r#"waitgate_queue_active{queue="baseball"}"#],
        active as f64
    );
    assert_eq!(waiting, 7);
    assert_eq!(
        m[r#"waitgate_registrations_total{queue="baseball",result="new"}"#],
        7.0
    );
}

#[test]
fn a_scrape_is_prometheus_text_with_every_spec_metric() {
    let redis = Redis::start();
    let wg = start(&redis, "baseball: {admission: {max-active: 1}}");
    register(wg.addr, "s1");
    register(wg.addr, "s1");
    rank(wg.addr, "s1");
    get(wg.addr, "/api/v1/follow-up/x").unwrap(); // 401: no token
    let series = [
        r#"waitgate_queue_waiting{queue="baseball"}"#,
        r#"waitgate_queue_active{queue="baseball"}"#,
        r#"waitgate_admitted_total{queue="baseball"}"#,
        r#"waitgate_cleanup_removed_total{queue="baseball",reason="heartbeat_timeout"}"#,
        r#"waitgate_cleanup_removed_total{queue="baseball",reason="active_expired"}"#,
        r#"waitgate_registrations_total{queue="baseball",result="already_waiting"}"#,
        r#"waitgate_tokens_issued_total{queue="baseball"}"#,
        r#"waitgate_jwt_rejected_total{reason="signature"}"#,
        r#"waitgate_redis_errors_total{op="register"}"#,
    ];
    let mut m = scrape(&wg);
    eventually(Duration::from_millis(500), || {
        m = scrape(&wg);
        series.iter().all(|s| m.contains_key(*s))
    });
    for series in series {
        assert!(m.contains_key(series), "missing {series}");
    }
    assert_eq!(
        m[r#"waitgate_registrations_total{queue="baseball",result="new"}"#],
        1.0
    );
    assert_eq!(
        m[r#"waitgate_registrations_total{queue="baseball",result="already_waiting"}"#],
        1.0
    );
    assert_eq!(m[r#"waitgate_jwt_rejected_total{reason="missing"}"#], 1.0);
    assert_eq!(
        m[r#"waitgate_http_requests_total{route="register",status="200"}"#],
        2.0
    );
    assert_eq!(
        m[r#"waitgate_http_requests_total{route="rank",status="200"}"#],
        1.0
    );
    assert_eq!(
        m[r#"waitgate_http_requests_total{route="/api/v1/follow-up",status="401"}"#],
        1.0
    );
    assert_eq!(
        m[r#"waitgate_http_request_duration_seconds_count{route="register"}"#],
        2.0
    );
}

#[test]
fn redis_errors_are_counted_by_operation_and_redis_health_flips_but_not_readiness() {
    let mut redis = Redis::start();
    let wg = start(&redis, "baseball: {admission: {max-active: 1}}");
    assert_eq!(get(wg.admin, "/readyz").unwrap().status, 200);
    assert_eq!(get(wg.admin, "/healthz/redis").unwrap().status, 200);
    redis.kill();
    assert_eq!(register(wg.addr, "x").status, 503);
    assert_eq!(rank(wg.addr, "x").status, 503);
    assert_eq!(get(wg.admin, "/healthz/redis").unwrap().status, 503);
    assert_eq!(get(wg.admin, "/readyz").unwrap().status, 200);
    let m = scrape(&wg);
    assert!(m[r#"waitgate_redis_errors_total{op="register"}"#] >= 1.0);
    assert!(m[r#"waitgate_redis_errors_total{op="rank"}"#] >= 1.0);
    redis.restart();
    wait_until("/healthz/redis back", Duration::from_secs(5), || {
        get(wg.admin, "/healthz/redis").unwrap().status == 200
    });
}

/// Registers a queue of users, notes each one's estimate, and times its
/// actual admission. Prints the error figures the README reports.
#[test]
fn wait_estimates_match_the_observed_admission() {
    const USERS: usize = 30;
    let redis = Redis::start_free();
    let wg = start(
        &redis,
        "baseball:\n  admission: {interval-ms: 1000, batch-size: 5}",
    );
    let mut pending: Vec<(String, Instant, f64)> = Vec::new();
    for i in 0..USERS {
        let user = format!("est{i:02}");
        let r = register(wg.addr, &user);
        let estimate = r.json()["estimatedWaitSeconds"].as_f64().unwrap();
        pending.push((user, Instant::now(), estimate));
    }
    let mut errors = Vec::new();
    let all_admitted = eventually(Duration::from_secs(12), || {
        pending.retain(|(user, registered, estimate)| {
            let r = rank(wg.addr, user);
            if r.json()["status"] == "ACTIVE" {
                let actual = registered.elapsed().as_secs_f64();
                errors.push(estimate - actual);
                false
            } else {
                true
            }
        });
        pending.is_empty()
    });
    assert!(all_admitted, "{} never admitted", pending.len());
    let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    let mean = abs.iter().sum::<f64>() / abs.len() as f64;
    let max = abs.iter().cloned().fold(0.0, f64::max);
    let bias = errors.iter().sum::<f64>() / errors.len() as f64;
    println!(
        "estimate error over {USERS} users (interval 1 s, batch 5): mean |error| {mean:.2} s, max |error| {max:.2} s, mean signed error {bias:+.2} s"
    );
    // Whole seconds are reported, so 0.5 s is rounding alone; the rest is
    // polling (every 20 ms) and admission timing.
    assert!(max <= 1.0, "max error {max:.2} s: {errors:?}");
}

/// A heartbeat far in the future, as a long advice during a pause writes
/// it, is pulled in by the next poll with a short advice: a user who then
/// stops polling goes within that poll's bound, not the earlier one's.
#[test]
fn a_poll_with_a_shorter_advice_pulls_a_far_heartbeat_in() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball:\n  heartbeat: {timeout-ms: 600, cleanup-interval-ms: 50, poll-min-ms: 100, poll-max-ms: 200}\n  admission: {max-active: 1}",
    );
    register(wg.addr, "head");
    register(wg.addr, "leaver");
    let mut c = redis.conn();
    let _: () = c.hset(DUE, "leaver", redis.now_ms() + 60_000).unwrap();
    let r = rank(wg.addr, "leaver");
    assert_eq!(r.status, 200);
    let polled = Instant::now();
    let advice = r.json()["pollAfterMs"].as_u64().unwrap();
    // The advice and the timeout, then a heartbeat bucket (poll-min-ms), a
    // cleanup interval and some scheduling.
    let bound = Duration::from_millis(advice + 600 + 100 + 50 + 200);
    let removed = eventually(bound.saturating_sub(polled.elapsed()), || {
        c.zscore::<_, _, Option<f64>>(WAITING, "leaver")
            .unwrap()
            .is_none()
    });
    assert!(
        removed,
        "still there after {:?} (advice {advice} ms)",
        polled.elapsed()
    );
    println!("removed {:?} after its last poll", polled.elapsed());
    assert!(polled.elapsed() >= Duration::from_millis(advice + 600 - 20));
}

/// More silent users than one cleanup call looks at all go in one pass,
/// and a pre-queue registration is never taken for a silent waiting user's.
#[test]
fn cleanup_takes_every_silent_user_in_one_pass_and_leaves_the_prequeue_alone() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball:\n  heartbeat: {timeout-ms: 600, cleanup-interval-ms: 300, cleanup-batch-size: 100, poll-min-ms: 100, poll-max-ms: 200}\n  admission: {max-active: 1}",
    );
    register(wg.addr, "poller");
    let mut c = redis.conn();
    let silent: Vec<String> = (0..450).map(|i| format!("s{i}")).collect();
    let mut p = redis::pipe();
    for (i, user) in silent.iter().enumerate() {
        p.zadd(WAITING, user, 1_000 + i).ignore();
    }
    // Pre-queued, and with a heartbeat its last waiting left behind.
    p.zadd("queue:{baseball}:prequeue", "early", 5).ignore();
    let () = p.query(&mut c).unwrap();
    let mut with_early = silent.clone();
    with_early.push("early".into());
    make_silent(&mut c, "baseball", &with_early);

    // One pass (every 300 ms), 100 a call: all 450 within two intervals.
    let mut left = 0;
    let all_gone = eventually(Duration::from_millis(800), || {
        left = c.zcount(WAITING, 1_000, 2_000).unwrap();
        left == 0 || {
            assert_eq!(rank(wg.addr, "poller").status, 200);
            false
        }
    });
    assert!(all_gone, "{left} left");
    let prequeued: Option<f64> = c.zscore("queue:{baseball}:prequeue", "early").unwrap();
    assert!(prequeued.is_some(), "the pre-queue registration was taken");
    assert!(heartbeat_of(&mut c, "baseball", "early").is_none());

    let waiting: Vec<String> = c.zrange(WAITING, 0, -1).unwrap();
    assert_eq!(waiting, ["poller"]);
}

/// During a rolling upgrade from a version that kept heartbeats in a
/// sorted set: this version's next poll of such a user moves the heartbeat
/// into the hash, and keeps the user from then on; a user only the earlier
/// version's entry speaks for is kept until that entry and the timeout pass.
#[test]
fn a_heartbeat_of_an_earlier_version_moves_to_the_hash_at_the_next_poll() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball:\n  heartbeat: {timeout-ms: 600, cleanup-interval-ms: 50, poll-min-ms: 100, poll-max-ms: 200}\n  admission: {max-active: 1}",
    );
    for user in ["head", "mover", "stayer"] {
        register(wg.addr, user);
    }
    let mut c = redis.conn();
    let _: () = c.hdel(DUE, &["mover", "stayer"]).unwrap();
    let now = redis.now_ms();
    let _: () = c.zadd(LEGACY, "mover", now).unwrap();
    let _: () = c.zadd(LEGACY, "stayer", now + 3_000).unwrap();
    let written = Instant::now();

    assert_eq!(rank(wg.addr, "mover").status, 200);
    let legacy: Option<f64> = c.zscore(LEGACY, "mover").unwrap();
    let due = heartbeat_of(&mut c, "baseball", "mover");
    assert!(legacy.is_none() && due.is_some(), "{legacy:?} {due:?}");
    // Polled on time, the mover stays well past its old entry's timeout.
    for _ in 0..15 {
        let r = rank(wg.addr, "mover");
        assert_eq!(r.status, 200, "{}", r.text());
        std::thread::sleep(Duration::from_millis(100));
    }
    // (The head, silent, is gone by now.)
    let waiting: Vec<String> = c.zrange(WAITING, 0, -1).unwrap();
    assert_eq!(waiting, ["mover", "stayer"]);

    let bound = Duration::from_millis(3_000 + 600 + 50 + 400);
    wait_until(
        "the stayer to go",
        bound.saturating_sub(written.elapsed()),
        || {
            c.zscore::<_, _, Option<f64>>(WAITING, "stayer")
                .unwrap()
                .is_none()
        },
    );
    let gone = written.elapsed();
    assert!(gone >= Duration::from_millis(3_000 + 600 - 20), "{gone:?}");
}

/// A heartbeat written as the time of the last poll, as by an instance of
/// an earlier version during a rolling upgrade (or by hand), keeps its user
/// for the timeout, and then the user goes.
#[test]
fn a_heartbeat_that_is_the_time_of_the_last_poll_keeps_its_user_for_the_timeout() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball:\n  heartbeat: {timeout-ms: 1500, cleanup-interval-ms: 50}\n  admission: {max-active: 1}",
    );
    register(wg.addr, "head");
    register(wg.addr, "older");
    let mut c = redis.conn();
    // Only the earlier version's heartbeat: its registration was there.
    let _: () = c.hdel(DUE, "older").unwrap();
    let _: () = c.zadd(LEGACY, "older", redis.now_ms()).unwrap();
    let written = Instant::now();
    let gone = poll_for(Duration::from_secs(4), || {
        let there: Option<f64> = c.zscore(WAITING, "older").unwrap();
        there.is_none().then(|| written.elapsed())
    });
    let gone = gone.expect("removed once the timeout passed");
    println!("a last-poll heartbeat kept its user {gone:?} (timeout 1.5 s)");
    assert!(
        gone >= Duration::from_millis(1_450),
        "removed after {gone:?}"
    );
    assert!(gone <= Duration::from_millis(1_500 + 50 + 300), "{gone:?}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 6, ..Default::default() })]

    /// Whatever the pace, a user who polls within each answer's advice is
    /// never removed, and one who stops is removed within its advice, the
    /// timeout and a cleanup interval.
    #[test]
    fn a_user_who_polls_within_the_advice_is_never_removed(
        paces in proptest::collection::vec(0.05f64..1.0, 8..20),
        stop_after in 2usize..8,
    ) {
        let redis = Redis::start();
        let wg = start(
            &redis,
            "baseball:\n  heartbeat: {timeout-ms: 150, cleanup-interval-ms: 20, poll-min-ms: 20, poll-max-ms: 80}\n  admission: {max-active: 1}",
        );
        let mut c = redis.conn();
        let mut steady = register(wg.addr, "steady").json()["pollAfterMs"].as_u64().unwrap();
        let mut quitter = register(wg.addr, "quitter").json()["pollAfterMs"].as_u64().unwrap();
        let mut quit_at = None;
        for (i, pace) in paces.iter().enumerate() {
            // Each waits a share of its own last advice, then polls.
            std::thread::sleep(Duration::from_millis((steady as f64 * pace) as u64));
            let r = rank(wg.addr, "steady");
            proptest::prop_assert_eq!(r.status, 200, "the steady user was removed");
            steady = r.json()["pollAfterMs"].as_u64().unwrap();
            if i < stop_after {
                let r = rank(wg.addr, "quitter");
                proptest::prop_assert_eq!(r.status, 200);
                quitter = r.json()["pollAfterMs"].as_u64().unwrap();
                quit_at = Some(Instant::now());
            }
        }
        // The quitter's last poll promised advice + timeout, and it goes
        // then, within a heartbeat bucket (poll-min-ms) and a cleanup
        // interval (and some scheduling).
        let bound = Duration::from_millis(quitter + 150 + 20 + 20 + 100);
        let quit_at = quit_at.unwrap();
        let removed = eventually(bound.saturating_sub(quit_at.elapsed()), || {
            c.zscore::<_, _, Option<f64>>(WAITING, "quitter").unwrap().is_none()
        });
        proptest::prop_assert!(removed, "still there after {:?}", quit_at.elapsed());
        // (less the few ms between the poll's Redis time and its answer)
        proptest::prop_assert!(
            quit_at.elapsed() >= Duration::from_millis(quitter + 150 - 10),
            "removed {:?} after its last poll, before its advice and the timeout",
            quit_at.elapsed()
        );
    }
}

/// `lua/sweep.lua` as waitgate loads it.
const SWEEP: &str = concat!(
    include_str!("../lua/lib.lua"),
    include_str!("../lua/sweep.lua")
);

/// `n` users `s0`.. waiting, in that order, each gone silent (a heartbeat
/// long past, a candidate of one bucket long past).
fn waiting_silent(c: &mut redis::Connection, n: usize) -> Vec<String> {
    let silent: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
    let mut p = redis::pipe();
    for (i, user) in silent.iter().enumerate() {
        p.zadd(WAITING, user, 1_000 + i).ignore();
    }
    let () = p.query(c).unwrap();
    make_silent(c, "baseball", &silent);
    silent
}

/// Loads `lua/sweep.lua` ahead of waitgate, so that no call of it is sent
/// twice (once refused as unknown, then again): its SHA1.
fn load_sweep(c: &mut redis::Connection) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SWEEP)
        .query(c)
        .unwrap()
}

/// The bucket and length (ARGV[4] and ARGV[5], after the script's 11 keys
/// and 3 settings) of each call of the sweep `sha` among MONITOR's `lines`.
fn sweep_steps(lines: &[String], sha: &str) -> Vec<(String, String)> {
    lines
        .iter()
        .filter(|l| l.contains(&format!("\"EVALSHA\" \"{sha}\"")))
        .map(|l| {
            let args: Vec<&str> = l.split("\" \"").collect();
            let arg = |i: usize| args.get(i).unwrap_or(&"?").to_string();
            (arg(17), arg(18))
        })
        .collect()
}

/// Waits while `busy` holds, failing with `what` after 10 s.
fn wait_while(what: &str, mut busy: impl FnMut() -> bool) {
    wait_until(what, Duration::from_secs(10), || !busy());
}

/// `lua/sweep.lua`, as an instance calls it after reading a bucket.
fn sweep_script(
    c: &mut redis::Connection,
    timeout_ms: u64,
    read: (&str, u64, u64, &[&str]),
) -> redis::Value {
    let (bucket, length, taken, stale) = read;
    sweep_call(c, timeout_ms, (bucket, &length.to_string(), taken, stale)).unwrap()
}

/// `lua/sweep.lua` with its arguments as given: the bucket, its length as
/// read ("" for the script to read the candidates), how many were (or are
/// to be) read, the stale.
fn sweep_call(
    c: &mut redis::Connection,
    timeout_ms: u64,
    read: (&str, &str, u64, &[&str]),
) -> redis::RedisResult<redis::Value> {
    let (bucket, length, taken, stale) = read;
    redis::Script::new(SWEEP)
        .key(WAITING)
        .key(LEGACY)
        .key(CREDENTIAL)
        .key(ACTIVE)
        .key("queue:{baseball}:prequeue")
        .key("queue:{baseball}:admission")
        .key(DUE)
        .key("queue:{baseball}:dues")
        .key("queue:{baseball}:numbering")
        .key("queue:{baseball}:marks")
        .key("queue:{baseball}:arrivals")
        .arg(500)
        .arg(timeout_ms)
        .arg(10_000)
        .arg(bucket)
        .arg(length)
        .arg(taken)
        .arg(stale)
        .invoke(c)
}

/// After a step that removed most of what it looked at, the instance names
/// the bucket alone and the script reads, checks and drops up to the
/// number it is given: the silent go (a user filed twice once), one who
/// polled since stays, and the rest of the bucket waits for the next step.
#[test]
fn a_sweep_that_reads_the_bucket_itself_takes_only_the_silent() {
    let redis = Redis::start();
    let mut c = redis.conn();
    let dues = "queue:{baseball}:dues";
    let now = redis.now_ms();
    let mut p = redis::pipe();
    for (i, user) in ["a", "b", "c", "d", "e", "f"].iter().enumerate() {
        p.zadd(WAITING, *user, 100 + i).ignore();
    }
    // a and b silent (a filed twice), c polled since, d left already (no
    // heartbeat), e silent but past the five read, f after it.
    for user in ["a", "b", "a", "c", "d", "e", "f"] {
        p.rpush(format!("{dues}:1000"), user).ignore();
    }
    for user in ["a", "b", "e", "f"] {
        p.hset(DUE, user, "5:100").ignore();
    }
    p.hset(DUE, "c", format!("{}:102", now + 60_000)).ignore();
    p.zadd(dues, 1000, 1000).ignore();
    // A pre-queue of its own makes the removal count what it was given,
    // not what ZREM removed: a user filed twice must be given once.
    p.zadd("queue:{baseball}:prequeue", "z", 1).ignore();
    let () = p.query(&mut c).unwrap();

    let out = sweep_call(&mut c, 1000, ("1000", "", 5, &[])).unwrap();
    let redis::Value::Array(out) = out else {
        panic!("{out:?}")
    };
    assert_eq!(out[0], redis::Value::Int(2), "{out:?}");
    assert_eq!(
        out[5],
        redis::Value::Int(5),
        "candidates looked at: {out:?}"
    );
    let waiting: Vec<String> = c.zrange(WAITING, 0, -1).unwrap();
    assert_eq!(waiting, ["c", "d", "e", "f"]);
    let removed: u64 = c.hget("queue:{baseball}:admission", "removed").unwrap();
    assert_eq!(removed, 2);
    let left: Vec<String> = c.lrange(format!("{dues}:1000"), 0, -1).unwrap();
    assert_eq!(left, ["e", "f"]);
    assert_eq!(out[2], redis::Value::BulkString(b"1000".to_vec()));

    // The next reads the rest, and the bucket goes with its last candidate.
    let out = sweep_call(&mut c, 1000, ("1000", "", 5, &[])).unwrap();
    let redis::Value::Array(out) = out else {
        panic!("{out:?}")
    };
    assert_eq!(out[0], redis::Value::Int(2), "{out:?}");
    assert_eq!(out[5], redis::Value::Int(2), "{out:?}");
    let waiting: Vec<String> = c.zrange(WAITING, 0, -1).unwrap();
    assert_eq!(waiting, ["c", "d"]);
    let exists: bool = c.exists(format!("{dues}:1000")).unwrap();
    assert!(!exists);
    let indexed: Option<f64> = c.zscore(dues, 1000).unwrap();
    assert_eq!(indexed, None);
    assert_eq!(out[2], redis::Value::BulkString(Vec::new()));

    // Users named beside a bucket the script is to read, or no bucket,
    // are refused, and change nothing.
    let () = c.rpush(format!("{dues}:1000"), "c").unwrap();
    for bad in [
        ("1000", "", 5, &["c"][..]),
        ("", "", 5, &[][..]),
        ("1000", "", 10_001, &[][..]),
    ] {
        let err = sweep_call(&mut c, 1000, bad).unwrap_err();
        assert!(err.to_string().contains("bad arguments"), "{err}");
    }
    let left: Vec<String> = c.lrange(format!("{dues}:1000"), 0, -1).unwrap();
    assert_eq!(left, ["c"]);
}

/// Cleanup's look is the instance's, in plain commands, and the script only
/// takes what it checks itself: a user proposed as stale who polled since
/// stays; the candidates read are dropped only if nobody moved the bucket
/// on since it was read (so two instances reading the same candidates drop
/// them once), and an instance that stops between its read and its call
/// leaves them for the next.
#[test]
fn the_sweep_takes_only_what_it_checks_and_drops_each_read_once() {
    let redis = Redis::start();
    let mut c = redis.conn();
    let dues = "queue:{baseball}:dues";
    let now = redis.now_ms();
    let mut p = redis::pipe();
    for (i, user) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        p.zadd(WAITING, *user, 100 + i).ignore();
        p.rpush(format!("{dues}:1000"), *user).ignore();
    }
    // a, b, c silent; d polled since; e left already.
    for user in ["a", "b", "c"] {
        p.hset(DUE, user, "5:100").ignore();
    }
    p.hset(DUE, "d", format!("{}:103", now + 60_000)).ignore();
    p.zadd(dues, 1000, 1000).ignore();
    let () = p.query(&mut c).unwrap();

    // An instance read the first three (of five) and found a, b stale; it
    // also proposes d, which the script finds alive.
    let out = sweep_script(&mut c, 1000, ("1000", 5, 3, &["a", "b", "d"]));
    let redis::Value::Array(out) = out else {
        panic!("{out:?}")
    };
    assert_eq!(out[0], redis::Value::Int(2), "{out:?}");
    let waiting: Vec<String> = c.zrange(WAITING, 0, -1).unwrap();
    assert_eq!(waiting, ["c", "d", "e"]);
    // The next bucket is the same one, with the two not read yet.
    assert_eq!(out[2], redis::Value::BulkString(b"1000".to_vec()));
    assert_eq!(out[3], redis::Value::Int(2));
    let left: Vec<String> = c.lrange(format!("{dues}:1000"), 0, -1).unwrap();
    assert_eq!(left, ["d", "e"]);

    // A second instance that had read the same three (length 5) finds the
    // bucket moved on: it drops nothing more.
    sweep_script(&mut c, 1000, ("1000", 5, 3, &["a", "b"]));
    let left: Vec<String> = c.lrange(format!("{dues}:1000"), 0, -1).unwrap();
    assert_eq!(left, ["d", "e"]);
    let removed: u64 = c.hget("queue:{baseball}:admission", "removed").unwrap();
    assert_eq!(removed, 2, "a removal counted twice");

    // c was never proposed and its candidate dropped... no: it is still
    // silent and was read, but an instance that stops before its call
    // leaves the list as it was. Put c back as the only candidate left
    // unread by anyone and read it: it goes.
    let () = c.rpush(format!("{dues}:1000"), "c").unwrap();
    sweep_script(&mut c, 1000, ("1000", 3, 3, &["c"]));
    let waiting: Vec<String> = c.zrange(WAITING, 0, -1).unwrap();
    assert_eq!(waiting, ["d", "e"]);
    // The bucket is gone with its last candidate, and its index entry.
    let exists: bool = c.exists(format!("{dues}:1000")).unwrap();
    assert!(!exists);
    let indexed: Option<f64> = c.zscore(dues, 1000).unwrap();
    assert_eq!(indexed, None);

    // While an earlier version's heartbeats exist, the whole work is
    // cleanup.lua's.
    let () = c.zadd(LEGACY, "old", 1).unwrap();
    let out = sweep_script(&mut c, 1000, ("", 0, 0, &[]));
    assert_eq!(out, redis::Value::Array(vec![redis::Value::Int(-1)]));
}

/// Two instances clean one queue together, in batches of 50: every silent
/// user is removed once (the counts agree), and every user who polled
/// since is kept, whichever instance read their candidate.
#[test]
fn two_instances_sweeping_together_remove_every_silent_user_once() {
    let redis = Redis::start();
    let queue = "baseball:\n  heartbeat: {timeout-ms: 600, cleanup-interval-ms: 20, cleanup-batch-size: 50, poll-min-ms: 100, poll-max-ms: 200}\n  admission: {max-active: 1}";
    let one = start(&redis, queue);
    let two = start(&redis, queue);
    let mut c = redis.conn();
    let silent: Vec<String> = (0..1500).map(|i| format!("s{i}")).collect();
    let alive: Vec<String> = (0..1500).map(|i| format!("a{i}")).collect();
    // Both are candidates of one long-past bucket; only the silent have a
    // heartbeat that old.
    let due = redis.now_ms() + 3_600_000;
    let mut p = redis::pipe();
    for (i, user) in silent.iter().chain(&alive).enumerate() {
        p.zadd(WAITING, user, 1_000 + i).ignore();
    }
    for user in &alive {
        p.hset(DUE, user, format!("{due}:1")).ignore();
        p.rpush("queue:{baseball}:dues:1000", user).ignore();
    }
    let () = p.query(&mut c).unwrap();
    make_silent(&mut c, "baseball", &silent);

    let mut left = 0;
    let swept = eventually(Duration::from_secs(10), || {
        left = c.zcard(WAITING).unwrap();
        left == alive.len() as u64
    });
    assert!(swept, "{left} still waiting");
    let waiting: HashSet<String> = c
        .zrange::<_, Vec<String>>(WAITING, 0, -1)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(waiting, alive.iter().cloned().collect::<HashSet<_>>());
    let removed: u64 = c.hget("queue:{baseball}:admission", "removed").unwrap();
    assert_eq!(removed, silent.len() as u64);
    let counted = |wg: &Waitgate| {
        let text = get(wg.admin, "/metrics").unwrap().text();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(r#"waitgate_cleanup_removed_total{queue="baseball",reason="heartbeat_timeout"} "#)
            })
            .map_or(0.0, |v| v.parse().unwrap())
    };
    assert_eq!(counted(&one) + counted(&two), silent.len() as f64);
}

/// Instances sharing a queue run each cleanup interval's pass once between
/// them (the first to claim it), rather than each reading the same
/// candidates; a silent user is still removed within the interval, and
/// counted once.
#[test]
fn three_instances_sweep_a_queue_about_once_an_interval() {
    let redis = Redis::start();
    let mut c = redis.conn();
    let sweep = load_sweep(&mut c);
    let queue = "baseball:\n  heartbeat: {timeout-ms: 600, cleanup-interval-ms: 200, cleanup-batch-size: 500}\n  admission: {max-active: 1}";
    let instances: Vec<Waitgate> = (0..3).map(|_| start(&redis, queue)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let monitor = Monitor::start(&redis);
    std::thread::sleep(Duration::from_secs(4));
    // Each pass starts by finding its first bucket (none, here).
    let passes = sweep_steps(&monitor.take_lines(), &sweep)
        .iter()
        .filter(|(bucket, _)| bucket.is_empty())
        .count();
    assert!(
        (15..=26).contains(&passes),
        "{passes} passes in 20 intervals of three instances"
    );

    waiting_silent(&mut c, 100);
    let started = Instant::now();
    wait_while("not removed", || c.zcard::<_, u64>(WAITING).unwrap() > 0);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let removed: f64 = instances
        .iter()
        .map(|wg| {
            scrape(wg)
                .get(r#"waitgate_cleanup_removed_total{queue="baseball",reason="heartbeat_timeout"}"#)
                .copied()
                .unwrap_or(0.0)
        })
        .sum();
    assert_eq!(removed, 100.0);
}

/// A pass of cleanup calls starts each at the bucket the one before named:
/// one `sweep.lua` call a step, and one more a pass to find the first
/// bucket, not two a step (the first only finding the bucket again).
#[test]
fn a_cleanup_pass_finds_its_first_bucket_once() {
    let redis = Redis::start();
    let mut c = redis.conn();
    waiting_silent(&mut c, 2000);
    let sweep = load_sweep(&mut c);
    let monitor = Monitor::start(&redis);
    let queue = "baseball:\n  heartbeat: {timeout-ms: 600, cleanup-interval-ms: 60000, cleanup-batch-size: 500}\n  admission: {max-active: 1}";
    let _wg = start(&redis, queue);
    wait_while("not removed", || c.zcard::<_, u64>(WAITING).unwrap() > 0);
    // The bucket each call read ("" for none).
    let buckets: Vec<String> = sweep_steps(&monitor.take_lines(), &sweep)
        .into_iter()
        .map(|(bucket, _)| bucket)
        .collect();
    let finding = buckets.iter().filter(|b| b.is_empty()).count();
    let steps = buckets.iter().filter(|b| *b == "1000").count();
    assert_eq!(steps, 4, "2,000 candidates, 500 a step: {buckets:?}");
    assert_eq!(finding, 1, "one pass: {buckets:?}");
}

/// Cleanup steps read their candidates in the script while the steps
/// before removed most of what they looked at (a crowd leaving), and look
/// first again once a step finds the users polled since: either way a
/// silent user goes and a polling one stays.
#[test]
fn cleanup_reads_candidates_in_the_script_after_a_crowd_left() {
    let redis = Redis::start();
    let mut c = redis.conn();
    let sweep = load_sweep(&mut c);
    let queue = "baseball:\n  heartbeat: {timeout-ms: 600, cleanup-interval-ms: 100, cleanup-batch-size: 500}\n  admission: {max-active: 1}";
    let _wg = start(&redis, queue);
    let monitor = Monitor::start(&redis);
    // The crowd: 1,500 silent in one bucket long past.
    waiting_silent(&mut c, 1500);
    wait_while("not removed", || c.zcard::<_, u64>(WAITING).unwrap() > 0);
    // Then 1,500 who polled since, candidates of a later bucket long past.
    let alive: Vec<String> = (0..1500).map(|i| format!("a{i}")).collect();
    let due = redis.now_ms() + 3_600_000;
    let mut p = redis::pipe();
    for (i, user) in alive.iter().enumerate() {
        p.zadd(WAITING, user, 10_000 + i).ignore();
        p.hset(DUE, user, format!("{due}:{}", 10_000 + i)).ignore();
        p.rpush("queue:{baseball}:dues:2000", user).ignore();
    }
    p.zadd("queue:{baseball}:dues", 2000, 2000).ignore();
    let () = p.query(&mut c).unwrap();
    wait_while("not looked at", || {
        c.exists::<_, bool>("queue:{baseball}:dues:2000").unwrap()
    });
    assert_eq!(
        c.zcard::<_, u64>(WAITING).unwrap(),
        1500,
        "a polling user removed"
    );

    // Each step with a bucket: "here" when the script read its candidates
    // (ARGV[4] empty, after the 8 keys and 2 settings), else "look".
    let lines = monitor.take_lines();
    let steps: Vec<(String, &str)> = sweep_steps(&lines, &sweep)
        .into_iter()
        .filter(|(bucket, _)| !bucket.is_empty())
        .map(|(bucket, length)| (bucket, if length.is_empty() { "here" } else { "look" }))
        .collect();
    let of = |bucket: &str| -> Vec<&str> {
        steps
            .iter()
            .filter(|(b, _)| b == bucket)
            .map(|(_, m)| *m)
            .collect()
    };
    // The first step of the crowd looks first and removes all it looks at;
    // the rest read in the script. The next bucket's first step still does
    // (it comes after a crowd), removes nobody, and the rest look first.
    assert_eq!(of("1000"), ["look", "here", "here"], "{steps:?}");
    assert_eq!(of("2000"), ["here", "look", "look"], "{steps:?}");
    // Only the looks read candidates in plain commands.
    let plain_reads = lines
        .iter()
        .filter(|l| l.contains("\"LRANGE\" \"queue:{baseball}:dues:"))
        .count();
    assert_eq!(plain_reads, 3, "{steps:?}");
}
