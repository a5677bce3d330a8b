//! Hostile input at scale: thousands of random and malformed requests
//! (request lines, methods, targets, headers, bodies) through the real
//! server. Nothing may produce a 5xx other than 502/503, and the process must
//! stay up and keep serving.
//!
//! The generator is seeded; set `WAITGATE_HOSTILE_SEED` to replay a run and
//! `WAITGATE_HOSTILE_COUNT` to send more.

mod common;

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use common::*;

/// xorshift64*: small, seedable, and plenty for picking test cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const METHODS: &[&str] = &[
    "GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT", "get", "G E T",
    "", "POST\0", "PROPFIND", "BREW",
];

const TARGETS: &[&str] = &[
    "/api/v1/queue/register",
    "/api/v1/queue/rank?userId=u1",
    "/api/v1/queue/rank?userId=u1&userId=u2",
    "/api/v1/queue/rank?userId=%zz",
    "/api/v1/queue/rank?userId=%ff%fe",
    "/api/v1/queue/dropout?userId=u1",
    "/api/v1/queue/active/token",
    "/api/v1/queue/",
    "/api/v1/queue/../queue/register",
    "/api/v1/follow-up/seat",
    "/api/v1/follow-up/%2e%2e/admin",
    "/api/v1/follow-up/..;/admin",
    "/api/v1/follow-up//x",
    "/api/v1/follow-up\\x",
    "/api/v1/follow-up/%00",
    "/api/v1/follow-up/%252e",
    "http://evil.example/api/v1/follow-up/x",
    "https://evil.example",
    "*",
    "evil.example:443",
    "/",
    "",
    "?",
    "/%",
    "/\u{00e9}",
];

const VERSIONS: &[&str] = &[
    "HTTP/1.1",
    "HTTP/1.0",
    "HTTP/2.0",
    "HTTP/9.9",
    "HTTP/1.1x",
    "",
    "http/1.1",
];

const BODIES: &[&str] = &[
    r#"{"userId":"u1"}"#,
    r#"{"userId":"u1","queue":"baseball"}"#,
    r#"{"userId":"u1","queueCredential":"x"}"#,
    r#"{"userId":null}"#,
    r#"{"userId":1e999}"#,
    r#"{"userId":"\u0000"}"#,
    r#"{"userId":"a","userId":"b"}"#,
    r#"{"userId":["a"]}"#,
    r#"{"userId":"u1""#,
    r#"["u1"]"#,
    "null",
    "",
    "{}",
    "\u{feff}{\"userId\":\"u1\"}",
];

fn header_line(rng: &mut Rng) -> Vec<u8> {
    let line = match rng.below(16) {
        0 => "Content-Type: application/json".to_string(),
        1 => format!(
            "Content-Length: {}",
            rng.pick(&["0", "5", "-1", "99999999999999999999", "abc", "4097", " 3"])
        ),
        2 => format!(
            "Transfer-Encoding: {}",
            rng.pick(&["chunked", "gzip", "chunked, chunked", "xchunked", ""])
        ),
        3 => format!(
            "Authorization: {}",
            rng.pick(&[
                "Bearer ",
                "Bearer a.b.c",
                "bearer x",
                "Basic dXNlcjpwYXNz",
                "Bearer eyJhbGciOiJub25lIn0.e30.",
                ""
            ])
        ),
        4 => format!("X-Queue-Credential: {}", rng.pick(&["", "abc", "\u{00e9}"])),
        5 => "Expect: 100-continue".to_string(),
        6 => format!(
            "Host: {}",
            rng.pick(&["", "evil.example", "a b", "x:99999"])
        ),
        7 => "Connection: close".to_string(),
        8 => "X-Waitgate-User: admin".to_string(),
        9 => "NoColonHere".to_string(),
        10 => " folded: continuation".to_string(),
        11 => format!("X-Long: {}", "a".repeat(rng.below(9000))),
        12 => ": empty-name".to_string(),
        13 => "Content-Type: text/plain".to_string(),
        _ => {
            let len = rng.below(40);
            let mut raw = rng.bytes(len);
            raw.retain(|&b| b != b'\r' && b != b'\n');
            return raw;
        }
    };
    line.into_bytes()
}

