//! Proof of work (`queues.<q>.challenge`), through real connections on both
//! HTTP paths: the challenge endpoint, a register refused without a proof
//! (403 `proof_required`, no Redis call), a solved proof taking one place
//! and only once, a wrong, expired, forged or malformed one refused as
//! `proof_invalid`, the refusals counted, and a reload that raises the
//! difficulty holding from the next register.

mod common;

use std::time::Duration;

use common::*;
use redis::Commands;
use sha2::{Digest, Sha256};
use waitgate::edge::secret::Secret;
use waitgate::entry::challenge::Challenges;

const WAITING: &str = "queue:{baseball}:waiting";

fn with_challenge(redis: &Redis, challenge: &str) -> Waitgate {
    TestConfig::on_free_ports(&redis.url(), free_port())
        .set("queues.baseball.challenge", challenge)
        .start()
}

/// A challenge from the endpoint: its text and difficulty.
fn challenge(wg: &Waitgate) -> (String, u32) {
    let r = get(wg.addr, "/api/v1/queue/challenge?queue=baseball").unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    (
        v["challenge"].as_str().unwrap().to_string(),
        v["difficultyBits"].as_u64().unwrap() as u32,
    )
}

/// A `<challenge>:<nonce>` that does not answer it.
fn unsolved(challenge: &str, bits: u32) -> String {
    (0u64..)
        .map(|n| format!("{challenge}:{n}"))
        .find(|p| leading_zero_bits(&Sha256::digest(p.as_bytes())) < bits)
        .unwrap()
}

fn register_with(wg: &Waitgate, user: &str, proof: Option<&str>) -> Response {
    let headers: Vec<_> = proof.map(|p| ("X-Waitgate-Proof", p)).into_iter().collect();
    let body = serde_json::json!({ "userId": user, "queue": "baseball" });
    register_sending(wg.addr, body, &headers)
}

fn refused(wg: &Waitgate, reason: &str) -> u64 {
    wg.metric(&format!(
        "waitgate_proof_refused_total{{queue=\"baseball\",reason=\"{reason}\"}}"
    ))
    .unwrap_or(0)
}

fn waiting(redis: &Redis) -> u64 {
    redis.conn().zcard(WAITING).unwrap()
}

/// Places taken, waiting or admitted, read in one transaction: two reads
/// apart would count a user admitted between them twice.
fn places(redis: &Redis) -> u64 {
    let (waiting, active): (u64, u64) = redis::pipe()
        .atomic()
        .zcard(WAITING)
        .zcard(ACTIVE_KEY)
        .query(&mut redis.conn())
        .unwrap();
    waiting + active
}

#[test]
fn the_challenge_endpoint_issues_fresh_challenges_at_the_queues_difficulty() {
    let mut redis = Redis::start_free();
    let wg = with_challenge(&redis, "{difficulty-bits: 10, ttl-ms: 30000}");
    let r = get(wg.addr, "/api/v1/queue/challenge?queue=baseball").unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    let v = r.json();
    assert_eq!(v["difficultyBits"], 10);
    assert_eq!(v["expiresInMs"], 30_000);
    let first = v["challenge"].as_str().unwrap().to_string();
    // The queue may be left out when there is one; each is new.
    let r = get(wg.addr, "/api/v1/queue/challenge").unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_ne!(r.json()["challenge"].as_str().unwrap(), first);
    // Issuing one costs Redis nothing: it goes on with Redis gone.
    redis.kill();
    let r = get(wg.addr, "/api/v1/queue/challenge?queue=baseball").unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        get(wg.addr, "/api/v1/queue/challenge?queue=nope")
            .unwrap()
            .error_code(),
        "unknown_queue"
    );
    let r = post_json(wg.addr, "/api/v1/queue/challenge?queue=baseball", "{}").unwrap();
    assert_eq!(r.status, 405, "{r:?}");
}

