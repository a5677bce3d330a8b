//! Closing and reopening a queue (the end of a sale), over real Redis and
//! real HTTP: while closed, register is 410 `queue_closed` with the
//! operator's message and rank answers `CLOSED` with it; nobody is admitted,
//! tokens already issued keep working, and every waiting user keeps the
//! place, however long the closure, until a reopen brings them back; bad
//! input changes nothing; the closure and its message are written back
//! after Redis loses its data; the waiting-room page shows the message in
//! the visitor's language and stops, in a real browser too.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use redis::Commands;
use serde_json::{json, Value};

const CONTROL: &str = "queue:{baseball}:control";
const CLOSE: &str = "/admin/v1/queues/baseball/close";
const REOPEN: &str = "/admin/v1/queues/baseball/reopen";
const STATUS: &str = "/admin/v1/queues/baseball";
const MESSAGE: &str = "Sold out: thank you for waiting! Tickets may be back at 18:00.";

/// waitgate on `redis` with the admin API, queues as `queues` (YAML under
/// `queues:`), a waiting room on `/tickets` and the protected route
/// `/api/v1/follow-up` (both to `upstream`).
fn start(redis: &Redis, queues: &str, upstream: u16) -> Waitgate {
    TestConfig::on_free_ports(&redis.url(), upstream)
        .queues(queues)
        .route("{prefix: /tickets, upstream: ticketing, queue: baseball, waiting-room: true}")
        .set("cookies", "{secure: false}")
        .start_env(&[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)])
}

fn close(wg: &Waitgate, message: &str) -> Response {
    admin(
        wg,
        "POST",
        CLOSE,
        Some(&json!({ "message": message }).to_string()),
    )
}

fn reopen(wg: &Waitgate) -> Response {
    admin(wg, "POST", REOPEN, None)
}

fn waiting(redis: &Redis) -> Vec<String> {
    redis.conn().zrange(WAITING_KEY, 0, -1).unwrap()
}

/// Registers `user` in queue `baseball` (the first call after a Redis
/// restart may meet the connection that died with it: tried again on 503).
fn register_in(addr: std::net::SocketAddr, user: &str) -> Response {
    let body = json!({ "queue": "baseball", "userId": user }).to_string();
    register_after_restart(addr, &body)
}

fn rank_in(addr: std::net::SocketAddr, user: &str) -> Response {
    get(
        addr,
        &format!("/api/v1/queue/rank?queue=baseball&userId={user}"),
    )
    .unwrap()
}

/// The value of one metric series (0 when absent).
fn metric(wg: &Waitgate, series: &str) -> f64 {
    wg.metric(series).unwrap_or(0.0)
}

