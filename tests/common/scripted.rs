//! A scripted upstream on a raw socket: for each request it receives, a
//! script chooses exactly which bytes go back, when, and whether the
//! connection then closes or resets. Hostile and buggy backends are
//! written as scripts: late second responses, bodies where none may be,
//! wrong lengths, 101s, stalls, resets.

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One thing the upstream does after reading a request.
#[derive(Debug, Clone)]
pub enum Step {
    /// Writes these bytes.
    Send(Vec<u8>),
    Pause(Duration),
    /// Closes the connection (FIN) and reads no further request on it.
    Close,
    /// Closes with a reset (RST): unread data and linger off.
    Reset,
}

/// One request as the upstream read it.
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
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
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

type Script = dyn Fn(&Recorded) -> Vec<Step> + Send + Sync;

/// The upstream: a listener on a free port, a thread per connection.
pub struct Scripted {
    pub port: u16,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    connections: Arc<AtomicUsize>,
}

impl Scripted {
    pub fn start(script: impl Fn(&Recorded) -> Vec<Step> + Send + Sync + 'static) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let script: Arc<Script> = Arc::new(script);
        let (r, c) = (recorded.clone(), connections.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let conn = c.fetch_add(1, Ordering::SeqCst) + 1;
                let (r, script) = (r.clone(), script.clone());
                std::thread::spawn(move || serve(stream, conn, &*script, &r));
            }
        });
        Scripted {
            port,
            recorded,
            connections,
        }
    }

    /// Every request read so far, in arrival order.
    pub fn seen(&self) -> Vec<Recorded> {
        self.recorded.lock().unwrap().clone()
    }

    /// The requests for one path.
    pub fn seen_at(&self, path: &str) -> Vec<Recorded> {
        self.seen()
            .into_iter()
            .filter(|r| r.path() == path)
            .collect()
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, conn: usize, script: &Script, recorded: &Mutex<Vec<Recorded>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader, conn) {
        recorded.lock().unwrap().push(request.clone());
        for step in script(&request) {
            match step {
                Step::Send(bytes) => {
                    if writer.write_all(&bytes).is_err() {
                        return;
                    }
                }
                Step::Pause(d) => std::thread::sleep(d),
                Step::Close => {
                    let _ = writer.shutdown(Shutdown::Both);
                    return;
                }
                Step::Reset => {
                    let _ = socket2::SockRef::from(&writer).set_linger(Some(Duration::ZERO));
                    return;
                }
            }
        }
    }
}

/// Reads one request: head, then a body by `Content-Length` or chunked.
fn read_request(reader: &mut impl BufRead, conn: usize) -> Option<Recorded> {
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
        super::read_chunked(reader)?
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

/// A 200 whose body names what it answers.
pub fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The response a hostile upstream slips in for someone else: a redirect
/// that sets a cookie of its choosing.
pub fn injected() -> Vec<u8> {
    b"HTTP/1.1 302 Found\r\nLocation: https://evil.example/\r\nSet-Cookie: session=attacker\r\nContent-Length: 8\r\n\r\nINJECTED"
        [..]
        .to_vec()
}
