//! Load for the scale measurements (`scripts/scale.sh`): many kept-alive
//! connections polling `rank` for random users, registering users, polling
//! each user once, or one connection polling alone.
//!
//! ```text
//! # register u0 .. u999999, 256 connections
//! cargo run --release --example pollers -- register --target 127.0.0.1:8080 --users 1000000 --connections 256
//! # every user of u0 .. u999999 polled once, in order
//! cargo run --release --example pollers -- sweep --target 127.0.0.1:8080 --users 1000000 --connections 256
//! # 1,024 connections polling random users of u0 .. u999999 for 20 s
//! cargo run --release --example pollers -- poll --target 127.0.0.1:8080 --users 1000000 --connections 1024 --seconds 20
//! # the same at 30,000 polls a second in all, sent on time whatever the answers take
//! # (an open loop, as a crowd polling at its cadence is; a connection still
//! # waiting for its answer sends its next one late)
//! cargo run --release --example pollers -- poll --target 127.0.0.1:8080 --users 1000000 --connections 1024 --seconds 20 --rate 30000
//! # one connection, a poll every 5 ms: the latency of a poll with no company
//! cargo run --release --example pollers -- lone --target 127.0.0.1:8080 --users 1000000 --seconds 10
//! # registering, keep each user's queueCredential (a line each, `-` for none);
//! # polling, send it (`X-Queue-Credential`), as the page and the JS client do
//! cargo run --release --example pollers -- register ... --credentials creds.txt
//! cargo run --release --example pollers -- poll ... --credentials creds.txt
//! ```
//! It prints one line of `key=value` figures: requests, requests/s,
//! latency p50/p99/max (ms; with a rate, from when each poll was due),
//! errors (non-200 answers, or none) and, with a rate, the polls sent more
//! than a millisecond late.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Args {
    mode: String,
    target: SocketAddr,
    users: u64,
    connections: usize,
    seconds: u64,
    queue: Option<String>,
    prefix: String,
    /// Polls a second over all connections (0: each as soon as the last
    /// was answered).
    rate: f64,
    /// Where the users' credentials are kept (register) or read (polls).
    credentials: Option<String>,
    /// Polls: a user told it has no place (404) or admitted (`ACTIVE`) is
    /// not polled again, as the page and the JS client stop following a
    /// place once told so.
    forget: bool,
    /// Polls: one user in this many (those numbered K-1 mod K) is never
    /// polled: the load's leavers, whom it drops out or makes silent (0:
    /// none).
    leavers: u64,
}

fn args() -> Args {
    let mut argv = std::env::args().skip(1);
    let mode = argv.next().unwrap_or_else(|| usage());
    let mut a = Args {
        mode,
        target: "127.0.0.1:8080".parse().unwrap(),
        users: 1_000_000,
        connections: 64,
        seconds: 10,
        queue: None,
        prefix: "u".into(),
        rate: 0.0,
        credentials: None,
        forget: false,
        leavers: 0,
    };
    while let Some(flag) = argv.next() {
        let value = argv.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--target" => a.target = value.parse().unwrap_or_else(|_| usage()),
            "--users" => a.users = value.parse().unwrap_or_else(|_| usage()),
            "--connections" => a.connections = value.parse().unwrap_or_else(|_| usage()),
            "--seconds" => a.seconds = value.parse().unwrap_or_else(|_| usage()),
            "--queue" => a.queue = Some(value),
            "--prefix" => a.prefix = value,
            "--rate" => a.rate = value.parse().unwrap_or_else(|_| usage()),
            "--credentials" => a.credentials = Some(value),
            "--forget" => a.forget = value == "1",
            "--leavers" => a.leavers = value.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    a
}

fn usage() -> ! {
    eprintln!(
        "usage: pollers register|sweep|poll|lone [--target ADDR] [--users N] [--connections C] \
         [--seconds S] [--queue Q] [--prefix P] [--rate R] [--credentials PATH] [--forget 1] [--leavers K]"
    );
    std::process::exit(2)
}

/// One kept-alive HTTP/1.1 connection.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Where the last answer's body starts in `buf`.
    body_at: usize,
}

