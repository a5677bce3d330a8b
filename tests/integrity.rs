//! Edge integrity: one user's bytes never reach another, and an upstream or
//! a client cannot make the two HTTP paths behave differently.
//!
//! Each test drives a real waitgate over real TCP connections against a
//! scripted upstream (`common::scripted`) that misbehaves in one precise
//! way. Forwarded requests are sent as a `GET` and a `POST` with a
//! length-framed body (both served by the direct lane when it is on) and as
//! a `POST` with a chunked body (always the Pingora proxy); CI runs this
//! suite with `WAITGATE_TEST_DIRECT_LANE=off` too, so every rule is checked
//! on both paths.

mod common;

use std::time::Duration;

use common::scripted::{injected, ok, Scripted, Step};
use common::*;

const PROTECTED: &str = "/api/v1/follow-up";

struct Env {
    redis: Redis,
    upstream: Scripted,
    wg: Waitgate,
    token: String,
}

/// waitgate in front of a scripted upstream, with the protected route and a
/// token for user `fan`. `top` is extra top-level config (such as
/// `trusted-proxies`), `route` one more route (YAML) if not empty.
fn setup_with(
    top: &str,
    route: &str,
    script: impl Fn(&str) -> Vec<Step> + Send + Sync + 'static,
) -> Env {
    let redis = Redis::start();
    let ports = Ports::new();
    let upstream = Scripted::start(move |r| script(r.path()));
    let mut config = TestConfig::new(&redis.url(), &ports, upstream.port).with(top);
    if !route.is_empty() {
        config = config.route(route);
    }
    let config = config.yaml();
    let wg = Waitgate::start(&config, &ports);
    let token = admitted_token(&wg, &redis, "fan");
    Env {
        redis,
        upstream,
        wg,
        token,
    }
}

fn setup(script: impl Fn(&str) -> Vec<Step> + Send + Sync + 'static) -> Env {
    setup_with("", "", script)
}

/// [`setup`] with an upstream that answers a path ending in `suffix` with
/// `steps(path)` and echoes every other path.
fn setup_at(
    suffix: &'static str,
    steps: impl Fn(&str) -> Vec<Step> + Send + Sync + 'static,
) -> Env {
    setup(echo_or(move |p| p.ends_with(suffix).then(|| steps(p))))
}

/// `answer`, then after `pause_ms` one more response nobody asked for.
fn then_injected(answer: Vec<u8>, pause_ms: u64) -> Vec<Step> {
    vec![
        Step::Send(answer),
        Step::Pause(Duration::from_millis(pause_ms)),
        Step::Send(injected()),
    ]
}

/// One answer of `bytes`, as they are.
fn sends(bytes: &[u8]) -> Vec<Step> {
    vec![Step::Send(bytes.to_vec())]
}

/// An upstream's switch to WebSocket.
const SWITCH: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";

/// A route at `/ws` that switches protocols.
const WEBSOCKET_ROUTE: &str =
    "{prefix: /ws, upstream: ticketing, queue: baseball, websocket: true}";

/// Answers every path with a 200 naming the path, after `special` had its say.
fn echo_or(
    special: impl Fn(&str) -> Option<Vec<Step>> + Send + Sync + 'static,
) -> impl Fn(&str) -> Vec<Step> + Send + Sync + 'static {
    move |path| special(path).unwrap_or_else(|| vec![Step::Send(ok(path))])
}

/// The ways a forwarded request arrives: a plain GET and a POST whose
/// length-framed body came with its head (the direct lane's when it is on),
/// and a POST with a chunked body (always the Pingora proxy's).
#[derive(Clone, Copy, Debug)]
enum Via {
    Get,
    Post,
    Chunked,
}

const ALL: [Via; 3] = [Via::Get, Via::Post, Via::Chunked];

impl Env {
    fn request(&self, via: Via, path: &str, extra: &str) -> String {
        let auth = format!("Authorization: Bearer {}\r\n", self.token);
        match via {
            Via::Get => format!("GET {path} HTTP/1.1\r\nHost: tickets\r\n{auth}{extra}\r\n"),
            Via::Post => format!(
                "POST {path} HTTP/1.1\r\nHost: tickets\r\n{auth}Content-Length: 2\r\n{extra}\r\nhi"
            ),
            Via::Chunked => format!(
                "POST {path} HTTP/1.1\r\nHost: tickets\r\n{auth}Transfer-Encoding: chunked\r\n\
                 {extra}\r\n2\r\nhi\r\n0\r\n\r\n"
            ),
        }
    }

    /// A new connection with one request sent on it.
    fn send(&self, via: Via, path: &str, extra: &str) -> Client {
        let mut c = Client::connect(self.wg.addr);
        c.send(&self.request(via, path, extra));
        c
    }

    /// One request on a new connection; the whole response.
    fn call(&self, via: Via, path: &str, extra: &str) -> (Head, Vec<u8>) {
        self.send(via, path, extra).response()
    }

    /// Every later user, each on a new connection, gets their own answer.
    fn assert_next_users_get_their_own(&self, how_many: usize) {
        for i in 0..how_many {
            for via in ALL {
                let path = format!("{PROTECTED}/next-{i}");
                let (head, body) = self.call(via, &path, "");
                assert_eq!(head.status, 200, "{via:?} {path}: {head:?}");
                assert_eq!(
                    String::from_utf8_lossy(&body),
                    path,
                    "{via:?}: another user's bytes"
                );
                assert!(head.header("set-cookie").is_none(), "{head:?}");
            }
        }
    }
}

fn path(suffix: &str) -> String {
    format!("{PROTECTED}{suffix}")
}

#[test]
fn a_late_second_response_never_reaches_the_next_user() {
    let env = setup_at("/late", |p| then_injected(ok(p), 300));
    for via in ALL {
        let (head, body) = env.call(via, &path("/late"), "");
        assert_eq!((head.status, body), (200, path("/late").into_bytes()));
        // The upstream writes its second response while the connection is idle.
        std::thread::sleep(Duration::from_millis(500));
        env.assert_next_users_get_their_own(3);
    }
}