/// A well-formed request with one hostile part: reaches the handlers.
fn near_valid(rng: &mut Rng) -> Vec<u8> {
    let (method, target) = match rng.below(5) {
        0 => ("POST", "/api/v1/queue/register".to_string()),
        1 => ("POST", "/api/v1/queue/active/token".to_string()),
        2 => (
            "GET",
            format!(
                "/api/v1/queue/rank?userId={}",
                rng.pick(&[
                    "u1",
                    "u%40x",
                    "%zz",
                    "",
                    "a+b",
                    "u1&queue=nope",
                    "u1&queue=baseball"
                ])
            ),
        ),
        3 => (
            "DELETE",
            format!(
                "/api/v1/queue/dropout?userId={}",
                rng.pick(&["u1", "u2", "", "%00"])
            ),
        ),
        _ => ("GET", rng.pick(TARGETS).to_string()),
    };
    let body = if rng.chance(20) {
        let len = rng.below(200);
        String::from_utf8_lossy(&rng.bytes(len)).into_owned()
    } else {
        rng.pick(BODIES).to_string()
    };
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: waitgate\r\n");
    if rng.chance(85) {
        req.push_str("Content-Type: application/json\r\n");
    }
    if rng.chance(50) {
        req.push_str(&format!(
            "X-Queue-Credential: {}\r\n",
            rng.pick(&["abc", "", "x".repeat(300).as_str()])
        ));
    }
    let mut req = req.into_bytes();
    if rng.chance(30) {
        req.extend(header_line(rng));
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    req.extend_from_slice(body.as_bytes());
    req
}

fn request(rng: &mut Rng) -> Vec<u8> {
    if rng.chance(50) {
        return near_valid(rng);
    }
    // Now and then, pure noise.
    if rng.chance(5) {
        let len = rng.below(300);
        return rng.bytes(len);
    }
    let mut req = Vec::new();
    let method = if rng.chance(3) {
        "X".repeat(rng.below(5000))
    } else {
        rng.pick(METHODS).to_string()
    };
    let target = if rng.chance(5) {
        let mut t = b"/api/v1/".to_vec();
        let len = rng.below(60);
        t.extend(
            rng.bytes(len)
                .into_iter()
                .filter(|b| *b != b' ' && *b != b'\r' && *b != b'\n'),
        );
        t
    } else if rng.chance(2) {
        format!("/{}", "a/".repeat(rng.below(10_000))).into_bytes()
    } else {
        rng.pick(TARGETS).as_bytes().to_vec()
    };
    req.extend_from_slice(method.as_bytes());
    req.push(b' ');
    req.extend_from_slice(&target);
    req.push(b' ');
    req.extend_from_slice(rng.pick(VERSIONS).as_bytes());
    req.extend_from_slice(if rng.chance(3) { b"\n" } else { b"\r\n" });
    for _ in 0..rng.below(8) {
        req.extend(header_line(rng));
        req.extend_from_slice(b"\r\n");
    }
    let body: Vec<u8> = if rng.chance(10) {
        let len = rng.below(6000);
        rng.bytes(len)
    } else if rng.chance(5) {
        format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes()
    } else {
        rng.pick(BODIES).as_bytes().to_vec()
    };
    if rng.chance(70) {
        req.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    req.extend_from_slice(&body);
    req
}

/// Sends one request and returns its status, or 0 if the server closed the
/// connection without an answer (a fine answer to garbage).
fn send(addr: SocketAddr, bytes: &[u8]) -> u16 {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        panic!("waitgate stopped accepting connections");
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // The server may close before reading everything: ignore write errors.
    let _ = stream.write_all(bytes);
    // No more bytes are coming, so a declared-but-missing body ends at once.
    let _ = stream.shutdown(Shutdown::Write);
    match read_response(&mut BufReader::new(stream)) {
        Ok(r) => r.status,
        Err(_) => 0,
    }
}

#[test]
fn thousands_of_malformed_requests_get_no_5xx_and_the_server_survives() {
    let seed: u64 = env_or("WAITGATE_HOSTILE_SEED", 0x5eed_2026_1129);
    let count: usize = env_or("WAITGATE_HOSTILE_COUNT", 4000);
    let upstream = Upstream::start();
    let redis = Redis::start();
    let mut wg = TestConfig::on_free_ports(&redis.url(), upstream.port).start();
    let addr = wg.addr;

    let threads = 4;
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = Rng(seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
                let mut bad = Vec::new();
                for i in 0..count / threads {
                    let req = request(&mut rng);
                    let status = send(addr, &req);
                    *statuses.entry(status).or_default() += 1;
                    if status >= 500 && status != 502 && status != 503 {
                        bad.push((
                            t,
                            i,
                            status,
                            String::from_utf8_lossy(&req[..req.len().min(300)]).into_owned(),
                        ));
                    }
                }
                (statuses, bad)
            })
        })
        .collect();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let mut bad = Vec::new();
    for w in workers {
        let (s, b) = w.join().unwrap();
        for (k, v) in s {
            *statuses.entry(k).or_default() += v;
        }
        bad.extend(b);
    }
    println!("{count} hostile requests (seed {seed:#x}): statuses {statuses:?} (0 = closed without an answer)");
    assert!(bad.is_empty(), "5xx answers: {bad:#?}");
    assert!(wg.is_running(), "waitgate died: {}", wg.log());
    assert!(!wg.log().contains("panicked"), "{}", wg.log());
    // It still serves real traffic.
    assert_eq!(register(wg.addr, "after-the-storm").status, 200);
    assert_eq!(get(wg.admin, "/healthz").unwrap().status, 200);
}
