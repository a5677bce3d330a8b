//! Control of the event over real Redis and several instances: the admin
//! API and its token, pause and resume, live admission rates, a scheduled
//! open with a shuffled pre-queue, revocation (push and sync), and early
//! release by the backend.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use redis::Commands;
use waitgate::fairness::draw::{draw_order, Seed};

const CONTROL: &str = "queue:{baseball}:control";
const PREQUEUE: &str = "queue:{baseball}:prequeue";

fn start(redis: &Redis, queue_yaml: &str, upstream_port: u16) -> Waitgate {
    let ports = Ports::new();
    let cfg = config_with(&redis.url(), &ports, upstream_port, queue_yaml);
    Waitgate::start_env(&cfg, &ports, &[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)])
}

fn rfc3339(ms: u64) -> String {
    waitgate::time::rfc3339(ms)
}

fn protected(addr: SocketAddr, token: &str) -> Response {
    with_token(addr, "GET", "/api/v1/follow-up/x", token, None)
}

fn active_count(redis: &Redis) -> u64 {
    redis.conn().zcard(ACTIVE_KEY).unwrap()
}

/// The protected `done` call with `token`, which the upstream answers
/// with `X-Waitgate-Release`.
fn release(addr: std::net::SocketAddr, token: &str) -> Response {
    with_token(addr, "POST", "/api/v1/follow-up/done", token, Some(b"{}"))
}

/// Whether `user` is in queue `baseball`'s active set.
fn is_active(redis: &Redis, user: &str) -> bool {
    let score: Option<f64> = redis.conn().zscore(ACTIVE_KEY, user).unwrap();
    score.is_some()
}

