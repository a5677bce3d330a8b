//! SIGHUP reloads the config file with no connection dropped: routes,
//! upstreams, queues and the log filter change; a bad file is refused and
//! the running config stays.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

/// The test config with `queues`, the follow-up route, and the top-level
/// keys of `extra` (YAML).
fn config_text(redis: &Redis, ports: &Ports, upstream: u16, queues: &str, extra: &str) -> String {
    TestConfig::new(&redis.url(), ports, upstream)
        .queues(queues)
        .with(extra)
        .yaml()
}

#[test]
fn a_reload_changes_routes_queues_and_the_log_filter_without_dropping_a_request() {
    let redis = Redis::start();
    let first = Upstream::start();
    let second = Upstream::start();
    let ports = Ports::new();
    let queues = "baseball: {admission: {max-active: 1}}";
    let log = "log: {filter: 'warn,waitgate::reload=info', format: text}\n";
    let wg = Waitgate::start_env(
        &config_text(&redis, &ports, first.port, queues, log),
        &ports,
        &[("RUST_LOG", "")],
    );
    let token = admitted_token(&wg, &redis, "fan_1");
    let auth = format!("Bearer {token}");

    // Two clients keep requests going across the reloads: one on a single
    // kept-alive connection, one opening a connection per request.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    {
        let (stop, ok, failed, auth) = (stop.clone(), ok.clone(), failed.clone(), auth.clone());
        let addr = wg.addr;
        clients.push(std::thread::spawn(move || {
            let mut client = Client::connect(addr);
            while !stop.load(Ordering::Relaxed) {
                client.send(&format!(
                    "GET /api/v1/follow-up/seat HTTP/1.1\r\nHost: t\r\nAuthorization: {auth}\r\n\r\n"
                ));
                let (head, _) = client.response();
                if head.status == 200 && head.header("connection") != Some("close") {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }));
    }
    {
        let (stop, ok, failed, auth) = (stop.clone(), ok.clone(), failed.clone(), auth.clone());
        let addr = wg.addr;
        clients.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match request(
                    addr,
                    "GET",
                    "/api/v1/follow-up/seat",
                    &[("Authorization", &auth)],
                    None,
                ) {
                    Ok(r) if r.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    // Before: no route /v2, no queue `soccer`, no access lines.
    assert_eq!(get(wg.addr, "/v2/seat").unwrap().status, 404);
    let r = register_in(wg.addr, "soccer", "fan_2");
    assert_eq!(r.error_code(), "unknown_queue");
    assert!(!wg.log().contains("waitgate::access"), "{}", wg.log());

    // The new file: route /v2 to the second upstream, a queue `soccer` that
    // admits quickly, and the access log let through.
    let reloaded = TestConfig::new(&redis.url(), &ports, first.port)
        .queues(&format!(
            "{queues}\nsoccer: {{admission: {{interval-ms: 100}}}}"
        ))
        .log("{filter: 'warn,waitgate::reload=info,waitgate::access=info', format: text}")
        .upstream(
            "second",
            &format!("{{address: '127.0.0.1:{}'}}", second.port),
        )
        .route("{prefix: /v2, upstream: second, queue: baseball}");
    let new = reloaded.yaml();
    wg.reload(&new);
    wg.wait_for_log("config reloaded", 1);
    let v2_seat = || {
        request(
            wg.addr,
            "GET",
            "/v2/seat",
            &[("Authorization", &auth)],
            None,
        )
        .unwrap()
    };

    let r = v2_seat();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(second.seen().last().unwrap().target, "/v2/seat");
    let r = register_in(wg.addr, "soccer", "fan_2");
    assert_eq!(r.status, 200, "{r:?}");
    // The background loops run for the new queue: fan_2 is admitted.
    let mut r = None;
    let admitted = eventually(Duration::from_secs(5), || {
        let answer = get(wg.addr, "/api/v1/queue/rank?userId=fan_2&queue=soccer").unwrap();
        let active = answer.json()["status"] == "ACTIVE";
        r = Some(answer);
        active
    });
    assert!(admitted, "{r:?}");
    // The new filter lets the access lines through.
    wg.wait_for_log("waitgate::access", 1);

    // A bad file is refused; everything keeps working as reloaded.
    wg.reload(new.replace("routes:", "routez:"));
    wg.wait_for_log("reload refused", 1);
    let r = v2_seat();
    assert_eq!(r.status, 200);
    // So is a file whose upstream does not resolve.
    let unresolved = reloaded
        .clone()
        .set("upstreams.second.address", "no-such-host.invalid:80");
    wg.reload(unresolved.yaml());
    wg.wait_for_log("reload refused", 2);
    assert!(wg.log().contains("no-such-host.invalid"), "{}", wg.log());

    // A listener change is reported as needing a restart.
    let moved = reloaded.set("listen", &format!("'127.0.0.1:{}'", free_port()));
    wg.reload(moved.yaml());
    wg.wait_for_log("config reloaded", 2);
    assert!(
        wg.log().contains("takes effect after a restart"),
        "{}",
        wg.log()
    );

    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!("requests across four reloads: {ok} answered 200, {failed} failed");
    assert!(ok > 100, "{ok}");
    assert_eq!(failed, 0);
    let metrics = get(wg.admin, "/metrics").unwrap().text();
    assert!(
        metrics.contains("waitgate_config_reloads_total{result=\"ok\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("waitgate_config_reloads_total{result=\"refused\"} 2"),
        "{metrics}"
    );
}

/// The `Set-Cookie` of a response that sets `name`, whole.
fn set_cookie<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.as_str())
        .find(|c| c.starts_with(&format!("{name}=")))
}

#[test]
fn a_reload_applies_cookies_cors_and_the_public_origin() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let ports = Ports::new();
    let queues = "baseball: {admission: {max-active: 1}}";
    let before = "cookies: {secure: true}\ncors: {allowed-origins: ['https://shop.example']}\n";
    let wg = Waitgate::start(
        &config_text(&redis, &ports, upstream.port, queues, before),
        &ports,
    );
    let token = admitted_token(&wg, &redis, "fan_1");
    let token_cookie = format!("waitgate-token-baseball={token}");

    let page_cookie = || {
        let r = get_with(
            wg.addr,
            "/waiting-room/baseball",
            &[("Accept", "text/html")],
        );
        assert_eq!(r.status, 200, "{r:?}");
        set_cookie(&r, "waitgate-queue-baseball")
            .unwrap()
            .to_string()
    };
    let preflight = |origin: &str| {
        request(
            wg.addr,
            "OPTIONS",
            "/api/v1/queue/register",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
            ],
            None,
        )
        .unwrap()
        .status
    };
    // A register with no userId is the page's own call: the same-site rule.
    let register_from = |origin: &str| {
        request(
            wg.addr,
            "POST",
            "/api/v1/queue/register",
            &[("Origin", origin), ("Content-Type", "application/json")],
            Some(br#"{"queue":"baseball"}"#),
        )
        .unwrap()
        .status
    };
    // A change on a protected route that the token cookie authenticates.
    let protected_post_from = |origin: &str| {
        request(
            wg.addr,
            "POST",
            "/api/v1/follow-up/seat",
            &[("Origin", origin), ("Cookie", &token_cookie)],
            Some(b"{}"),
        )
        .unwrap()
        .status
    };

    assert!(page_cookie().contains("Secure"));
    assert_eq!(preflight("https://shop.example"), 204);
    assert_eq!(preflight("https://shop2.example"), 403);
    assert_eq!(register_from("https://shop.example"), 200);
    assert_eq!(register_from("https://tickets.example"), 403);
    assert_eq!(protected_post_from("https://shop.example"), 200);

    // The operator drops shop.example, adds shop2.example, names the
    // site's public origin and turns Secure off.
    let after = "cookies: {secure: false}\ncors: {allowed-origins: ['https://shop2.example']}\n\
                 public-origin: https://tickets.example\n";
    wg.reload(config_text(&redis, &ports, upstream.port, queues, after));
    wg.wait_for_log("config reloaded", 1);
    assert!(
        !wg.log().contains("takes effect after a restart"),
        "{}",
        wg.log()
    );

    assert!(!page_cookie().contains("Secure"));
    assert_eq!(preflight("https://shop.example"), 403, "a removed origin");
    assert_eq!(preflight("https://shop2.example"), 204);
    assert_eq!(
        register_from("https://shop.example"),
        403,
        "a removed origin"
    );
    assert_eq!(register_from("https://shop2.example"), 200);
    assert_eq!(register_from("https://tickets.example"), 200);
    assert_eq!(protected_post_from("https://shop.example"), 403);
    assert_eq!(protected_post_from("https://tickets.example"), 200);
}

/// A reload that turns one queue into several says what that does to
/// clients that name no queue, which were served until then.
#[test]
fn a_reload_to_several_queues_warns_that_calls_must_name_one() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let ports = Ports::new();
    let wg = Waitgate::start(
        &config_text(&redis, &ports, upstream.port, "baseball: {}", ""),
        &ports,
    );
    assert_eq!(register(wg.addr, "plain").status, 200);
    wg.reload(config_text(
        &redis,
        &ports,
        upstream.port,
        "baseball: {}\nsoccer: {}",
        "",
    ));
    wg.wait_for_log("config reloaded", 1);
    assert!(
        wg.log()
            .contains("queue API calls that name no queue are refused"),
        "{}",
        wg.log()
    );
    assert_eq!(rank(wg.addr, "plain").status, 400);
}

