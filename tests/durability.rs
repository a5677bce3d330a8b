//! A place survives Redis incidents: an outage longer than the heartbeat
//! timeout (Redis killed and restarted from its AOF, or hung), with one
//! instance or two and an instance restarted meanwhile; a Redis that lost
//! its data; and no heartbeat outlives its place.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// Queue `baseball` for the outage tests: a short heartbeat timeout and
/// quick cleanup, so that an outage of a few seconds is many timeouts long;
/// the grace covers the test clients' longest back-off (2 s); nobody is
/// admitted (the harness's holder fills `max-active: 1`).
const SHORT_HEARTBEATS: &str = "baseball:
  heartbeat: {timeout-ms: 1000, poll-min-ms: 200, poll-max-ms: 400, cleanup-interval-ms: 200, outage-grace-ms: 3000}
  admission: {max-active: 1, interval-ms: 200}";

/// What a client that behaves like the page saw.
#[derive(Default, Debug)]
struct Seen {
    ok: usize,
    unavailable: usize,
    not_queued: usize,
    other: Vec<u16>,
}

/// A waiting client that polls rank at the advised `pollAfterMs`, with its
/// credential, from each of `addrs` in turn, and backs off on 503 or no
/// answer (0.25, 0.5, 1, then 2 s), as the page and the JS client do (they
/// wait at most 8 s).
struct Poller {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Poller {
    fn start(addrs: Vec<SocketAddr>, user: String, credential: String) -> Poller {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut failures = 0u32;
            let mut turn = 0usize;
            while !st.load(Ordering::Relaxed) {
                let addr = addrs[turn % addrs.len()];
                turn += 1;
                let answer = request(
                    addr,
                    "GET",
                    &format!("/api/v1/queue/rank?userId={user}"),
                    &[("X-Queue-Credential", credential.as_str())],
                    None,
                );
                let wait = match answer {
                    Ok(r) if r.status == 200 => {
                        failures = 0;
                        s.lock().unwrap().ok += 1;
                        Duration::from_millis(r.json()["pollAfterMs"].as_u64().unwrap_or(200))
                    }
                    Ok(r) if r.status == 404 => {
                        s.lock().unwrap().not_queued += 1;
                        Duration::from_millis(200)
                    }
                    Ok(r) if r.status != 503 => {
                        s.lock().unwrap().other.push(r.status);
                        Duration::from_millis(200)
                    }
                    _ => {
                        s.lock().unwrap().unavailable += 1;
                        failures += 1;
                        Duration::from_millis(250 << failures.min(4).saturating_sub(1))
                            .min(Duration::from_secs(2))
                    }
                };
                std::thread::sleep(wait);
            }
        });
        Poller {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// Stops every poller at once (one by one, the first stopped would go
/// silent while the others finish), and reads the places at that moment:
/// what each saw, and the waiting set.
fn stop_all(pollers: Vec<Poller>, redis: &Redis) -> (Vec<Seen>, Vec<(String, u64)>) {
    for p in &pollers {
        p.stop.store(true, Ordering::Relaxed);
    }
    let places = waiting(redis);
    (pollers.into_iter().map(Poller::finish).collect(), places)
}

/// The waiting set in order: (user, arrival).
fn waiting(redis: &Redis) -> Vec<(String, u64)> {
    let all: Vec<(String, f64)> =
        redis::Commands::zrange_withscores(&mut redis.conn(), WAITING_KEY, 0, -1).unwrap();
    all.into_iter().map(|(u, s)| (u, s as u64)).collect()
}

/// Registers `n` users through `addr`: their names and credentials, in the
/// order they joined.
fn join(addr: SocketAddr, prefix: &str, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let user = format!("{prefix}{i:02}");
            let body = serde_json::json!({ "queue": "baseball", "userId": user }).to_string();
            let r = register_after_restart(addr, &body);
            let Some(credential) = r.json()["queueCredential"].as_str().map(String::from) else {
                panic!("{user} got no credential: {r:?} {}", r.text());
            };
            (user, credential)
        })
        .collect()
}

/// A metric's value on an instance's /metrics (0 when absent).
fn metric(wg: &Waitgate, series: &str) -> f64 {
    wg.metric(series).unwrap_or(0.0)
}

