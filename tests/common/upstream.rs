//! A recording upstream.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------
// A recording upstream

/// One request as an upstream read it: the recording [`Upstream`] and the
/// [`Scripted`](super::scripted::Scripted) one alike.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Which connection (1, 2, ...) carried it.
    pub conn: usize,
    pub method: String,
    pub target: String,
    /// The request line and headers exactly as received.
    pub head: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        super::first_header(&self.headers, name)
    }

    /// Values of every header named `name` (case ignored), in order.
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Values of every header whose name reads as `name` to a CGI or WSGI
    /// backend (case ignored, `_` read as `-`).
    pub fn as_cgi_reads(&self, name: &str) -> Vec<&str> {
        let fold = |s: &str| s.to_ascii_lowercase().replace('_', "-");
        self.headers
            .iter()
            .filter(|(n, _)| fold(n) == fold(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The path part of the target.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// Reads one request: head, then a body by `Content-Length` or chunked;
/// `None` once the connection ends or the framing is broken.
pub fn read_request(reader: &mut impl BufRead, conn: usize) -> Option<Recorded> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        head.push_str(&line);
        if line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut lines = head.lines();
    let mut parts = lines.next()?.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_string(), v.trim().to_string()))
        .collect();
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let body = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(reader)?
    } else {
        let length = find("content-length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        body
    };
    Some(Recorded {
        conn,
        method,
        target,
        head,
        headers,
        body,
    })
}

/// Accepts connections on a free port of 127.0.0.1, each on a thread of
/// its own that `serve`s it with its number (1, 2, ...); returns the port
/// and the count of connections so far.
pub fn serve_connections(
    serve: impl Fn(TcpStream, usize) + Send + Sync + 'static,
) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let (c, serve) = (connections.clone(), Arc::new(serve));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let conn = c.fetch_add(1, Ordering::SeqCst) + 1;
            let serve = serve.clone();
            std::thread::spawn(move || serve(stream, conn));
        }
    });
    (port, connections)
}

/// An HTTP/1.1 upstream that records every request it receives and answers
/// 200 `{"upstream":"ok"}`. Keep-alive is supported, so connection reuse can
/// be observed through [`Upstream::connections`].
pub struct Upstream {
    pub port: u16,
    seen: Arc<Mutex<Vec<Recorded>>>,
    connections: Arc<AtomicUsize>,
    /// Delay before answering, for slow-upstream tests.
    pub delay: Arc<Mutex<Duration>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let delay = Arc::new(Mutex::new(Duration::ZERO));
        let (s, d) = (seen.clone(), delay.clone());
        let (port, connections) =
            serve_connections(move |stream, conn| serve_upstream(stream, conn, &s, &d));
        Upstream {
            port,
            seen,
            connections,
            delay,
        }
    }

    pub fn seen(&self) -> Vec<Recorded> {
        self.seen.lock().unwrap().clone()
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn serve_upstream(
    stream: TcpStream,
    conn: usize,
    seen: &Mutex<Vec<Recorded>>,
    delay: &Mutex<Duration>,
) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader, conn) {
        seen.lock().unwrap().push(request);
        let pause = *delay.lock().unwrap();
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
        let reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"upstream\":\"ok\"}";
        if writer.write_all(reply).is_err() {
            return;
        }
    }
}

/// Reads a chunked body (RFC 9112 §7.1), trailers included; `None` if the
/// stream ends or the framing is broken.
pub fn read_chunked(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        if reader.read_line(&mut size_line).ok()? == 0 {
            return None;
        }
        let size_hex = size_line.trim().split(';').next()?;
        let size = usize::from_str_radix(size_hex, 16).ok()?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).ok()? == 0 || line.trim_end().is_empty() {
                    return Some(body);
                }
            }
        }
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).ok()?;
        body.extend_from_slice(&chunk[..size]);
    }
}