impl Conn {
    async fn open(target: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(target).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(4096),
            body_at: 0,
        })
    }

    /// Whether the last answer's body says the user was admitted.
    fn admitted(&self) -> bool {
        find(&self.buf[self.body_at..], br#""status":"ACTIVE""#).is_some()
    }

    /// Sends `request` and reads the answer: its status.
    async fn exchange(&mut self, request: &[u8]) -> std::io::Result<u16> {
        self.stream.write_all(request).await?;
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        let (head_end, length) = loop {
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                break (end + 4, length);
            }
        };
        while self.buf.len() < head_end + length {
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        self.body_at = head_end;
        let status = std::str::from_utf8(&self.buf[9..12])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Ok(status)
    }
}

impl Conn {
    /// The `queueCredential` of the last answer's JSON body, if any.
    fn credential(&self) -> Option<String> {
        let body = std::str::from_utf8(&self.buf[self.body_at..]).ok()?;
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        Some(v["queueCredential"].as_str()?.to_string())
    }
}

/// Whether `user` is one `--forget` took out (never, without it).
fn is_gone(gone: &[AtomicU64], user: u64) -> bool {
    gone.get((user / 64) as usize)
        .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (user % 64)) != 0)
}

/// Takes `user` out of the polls, with `--forget`.
fn forget(gone: &[AtomicU64], user: u64) {
    if let Some(w) = gone.get((user / 64) as usize) {
        w.fetch_or(1 << (user % 64), Ordering::Relaxed);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Latencies in microseconds, and errors.
#[derive(Default)]
struct Tally {
    micros: Vec<u32>,
    errors: u64,
    /// With a rate: polls sent more than a millisecond after they were due
    /// (their connection still waited for an answer).
    late: u64,
}

fn rank_request(a: &Args, user: u64, credential: Option<&str>) -> Vec<u8> {
    let queue = a
        .queue
        .as_deref()
        .map(|q| format!("&queue={q}"))
        .unwrap_or_default();
    let credential = credential
        .map(|c| format!("X-Queue-Credential: {c}\r\n"))
        .unwrap_or_default();
    format!(
        "GET /api/v1/queue/rank?userId={}{user}{queue} HTTP/1.1\r\nHost: load\r\n{credential}\r\n",
        a.prefix
    )
    .into_bytes()
}

/// The credentials kept by `register --credentials`, by user (empty
/// without the flag, or for a mode that registers).
fn read_credentials(a: &Args) -> Vec<Option<String>> {
    match (&a.credentials, a.mode.as_str()) {
        (Some(path), mode) if mode != "register" => std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .lines()
            .map(|l| (l != "-").then(|| l.to_string()))
            .collect(),
        _ => Vec::new(),
    }
}

fn register_request(a: &Args, user: u64) -> Vec<u8> {
    let queue = a
        .queue
        .as_deref()
        .map(|q| format!(r#","queue":"{q}""#))
        .unwrap_or_default();
    let body = format!(r#"{{"userId":"{}{user}"{queue}}}"#, a.prefix);
    format!(
        "POST /api/v1/queue/register HTTP/1.1\r\nHost: load\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::main]
async fn main() {
    let a = Arc::new(args());
    let credentials = Arc::new(read_credentials(&a));
    // What `register --credentials` keeps, by user.
    let keeping = a.credentials.is_some() && a.mode == "register";
    let slots = if keeping { a.users as usize } else { 0 };
    let kept: Arc<std::sync::Mutex<Vec<Option<String>>>> =
        Arc::new(std::sync::Mutex::new(vec![None; slots]));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(a.seconds);
    let next = Arc::new(AtomicU64::new(0));
    // With --forget: the users not to poll again, a bit each.
    let words = if a.forget {
        a.users.div_ceil(64) as usize
    } else {
        0
    };
    let gone: Arc<Vec<AtomicU64>> = Arc::new((0..words).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    let connections = if a.mode == "lone" { 1 } else { a.connections };
    let tasks: Vec<_> = (0..connections)
        .map(|c| {
            let (a, next, done) = (a.clone(), next.clone(), done.clone());
            let (credentials, kept, gone) = (credentials.clone(), kept.clone(), gone.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut conn = match Conn::open(a.target).await {
                    Ok(conn) => conn,
                    Err(_) => {
                        tally.errors += 1;
                        return tally;
                    }
                };
                let mut rng =
                    0x9e3779b97f4a7c15u64 ^ (c as u64 + 1).wrapping_mul(0xbf58476d1ce4e5b9);
                // With a rate, each connection's polls are due at even
                // steps, the connections staggered across one step.
                let step = (a.rate > 0.0 && a.mode == "poll")
                    .then(|| Duration::from_secs_f64(connections as f64 / a.rate));
                let mut due =
                    step.map(|s| Instant::now() + s.mul_f64(c as f64 / connections as f64));
                loop {
                    // With a rate, a poll's time counts from when it was due.
                    let mut was_due = None;
                    if let (Some(step), Some(at)) = (step, due.as_mut()) {
                        tokio::time::sleep_until((*at).into()).await;
                        if at.elapsed() > Duration::from_millis(1) {
                            tally.late += 1;
                        }
                        was_due = Some(*at);
                        *at += step;
                    }
                    let credential_of =
                        |user: u64| credentials.get(user as usize).and_then(|c| c.as_deref());
                    let mut registering = None;
                    let mut polled = None;
                    let request = match a.mode.as_str() {
                        "register" | "sweep" => {
                            let user = next.fetch_add(1, Ordering::Relaxed);
                            if user >= a.users {
                                break;
                            }
                            if a.mode == "sweep" {
                                rank_request(&a, user, credential_of(user))
                            } else {
                                registering = Some(user);
                                register_request(&a, user)
                            }
                        }
                        "poll" | "lone" => {
                            if Instant::now() >= deadline {
                                break;
                            }
                            // xorshift: a random user, the same sequence every
                            // run; not a leaver, and with --forget, one not told
                            // it left (a few tries: few are).
                            let mut user;
                            let mut tries = 0;
                            loop {
                                rng ^= rng << 13;
                                rng ^= rng >> 7;
                                rng ^= rng << 17;
                                user = rng % a.users;
                                tries += 1;
                                let leaver = a.leavers > 0 && user % a.leavers == a.leavers - 1;
                                if !(leaver || is_gone(&gone, user)) || tries == 64 {
                                    break;
                                }
                            }
                            polled = Some(user);
                            rank_request(&a, user, credential_of(user))
                        }
                        _ => usage(),
                    };
                    let sent = was_due.unwrap_or_else(Instant::now);
                    match conn.exchange(&request).await {
                        Ok(200) => {
                            tally.micros.push(sent.elapsed().as_micros() as u32);
                            if let Some(user) = registering.filter(|_| a.credentials.is_some()) {
                                kept.lock().unwrap()[user as usize] = conn.credential();
                            }
                            if let Some(user) = polled.filter(|_| conn.admitted()) {
                                forget(&gone, user);
                            }
                        }
                        Ok(status) => {
                            tally.errors += 1;
                            if let Some(user) = polled.filter(|_| status == 404) {
                                forget(&gone, user);
                            }
                        }
                        Err(_) => {
                            tally.errors += 1;
                            match Conn::open(a.target).await {
                                Ok(fresh) => conn = fresh,
                                Err(_) => break,
                            }
                        }
                    }
                    if a.mode == "lone" {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
                tally
            })
        })
        .collect();
    let mut all = Tally::default();
    for t in tasks {
        let tally = t.await.unwrap();
        all.micros.extend(tally.micros);
        all.errors += tally.errors;
        all.late += tally.late;
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let (Some(path), "register") = (&a.credentials, a.mode.as_str()) {
        let kept = kept.lock().unwrap();
        let mut text = String::with_capacity(kept.len() * 44);
        for credential in kept.iter() {
            text.push_str(credential.as_deref().unwrap_or("-"));
            text.push('\n');
        }
        std::fs::write(path, text).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    all.micros.sort_unstable();
    let pct = |p: f64| -> f64 {
        if all.micros.is_empty() {
            return 0.0;
        }
        let i = ((all.micros.len() as f64 * p) as usize).min(all.micros.len() - 1);
        all.micros[i] as f64 / 1000.0
    };
    println!(
        "mode={} connections={} requests={} seconds={elapsed:.2} per_second={:.0} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} errors={} late={} forgotten={}",
        a.mode,
        connections,
        all.micros.len(),
        all.micros.len() as f64 / elapsed,
        pct(0.5),
        pct(0.99),
        pct(1.0),
        all.errors,
        all.late,
        gone.iter().map(|w| w.load(Ordering::Relaxed).count_ones()).sum::<u32>()
    );
}
