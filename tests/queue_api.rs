//! The queue API against a real Redis and the real binary (docs/api.md, and the Redis state in docs/operations.md).

mod common;

use std::time::Duration;

use common::*;
use redis::Commands;

const DUE: &str = "queue:{baseball}:due";
const DUES: &str = "queue:{baseball}:dues";
/// The heartbeat buckets' lists, however many (see `heartbeats` in lua/lib.lua).
const BUCKETS: &str = "queue:{baseball}:dues:*";
/// The registrations' numbers, their arrivals and marks (see `marks` in
/// lua/lib.lua).
const ARRIVALS: &str = "queue:{baseball}:arrivals";
const MARKS: &str = "queue:{baseball}:marks";
const NUMBERING: &str = "queue:{baseball}:numbering";

struct Setup {
    redis: Redis,
    wg: Waitgate,
}

fn setup() -> Setup {
    let redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    Setup { redis, wg }
}

fn zscore(c: &mut redis::Connection, key: &str, user: &str) -> Option<f64> {
    c.zscore(key, user).unwrap()
}

fn heartbeat(c: &mut redis::Connection, user: &str) -> Option<f64> {
    heartbeat_of(c, "baseball", user).map(|due| due as f64)
}

fn has_credential(c: &mut redis::Connection, user: &str) -> bool {
    c.hexists(CREDENTIAL_KEY, user).unwrap()
}

