//! The direct lane (src/proxy/lane/): requests with a valid token, without
//! a body or with one that came whole with its head, relayed by waitgate's
//! own HTTP/1.1 path. Each test drives a
//! real waitgate over real TCP connections against a scripted upstream whose
//! answers exercise one framing rule, and checks what the client got and
//! what the upstream saw.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

const PROTECTED: &str = "/api/v1/follow-up";

/// One scripted answer: the raw bytes, and whether the upstream closes the
/// connection after sending them (whatever the bytes say).
#[derive(Clone)]
struct Answer {
    bytes: Vec<u8>,
    close: bool,
    /// How long the upstream takes before it answers.
    delay: Duration,
}

fn answer(bytes: impl Into<Vec<u8>>) -> Answer {
    Answer {
        bytes: bytes.into(),
        close: false,
        delay: Duration::ZERO,
    }
}

/// An upstream that answers each request by its path, from a script, and
/// records the request heads it saw and the connections it accepted.
struct Scripted {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
    /// Each request's body, beside its head in `heads`.
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
    connections: Arc<Mutex<usize>>,
}

impl Scripted {
    fn start(script: BTreeMap<&'static str, Answer>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let (h, b, c) = (heads.clone(), bodies.clone(), connections.clone());
        let script = Arc::new(script);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                *c.lock().unwrap() += 1;
                let (h, b, script) = (h.clone(), b.clone(), script.clone());
                std::thread::spawn(move || serve_script(stream, &script, &h, &b));
            }
        });
        Scripted {
            port,
            heads,
            bodies,
            connections,
        }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    fn bodies(&self) -> Vec<Vec<u8>> {
        self.bodies.lock().unwrap().clone()
    }

    fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

/// Heads and bodies are recorded together, so that they stay in step.
fn serve_script(
    stream: TcpStream,
    script: &BTreeMap<&str, Answer>,
    heads: &Mutex<Vec<String>>,
    bodies: &Mutex<Vec<Vec<u8>>>,
) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            let Some(body) = read_chunked(&mut reader) else {
                return;
            };
            let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
            heads.lock().unwrap().push(head);
            bodies.lock().unwrap().push(body);
            let answer = script
                .get(path.as_str())
                .cloned()
                .unwrap_or_else(|| answer(""));
            std::thread::sleep(answer.delay);
            if writer.write_all(&answer.bytes).is_err() || answer.close {
                return;
            }
            continue;
        }
        let length = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
        let is_head = head.starts_with("HEAD ");
        heads.lock().unwrap().push(head);
        bodies.lock().unwrap().push(body);
        let Some(answer) = script.get(path.as_str()) else {
            let _ = writer.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            continue;
        };
        // A HEAD answer is the head alone, as HTTP requires.
        let mut bytes = &answer.bytes[..];
        if is_head {
            let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            bytes = &bytes[..end];
        }
        std::thread::sleep(answer.delay);
        if writer.write_all(bytes).is_err() || answer.close {
            return;
        }
    }
}

struct Env {
    _redis: Redis,
    upstream: Scripted,
    wg: Waitgate,
    token: String,
}

/// waitgate in front of a scripted upstream, and a token for user `fan`.
fn setup(script: BTreeMap<&'static str, Answer>) -> Env {
    let redis = Redis::start();
    let upstream = Scripted::start(script);
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port).start();
    let token = admitted_token(&wg, &redis, "fan");
    Env {
        _redis: redis,
        upstream,
        wg,
        token,
    }
}

impl Env {
    fn connect(&self) -> Client {
        Client::connect(self.wg.addr)
    }

    fn get(&self, path: &str, extra: &str) -> String {
        format!(
            "GET {PROTECTED}{path} HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n{extra}\r\n",
            self.token
        )
    }
}

const CHUNKED_BODY: &str = "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Checksum: 42\r\n\r\n";

fn big_body() -> Vec<u8> {
    (0..1_000_000u32).map(|i| (i % 251) as u8).collect()
}

fn length_answer(body: &[u8]) -> Answer {
    let mut bytes =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    bytes.extend_from_slice(body);
    answer(bytes)
}