/// Files read only at start (here the TLS listener's certificate and key)
/// that changed on disk are named by a reload, as needing a restart; a
/// reload that finds them as they were says nothing of them.
#[test]
fn a_reload_names_a_certificate_that_changed_on_disk() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let ports = Ports::new();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    tls::ca(d);
    tls::signed(d, "server", "localhost", "subjectAltName=DNS:localhost\n");
    let config = TestConfig::new(&redis.url(), &ports, upstream.port)
        .queues("baseball: {}")
        .listen_tls(free_port(), d);
    let wg = Waitgate::start(&config.yaml(), &ports);
    wg.signal("HUP");
    wg.wait_for_log("config reloaded", 1);
    assert!(!wg.log().contains("changed since start"), "{}", wg.log());

    // A new certificate and key in the same files.
    tls::signed(d, "server", "localhost", "subjectAltName=DNS:localhost\n");
    wg.signal("HUP");
    wg.wait_for_log("config reloaded", 2);
    let log = wg.log();
    let named = wg.log_lines("changed since start");
    assert_eq!(named.len(), 2, "{log}");
    assert!(named[0].contains("listen-tls.cert-file"), "{log}");
    assert!(named[1].contains("listen-tls.key-file"), "{log}");
    assert!(named[0].contains("takes effect after a restart"), "{log}");
}
