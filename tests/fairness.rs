//! Fairness anyone can verify, over real Redis and real HTTP: the draw's
//! commitment before the pre-queue opens and its seed after, receipts
//! checked against the published keys, `waitgate verify` against the order
//! the API serves, and the count of users admitted out of order.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use common::*;
use redis::Commands;
use sha2::{Digest, Sha256};

const CONTROL_KEY: &str = "queue:{baseball}:control";
const OUT_OF_ORDER: &str = r#"waitgate_admitted_out_of_order_total{queue="baseball"}"#;

/// The receipt key both instances share (a 32-byte seed in base64).
fn receipt_key() -> String {
    base64::engine::general_purpose::STANDARD.encode([42u8; 32])
}

fn start(redis: &Redis, queue_yaml: &str) -> Waitgate {
    let ports = Ports::new();
    let cfg = config_with(&redis.url(), &ports, free_port(), queue_yaml);
    Waitgate::start_env(
        &cfg,
        &ports,
        &[
            ("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ("WAITGATE_RECEIPT_KEY", &receipt_key()),
        ],
    )
}

fn fairness(wg: &Waitgate) -> serde_json::Value {
    // (503 only before the instance's first look, within a second of its
    // start.)
    let mut r = get(wg.addr, "/api/v1/queue/fairness?queue=baseball").unwrap();
    if r.status == 503 {
        std::thread::sleep(Duration::from_millis(1_100));
        r = get(wg.addr, "/api/v1/queue/fairness?queue=baseball").unwrap();
    }
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("cache-control"), Some("public, max-age=1"));
    r.json()
}

/// The fairness answer once it satisfies `ready` (it is at most a second
/// stale).
fn fairness_when(
    wg: &Waitgate,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    wait_until(what, Duration::from_secs(5), || {
        last = fairness(wg);
        ready(&last)
    });
    last
}

#[derive(Debug, serde::Deserialize, PartialEq)]
struct Receipt {
    queue: String,
    sub: String,
    arrival: u64,
    iat: u64,
    commitment: Option<String>,
}

/// A receipt checked with the JWKS an instance publishes: EdDSA, signed by
/// the key its `kid` names.
fn verified(jwks: &jsonwebtoken::jwk::JwkSet, receipt: &str) -> Receipt {
    let header = jsonwebtoken::decode_header(receipt).unwrap();
    assert_eq!(header.alg, jsonwebtoken::Algorithm::EdDSA);
    let jwk = jwks
        .find(header.kid.as_deref().expect("a kid"))
        .expect("the receipt's key is published");
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    jsonwebtoken::decode::<Receipt>(
        receipt,
        &jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap(),
        &validation,
    )
    .unwrap()
    .claims
}

fn jwks(wg: &Waitgate) -> jsonwebtoken::jwk::JwkSet {
    let r = get(wg.addr, "/.well-known/waitgate/keys").unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/json"));
    serde_json::from_slice(&r.body).unwrap()
}

/// `waitgate verify`'s lines, as (place, userId).
fn verify(seed: &str, queue: &str, users: &[String]) -> Vec<(usize, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_waitgate"))
        .args(["verify", "--seed", seed, "--queue", queue])
        .args(users)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (place, user) = line.split_once(' ').unwrap();
            (place.parse().unwrap(), user.to_string())
        })
        .collect()
}