/// Redis with an AOF written at every change is killed and started again
/// after an outage of 8 heartbeat timeouts; meanwhile one of the two
/// instances is killed and started anew. Clients that poll as advised and
/// back off keep every place, in the same order, and never hear 404.
#[test]
fn an_outage_many_timeouts_long_loses_no_place_with_two_instances_and_one_restarted() {
    let mut redis = Redis::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    // The harness's holder keeps everyone waiting.
    let _: () = redis::cmd("ZADD")
        .arg(ACTIVE_KEY)
        .arg("32503680000000")
        .arg(HOLDER)
        .query(&mut redis.conn())
        .unwrap();
    let upstream = free_port();
    let ports = Ports::new();
    let config = config_with(&redis.url(), &ports, upstream, SHORT_HEARTBEATS);
    let first = start_with_admin(&config, &ports);
    let ports2 = Ports::new();
    let config2 = config_with(&redis.url(), &ports2, upstream, SHORT_HEARTBEATS);
    let mut second = Waitgate::start(&config2, &ports2);
    let users = join(first.addr, "w", 30);
    let before = waiting(&redis);
    assert_eq!(before.len(), 30);
    let pollers: Vec<Poller> = users
        .iter()
        .map(|(u, c)| Poller::start(vec![first.addr, second.addr], u.clone(), c.clone()))
        .collect();
    // A few rounds of polls, then the outage.
    std::thread::sleep(Duration::from_secs(2));
    redis.kill();
    std::thread::sleep(Duration::from_secs(3));
    // An instance killed and started again while Redis is down knows
    // nothing of the outage but what Redis holds.
    second.signal("KILL");
    let _ = second.wait_exit(Duration::from_secs(5));
    second = Waitgate::start(&config2, &ports2);
    std::thread::sleep(Duration::from_secs(5));
    redis.restart();
    // The grace and the timeout after the clients come back, twice over.
    std::thread::sleep(Duration::from_secs(8));
    let (seen, after) = stop_all(pollers, &redis);
    for (s, (user, _)) in seen.iter().zip(&users) {
        assert_eq!(s.not_queued, 0, "{user} was told its place was gone: {s:?}");
        assert!(s.other.is_empty(), "{user}: {s:?}");
        assert!(s.unavailable > 0, "{user} saw no outage: {s:?}");
    }
    assert_eq!(after, before, "every place kept, at the same arrival");
    let removed = metric(
        &first,
        "waitgate_cleanup_removed_total{queue=\"baseball\",reason=\"heartbeat_timeout\"}",
    ) + metric(
        &second,
        "waitgate_cleanup_removed_total{queue=\"baseball\",reason=\"heartbeat_timeout\"}",
    );
    assert_eq!(removed, 0.0);
    assert!(metric(&first, "waitgate_redis_incidents_total{kind=\"outage\"}") >= 1.0);
    let status = admin_status(&first);
    assert_eq!(status["lastIncident"]["kind"], "outage", "{status}");
    assert!(
        status["lastIncident"]["outOfReachMs"].as_u64().unwrap() >= 8_000,
        "{status}"
    );

    // The grace does not keep the silent: a user who stops polling now goes
    // within the timeout, the advice and a few cleanup passes.
    let (quiet, _) = &users[0];
    let started = Instant::now();
    wait_until("the silent user removed", Duration::from_secs(6), || {
        waiting(&redis).iter().all(|(u, _)| u != quiet)
    });
    println!(
        "a silent user went {:?} after the clients stopped",
        started.elapsed()
    );
}

/// A Redis that hangs (SIGSTOP) for many timeouts: no place lost either.
#[test]
fn a_hung_redis_loses_no_place() {
    let redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .queues(SHORT_HEARTBEATS)
        .start();
    let users = join(wg.addr, "h", 10);
    let _ = &users;
    let before = waiting(&redis);
    let pollers: Vec<Poller> = users
        .iter()
        .map(|(u, c)| Poller::start(vec![wg.addr], u.clone(), c.clone()))
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    redis.signal("STOP");
    std::thread::sleep(Duration::from_secs(6));
    redis.signal("CONT");
    std::thread::sleep(Duration::from_secs(7));
    let (seen, after) = stop_all(pollers, &redis);
    for s in &seen {
        assert_eq!(s.not_queued, 0, "{s:?}");
        assert!(s.unavailable > 0, "{s:?}");
    }
    assert_eq!(after, before);
    assert!(metric(&wg, "waitgate_redis_incidents_total{kind=\"outage\"}") >= 1.0);
}

