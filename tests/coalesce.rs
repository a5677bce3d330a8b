//! Coalesced Redis calls, over real HTTP against a real Redis: concurrent
//! polls and registrations of one queue share script calls, each client
//! still gets its own answer and keeps its order, and a lone call is not
//! held back; with `redis.coalesce: false` every request is its own call.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Script calls Redis has run since the last `CONFIG RESETSTAT`.
fn script_calls(redis: &Redis) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.conn())
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn reset_stats(redis: &Redis) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut redis.conn())
        .unwrap();
}

fn start(redis: &Redis, coalesce: bool) -> Waitgate {
    let ports = Ports::new();
    let config = config(&redis.url(), &ports, 1).replace(
        "  command-timeout-ms: 300\n",
        &format!("  command-timeout-ms: 300\n  coalesce: {coalesce}\n"),
    );
    assert!(config.contains("coalesce"), "{config}");
    Waitgate::start(&config, &ports)
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
                    let user = &users[(t * each + i) % users.len()];
                    client.send(&format!(
                        "GET /api/v1/queue/rank?userId={user} HTTP/1.1\r\nHost: t\r\n\r\n"
                    ));
                    let (head, body) = client.response();
                    assert_eq!(head.status, 200);
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    assert_eq!(v["userId"], user.as_str(), "another user's answer");
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