/// An upstream that answers, then slips in one more response, is a
/// response ahead from then on: the client's next request on it is answered
/// with the slipped-in bytes and the real answer is still on its way. The
/// connection must not be kept for another user with that answer behind it,
/// however fast the next user comes and whether or not the first one asked
/// to close.
#[test]
fn a_connection_a_response_ahead_is_never_given_to_the_next_user() {
    let env = setup_at("/late", |p| then_injected(ok(p), 300));
    for round in 0..4 {
        for via in ALL {
            for close in ["Connection: close\r\n", ""] {
                let mut c = Client::connect(env.wg.addr);
                let first = env.request(via, &path("/late"), "");
                let second = env.request(via, &path(&format!("/second-{round}")), close);
                c.send(&format!("{first}{second}"));
                let (head, body) = c.response();
                assert_eq!((head.status, body), (200, path("/late").into_bytes()));
                // The second answer is whatever the upstream sent next; it
                // reached the user who asked on that connection, if anyone.
                let _ = c.response();
                drop(c);
                env.assert_next_users_get_their_own(1);
            }
        }
    }
}

#[test]
fn a_body_sent_after_a_head_204_or_304_answer_never_reaches_the_next_user() {
    let late_body = |head: &str| {
        vec![
            Step::Send(head.as_bytes().to_vec()),
            Step::Pause(Duration::from_millis(100)),
            Step::Send(injected()),
        ]
    };
    let env = setup(echo_or(move |p| match p {
        _ if p.ends_with("/head") => {
            Some(late_body("HTTP/1.1 200 OK\r\nContent-Length: 104\r\n\r\n"))
        }
        _ if p.ends_with("/none") => Some(late_body("HTTP/1.1 204 No Content\r\n\r\n")),
        _ if p.ends_with("/same") => Some(late_body(
            "HTTP/1.1 304 Not Modified\r\nETag: \"v\"\r\n\r\n",
        )),
        _ => None,
    }));
    let mut head_request = env.request(Via::Get, &path("/head"), "");
    head_request.replace_range(..3, "HEAD");
    let mut c = Client::connect(env.wg.addr);
    c.send(&head_request);
    let head = c.head();
    assert_eq!((head.status, head.length()), (200, 104));
    std::thread::sleep(Duration::from_millis(300));
    env.assert_next_users_get_their_own(2);

    for (suffix, status) in [("/none", 204), ("/same", 304)] {
        for via in ALL {
            let mut c = env.send(via, &path(suffix), "");
            assert_eq!(c.head().status, status);
            std::thread::sleep(Duration::from_millis(300));
            env.assert_next_users_get_their_own(2);
        }
    }
}

#[test]
fn bytes_past_content_length_arriving_late_never_reach_the_next_user() {
    let env = setup_at("/long", |_| {
        then_injected(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfive!".to_vec(),
            100,
        )
    });
    for via in ALL {
        let (head, body) = env.call(via, &path("/long"), "");
        assert_eq!((head.status, body), (200, b"five!".to_vec()));
        std::thread::sleep(Duration::from_millis(300));
        env.assert_next_users_get_their_own(3);
    }
}

#[test]
fn a_response_left_in_a_dead_upstreams_socket_is_never_served() {
    let env = setup_at("/dying", |p| {
        let mut steps = then_injected(ok(p), 100);
        steps.push(Step::Close);
        steps
    });
    for via in ALL {
        let (head, _) = env.call(via, &path("/dying"), "");
        assert_eq!(head.status, 200);
        std::thread::sleep(Duration::from_millis(300));
        env.assert_next_users_get_their_own(2);
    }
}

#[test]
fn a_body_cut_short_ends_the_connection_and_never_looks_whole() {
    let env = setup(echo_or(|p| match p {
        _ if p.ends_with("/cut") => Some(vec![
            Step::Send(b"HTTP/1.1 200 OK\r\nContent-Length: 70\r\n\r\nhello".to_vec()),
            Step::Pause(Duration::from_millis(50)),
            Step::Close,
        ]),
        _ if p.ends_with("/cut-chunked") => Some(vec![
            Step::Send(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n".to_vec(),
            ),
            Step::Pause(Duration::from_millis(50)),
            Step::Close,
        ]),
        _ => None,
    }));
    for via in ALL {
        let mut c = env.send(via, &path("/cut"), "");
        let head = c.head();
        assert_eq!((head.status, head.length()), (200, 70));
        let rest = c.rest();
        assert_eq!(
            rest,
            b"hello",
            "{via:?}: {:?}",
            String::from_utf8_lossy(&rest)
        );

        let mut c = env.send(via, &path("/cut-chunked"), "");
        let head = c.head();
        assert_eq!(head.status, 200);
        let rest = String::from_utf8_lossy(&c.rest()).into_owned();
        assert!(rest.contains("hello"), "{via:?}: {rest:?}");
        assert!(
            !rest.contains("upstream"),
            "{via:?}: an error spliced in: {rest:?}"
        );
        assert!(
            !rest.ends_with("0\r\n\r\n"),
            "{via:?}: a body that looks whole: {rest:?}"
        );
    }
}

#[test]
fn upgrade_requests_are_refused_where_the_route_does_not_switch_protocols() {
    let env = setup(echo_or(|_| None));
    for via in ALL {
        let mut c = env.send(
            via,
            &path("/chat"),
            "Upgrade: websocket\r\nConnection: Upgrade\r\n",
        );
        let (head, body) = c.response();
        assert_eq!(head.status, 400, "{via:?}");
        assert!(String::from_utf8_lossy(&body).contains("upgrade_not_allowed"));
        // Whatever follows on that connection is HTTP, checked as such.
        c.send("GET /admin/secret HTTP/1.1\r\nHost: x\r\nX-Waitgate-User: mallory\r\n\r\n");
        if let Ok(r) = read_response(&mut c.reader) {
            assert_eq!(r.status, 404);
        }
    }
    assert!(env.upstream.seen().is_empty(), "{:?}", env.upstream.seen());
}