/// The admin API's view of queue `baseball`.
fn admin_status(wg: &Waitgate) -> serde_json::Value {
    let r = admin(wg, "GET", "/admin/v1/queues/baseball", None);
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// Starts waitgate with the admin API on.
fn start_with_admin(config: &str, ports: &Ports) -> Waitgate {
    Waitgate::start_env(config, ports, &[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)])
}

/// Waitgate with `queues`, no upstream and the admin API on.
fn operated(redis: &Redis, queues: &str) -> Waitgate {
    TestConfig::on_free_ports(&redis.url(), free_port())
        .queues(queues)
        .start_env(&[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)])
}

/// Two queues: `baseball` for the operator's settings and the places,
/// `soccer` for an event schedule.
const OPERATED: &str = "baseball:
  heartbeat: {timeout-ms: 5000, poll-min-ms: 200, poll-max-ms: 1000, cleanup-interval-ms: 200}
  admission: {interval-ms: 200, batch-size: 2, active-ttl-ms: 60000}
soccer: {}";

/// Waits until the admin API shows a data loss for `queue`.
fn wait_for_data_loss(wg: &Waitgate, queue: &str) -> serde_json::Value {
    let mut status = serde_json::Value::Null;
    wait_until("the data loss noticed", Duration::from_secs(5), || {
        let r = admin(wg, "GET", &format!("/admin/v1/queues/{queue}"), None);
        status = r.json();
        status["lastIncident"]["kind"] == "data_loss"
    });
    status
}

/// Waits until the queue API answers again after Redis restarted: its
/// first call may meet the connection that died with the old Redis (the
/// probe drops it within a second).
fn wait_for_the_api(wg: &Waitgate) {
    wait_until("the queue API answers", Duration::from_secs(3), || {
        get(wg.addr, "/api/v1/queue/rank?queue=baseball&userId=nobody")
            .is_ok_and(|r| r.status == 404)
    });
}

/// A dropout from queue `baseball`.
fn leave(addr: SocketAddr, user: &str, credential: &str) -> Response {
    delete(
        addr,
        &format!("/api/v1/queue/dropout?queue=baseball&userId={user}"),
        &[("X-Queue-Credential", credential)],
    )
    .unwrap()
}

/// A rank poll of queue `baseball` with a credential.
fn rank_with(addr: SocketAddr, user: &str, credential: &str) -> Response {
    request(
        addr,
        "GET",
        &format!("/api/v1/queue/rank?queue=baseball&userId={user}"),
        &[("X-Queue-Credential", credential)],
        None,
    )
    .unwrap()
}

