//! Invite-only queues (`queues.<q>.invite`), through real connections on
//! both HTTP paths: a register without the site's signed invite is refused
//! before Redis, an invite buys one place, once, for its queue and (with
//! `sub`) its user; the waiting-room page joins with the invite of its
//! link; an invite-only queue that also asks a proof of work takes both.

mod common;

use common::*;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use redis::Commands;

const SECRET: &str = "the-site-s-invite-secret-of-32-bytes-or-more";
const WAITING: &str = "queue:{baseball}:waiting";

/// Queue `baseball`, invite-only, whose gate admits nobody (a place stays
/// a place while a test looks at it).
fn invite_only(redis: &Redis, extra: &str) -> Waitgate {
    hold_gate(redis);
    TestConfig::on_free_ports(&redis.url(), free_port())
        .set(
            "queues.baseball",
            &format!("{{invite: {{secret-env: SITE_INVITE_SECRET}}{extra}}}"),
        )
        .set(
            "routes",
            "[{prefix: /tickets, upstream: ticketing, queue: baseball, waiting-room: true}]",
        )
        .set("cookies", "{secure: false}")
        .start_env(&[("SITE_INVITE_SECRET", SECRET)])
}

fn invite(claims: serde_json::Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn in_an_hour() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600
}

fn open_invite(jti: &str) -> String {
    invite(serde_json::json!({"queue": "baseball", "jti": jti, "exp": in_an_hour()}))
}

fn register_with(wg: &Waitgate, user: &str, headers: &[(&str, &str)]) -> Response {
    register_sending(wg.addr, serde_json::json!({ "userId": user }), headers)
}

fn refused(wg: &Waitgate, reason: &str) -> u64 {
    wg.metric(&format!(
        "waitgate_invite_refused_total{{queue=\"baseball\",reason=\"{reason}\"}}"
    ))
    .unwrap_or(0)
}

fn placed(redis: &Redis) -> u64 {
    let mut c = redis.conn();
    c.zcard::<_, u64>(WAITING).unwrap() + c.zcard::<_, u64>(ACTIVE_KEY).unwrap()
}

#[test]
fn an_invite_buys_one_place_for_its_queue_and_user() {
    let redis = Redis::start_free();
    let wg = invite_only(&redis, "");
    let monitor = Monitor::start(&redis);
    let r = register_with(&wg, "crasher", &[]);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (403, "invite_required")
    );
    let forged = encode(
        &Header::new(Algorithm::HS256),
        &serde_json::json!({"queue": "baseball", "jti": "f", "exp": in_an_hour()}),
        &EncodingKey::from_secret(b"not-the-site-s-secret-but-as-long-as-it"),
    )
    .unwrap();
    for bad in [
        forged.as_str(),
        "",
        "not.a.token",
        &invite(serde_json::json!({"queue": "baseball", "jti": "old", "exp": 1_000})),
        &invite(serde_json::json!({"queue": "football", "jti": "x", "exp": in_an_hour()})),
        &invite(
            serde_json::json!({"queue": "baseball", "jti": "y", "exp": in_an_hour(), "sub": "someone-else"}),
        ),
        // "Never expires", and `exp` in milliseconds: not an invitation.
        &invite(
            serde_json::json!({"queue": "baseball", "jti": "z", "exp": 9_007_199_254_740_991u64}),
        ),
        &invite(serde_json::json!({"queue": "baseball", "jti": "w", "exp": in_an_hour() * 1000})),
    ] {
        let r = register_with(&wg, "crasher", &[("X-Waitgate-Invite", bad)]);
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (403, "invite_invalid"),
            "{bad}: {r:?}"
        );
    }
    let lines = monitor.take_lines();
    assert!(
        !lines.iter().any(|l| l.contains("\"crasher\"")),
        "a refused register reached Redis: {lines:#?}"
    );
    assert_eq!(placed(&redis), 0);
    assert_eq!(
        (
            refused(&wg, "required"),
            refused(&wg, "invalid"),
            refused(&wg, "expired"),
            refused(&wg, "other_queue"),
            refused(&wg, "other_user")
        ),
        (1, 5, 1, 1, 1)
    );

    let token = open_invite("inv-1");
    let r = register_with(&wg, "guest", &[("X-Waitgate-Invite", &token)]);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json()["queueCredential"].is_string());
    for user in ["friend", "stranger"] {
        let r = register_with(&wg, user, &[("X-Waitgate-Invite", &token)]);
        assert_eq!(r.error_code(), "invite_invalid", "{user}: {r:?}");
    }
    assert_eq!(refused(&wg, "spent"), 2);
    // An invite for a named user is that user's.
    let named = invite(
        serde_json::json!({"queue": "baseball", "jti": "inv-2", "exp": in_an_hour(), "sub": "vip"}),
    );
    assert_eq!(
        register_with(&wg, "vip", &[("X-Waitgate-Invite", &named)]).status,
        200
    );
    assert_eq!(placed(&redis), 2);
}

