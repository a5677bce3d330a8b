//! A scripted upstream on a raw socket: for each request it receives, a
//! script chooses exactly which bytes go back, when, and whether the
//! connection then closes or resets. Hostile and buggy backends are
//! written as scripts: late second responses, bodies where none may be,
//! wrong lengths, 101s, stalls, resets.

use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpStream};
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

pub use super::Recorded;

type Script = dyn Fn(&Recorded) -> Vec<Step> + Send + Sync;

/// The upstream: a listener on a free port, a thread per connection.
pub struct Scripted {
    pub port: u16,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    connections: Arc<AtomicUsize>,
}

impl Scripted {
    pub fn start(script: impl Fn(&Recorded) -> Vec<Step> + Send + Sync + 'static) -> Scripted {
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let r = recorded.clone();
        let (port, connections) =
            super::serve_connections(move |stream, conn| serve(stream, conn, &script, &r));
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
    while let Some(request) = super::read_request(&mut reader, conn) {
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