#[test]
fn chunked_and_large_bodies_are_relayed_whole_over_one_kept_alive_upstream_connection() {
    let big = big_body();
    let env = setup(BTreeMap::from([
        (
            "/api/v1/follow-up/chunked",
            answer(format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n{CHUNKED_BODY}"
            )),
        ),
        ("/api/v1/follow-up/big", length_answer(&big)),
    ]));
    let mut c = env.connect();
    for _ in 0..2 {
        c.send(&env.get("/chunked", ""));
        let (head, body) = c.response();
        assert_eq!(head.status, 200);
        assert_eq!(head.header("transfer-encoding"), Some("chunked"));
        // The trailer fields are left out, as Pingora's proxy leaves them out.
        assert_eq!(body, b"hello, world");

        c.send(&env.get("/big", ""));
        let (head, body) = c.response();
        assert_eq!(head.status, 200);
        assert!(body == big, "the 1 MB body differs");
    }
    // Each body's end was found exactly: one upstream connection served all.
    assert_eq!(env.upstream.connections(), 1);
    assert_eq!(env.upstream.heads().len(), 4);
}

#[test]
fn head_204_and_304_answers_have_no_body_and_the_connection_goes_on() {
    let env = setup(BTreeMap::from([
        ("/api/v1/follow-up/doc", length_answer(b"0123456789")),
        (
            "/api/v1/follow-up/empty",
            answer("HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"),
        ),
        (
            "/api/v1/follow-up/same",
            answer("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 10\r\n\r\n"),
        ),
    ]));
    let mut c = env.connect();
    c.send(&env.get("/doc", "").replacen("GET", "HEAD", 1));
    let head = c.head();
    assert_eq!((head.status, head.length()), (200, 10));
    c.send(&env.get("/empty", ""));
    let head = c.head();
    assert_eq!(head.status, 204);
    assert_eq!(head.header("x-a"), Some("1"));
    c.send(&env.get("/same", ""));
    let head = c.head();
    assert_eq!(head.status, 304);
    assert_eq!(head.header("etag"), Some("\"v1\""));
    // Had any of those been read as having a body, this would be garbled.
    c.send(&env.get("/doc", ""));
    let (head, body) = c.response();
    assert_eq!(head.status, 200);
    assert_eq!(body, b"0123456789");
    assert_eq!(env.upstream.connections(), 1);
}

#[test]
fn a_body_that_ends_with_the_upstream_connection_is_sent_on_chunked_and_the_client_stays() {
    let env = setup(BTreeMap::from([(
        "/api/v1/follow-up/stream",
        Answer {
            bytes: b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it, then close"
                .to_vec(),
            close: true,
            delay: Duration::ZERO,
        },
    )]));
    let mut c = env.connect();
    for _ in 0..2 {
        c.send(&env.get("/stream", ""));
        let (head, body) = c.response();
        assert_eq!(head.status, 200);
        assert_eq!(head.header("connection"), Some("keep-alive"));
        assert_eq!(head.header("transfer-encoding"), Some("chunked"));
        assert_eq!(body, b"all of it, then close");
    }
    // Each answer closed its upstream connection.
    assert_eq!(env.upstream.connections(), 2);
}

