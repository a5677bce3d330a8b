//! Redis outages: fast 503s, and recovery without a restart.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The harness config sets `command-timeout-ms: 300`; a 503 must come within
/// it, plus scheduling slack.
const FAST: Duration = Duration::from_millis(900);

fn assert_fast_503(addr: std::net::SocketAddr) {
    for (what, call) in [
        (
            "register",
            Box::new(move || register(addr, "u")) as Box<dyn Fn() -> Response>,
        ),
        ("rank", Box::new(move || rank(addr, "u"))),
        (
            "dropout",
            Box::new(move || dropout(addr, "u", &credential_for("u", 1_000_000))),
        ),
    ] {
        let start = Instant::now();
        let r = call();
        let took = start.elapsed();
        assert_eq!(r.status, 503, "{what}: {r:?}");
        assert_eq!(r.error_code(), "redis_unavailable", "{what}");
        assert!(r.header("retry-after").is_some(), "{what}: {:?}", r.headers);
        assert!(took < FAST, "{what} took {took:?}");
    }
}

/// Retries `register` until it answers 200, and returns how long that took.
fn recovers(addr: std::net::SocketAddr, user: &str) -> Duration {
    let start = Instant::now();
    wait_for("a recovery", Duration::from_secs(10), || {
        let r = register(addr, user);
        assert!(r.status == 200 || r.status == 503, "{r:?}");
        (r.status == 200).then(|| start.elapsed())
    })
}

#[test]
fn redis_down_gives_fast_503_and_a_restart_is_recovered_from() {
    let mut redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    assert_eq!(register(wg.addr, "before").status, 200);
    assert_eq!(get(wg.admin, "/readyz").unwrap().status, 200);

    redis.kill();
    assert_fast_503(wg.addr);
    assert_eq!(get(wg.admin, "/healthz/redis").unwrap().status, 503);
    // Still ready: admitted users need no Redis.
    assert_eq!(get(wg.admin, "/readyz").unwrap().status, 200);
    assert_eq!(get(wg.admin, "/healthz").unwrap().status, 200);

    // The new Redis is empty: no data and no scripts loaded (NOSCRIPT).
    redis.restart();
    let took = recovers(wg.addr, "after");
    println!("recovered {took:?} after the restart");
    let r = rank(wg.addr, "after");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["rank"], 0);
    assert_eq!(get(wg.admin, "/healthz/redis").unwrap().status, 200);
}

#[test]
fn flushed_script_cache_is_reloaded() {
    let redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    assert_eq!(register(wg.addr, "a").status, 200);
    let mut c = redis.conn();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    let r = register(wg.addr, "b");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["rank"], 1);
}

#[test]
fn hung_redis_gives_fast_503_then_recovers() {
    let redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    assert_eq!(register(wg.addr, "before").status, 200);

    redis.signal("STOP");
    assert_fast_503(wg.addr);
    let start = Instant::now();
    assert_eq!(get(wg.admin, "/healthz/redis").unwrap().status, 503);
    assert!(start.elapsed() < FAST);

    redis.signal("CONT");
    recovers(wg.addr, "after");
    assert_eq!(rank(wg.addr, "before").json()["rank"], 0);
}

/// A crowd at a hung Redis: every poll still gets its 503 within the
/// command timeout, with or without coalesced calls (coalesced, the polls
/// queued behind a hung call fail with it instead of going one batch after
/// another).
#[test]
fn a_crowd_of_polls_at_a_hung_redis_gets_fast_503s() {
    const CROWD: usize = 1_000;
    let redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    assert_eq!(register(wg.addr, "u").status, 200);
    redis.signal("STOP");
    let go = std::sync::Arc::new(std::sync::Barrier::new(CROWD));
    let threads: Vec<_> = (0..CROWD)
        .map(|_| {
            let go = go.clone();
            let addr = wg.addr;
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let mut client = Client::connect(addr);
                    go.wait();
                    let start = Instant::now();
                    client.send("GET /api/v1/queue/rank?userId=u HTTP/1.1\r\nHost: t\r\n\r\n");
                    let status = client.response().0.status;
                    (status, start.elapsed())
                })
                .unwrap()
        })
        .collect();
    let answers: Vec<(u16, Duration)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    redis.signal("CONT");
    let slowest = answers.iter().map(|a| a.1).max().unwrap();
    println!("{CROWD} polls at a hung Redis: the slowest 503 after {slowest:?}");
    assert!(
        answers.iter().all(|a| a.0 == 503),
        "every poll gets its 503"
    );
    assert!(slowest < FAST, "the slowest took {slowest:?}");
}

#[test]
fn waitgate_starts_without_redis_and_serves_once_it_comes() {
    let mut redis = Redis::start();
    redis.kill();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    assert_fast_503(wg.addr);
    assert_eq!(get(wg.admin, "/healthz/redis").unwrap().status, 503);
    redis.restart();
    recovers(wg.addr, "late");
}