#[test]
fn a_shuffled_open_is_committed_revealed_reproduced_and_admitted_in_draw_order() {
    const USERS: usize = 50;
    let redis = Redis::start_free();
    // One admission a minute until the order is read; faster after.
    let queue = "baseball:\n  admission: {interval-ms: 60000, batch-size: 1}";
    let instances = [start(&redis, queue), start(&redis, queue)];
    let t0 = redis.now_ms();
    schedule(&instances[0], Some(t0), t0 + 3_600_000, true);

    // Before the open: the commitment, no seed, from every instance.
    let before = fairness_when(&instances[1], "the commitment", |f| {
        f["commitment"].is_string()
    });
    let commitment = before["commitment"].as_str().unwrap().to_string();
    assert_eq!(commitment.len(), 64);
    assert!(commitment
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert!(before["seed"].is_null(), "{before}");
    assert!(before["algorithm"].is_string(), "{before}");
    assert_eq!(before["openAt"], waitgate::time::rfc3339(t0 + 3_600_000));
    assert_eq!(before["admittedOutOfOrder"], 0);
    let status = admin(&instances[0], "GET", "/admin/v1/queues/baseball", None).json();
    assert_eq!(status["event"]["commitment"], commitment.as_str());
    assert!(
        status["event"].get("seed").is_none(),
        "not even an operator sees its seed before the open: {status}"
    );

    // Fifty pre-queued users, each with a receipt that the published key
    // verifies, stating the commitment.
    let keys = [jwks(&instances[0]), jwks(&instances[1])];
    let users: Vec<String> = (0..USERS).map(|i| format!("fan{i:02}")).collect();
    let mut arrivals = HashMap::new();
    for (i, user) in users.iter().enumerate() {
        let r = register(instances[i % 2].addr, user);
        assert_eq!(r.status, 200, "{r:?}");
        let v = r.json();
        assert_eq!(v["status"], "PREQUEUE", "{v}");
        let receipt = verified(&keys[(i + 1) % 2], v["receipt"].as_str().unwrap());
        assert_eq!(receipt.queue, "baseball");
        assert_eq!(&receipt.sub, user);
        assert_eq!(receipt.commitment.as_deref(), Some(commitment.as_str()));
        assert!(receipt.arrival >= t0 * 1000, "{receipt:?}");
        assert!(
            receipt.iat.abs_diff(redis.now_ms() / 1000) <= 2,
            "{receipt:?}"
        );
        arrivals.insert(user.clone(), receipt.arrival);
    }
    // Asking again by a body's userId, which anyone may send: no receipt
    // (the page, whose cookie names the user, gets one: tests/chromium.rs).
    let again = register(instances[1].addr, "fan07").json();
    assert_eq!(again["status"], "PREQUEUE", "{again}");
    assert!(again.get("receipt").is_none(), "{again}");

    // The open, now: its seed is revealed and hashes to the commitment.
    assert_eq!(
        admin(
            &instances[0],
            "DELETE",
            "/admin/v1/queues/baseball/event",
            None
        )
        .status,
        200
    );
    let after = fairness_when(&instances[1], "the revealed seed", |f| {
        f["seed"].is_string()
    });
    let seed = after["seed"].as_str().unwrap().to_string();
    assert_eq!(after["commitment"], commitment.as_str());
    let seed_bytes: Vec<u8> = (0..64)
        .step_by(2)
        .map(|i| u8::from_str_radix(&seed[i..i + 2], 16).unwrap())
        .collect();
    let hashed: String = Sha256::digest(&seed_bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        hashed, commitment,
        "the revealed seed is the one committed to"
    );
    wait_until(
        "the pre-queue to be placed",
        Duration::from_secs(10),
        || {
            let placed: Option<String> = redis.conn().hget(CONTROL_KEY, "placed").unwrap();
            placed.is_some()
        },
    );
    fairness_when(&instances[0], "the count of the draw", |f| {
        f["prequeued"] == USERS as u64
    });

    // The order the API serves is the verifier's.
    let mut served: Vec<(u64, String)> = users
        .iter()
        .map(|u| {
            let v = rank(instances[0].addr, u).json();
            let rank = match v["status"].as_str() {
                Some("WAITING") => v["rank"].as_u64().unwrap() + 1,
                // At most one was admitted since the open: the head.
                Some("ACTIVE") => 0,
                _ => panic!("{u}: {v}"),
            };
            (rank, u.clone())
        })
        .collect();
    served.sort();
    let served: Vec<String> = served.into_iter().map(|(_, u)| u).collect();
    let verified_order = verify(&seed, "baseball", &users);
    assert_eq!(
        verified_order.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        (1..=USERS).collect::<Vec<_>>()
    );
    let drawn: Vec<String> = verified_order.into_iter().map(|(_, u)| u).collect();
    assert_eq!(served, drawn, "waitgate verify reproduces the served order");
    assert_ne!(drawn, users, "not the arrival order");

    // Everyone admitted, in draw order: nobody out of order, and the last
    // admitted arrival is the last drawn user's.
    let r = patch_admission(&instances[0], r#"{"batchSize":10,"intervalMs":200}"#);
    assert_eq!(r.status, 200, "{r:?}");
    wait_until_all_admitted(&redis, USERS, Duration::from_secs(20));
    let last = &drawn[USERS - 1];
    let end = fairness_when(&instances[1], "the last admission", |f| {
        f["lastAdmittedArrival"] == arrivals[last]
    });
    assert_eq!(end["admittedOutOfOrder"], 0, "{end}");
    for wg in &instances {
        assert_eq!(wg.metric::<u64>(OUT_OF_ORDER), Some(0));
    }
}

/// After a shuffled open, arrivals count on from the end of its span,
/// ahead of the clock: the next open's draw is placed behind them and
/// behind everyone admitted, so that it is admitted in order too.
#[test]
fn an_open_after_a_shuffled_one_is_placed_behind_everyone_admitted() {
    let redis = Redis::start_free();
    let wg = start(
        &redis,
        "baseball:\n  admission: {interval-ms: 200, batch-size: 10}",
    );
    let mut admitted = 0;
    for (event, late) in [("a", true), ("b", false)] {
        let now = redis.now_ms();
        schedule(&wg, Some(now), now + 3_600_000, true);
        for i in 0..3 {
            assert_eq!(register(wg.addr, &format!("{event}{i}")).status, 200);
        }
        assert_eq!(
            admin(&wg, "DELETE", "/admin/v1/queues/baseball/event", None).status,
            200
        );
        admitted += 3;
        wait_until("the draw to be placed", Duration::from_secs(10), || {
            let placed: Option<String> = redis.conn().hget(CONTROL_KEY, "placed").unwrap();
            placed.is_some()
        });
        wait_until_all_admitted(&redis, admitted, Duration::from_secs(10));
        if late {
            assert_eq!(register(wg.addr, "after-the-open").status, 200);
            admitted += 1;
            wait_until_all_admitted(&redis, admitted, Duration::from_secs(10));
        }
    }
    // A look after the last admission: still nobody out of order.
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(fairness(&wg)["admittedOutOfOrder"], 0);
    assert_eq!(wg.metric::<u64>(OUT_OF_ORDER), Some(0));
}

#[test]
fn a_user_admitted_behind_the_head_is_counted_out_of_order() {
    let redis = Redis::start_free();
    let wg = start(
        &redis,
        "baseball:\n  admission: {interval-ms: 200, batch-size: 1}",
    );
    for user in ["first", "second"] {
        assert_eq!(register(wg.addr, user).status, 200);
    }
    wait_until_all_admitted(&redis, 2, Duration::from_secs(5));
    assert_eq!(fairness(&wg)["admittedOutOfOrder"], 0);
    // A place ahead of the admitted ones (as a reseat after a loss of
    // state may give): the next admission is out of order.
    let _: () = redis.conn().zadd(WAITING_KEY, "behind", 1).unwrap();
    wait_until_all_admitted(&redis, 3, Duration::from_secs(5));
    let f = fairness_when(&wg, "the count", |f| f["admittedOutOfOrder"] == 1);
    assert_eq!(f["lastAdmittedArrival"], 1);
    assert_eq!(wg.metric::<u64>(OUT_OF_ORDER), Some(1));
}

#[test]
fn each_schedule_draws_a_new_commitment_and_the_answer_needs_no_redis() {
    let mut redis = Redis::start_free();
    let wg = start(&redis, "baseball: {}");
    let unknown = get(wg.addr, "/api/v1/queue/fairness?queue=nope").unwrap();
    assert_eq!(unknown.status, 404, "{unknown:?}");
    let plain = fairness_when(&wg, "the first look", |f| f["admittedOutOfOrder"] == 0);
    assert!(
        plain["commitment"].is_null() && plain["seed"].is_null(),
        "{plain}"
    );

    let now = redis.now_ms();
    schedule(&wg, Some(now), now + 3_600_000, true);
    let first = fairness_when(&wg, "a commitment", |f| f["commitment"].is_string());
    schedule(&wg, Some(now), now + 7_200_000, true);
    let second = fairness_when(&wg, "a new commitment", |f| {
        f["commitment"].is_string() && f["commitment"] != first["commitment"]
    });
    assert!(second["seed"].is_null(), "{second}");
    // In arrival order: nothing to commit to.
    let in_order = serde_json::json!({
        "openAt": waitgate::time::rfc3339(now + 7_200_000),
        "shuffle": false,
    });
    let r = admin(
        &wg,
        "PUT",
        "/admin/v1/queues/baseball/event",
        Some(&in_order.to_string()),
    );
    assert_eq!(r.status, 200, "{r:?}");
    fairness_when(&wg, "no commitment", |f| f["commitment"].is_null());

    // With Redis gone, the answer is still the last look's, at once.
    schedule(&wg, Some(now), now + 3_600_000, true);
    let committed = fairness_when(&wg, "a commitment", |f| f["commitment"].is_string());
    redis.kill();
    let started = Instant::now();
    let down = fairness(&wg);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(down["commitment"], committed["commitment"]);
    let keys = get(wg.addr, "/.well-known/waitgate/keys").unwrap();
    assert_eq!(keys.status, 200);
}

/// Redis restarts empty during the pre-queue: the instances write the
/// event back with its draw, so the commitment published before the loss
/// is still the one, and its seed, revealed at the open, hashes to it.
#[test]
fn a_redis_that_lost_its_data_keeps_the_draw_committed_to() {
    let mut redis = Redis::start_free();
    let wg = start(&redis, "baseball: {}");
    let now = redis.now_ms();
    schedule(&wg, Some(now), now + 3_600_000, true);
    let before = fairness_when(&wg, "the commitment", |f| f["commitment"].is_string());
    // Two looks, so that the instance has seen the draw.
    std::thread::sleep(Duration::from_millis(2_100));
    redis.restart();
    wait_until("the state written back", Duration::from_secs(10), || {
        let c: Option<String> = redis.conn().hget(CONTROL_KEY, "commitment").unwrap_or(None);
        c.is_some()
    });
    let after = fairness_when(&wg, "the commitment again", |f| {
        f["commitment"] == before["commitment"]
    });
    assert!(after["seed"].is_null(), "{after}");
    assert_eq!(
        admin(&wg, "DELETE", "/admin/v1/queues/baseball/event", None).status,
        200
    );
    let open = fairness_when(&wg, "the revealed seed", |f| f["seed"].is_string());
    let seed: waitgate::fairness::draw::Seed = open["seed"].as_str().unwrap().parse().unwrap();
    assert_eq!(open["commitment"], seed.commitment().as_str());
    assert_eq!(before["commitment"], seed.commitment().as_str());
}

#[test]
fn verify_refuses_a_malformed_seed_with_exit_code_2() {
    for seed in ["", "xyz", &"0".repeat(63), &"g".repeat(64)] {
        let out = Command::new(env!("CARGO_BIN_EXE_waitgate"))
            .args(["verify", "--seed", seed, "--queue", "baseball", "alice"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{seed}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("64 hex digits"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    let seed = "ab".repeat(32);
    let lines = verify(
        &seed,
        "baseball",
        &["bob".into(), "alice".into(), "bob".into()],
    );
    assert_eq!(lines.len(), 2, "each user once: {lines:?}");
}
