//! Per-client limits on the queue API (`limits.*-per-client`), through real
//! connections on both HTTP paths: a 429 with `Retry-After` and no Redis
//! call over a limit, the client read through `trusted-proxies`, protected
//! routes never limited, the page counted, a reload applied.

mod common;

use std::time::Duration;

use common::*;
use redis::Commands;

const HTML: (&str, &str) = ("Accept", "text/html,application/xhtml+xml,*/*;q=0.8");

/// Queue `baseball` with `limits` as its `limits` section.
fn with_limits(redis: &Redis, limits: &str) -> Waitgate {
    TestConfig::on_free_ports(&redis.url(), free_port())
        .set("limits", limits)
        .start()
}

fn register_from(wg: &Waitgate, user: &str, forwarded: Option<&str>) -> Response {
    let headers: Vec<_> = forwarded
        .map(|xff| ("X-Forwarded-For", xff))
        .into_iter()
        .collect();
    register_sending(wg.addr, serde_json::json!({ "userId": user }), &headers)
}

fn limited(wg: &Waitgate, route: &str) -> u64 {
    let series = format!("waitgate_rate_limited_total{{route=\"{route}\"}}");
    wg.metric(&series).unwrap_or_else(|| {
        panic!(
            "no {series} in\n{}",
            get(wg.admin, "/metrics").unwrap().text()
        )
    })
}

fn assert_limited(r: &Response) {
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.error_code(), "rate_limited");
    let after: u64 = r
        .header("Retry-After")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("Retry-After in {r:?}"));
    // The slowest limit in these tests is one request in 10 s.
    assert!((1..=10).contains(&after), "{after}");
}

#[test]
fn over_the_register_limit_a_client_gets_429_and_costs_redis_nothing() {
    let redis = Redis::start_free();
    let wg = with_limits(&redis, "{register-per-client: {per-second: 1, burst: 3}}");
    let monitor = Monitor::start(&redis);
    for i in 0..3 {
        let r = register(wg.addr, &format!("u{i}"));
        assert_eq!(r.status, 200, "{r:?}");
    }
    for i in 3..6 {
        assert_limited(&register(wg.addr, &format!("u{i}")));
    }
    let lines = monitor.take_lines();
    for i in 3..6 {
        let user = format!("\"u{i}\"");
        assert!(
            !lines.iter().any(|l| l.contains(&user)),
            "u{i} reached Redis: {lines:#?}"
        );
    }
    let mut c = redis.conn();
    let joined: u64 = c.zcard::<_, u64>("queue:{baseball}:waiting").unwrap()
        + c.zcard::<_, u64>(ACTIVE_KEY).unwrap();
    assert_eq!(joined, 3, "waiting and admitted");
    assert_eq!(limited(&wg, "register"), 3);
    // Rank polls and dropouts have no limit set: they go on.
    for _ in 0..10 {
        assert_eq!(rank(wg.addr, "u0").status, 200);
    }
    // After the advised wait, one more.
    std::thread::sleep(Duration::from_millis(1_050));
    assert_eq!(register(wg.addr, "u6").status, 200);
    assert_limited(&register(wg.addr, "u7"));
}

#[test]
fn rank_and_token_limits_hold_on_their_own_and_never_touch_protected_routes() {
    let redis = Redis::start_free();
    let upstream = Upstream::start();
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port)
        .set(
            "limits",
            "{rank-per-client: {per-second: 1, burst: 2}, token-per-client: {per-second: 1, burst: 1}}",
        )
        .start();
    // Registering is not limited here; the admitted user's token was the
    // one exchange the token limit allows.
    let token = admitted_token(&wg, &redis, "fan");
    let credential = register_new(wg.addr, "other");
    assert_eq!(rank(wg.addr, "other").status, 200);
    assert_eq!(rank(wg.addr, "other").status, 200);
    assert_limited(&rank(wg.addr, "other"));
    assert_eq!(limited(&wg, "rank"), 1);
    let exchange = post_json(
        wg.addr,
        "/api/v1/queue/active/token",
        &serde_json::json!({"userId": "other", "queueCredential": credential}).to_string(),
    )
    .unwrap();
    assert_limited(&exchange);
    assert_eq!(limited(&wg, "token"), 1);
    // An admitted user's protected requests carry a token: no limit.
    for _ in 0..50 {
        let r = with_token(wg.addr, "GET", "/api/v1/follow-up/seat", &token, None);
        assert_eq!(r.status, 200, "{r:?}");
    }
    assert_eq!(limited(&wg, "register"), 0);
}