/// Every key in the test Redis but the ones the harness and the background
/// tasks write (the admission holder's active set, the gate's record), to
/// show that a refused request wrote nothing.
fn all_keys(c: &mut redis::Connection) -> Vec<String> {
    let mut keys: Vec<String> = c.keys("*").unwrap();
    // The gate's record and the control HASH, which holds the state's
    // incarnation, are every instance's own from its start; cleanup's
    // claim on its pass, its own each interval.
    keys.retain(|k| {
        ![
            ACTIVE_KEY,
            "queue:{baseball}:admission",
            "queue:{baseball}:control",
            "queue:{baseball}:sweeper",
        ]
        .contains(&k.as_str())
    });
    for k in keys.iter_mut() {
        if k.starts_with(&BUCKETS[..BUCKETS.len() - 1]) {
            *k = BUCKETS.to_string();
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

#[test]
fn first_registration_creates_waiting_heartbeat_and_a_credential() {
    let s = setup();
    let r = register(s.wg.addr, "user_10");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["userId"], "user_10");
    assert_eq!(v["queue"], "baseball");
    assert_eq!(v["status"], "WAITING");
    assert_eq!(v["rank"], 0);
    assert_eq!(v["estimatedWaitingCount"], 1);
    assert!(v["estimatedWaitSeconds"].is_u64());
    let credential = v["queueCredential"].as_str().unwrap();
    // >= 128 bits, URL-safe.
    assert!(credential.len() >= 22, "{credential}");
    assert!(credential
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));

    let mut c = s.redis.conn();
    assert!(zscore(&mut c, WAITING_KEY, "user_10").is_some());
    assert!(heartbeat(&mut c, "user_10").is_some());
    // The credential is a MAC that waitgate checks itself: a waiting user
    // costs Redis a sorted-set entry, a hash field, a place in a list, and
    // sixteen bytes at its number (its arrival, and its mark with a tag).
    assert!(!has_credential(&mut c, "user_10"));
    assert_eq!(
        all_keys(&mut c),
        [ARRIVALS, DUE, DUES, BUCKETS, MARKS, NUMBERING, WAITING_KEY]
    );
    let arrivals: Vec<u8> = c.get(ARRIVALS).unwrap();
    let marks: Vec<u8> = c.get(MARKS).unwrap();
    assert_eq!((arrivals.len(), marks.len()), (8, 8));
    // It works: the holder can leave with it.
    assert_eq!(dropout(s.wg.addr, "user_10", credential).status, 204);
}

#[test]
fn registering_again_keeps_the_place_and_returns_no_credential() {
    let s = setup();
    let first = register(s.wg.addr, "a");
    assert!(first.json()["queueCredential"].is_string());
    register(s.wg.addr, "b");
    let mut c = s.redis.conn();
    let score = zscore(&mut c, WAITING_KEY, "a").unwrap();
    let stored: Vec<u8> = c.hget(CREDENTIAL_KEY, "a").unwrap();

    let again = register(s.wg.addr, "a");
    assert_eq!(again.status, 200);
    let v = again.json();
    assert_eq!(v["status"], "WAITING");
    assert_eq!(v["rank"], 0);
    assert!(v.get("queueCredential").is_none(), "{v}");
    assert_eq!(zscore(&mut c, WAITING_KEY, "a"), Some(score));
    let stored_again: Vec<u8> = c.hget(CREDENTIAL_KEY, "a").unwrap();
    assert_eq!(stored, stored_again);
    // The original credential still works.
    let cred = first.json()["queueCredential"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(dropout(s.wg.addr, "a", &cred).status, 204);
}

#[test]
fn order_is_strict_fifo_even_within_one_millisecond() {
    let s = setup();
    // Concurrent registrations land in the same millisecond; every one must
    // still get a distinct score and rank.
    let addr = s.wg.addr;
    let handles: Vec<_> = (0..40)
        .map(|i| std::thread::spawn(move || register(addr, &format!("u{i}")).json()))
        .collect();
    let mut ranks: Vec<u64> = handles
        .into_iter()
        .map(|h| h.join().unwrap()["rank"].as_u64().unwrap())
        .collect();
    ranks.sort();
    assert_eq!(ranks, (0..40).collect::<Vec<_>>());

    let mut c = s.redis.conn();
    let members: Vec<(String, f64)> = c.zrange_withscores(WAITING_KEY, 0, -1).unwrap();
    let mut scores: Vec<f64> = members.iter().map(|(_, s)| *s).collect();
    scores.dedup();
    assert_eq!(scores.len(), 40, "no two users share a score");

    // And sequential registrations keep arrival order.
    for i in 0..5 {
        register(addr, &format!("seq{i}"));
    }
    let tail: Vec<String> = c.zrange(WAITING_KEY, -5, -1).unwrap();
    assert_eq!(tail, ["seq0", "seq1", "seq2", "seq3", "seq4"]);
}

#[test]
fn rank_reports_the_place_and_a_heartbeat_due_when_its_advice_ends() {
    // Admission held shut (the harness's holder takes the one slot): once
    // the gate has decided a window with no room, the wait it tells is
    // long, and the advice well above its floor, so an early poll can be
    // told the time left. (Polled before that decision, the advice is a
    // quarter of one window's wait, and the two polls below could straddle
    // the decision.)
    let redis = Redis::start();
    let wg = start_with_queues(
        &redis,
        "baseball: {admission: {max-active: 1, interval-ms: 60000, batch-size: 1}}",
    );
    let s = Setup { redis, wg };
    register(s.wg.addr, "first");
    register(s.wg.addr, "second");
    let mut c = s.redis.conn();
    wait_until("the gate's decision", Duration::from_secs(5), || {
        c.hexists("queue:{baseball}:admission", "window").unwrap()
    });
    let redis_now = || s.redis.now_ms() as f64;
    let before = redis_now();
    let r = rank(s.wg.addr, "second");
    let after = redis_now();
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["status"], "WAITING");
    assert_eq!(v["rank"], 1);
    assert_eq!(v["estimatedWaitingCount"], 2);
    assert!(v.get("queueCredential").is_none());
    // The heartbeat is when the next poll is due: the poll's time plus the
    // advice it gave. Cleanup removes the user once that and the timeout
    // (30 s by default) have passed.
    let advice = v["pollAfterMs"].as_u64().unwrap() as f64;
    assert!((1_000.0..=30_000.0).contains(&advice), "{advice}");
    let due = heartbeat(&mut c, "second").unwrap();
    assert!(
        due >= before + advice && due <= after + advice,
        "heartbeat {due}, poll between {before} and {after}, advice {advice}"
    );
    // An early poll is told the time left to that entry, and writes
    // nothing.
    let at = redis_now();
    let again = rank(s.wg.addr, "second");
    assert_eq!(again.status, 200);
    assert_eq!(heartbeat(&mut c, "second").unwrap(), due);
    let left = again.json()["pollAfterMs"].as_u64().unwrap() as f64;
    assert!(
        left <= due - at && left >= due - at - 200.0,
        "told {left} ms, {} ms left",
        due - at
    );
}

#[test]
fn rank_of_an_unknown_user_is_404_and_creates_nothing() {
    let s = setup();
    let r = rank(s.wg.addr, "ghost");
    assert_eq!(r.status, 404);
    assert_eq!(r.error_code(), "user_not_queued");
    let mut c = s.redis.conn();
    assert!(heartbeat(&mut c, "ghost").is_none());
    assert!(all_keys(&mut c).is_empty());
}

#[test]
fn an_active_user_is_told_so() {
    let s = setup();
    let mut c = s.redis.conn();
    let future_ms = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 60_000) as f64;
    let _: () = c.zadd(ACTIVE_KEY, "vip", future_ms).unwrap();
    let r = rank(s.wg.addr, "vip");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "ACTIVE");
    // Registering while active does not queue the user again.
    let r = register(s.wg.addr, "vip");
    assert_eq!(r.json()["status"], "ACTIVE");
    assert!(r.json().get("queueCredential").is_none());
    assert!(zscore(&mut c, WAITING_KEY, "vip").is_none());
    assert!(heartbeat(&mut c, "vip").is_none());
}