/// The page of an invitation's link neither joins nor spends the invite
/// on its load (a mail link scanner or a chat preview loads it too): it
/// hands the invite to its script, whose register (a same-site POST) takes
/// the place and sets the cookie.
#[test]
fn the_page_of_an_invitation_leaves_the_join_to_its_script() {
    let redis = Redis::start_free();
    let wg = invite_only(&redis, "");
    let html = [
        ("Accept", "text/html"),
        ("Sec-Fetch-Mode", "navigate"),
        ("Sec-Fetch-Dest", "document"),
        ("Sec-Fetch-Site", "none"),
    ];
    let load = |target: &str, headers: &[(&str, &str)]| {
        let r = request(wg.addr, "GET", target, headers, None).unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        r
    };
    // Without an invite the page says the queue is by invitation, and
    // neither joins nor refreshes.
    let r = load("/waiting-room/baseball?return=/tickets", &html);
    let page = r.text();
    assert!(page.contains("data-status=\"INVITE_REQUIRED\""), "{page}");
    assert!(page.contains("This queue is by invitation"));
    assert!(!page.contains("http-equiv=\"refresh\""));
    assert!(r.header("Set-Cookie").is_none());
    // A forged one: the same, saying it is not valid.
    let r = load("/waiting-room/baseball?return=/tickets&invite=a.b.c", &html);
    assert!(
        r.text().contains("This invitation is not valid"),
        "{}",
        r.text()
    );
    // With the invitation's link, loaded twice (a scanner, then the
    // visitor): the page to join, with the invite for its script; nothing
    // spent, nobody placed.
    let token = open_invite("page-1");
    let target = format!("/waiting-room/baseball?return=/tickets&invite={token}");
    for _ in 0..2 {
        let r = load(&target, &[("Accept", "text/html")]);
        let page = r.text();
        assert!(page.contains("data-status=\"JOIN\""), "{page}");
        assert!(page.contains(&format!("\"invite\":\"{token}\"")), "{page}");
        assert!(r.header("Set-Cookie").is_none());
    }
    assert_eq!(placed(&redis), 0);
    // The script's register: the place and the cookie.
    let r = request(
        wg.addr,
        "POST",
        "/api/v1/queue/register",
        &[
            ("Content-Type", "application/json"),
            ("Sec-Fetch-Site", "same-origin"),
            ("X-Waitgate-Invite", &token),
        ],
        Some(b"{}"),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let cookie = r
        .header("Set-Cookie")
        .expect("the queue cookie")
        .to_string();
    assert_eq!(placed(&redis), 1);
    // The cookie keeps the place, invite or not.
    let pair = cookie.split(';').next().unwrap().to_string();
    let mut with_cookie = html.to_vec();
    with_cookie.push(("Cookie", &pair));
    let r = load(&target, &with_cookie);
    assert!(r.text().contains("data-status=\"WAITING\""), "{}", r.text());
}

/// A client that lost the answer of the register that spent its invite
/// (a timeout, a 503) asks again and is told its place, not refused: it
/// cannot get another invitation.
#[test]
fn a_register_asked_again_after_its_invite_was_spent_gets_the_place() {
    let redis = Redis::start_free();
    let wg = invite_only(&redis, "");
    let token = open_invite("again-1");
    let first = register_with(&wg, "guest", &[("X-Waitgate-Invite", &token)]);
    assert_eq!(first.status, 200, "{first:?}");
    let again = register_with(&wg, "guest", &[("X-Waitgate-Invite", &token)]);
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.json()["status"], first.json()["status"]);
    // Anyone else with it is refused.
    assert_eq!(
        register_with(&wg, "other", &[("X-Waitgate-Invite", &token)]).error_code(),
        "invite_invalid"
    );
    assert_eq!(placed(&redis), 1);
}

#[test]
fn an_invite_only_queue_that_asks_a_proof_of_work_takes_both() {
    let redis = Redis::start_free();
    let wg = invite_only(&redis, ", challenge: {difficulty-bits: 4}");
    let token = open_invite("both-1");
    let challenge = get(wg.addr, "/api/v1/queue/challenge").unwrap().json();
    let proof = solve_proof(challenge["challenge"].as_str().unwrap(), 4);
    assert_eq!(
        register_with(&wg, "a", &[("X-Waitgate-Invite", &token)]).error_code(),
        "proof_required"
    );
    assert_eq!(
        register_with(&wg, "a", &[("X-Waitgate-Proof", &proof)]).error_code(),
        "invite_required"
    );
    let r = register_with(
        &wg,
        "a",
        &[("X-Waitgate-Invite", &token), ("X-Waitgate-Proof", &proof)],
    );
    assert_eq!(r.status, 200, "{r:?}");
    // Both were spent on that place.
    let challenge = get(wg.addr, "/api/v1/queue/challenge").unwrap().json();
    let fresh = solve_proof(challenge["challenge"].as_str().unwrap(), 4);
    assert_eq!(
        register_with(
            &wg,
            "b",
            &[("X-Waitgate-Invite", &token), ("X-Waitgate-Proof", &fresh)]
        )
        .error_code(),
        "invite_invalid"
    );
    assert_eq!(
        register_with(
            &wg,
            "b",
            &[
                ("X-Waitgate-Invite", &open_invite("both-2")),
                ("X-Waitgate-Proof", &proof)
            ]
        )
        .error_code(),
        "proof_invalid",
        "the spent proof refuses the register, and is named"
    );
    assert_eq!(placed(&redis), 1);
}

#[test]
fn an_invite_secret_missing_or_short_is_a_config_error() {
    let redis = Redis::start_free();
    for (env, why) in [
        (vec![], "SITE_INVITE_SECRET is not set"),
        (
            vec![("SITE_INVITE_SECRET", "short")],
            "SITE_INVITE_SECRET is shorter than 32 bytes",
        ),
    ] {
        let yaml = TestConfig::on_free_ports(&redis.url(), free_port())
            .set(
                "queues.baseball",
                "{invite: {secret-env: SITE_INVITE_SECRET}}",
            )
            .yaml();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("waitgate.yaml");
        std::fs::write(&path, yaml).unwrap();
        let out = std::process::Command::new(binary())
            .args(["-c", path.to_str().unwrap(), "-t"])
            .env("JWT_SECRET", SECRET_B64)
            .env_remove("SITE_INVITE_SECRET")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
    }
}
