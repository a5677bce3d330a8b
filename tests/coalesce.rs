//! Coalesced Redis calls, over real HTTP against a real Redis: concurrent
//! polls and registrations of one queue share script calls, each client
//! still gets its own answer and keeps its order, and a lone call is not
//! held back; with `redis.coalesce: false` every request is its own call.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Commands;

/// Script calls Redis has run since the last `CONFIG RESETSTAT`.
fn script_calls(redis: &Redis) -> u64 {
    let stats = redis.info("commandstats");
    calls_in(&stats, "evalsha") + calls_in(&stats, "eval")
}

fn reset_stats(redis: &Redis) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut redis.conn())
        .unwrap();
}

fn start(redis: &Redis, coalesce: bool) -> Waitgate {
    start_with(redis, "redis.coalesce", &coalesce.to_string())
}

/// An instance on `redis` with one setting changed.
fn start_with(redis: &Redis, path: &str, yaml: &str) -> Waitgate {
    let ports = Ports::new();
    let config = TestConfig::new(&redis.url(), &ports, 1)
        .set(path, yaml)
        .yaml();
    Waitgate::start(&config, &ports)
}

/// One rank poll of `user` on `client`, whose answer must be `user`'s.
fn poll_own(client: &mut Client, user: &str) {
    client.send(&format!(
        "GET /api/v1/queue/rank?userId={user} HTTP/1.1\r\nHost: t\r\n\r\n"
    ));
    let (head, body) = client.response();
    assert_eq!(head.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["userId"], user, "another user's answer");
}