/// A user admitted on one device, whose credential is lost (another
/// browser, a cleared store), is told so by register, with when the
/// admission ends and what to do; the site's release is the way back
/// sooner. The credential is never given to whoever sends the userId.
#[test]
fn an_admitted_user_without_its_credential_is_told_the_way_back() {
    let redis = Redis::start_free();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .start_env(&[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    let kept = register_new(wg.addr, "lost-1");
    let until_ms = redis.now_ms() + 60_000;
    admit_by_hand(&mut redis.conn(), "lost-1", until_ms);

    let r = register(wg.addr, "lost-1");
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["status"], "ACTIVE", "{v}");
    assert_eq!(v["activeUntil"], waitgate::time::rfc3339(until_ms), "{v}");
    assert!(v.get("queueCredential").is_none(), "{v}");
    let message = v["message"].as_str().unwrap_or_default();
    for part in [
        "already admitted",
        "queueCredential",
        "activeUntil",
        "releases",
    ] {
        assert!(message.contains(part), "{part} in {message:?}");
    }
    // Whoever kept the credential still trades it; nobody else can.
    let token = |credential: &str| {
        post_json(
            wg.addr,
            "/api/v1/queue/active/token",
            &serde_json::json!({"userId": "lost-1", "queueCredential": credential}).to_string(),
        )
        .unwrap()
    };
    assert_eq!(token(&kept).status, 200);
    assert_eq!(token(&credential_for("lost-1", 1)).status, 403);

    // The way back sooner: the site releases the user (here through the
    // admin API), and register gives a new place and a new credential.
    let r = revoke(&wg, "lost-1");
    assert_eq!(r.status, 200, "{r:?}");
    let again = register(wg.addr, "lost-1").json();
    assert_eq!(again["status"], "WAITING", "{again}");
    assert!(again["queueCredential"].as_str().is_some(), "{again}");
}

/// With identity binding the login proves who registers: an admitted user
/// on a new device is given its credential again, and trades it.
#[test]
fn with_identity_binding_an_admitted_user_gets_the_credential_again() {
    const SECRET: &str = "the-shops-login-secret-at-least-32-bytes!";
    let redis = Redis::start_free();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .with("identity: {issuer: shop, audience: waitgate, secret-env: SHOP_LOGIN_SECRET}")
        .start_env(&[("SHOP_LOGIN_SECRET", SECRET)]);
    let login = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({"sub": "dana", "iss": "shop", "aud": "waitgate",
            "exp": redis.now_ms() / 1000 + 600}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    let auth = format!("Bearer {login}");
    let join = || {
        request(
            wg.addr,
            "POST",
            "/api/v1/queue/register",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            Some(b"{}"),
        )
        .unwrap()
    };
    let first = join();
    assert_eq!(first.status, 200, "{first:?}");
    admit_by_hand(&mut redis.conn(), "dana", redis.now_ms() + 60_000);
    let v = join().json();
    assert_eq!(v["status"], "ACTIVE", "{v}");
    assert!(v.get("message").is_none(), "{v}");
    let credential = v["queueCredential"].as_str().expect("the credential again");
    let r = request(
        wg.addr,
        "POST",
        "/api/v1/queue/active/token",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        Some(
            serde_json::json!({"userId": "dana", "queueCredential": credential})
                .to_string()
                .as_bytes(),
        ),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json()["accessToken"].as_str().is_some());
}

#[test]
fn dropout_removes_all_three_together() {
    let s = setup();
    let cred = register_new(s.wg.addr, "leaver");
    register(s.wg.addr, "stayer");
    let r = dropout(s.wg.addr, "leaver", &cred);
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    let mut c = s.redis.conn();
    assert!(zscore(&mut c, WAITING_KEY, "leaver").is_none());
    assert!(heartbeat(&mut c, "leaver").is_none());
    assert!(!has_credential(&mut c, "leaver"));
    // The other user moves up.
    assert_eq!(rank(s.wg.addr, "stayer").json()["rank"], 0);
    // And a second dropout finds nobody.
    let r = dropout(s.wg.addr, "leaver", &cred);
    assert_eq!(r.status, 404);
    assert_eq!(r.error_code(), "user_not_queued");
}

#[test]
fn dropout_needs_the_right_credential() {
    let s = setup();
    let cred = register_new(s.wg.addr, "victim");
    let mut c = s.redis.conn();
    let before = all_keys(&mut c);

    let wrong = dropout(s.wg.addr, "victim", "not-the-credential");
    assert_eq!(wrong.status, 403);
    assert_eq!(wrong.error_code(), "credential_mismatch");
    // A credential of another user does not work either.
    let other = register_new(s.wg.addr, "other");
    assert_eq!(dropout(s.wg.addr, "victim", &other).status, 403);

    let missing = delete(s.wg.addr, "/api/v1/queue/dropout?userId=victim", &[]).unwrap();
    assert_eq!(missing.status, 400);
    assert_eq!(missing.error_code(), "invalid_request");
    let twice = delete(
        s.wg.addr,
        "/api/v1/queue/dropout?userId=victim",
        &[("X-Queue-Credential", &cred), ("X-Queue-Credential", &cred)],
    )
    .unwrap();
    assert_eq!(twice.status, 400);

    assert!(zscore(&mut c, WAITING_KEY, "victim").is_some());
    assert_eq!(
        before,
        [ARRIVALS, DUE, DUES, BUCKETS, MARKS, NUMBERING, WAITING_KEY]
    );
    assert_eq!(all_keys(&mut c), before);
    assert_eq!(dropout(s.wg.addr, "victim", &cred).status, 204);
}

#[test]
fn a_credential_belongs_to_one_registration() {
    let s = setup();
    let first = register_new(s.wg.addr, "again");
    assert_eq!(dropout(s.wg.addr, "again", &first).status, 204);
    let second = register_new(s.wg.addr, "again");
    assert_ne!(first, second);
    // The credential of the earlier registration no longer takes the user out.
    let stale = dropout(s.wg.addr, "again", &first);
    assert_eq!(stale.status, 403, "{stale:?}");
    assert_eq!(stale.error_code(), "credential_mismatch");
    let mut c = s.redis.conn();
    assert!(zscore(&mut c, WAITING_KEY, "again").is_some());
    // A credential with one character changed is refused too.
    let mut forged = second.clone().into_bytes();
    forged[31] = if forged[31] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    assert_eq!(dropout(s.wg.addr, "again", &forged).status, 403);
    assert!(zscore(&mut c, WAITING_KEY, "again").is_some());
    assert_eq!(dropout(s.wg.addr, "again", &second).status, 204);
}

#[test]
fn several_queues_need_a_queue_name() {
    let redis = Redis::start();
    let ports = Ports::new();
    let cfg = config_with(
        &redis.url(),
        &ports,
        free_port(),
        "baseball: {admission: {max-active: 1}}\nsoccer: {admission: {max-active: 1}}",
    );
    let mut c = redis.conn();
    let _: () = c
        .zadd("queue:{soccer}:active", HOLDER, 32503680000000u64)
        .unwrap();
    let wg = Waitgate::start(&cfg, &ports);

    let r = register(wg.addr, "fan");
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code(), "invalid_request");
    let r = register_in(wg.addr, "soccer", "fan");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["queue"], "soccer");
    let r = get(wg.addr, "/api/v1/queue/rank?userId=fan&queue=soccer").unwrap();
    assert_eq!(r.json()["rank"], 0);
    let r = get(wg.addr, "/api/v1/queue/rank?userId=fan&queue=baseball").unwrap();
    assert_eq!(r.status, 404);
    let soccer: Option<f64> = c.zscore("queue:{soccer}:waiting", "fan").unwrap();
    assert!(soccer.is_some());
}