/// Redis restarts empty. What the operator set (a pause, a live batch size,
/// an event, a revocation) is written back before anybody is admitted, and
/// the waiting users who come back with their credential are seated again
/// in their order, ahead of everyone who joined since, once each; a user
/// who left, a tampered credential and a stranger are not.
#[test]
fn a_redis_that_lost_its_data_gets_the_operators_state_back_and_the_places_too() {
    let mut redis = Redis::start_free();
    let wg = operated(&redis, OPERATED);
    assert_eq!(
        admin(&wg, "POST", "/admin/v1/queues/baseball/pause", None).status,
        200
    );
    let r = patch_admission(&wg, r#"{"batchSize":1}"#);
    assert_eq!(r.status, 200, "{r:?}");
    let open_at = "2099-01-01T10:00:00Z";
    let r = admin(
        &wg,
        "PUT",
        "/admin/v1/queues/soccer/event",
        Some(&format!(
            r#"{{"prequeueFrom":"2099-01-01T09:00:00Z","openAt":"{open_at}","shuffle":true}}"#
        )),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = revoke(&wg, "mallory");
    assert_eq!(r.status, 200, "{r:?}");
    let waiting_before = join(wg.addr, "w", 4);
    let (gone, gone_credential) = &waiting_before[3];
    assert_eq!(leave(wg.addr, gone, gone_credential).status, 204);
    let order_before: Vec<String> = waiting(&redis).into_iter().map(|(u, _)| u).collect();
    assert_eq!(order_before, ["w00", "w01", "w02"]);
    // The instance's look each second learns all of it.
    std::thread::sleep(Duration::from_millis(1500));

    redis.restart();
    let status = wait_for_data_loss(&wg, "baseball");
    assert_eq!(status["paused"], true, "{status}");
    assert_eq!(status["admission"]["batchSize"], 1, "{status}");
    let soccer_status = wait_for_data_loss(&wg, "soccer");
    wait_for_the_api(&wg);
    assert_eq!(
        soccer_status["event"]["openAt"], "2099-01-01T10:00:00.000Z",
        "{soccer_status}"
    );
    let revoked: Option<f64> =
        redis::Commands::zscore(&mut redis.conn(), "queue:{baseball}:revoked", "mallory").unwrap();
    assert!(revoked.is_some(), "the revocation is written back");
    let r = register_in(wg.addr, "soccer", "early");
    assert_eq!(
        (r.status, &r.json()["error"]),
        (403, &serde_json::json!("queue_not_open"))
    );
    assert!(wg.log().contains("redis lost the queue's state"));

    // Still paused: newcomers wait.
    let newcomers = join(wg.addr, "n", 4);
    std::thread::sleep(Duration::from_millis(1000));
    let active: u64 = redis::Commands::zcard(&mut redis.conn(), ACTIVE_KEY).unwrap();
    assert_eq!(active, 0, "nobody admitted while paused");

    // The ones who waited come back with their credentials: ahead of the
    // newcomers, in their order.
    for (i, (user, credential)) in waiting_before[..3].iter().enumerate() {
        let r = rank_with(wg.addr, user, credential);
        assert_eq!(r.status, 200, "{user}: {r:?}");
        assert_eq!(r.json()["rank"], i, "{user}: {r:?}");
    }
    let order: Vec<String> = waiting(&redis).into_iter().map(|(u, _)| u).collect();
    let mut expected: Vec<String> = order_before.clone();
    expected.extend(newcomers.iter().map(|(u, _)| u.clone()));
    assert_eq!(order, expected);
    assert_eq!(
        metric(&wg, "waitgate_reseated_total{queue=\"baseball\"}"),
        3.0
    );

    // Not seated: the one who left, a tampered credential, a stranger with
    // none; each is told what a stranger is told.
    let stranger = get(wg.addr, "/api/v1/queue/rank?queue=baseball&userId=w09").unwrap();
    assert_eq!(stranger.status, 404);
    let r = rank_with(wg.addr, gone, gone_credential);
    assert_eq!(
        (r.status, r.error_code()),
        (404, stranger.error_code()),
        "{r:?}"
    );
    let mut tampered = gone_credential.clone().into_bytes();
    tampered[30] = if tampered[30] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let r = rank_with(wg.addr, gone, &tampered);
    assert_eq!(r.status, 404, "a tampered credential seats nobody: {r:?}");
    // Once each: w00 leaves, and its credential seats it no more.
    let (first, first_credential) = &waiting_before[0];
    assert_eq!(leave(wg.addr, first, first_credential).status, 204);
    let r = rank_with(wg.addr, first, first_credential);
    assert_eq!(r.status, 404, "{r:?}");
}

/// Redis restarts empty while three tokens of `max-active: 3` are out: no
/// one more is admitted while they may be in use (the hold shows in the
/// admin API and the metrics) until an operator resumes.
#[test]
fn a_redis_that_lost_its_data_keeps_the_cap_until_resumed() {
    let mut redis = Redis::start_free();
    let wg = operated(
        &redis,
        "baseball:
  admission: {interval-ms: 200, batch-size: 3, max-active: 3, active-ttl-ms: 60000}",
    );
    let admitted = join(wg.addr, "a", 3);
    wait_until("three admitted", Duration::from_secs(5), || {
        redis::Commands::zcard::<_, u64>(&mut redis.conn(), ACTIVE_KEY).unwrap() == 3
    });
    std::thread::sleep(Duration::from_millis(1500));
    redis.restart();
    let status = wait_for_data_loss(&wg, "baseball");
    assert_eq!(status["hold"]["slots"], 3, "{status}");
    let later = join(wg.addr, "b", 4);
    std::thread::sleep(Duration::from_secs(2));
    let active: u64 = redis::Commands::zcard(&mut redis.conn(), ACTIVE_KEY).unwrap();
    assert_eq!(active, 0, "the cap holds the slots of the tokens out");
    assert_eq!(
        metric(&wg, "waitgate_admission_held_slots{queue=\"baseball\"}"),
        3.0
    );
    assert!(metric(&wg, "waitgate_redis_incidents_total{kind=\"data_loss\"}") >= 1.0);
    // An admitted user's credential seats nobody: the frontier was kept.
    let (user, credential) = &admitted[0];
    let r = rank_with(wg.addr, user, credential);
    assert_eq!(r.status, 404, "{r:?}");

    assert_eq!(
        admin(&wg, "POST", "/admin/v1/queues/baseball/resume", None).status,
        200
    );
    wait_until("admitted after the resume", Duration::from_secs(3), || {
        redis::Commands::zcard::<_, u64>(&mut redis.conn(), ACTIVE_KEY).unwrap() == 3
    });
    let first: Vec<String> = redis::Commands::zrange(&mut redis.conn(), ACTIVE_KEY, 0, -1).unwrap();
    let mut first = first;
    first.sort();
    let expected: Vec<String> = later[..3].iter().map(|(u, _)| u.clone()).collect();
    assert_eq!(first, expected, "first come, first served");
    assert!(admin_status(&wg).get("hold").is_none());
}

/// What a property case does, in order.
#[derive(Debug, Clone)]
enum Step {
    Register(usize),
    Dropout(usize),
    Admit,
    /// A replica's copy of everything, for a later failover.
    Snapshot,
    /// The replica of the last snapshot becomes the master.
    Failover,
    /// A poll far back read the user's heartbeat on the old master, and
    /// its plain write reached the new one (see `Store::poll_many`).
    FailoverMidPoll(usize),
    /// The user left between such a poll's read and its write, and the
    /// check after the write never came (its call failed).
    LeftMidPoll(usize),
    /// A cleanup pass.
    Pass,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..6usize).prop_map(Step::Register),
        1 => (0..6usize).prop_map(Step::Dropout),
        1 => Just(Step::Admit),
        2 => Just(Step::Snapshot),
        1 => Just(Step::Failover),
        2 => (0..6usize).prop_map(Step::FailoverMidPoll),
        2 => (0..6usize).prop_map(Step::LeftMidPoll),
        1 => Just(Step::Pass),
    ]
}