#[test]
fn an_upstream_that_dropped_its_idle_connection_is_retried_on_a_new_one() {
    // The upstream closes after every answer without saying so, as one with
    // a short idle timeout does: each pooled connection is dead when reused.
    let env = setup(BTreeMap::from([(
        "/api/v1/follow-up/seat",
        Answer {
            close: true,
            delay: Duration::ZERO,
            ..length_answer(b"ok")
        },
    )]));
    let mut c = env.connect();
    for i in 0..5 {
        c.send(&env.get("/seat", ""));
        let (head, body) = c.response();
        assert_eq!(
            (head.status, body.as_slice()),
            (200, &b"ok"[..]),
            "request {i}"
        );
        // Let the upstream's close arrive before the next request.
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(env.upstream.connections(), 5);
    // Each request reached the upstream once: the retry came only after the
    // dead connection failed, not after an answer.
    assert_eq!(env.upstream.heads().len(), 5);
}

/// Sends `bytes` in one write, or in two split at `split` with a pause
/// between them.
fn send_split(c: &mut Client, bytes: &str, split: Option<usize>) {
    match split {
        None => c.send(bytes),
        Some(at) => {
            c.send(&bytes[..at]);
            std::thread::sleep(Duration::from_millis(50));
            c.send(&bytes[at..]);
        }
    }
}

/// A POST to a protected route, its body in the same write as its head.
fn post(env: &Env, path: &str, body: &str) -> String {
    format!(
        "POST {PROTECTED}{path} HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        env.token,
        body.len()
    )
}

/// Every method that may carry a body gets it to the upstream exactly, on
/// one kept connection, whether the body came with its head (the lane's,
/// up to its limit), after it (the proxy streams it), or was too long for
/// the lane.
#[test]
fn request_bodies_of_every_method_reach_the_upstream_exactly_however_they_come() {
    let env = setup(BTreeMap::from([(
        "/api/v1/follow-up/seat",
        length_answer(b"ok"),
    )]));
    let mut c = env.connect();
    let long = "b".repeat(40_000);
    let mut sent = Vec::new();
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        for (body, split) in [
            ("{\"seat\":12}", None),
            ("", None),
            ("{\"seat\":13}", Some(0)),
            (long.as_str(), None),
        ] {
            let request = format!(
                "{method} {PROTECTED}/seat HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                env.token,
                body.len()
            );
            // A split at 0: the head first, its body a moment later.
            let at = split.map(|_| request.len() - body.len());
            send_split(&mut c, &request, at);
            let (head, answer) = c.response();
            assert_eq!(
                (head.status, answer.as_slice()),
                (200, &b"ok"[..]),
                "{method} with {} bytes",
                body.len()
            );
            sent.push((method, body.as_bytes().to_vec()));
            if split.is_some() || body.len() > 16 * 1024 {
                // The proxy's path gives its upstream connection back just
                // after the client has the answer: a moment for it to land.
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let heads = env.upstream.heads();
    let bodies = env.upstream.bodies();
    assert_eq!(heads.len(), sent.len());
    for ((head, body), (method, sent)) in heads.iter().zip(&bodies).zip(&sent) {
        assert!(
            head.starts_with(&format!("{method} {PROTECTED}/seat ")),
            "{head}"
        );
        assert!(
            head.contains(&format!("Content-Length: {}\r\n", sent.len())),
            "{head}"
        );
        assert_eq!(body, sent, "{method}");
    }
    assert_eq!(env.upstream.connections(), 1);
}

#[test]
fn pipelined_requests_are_answered_in_order_and_the_connection_stays_open() {
    let env = setup(BTreeMap::from([
        ("/api/v1/follow-up/a", length_answer(b"first")),
        ("/api/v1/follow-up/b", length_answer(b"second")),
    ]));
    let mut c = env.connect();
    // All three in one write, as nginx takes them (RFC 9112 §9.3.2).
    c.send(&format!(
        "{}{}{}",
        env.get("/a", ""),
        env.get("/b", ""),
        env.get("/a", "")
    ));
    for expected in [&b"first"[..], b"second", b"first"] {
        let (head, body) = c.response();
        assert_eq!((head.status, body), (200, expected.to_vec()));
    }
    c.send(&env.get("/b", ""));
    let (head, body) = c.response();
    assert_eq!((head.status, body), (200, b"second".to_vec()));
    let heads = env.upstream.heads();
    assert_eq!(heads.len(), 4, "{heads:?}");
}

/// More pipelined bytes than one read of a head takes (4 KiB), with
/// requests for both paths among them: every one is answered, in order,
/// whichever path served the one before and however the bytes were split.
/// (The proxy path used to answer the first 400: Pingora found the rest
/// while the first was in flight.)
#[test]
fn more_than_4_kib_of_pipelined_requests_for_both_paths_are_answered_in_order() {
    let env = setup(BTreeMap::from([
        ("/api/v1/follow-up/a", length_answer(b"first")),
        ("/api/v1/follow-up/b", length_answer(b"second")),
    ]));
    let pad = format!("X-Pad: {}\r\n", "p".repeat(2000));
    for split in [None, Some(1), Some(4096), Some(5000)] {
        let requests = format!(
            "{}{}{}{}{}",
            env.get("/a", &pad),
            post(&env, "/b", &"x".repeat(3000)),
            env.get("/b", &pad),
            post(&env, "/a", "y"),
            env.get("/a", &pad),
        );
        let mut c = env.connect();
        send_split(&mut c, &requests, split);
        for (i, expected) in [&b"first"[..], b"second", b"second", b"first", b"first"]
            .into_iter()
            .enumerate()
        {
            let (head, body) = c.response();
            assert_eq!(
                (head.status, body),
                (200, expected.to_vec()),
                "split {split:?}, answer {i}"
            );
        }
        c.send(&env.get("/b", ""));
        assert_eq!(c.response().0.status, 200, "split {split:?}");
    }
    let heads = env.upstream.heads();
    assert_eq!(heads.len(), 24, "{heads:?}");
    assert!(heads.iter().any(|h| h.contains("Content-Length: 3000")));
}

/// A request sent while the one before it is still in flight is served
/// after it, on both paths. (The proxy path used to fail the request in
/// flight with 400 after the upstream had taken it.)
#[test]
fn a_request_sent_while_the_previous_one_is_in_flight_is_answered_after_it() {
    let mut slow = length_answer(b"slow");
    slow.delay = Duration::from_millis(400);
    let env = setup(BTreeMap::from([
        ("/api/v1/follow-up/a", length_answer(b"first")),
        ("/api/v1/follow-up/slow", slow),
    ]));
    let chunked = format!(
        "POST {PROTECTED}/slow HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n\
         Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        env.token
    );
    // More header fields than the lane parses: the proxy's.
    let many: String = (0..150).map(|i| format!("X-{i}: v\r\n")).collect();
    let long_length = post(&env, "/slow", "body").replace(
        "Content-Length: 4",
        "Content-Length: 0000000000000000000004",
    );
    let cases = [
        env.get("/slow", ""),
        post(&env, "/slow", "body"),
        chunked,
        env.get("/slow", &many),
        long_length,
    ];
    for first in &cases {
        let mut c = env.connect();
        c.send(first);
        std::thread::sleep(Duration::from_millis(150));
        c.send(&env.get("/a", ""));
        let (head, body) = c.response();
        assert_eq!((head.status, body), (200, b"slow".to_vec()), "{first}");
        let (head, body) = c.response();
        assert_eq!((head.status, body), (200, b"first".to_vec()), "{first}");
        c.send(&env.get("/a", ""));
        assert_eq!(c.response().0.status, 200);
    }
    assert_eq!(env.upstream.heads().len(), 3 * cases.len());
}

/// A request the rules refuse (no `Host`, a repeated `Content-Length`, an
/// upgrade on a route that takes none) is answered 400 with
/// `Connection: close`, whether or not another request follows it in the
/// same write, and nothing after it is read: where such a request ends is
/// not something every reader of the connection agrees on. (A refused
/// request without a body used to be answered with keep-alive: a request
/// sent behind it later was served, one sent in the same write was
/// dropped.)
#[test]
fn a_refused_request_is_answered_400_and_closed_however_its_bytes_come() {
    let env = setup(BTreeMap::from([(
        "/api/v1/follow-up/a",
        length_answer(b"first"),
    )]));
    let refused = [
        format!(
            "GET {PROTECTED}/a HTTP/1.1\r\nAuthorization: Bearer {}\r\n\r\n",
            env.token
        ),
        env.get("/a", "Content-Length: 0\r\nContent-Length: 0\r\n"),
        env.get("/a", "Content-Length: 0, 0\r\n"),
        env.get("/a", "Upgrade: websocket\r\nConnection: upgrade\r\n"),
    ];
    for request in &refused {
        for behind in [true, false] {
            let mut c = env.connect();
            if behind {
                c.send(&format!("{request}{}", env.get("/a", "")));
            } else {
                c.send(request);
            }
            let (head, _) = c.response();
            assert_eq!(head.status, 400, "{request:?} behind {behind}");
            assert_eq!(
                head.header("connection"),
                Some("close"),
                "{request:?} behind {behind}"
            );
            assert!(c.closed(), "{request:?} behind {behind}");
        }
    }
    assert!(env.upstream.heads().is_empty());
}

/// A client that half-closes after its request, on its own or behind
/// another, gets every answer, the same on both paths, and then the close.
#[test]
fn a_client_that_half_closes_after_its_requests_gets_every_answer_alike() {
    let mut slow = length_answer(b"slow");
    slow.delay = Duration::from_millis(300);
    let env = setup(BTreeMap::from([
        ("/api/v1/follow-up/a", length_answer(b"first")),
        ("/api/v1/follow-up/slow", slow),
    ]));
    for requests in [
        vec![env.get("/slow", "")],
        vec![post(&env, "/slow", "body")],
        vec![post(&env, "/slow", "body"), env.get("/a", "")],
        vec![env.get("/slow", ""), post(&env, "/a", "x")],
    ] {
        let mut c = env.connect();
        c.send(&requests.concat());
        c.writer.shutdown(std::net::Shutdown::Write).unwrap();
        for (i, _) in requests.iter().enumerate() {
            let (head, body) = c.response();
            assert_eq!(head.status, 200, "{requests:?} {i}");
            let expected = if i == 0 { &b"slow"[..] } else { b"first" };
            assert_eq!(body, expected, "{requests:?} {i}");
            // Neither path reads the client while an answer is on its way.
            assert_eq!(
                head.header("connection"),
                Some("keep-alive"),
                "{requests:?} {i}"
            );
        }
        assert!(c.closed(), "{requests:?}");
    }
}

/// A chunked request body ends where its framing says, however it is
/// split: what follows is the next request.
#[test]
fn a_request_pipelined_behind_a_chunked_body_is_answered_after_it() {
    let env = setup(BTreeMap::from([
        ("/api/v1/follow-up/a", length_answer(b"first")),
        ("/api/v1/follow-up/b", length_answer(b"second")),
    ]));
    let chunked = format!(
        "POST {PROTECTED}/b HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n\
         Transfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
        env.token
    );
    let bytes = format!("{chunked}{}", env.get("/a", ""));
    for split in [
        None,
        Some(chunked.len() - 30),
        Some(chunked.len() - 3),
        Some(chunked.len() + 5),
    ] {
        let mut c = env.connect();
        send_split(&mut c, &bytes, split);
        let (head, body) = c.response();
        assert_eq!((head.status, body), (200, b"second".to_vec()), "{split:?}");
        let (head, body) = c.response();
        assert_eq!((head.status, body), (200, b"first".to_vec()), "{split:?}");
    }
    assert_eq!(env.upstream.heads().len(), 8);
}

/// A request head longer than 64 KiB gets 431 and a close on both paths,
/// also when one read takes it past the limit together with its end.
#[test]
fn a_head_over_64_kib_is_431_even_when_its_end_comes_in_the_same_read() {
    let env = setup(BTreeMap::from([(
        "/api/v1/follow-up/a",
        length_answer(b"first"),
    )]));
    for size in [66_000, 100_000, 127_000] {
        let pad = format!("X-Pad: {}\r\n", "p".repeat(size));
        let mut c = env.connect();
        c.send(&env.get("/a", &pad));
        let (head, _) = c.response();
        assert_eq!(head.status, 431, "{size}");
        assert!(c.closed(), "{size}");
    }
    assert_eq!(env.upstream.heads().len(), 0);
}

#[test]
fn requests_the_lane_declines_are_served_by_the_proxy_on_the_same_connection() {
    let env = setup(BTreeMap::from([(
        "/api/v1/follow-up/seat",
        length_answer(b"ok"),
    )]));
    let mut c = env.connect();
    c.send(&env.get("/seat", ""));
    assert_eq!(c.response().1, b"ok");
    // A body, with its head.
    c.send(&format!(
        "POST {PROTECTED}/seat HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 10\r\n\r\n{{\"seat\":7}}",
        env.token
    ));
    assert_eq!(c.response().1, b"ok");
    // The queue API, refused tokens and unknown paths, on the same connection.
    c.send("GET /api/v1/queue/rank?userId=nobody HTTP/1.1\r\nHost: tickets\r\n\r\n");
    assert_eq!(c.response().0.status, 404);
    c.send(&format!(
        "GET {PROTECTED}/seat HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer nope\r\n\r\n"
    ));
    assert_eq!(c.response().0.status, 401);
    // And the lane again.
    c.send(&env.get("/seat", ""));
    assert_eq!(c.response().1, b"ok");

    // HTTP/1.0 goes to the proxy too.
    let r = raw(
        env.wg.addr,
        format!(
            "GET {PROTECTED}/seat HTTP/1.0\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n\r\n",
            env.token
        )
        .as_bytes(),
    )
    .unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));

    let heads = env.upstream.heads();
    assert_eq!(heads.len(), 4, "{heads:?}");
    assert!(heads[1].starts_with("POST "));
}

#[test]
fn hop_by_hop_and_spoofed_identity_headers_are_not_forwarded() {
    let env = setup(BTreeMap::from([(
        "/api/v1/follow-up/seat?row=3",
        length_answer(b"ok"),
    )]));
    let mut c = env.connect();
    c.send(&env.get(
        "/seat?row=3",
        "Connection: keep-alive\r\nKeep-Alive: timeout=300\r\nTE: trailers\r\n\
         Proxy-Connection: keep-alive\r\nX-Waitgate-User: someone-else\r\n\
         x-waitgate-queue: other\r\nX-Custom: Kept\r\n",
    ));
    assert_eq!(c.response().0.status, 200);
    let head = env.upstream.heads().pop().unwrap();
    let lower = head.to_ascii_lowercase();
    assert!(
        head.starts_with(&format!("GET {PROTECTED}/seat?row=3 HTTP/1.1\r\n")),
        "{head}"
    );
    for gone in [
        "\r\nconnection:",
        "\r\nkeep-alive:",
        "\r\nte:",
        "\r\nproxy-connection:",
        "someone-else",
        "x-waitgate-queue: other",
    ] {
        assert!(!lower.contains(gone), "{gone} was forwarded: {head}");
    }
    assert!(head.contains("X-Custom: Kept\r\n"), "{head}");
    assert!(lower.contains("x-waitgate-user: fan\r\n"), "{head}");
    assert!(lower.contains("x-waitgate-queue: baseball\r\n"), "{head}");
    assert!(head.contains(&format!("Authorization: Bearer {}\r\n", env.token)));
}

#[test]
fn connection_close_from_the_client_is_honoured() {
    let env = setup(BTreeMap::from([(
        "/api/v1/follow-up/seat",
        length_answer(b"ok"),
    )]));
    let mut c = env.connect();
    c.send(&env.get("/seat", "Connection: close\r\n"));
    let (head, body) = c.response();
    assert_eq!(body, b"ok");
    assert_eq!(head.header("connection"), Some("close"));
    assert!(c.closed());
}

#[test]
fn an_interim_103_is_relayed_before_the_answer() {
    let env = setup(BTreeMap::from([(
        "/api/v1/follow-up/early",
        answer(
            "HTTP/1.1 103 Early Hints\r\nLink: </seatmap.css>; rel=preload\r\n\r\n\
             HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ),
    )]));
    let mut c = env.connect();
    c.send(&env.get("/early", ""));
    let early = c.head();
    assert_eq!(early.status, 103);
    assert_eq!(early.header("link"), Some("</seatmap.css>; rel=preload"));
    assert_eq!(c.response().1, b"ok");
}

#[test]
fn a_broken_upstream_answer_is_a_502_or_a_closed_connection_never_a_wrong_body() {
    let env = setup(BTreeMap::from([
        (
            "/api/v1/follow-up/garbage",
            answer("SSH-2.0-OpenSSH_9.2\r\n\r\n"),
        ),
        (
            "/api/v1/follow-up/lengths",
            answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"),
        ),
        (
            "/api/v1/follow-up/badchunks",
            answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnope\r\n"),
        ),
    ]));
    for path in ["/garbage", "/lengths"] {
        let mut c = env.connect();
        c.send(&env.get(path, ""));
        let (head, body) = c.response();
        assert_eq!(head.status, 502, "{path}");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "upstream_unavailable");
        assert!(c.closed(), "{path}");
    }
    // Broken chunks after a sound head: the reply has started, so the
    // connection ends before the body does. Never an error spliced in, never
    // a body that looks whole.
    let mut c = env.connect();
    c.send(&env.get("/badchunks", ""));
    let head = c.head();
    assert_eq!(head.status, 200);
    assert!(c.closed());
}

#[test]
fn a_request_pipelined_behind_a_body_is_answered_after_it() {
    let env = setup(BTreeMap::from([
        ("/api/v1/follow-up/a", length_answer(b"first")),
        ("/api/v1/follow-up/b", length_answer(b"second")),
    ]));
    let mut c = env.connect();
    // A POST with a GET pipelined behind its body:
    // the body ends where its length says, and the GET is the next request.
    c.send(&format!(
        "{}{}",
        post(&env, "/b", "body"),
        env.get("/a", "")
    ));
    let (head, body) = c.response();
    assert_eq!((head.status, body), (200, b"second".to_vec()));
    let (head, body) = c.response();
    assert_eq!((head.status, body), (200, b"first".to_vec()));
    let heads = env.upstream.heads();
    assert_eq!(heads.len(), 2, "{heads:?}");
    assert!(heads[0].starts_with(&format!("POST {PROTECTED}/b ")));
    assert!(heads[0].contains("Content-Length: 4"));
    assert!(heads[1].starts_with(&format!("GET {PROTECTED}/a ")));
}

/// A register: its answer is the same whether its body came with its head
/// (the lane can answer it) or after (the proxy reads it), on a connection
/// that stays open for the next request; and a register pipelined with a
/// next request is answered, then the next one.
#[test]
fn a_register_is_answered_alike_whether_its_body_comes_with_its_head_or_later() {
    let env = setup(BTreeMap::new());
    let register = |user: &str| {
        let body = format!("{{\"userId\":\"{user}\"}}");
        (
            format!(
                "POST /api/v1/queue/register HTTP/1.1\r\nHost: tickets\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            ),
            body,
        )
    };
    let mut c = env.connect();
    let (head, body) = register("together");
    c.send(&format!("{head}{body}"));
    let (first, first_body) = c.response();
    let (head, body) = register("apart");
    c.send(&head);
    std::thread::sleep(Duration::from_millis(100));
    c.send(&body);
    let (second, second_body) = c.response();
    for (h, b, user, rank) in [
        (&first, &first_body, "together", 0),
        (&second, &second_body, "apart", 1),
    ] {
        assert_eq!(h.status, 200, "{}", String::from_utf8_lossy(b));
        let v: serde_json::Value = serde_json::from_slice(b).unwrap();
        assert_eq!(v["userId"], user);
        assert_eq!(v["rank"], rank);
        assert!(v["queueCredential"].is_string());
        assert_eq!(h.header("content-type"), Some("application/json"));
    }
    let names = |h: &Head| {
        let mut n: Vec<String> = h
            .headers
            .iter()
            .map(|(n, _)| n.to_ascii_lowercase())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&first), names(&second));
    // Still open: a poll on the same connection.
    c.send("GET /api/v1/queue/rank?userId=together HTTP/1.1\r\nHost: tickets\r\n\r\n");
    assert_eq!(c.response().0.status, 200);

    // Pipelined: both answered, in order.
    let mut c = env.connect();
    let (head, body) = register("piped");
    c.send(&format!(
        "{head}{body}GET /api/v1/queue/rank?userId=piped HTTP/1.1\r\nHost: tickets\r\n\r\n"
    ));
    for _ in 0..2 {
        let (head, body) = c.response();
        assert_eq!(head.status, 200);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["userId"], "piped");
    }

    // Bad bodies get the same errors either way: a wrong type, bad JSON.
    for (extra, body, status) in [
        ("Content-Type: text/plain\r\n", "{\"userId\":\"x\"}", 415),
        ("Content-Type: application/json\r\n", "{\"userId\":", 400),
        ("Content-Type: application/json\r\n", "", 400),
    ] {
        let mut c = env.connect();
        c.send(&format!(
            "POST /api/v1/queue/register HTTP/1.1\r\nHost: tickets\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        ));
        assert_eq!(c.response().0.status, status, "{extra}{body}");
    }
}

/// A chunk-size line longer than 8 KiB (a long extension) is refused with
/// 400 and the connection closed, however its bytes are split: nothing
/// behind it is served, and the upstream never gets a whole request.
/// (Pingora alone took such a line when it came in one read, and refused it
/// when it came in pieces.)
#[test]
fn a_chunk_size_line_over_8_kib_is_400_however_it_is_split() {
    let env = setup(BTreeMap::from([
        ("/api/v1/follow-up/a", length_answer(b"first")),
        ("/api/v1/follow-up/b", length_answer(b"second")),
    ]));
    let head = format!(
        "POST {PROTECTED}/b HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {}\r\n\
         Transfer-Encoding: chunked\r\n\r\n",
        env.token
    );
    let line = format!("5;x={}\r\n", "e".repeat(9000));
    let chunked = format!("{head}{line}hello\r\n0\r\n\r\n");
    let bytes = format!("{chunked}{}", env.get("/a", ""));
    for split in [
        None,
        Some(head.len()),
        Some(head.len() + 4000),
        Some(head.len() + 8190),
        Some(head.len() + line.len() - 1),
    ] {
        let mut c = env.connect();
        send_split(&mut c, &bytes, split);
        let (answer, _) = c.response();
        assert_eq!(answer.status, 400, "{split:?}");
        assert!(c.closed(), "{split:?}");
    }
    let heads = env.upstream.heads();
    assert!(
        heads.iter().all(|h| !h.contains("follow-up/a")),
        "{heads:?}"
    );
}

/// A body sent with its head in one write, longer than the connection
/// loop's first read of a head (4 KiB), is taken by the lane: what has
/// already arrived is read on without waiting, up to the lane's 16 KiB.
/// Seen by Pingora's own debug lines, which name the request when its
/// proxy serves it and are absent when the lane does; the upstream gets the
/// whole body either way.
#[test]
fn a_body_past_the_first_read_that_has_arrived_is_taken_by_the_lane() {
    if !direct_lane() {
        return;
    }
    let (_redis, upstream, wg, token) = logging_by("info,pingora=debug", "fan_big");
    let send = |marker: &str, body: &[u8]| {
        let mut request = format!(
            "POST {PROTECTED}/{marker} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        let mut c = TcpStream::connect(wg.addr).unwrap();
        c.write_all(&request).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut reader = BufReader::new(c);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        status
    };
    // Pingora names a request it serves: a chunked POST, which only its
    // proxy takes.
    let mut c = TcpStream::connect(wg.addr).unwrap();
    write!(
        c,
        "POST {PROTECTED}/through-pingora HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\
         Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    )
    .unwrap();
    let mut status = String::new();
    BufReader::new(c).read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    wg.wait_for_log("through-pingora", 2);

    for (marker, size) in [("lane-12000", 12_000), ("lane-16384", 16 * 1024)] {
        let body: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
        let status = send(marker, &body);
        assert!(status.starts_with("HTTP/1.1 200"), "{marker}: {status}");
        let seen = upstream.seen();
        let got = seen.iter().find(|r| r.path().ends_with(marker)).unwrap();
        assert!(
            got.body == body,
            "{marker}: the upstream got the whole body"
        );
        wg.wait_for_log(marker, 1);
        let pingoras: Vec<String> = wg
            .log_lines(marker)
            .into_iter()
            .filter(|l| !l.contains("waitgate::access"))
            .collect();
        assert!(
            pingoras.is_empty(),
            "{marker}: served by Pingora's proxy, not the lane: {pingoras:?}"
        );
    }
}