#[test]
fn an_unrequested_101_is_a_502_and_opens_no_tunnel() {
    let env = setup_at("/switch", |_| sends(SWITCH));
    for via in ALL {
        let mut c = env.send(via, &path("/switch"), "");
        let (head, body) = c.response();
        assert_eq!(head.status, 502, "{via:?}: {head:?}");
        assert!(String::from_utf8_lossy(&body).contains("upstream_unavailable"));
        let _ = std::io::Write::write_all(
            &mut c.writer,
            b"GET /admin/secret HTTP/1.1\r\nHost: x\r\nX-Waitgate-User: mallory\r\n\r\n",
        );
        let rest = c.rest();
        assert!(
            rest.is_empty(),
            "{via:?} {head:?}: {}",
            String::from_utf8_lossy(&rest)
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(env.upstream.seen_at("/admin/secret").is_empty());
}

/// The protected routes and [`WEBSOCKET_ROUTE`], whose upstream switches
/// protocols for every path under `/ws`.
fn websocket_env() -> Env {
    setup_with(
        "",
        WEBSOCKET_ROUTE,
        echo_or(|p| p.starts_with("/ws").then(|| sends(SWITCH))),
    )
}

/// A request for `target` in `version` that asks to switch to WebSocket.
fn upgrade_request(env: &Env, target: &str, version: &str) -> String {
    format!(
        "GET {target} {version}\r\nHost: tickets\r\nAuthorization: Bearer {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        env.token
    )
}

#[test]
fn a_websocket_route_relays_the_switch_and_then_the_tunnel() {
    let env = websocket_env();
    let mut c = Client::connect(env.wg.addr);
    c.send(&upgrade_request(&env, "/ws/chat", "HTTP/1.1"));
    let head = c.head();
    assert_eq!(head.status, 101);
    let seen = env.upstream.seen_at("/ws/chat");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("upgrade"), Some("websocket"));
    assert_eq!(seen[0].header("x-waitgate-user"), Some("fan"));
}

/// An HTTP/1.0 request's `Upgrade` is ignored (RFC 9110 §7.8), even on a
/// route that switches protocols: it is forwarded without `Upgrade`, and an
/// upstream that switches anyway gets the 502 of a switch nobody asked for,
/// never a tunnel behind an HTTP/1.0 client.
#[test]
fn an_http10_request_never_switches_protocols() {
    let env = websocket_env();
    let mut c = Client::connect(env.wg.addr);
    c.send(&upgrade_request(&env, "/ws/old", "HTTP/1.0"));
    let (head, _) = c.response();
    assert_eq!(head.status, 502, "{head:?}");
    let seen = env.upstream.seen_at("/ws/old");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("upgrade"), None, "{}", seen[0].head);
}

/// On a route that switches protocols, what the upstream gets of an
/// upgrade is a WebSocket handshake and nothing more: `Connection: Upgrade`
/// whatever the client nominated in its own `Connection` (an upstream that
/// honours nominations must not be told to drop the framing or waitgate's
/// own fields), and no `Upgrade` other than `websocket` (an upstream that
/// would switch to `h2c` is never asked to, so no tunnel opens to it).
#[test]
fn an_upgrade_reaches_the_upstream_as_a_websocket_handshake_alone() {
    let env = websocket_env();
    let mut c = Client::connect(env.wg.addr);
    c.send(&format!(
        "GET /ws/nominated HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n\
         Upgrade: websocket\r\nConnection: Upgrade, Content-Length, X-Waitgate-Queue, X-Extra\r\n\
         X-Extra: 1\r\n\r\n",
        env.token
    ));
    assert_eq!(c.head().status, 101);
    let seen = &env.upstream.seen_at("/ws/nominated")[0];
    assert_eq!(
        seen.headers_named("connection"),
        ["Upgrade"],
        "{}",
        seen.head
    );
    assert_eq!(
        seen.headers_named("upgrade"),
        ["websocket"],
        "{}",
        seen.head
    );
    assert_eq!(seen.header("x-extra"), None, "{}", seen.head);
    assert_eq!(
        seen.header("x-waitgate-queue"),
        Some("baseball"),
        "{}",
        seen.head
    );

    let mut c = Client::connect(env.wg.addr);
    c.send(&format!(
        "POST /ws/h2c HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n\
         Upgrade: h2c\r\nConnection: Upgrade, Content-Length, X-Waitgate-User\r\n\
         Content-Length: 5\r\n\r\nhello",
        env.token
    ));
    // The upstream of this test switches whatever it is asked: asked
    // nothing, its 101 is a switch nobody asked for.
    let (head, _) = c.response();
    assert_eq!(head.status, 502, "{head:?}");
    let seen = &env.upstream.seen_at("/ws/h2c")[0];
    assert_eq!(seen.header("upgrade"), None, "{}", seen.head);
    assert_eq!(seen.header("connection"), None, "{}", seen.head);
    assert_eq!(seen.header("content-length"), Some("5"), "{}", seen.head);
    assert_eq!(seen.header("x-waitgate-user"), Some("fan"), "{}", seen.head);
}

#[test]
fn identity_headers_are_dropped_in_every_spelling_a_backend_reads_alike() {
    let env = setup(echo_or(|_| None));
    let spoofed = "X_Waitgate_User: mallory\r\nX-Waitgate_User: mallory\r\nx_waitgate-queue: evil\r\nX-WAITGATE-USER: mallory\r\nx-waitgate-queue: evil\r\n";
    for via in ALL {
        let p = format!("{PROTECTED}/who-{via:?}");
        let (head, _) = env.call(via, &p, spoofed);
        assert_eq!(head.status, 200);
        let seen = &env.upstream.seen_at(&p)[0];
        assert_eq!(
            seen.as_cgi_reads("x-waitgate-user"),
            ["fan"],
            "{via:?}: {}",
            seen.head
        );
        assert_eq!(
            seen.as_cgi_reads("x-waitgate-queue"),
            ["baseball"],
            "{via:?}"
        );
    }
}