/// `r`, an answer to `method path`, is one `docs/openapi.yaml` lists for
/// that operation, with a body its schema accepts.
fn as_documented(method: &str, path: &str, r: &Response) {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.yaml"))
            .unwrap();
    let doc: Value = serde_yaml::from_str(&text).unwrap();
    let mut answer = doc["paths"][path][method]["responses"][r.status.to_string()].clone();
    assert!(
        answer.is_object(),
        "{method} {path} answered {}, which docs/openapi.yaml does not list",
        r.status
    );
    if let Some(reference) = answer["$ref"].as_str() {
        answer = doc
            .pointer(reference.trim_start_matches('#'))
            .unwrap()
            .clone();
    }
    let schema = &answer["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "{method} {path} {}: no JSON", r.status);
    let rooted = json!({ "components": doc["components"], "allOf": [schema] });
    let validator = jsonschema::validator_for(&rooted).unwrap();
    let body = r.json();
    let errors: Vec<String> = validator
        .iter_errors(&body)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{method} {path}: {body}: {errors:?}");
}

/// Closed, a queue takes nobody new and registers nobody again, and every
/// poll hears the operator's message; the waiting keep their places, and
/// the reopen gives each the place it had.
#[test]
fn a_closed_queue_refuses_registration_answers_closed_and_reopens_with_every_place() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball: {admission: {max-active: 1}}",
        free_port(),
    );
    for user in ["ann", "bob", "cat"] {
        register_new(wg.addr, user);
    }

    let r = close(&wg, MESSAGE);
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["closed"], true, "{v}");
    assert_eq!(v["closedMessage"], MESSAGE, "{v}");
    let closed_at = v["closedAt"].as_str().expect("closedAt").to_string();
    let v = admin(&wg, "GET", STATUS, None).json();
    assert_eq!(
        (&v["closed"], &v["closedMessage"], &v["waiting"]),
        (&json!(true), &json!(MESSAGE), &json!(3)),
        "{v}"
    );

    // Nobody joins, and nobody registers again: the same answer for both.
    for user in ["dan", "bob"] {
        let r = register_in(wg.addr, user);
        assert_eq!(r.status, 410, "{user}: {r:?}");
        assert_eq!(
            r.json(),
            json!({"error": "queue_closed", "message": MESSAGE})
        );
        assert!(r.json()["queueCredential"].is_null());
        as_documented("post", "/api/v1/queue/register", &r);
    }
    // A poll, of a waiting user or of anyone, hears the message.
    for user in ["bob", "stranger"] {
        let r = rank_in(wg.addr, user);
        assert_eq!(r.status, 200, "{user}: {r:?}");
        assert_eq!(
            r.json(),
            json!({"userId": user, "queue": "baseball", "status": "CLOSED", "message": MESSAGE})
        );
        as_documented("get", "/api/v1/queue/rank", &r);
    }
    assert_eq!(
        waiting(&redis),
        ["ann", "bob", "cat"],
        "places kept as they were"
    );

    // Closing again changes the message only.
    let r = close(&wg, "Sold out.");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["closedMessage"], "Sold out.");
    assert_eq!(r.json()["closedAt"], closed_at.as_str());
    assert_eq!(rank_in(wg.addr, "ann").json()["message"], "Sold out.");

    wg.wait_for_metrics(
        "waitgate_queue_closed{queue=\"baseball\"} 1",
        Duration::from_secs(5),
    );
    assert_eq!(
        metric(
            &wg,
            "waitgate_registrations_total{queue=\"baseball\",result=\"closed\"}"
        ),
        2.0
    );
    assert_eq!(
        metric(
            &wg,
            "waitgate_admin_changes_total{action=\"close\",queue=\"baseball\"}"
        ),
        2.0
    );

    let r = reopen(&wg);
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["closed"], false, "{v}");
    assert!(
        v["closedMessage"].is_null() && v["closedAt"].is_null(),
        "{v}"
    );
    for (i, user) in ["ann", "bob", "cat"].iter().enumerate() {
        let r = rank_in(wg.addr, user);
        assert_eq!(
            (r.status, &r.json()["status"], &r.json()["rank"]),
            (200, &json!("WAITING"), &json!(i)),
            "{user}: {r:?}"
        );
    }
    let r = register_in(wg.addr, "dan");
    assert_eq!((r.status, &r.json()["rank"]), (200, &json!(3)), "{r:?}");
    wg.wait_for_metrics(
        "waitgate_queue_closed{queue=\"baseball\"} 0",
        Duration::from_secs(5),
    );
    let reopened: Option<String> = redis.conn().hget(CONTROL, "closed").unwrap();
    assert_eq!(reopened, None);
}

/// Closed, the gate admits nobody though it has room; a token issued
/// before keeps working on the protected route, and an admitted user is
/// still told ACTIVE. The reopen lets the waiting in.
#[test]
fn a_closed_queue_admits_nobody_and_tokens_already_issued_keep_working() {
    let redis = Redis::start_free();
    let upstream = Upstream::start();
    let wg = start(
        &redis,
        "baseball: {admission: {interval-ms: 200, batch-size: 5, active-ttl-ms: 60000}}",
        upstream.port,
    );
    let token = admitted_token(&wg, &redis, "early");
    hold_gate(&redis);
    for user in ["w1", "w2"] {
        register_new(wg.addr, user);
    }
    assert_eq!(close(&wg, MESSAGE).status, 200);
    release_gate(&redis);

    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        waiting(&redis),
        ["w1", "w2"],
        "nobody admitted while closed"
    );
    let r = with_token(wg.addr, "GET", "/api/v1/follow-up/x", &token, None);
    assert_eq!(r.status, 200, "a token issued before works: {r:?}");
    assert_eq!(
        upstream.seen().last().unwrap().header("X-Waitgate-User"),
        Some("early")
    );
    assert_eq!(rank_in(wg.addr, "early").json()["status"], "ACTIVE");
    assert_eq!(register_in(wg.addr, "early").json()["status"], "ACTIVE");
    let v = admin(&wg, "GET", STATUS, None).json();
    assert_eq!((&v["waiting"], &v["active"]), (&json!(2), &json!(1)), "{v}");

    assert_eq!(reopen(&wg).status, 200);
    wait_until("the waiting admitted", Duration::from_secs(5), || {
        waiting(&redis).is_empty()
    });
    assert_eq!(rank_in(wg.addr, "w2").json()["status"], "ACTIVE");
}