#[test]
fn a_queue_without_a_challenge_answers_the_endpoint_with_zero_bits_and_takes_registers_as_before() {
    let redis = Redis::start_free();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    let r = get(wg.addr, "/api/v1/queue/challenge?queue=baseball").unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["difficultyBits"], 0);
    assert_eq!(register_with(&wg, "u1", None).status, 200);
}

#[test]
fn a_register_without_a_proof_is_refused_before_redis() {
    let redis = Redis::start_free();
    let wg = with_challenge(&redis, "{difficulty-bits: 8}");
    let monitor = Monitor::start(&redis);
    let r = register_with(&wg, "bot", None);
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.error_code(), "proof_required");
    for malformed in ["", "no-colon", "x:1", &"a".repeat(200)] {
        let r = register_with(&wg, "bot", Some(malformed));
        assert_eq!(r.status, 403, "{malformed:?}: {r:?}");
        assert_eq!(r.error_code(), "proof_invalid");
    }
    let lines = monitor.take_lines();
    assert!(
        !lines.iter().any(|l| l.contains("\"bot\"")),
        "a refused register reached Redis: {lines:#?}"
    );
    assert_eq!(waiting(&redis), 0);
    assert_eq!(refused(&wg, "required"), 1);
    assert_eq!(refused(&wg, "malformed"), 4);
    // A huge header is the head limit's to refuse.
    let huge = "a".repeat(70 * 1024);
    assert_eq!(register_with(&wg, "bot", Some(&huge)).status, 431);
}

#[test]
fn a_solved_proof_takes_one_place_once() {
    let redis = Redis::start_free();
    let wg = with_challenge(&redis, "{difficulty-bits: 8}");
    let (text, bits) = challenge(&wg);
    assert_eq!(bits, 8);
    let proof = solve_proof(&text, bits);
    let r = register_with(&wg, "fan", Some(&proof));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["status"], "WAITING");
    assert!(r.json()["queueCredential"].is_string());
    // The same proof again: refused for anyone else, and changes nothing;
    // the user it placed is told the place (an answer lost on the way
    // can be asked for again), with no new credential.
    for user in ["bot", "other"] {
        let r = register_with(&wg, user, Some(&proof));
        assert_eq!(r.status, 403, "{r:?}");
        assert_eq!(r.error_code(), "proof_invalid");
    }
    let r = register_with(&wg, "fan", Some(&proof));
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json().get("queueCredential").is_none(), "{r:?}");
    assert_eq!(places(&redis), 1);
    assert_eq!(refused(&wg, "reused"), 2);
    // A fresh one lets the same user register again (the place is kept),
    // and, having bought nothing, is still good for a place.
    let (text, bits) = challenge(&wg);
    let fresh = solve_proof(&text, bits);
    let r = register_with(&wg, "fan", Some(&fresh));
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json().get("queueCredential").is_none(), "{r:?}");
    let r = register_with(&wg, "newcomer", Some(&fresh));
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json()["queueCredential"].is_string(), "{r:?}");
    assert_eq!(
        register_with(&wg, "third", Some(&fresh)).error_code(),
        "proof_invalid"
    );
    // Each proof that bought a place is recorded until its challenge
    // expires, and the set itself no longer than its latest.
    let mut c = redis.conn();
    let recorded: Vec<(String, u64)> = c
        .zrange_withscores("queue:{baseball}:proofs", 0, -1)
        .unwrap();
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    let expires: i64 = redis::cmd("PEXPIRETIME")
        .arg("queue:{baseball}:proofs")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        expires as u64,
        recorded.iter().map(|(_, e)| *e).max().unwrap()
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for (_, expiry) in &recorded {
        assert!(
            (now_ms + 50_000..=now_ms + 60_000).contains(expiry),
            "{expiry}"
        );
    }
}