const DUE: &str = "queue:{baseball}:due";
const DUES: &str = "queue:{baseball}:dues";

/// A poll far back as the instance makes it in plain commands: given the
/// heartbeat it read, writes the next one (due `advice_ms` on, the same
/// arrival) and files the user in that time's bucket. Nothing checks that
/// the user still waits.
fn far_write(c: &mut redis::Connection, user: &str, read: &str, advice_ms: u64) {
    let arrival = read.split_once(':').map_or("0", |(_, a)| a);
    let now: (u64, u64) = redis::cmd("TIME").query(c).unwrap();
    let due = now.0 * 1000 + now.1 / 1000 + advice_ms;
    let bucket = (due / 20 + 1) * 20;
    let _: () = redis::pipe()
        .cmd("RPUSH")
        .arg(format!("{DUES}:{bucket}"))
        .arg(user)
        .ignore()
        .cmd("ZADD")
        .arg(DUES)
        .arg(bucket)
        .arg(bucket)
        .ignore()
        .cmd("HSET")
        .arg(DUE)
        .arg(user)
        .arg(format!("{due}:{arrival}"))
        .ignore()
        .query(c)
        .unwrap();
}

/// Every key, as a replica would hold it.
fn snapshot(c: &mut redis::Connection) -> Vec<(String, Vec<u8>)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    keys.into_iter()
        .filter_map(|k| {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(&k).query(c).unwrap();
            dump.map(|d| (k, d))
        })
        .collect()
}

fn fail_over(c: &mut redis::Connection, replica: &[(String, Vec<u8>)]) {
    let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    for (key, dump) in replica {
        let _: () = redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(dump)
            .query(c)
            .unwrap();
    }
}