#[test]
fn http11_needs_exactly_one_host() {
    let env = setup(echo_or(|_| None));
    let auth = format!("Authorization: Bearer {}\r\n", env.token);
    for request in [
        format!("GET {PROTECTED}/a HTTP/1.1\r\n{auth}\r\n"),
        format!("GET {PROTECTED}/a HTTP/1.1\r\nHost: a\r\nHost: b\r\n{auth}\r\n"),
        format!("POST {PROTECTED}/a HTTP/1.1\r\n{auth}Content-Length: 2\r\n\r\nhi"),
    ] {
        let r = raw(env.wg.addr, request.as_bytes()).unwrap();
        assert_eq!(r.status, 400, "{request:?}");
    }
    assert!(env.upstream.seen().is_empty());
    // HTTP/1.0 may omit it.
    let r = raw(
        env.wg.addr,
        format!("GET {PROTECTED}/old HTTP/1.0\r\n{auth}\r\n").as_bytes(),
    )
    .unwrap();
    assert_eq!(r.status, 200);
    let seen = env.upstream.seen_at(&path("/old"));
    assert_eq!(seen.len(), 1);
    // The upstream gets HTTP/1.1, with the Host that needs: its address.
    let host = seen[0].header("Host").unwrap_or_default().to_string();
    assert!(host.starts_with("127.0.0.1:"), "{}", seen[0].head);
}