/// A Redis over `maxmemory` (with the default `noeviction`) takes no
/// registration, nor a poll that must write its heartbeat: each is a fast
/// 503 and nothing changes, even for a user whose earlier active state ran
/// out and is forgotten on the way (a removal alone would not be refused,
/// and would let the rest of the call through), alone or in a batch with
/// others. The failures are logged at most about once a second, not once a
/// request. A dropout, which frees memory, is taken.
#[test]
fn a_full_redis_takes_no_registration_and_changes_nothing() {
    let redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    hold_gate(&redis);
    assert_eq!(register(wg.addr, "before").status, 200);
    let leaver = register(wg.addr, "leaver").json()["queueCredential"]
        .as_str()
        .unwrap()
        .to_string();
    let mut c = redis.conn();
    // A heartbeat long due: the next poll must write one.
    let _: () = redis::Commands::hset(&mut c, "queue:{baseball}:due", "before", 1).unwrap();
    // Users whose active state ran out and was not cleaned up yet.
    let ran_out: Vec<String> = (0..8).map(|i| format!("ran-out-{i}")).collect();
    for user in &ran_out {
        let _: () = redis::Commands::zadd(&mut c, ACTIVE_KEY, user, 1).unwrap();
        let _: () = redis::Commands::hset(&mut c, CREDENTIAL_KEY, user, 1).unwrap();
    }
    let dump = |c: &mut redis::Connection| -> Vec<(String, String)> {
        let mut keys: Vec<String> = redis::Commands::keys(c, "*").unwrap();
        keys.sort();
        // Cleanup may forget the run-out active states meanwhile: a removal
        // is what a full Redis still allows.
        keys.into_iter()
            .filter(|k| k != ACTIVE_KEY && k != CREDENTIAL_KEY)
            .map(|k| {
                let dumped: Vec<u8> = redis::cmd("DUMP").arg(&k).query(c).unwrap();
                (k, format!("{dumped:?}"))
            })
            .collect()
    };
    redis.config_set("maxmemory", 1);
    let before = dump(&mut c);

    // One at a time, and a poll that must write its heartbeat.
    for (user, call) in [
        (
            "new",
            register as fn(std::net::SocketAddr, &str) -> Response,
        ),
        (&ran_out[0], register),
        ("before", rank),
    ] {
        let start = Instant::now();
        let r = call(wg.addr, user);
        assert_eq!(r.status, 503, "{user}: {r:?}");
        assert_eq!(r.error_code(), "redis_unavailable", "{user}");
        assert!(start.elapsed() < FAST, "{user} took {:?}", start.elapsed());
    }
    // Together, so that they share calls: each batch starts with a user
    // whose active state ran out.
    let threads: Vec<_> = (0..64)
        .map(|i| {
            let user = if i % 8 == 0 {
                ran_out[i / 8].clone()
            } else {
                format!("crowd-{i}")
            };
            let addr = wg.addr;
            std::thread::spawn(move || (register(addr, &user).status, user))
        })
        .collect();
    for t in threads {
        let (status, user) = t.join().unwrap();
        assert_eq!(status, 503, "{user}");
    }
    assert_eq!(dump(&mut c), before, "a full Redis was changed");
    // Leaving frees memory, and is taken.
    let r = dropout(wg.addr, "leaver", &leaver);
    assert_eq!(r.status, 204, "{r:?}");
    let waits: Option<f64> = redis::Commands::zscore(&mut c, WAITING_KEY, "leaver").unwrap();
    assert_eq!(waits, None);
    let log = wg.log();
    let logged = log.lines().filter(|l| l.contains("OOM")).count();
    assert!(
        logged <= 3,
        "{logged} lines for 66 refused calls in about a second:\n{log}"
    );

    redis.config_set("maxmemory", 0);
    let r = register(wg.addr, &ran_out[1]);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["rank"], 1);
    assert_eq!(rank(wg.addr, "before").status, 200);
    let active: Option<f64> = redis::Commands::zscore(&mut c, ACTIVE_KEY, &ran_out[1]).unwrap();
    assert_eq!(active, None, "the run-out active state is forgotten");
}

/// Waits until the probe reports Redis `up` (or down), as an operator or a
/// load balancer would read it.
fn wait_for_redis_up(wg: &Waitgate, up: bool) {
    let line = format!("\nwaitgate_redis_up {}\n", u8::from(up));
    wg.wait_for_metrics(&line, Duration::from_secs(10));
}

/// Once Redis is back and the instance reports it up, the very first calls
/// are answered: no 503 from a connection that died with the old Redis, nor
/// from a reconnection that failed while it was down. Both kinds of outage:
/// one nobody called through, and one the calls kept meeting.
#[test]
fn the_first_calls_after_redis_comes_back_are_answered() {
    let mut redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    assert_eq!(register(wg.addr, "before").status, 200);
    assert_eq!(rank(wg.addr, "before").status, 200);
    for (round, called_while_down) in [(1, false), (2, true)] {
        redis.kill();
        wait_for_redis_up(&wg, false);
        if called_while_down {
            assert_fast_503(wg.addr);
        }
        redis.restart();
        wait_for_redis_up(&wg, true);
        let user = format!("after-{round}");
        let r = register(wg.addr, &user);
        assert_eq!(r.status, 200, "round {round}, the first register: {r:?}");
        let r = rank(wg.addr, &user);
        assert_eq!(r.status, 200, "round {round}, the first rank: {r:?}");
        assert_eq!(r.json()["rank"], 0, "round {round}");
    }
}