#[test]
fn the_admin_api_needs_its_token_and_is_absent_without_one() {
    let redis = Redis::start_free();
    let plain = start_with_queues(&redis, "baseball: {}");
    let r = request(
        plain.admin,
        "GET",
        "/admin/v1/queues/baseball",
        &[("Authorization", &format!("Bearer {ADMIN_TOKEN}"))],
        None,
    )
    .unwrap();
    assert_eq!(r.status, 404, "no token configured: no admin API");

    let wg = start(&redis, "baseball: {}", free_port());
    for auth in [
        None,
        Some("Bearer wrong-token-0123456789xx".to_string()),
        Some(format!("Basic {ADMIN_TOKEN}")),
        Some(format!("Bearer {ADMIN_TOKEN}x")),
    ] {
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("Authorization", a)])
            .unwrap_or_default();
        let r = request(
            wg.admin,
            "POST",
            "/admin/v1/queues/baseball/pause",
            &headers,
            None,
        )
        .unwrap();
        assert_eq!(r.status, 401, "{auth:?}: {r:?}");
        assert_eq!(r.error_code(), "unauthorized");
        assert_eq!(r.header("WWW-Authenticate"), Some("Bearer"));
    }
    let paused: Option<String> = redis.conn().hget(CONTROL, "paused").unwrap();
    assert_eq!(paused, None, "a refused request changes nothing");

    let r = admin(&wg, "GET", "/admin/v1/queues/baseball", None);
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["redisUp"], true);
    assert_eq!(v["paused"], false);
    assert_eq!(v["phase"], "open");
    assert_eq!(v["admission"]["batchSize"], 100);
    assert_eq!(v["rate"]["batchSize"], 100, "{v}");
    assert_eq!(v["rate"]["intervalMs"], v["admission"]["intervalMs"], "{v}");
    let per_second = 100.0 * 1000.0 / v["admission"]["intervalMs"].as_f64().unwrap();
    assert_eq!(v["rate"]["perSecond"].as_f64(), Some(per_second), "{v}");
    assert_eq!(admin(&wg, "GET", "/admin/v1/queues/nope", None).status, 404);
    // A queue name escaped as the queue API's `queue` parameter may be.
    let escaped = admin(&wg, "GET", "/admin/v1/queues/base%62all", None);
    assert_eq!(escaped.status, 200, "{escaped:?}");
    assert_eq!(escaped.json()["queue"], "baseball");
    assert_eq!(
        admin(&wg, "GET", "/admin/v1/queues/base%FFall", None).status,
        404
    );
    assert_eq!(
        admin(&wg, "GET", "/admin/v1/queues/baseball/pause", None).status,
        405
    );
    let bad = patch_admission(&wg, r#"{"batchSize":0}"#);
    assert_eq!(
        (bad.status, bad.error_code().as_str()),
        (400, "invalid_request")
    );
    let bad = admin(
        &wg,
        "PUT",
        "/admin/v1/queues/baseball/event",
        Some(r#"{"openAt":"2001-01-01T00:00:00Z"}"#),
    );
    assert_eq!(bad.status, 400, "{bad:?}");
    let mut control: std::collections::HashMap<String, String> =
        redis.conn().hgetall(CONTROL).unwrap();
    // The state's own id, which every instance gives it from its start.
    control.remove("incarnation");
    control.remove("born_at");
    assert!(control.is_empty(), "bad input changes nothing: {control:?}");
    let listing = admin(&wg, "GET", "/admin/v1/queues", None);
    assert_eq!(listing.json()["queues"][0]["queue"], "baseball");
    // Pause and resume take no fields; an empty JSON object is no body.
    for (path, paused) in [("pause", true), ("resume", false)] {
        let path = format!("/admin/v1/queues/baseball/{path}");
        let r = admin(&wg, "POST", &path, Some("{}"));
        assert_eq!(r.status, 200, "{r:?}");
        let v = admin(&wg, "GET", "/admin/v1/queues/baseball", None).json();
        assert_eq!(v["paused"], paused, "{v}");
        let r = admin(&wg, "POST", &path, Some(r#"{"reason":"x"}"#));
        assert_eq!(r.status, 400, "{r:?}");
    }
}

#[test]
fn pause_holds_every_instance_and_a_rate_change_is_followed_within_two_windows() {
    const INTERVAL_MS: u64 = 300;
    const TTL_MS: u64 = 600_000;
    let redis = Redis::start_free();
    let queue = format!(
        "baseball:\n  admission: {{interval-ms: {INTERVAL_MS}, batch-size: 2, active-ttl-ms: {TTL_MS}}}"
    );
    let instances: Vec<Waitgate> = (0..3).map(|_| start(&redis, &queue, free_port())).collect();
    let r = admin(
        &instances[0],
        "POST",
        "/admin/v1/queues/baseball/pause",
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["paused"], true);
    for i in 0..120 {
        assert_eq!(
            register(instances[i % 3].addr, &format!("p{i:03}")).status,
            200
        );
    }
    std::thread::sleep(Duration::from_millis(5 * INTERVAL_MS));
    assert_eq!(active_count(&redis), 0, "paused: nobody admitted anywhere");
    let polled = rank(instances[1].addr, "p050").json();
    assert_eq!(polled["status"], "WAITING");
    assert_eq!(polled["paused"], true);
    assert!(polled.get("estimatedWaitSeconds").is_none(), "{polled}");
    assert_eq!(polled["rank"], 50);
    let metrics = get(instances[2].admin, "/metrics").unwrap().text();
    assert!(
        metrics.contains(r#"waitgate_queue_paused{queue="baseball"} 1"#),
        "{metrics}"
    );

    let r = admin(
        &instances[2],
        "POST",
        "/admin/v1/queues/baseball/resume",
        None,
    );
    assert_eq!(r.json()["paused"], false);
    wait_until(
        "admission to resume",
        Duration::from_millis(2 * INTERVAL_MS + 500),
        || active_count(&redis) > 0,
    );
    let polled = rank(instances[1].addr, "p050").json();
    assert!(polled.get("paused").is_none(), "{polled}");
    assert!(
        polled["estimatedWaitSeconds"].as_u64().is_some(),
        "{polled}"
    );

    // Three windows at 2, then the batch goes to 6 through another instance.
    std::thread::sleep(Duration::from_millis(3 * INTERVAL_MS));
    let r = patch_admission(&instances[1], r#"{"batchSize":6}"#);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["admission"]["batchSize"], 6);
    assert_eq!(r.json()["configured"]["batchSize"], 2);
    // The estimate follows the new batch at once: the last user is some
    // hundred places back, 15 s away at 2 a window, 5 s at 6.
    let last = rank(instances[0].addr, "p119").json();
    let (place, wait) = (
        last["rank"].as_u64().unwrap(),
        last["estimatedWaitSeconds"].as_u64().unwrap(),
    );
    let at_six = (place / 6 + 1) * INTERVAL_MS / 1000 + 1;
    assert!(
        wait <= at_six,
        "rank {place}: {wait} s, at most {at_six} s expected"
    );
    let changed_window = redis.now_ms() / INTERVAL_MS;
    std::thread::sleep(Duration::from_millis(6 * INTERVAL_MS));
    let active: Vec<(String, f64)> = redis.conn().zrange_withscores(ACTIVE_KEY, 0, -1).unwrap();
    let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
    for (_, expiry) in &active {
        *per_window
            .entry((*expiry as u64 - TTL_MS) / INTERVAL_MS)
            .or_default() += 1;
    }
    println!("admitted per window (change in window {changed_window}): {per_window:?}");
    for (&window, &n) in &per_window {
        if window < changed_window {
            assert!(n <= 2, "before the change: {per_window:?}");
        } else if window >= changed_window + 2 {
            assert_eq!(n, 6, "two windows after the change: {per_window:?}");
        } else {
            assert!(n == 2 || n == 6, "{per_window:?}");
        }
    }
    assert!(
        per_window.keys().any(|&w| w >= changed_window + 2),
        "{per_window:?}"
    );
    let metrics = get(instances[1].admin, "/metrics").unwrap().text();
    assert!(
        metrics.contains(r#"waitgate_admin_changes_total{action="admission",queue="baseball"} 1"#),
        "{metrics}"
    );
}

/// Pre-queues `users` over the instances, round robin; returns each one's
/// credential.
fn prequeue(instances: &[Waitgate], users: &[String]) -> Vec<String> {
    users
        .iter()
        .enumerate()
        .map(|(i, user)| {
            let r = register(instances[i % instances.len()].addr, user);
            assert_eq!(r.status, 200, "{r:?}");
            let v = r.json();
            assert_eq!(v["status"], "PREQUEUE", "{v}");
            assert!(v.get("rank").is_none(), "{v}");
            v["queueCredential"].as_str().unwrap().to_string()
        })
        .collect()
}

/// Kolmogorov-Smirnov distance between `sample` (values in [0, 1)) and
/// the uniform distribution.
fn ks_uniform(sample: &mut [f64]) -> f64 {
    sample.sort_by(f64::total_cmp);
    let n = sample.len() as f64;
    sample
        .iter()
        .enumerate()
        .map(|(i, &x)| (x - i as f64 / n).abs().max(((i + 1) as f64 / n - x).abs()))
        .fold(0.0, f64::max)
}

/// The 1% critical value of the KS statistic for n samples.
fn ks_critical_1pct(n: usize) -> f64 {
    1.628 / (n as f64).sqrt()
}

#[test]
fn a_scheduled_open_places_every_prequeued_user_once_in_the_seeds_order_ahead_of_later_arrivals() {
    const USERS: usize = 2_000;
    let redis = Redis::start_free();
    // One admission per minute: the test reads the placed order untouched
    // but for the first user.
    let queue = "baseball:\n  admission: {interval-ms: 60000, batch-size: 1}";
    let instances: Vec<Waitgate> = (0..3).map(|_| start(&redis, queue, free_port())).collect();
    let now = redis.now_ms();
    // The open is an hour away at first, so that a slow machine cannot
    // reach it while users pre-queue; it is brought forward below.
    let (prequeue_from, open_at) = (now + 1_500, now + 3_600_000);
    let r = schedule(&instances[0], Some(prequeue_from), open_at, true);
    assert_eq!(r.json()["phase"], "scheduled");

    let early = register(instances[1].addr, "too-early");
    assert_eq!(early.status, 403);
    assert_eq!(early.json()["error"], "queue_not_open");
    assert_eq!(early.json()["opensAt"], rfc3339(prequeue_from));

    let until_open = Duration::from_millis(prequeue_from.saturating_sub(redis.now_ms()));
    wait_until(
        "the pre-queue to open",
        until_open + Duration::from_secs(1),
        || redis.now_ms() >= prequeue_from,
    );
    let users: Vec<String> = (0..USERS).map(|i| format!("pq{i:04}")).collect();
    let credentials = prequeue(&instances, &users);
    assert!(
        redis.now_ms() < open_at,
        "pre-queueing took too long for the test"
    );
    let polled = rank(instances[2].addr, "pq0007").json();
    assert_eq!(polled["status"], "PREQUEUE");
    assert!(polled["opensInSeconds"].as_u64().unwrap() >= 1, "{polled}");
    assert!(polled.get("rank").is_none());
    let again = register(instances[0].addr, "pq0007").json();
    assert_eq!(again["status"], "PREQUEUE");
    assert!(
        again.get("queueCredential").is_none(),
        "one credential per registration"
    );
    // A pre-queued user may leave with its credential.
    assert_eq!(
        dropout(instances[1].addr, "pq1999", &credentials[1999]).status,
        204
    );
    let users = &users[..USERS - 1];
    assert_eq!(
        active_count(&redis),
        0,
        "nobody is admitted before the open"
    );
    let status = admin(&instances[1], "GET", "/admin/v1/queues/baseball", None).json();
    assert_eq!(status["phase"], "prequeue");
    let metrics = get(instances[2].admin, "/metrics").unwrap().text();
    assert!(
        metrics.contains(r#"waitgate_event_phase{phase="prequeue",queue="baseball"} 1"#),
        "{metrics}"
    );
    assert_eq!(status["prequeued"], USERS as u64 - 1);

    // The open, brought forward to a second from now (the pre-queue stays),
    // then wait until the pre-queue is placed.
    let r = schedule(&instances[2], None, redis.now_ms() + 1_000, true);
    assert_eq!(r.json()["prequeued"], USERS as u64 - 1);
    wait_until("the open to complete", Duration::from_secs(20), || {
        let placed: Option<String> = redis.conn().hget(CONTROL, "placed").unwrap();
        placed.is_some()
    });
    for i in 0..20 {
        let r = register(instances[i % 3].addr, &format!("late{i:02}"));
        assert_eq!(r.json()["status"], "WAITING", "{r:?}");
    }
    // At most one admission has happened since the open.
    let mut c = redis.conn();
    let (waiting, active) = waiting_and_active(&mut c);
    assert!(active.len() <= 1, "{active:?}");
    let order: Vec<&String> = active.iter().chain(waiting.iter()).collect();
    assert_eq!(
        order.len(),
        users.len() + 20,
        "everyone has exactly one place"
    );
    let unique: std::collections::HashSet<_> = order.iter().collect();
    assert_eq!(unique.len(), order.len());
    for (place, user) in order.iter().enumerate() {
        if place < users.len() {
            assert!(user.starts_with("pq"), "place {place}: {user}");
        } else {
            assert_eq!(
                **user,
                format!("late{:02}", place - users.len()),
                "later arrivals in order, behind"
            );
        }
    }

    // The order is the recorded seed's, as `waitgate verify` draws it.
    let status = admin(&instances[2], "GET", "/admin/v1/queues/baseball", None).json();
    assert_eq!(status["phase"], "open");
    let seed = status["event"]["seed"]
        .as_str()
        .expect("a seed is recorded")
        .to_string();
    assert_eq!(status["event"]["prequeuedAtOpen"], users.len() as u64);
    let seed: Seed = seed.parse().expect("a seed is 64 hex digits");
    let names: Vec<&str> = users.iter().map(String::as_str).collect();
    let expected = draw_order(&seed, "baseball", &names);
    let placed: Vec<&str> = order[..users.len()].iter().map(|u| u.as_str()).collect();
    assert_eq!(placed, expected, "the order follows from the recorded seed");

    // Uniformity: the places of the first 100 registrants are spread like
    // a random sample of places (KS at 1%), and so are the last 100's.
    let place_of: std::collections::HashMap<&String, usize> =
        order.iter().enumerate().map(|(p, u)| (*u, p)).collect();
    for (label, group) in [
        ("first", &users[..100]),
        ("last", &users[users.len() - 100..]),
    ] {
        let mut sample: Vec<f64> = group
            .iter()
            .map(|u| place_of[u] as f64 / users.len() as f64)
            .collect();
        let d = ks_uniform(&mut sample);
        println!("seed {}: KS distance of the {label} 100 registrants' places {d:.4} (1% critical value {:.4})", seed.hex(), ks_critical_1pct(100));
    }

    // A placed user's pre-queue credential still works: dropout with it.
    let who = &order[order.len() / 2];
    let index = users.iter().position(|u| u == *who).unwrap();
    assert_eq!(
        dropout(instances[0].addr, who, &credentials[index]).status,
        204
    );
    let left: i64 = c.zcard(PREQUEUE).unwrap();
    assert_eq!(
        left as usize,
        users.len() - active.len() - 1,
        "placed users keep their arrival until they leave"
    );
}

/// Makes queue `baseball`'s pre-queue due (an event whose `openAt` has
/// passed, shuffled) and places it with the real admission script, `step`
/// users per call with `seed` for its seed, as an instance would at the
/// open. Returns the number of calls.
fn place_prequeue_now(c: &mut redis::Connection, seed: &str, step: u64) -> u64 {
    let _: () = c
        .hset_multiple(
            CONTROL,
            &[("prequeue_from", "1"), ("open_at", "2"), ("shuffle", "1")],
        )
        .unwrap();
    let mut calls = 0;
    loop {
        // Windows of a minute: this call places, and admits no more than one.
        let why = admission_script(c, 60_000, seed, step)[2];
        calls += 1;
        // 6: a placing step; anything else: the pre-queue is placed.
        if why != 6 {
            return calls;
        }
    }
}

/// Shuffled opens of a queue that never empties: each open's span is 2^32,
/// so scores stay whole numbers (below 2^53) and later arrivals stay in
/// order. A span of 2^44 each time took them past 2^53 after about 400
/// opens, where three registrations in a row tied and were ranked by
/// userId.
#[test]
fn hundreds_of_shuffled_opens_keep_scores_whole_and_arrivals_in_order() {
    const MAX_SCORE: f64 = 9_007_199_254_740_992.0;
    let redis = Redis::start_free();
    let mut c = redis.conn();
    let _: () = c.zadd(WAITING_KEY, "always-here", 1).unwrap();
    for open in 0..500u64 {
        let _: () = redis::cmd("HDEL")
            .arg(CONTROL)
            .arg(&[
                "placed",
                "placed_at",
                "placed_count",
                "cursor",
                "seed",
                "base",
            ])
            .arg(&["opened_at", "prequeued", "shuffle_bits"])
            .query(&mut c)
            .unwrap();
        for i in 0..3u64 {
            let _: () = c
                .zadd(PREQUEUE, format!("p{open}-{i}"), open * 3 + i)
                .unwrap();
        }
        place_prequeue_now(&mut c, &format!("5eed{open:04}"), 500);
    }
    let top: Vec<(String, f64)> = c.zrevrange_withscores(WAITING_KEY, 0, 0).unwrap();
    // Now in microseconds is about 2^50.6; 500 spans of 2^44 would have
    // passed 2^53, 500 of 2^32 add about 2^41.
    assert!(top[0].1 < MAX_SCORE / 4.0, "{top:?}");
    let floor: f64 = c.hget(CONTROL, "floor").unwrap();
    // Three registrations after the last open, in this order.
    let mut ranks = Vec::new();
    for user in ["zz-first", "mm-second", "aa-third"] {
        let answer = register_script(&mut c, user);
        assert_eq!(answer[0], 1, "{user}: {answer:?}");
        assert!(answer[3] as f64 >= floor, "{user} behind the pre-queues");
        let rank: u64 = c.zrank(WAITING_KEY, user).unwrap();
        ranks.push(rank);
    }
    assert!(ranks[0] < ranks[1] && ranks[1] < ranks[2], "{ranks:?}");
    let scores: Vec<f64> = ["zz-first", "mm-second", "aa-third"]
        .iter()
        .map(|u| c.zscore(WAITING_KEY, u).unwrap())
        .collect();
    assert!(scores[0] < scores[1] && scores[1] < scores[2], "{scores:?}");
    // Each open's offsets are the draw's 32 bits.
    let bits: u64 = c.hget(CONTROL, "shuffle_bits").unwrap();
    assert_eq!(bits, 32);
}

/// Registers `user` in queue `baseball` with the real registration script,
/// as an instance would (60 s windows of 1, the default heartbeats): the
/// script's answer.
fn register_script(c: &mut redis::Connection, user: &str) -> Vec<i64> {
    give_state(c, "baseball");
    let script = redis::Script::new(REGISTER_LUA);
    let mut call = script.prepare_invoke();
    call.key(&register_keys("baseball")[..])
        .arg(60_000)
        .arg(1)
        .arg(30_000)
        .arg(1_000)
        .arg(30_000)
        // Numbered, and no proof of work.
        .arg(1)
        .arg(0)
        .arg(user)
        .invoke(c)
        .unwrap()
}

/// Registering again after the open gives a placed pre-queue user the
/// arrival its credential names (the pre-queue's), which dropout and the
/// token exchange check: with identity binding that is how a second device
/// is given a working credential.
#[test]
fn registering_again_after_the_open_names_a_placed_users_prequeue_arrival() {
    let redis = Redis::start_free();
    let mut c = redis.conn();
    for (i, user) in ["p0", "p1", "p2"].iter().enumerate() {
        let _: () = c.zadd(PREQUEUE, user, 1_000 + i as u64).unwrap();
    }
    place_prequeue_now(&mut c, "5eed0001", 500);
    let waiting: Vec<String> = c.zrange(WAITING_KEY, 0, -1).unwrap();
    let user = waiting.last().unwrap().clone();
    let prequeued: u64 = c.zscore(PREQUEUE, &user).unwrap();
    let placed: u64 = c.zscore(WAITING_KEY, &user).unwrap();
    assert_ne!(prequeued, placed, "placing gives a new score");
    let answer = register_script(&mut c, &user);
    assert_eq!(answer[0], 2, "already waiting: {answer:?}");
    assert_eq!(answer[3] as u64, prequeued, "the pre-queue arrival");
    let dropout = redis::Script::new(&format!(
        "{}{}",
        include_str!("../lua/lib.lua"),
        include_str!("../lua/dropout.lua")
    ));
    let left: i64 = dropout
        .key(WAITING_KEY)
        .key("queue:{baseball}:heartbeat")
        .key("queue:{baseball}:credential")
        .key(ACTIVE_KEY)
        .key(PREQUEUE)
        .key("queue:{baseball}:admission")
        .key("queue:{baseball}:due")
        .key("queue:{baseball}:spent")
        .key(CONTROL)
        .key("queue:{baseball}:numbering")
        .key("queue:{baseball}:marks")
        .key("queue:{baseball}:arrivals")
        .arg(&user)
        .arg(answer[3].to_string())
        .invoke(&mut c)
        .unwrap();
    assert_eq!(left, 1, "dropout takes that arrival");
}

/// The shuffle itself, run by the real admission script on a Redis of its
/// own with fixed seeds, so that the uniformity check is deterministic.
#[test]
fn the_shuffle_spreads_registrants_uniformly_for_fixed_seeds() {
    const USERS: usize = 2_000;
    let redis = Redis::start_free();
    let mut c = redis.conn();
    for seed in [
        "5eed0001",
        "c0ffee00c0ffee00c0ffee00c0ffee00",
        "0123456789abcdef",
    ] {
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        let users: Vec<String> = (0..USERS).map(|i| format!("u{i:04}")).collect();
        for (i, user) in users.iter().enumerate() {
            let _: () = c.zadd(PREQUEUE, user, i as u64 + 1).unwrap();
        }
        let steps = place_prequeue_now(&mut c, seed, 500);
        let order: Vec<String> = c.zrange(WAITING_KEY, 0, -1).unwrap();
        assert!(order.len() >= USERS - 1, "at most one admitted");
        let place: std::collections::HashMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(p, u)| (u.as_str(), p))
            .collect();
        for (label, group) in [("first", &users[..100]), ("last", &users[USERS - 100..])] {
            let mut sample: Vec<f64> = group
                .iter()
                .filter_map(|u| place.get(u.as_str()))
                .map(|&p| p as f64 / USERS as f64)
                .collect();
            let d = ks_uniform(&mut sample);
            println!("seed {seed}: {steps} steps; KS distance of the {label} 100: {d:.4}");
            assert!(
                d < ks_critical_1pct(sample.len()),
                "seed {seed}, {label} 100: D = {d}"
            );
        }
        // Not the arrival order, nor its reverse.
        let in_order = order.windows(2).filter(|w| w[0] < w[1]).count();
        assert!(
            (800..1200).contains(&in_order),
            "{in_order} ascending neighbours"
        );
    }
}

#[test]
fn a_revocation_reaches_every_instance_within_two_seconds_even_when_the_push_is_lost() {
    let redis = Redis::start_free();
    let upstream = Upstream::start();
    let instances: Vec<Waitgate> = (0..3)
        .map(|_| start(&redis, "baseball: {}", upstream.port))
        .collect();
    // Users are admitted by hand below: the gate must not race for them.
    hold_gate(&redis);
    let first = admitted_token(&instances[0], &redis, "mallory");
    let second = admitted_token(&instances[0], &redis, "trudy");
    for wg in &instances {
        assert_eq!(protected(wg.addr, &first).status, 200);
        assert_eq!(protected(wg.addr, &second).status, 200);
    }
    let refused_everywhere = |token: &str| {
        let started = Instant::now();
        let mut waiting_for: Vec<usize> = (0..3).collect();
        let refused = eventually(Duration::from_secs(2), || {
            waiting_for.retain(|&i| protected(instances[i].addr, token).status != 401);
            waiting_for.is_empty()
        });
        assert!(
            refused,
            "instances {waiting_for:?} still admit a revoked token"
        );
        started.elapsed()
    };

    // Pushed.
    let r = revoke(&instances[1], "mallory");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["wasActive"], true);
    let pushed = refused_everywhere(&first);
    let refused = protected(instances[2].addr, &first);
    assert_eq!(refused.error_code(), "invalid_token");
    assert!(refused.text().contains("revoked"), "{}", refused.text());
    let score: Option<f64> = redis.conn().zscore(ACTIVE_KEY, "mallory").unwrap();
    assert_eq!(score, None, "the active state ended");

    // One instance's subscription drops just as the revocation is pushed:
    // the others hear the push, and that one's sync catches up. The
    // revocation is made on another instance (the one that makes it
    // refuses the user at once, push or not).
    let subscribers: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut redis.conn())
        .unwrap();
    let line = subscribers.lines().next().expect("a subscription");
    let field = |name: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(name))
            .unwrap()
            .to_string()
    };
    let deaf = instances
        .iter()
        .position(|wg| owns_socket(wg.pid(), &field("addr=")))
        .expect("the subscription is one of the instances'");
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(field("id="))
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(killed, 1);
    let revoker = (deaf + 1) % 3;
    let r = revoke(&instances[revoker], "trudy");
    assert_eq!(r.status, 200);
    let synced = refused_everywhere(&second);
    println!(
        "revocation refused everywhere after {pushed:?} (push) and {synced:?} (one push lost, sync)"
    );
    // The instance that missed the push says so: the sync is what reached
    // it, and only it.
    let caught_up: Vec<usize> = (0..3)
        .filter(|&i| {
            instances[i]
                .log()
                .lines()
                .any(|l| l.contains("revocation caught up by the sync") && l.contains("trudy"))
        })
        .collect();
    assert_eq!(caught_up, [deaf], "instances that caught up by the sync");
    // Each revocation is counted once, by the instance that made it.
    let counted = |i: usize| -> u64 {
        get(instances[i].admin, "/metrics")
            .unwrap()
            .text()
            .lines()
            .find(|l| {
                l.starts_with("waitgate_revocations_total{") && l.contains("source=\"admin\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let mut expected = [0, 1, 0];
    expected[revoker] += 1;
    assert_eq!([counted(0), counted(1), counted(2)], expected);

    // No Redis call per protected request: 300 requests, a handful of
    // background calls.
    let calls = || -> u64 {
        redis
            .info("stats")
            .lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let other = admitted_token(&instances[0], &redis, "alice");
    let before = calls();
    let started = Instant::now();
    for i in 0..300 {
        assert_eq!(protected(instances[i % 3].addr, &other).status, 200);
    }
    let during = calls() - before;
    let seconds = started.elapsed().as_secs_f64().ceil();
    println!("300 protected requests in {seconds} s: {during} Redis commands (background work)");
    assert!(
        (during as f64) < 60.0 * seconds + 20.0,
        "{during} commands for 300 requests"
    );
}

/// An upstream that answers `X-Waitgate-Release: true` on `/…/done`, and
/// on `/…/slow-done` with a body whose second half comes 1.5 s late, and
/// on `/…/late-done` after a second.
fn releasing_upstream() -> u16 {
    use common::scripted::{Scripted, Step};
    let released = |rest: &str| {
        Step::Send(format!("HTTP/1.1 200 OK\r\nX-Waitgate-Release: true\r\n{rest}").into_bytes())
    };
    let upstream = Scripted::start(move |r| {
        if r.target.contains("/late-done") {
            // Thinks for a second, then releases.
            vec![
                Step::Pause(Duration::from_millis(1000)),
                released("Content-Length: 2\r\n\r\nok"),
            ]
        } else if r.target.contains("/slow-done") {
            // The head and half the body, the rest later.
            vec![
                released("Content-Length: 10\r\n\r\nhello"),
                Step::Pause(Duration::from_millis(1500)),
                Step::Send(b"world".to_vec()),
            ]
        } else if r.target.contains("/done") {
            vec![released("Content-Length: 2\r\n\r\nok")]
        } else {
            vec![Step::Send(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
            )]
        }
    });
    upstream.port
}

#[test]
fn an_early_release_frees_the_slot_for_the_next_window_and_revokes_the_token() {
    const INTERVAL_MS: u64 = 300;
    let redis = Redis::start_free();
    let port = releasing_upstream();
    let queue = format!(
        "baseball:\n  admission: {{interval-ms: {INTERVAL_MS}, batch-size: 5, max-active: 1}}"
    );
    let instances: Vec<Waitgate> = (0..2).map(|_| start(&redis, &queue, port)).collect();
    let first = register_new(instances[0].addr, "buyer1");
    register_new(instances[1].addr, "buyer2");
    // buyer1 is admitted; buyer2 waits behind the cap.
    wait_until("buyer1's admission", Duration::from_secs(3), || {
        active_count(&redis) >= 1
    });
    let r = post_json(
        instances[0].addr,
        "/api/v1/queue/active/token",
        &serde_json::json!({"userId": "buyer1", "queueCredential": first}).to_string(),
    )
    .unwrap();
    let token = r.json()["accessToken"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(3 * INTERVAL_MS));
    assert_eq!(
        rank(instances[0].addr, "buyer2").json()["status"],
        "WAITING",
        "held by max-active"
    );

    let ok = protected(instances[1].addr, &token);
    assert_eq!(ok.status, 200);
    let done = release(instances[1].addr, &token);
    assert_eq!(done.status, 200);
    assert!(
        done.header("X-Waitgate-Release").is_none(),
        "the header stops at the edge"
    );
    let released = Instant::now();
    wait_until(
        "the freed slot to go to the next window",
        Duration::from_millis(3 * INTERVAL_MS),
        || rank(instances[0].addr, "buyer2").json()["status"] == "ACTIVE",
    );
    println!(
        "buyer2 admitted {:?} after buyer1's release",
        released.elapsed()
    );
    for wg in &instances {
        let refused = protected(wg.addr, &token);
        assert_eq!(refused.status, 401, "the released token is revoked");
    }
    let metrics = get(instances[1].admin, "/metrics").unwrap().text();
    assert!(
        metrics.contains(r#"waitgate_releases_total{queue="baseball"} 1"#),
        "{metrics}"
    );
}

/// The open of a million pre-queued users, measured: every placement step
/// is one admission call, and Redis's own slow log gives each call's time.
/// The log's threshold is 100 µs: Redis 7 logs the commands a script runs
/// too, and at 0 the placing steps' own commands push the calls out of it.
/// Run with `cargo nextest run --test control --run-ignored only
/// shuffle_of_a_million --no-capture` (about a minute).
#[test]
#[ignore = "a measurement: about a minute and 200 MB of Redis"]
fn shuffle_of_a_million_runs_in_bounded_steps() {
    const USERS: u64 = 1_000_000;
    let redis = Redis::start_free();
    let mut c = redis.conn();
    let fill = redis::Script::new(
        "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
           redis.call('ZADD', KEYS[1], i, 'user-' .. i)
         end",
    );
    for start in (1..=USERS).step_by(10_000) {
        let _: () = fill
            .key(PREQUEUE)
            .arg(start)
            .arg(start + 9_999)
            .invoke(&mut c)
            .unwrap();
    }
    redis.slowlog_from_now(100, 100_000);
    let started = Instant::now();
    let steps = place_prequeue_now(&mut c, "5eed", waitgate::store::PLACE_STEP);
    let wall = started.elapsed();
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100_000)
        .query(&mut c)
        .unwrap();
    let mut micros: Vec<u64> = log
        .iter()
        .filter_map(|entry| match entry {
            redis::Value::Array(fields) => {
                let cmd = match fields.get(3) {
                    Some(redis::Value::Array(args)) => match args.first() {
                        Some(redis::Value::BulkString(b)) => {
                            String::from_utf8_lossy(b).to_lowercase()
                        }
                        _ => String::new(),
                    },
                    _ => String::new(),
                };
                match (cmd.starts_with("eval"), fields.get(2)) {
                    (true, Some(redis::Value::Int(us))) => Some(*us as u64),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect();
    micros.sort_unstable();
    let placed: u64 = c.zcard(WAITING_KEY).unwrap();
    let total: u64 = micros.iter().sum();
    let pct = |p: f64| micros[((micros.len() - 1) as f64 * p) as usize];
    println!(
        "{USERS} pre-queued, {} per step: {steps} calls in {:.2} s; {} calls over 100 us in the slow log: Redis time per call median {} us, p99 {} us, max {} us; their total {:.2} s",
        waitgate::store::PLACE_STEP,
        wall.as_secs_f64(),
        micros.len(),
        pct(0.5),
        pct(0.99),
        micros.last().unwrap(),
        total as f64 / 1e6
    );
    assert_eq!(placed + 1, USERS, "all placed, one admitted");
    assert!(
        *micros.last().unwrap() < 20_000,
        "a step blocked Redis for {} us",
        micros.last().unwrap()
    );
}

#[test]
fn users_waiting_when_an_event_is_scheduled_keep_their_places_while_they_poll() {
    let redis = Redis::start_free();
    // The advice is at most 200 ms, so the silent user goes at most 0.8 s
    // after its registration (the advice and the timeout), within a
    // cleanup interval.
    let queue = "baseball:\n  heartbeat: {timeout-ms: 600, cleanup-interval-ms: 100, poll-min-ms: 100, poll-max-ms: 200}\n  admission: {interval-ms: 60000, batch-size: 1}";
    let wg = start(&redis, queue, free_port());
    hold_gate(&redis);
    for user in ["w1", "w2"] {
        assert_eq!(register(wg.addr, user).json()["status"], "WAITING");
    }
    let now = redis.now_ms();
    let body = format!(r#"{{"openAt":"{}"}}"#, rfc3339(now + 60_000));
    assert_eq!(
        admin(&wg, "PUT", "/admin/v1/queues/baseball/event", Some(&body)).status,
        200
    );
    // Four heartbeat timeouts, polling all along.
    for _ in 0..24 {
        let polled = rank(wg.addr, "w1");
        assert_eq!(polled.json()["status"], "PREQUEUE", "{polled:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kept: Option<f64> = redis.conn().zscore(WAITING_KEY, "w1").unwrap();
    assert!(kept.is_some(), "a polling user keeps its place");
    let gone: Option<f64> = redis.conn().zscore(WAITING_KEY, "w2").unwrap();
    assert!(gone.is_none(), "a silent one is cleaned up as always");
}

#[test]
fn a_release_holds_from_the_response_head_and_survives_a_dropped_redis_connection() {
    let redis = Redis::start_free();
    let port = releasing_upstream();
    let wg = start(&redis, "baseball: {}", port);
    hold_gate(&redis);

    // The release counts from the head: while the body is still coming,
    // the token is refused on another connection, and the user's active
    // state is gone.
    let token = admitted_token(&wg, &redis, "slow-buyer");
    let mut slow = Client::connect(wg.addr);
    slow.send(&format!(
        "GET /api/v1/follow-up/slow-done HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    ));
    let head = slow.head();
    assert_eq!(head.status, 200);
    assert!(head.header("X-Waitgate-Release").is_none());
    assert_eq!(
        protected(wg.addr, &token).status,
        401,
        "refused before the body ends"
    );
    wait_until(
        "the active state ends before the body does",
        Duration::from_secs(1),
        || !is_active(&redis, "slow-buyer"),
    );
    assert_eq!(slow.bytes(10), b"helloworld");

    // The client sends its request and half-closes before the upstream
    // answers: the exchange still finishes, and the release with it.
    let token = admitted_token(&wg, &redis, "leaver");
    let mut leaver = std::net::TcpStream::connect(wg.addr).unwrap();
    leaver
        .write_all(
            format!(
                "GET /api/v1/follow-up/late-done HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    leaver.shutdown(std::net::Shutdown::Write).unwrap();
    wait_until(
        "a half-closed client's release is kept",
        Duration::from_secs(3),
        || !is_active(&redis, "leaver"),
    );
    drop(leaver);

    // waitgate's Redis connections are cut just before a release: the first
    // call fails, and a retry still ends the active state.
    let token = admitted_token(&wg, &redis, "buyer");
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut redis.conn())
        .unwrap();
    let done = release(wg.addr, &token);
    assert_eq!(done.status, 200);
    assert_eq!(protected(wg.addr, &token).status, 401);
    wait_until("the release reached Redis", Duration::from_secs(4), || {
        !is_active(&redis, "buyer")
    });
}

#[test]
fn the_admin_api_checks_the_token_before_reading_a_body_and_refuses_a_broken_one() {
    let redis = Redis::start_free();
    let wg = start(&redis, "baseball: {}", free_port());
    // A body that never comes: without the token, the answer is at once.
    let mut c = Client::connect(wg.admin);
    let started = Instant::now();
    c.send(
        "POST /admin/v1/queues/baseball/pause HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
    );
    assert_eq!(c.head().status, 401);
    assert!(started.elapsed() < Duration::from_secs(1));

    let auth = format!("Authorization: Bearer {ADMIN_TOKEN}");
    let mut c = Client::connect(wg.admin);
    c.send(&format!(
        "POST /admin/v1/queues/baseball/pause HTTP/1.1\r\nHost: x\r\n{auth}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
    ));
    assert_eq!(c.response().0.status, 400);
    assert!(
        c.closed(),
        "nothing after a broken body is read as a request"
    );
    // A broken chunk with an authorised request behind it: only the 400.
    let mut c = Client::connect(wg.admin);
    let padding = "\r\n".repeat(3000);
    c.send(&format!(
        "POST /admin/v1/queues/baseball/resume HTTP/1.1\r\nHost: x\r\n{auth}\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{{}}XX{padding}POST /admin/v1/queues/baseball/pause HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Length: 0\r\n\r\n"
    ));
    assert_eq!(c.response().0.status, 400);
    assert!(c.closed());
    let paused: Option<String> = redis.conn().hget(CONTROL, "paused").unwrap();
    assert_eq!(paused, None, "refused requests change nothing");

    // A declared length past the limit: 413 at once, nothing read; as the
    // queue API answers it.
    let mut c = Client::connect(wg.admin);
    let started = Instant::now();
    c.send(&format!(
        "PATCH /admin/v1/queues/baseball/admission HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{{"
    ));
    assert_eq!(c.head().status, 413);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // A client that waits for 100 Continue gets it, then its answer.
    let mut c = Client::connect(wg.admin);
    let body = r#"{"batchSize":9}"#;
    c.send(&format!(
        "PATCH /admin/v1/queues/baseball/admission HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    ));
    assert_eq!(c.head().status, 100);
    c.send(body);
    assert_eq!(c.response().0.status, 200);
    let batch: Option<String> = redis.conn().hget(CONTROL, "batch").unwrap();
    assert_eq!(batch.as_deref(), Some("9"));
}

/// Whether process `pid` holds the TCP connection whose local end is
/// `addr` (`127.0.0.1:port`, as Redis's `CLIENT LIST` names a client).
fn owns_socket(pid: u32, addr: &str) -> bool {
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let inodes: Vec<String> = tcp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let local = fields.get(1)?;
            let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            (local_port == port).then(|| fields.get(9).map(|i| i.to_string()))?
        })
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .any(|target| {
            let target = target.to_string_lossy();
            inodes.iter().any(|i| target == format!("socket:[{i}]"))
        })
}

/// The `redis call failed` lines of `cause` in a log, and the failures they
/// stand for.
fn limited_lines(log: &str, cause: &str) -> (usize, u64) {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("redis call failed") && l.contains(&format!("cause=\"{cause}\"")))
        .collect();
    let counted = lines
        .iter()
        .filter_map(|l| l.split("count=").nth(1))
        .filter_map(|c| c.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    (lines.len(), counted)
}

#[test]
fn releases_and_admin_changes_during_a_redis_outage_are_one_warning_a_second() {
    let mut redis = Redis::start_free();
    let port = releasing_upstream();
    let wg = start(&redis, "baseball: {}", port);
    let tokens: Vec<String> = (0..15)
        .map(|i| admitted_token(&wg, &redis, &format!("leaver_{i}")))
        .collect();
    redis.kill();
    // Every release is retried for about 3 s, then given up on: all of
    // them within a moment of each other.
    for token in &tokens {
        let done = release(wg.addr, token);
        assert_eq!(done.status, 200);
    }
    let refused = repeat_for(Duration::from_millis(1500), || {
        let r = admin(&wg, "POST", "/admin/v1/queues/baseball/pause", None);
        assert_eq!(r.status, 503, "{r:?}");
    });
    std::thread::sleep(Duration::from_millis(4000));
    let log = wg.log();
    assert!(!log.contains("release failed"), "{log}");
    assert!(!log.contains("admin change failed"), "{log}");
    let (lines, counted) = limited_lines(&log, "release");
    assert!(
        (1..=3).contains(&lines),
        "15 releases, {lines} lines:\n{log}"
    );
    assert!((1..=15).contains(&counted), "{counted}");
    assert!(
        log.contains("only this instance refuses the released users' tokens"),
        "{log}"
    );
    let (lines, counted) = limited_lines(&log, "admin");
    assert!(refused >= 10, "{refused}");
    assert!(
        (1..=3).contains(&lines),
        "{refused} admin changes, {lines} lines:\n{log}"
    );
    assert!(counted >= 1 && counted <= refused, "{counted} of {refused}");
    // Each release is still refused here, Redis or not.
    for token in &tokens {
        assert_eq!(protected(wg.addr, token).status, 401);
    }
}

#[test]
fn admin_bodies_must_be_json_with_each_field_once_as_on_the_queue_api() {
    let redis = Redis::start_free();
    let wg = start(&redis, "baseball: {}", free_port());
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let send = |method: &str, path: &str, content_type: Option<&str>, body: &str| {
        let mut headers = vec![("Authorization", auth.as_str())];
        if let Some(content_type) = content_type {
            headers.push(("Content-Type", content_type));
        }
        request(wg.admin, method, path, &headers, Some(body.as_bytes())).unwrap()
    };
    let admission = "/admin/v1/queues/baseball/admission";
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let r = send("PATCH", admission, content_type, r#"{"batchSize":3}"#);
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (415, "unsupported_media_type"),
            "{content_type:?}: {r:?}"
        );
        let r = send(
            "POST",
            "/admin/v1/queues/baseball/pause",
            content_type,
            "{}",
        );
        assert_eq!(r.status, 415, "{content_type:?}: {r:?}");
    }
    let json = Some("application/json");
    let r = send("PATCH", admission, json, r#"{"batchSize":3,"batchSize":4}"#);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (400, "invalid_request"),
        "{r:?}"
    );
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("Duplicate field"),
        "{r:?}"
    );
    let r = send(
        "PUT",
        "/admin/v1/queues/baseball/event",
        json,
        r#"{"openAt":"2099-01-01T00:00:00Z","openAt":"2099-01-02T00:00:00Z"}"#,
    );
    assert_eq!(r.status, 400, "{r:?}");
    let r = send(
        "POST",
        "/admin/v1/queues/baseball/revoke",
        json,
        r#"{"userId":"a","userId":"b"}"#,
    );
    assert_eq!(r.status, 400, "{r:?}");
    let mut control: std::collections::HashMap<String, String> =
        redis.conn().hgetall(CONTROL).unwrap();
    control.remove("incarnation");
    control.remove("born_at");
    assert!(
        control.is_empty(),
        "refused input changes nothing: {control:?}"
    );
    // Declared JSON (any parameters), each field once: taken.
    let r = send(
        "PATCH",
        admission,
        Some("application/json; charset=utf-8"),
        r#"{"batchSize":4}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["rate"]["batchSize"], 4, "{r:?}");
    // A revoke answers the revocation, not the queue's state.
    let r = send(
        "POST",
        "/admin/v1/queues/baseball/revoke",
        json,
        r#"{"userId":"u1"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["queue", "revokedAt", "userId", "wasActive"], "{v}");
}

#[test]
fn a_head_of_a_queues_state_is_its_get_without_the_body() {
    let redis = Redis::start_free();
    let wg = start(&redis, "baseball: {}", free_port());
    let auth = format!("Authorization: Bearer {ADMIN_TOKEN}");
    for path in ["/admin/v1/queues/baseball", "/admin/v1/queues"] {
        let get = admin(&wg, "GET", path, None);
        assert_eq!(get.status, 200);
        let mut c = Client::connect(wg.admin);
        c.send(&format!(
            "HEAD {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n\r\n"
        ));
        let head = c.head();
        assert_eq!(head.status, 200, "{path}");
        assert_eq!(head.header("content-type"), get.header("Content-Type"));
        assert!(head.length() > 0, "the length a GET gets");
        // No body: the next request on the connection is answered.
        c.send(&format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\n{auth}\r\n\r\n"
        ));
        assert_eq!(c.response().0.status, 200, "{path}");
    }
    let r = admin(&wg, "DELETE", "/admin/v1/queues/baseball", None);
    assert_eq!((r.status, r.header("Allow")), (405, Some("GET, HEAD")));
}

/// An admin change sent to a Redis that stalls (`CLIENT PAUSE`) is answered
/// 503 within the command timeout, and Redis may still make it when it
/// wakes: the answer says so, not that the change was not made.
#[test]
fn an_admin_change_redis_does_not_confirm_in_time_is_answered_as_unconfirmed() {
    let redis = Redis::start_free();
    let wg = start(&redis, "baseball: {}", free_port());
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "1500", "ALL"])
        .query(&mut redis.conn())
        .unwrap();
    let started = Instant::now();
    let r = patch_admission(&wg, r#"{"batchSize":7}"#);
    assert_eq!(r.status, 503, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "{:?}",
        started.elapsed()
    );
    let body = r.json();
    assert_eq!(body["error"], "redis_unavailable");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("may still be made"), "{message}");
    wg.wait_for_log("not confirmed in time", 1);
    // Whether Redis then makes it depends on whether the connection it
    // came on was still open when Redis woke: either way, the queue's
    // state says, and the change can be sent again.
    std::thread::sleep(Duration::from_millis(1500));
    let again = patch_admission(&wg, r#"{"batchSize":7}"#);
    assert_eq!(again.status, 200, "{again:?}");
    let status = admin(&wg, "GET", "/admin/v1/queues/baseball", None).json();
    assert_eq!(status["admission"]["batchSize"], 7, "{status}");
}

/// Calls the real admission script for queue `baseball` as an instance
/// would: windows of `interval` ms, a batch of 1, `seed` and `step` for a
/// placing; the default heartbeat timeout and poll advice. Its answer.
fn admission_script(c: &mut redis::Connection, interval: u64, seed: &str, step: u64) -> Vec<i64> {
    give_state(c, "baseball");
    redis::Script::new(&format!(
        "{}{}",
        include_str!("../lua/lib.lua"),
        include_str!("../lua/admit.lua")
    ))
    .key(WAITING_KEY)
    .key("queue:{baseball}:heartbeat")
    .key(ACTIVE_KEY)
    .key("queue:{baseball}:admission")
    .key("queue:{baseball}:credential")
    .key(CONTROL)
    .key(PREQUEUE)
    .key("queue:{baseball}:due")
    .key("queue:{baseball}:dues")
    .key("queue:{baseball}:spent")
    .arg(interval)
    .arg(1)
    .arg(600_000)
    .arg(0)
    .arg(seed)
    .arg(step)
    .arg(30_000)
    .arg(1_000)
    .arg(30_000)
    // What the instance has seen of the state: nothing yet.
    .arg(0)
    .arg(0)
    .invoke(c)
    .unwrap()
}

/// One admission call with windows of `interval` ms: how many it admitted.
fn admit_once(c: &mut redis::Connection, interval: u64) -> i64 {
    admission_script(c, interval, "5eed", 150)[0]
}

/// A longer admission interval from the config (a reload or a restart; the
/// admin API forgets the gate's window itself) admits from the next window
/// of the new length. The gate compared window numbers of different
/// lengths, and a number of the shorter length stopped admission for good;
/// a shorter one admits at once.
#[test]
fn a_window_length_changed_by_the_config_goes_on_admitting() {
    let redis = Redis::start_free();
    let mut c = redis.conn();
    for i in 0..10u64 {
        let _: () = c.zadd(WAITING_KEY, format!("w{i}"), i + 1).unwrap();
    }
    let admitted_within = |c: &mut redis::Connection, interval: u64, limit: Duration| {
        let started = Instant::now();
        poll_for(limit, || {
            (admit_once(c, interval) > 0).then(|| started.elapsed())
        })
    };
    assert!(admitted_within(&mut c, 100, Duration::from_millis(500)).is_some());
    // 100 ms -> 1 s: within the next second.
    let took = admitted_within(&mut c, 1_000, Duration::from_millis(2_500));
    assert!(
        took.is_some_and(|t| t <= Duration::from_millis(1_100)),
        "{took:?}"
    );
    // And not twice in that window.
    assert_eq!(admit_once(&mut c, 1_000), 0);
    // 1 s -> 50 ms: from the end of the 50 ms window the last was made in.
    let took = admitted_within(&mut c, 50, Duration::from_millis(1_000));
    assert!(
        took.is_some_and(|t| t <= Duration::from_millis(150)),
        "{took:?}"
    );
}

/// The listing of every queue reads them side by side: while Redis hangs
/// it takes one command timeout (300 ms here), not one per queue, and says
/// Redis is down for each.
#[test]
fn the_listing_of_queues_waits_one_timeout_while_redis_hangs() {
    let redis = Redis::start_free();
    let wg = start(
        &redis,
        "baseball: {}\nq2: {}\nq3: {}\nq4: {}\nq5: {}",
        free_port(),
    );
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "3000", "ALL"])
        .query(&mut redis.conn())
        .unwrap();
    let started = Instant::now();
    let r = admin(&wg, "GET", "/admin/v1/queues", None);
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{r:?}");
    let listing = r.json();
    let queues = listing["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 5, "{listing}");
    assert!(queues.iter().all(|q| q["redisUp"] == false), "{listing}");
    assert!(took < Duration::from_millis(900), "{took:?}");
}