/// Registers that share one script call (coalesced) each take their own
/// proof: every fresh proof a place, every replay of one a refusal, in
/// whatever order they were batched.
#[test]
fn concurrent_registers_each_take_their_own_proof_once() {
    let redis = Redis::start_free();
    let wg = with_challenge(&redis, "{difficulty-bits: 4}");
    let proofs: Vec<String> = (0..24)
        .map(|_| {
            let (text, bits) = challenge(&wg);
            solve_proof(&text, bits)
        })
        .collect();
    // Each proof three times, for three users, all at once.
    let answers: Vec<(usize, u16)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..72)
            .map(|i| {
                let (wg, proof) = (&wg, &proofs[i % 24]);
                s.spawn(move || {
                    let r = register_with(wg, &format!("u{i}"), Some(proof));
                    assert!(
                        r.status == 200 || r.error_code() == "proof_invalid",
                        "{r:?}"
                    );
                    (i % 24, r.status)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for p in 0..24 {
        let took = answers
            .iter()
            .filter(|(q, status)| *q == p && *status == 200)
            .count();
        assert_eq!(took, 1, "proof {p}: {answers:?}");
    }
    assert_eq!(places(&redis), 24);
    assert_eq!(refused(&wg, "reused"), 48);
}

/// An operator who raises the difficulty in a bot wave gets it from the
/// next register: challenges issued before are refused; a lower one still
/// takes them.
#[test]
fn a_reload_that_raises_the_difficulty_refuses_easier_challenges() {
    let redis = Redis::start_free();
    let config = TestConfig::on_free_ports(&redis.url(), free_port())
        .set("queues.baseball.challenge", "{difficulty-bits: 4}");
    let wg = config.start();
    let (early, bits) = challenge(&wg);
    let early = solve_proof(&early, bits);
    wg.reload(
        config
            .clone()
            .set("queues.baseball.challenge", "{difficulty-bits: 10}")
            .yaml(),
    );
    wg.wait_for_log("config reloaded", 1);
    let r = register_with(&wg, "a", Some(&early));
    assert_eq!(r.error_code(), "proof_invalid", "{r:?}");
    assert_eq!(refused(&wg, "stale_difficulty"), 1);
    let (text, bits) = challenge(&wg);
    assert_eq!(bits, 10);
    assert_eq!(
        register_with(&wg, "a", Some(&solve_proof(&text, bits))).status,
        200
    );
    // Turned off: a register needs no proof.
    wg.reload(config.clone().remove("queues.baseball.challenge").yaml());
    wg.wait_for_log("config reloaded", 2);
    assert_eq!(register_with(&wg, "b", None).status, 200);
    assert_eq!(
        get(wg.addr, "/api/v1/queue/challenge").unwrap().json()["difficultyBits"],
        0
    );
}

#[test]
fn wrong_expired_and_foreign_proofs_are_refused() {
    let redis = Redis::start_free();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .set(
            "queues",
            "{baseball: {challenge: {difficulty-bits: 8}}, football: {challenge: {difficulty-bits: 8}}}",
        )
        .start();
    let (text, bits) = challenge(&wg);
    let r = register_with(&wg, "a", Some(&unsolved(&text, bits)));
    assert_eq!(r.error_code(), "proof_invalid", "{r:?}");
    assert_eq!(refused(&wg, "wrong"), 1);
    // Football's challenge is not baseball's.
    let r = get(wg.addr, "/api/v1/queue/challenge?queue=football").unwrap();
    let foreign = r.json()["challenge"].as_str().unwrap().to_string();
    let r = register_with(&wg, "a", Some(&solve_proof(&foreign, 8)));
    assert_eq!(r.error_code(), "proof_invalid", "{r:?}");
    assert_eq!(refused(&wg, "forged"), 1);
    // Solved, but too late: a challenge waitgate's key signed a minute
    // ago for ten seconds.
    let secret = Secret::from_base64(SECRET_B64).unwrap();
    let a_minute_ago = redis.now_ms() - 60_000;
    let stale =
        Challenges::new(&secret).issue("baseball", 8, Duration::from_secs(10), a_minute_ago);
    let r = register_with(&wg, "a", Some(&solve_proof(&stale.challenge, 8)));
    assert_eq!(r.error_code(), "proof_invalid", "{r:?}");
    assert_eq!(refused(&wg, "expired"), 1);
    // The same key's challenge, in its lifetime, is good: only time made
    // the difference.
    let fresh =
        Challenges::new(&secret).issue("baseball", 8, Duration::from_secs(10), redis.now_ms());
    assert_eq!(
        register_with(&wg, "a", Some(&solve_proof(&fresh.challenge, 8))).status,
        200
    );
    assert_eq!(places(&redis), 1);
}

/// Over `maxmemory`, a register with a proof takes nothing and changes
/// nothing (a 503), as one without: the proofs' own bookkeeping comes after
/// every write Redis may refuse.
#[test]
fn a_full_redis_takes_no_place_for_a_proof() {
    let redis = Redis::start_free();
    let wg = with_challenge(&redis, "{difficulty-bits: 4}");
    let (text, bits) = challenge(&wg);
    assert_eq!(
        register_with(&wg, "before", Some(&solve_proof(&text, bits))).status,
        200
    );
    let mut c = redis.conn();
    redis.config_set("maxmemory", 1);
    let (text, bits) = challenge(&wg);
    let proof = solve_proof(&text, bits);
    let r = register_with(&wg, "during", Some(&proof));
    assert_eq!(r.status, 503, "{r:?}");
    redis.config_set("maxmemory", 0);
    let waiting: Vec<String> = c.zrange(WAITING, 0, -1).unwrap();
    let active: Vec<String> = c.zrange(ACTIVE_KEY, 0, -1).unwrap();
    assert!(!waiting.contains(&"during".to_string()) && !active.contains(&"during".to_string()));
    // The proof was not spent: it still buys the place.
    assert_eq!(register_with(&wg, "during", Some(&proof)).status, 200);
}

/// `register.lua` itself refuses a proof whose challenge expired by Redis's
/// clock, however many times it is sent: an instance whose clock is behind
/// cannot let one proof be used again once its record is pruned.
#[test]
fn the_script_refuses_a_proof_expired_by_its_own_clock() {
    let redis = Redis::start_free();
    let mut c = redis.conn();
    give_state(&mut c, "baseball");
    let now = redis.now_ms();
    let call = |c: &mut redis::Connection, user: &str, expiry: u64| -> Vec<i64> {
        let mut eval = register_eval(REGISTER_LUA, "baseball");
        eval.arg(3000)
            .arg(100)
            .arg(30_000)
            .arg(1000)
            .arg(30_000)
            .arg(1);
        // One proof, for the batch's first (and only) user.
        eval.arg(1).arg(1).arg("the-id").arg(expiry).arg(user);
        eval.query(c).unwrap()
    };
    for user in ["a", "b", "c"] {
        assert_eq!(call(&mut c, user, now.saturating_sub(500))[0], 8, "{user}");
    }
    assert_eq!(waiting(&redis), 0);
    // In its lifetime: one place, then refused.
    assert_eq!(call(&mut c, "a", now + 60_000)[0], 1);
    assert_eq!(call(&mut c, "b", now + 60_000)[0], 8);
}

/// With `redis.coalesce: false` (each register its own script call) a
/// proof buys one place as well.
#[test]
fn without_coalescing_a_proof_buys_one_place_too() {
    let redis = Redis::start_free();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .set("queues.baseball.challenge", "{difficulty-bits: 4}")
        .set("redis.coalesce", "false")
        .start();
    assert_eq!(register_with(&wg, "a", None).error_code(), "proof_required");
    let (text, bits) = challenge(&wg);
    let proof = solve_proof(&text, bits);
    assert_eq!(register_with(&wg, "a", Some(&proof)).status, 200);
    assert_eq!(
        register_with(&wg, "b", Some(&proof)).error_code(),
        "proof_invalid"
    );
    assert_eq!(places(&redis), 1);
}
