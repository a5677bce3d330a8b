//! HTTP/1.1 clients: one request on a fresh connection, and a client that
//! keeps its connection and can send malformed requests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::*;

// ---------------------------------------------------------------------------
// HTTP client

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        first_header(&self.headers, name)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The `error` code of an error body, checking its shape on the way.
    pub fn error_code(&self) -> String {
        let v = self.json();
        let obj = v.as_object().expect("error body is an object");
        assert_eq!(
            obj.len(),
            2,
            "error body has exactly error and message: {v}"
        );
        assert!(
            obj["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{v}"
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{:?}",
            self.headers
        );
        obj["error"]
            .as_str()
            .expect("error is a string")
            .to_string()
    }
}

/// Sends raw bytes on a new connection and reads one response.
pub fn raw(addr: SocketAddr, request: &[u8]) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request)?;
    read_response(&mut BufReader::new(stream))
}

/// Reads one response (Content-Length, chunked, or until close).
pub fn read_response(reader: &mut impl BufRead) -> std::io::Result<Response> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a response",
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _): &&(String, String)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if status == 204 || status == 304 || (100..200).contains(&status) {
        // no body
    } else if let Some(len) = find("content-length") {
        let len: usize = len.parse().unwrap();
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    } else if find("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size_hex = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_hex, 16).unwrap_or(0);
            if size == 0 {
                // Trailer fields, if any, up to the empty line.
                loop {
                    line.clear();
                    if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        reader.read_to_end(&mut body)?;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> std::io::Result<Response> {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(body) = body {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    if let Some(body) = body {
        bytes.extend_from_slice(body);
    }
    raw(addr, &bytes)
}

/// A request whose `body` is sent chunked, in one chunk. The direct lane
/// takes only length-framed bodies, so this request always goes through
/// Pingora's proxy: tests that mean "the other path" send one of these.
pub fn request_chunked(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str(&format!(
        "Transfer-Encoding: chunked\r\n\r\n{:x}\r\n",
        body.len()
    ));
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(b"\r\n0\r\n\r\n");
    raw(addr, &bytes)
}

pub fn get(addr: SocketAddr, target: &str) -> std::io::Result<Response> {
    request(addr, "GET", target, &[], None)
}

/// A GET with `headers`.
pub fn get_with(addr: SocketAddr, target: &str, headers: &[(&str, &str)]) -> Response {
    request(addr, "GET", target, headers, None).unwrap()
}

pub fn post_json(addr: SocketAddr, target: &str, body: &str) -> std::io::Result<Response> {
    request(
        addr,
        "POST",
        target,
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    )
}

pub fn delete(
    addr: SocketAddr,
    target: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Response> {
    request(addr, "DELETE", target, headers, None)
}

/// A request with `token` as its bearer token (a protected route's).
pub fn with_token(
    addr: SocketAddr,
    method: &str,
    target: &str,
    token: &str,
    body: Option<&[u8]>,
) -> Response {
    let auth = format!("Bearer {token}");
    request(addr, method, target, &[("Authorization", &auth)], body).unwrap()
}

// Queue API shortcuts.

pub fn register(addr: SocketAddr, user: &str) -> Response {
    post_json(
        addr,
        "/api/v1/queue/register",
        &serde_json::json!({ "userId": user }).to_string(),
    )
    .unwrap()
}

/// A registration of `user` in `queue`, named in the call.
pub fn register_in(addr: SocketAddr, queue: &str, user: &str) -> Response {
    post_json(
        addr,
        "/api/v1/queue/register",
        &serde_json::json!({ "userId": user, "queue": queue }).to_string(),
    )
    .unwrap()
}

/// A registration with the JSON `body`, sent with `headers` besides its
/// `Content-Type`.
pub fn register_sending(
    addr: SocketAddr,
    body: serde_json::Value,
    headers: &[(&str, &str)],
) -> Response {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    let body = body.to_string();
    request(
        addr,
        "POST",
        "/api/v1/queue/register",
        &all,
        Some(body.as_bytes()),
    )
    .unwrap()
}

/// A registration with the JSON `body`, sent again for up to 3 s while it
/// is answered 503: the first call after Redis restarted may meet the
/// connection that died with it.
pub fn register_after_restart(addr: SocketAddr, body: &str) -> Response {
    let mut answer = None;
    eventually(Duration::from_secs(3), || {
        let r = post_json(addr, "/api/v1/queue/register", body).unwrap();
        let answered = r.status != 503;
        answer = Some(r);
        answered
    });
    answer.unwrap()
}

/// Registers a new user and returns the queueCredential of the reply.
pub fn register_new(addr: SocketAddr, user: &str) -> String {
    let r = register(addr, user);
    match r.json()["queueCredential"].as_str() {
        Some(credential) => credential.to_string(),
        None => panic!("{user} got no credential: {r:?}"),
    }
}

pub fn rank(addr: SocketAddr, user: &str) -> Response {
    get(addr, &format!("/api/v1/queue/rank?userId={user}")).unwrap()
}

pub fn dropout(addr: SocketAddr, user: &str, credential: &str) -> Response {
    delete(
        addr,
        &format!("/api/v1/queue/dropout?userId={user}"),
        &[("X-Queue-Credential", credential)],
    )
    .unwrap()
}

/// Registers `user` in queue `baseball`, admits them by hand (far into the
/// future) and trades the credential for a token.
pub fn admitted_token(wg: &Waitgate, redis: &Redis, user: &str) -> String {
    let credential = register_new(wg.addr, user);
    admit_by_hand(&mut redis.conn(), user, u64::MAX / 2_000_000);
    let r = post_json(
        wg.addr,
        "/api/v1/queue/active/token",
        &serde_json::json!({ "userId": user, "queueCredential": credential }).to_string(),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    r.json()["accessToken"].as_str().unwrap().to_string()
}

// ---------------------------------------------------------------------------
// A raw client: one kept-alive connection, read a response at a time

/// One client connection.
pub struct Client {
    pub writer: TcpStream,
    pub reader: BufReader<TcpStream>,
}

/// A response head: status and headers.
/// The value of the first of `headers` named `name` (case ignored).
pub fn first_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[derive(Debug)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        first_header(&self.headers, name)
    }

    pub fn length(&self) -> usize {
        self.header("content-length").unwrap().parse().unwrap()
    }
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        }
    }

    pub fn send(&mut self, request: &str) {
        self.send_bytes(request.as_bytes());
    }

    pub fn send_bytes(&mut self, request: &[u8]) {
        self.writer.write_all(request).unwrap();
    }

    /// The next response head; panics if the connection ends first.
    pub fn head(&mut self) -> Head {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_else(|| panic!("no status line: {line:?}"))
            .parse()
            .unwrap();
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            let (n, v) = line.trim_end().split_once(':').unwrap();
            headers.push((n.to_string(), v.trim().to_string()));
        }
        Head { status, headers }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut body = vec![0; n];
        self.reader.read_exact(&mut body).unwrap();
        body
    }

    /// One whole response, whatever its framing.
    pub fn response(&mut self) -> (Head, Vec<u8>) {
        let r = read_response(&mut self.reader).unwrap();
        let head = Head {
            status: r.status,
            headers: r.headers,
        };
        (head, r.body)
    }

    /// Everything until the server closes the connection (or 10 s pass).
    pub fn rest(&mut self) -> Vec<u8> {
        let mut rest = Vec::new();
        let _ = self.reader.read_to_end(&mut rest);
        rest
    }

    /// Whether the server closed the connection with nothing more to say
    /// (EOF, or a reset: closing with unread input resets).
    pub fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        match self.reader.read_to_end(&mut rest) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset && rest.is_empty(),
            Ok(_) => false,
        }
    }
}

// ---------------------------------------------------------------------------
// Proof of work, as a client makes it

pub use waitgate::entry::challenge::leading_zero_bits;

/// The first `<challenge>:<nonce>` whose SHA-256 starts with `bits` zero
/// bits: the `X-Waitgate-Proof` value a client finds.
pub fn solve_proof(challenge: &str, bits: u32) -> String {
    use sha2::Digest;
    (0u64..)
        .map(|n| format!("{challenge}:{n}"))
        .find(|p| leading_zero_bits(&sha2::Sha256::digest(p.as_bytes())) >= bits)
        .expect("some nonce answers it")
}