/// Failovers to replicas that were behind, interleaved with registrations,
/// dropouts, admissions, polls far back whose read and write straddle a
/// failover or a departure, and cleanup passes: afterwards, while everyone
/// who still has a heartbeat keeps polling as the instance does far back
/// (trusting the heartbeat), one cleanup pass past the timeout leaves no
/// heartbeat without a place behind it.
#[test]
fn no_heartbeat_outlives_its_place_across_failovers() {
    use proptest::test_runner::{Config as Cases, TestRunner};
    use waitgate::config::Config;
    use waitgate::queues::Queues;
    use waitgate::store::Store;

    let redis = Redis::start_free();
    let config = Config::from_yaml(&format!(
        "redis: {{url: '{}'}}
queues:
  baseball:
    heartbeat: {{timeout-ms: 40, poll-min-ms: 20, poll-max-ms: 40, cleanup-interval-ms: 10, outage-grace-ms: 0}}
    admission: {{interval-ms: 10, batch-size: 1}}
upstreams: {{}}
routes: []
",
        redis.url()
    ))
    .unwrap();
    let queues = Queues::new(&config);
    let queue = queues.iter().next().unwrap().clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(async { Store::new(&config.redis).unwrap() });
    let conn = std::cell::RefCell::new(redis.conn());
    let mut runner = TestRunner::new(Cases {
        cases: 40,
        ..Cases::default()
    });
    let pass = |crowd_first: bool| {
        runtime.block_on(async {
            let (mut from, mut crowd) = (None, crowd_first);
            loop {
                let done = store
                    .cleanup(&queue.keys, &queue.config.heartbeat, from, crowd)
                    .await
                    .unwrap();
                if !done.more {
                    break;
                }
                (from, crowd) = (done.next, done.crowd);
            }
        })
    };
    runner
        .run(
            &(
                proptest::collection::vec(step(), 1..30),
                proptest::bool::ANY,
            ),
            |(steps, crowd)| {
                let mut c = conn.borrow_mut();
                let c = &mut *c;
                let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
                give_state(c, "baseball");
                let mut replica = snapshot(c);
                let user = |i: usize| format!("p{i}");
                for step in &steps {
                    match step {
                        Step::Register(i) => {
                            runtime
                                .block_on(store.register(
                                    queue.store_ref(),
                                    waitgate::store::Joining {
                                        user: &user(*i),
                                        spends: &[],
                                    },
                                ))
                                .unwrap();
                        }
                        Step::Dropout(i) => {
                            let arrival: Option<f64> =
                                redis::Commands::zscore(c, WAITING_KEY, user(*i)).unwrap();
                            if let Some(arrival) = arrival {
                                runtime
                                    .block_on(store.dropout(&queue.keys, &user(*i), arrival as u64))
                                    .unwrap();
                            }
                        }
                        Step::Admit => {
                            let _ = runtime.block_on(store.admit(queue.store_ref(), (0, 0)));
                        }
                        Step::Snapshot => replica = snapshot(c),
                        Step::Failover => fail_over(c, &replica),
                        Step::FailoverMidPoll(i) => {
                            let read: Option<String> =
                                redis::Commands::hget(c, DUE, user(*i)).unwrap();
                            fail_over(c, &replica);
                            if let Some(read) = read {
                                far_write(c, &user(*i), &read, 40);
                            }
                        }
                        Step::LeftMidPoll(i) => {
                            let read: Option<String> =
                                redis::Commands::hget(c, DUE, user(*i)).unwrap();
                            let arrival: Option<f64> =
                                redis::Commands::zscore(c, WAITING_KEY, user(*i)).unwrap();
                            if let (Some(read), Some(arrival)) = (read, arrival) {
                                runtime
                                    .block_on(store.dropout(&queue.keys, &user(*i), arrival as u64))
                                    .unwrap();
                                far_write(c, &user(*i), &read, 40);
                            }
                        }
                        Step::Pass => pass(false),
                    }
                }
                // Everyone with a heartbeat polls on, as far back, for
                // longer than the advice, the timeout and a bucket; the
                // cleanup passes meanwhile.
                repeat_for(Duration::from_millis(200), || {
                    let polled: Vec<(String, String)> = redis::Commands::hgetall(c, DUE).unwrap();
                    for (u, read) in polled {
                        far_write(c, &u, &read, 40);
                    }
                    pass(crowd);
                    std::thread::sleep(Duration::from_millis(10));
                });
                let hearts: Vec<String> = redis::Commands::hkeys(c, DUE).unwrap();
                let places: Vec<String> = redis::Commands::zrange(c, WAITING_KEY, 0, -1).unwrap();
                let strays: Vec<&String> = hearts.iter().filter(|u| !places.contains(u)).collect();
                proptest::prop_assert!(strays.is_empty(), "heartbeats with no place: {strays:?}");
                Ok(())
            },
        )
        .unwrap();
}