/// `clients` kept-alive connections each send `each` rank polls of the
/// users `users`, round robin; every answer must be its own user's.
fn poll_concurrently(wg: &Waitgate, users: &[String], clients: usize, each: usize) {
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let addr = wg.addr;
            let users = users.to_vec();
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                for i in 0..each {
                    poll_own(&mut client, &users[(t * each + i) % users.len()]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn concurrent_polls_share_script_calls_and_each_gets_its_own_answer() {
    let redis = Redis::start();
    let wg = start(&redis, true);
    let users: Vec<String> = (0..100).map(|i| format!("fan_{i}")).collect();
    for user in &users {
        register_new(wg.addr, user);
    }
    reset_stats(&redis);
    let (clients, each) = (64, 30);
    poll_concurrently(&wg, &users, clients, each);
    let polls = (clients * each) as u64;
    let calls = script_calls(&redis);
    println!(
        "{polls} polls from {clients} clients: {calls} script calls ({:.2} per poll)",
        calls as f64 / polls as f64
    );
    assert!(calls * 2 < polls, "{calls} calls for {polls} polls");

    // Uncoalesced, on the same Redis: a call per poll.
    let plain = start(&redis, false);
    reset_stats(&redis);
    poll_concurrently(&plain, &users, 16, 10);
    // 160 polls, and a few calls of the background tasks.
    let calls = script_calls(&redis);
    assert!((160..=180).contains(&calls), "{calls} calls for 160 polls");
}

#[test]
fn a_lone_poll_is_not_held_back() {
    let redis = Redis::start();
    let coalesced = start(&redis, true);
    let plain = start(&redis, false);
    register_new(coalesced.addr, "alone");
    // Sequential polls on one connection each: nothing to wait for. The two
    // instances are polled in turn so that whatever else the machine is doing
    // weighs on both alike.
    let poll = |client: &mut Client| {
        let started = Instant::now();
        client.send("GET /api/v1/queue/rank?userId=alone HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(client.response().0.status, 200);
        started.elapsed()
    };
    reset_stats(&redis);
    let (mut to_coalesced, mut to_plain) =
        (Client::connect(coalesced.addr), Client::connect(plain.addr));
    let (mut with, mut without): (Vec<Duration>, Vec<Duration>) = (0..300)
        .map(|_| (poll(&mut to_coalesced), poll(&mut to_plain)))
        .unzip();
    with.sort();
    without.sort();
    let (median, p99) = (
        |v: &[Duration]| v[v.len() / 2],
        |v: &[Duration]| v[v.len() * 99 / 100],
    );
    println!(
        "a lone poll: median {:?} coalesced, {:?} not; p99 {:?} coalesced, {:?} not",
        median(&with),
        median(&without),
        p99(&with),
        p99(&without)
    );
    // One call per lone poll, and a few of the background tasks'.
    let calls = script_calls(&redis);
    assert!(
        (600..=630).contains(&calls),
        "{calls} calls for 600 lone polls"
    );
    // A gathering window would delay every lone poll by its length, so it
    // shows in the median, which a busy machine leaves alone.
    assert!(
        median(&with) < median(&without) + Duration::from_micros(500),
        "median {:?} against {:?}",
        median(&with),
        median(&without)
    );
}

/// Rank calls an instance has made (`waitgate_redis_batch_users`).
fn rank_calls(wg: &Waitgate) -> u64 {
    wg.metric(r#"waitgate_redis_batch_users_count{call="rank"}"#)
        .unwrap_or(0)
}

/// `clients` connections poll `users` in turn for `during`, each answer
/// its own user's; returns the polls made.
fn poll_for(wg: &Waitgate, users: &[String], clients: usize, during: Duration) -> usize {
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let (addr, users) = (wg.addr, users.to_vec());
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                let started = Instant::now();
                let mut polls = 0;
                while started.elapsed() < during {
                    poll_own(&mut client, &users[(t + polls) % users.len()]);
                    polls += 1;
                }
                polls
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).sum()
}

#[test]
fn polls_that_keep_coming_are_gathered_into_a_call_a_pace() {
    let redis = Redis::start();
    let (unpaced, paced) = (
        start_with(&redis, "redis.poll-pace-ms", "0"),
        start_with(&redis, "redis.poll-pace-ms", "100"),
    );
    let users: Vec<String> = (0..50).map(|i| format!("paced_{i}")).collect();
    for user in &users {
        register_new(unpaced.addr, user);
    }
    let during = Duration::from_millis(1500);
    let mut made = Vec::new();
    for wg in [&unpaced, &paced] {
        let before = rank_calls(wg);
        let polls = poll_for(wg, &users, 16, during);
        let calls = rank_calls(wg) - before;
        println!("{polls} polls from 16 clients in {during:?}: {calls} rank calls");
        made.push((polls, calls));
    }
    let ((_, unpaced_calls), (paced_polls, paced_calls)) = (made[0], made[1]);
    // A pace (100 ms) between the calls that follow one another. These
    // clients each wait for their answer, so all of them are often in one
    // call, and the next poll then finds none under way and goes at once:
    // the calls are counted by the polls they carry, not against the pace.
    assert!(
        paced_polls >= 5 * paced_calls as usize,
        "{paced_polls} polls in {paced_calls} rank calls paced"
    );
    assert!(paced_polls >= 100, "{paced_polls} polls paced");
    assert!(
        unpaced_calls > 5 * paced_calls,
        "{unpaced_calls} calls unpaced, {paced_calls} paced"
    );
    // Alone again, a poll goes at once.
    std::thread::sleep(Duration::from_millis(300));
    let mut client = Client::connect(paced.addr);
    let started = Instant::now();
    poll_own(&mut client, "paced_0");
    assert!(
        started.elapsed() < Duration::from_millis(80),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn coalesced_registrations_keep_each_clients_order() {
    let redis = Redis::start();
    let wg = start(&redis, true);
    reset_stats(&redis);
    let (clients, each) = (16, 40);
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let addr = wg.addr;
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                for i in 0..each {
                    let body = format!(r#"{{"userId":"c{t}_{i}"}}"#);
                    client.send(&format!(
                        "POST /api/v1/queue/register HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    ));
                    let (head, body) = client.response();
                    assert_eq!(head.status, 200);
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    assert_eq!(v["userId"], format!("c{t}_{i}"));
                    assert!(v["queueCredential"].is_string());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let calls = script_calls(&redis);
    println!("{} registrations: {calls} script calls", clients * each);
    let order: Vec<String> =
        redis::Commands::zrange(&mut redis.conn(), WAITING_KEY, 0, -1).unwrap();
    assert_eq!(order.len(), clients * each, "nobody lost or doubled");
    for t in 0..clients {
        let mine: Vec<&String> = order
            .iter()
            .filter(|u| u.starts_with(&format!("c{t}_")))
            .collect();
        let expected: Vec<String> = (0..each).map(|i| format!("c{t}_{i}")).collect();
        assert_eq!(
            mine.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            expected.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            "client {t}'s registrations out of order"
        );
    }
}

/// `script` (a `register.lua` with the library before it) called on queue
/// `q` with `users`, with the settings the tests use; its flat answer.
fn eval_register(c: &mut redis::Connection, script: &str, q: &str, users: &[&str]) -> Vec<i64> {
    give_state(c, q);
    let mut call = register_eval(script, q);
    // Numbered, and no proofs of work.
    call.arg(3000)
        .arg(100)
        .arg(3_600_000)
        .arg(1000)
        .arg(30_000)
        .arg(1)
        .arg(0);
    call.arg(users).query(c).unwrap()
}

/// `register.lua` as waitgate runs it, called on queue `q` with `users`.
fn register_script(c: &mut redis::Connection, q: &str, users: &[&str]) -> Vec<[i64; 6]> {
    let flat = eval_register(c, REGISTER_LUA, q, users);
    assert_eq!(flat.len(), 6 * users.len());
    flat.chunks(6)
        .map(|a| [a[0], a[1], a[2], a[3], a[4], a[5]])
        .collect()
}

/// One call with a batch of registrations answers each as the same
/// registrations one call each would, in order: new users at the tail, a
/// user named twice in the batch and one already waiting keep their place,
/// an admitted user is told so, and one whose active state ran out joins
/// anew. (New users of a batch are looked up and added with one call each
/// for the whole batch; the others take the per-user path.)
#[test]
fn a_batch_of_registrations_answers_as_the_same_registrations_one_call_each() {
    let redis = Redis::start();
    let mut c = redis.conn();
    let now = redis.now_ms();
    for q in ["batch", "single"] {
        let k = |key: &str| format!("queue:{{{q}}}:{key}");
        let () = redis::pipe()
            .zadd(k("waiting"), "w", 100)
            .hset(k("due"), "w", format!("{}:100", now + 3_600_000))
            .zadd(k("active"), "x", now + 600_000)
            .hset(k("credential"), "x", 5)
            .zadd(k("active"), "y", now - 1000)
            .hset(k("credential"), "y", 6)
            .query(&mut c)
            .unwrap();
    }
    let users = ["a", "b", "a", "w", "x", "y", "c", "b"];
    let batch = register_script(&mut c, "batch", &users);
    let single: Vec<[i64; 6]> = users
        .iter()
        .map(|u| register_script(&mut c, "single", &[u])[0])
        .collect();

    // code and rank (or the active state's expiry) per user, in order.
    let expected = [
        (1, 1),
        (1, 2),
        (2, 1),
        (2, 0),
        (3, now as i64 + 600_000),
        (1, 3),
        (1, 4),
        (2, 2),
    ];
    for (answers, how) in [(&batch, "batch"), (&single, "single")] {
        let got: Vec<(i64, i64)> = answers.iter().map(|a| (a[0], a[1])).collect();
        assert_eq!(got, expected, "{how}: {answers:?}");
        // The admitted user's arrival is the admitted registration's.
        assert_eq!(answers[4][3], 5, "{how}");
        // A user named again is given the arrival of their first answer.
        assert_eq!(answers[2][3], answers[0][3], "{how}");
        assert_eq!(answers[7][3], answers[1][3], "{how}");
        let k = |key: &str| format!("queue:{{{how}}}:{key}");
        let order: Vec<(String, f64)> = c.zrange_withscores(k("waiting"), 0, -1).unwrap();
        let names: Vec<&str> = order.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(names, ["w", "a", "b", "y", "c"], "{how}");
        assert!(order.windows(2).all(|p| p[0].1 < p[1].1), "{how}");
        for (i, (user, score)) in order.iter().enumerate().skip(1) {
            let answer = users.iter().position(|u| u == user).unwrap();
            assert_eq!(answers[answer][3] as f64, *score, "{how} {user}");
            assert_eq!(answers[answer][1], i as i64, "{how} {user}");
            // `<due>:<arrival>`, and its number after it if it was given one.
            let due: String = c.hget(k("due"), user).unwrap();
            let number = answers[answer][5];
            let written = match number {
                0 => format!(":{}", *score as i64),
                n => format!(":{}:{n}", *score as i64),
            };
            assert!(due.ends_with(&written), "{how} {due}");
        }
        // The expired active state and its credential are gone; the live
        // one stays.
        let active: Vec<String> = c.zrange(k("active"), 0, -1).unwrap();
        assert_eq!(active, ["x"], "{how}");
        let credential: Option<String> = c.hget(k("credential"), "y").unwrap();
        assert_eq!(credential, None, "{how}");
        let joined: i64 = c.hget(k("admission"), "joined").unwrap();
        assert_eq!(joined, 4, "{how}");
    }
    // Both give the same codes, ranks, waits and advice.
    let strip = |a: &Vec<[i64; 6]>| {
        a.iter()
            .map(|x| (x[0], x[1], x[2], x[4]))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&batch), strip(&single));
}

/// Every key of queue `q`, by name without the queue's prefix, as text:
/// sets with their scores in order, hashes sorted, lists in order.
fn dump_queue(c: &mut redis::Connection, q: &str) -> Vec<(String, String)> {
    let prefix = format!("queue:{{{q}}}:");
    let mut keys: Vec<String> = c.keys(format!("{prefix}*")).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let kind: String = redis::cmd("TYPE").arg(&key).query(c).unwrap();
            let value = match kind.as_str() {
                "zset" => format!(
                    "{:?}",
                    c.zrange_withscores::<_, Vec<(String, f64)>>(&key, 0, -1)
                        .unwrap()
                ),
                "hash" => {
                    let mut all: Vec<(String, String)> = c.hgetall(&key).unwrap();
                    all.sort();
                    format!("{all:?}")
                }
                "list" => format!("{:?}", c.lrange::<_, Vec<String>>(&key, 0, -1).unwrap()),
                other => format!("({other})"),
            };
            (key[prefix.len()..].to_string(), value)
        })
        .collect()
}

/// Random queues and batches, with Redis's clock frozen in the script: a
/// batch of registrations answers and writes exactly what the same
/// registrations one call each do. Users are new, waiting (with a heartbeat
/// in either form, or one of the earlier versions' sorted set), admitted,
/// admitted with the state run out, or waiting and run out, and may be
/// named several times in a batch; the waiting set's tail may be past the
/// clock, and the gate slow enough that each place gets its own advice.
#[test]
fn random_batches_of_registrations_answer_and_write_as_one_call_each() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    const CLOCK: &str =
        "  local t = redis.call('TIME')\n  return tonumber(t[1]) * 1000000 + tonumber(t[2])";
    let lib = include_str!("../lua/lib.lua");
    assert!(
        lib.contains(CLOCK),
        "lib.lua reads the clock differently now"
    );
    let now_us: u64 = 1_800_000_000_000_000;
    let now = now_us / 1000;
    let script = format!(
        "{}\n{}",
        lib.replace(CLOCK, &format!("  return {now_us}")),
        include_str!("../lua/register.lua")
    );
    let redis = Redis::start();
    // The runner takes its test as `Fn`.
    let conn = std::cell::RefCell::new(redis.conn());
    // Per user of a pool of six: 0 new, 1 waiting (due:arrival), 2 waiting
    // (due alone), 3 waiting (earlier versions' heartbeat), 4 admitted,
    // 5 admitted and run out, 6 waiting and run out.
    let cases = (
        proptest::collection::vec(0u8..7, 6),
        proptest::collection::vec(0usize..6, 1..24),
        any::<bool>(),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 200,
        ..Config::default()
    });
    runner
        .run(&cases, |(roles, picks, tail_ahead, slow_gate)| {
            let mut c = conn.borrow_mut();
            let c = &mut *c;
            let _: () = redis::cmd("FLUSHDB").query(c).unwrap();
            for q in ["batch", "single"] {
                let k = |key: &str| format!("queue:{{{q}}}:{key}");
                let mut setup = redis::pipe();
                for (i, role) in roles.iter().enumerate() {
                    let user = format!("p{i}");
                    let arrival = 100 + i as u64;
                    let due = now + 20_000 + i as u64;
                    if matches!(role, 1..=3 | 6) {
                        setup.zadd(k("waiting"), &user, arrival).ignore();
                    }
                    match role {
                        1 | 6 => {
                            setup
                                .hset(k("due"), &user, format!("{due}:{arrival}"))
                                .ignore();
                        }
                        2 => {
                            setup.hset(k("due"), &user, due).ignore();
                        }
                        3 => {
                            setup.zadd(k("heartbeat"), &user, due).ignore();
                        }
                        _ => {}
                    }
                    if matches!(role, 4..=6) {
                        let expiry = if *role == 4 {
                            now + 600_000
                        } else {
                            now - 1000
                        };
                        setup.zadd(k("active"), &user, expiry).ignore();
                        setup.hset(k("credential"), &user, arrival).ignore();
                    }
                }
                if tail_ahead {
                    setup.zadd(k("waiting"), "tail", now_us + 5).ignore();
                }
                if slow_gate {
                    // Half a user a window: each place further back is
                    // advised a later poll.
                    setup.hset(k("admission"), "rate", 0.5).ignore();
                }
                let () = setup.query(c).unwrap();
            }
            let users: Vec<String> = picks.iter().map(|i| format!("p{i}")).collect();
            let users: Vec<&str> = users.iter().map(String::as_str).collect();
            let batch = eval_register(c, &script, "batch", &users);
            let single: Vec<i64> = users
                .iter()
                .flat_map(|u| eval_register(c, &script, "single", &[u]))
                .collect();
            prop_assert_eq!(&batch, &single, "roles {:?} batch {:?}", roles, users);
            prop_assert_eq!(
                dump_queue(c, "batch"),
                dump_queue(c, "single"),
                "roles {:?} batch {:?}",
                roles,
                users
            );
            Ok(())
        })
        .unwrap();
}