#[test]
fn the_client_is_read_through_trusted_proxies_only() {
    let redis = Redis::start_free();
    let limits = "{register-per-client: {per-second: 0.1, burst: 1}}";
    let trusting = TestConfig::on_free_ports(&redis.url(), free_port())
        .set("limits", limits)
        .set("trusted-proxies", "[127.0.0.1]")
        .start();
    // Behind the balancer, each client has its own budget; the hop the
    // balancer appended is the client, whatever the client wrote before it.
    assert_eq!(register_from(&trusting, "a1", Some("10.0.0.1")).status, 200);
    assert_limited(&register_from(&trusting, "a2", Some("10.0.0.1")));
    assert_limited(&register_from(&trusting, "a3", Some("192.0.2.7, 10.0.0.1")));
    assert_eq!(register_from(&trusting, "b1", Some("10.0.0.2")).status, 200);
    // An IPv6 client counts by its /64.
    assert_eq!(
        register_from(&trusting, "c1", Some("2001:db8:1:2::1")).status,
        200
    );
    assert_limited(&register_from(&trusting, "c2", Some("2001:db8:1:2::99")));

    // A client that is not a trusted proxy cannot pick its address.
    let plain = with_limits(&redis, limits);
    assert_eq!(register_from(&plain, "d1", Some("10.0.0.3")).status, 200);
    assert_limited(&register_from(&plain, "d2", Some("10.0.0.4")));
}

#[test]
fn page_loads_count_against_the_register_limit_and_a_reload_changes_the_rate() {
    let redis = Redis::start_free();
    let config = TestConfig::on_free_ports(&redis.url(), free_port()).set(
        "limits",
        "{register-per-client: {per-second: 0.1, burst: 2}}",
    );
    let wg = config.start();
    let page =
        |wg: &Waitgate| request(wg.addr, "GET", "/waiting-room/baseball", &[HTML], None).unwrap();
    assert_eq!(page(&wg).status, 200);
    assert_eq!(register(wg.addr, "x1").status, 200);
    // A browser over the limit gets the page that retries, not JSON.
    let refused = page(&wg);
    assert_eq!(refused.status, 429, "{refused:?}");
    assert!(refused.header("Retry-After").is_some(), "{refused:?}");
    assert!(
        refused
            .header("Content-Type")
            .is_some_and(|t| t.starts_with("text/html")),
        "{refused:?}"
    );
    assert!(refused.header("Set-Cookie").is_none(), "it joined nothing");
    assert_limited(&register(wg.addr, "x2"));
    // The page's files are not loads of it.
    let asset = get(wg.addr, "/waiting-room/assets/waitgate-client.js").unwrap();
    assert_eq!(asset.status, 200);
    assert_eq!((limited(&wg, "page"), limited(&wg, "register")), (1, 1));

    // The operator raises the limit: a SIGHUP applies it to the next call.
    wg.reload(
        config
            .clone()
            .set(
                "limits",
                "{register-per-client: {per-second: 1000, burst: 100}}",
            )
            .yaml(),
    );
    wg.wait_for_log("config reloaded", 1);
    for i in 0..20 {
        assert_eq!(register(wg.addr, &format!("y{i}")).status, 200);
    }
}

/// A register refused by the limit keeps its keep-alive connection on
/// both HTTP paths: its small JSON body is read (as the direct lane reads
/// it to answer), so the next request on the connection is answered too.
#[test]
fn a_limited_register_keeps_its_connection_on_either_path() {
    let redis = Redis::start_free();
    let wg = with_limits(
        &redis,
        "{register-per-client: {per-second: 0.01, burst: 1}}",
    );
    let mut client = Client::connect(wg.addr);
    let register = |user: &str| {
        let body = format!(r#"{{"userId":"{user}"}}"#);
        format!(
            "POST /api/v1/queue/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    client.send(&register("first"));
    let (head, _) = client.response();
    assert_eq!(head.status, 200);
    for user in ["second", "third"] {
        client.send(&register(user));
        let (head, _) = client.response();
        assert_eq!(head.status, 429, "{user}");
        assert_ne!(head.header("Connection"), Some("close"), "{user}");
    }
    // And a rank poll after them, on the same connection.
    client.send("GET /api/v1/queue/rank?userId=first HTTP/1.1\r\nHost: x\r\n\r\n");
    let (head, _) = client.response();
    assert_eq!(head.status, 200);
}