/// Every row of the queue API's status table, each with an `{"error","message"}`
/// body, and none of them writes anything.
#[test]
fn bad_input_gets_a_clear_4xx_and_changes_nothing() {
    let s = setup();
    let addr = s.wg.addr;
    let json = [("Content-Type", "application/json")];
    let big = format!(r#"{{"userId":"a","pad":"{}"}}"#, "x".repeat(5000));
    let long_id = "u".repeat(129);
    let cases: Vec<(&str, Response, u16, &str)> = vec![
        (
            "not JSON",
            request(
                addr,
                "POST",
                "/api/v1/queue/register",
                &json,
                Some(b"{userId:"),
            )
            .unwrap(),
            400,
            "invalid_json",
        ),
        (
            "empty body",
            request(addr, "POST", "/api/v1/queue/register", &json, Some(b"")).unwrap(),
            400,
            "invalid_json",
        ),
        (
            "missing userId",
            post_json(addr, "/api/v1/queue/register", r#"{"queue":"baseball"}"#).unwrap(),
            400,
            "invalid_request",
        ),
        (
            "userId not a string",
            post_json(addr, "/api/v1/queue/register", r#"{"userId":42}"#).unwrap(),
            400,
            "invalid_request",
        ),
        (
            "JSON array",
            post_json(addr, "/api/v1/queue/register", r#"["a"]"#).unwrap(),
            400,
            "invalid_request",
        ),
        (
            "unknown field",
            post_json(
                addr,
                "/api/v1/queue/register",
                r#"{"userId":"a","userid":"b"}"#,
            )
            .unwrap(),
            400,
            "invalid_request",
        ),
        (
            "duplicate field",
            post_json(
                addr,
                "/api/v1/queue/register",
                r#"{"userId":"a","userId":"b"}"#,
            )
            .unwrap(),
            400,
            "invalid_request",
        ),
        (
            "empty userId",
            post_json(addr, "/api/v1/queue/register", r#"{"userId":""}"#).unwrap(),
            400,
            "invalid_user_id",
        ),
        (
            "userId with a space",
            post_json(addr, "/api/v1/queue/register", r#"{"userId":"a b"}"#).unwrap(),
            400,
            "invalid_user_id",
        ),
        (
            "userId with a brace",
            post_json(addr, "/api/v1/queue/register", r#"{"userId":"a}b"}"#).unwrap(),
            400,
            "invalid_user_id",
        ),
        (
            "userId of 129 characters",
            post_json(
                addr,
                "/api/v1/queue/register",
                &format!(r#"{{"userId":"{long_id}"}}"#),
            )
            .unwrap(),
            400,
            "invalid_user_id",
        ),
        (
            "rank without userId",
            get(addr, "/api/v1/queue/rank").unwrap(),
            400,
            "invalid_request",
        ),
        (
            "rank with a bad userId",
            get(addr, "/api/v1/queue/rank?userId=a%20b").unwrap(),
            400,
            "invalid_user_id",
        ),
        (
            "rank with userId twice",
            get(addr, "/api/v1/queue/rank?userId=a&userId=b").unwrap(),
            400,
            "invalid_request",
        ),
        (
            "bad path",
            get(addr, "/api/v1/queue/./rank?userId=a").unwrap(),
            400,
            "bad_path",
        ),
        (
            "a credential waitgate never issued",
            dropout(addr, "nobody", "x"),
            403,
            "credential_mismatch",
        ),
        (
            "a well-made credential of a user who is not queued",
            dropout(addr, "nobody", &credential_for("nobody", 1_000_000)),
            404,
            "user_not_queued",
        ),
        (
            "unknown queue (register)",
            register_in(addr, "tennis", "a"),
            404,
            "unknown_queue",
        ),
        (
            "unknown queue (rank)",
            get(addr, "/api/v1/queue/rank?userId=a&queue=tennis").unwrap(),
            404,
            "unknown_queue",
        ),
        ("unknown user", rank(addr, "nobody"), 404, "user_not_queued"),
        (
            "no such route",
            get(addr, "/api/v1/queue/nothing").unwrap(),
            404,
            "not_found",
        ),
        (
            "no such route outside the API",
            get(addr, "/index.html").unwrap(),
            404,
            "not_found",
        ),
        (
            "GET register",
            get(addr, "/api/v1/queue/register").unwrap(),
            405,
            "method_not_allowed",
        ),
        (
            "POST rank",
            post_json(addr, "/api/v1/queue/rank?userId=a", "{}").unwrap(),
            405,
            "method_not_allowed",
        ),
        (
            "GET dropout",
            get(addr, "/api/v1/queue/dropout?userId=a").unwrap(),
            405,
            "method_not_allowed",
        ),
        (
            "body over 4 KiB",
            post_json(addr, "/api/v1/queue/register", &big).unwrap(),
            413,
            "body_too_large",
        ),
        (
            "no content type",
            request(
                addr,
                "POST",
                "/api/v1/queue/register",
                &[],
                Some(br#"{"userId":"a"}"#),
            )
            .unwrap(),
            415,
            "unsupported_media_type",
        ),
        (
            "text/plain",
            request(
                addr,
                "POST",
                "/api/v1/queue/register",
                &[("Content-Type", "text/plain")],
                Some(br#"{"userId":"a"}"#),
            )
            .unwrap(),
            415,
            "unsupported_media_type",
        ),
    ];
    for (what, response, status, code) in cases {
        assert_eq!(response.status, status, "{what}: {response:?}");
        assert_eq!(response.error_code(), code, "{what}");
    }
    let r = get(addr, "/api/v1/queue/register").unwrap();
    assert_eq!(r.header("allow"), Some("POST"));

    // A chunked body over the cap is cut off without being read to the end.
    let mut chunked = b"POST /api/v1/queue/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..5 {
        chunked.extend_from_slice(b"400\r\n");
        chunked.extend_from_slice(&[b' '; 0x400]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = raw(addr, &chunked).unwrap();
    assert_eq!(r.status, 413);
    assert_eq!(r.error_code(), "body_too_large");

    let mut c = s.redis.conn();
    assert!(all_keys(&mut c).is_empty(), "{:?}", all_keys(&mut c));
    assert!(s.wg.log().contains("waitgate starting"));
}

#[test]
fn a_body_of_exactly_4_kib_is_accepted() {
    let s = setup();
    let prefix = r#"{"userId":"edge","queue":"baseball"}"#;
    let body = format!("{prefix}{}", " ".repeat(4096 - prefix.len()));
    assert_eq!(body.len(), 4096);
    let r = post_json(s.wg.addr, "/api/v1/queue/register", &body).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn keep_alive_carries_several_api_calls() {
    use std::io::{BufReader, Write};
    let s = setup();
    let stream = std::net::TcpStream::connect(s.wg.addr).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    for user in ["k1", "k2", "k3"] {
        let body = format!(r#"{{"userId":"{user}"}}"#);
        write!(
            writer,
            "POST /api/v1/queue/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let r = read_response(&mut reader).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["userId"], user);
    }
}