/// A Redis that keeps nothing across a restart is named at start and by
/// `/healthz/redis` (still up: a warning, not a failure); one with an AOF
/// is not.
#[test]
fn a_redis_that_keeps_nothing_is_named_at_start_and_by_its_health_check() {
    let forgetful = Redis::start();
    let wg = TestConfig::on_free_ports(&forgetful.url(), free_port()).start();
    wg.wait_for_log("redis keeps no data across a restart", 1);
    let r = get(wg.admin, "/healthz/redis").unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let warnings = r.json()["warnings"].clone();
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .contains("keeps no data across a restart"),
        "{warnings}"
    );

    let keeping = Redis::start_with(&["--appendonly", "yes"]);
    let wg = TestConfig::on_free_ports(&keeping.url(), free_port()).start();
    let r = get(wg.admin, "/healthz/redis").unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["warnings"], serde_json::json!([]), "{r:?}");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!wg.log().contains("redis cannot keep"), "{}", wg.log());
}

/// A shuffled pre-queue was placed at the open, then Redis lost its data:
/// each pre-queued user who comes back is seated where the open placed
/// them (recomputed from the recorded seed), so the order is the same, and
/// a newcomer stands behind them all.
#[test]
fn a_placed_shuffled_prequeue_comes_back_in_the_same_order() {
    let mut redis = Redis::start_free();
    let wg = operated(
        &redis,
        "baseball:\n  admission: {interval-ms: 200, batch-size: 1}",
    );
    assert_eq!(
        admin(&wg, "POST", "/admin/v1/queues/baseball/pause", None).status,
        200
    );
    let now = redis.now_ms();
    schedule(&wg, Some(now), now + 2_000, true);
    let prequeued = join(wg.addr, "p", 12);
    wait_until("the pre-queue placed", Duration::from_secs(10), || {
        admin_status(&wg)["event"]["placed"].as_u64() == Some(12)
    });
    let placed: Vec<String> = waiting(&redis).into_iter().map(|(u, _)| u).collect();
    assert_eq!(placed.len(), 12);
    let by_arrival: Vec<String> = prequeued.iter().map(|(u, _)| u.clone()).collect();
    assert_ne!(placed, by_arrival, "shuffled");
    std::thread::sleep(Duration::from_millis(1500));

    redis.restart();
    wait_for_data_loss(&wg, "baseball");
    wait_for_the_api(&wg);
    let newcomer = join(wg.addr, "n", 1);
    for (user, credential) in &prequeued {
        let r = rank_with(wg.addr, user, credential);
        assert_eq!(r.status, 200, "{user}: {r:?}");
    }
    let order: Vec<String> = waiting(&redis).into_iter().map(|(u, _)| u).collect();
    let mut expected = placed.clone();
    expected.push(newcomer[0].0.clone());
    assert_eq!(order, expected);
}