/// An HTTP/1.0 client that asks to keep its connection gets no chunked
/// body, which it cannot read (RFC 9112 §6.1): a body without a length
/// (chunked from the upstream, or until its close) reaches it whole and
/// ends with the connection, which says `close`.
#[test]
fn an_http10_client_never_gets_a_chunked_body() {
    use std::io::{Read, Write};
    let env = setup(echo_or(|p| {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        let until_close = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello world";
        let old = b"HTTP/1.0 200 OK\r\n\r\nhello world";
        match p.rsplit('/').next()? {
            "chunked" => Some(sends(chunked)),
            "until-close" => Some(vec![Step::Send(until_close.to_vec()), Step::Close]),
            "old" => Some(vec![Step::Send(old.to_vec()), Step::Close]),
            _ => None,
        }
    }));
    let auth = format!("Authorization: Bearer {}\r\n", env.token);
    for kind in ["chunked", "until-close", "old"] {
        for method in ["GET", "POST"] {
            let body = if method == "POST" {
                "Content-Length: 2\r\n\r\nhi"
            } else {
                "\r\n"
            };
            let request = format!(
                "{method} {PROTECTED}/h10/{kind} HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n{auth}{body}"
            );
            let mut c = std::net::TcpStream::connect(env.wg.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            c.write_all(request.as_bytes()).unwrap();
            let mut all = Vec::new();
            c.read_to_end(&mut all)
                .unwrap_or_else(|e| panic!("{kind} {method}: not closed ({e}): {all:?}"));
            let text = String::from_utf8_lossy(&all).to_string();
            let (head, body) = text.split_once("\r\n\r\n").expect(&text);
            let lower = head.to_ascii_lowercase();
            assert!(head.starts_with("HTTP/1.1 200"), "{kind} {method}: {text}");
            assert!(
                !lower.contains("transfer-encoding"),
                "{kind} {method}: {text}"
            );
            assert!(
                lower.contains("connection: close"),
                "{kind} {method}: {text}"
            );
            assert_eq!(body, "hello world", "{kind} {method}");
        }
    }
    // Not even the header, on a reply without a body (to HEAD).
    for kind in ["chunked", "until-close"] {
        let request = format!("HEAD {PROTECTED}/h10/{kind} HTTP/1.0\r\nHost: t\r\n{auth}\r\n");
        let mut c = std::net::TcpStream::connect(env.wg.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(request.as_bytes()).unwrap();
        let mut all = Vec::new();
        let _ = c.read_to_end(&mut all);
        let text = String::from_utf8_lossy(&all).to_ascii_lowercase();
        assert!(text.starts_with("http/1.1 200"), "HEAD {kind}: {text}");
        assert!(!text.contains("transfer-encoding"), "HEAD {kind}: {text}");
    }
    // An HTTP/1.1 client still gets the chunked body, on a connection kept.
    let (head, body) = env.call(Via::Get, &path("/h10/chunked"), "");
    assert_eq!(
        head.header("transfer-encoding"),
        Some("chunked"),
        "{head:?}"
    );
    assert_eq!(body, b"hello world");
}

#[test]
fn targets_that_parsers_could_read_two_ways_are_400_on_both_paths() {
    let env = setup(echo_or(|_| None));
    for via in ALL {
        for target in [
            format!("{PROTECTED}/a<b"),
            format!("{PROTECTED}/a>b"),
            format!("{PROTECTED}/a`b"),
            format!("{PROTECTED}/x?#"),
            format!("{PROTECTED}/x#frag"),
            format!("{PROTECTED}/x?q=\"y\""),
            "/api/v1/queue/rank?userId=a&queue=baseball#x".to_string(),
        ] {
            let (head, _) = env.call(via, &target, "");
            assert_eq!(head.status, 400, "{via:?} {target}");
        }
    }
    assert!(env.upstream.seen().is_empty(), "{:?}", env.upstream.seen());
}

#[test]
fn ambiguous_upstream_framing_is_a_502() {
    let env = setup(echo_or(|p| {
        let bytes: &[u8] = match p.rsplit('/').next()? {
            "plus" => b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
            "lengths" => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
            "list" => b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
            "te-comma" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n5\r\nhello\r\n0\r\n\r\nSMUGGLED",
            "te-gzip" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            _ => return None,
        };
        Some(vec![Step::Send(bytes.to_vec()), Step::Close])
    }));
    for via in ALL {
        for name in ["plus", "lengths", "list", "te-comma", "te-gzip"] {
            let mut c = env.send(via, &path(&format!("/{name}")), "");
            let (head, body) = c.response();
            assert_eq!(head.status, 502, "{via:?} {name}: {head:?}");
            let body = String::from_utf8_lossy(&body);
            assert!(body.contains("upstream_unavailable"), "{body}");
            assert!(c.closed(), "{via:?} {name}");
        }
    }
}

#[test]
fn a_folded_header_reaches_the_client_on_one_line() {
    let env = setup_at("/folded", |_| {
        sends(b"HTTP/1.1 200 OK\r\nX-A: one\r\n\t two\r\nContent-Length: 5\r\n\r\nhello")
    });
    for via in ALL {
        let mut c = env.send(via, &path("/folded"), "Connection: close\r\n");
        let raw = String::from_utf8_lossy(&c.rest()).into_owned();
        assert!(raw.contains("\r\nX-A: one two\r\n"), "{via:?}: {raw:?}");
        assert!(raw.ends_with("\r\n\r\nhello"), "{via:?}: {raw:?}");
    }
}

/// Both `Content-Length` and `Transfer-Encoding`: a 502 on both paths. The
/// lane reads the raw head itself; Pingora's HTTP client would drop the
/// length before any filter of waitgate's sees the head, so the Pingora
/// path's upstream connections are watched as their bytes go by
/// (`src/proxy/watched.rs`) and the read of such a head fails. Nothing of
/// the response, and never the bytes past the last chunk, reaches the
/// client; the upstream connection is not kept.
#[test]
fn both_length_and_chunked_is_a_502_on_both_paths() {
    let env = setup_at("/both", |_| {
        vec![
        Step::Send(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nSMUGGLED"
                .to_vec(),
        ),
        Step::Close,
    ]
    });
    for via in ALL {
        let mut c = env.send(via, &path("/both"), "");
        let (head, body) = c.response();
        assert_eq!(head.status, 502, "{via:?}: {head:?}");
        assert_eq!(head.header("transfer-encoding"), None, "{via:?}");
        assert!(
            !String::from_utf8_lossy(&body).contains("hello"),
            "{via:?}: {body:?}"
        );
        let rest = c.rest();
        assert!(
            !String::from_utf8_lossy(&rest).contains("SMUGGLED"),
            "{via:?}"
        );
    }
}

/// A chunked body whose trailer lines end with a bare LF: Pingora's client
/// refuses it mid-body, and so does the lane, so the client's reply is cut
/// short on both paths (it never looks whole), and the upstream connection
/// it came on is not used again.
#[test]
fn a_body_pingoras_client_refuses_is_cut_on_both_paths_and_its_connection_closed() {
    let env = setup_at("/bad-trailer", |_| {
        sends(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX: a\nY: b\r\n\r\n")
    });
    let last_conn = |p: &str| env.upstream.seen_at(&path(p)).last().map(|r| r.conn);
    for via in ALL {
        let mut c = env.send(via, &path("/bad-trailer"), "");
        assert_eq!(c.head().status, 200, "{via:?}");
        let rest = String::from_utf8_lossy(&c.rest()).into_owned();
        assert!(
            !rest.ends_with("0\r\n\r\n"),
            "{via:?}: a body that looks whole: {rest:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
        // The next request does not get the connection the body came on.
        let (head, body) = env.call(via, &path("/after"), "");
        assert_eq!((head.status, body), (200, path("/after").into_bytes()));
        assert_ne!(last_conn("/after"), last_conn("/bad-trailer"), "{via:?}");
    }
}

/// The limits of a chunked body's framing are Pingora's, and one verdict
/// whatever the read splits: a size line (size, extension, CR) of 8,192
/// bytes and a trailer section that Pingora's client counts as 65,536 bytes
/// come through whole on both paths; one byte more of either is cut on
/// both. (Pingora alone would take a longer size line that arrived in one
/// read; the watcher under its client refuses it, as the lane does.)
#[test]
fn chunked_framing_limits_are_the_same_on_both_paths() {
    let body = |ext: usize, trailer: usize| {
        let mut b = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;".to_vec();
        b.resize(b.len() + ext, b'e');
        b.extend_from_slice(b"\r\nhello\r\n0\r\n");
        if trailer > 0 {
            b.extend_from_slice(b"X-T: ");
            b.resize(b.len() + trailer - 5, b't');
            b.extend_from_slice(b"\r\n");
        }
        b.extend_from_slice(b"\r\n");
        b
    };
    // 8,192 bytes of size line: `5`, `;`, the extension and CR.
    let cases = [
        ("/line-fits", body(8192 - 3, 0), true),
        ("/line-over", body(8192 - 2, 0), false),
        // Counted: two for the end of the `0` line, then the line itself.
        ("/trailer-fits", body(0, 65536 - 2), true),
        ("/trailer-over", body(0, 65536 - 1), false),
    ];
    let replies: Vec<(String, Vec<u8>)> =
        cases.iter().map(|(p, b, _)| (path(p), b.clone())).collect();
    let env = setup(echo_or(move |p| {
        replies
            .iter()
            .find(|(at, _)| p.ends_with(at.as_str()))
            .map(|(_, b)| vec![Step::Send(b.clone())])
    }));
    for via in ALL {
        for (p, _, whole) in &cases {
            let mut c = env.send(via, &path(p), "Connection: close\r\n");
            assert_eq!(c.head().status, 200, "{via:?} {p}");
            let rest = c.rest();
            let ended =
                rest.ends_with(b"0\r\n\r\n") && String::from_utf8_lossy(&rest).contains("hello");
            assert_eq!(
                ended,
                *whole,
                "{via:?} {p}: {:?}",
                String::from_utf8_lossy(&rest[rest.len().saturating_sub(40)..])
            );
        }
    }
}

/// The Pingora path's upstream connections are waitgate's own (watched, see
/// `src/proxy/watched.rs`), and still kept alive: one client's requests,
/// one after another, share one upstream connection; another client's
/// never do.
#[test]
fn the_pingora_path_keeps_its_upstream_connections_alive_for_their_client() {
    let env = setup(echo_or(|_| None));
    for client in 0..2 {
        let mut c = Client::connect(env.wg.addr);
        for i in 0..5 {
            let target = path(&format!("/kept-{client}-{i}"));
            c.send(&env.request(Via::Chunked, &target, ""));
            let (head, body) = c.response();
            assert_eq!(head.status, 200, "{head:?}");
            assert_eq!(body, target.into_bytes());
            // Pingora hands the connection back once the reply is out.
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            env.upstream.connections(),
            client + 1,
            "{:?}",
            env.upstream.seen()
        );
    }
}

/// An upstream that closes a kept-alive connection as the next request
/// arrives on it: an idempotent request is sent again on a new connection
/// (as Pingora retries on a connection it reused), one that is not gets a
/// 502 and is not sent twice.
#[test]
fn a_kept_connection_closed_before_answering_is_retried_only_when_idempotent() {
    use std::collections::HashMap;
    use std::sync::Mutex;
    let redis = Redis::start();
    let served: Mutex<HashMap<usize, usize>> = Mutex::new(HashMap::new());
    // The first request on each connection is answered; the second finds
    // the connection closed without an answer.
    let upstream = Scripted::start(move |r| {
        let mut served = served.lock().unwrap();
        let n = served.entry(r.conn).or_default();
        *n += 1;
        if *n == 1 {
            vec![Step::Send(ok(r.path()))]
        } else {
            vec![Step::Close]
        }
    });
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port).start();
    let token = admitted_token(&wg, &redis, "fan");
    // One client connection: kept upstream connections are its own.
    let mut c = Client::connect(wg.addr);
    let mut call = |method: &str, target: &str| {
        c.send(&format!(
            "{method} {target} HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {token}\r\n\
             Content-Length: 2\r\n\r\nhi"
        ));
        let (head, body) = c.response();
        std::thread::sleep(Duration::from_millis(50));
        (head.status, body)
    };
    assert_eq!(
        call("PUT", &path("/first")),
        (200, path("/first").into_bytes())
    );
    // Kept, then closed as `/again` arrives: sent again, on connection 2.
    assert_eq!(
        call("PUT", &path("/again")),
        (200, path("/again").into_bytes())
    );
    let again: Vec<usize> = upstream
        .seen_at(&path("/again"))
        .iter()
        .map(|r| r.conn)
        .collect();
    assert_eq!(again, vec![1, 2], "{:?}", upstream.seen());
    // Connection 2 is kept in turn, and closes as `/once` arrives: a POST
    // is not sent twice.
    let (status, _) = call("POST", &path("/once"));
    assert_eq!(status, 502);
    assert_eq!(
        upstream.seen_at(&path("/once")).len(),
        1,
        "{:?}",
        upstream.seen()
    );
}

/// Forwarding headers a client may not write, each in two spellings.
const SPOOFED: &str = "Forwarded: for=6.6.6.6;proto=https;host=evil.example\r\nX-Real-IP: 6.6.6.6\r\nX_Real_IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nX-Client-IP: 6.6.6.6\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-Port: 8443\r\nX-Forwarded-Prefix: /admin\r\nX_Forwarded_Prefix: /admin\r\nX-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\nClient-IP: 6.6.6.6\r\nX-Scheme: https\r\nX-Host: evil.example\r\nX-Envoy-Original-Path: /admin\r\nX-Middleware-Subrequest: middleware\r\nX-Original-Forwarded-For: 6.6.6.6\r\n";

/// Their names as a CGI backend reads them (the case and `_` folded).
const FORWARDING: [&str; 14] = [
    "x-middleware-subrequest",
    "x-original-forwarded-for",
    "client-ip",
    "x-scheme",
    "x-host",
    "x-envoy-original-path",
    "x-real-ip",
    "true-client-ip",
    "x-client-ip",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-original-url",
    "x-rewrite-url",
];

#[test]
fn forwarded_headers_describe_the_client_and_believe_no_one_untrusted() {
    let env = setup(echo_or(|_| None));
    let sent = format!(
        "X-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\nX-Request-Id: chosen-by-client\r\nX_Forwarded_For: 5.6.7.8\r\n{SPOOFED}"
    );
    for via in ALL {
        let p = format!("{PROTECTED}/fwd-{via:?}");
        let (head, _) = env.call(via, &p, &sent);
        assert_eq!(head.status, 200);
        let seen = &env.upstream.seen_at(&p)[0];
        assert_eq!(
            seen.as_cgi_reads("x-forwarded-for"),
            ["127.0.0.1"],
            "{via:?}"
        );
        assert_eq!(seen.as_cgi_reads("x-forwarded-proto"), ["http"], "{via:?}");
        // Every other forwarding header of the client's is gone, in every
        // spelling; `Forwarded` is waitgate's.
        for name in FORWARDING {
            assert_eq!(
                seen.as_cgi_reads(name),
                Vec::<&str>::new(),
                "{via:?} {name}"
            );
        }
        assert_eq!(
            seen.as_cgi_reads("forwarded"),
            ["for=127.0.0.1;proto=http"],
            "{via:?}"
        );
        let id = seen.header("x-request-id").unwrap();
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert_eq!(head.header("x-request-id"), Some(id), "{via:?}");
    }
    // waitgate's own answers carry the id too.
    let r = get(env.wg.addr, &path("/no-token")).unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(r.header("x-request-id").map(str::len), Some(32));
}

#[test]
fn a_trusted_proxy_keeps_its_forwarded_headers_and_request_id() {
    let env = setup_with("trusted-proxies: ['127.0.0.0/8']\n", "", echo_or(|_| None));
    let sent = "X-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\nX-Request-Id: lb-42\r\nX-Real-IP: 1.2.3.4\r\nX-Forwarded-Host: tickets.example\r\nX-Forwarded-Port: 443\r\nX-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\n";
    for via in ALL {
        let p = format!("{PROTECTED}/trusted-{via:?}");
        let (head, _) = env.call(via, &p, sent);
        assert_eq!(head.status, 200);
        let seen = &env.upstream.seen_at(&p)[0];
        assert_eq!(seen.as_cgi_reads("x-forwarded-for"), ["1.2.3.4, 127.0.0.1"]);
        assert_eq!(seen.as_cgi_reads("x-forwarded-proto"), ["https"]);
        assert_eq!(seen.as_cgi_reads("x-request-id"), ["lb-42"]);
        assert_eq!(head.header("x-request-id"), Some("lb-42"));
        // What the balancer saw of the client passes; a path to route on
        // other than the one checked never does.
        assert_eq!(seen.as_cgi_reads("x-real-ip"), ["1.2.3.4"]);
        assert_eq!(seen.as_cgi_reads("x-forwarded-host"), ["tickets.example"]);
        assert_eq!(seen.as_cgi_reads("x-forwarded-port"), ["443"]);
        assert_eq!(seen.as_cgi_reads("x-original-url"), Vec::<&str>::new());
        assert_eq!(seen.as_cgi_reads("x-rewrite-url"), Vec::<&str>::new());
        // `Forwarded` from the balancer's hops, then waitgate's.
        assert_eq!(
            seen.as_cgi_reads("forwarded"),
            ["for=1.2.3.4;proto=https, for=127.0.0.1;proto=http"]
        );
    }
    // A `Forwarded` that came through the balancer (most pass a client's
    // on unchanged) is not believed: the chain is `X-Forwarded-For`'s.
    for via in ALL {
        let p = format!("{PROTECTED}/trusted-forwarded-{via:?}");
        let sent =
            "X-Forwarded-For: 192.0.2.60\r\nForwarded: for=6.6.6.6;host=evil;proto=https\r\n";
        let (head, _) = env.call(via, &p, sent);
        assert_eq!(head.status, 200);
        assert_eq!(
            env.upstream.seen_at(&p)[0].as_cgi_reads("forwarded"),
            ["for=192.0.2.60;proto=http, for=127.0.0.1;proto=http"]
        );
    }
    let _ = &env.redis;
}

/// A status code is three digits, but `099`, `000` or `001` read as a
/// number below 100 is no status a client can take: a 502 on both paths,
/// the connection closed, the request pipelined behind it never sent, and
/// the upstream connection not used again.
#[test]
fn a_status_code_below_100_is_a_502_on_both_paths() {
    let env = setup(echo_or(|p| {
        let code = p.rsplit('/').next()?.strip_prefix("status-")?.to_string();
        Some(vec![Step::Send(
            format!("HTTP/1.1 {code} Odd\r\nContent-Length: 2\r\n\r\nok").into_bytes(),
        )])
    }));
    for code in ["099", "000", "001"] {
        for via in ALL {
            let odd = path(&format!("/status-{code}"));
            let next = path(&format!("/behind-{code}-{via:?}"));
            let mut c = Client::connect(env.wg.addr);
            let mut both = env.request(via, &odd, "");
            both.push_str(&env.request(Via::Get, &next, ""));
            c.send(&both);
            let (head, body) = c.response();
            assert_eq!(head.status, 502, "{code} {via:?}: {head:?}");
            assert!(String::from_utf8_lossy(&body).contains("upstream_unavailable"));
            assert!(c.closed(), "{code} {via:?}: the connection stays open");
            assert!(env.upstream.seen_at(&next).is_empty(), "{code} {via:?}");
        }
    }
    env.assert_next_users_get_their_own(2);
}

/// An interim (1xx) answer reaches the client as soon as it comes when the
/// final one is slow, on both paths (the lane used to hold it until the
/// final head arrived).
#[test]
fn an_interim_answer_reaches_the_client_before_a_slow_final_one() {
    let env = setup_at("/slow", |p| {
        vec![
            Step::Send(b"HTTP/1.1 102 Processing\r\n\r\n".to_vec()),
            Step::Pause(Duration::from_millis(1500)),
            Step::Send(ok(p)),
        ]
    });
    for via in ALL {
        let mut c = Client::connect(env.wg.addr);
        let start = std::time::Instant::now();
        c.send(&env.request(via, &path("/slow"), ""));
        let interim = c.head();
        let took = start.elapsed();
        assert_eq!(interim.status, 102, "{via:?}");
        assert!(
            took < Duration::from_millis(1000),
            "{via:?}: the 102 came after {took:?}"
        );
        let (head, body) = c.response();
        assert_eq!((head.status, body), (200, path("/slow").into_bytes()));
    }
}

/// An interim answer read in one piece with a final head that is refused
/// goes with it: the client gets the 502 alone, on both paths (Pingora's
/// proxy sends an interim answer when it waits for more of the upstream's
/// bytes, and the lane does the same).
#[test]
fn an_interim_answer_read_with_a_refused_head_is_dropped_with_it() {
    let env = setup_at("/hints", |_| {
        sends(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok")
    });
    for via in ALL {
        let mut c = env.send(via, &path("/hints"), "");
        let (head, body) = c.response();
        assert_eq!(head.status, 502, "{via:?}: {head:?}");
        assert!(String::from_utf8_lossy(&body).contains("upstream_unavailable"));
    }
}

/// A request line that reads more than one way (two spaces before the
/// version, a space, `"`, `<` or `>` in the target): Pingora's parser would
/// percent-encode it and read it again, so `/a/..  ` (checked as a path
/// ending in `.. `) reached the upstream as `/a/..%20`. Refused with 400
/// `bad_path` before either path reads it, the connection closed, nothing
/// forwarded.
#[test]
fn a_request_line_that_reads_more_than_one_way_is_400_on_both_paths() {
    let env = setup(echo_or(|_| None));
    for via in ALL {
        for target in [
            format!("{PROTECTED}/.. "),
            format!("{PROTECTED}/a/.  "),
            format!("{PROTECTED}/a "),
            format!("{PROTECTED}/a b"),
            format!("{PROTECTED}/a\"b"),
            format!("{PROTECTED}/x?q=1 "),
            "/api/v1/queue/rank?userId=fan ".to_string(),
        ] {
            let mut c = env.send(via, &target, "");
            let (head, body) = c.response();
            assert_eq!(head.status, 400, "{via:?} {target:?}");
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(json["error"], "bad_path", "{via:?} {target:?}");
            assert_eq!(head.header("connection"), Some("close"), "{head:?}");
            assert!(head.header("x-request-id").is_some(), "{head:?}");
            assert!(c.closed(), "{via:?} {target:?}");
        }
    }
    assert!(env.upstream.seen().is_empty(), "{:?}", env.upstream.seen());
}

/// A `Connection` header naming `Authorization` or `Cookie` would have the
/// proxy drop the token the edge just checked, so that the backend got the
/// request without it: refused with 400 on both paths, nothing forwarded.
#[test]
fn a_request_cannot_have_its_token_dropped_on_the_way() {
    let env = setup(echo_or(|_| None));
    for via in ALL {
        for option in ["authorization", "Cookie", "keep-alive, Authorization"] {
            let (head, body) = env.call(via, &path("/x"), &format!("Connection: {option}\r\n"));
            assert_eq!(head.status, 400, "{via:?} {option}: {head:?}");
            assert!(
                String::from_utf8_lossy(&body).contains("bad_request"),
                "{option}"
            );
        }
        let (head, _) = env.call(via, &path("/x"), "Connection: keep-alive, x-other\r\n");
        assert_eq!(head.status, 200, "{via:?}");
    }
    let seen = env.upstream.seen();
    assert_eq!(seen.len(), ALL.len(), "{seen:?}");
    assert!(seen.iter().all(|r| r.header("authorization").is_some()));
}

/// A `Host` that names no host and port (a space, a `/`, an unclosed IP
/// literal) is refused with 400 `bad_request` on both paths, as RFC 9112
/// §3.2 asks: a backend would read it its own way.
#[test]
fn a_host_that_is_not_a_host_is_400_on_both_paths() {
    let env = setup(echo_or(|_| None));
    for via in ALL {
        for host in ["a b", "t/x", "[::1", "t\\x", "a:b"] {
            let request = env.request(via, &path("/h"), "").replacen(
                "Host: tickets",
                &format!("Host: {host}"),
                1,
            );
            let r = raw(env.wg.addr, request.as_bytes()).unwrap();
            assert_eq!(r.status, 400, "{via:?} {host:?}");
            assert_eq!(r.error_code(), "bad_request", "{via:?} {host:?}");
        }
        let (head, _) = env.call(via, &path("/h"), "");
        assert_eq!(head.status, 200, "{via:?}");
    }
    assert_eq!(
        env.upstream.seen().len(),
        ALL.len(),
        "{:?}",
        env.upstream.seen()
    );
}

/// A path in Korean (or another script's letters), percent-encoded as
/// browsers send it, is forwarded exactly as sent on both paths; escaped
/// text that is not letters (an overlong `/`, a fullwidth solidus that
/// Unicode normalisation turns into `/`) is still a 400.
#[test]
fn escaped_letters_pass_and_lookalike_separators_do_not() {
    let env = setup(echo_or(|_| None));
    for via in ALL {
        let korean = path("/%EA%B3%B5%EC%97%B0/%EC%A2%8C%EC%84%9D");
        let (head, body) = env.call(via, &korean, "");
        assert_eq!(head.status, 200, "{via:?}");
        assert_eq!(body, korean.clone().into_bytes(), "{via:?}");
        for refused in ["/%C0%AF", "/%EF%BC%8F..", "/%E2%80%A4%E2%80%A4"] {
            let (head, body) = env.call(via, &path(refused), "");
            assert_eq!(head.status, 400, "{via:?} {refused}");
            assert!(String::from_utf8_lossy(&body).contains("bad_path"));
        }
    }
    let seen = env.upstream.seen();
    assert_eq!(seen.len(), ALL.len(), "{seen:?}");
    assert!(seen
        .iter()
        .all(|r| r.path().ends_with("/%EC%A2%8C%EC%84%9D")));
}

/// Heads that Pingora's reader refuses on its own (two `Host`s, a folded
/// line, a space before a colon, `HTTP/1.2`, differing lengths) get
/// waitgate's JSON 400 with a request id on both paths, and the connection
/// is closed; they used to get Pingora's bare 400 on the proxy path.
#[test]
fn heads_no_parser_reads_one_way_get_waitgates_400_on_both_paths() {
    let env = setup(echo_or(|_| None));
    let auth = format!("Authorization: Bearer {}\r\n", env.token);
    for request in [
        format!("GET {PROTECTED}/a HTTP/1.1\r\nHost: a\r\nHost: b\r\n{auth}\r\n"),
        format!("GET {PROTECTED}/a HTTP/1.1\r\nHost: a\r\n{auth}X-A: b\r\n c\r\n\r\n"),
        format!("GET {PROTECTED}/a HTTP/1.1\r\nHost : a\r\n{auth}\r\n"),
        format!("GET {PROTECTED}/a HTTP/1.2\r\nHost: a\r\n{auth}\r\n"),
        format!(
            "POST {PROTECTED}/a HTTP/1.1\r\nHost: a\r\n{auth}Content-Length: 2\r\nContent-Length: 3\r\n\r\nhi"
        ),
    ] {
        let mut c = Client::connect(env.wg.addr);
        c.send(&request);
        let (head, body) = c.response();
        assert_eq!(head.status, 400, "{request:?}");
        let json: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| panic!("{request:?}: {}", String::from_utf8_lossy(&body)));
        assert_eq!(json["error"], "bad_request", "{request:?}");
        assert!(head.header("x-request-id").is_some(), "{request:?}");
        assert!(c.closed(), "{request:?}");
    }
    assert!(env.upstream.seen().is_empty(), "{:?}", env.upstream.seen());
}