/// Every refused close or reopen leaves the queue as it was: no closure,
/// registration open.
#[test]
fn a_close_with_bad_input_changes_nothing() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball: {admission: {max-active: 1}}",
        free_port(),
    );
    let json_type = ("Content-Type", "application/json");
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let bearer = ("Authorization", auth.as_str());
    let too_long = json!({ "message": "x".repeat(501) }).to_string();
    for (body, code) in [
        (r#"{}"#, "invalid_request"),
        (r#"{"message":null}"#, "invalid_request"),
        (r#"{"message":5}"#, "invalid_request"),
        (r#"{"message":["Sold out"]}"#, "invalid_request"),
        (r#"{"message":""}"#, "invalid_request"),
        (r#"{"message":"Sold out","extra":1}"#, "invalid_request"),
        (r#"{"message":"Sold","message":"out"}"#, "invalid_request"),
        (r#"["Sold out"]"#, "invalid_request"),
        ("{", "invalid_json"),
        (too_long.as_str(), "invalid_request"),
    ] {
        let r = admin(&wg, "POST", CLOSE, Some(body));
        assert_eq!((r.status, r.error_code()), (400, code.into()), "{body}");
        assert!(!r.json()["message"].as_str().unwrap().is_empty());
    }
    let r = admin(&wg, "POST", CLOSE, None);
    assert_eq!(r.status, 400, "no body: {r:?}");
    assert!(r.json()["message"].as_str().unwrap().contains("message"));
    let r = request(
        wg.admin,
        "POST",
        CLOSE,
        &[bearer, ("Content-Type", "text/plain")],
        Some(br#"{"message":"Sold out"}"#),
    )
    .unwrap();
    assert_eq!(r.status, 415, "{r:?}");
    let r = request(
        wg.admin,
        "POST",
        "/admin/v1/queues/nope/close",
        &[bearer, json_type],
        Some(br#"{"message":"Sold out"}"#),
    )
    .unwrap();
    assert_eq!((r.status, r.error_code()), (404, "unknown_queue".into()));
    for headers in [
        vec![json_type],
        vec![json_type, ("Authorization", "Bearer nope-nope-nope-nope")],
    ] {
        let r = request(
            wg.admin,
            "POST",
            CLOSE,
            &headers,
            Some(br#"{"message":"Sold out"}"#),
        )
        .unwrap();
        assert_eq!((r.status, r.error_code()), (401, "unauthorized".into()));
    }
    for path in [CLOSE, REOPEN] {
        let r = admin(&wg, "GET", path, None);
        assert_eq!(
            (r.status, r.error_code()),
            (405, "method_not_allowed".into())
        );
    }
    let r = admin(&wg, "POST", REOPEN, Some(r#"{"now":true}"#));
    assert_eq!(r.status, 400, "{r:?}");

    let mut control: std::collections::HashMap<String, String> =
        redis.conn().hgetall(CONTROL).unwrap();
    control.remove("incarnation");
    control.remove("born_at");
    assert!(control.is_empty(), "nothing changed: {control:?}");
    assert_eq!(register(wg.addr, "ann").status, 200, "still open");

    // 500 bytes is the most.
    let longest = "가".repeat(166) + "ab";
    assert_eq!(longest.len(), 500);
    let r = close(&wg, &longest);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(register(wg.addr, "bob").json()["message"], longest.as_str());
}

/// Queue `baseball` with heartbeats of a second and cleanup every 200 ms,
/// an outage grace of 3 s; nobody admitted (the harness's holder fills
/// `max-active: 1`).
const SHORT_HEARTBEATS: &str = "baseball:
  heartbeat: {timeout-ms: 1000, poll-min-ms: 200, poll-max-ms: 400, cleanup-interval-ms: 200, outage-grace-ms: 3000}
  admission: {max-active: 1, interval-ms: 200}";

/// A closure many heartbeat timeouts long, with nobody polling, loses no
/// place: the waiting come back after the reopen where they were. After
/// the reopen's grace, silence counts again.
#[test]
fn every_place_outlasts_a_closure_longer_than_the_heartbeat_timeout() {
    let redis = Redis::start();
    let wg = start(&redis, SHORT_HEARTBEATS, free_port());
    for user in ["ann", "bob", "cat"] {
        register_new(wg.addr, user);
    }
    assert_eq!(close(&wg, MESSAGE).status, 200);
    // Four timeouts and twenty cleanups with no poll.
    std::thread::sleep(Duration::from_millis(4000));
    assert_eq!(waiting(&redis), ["ann", "bob", "cat"]);

    assert_eq!(reopen(&wg).status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    for (i, user) in ["ann", "bob", "cat"].iter().enumerate() {
        let r = rank_in(wg.addr, user);
        assert_eq!(
            (r.status, &r.json()["status"], &r.json()["rank"]),
            (200, &json!("WAITING"), &json!(i)),
            "{user} back within the grace: {r:?}"
        );
    }
    // Ann and Bob poll as advised; Cat is silent, and goes once the grace
    // and a timeout have passed.
    let started = Instant::now();
    let mut gone = None;
    while started.elapsed() < Duration::from_secs(12) {
        for user in ["ann", "bob"] {
            assert_eq!(rank_in(wg.addr, user).json()["status"], "WAITING");
        }
        if waiting(&redis) == ["ann", "bob"] {
            gone = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let gone = gone.expect("the silent user removed after the grace");
    println!("the silent user went {gone:?} after the polls that followed the reopen");
    assert!(
        gone >= Duration::from_millis(1500),
        "not before the grace: {gone:?}"
    );
}

/// Redis restarts empty while the queue is closed: the closure and its
/// message are written back before anybody joins or is admitted, as a
/// pause is.
#[test]
fn a_closure_and_its_message_survive_redis_losing_its_data() {
    let mut redis = Redis::start_free();
    let wg = start(
        &redis,
        "baseball: {admission: {interval-ms: 200, batch-size: 5}}",
        free_port(),
    );
    assert_eq!(close(&wg, MESSAGE).status, 200);
    // The instance's look each second learns it.
    std::thread::sleep(Duration::from_millis(1500));

    redis.restart();
    let mut status = Value::Null;
    wait_until("the data loss noticed", Duration::from_secs(5), || {
        status = admin(&wg, "GET", STATUS, None).json();
        status["lastIncident"]["kind"] == "data_loss"
    });
    assert_eq!(status["closed"], true, "{status}");
    assert_eq!(status["closedMessage"], MESSAGE, "{status}");
    let closed: Option<String> = redis.conn().hget(CONTROL, "closed_message").unwrap();
    assert_eq!(closed.as_deref(), Some(MESSAGE), "written back to Redis");
    let r = register_in(wg.addr, "late");
    assert_eq!(
        (r.status, r.json()),
        (410, json!({"error": "queue_closed", "message": MESSAGE})),
        "{r:?}"
    );
    assert_eq!(rank_in(wg.addr, "late").json()["status"], "CLOSED");
    // The resume ends the wait for the places Redis lost to come back
    // (`rebuildUntil`), not the closure: someone put in the waiting set
    // behind waitgate's back is not admitted either.
    assert_eq!(
        admin(&wg, "POST", "/admin/v1/queues/baseball/resume", None).status,
        200
    );
    let _: () = redis.conn().zadd(WAITING_KEY, "sneak", 1).unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(waiting(&redis), ["sneak"], "nobody admitted while closed");
    assert!(wg.log().contains("closed=true"), "the write-back says so");

    assert_eq!(reopen(&wg).status, 200);
    let r = register_in(wg.addr, "late");
    assert_eq!(r.status, 200, "{r:?}");
    wait_until("admitted after the reopen", Duration::from_secs(5), || {
        waiting(&redis).is_empty()
    });
}

const HTML: (&str, &str) = ("Accept", "text/html");

/// The queue cookie a page load set, as a `Cookie` header value.
fn queue_cookie(r: &Response) -> String {
    r.headers
        .iter()
        .find(|(n, v)| n.eq_ignore_ascii_case("set-cookie") && v.starts_with("waitgate-queue-"))
        .map(|(_, v)| v.split(';').next().unwrap().to_string())
        .expect("the queue cookie")
}

/// The waiting-room page of a closed queue shows the operator's message
/// and a line of its own in the visitor's language, and neither refreshes
/// nor registers; after the reopen the cookie's place is there again.
#[test]
fn the_waiting_room_page_shows_the_message_in_the_visitors_language_and_stops() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "baseball: {admission: {max-active: 1}}",
        free_port(),
    );
    let page = "/waiting-room/baseball?return=/tickets";
    let load = |headers: &[(&str, &str)]| request(wg.addr, "GET", page, headers, None).unwrap();
    let first = load(&[HTML]);
    assert_eq!(first.status, 200);
    let cookie = queue_cookie(&first);
    assert!(first.text().contains("data-status=\"WAITING\""));

    let message = "Sold out <for today> & thank you";
    assert_eq!(close(&wg, message).status, 200);
    let escaped = "Sold out &lt;for today&gt; &amp; thank you";
    let r = load(&[HTML, ("Cookie", &cookie)]);
    assert_eq!(r.status, 200);
    let html = r.text();
    assert!(html.contains("data-status=\"CLOSED\""), "{html}");
    assert!(html.contains(&format!(">{escaped}<")), "{html}");
    assert!(html.contains(">The queue is closed<"), "{html}");
    assert!(
        html.contains("class=\"wg-note\">Nobody can join or be let in while the queue is closed"),
        "{html}"
    );
    assert!(
        !html.contains("http-equiv=\"refresh\""),
        "no refresh: {html}"
    );
    assert!(!html.contains(message), "the message is escaped");

    // A new visitor, in Korean: told the same, and not registered.
    let r = load(&[HTML, ("Accept-Language", "ko-KR,ko;q=0.9")]);
    assert_eq!(r.status, 200);
    let html = r.text();
    assert!(html.contains("<html lang=\"ko\">"));
    assert!(html.contains(">대기열이 닫혔습니다<"), "{html}");
    assert!(
        html.contains("이 페이지는 더 이상 갱신되지 않습니다"),
        "{html}"
    );
    assert!(html.contains(&format!(">{escaped}<")), "{html}");
    assert!(
        !r.headers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("set-cookie") && v.starts_with("waitgate-queue-")),
        "nobody registered"
    );
    assert_eq!(waiting(&redis).len(), 1);

    assert_eq!(reopen(&wg).status, 200);
    let r = load(&[HTML, ("Cookie", &cookie)]);
    let html = r.text();
    assert!(html.contains("data-status=\"WAITING\""), "{html}");
    assert!(
        html.contains("You&#39;re next.") || html.contains("You're next."),
        "{html}"
    );
}

/// In a real browser: the open page, polling, hears the closure at its
/// next poll, shows the message and the closed line, and then neither
/// polls nor reloads; the client's register surfaces the 410's message.
#[test]
fn the_page_in_a_browser_stops_polling_and_shows_the_message_once_closed() {
    use common::browser::*;
    let redis = Redis::start();
    // Polls a second apart at most.
    let wg = start(
        &redis,
        "baseball: {admission: {max-active: 1}, heartbeat: {poll-min-ms: 500, poll-max-ms: 1000}}",
        free_port(),
    );
    register_new(wg.addr, "ahead");
    let url = format!("http://{}/tickets/seat", wg.addr);
    runtime().block_on(async {
        let chromium = Chromium::launch().await;
        let page = chromium.browser.new_page(url).await.unwrap();
        until(
            &page,
            "location.pathname === '/waiting-room/baseball' && document.readyState === 'complete' \
             && document.getElementById('waitgate').dataset.status === 'WAITING'",
            Duration::from_secs(10),
        )
        .await;
        let _: bool = eval(
            &page,
            "(() => { window.ranks = 0; window.stayed = true; const f = window.fetch;
               window.fetch = (...a) => { if (String(a[0]).includes('/rank')) window.ranks++;
                 return f(...a); }; return true; })()",
        )
        .await;
        let r = close(&wg, MESSAGE);
        assert_eq!(r.status, 200);
        until(
            &page,
            "document.getElementById('waitgate').dataset.status === 'CLOSED'",
            Duration::from_secs(5),
        )
        .await;
        let shown: Vec<String> = eval(
            &page,
            "['wg-heading', 'wg-message', 'wg-note', 'wg-place']
               .map((id) => document.getElementById(id).textContent.trim())",
        )
        .await;
        assert_eq!(shown[0], "The queue is closed");
        assert_eq!(shown[1], MESSAGE);
        assert!(shown[2].starts_with("Nobody can join"), "{shown:?}");
        assert_eq!(shown[3], "–");
        let polls: u64 = eval(&page, "window.ranks").await;
        tokio::time::sleep(Duration::from_millis(4000)).await;
        let later: u64 = eval(&page, "window.ranks").await;
        assert_eq!(later, polls, "no poll once closed");
        let stayed: bool = eval(&page, "window.stayed === true").await;
        assert!(stayed, "no reload once closed");

        // The client a site's own page uses: register rejects with the
        // operator's message.
        let refused: String = eval(
            &page,
            "new WaitgateClient({ queue: 'baseball' }).register({ userId: 'someone' })
               .then(() => 'joined', (e) => [e.status, e.code, e.message].join('|'))",
        )
        .await;
        assert_eq!(refused, format!("410|queue_closed|{MESSAGE}"));
        chromium.close().await;
    });
}