/// Redis restarts empty with admission running (no pause, no cap): nobody
/// is admitted while the waiting users come back, each is seated again in
/// their order ahead of the newcomers, one who comes back late is still
/// seated where they were, those admitted before the loss are not, and
/// then admission goes on first come, first served, nobody twice.
#[test]
fn after_a_data_loss_the_waiting_come_back_in_order_while_admission_runs() {
    let mut redis = Redis::start_free();
    let wg = operated(
        &redis,
        "baseball:
  heartbeat: {timeout-ms: 5000, poll-min-ms: 200, poll-max-ms: 1000, outage-grace-ms: 2000}
  admission: {interval-ms: 500, batch-size: 1}",
    );
    let users = join(wg.addr, "w", 8);
    std::thread::sleep(Duration::from_millis(1500));
    let admitted_before: BTreeSet<String> =
        redis::Commands::zrange(&mut redis.conn(), ACTIVE_KEY, 0, -1).unwrap();
    let waiting_before: Vec<(String, String)> = users
        .iter()
        .filter(|(u, _)| !admitted_before.contains(u))
        .cloned()
        .collect();
    assert!(waiting_before.len() >= 3, "{admitted_before:?}");
    assert!(!admitted_before.is_empty());

    redis.restart();
    let lost_at = Instant::now();
    wait_for_data_loss(&wg, "baseball");
    wait_for_the_api(&wg);
    let newcomers = join(wg.addr, "n", 2);
    let (late, early) = waiting_before.split_last().unwrap();
    for (user, credential) in early {
        let r = rank_with(wg.addr, user, credential);
        assert_eq!(r.status, 200, "{user}: {r:?}");
    }
    for user in &admitted_before {
        let credential = &users.iter().find(|(u, _)| u == user).unwrap().1;
        let r = rank_with(wg.addr, user, credential);
        assert_eq!(r.status, 404, "{user} was admitted before the loss: {r:?}");
    }
    let active: u64 = redis::Commands::zcard(&mut redis.conn(), ACTIVE_KEY).unwrap();
    assert_eq!(active, 0, "nobody admitted while the waiting come back");
    // The late one comes back once admission has gone on.
    wait_until("admission going on", Duration::from_secs(6), || {
        redis::Commands::zcard::<_, u64>(&mut redis.conn(), ACTIVE_KEY).unwrap() >= 1
    });
    println!("admission went on {:?} after the loss", lost_at.elapsed());
    let r = rank_with(wg.addr, &late.0, &late.1);
    assert_eq!(r.status, 200, "the late one: {r:?}");
    wait_until("everyone admitted", Duration::from_secs(15), || {
        redis::Commands::zcard::<_, u64>(&mut redis.conn(), WAITING_KEY).unwrap() == 0
    });
    // By admission time (the expiry is admission time plus the TTL).
    let order: Vec<String> = redis::Commands::zrange(&mut redis.conn(), ACTIVE_KEY, 0, -1).unwrap();
    let mut expected: Vec<String> = waiting_before.iter().map(|(u, _)| u.clone()).collect();
    expected.extend(newcomers.iter().map(|(u, _)| u.clone()));
    assert_eq!(order, expected, "first come, first served, each once");
}

/// Without a loss of state, a poll whose credential names a registration
/// that left is answered 404 from the one call that found the user not
/// queued: Redis is not asked to seat them again (no second script call
/// names them), since only a registration older than a loss whose users
/// may still come back can have lost its place.
#[test]
fn a_user_who_left_polls_once_without_a_loss() {
    let redis = Redis::start_free();
    let wg = operated(&redis, OPERATED);
    let joined = join(wg.addr, "left", 2);
    let (user, credential) = &joined[0];
    assert_eq!(leave(wg.addr, user, credential).status, 204);
    // The other, still waiting, is answered as before (and rank.lua is
    // loaded: a first call of a script Redis does not hold is sent twice).
    let r = rank_with(wg.addr, &joined[1].0, &joined[1].1);
    assert_eq!(r.status, 200, "{}", r.text());
    redis.slowlog_from_now(0, 1000);
    let r = rank_with(wg.addr, user, credential);
    assert_eq!(r.status, 404, "{}", r.text());
    let ran = redis.commands_logged();
    let scripts: Vec<&Vec<String>> = ran
        .iter()
        .filter(|a| a[0].eq_ignore_ascii_case("evalsha") && a.contains(user))
        .collect();
    assert_eq!(scripts.len(), 1, "script calls naming {user}: {scripts:?}");
}

/// Redis lost everything a moment ago and no instance has noticed yet (its
/// look comes each second): a user who comes back with their credential is
/// seated again by that very poll, not told 404, because the call that
/// found them missing also found the state gone.
#[test]
fn a_user_back_before_the_loss_is_noticed_is_seated_again() {
    let redis = Redis::start_free();
    let wg = operated(&redis, OPERATED);
    assert_eq!(
        admin(&wg, "POST", "/admin/v1/queues/baseball/pause", None).status,
        200
    );
    let joined = join(wg.addr, "back", 2);
    // The instance's look learns the pause, which it writes back.
    std::thread::sleep(Duration::from_millis(1500));
    let () = redis::cmd("FLUSHALL").query(&mut redis.conn()).unwrap();
    let (user, credential) = &joined[0];
    let r = rank_with(wg.addr, user, credential);
    assert_eq!(r.status, 200, "{r:?} {}", r.text());
    assert_eq!(r.json()["rank"], 0, "{}", r.text());
}
