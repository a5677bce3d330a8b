//! A full-flow load driver: simulated users arrive at a set rate, and each
//! one registers, polls its rank until admitted, trades its credential for a
//! token, calls the protected route with it, and drops out.
//!
//! It reports throughput, latency percentiles per endpoint, the admission
//! rate it observed (against the configured one, when given), the error of
//! the wait estimates (each user's `estimatedWaitSeconds` at registration
//! against its actual wait), and every error.
//!
//! ```text
//! cargo run --release --example load_driver -- \
//!     --target 127.0.0.1:8080 --users 2000 --rate 200 --poll-ms 500 \
//!     --batch 100 --interval-ms 3000
//! ```
//! Options: `--target` (waitgate's listen address), `--users`, `--rate`
//! (arrivals per second), `--poll-ms` (a fixed rank polling period; by
//! default each user waits what the last answer's `pollAfterMs` advised,
//! as a real client should), `--path` (the
//! protected path), `--queue`, `--max-wait-s` (give up waiting after this),
//! `--batch` and `--interval-ms` (the queue's admission settings, to compare
//! the observed rate with).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

struct Options {
    target: SocketAddr,
    users: usize,
    rate: f64,
    /// A fixed polling period; `None`: the advice of each answer.
    poll: Option<Duration>,
    path: String,
    queue: Option<String>,
    max_wait: Duration,
    batch: Option<f64>,
    interval_ms: Option<f64>,
}

fn options() -> Options {
    let mut o = Options {
        target: "127.0.0.1:8080".parse().unwrap(),
        users: 1000,
        rate: 100.0,
        poll: None,
        path: "/api/v1/follow-up/access".into(),
        queue: None,
        max_wait: Duration::from_secs(600),
        batch: None,
        interval_ms: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--target" => o.target = value.parse().expect("--target ip:port"),
            "--users" => o.users = value.parse().expect("--users N"),
            "--rate" => o.rate = value.parse().expect("--rate per second"),
            "--poll-ms" => o.poll = Some(Duration::from_millis(value.parse().expect("--poll-ms"))),
            "--path" => o.path = value,
            "--queue" => o.queue = Some(value),
            "--max-wait-s" => {
                o.max_wait = Duration::from_secs(value.parse().expect("--max-wait-s"))
            }
            "--batch" => o.batch = Some(value.parse().expect("--batch")),
            "--interval-ms" => o.interval_ms = Some(value.parse().expect("--interval-ms")),
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    o
}

/// One keep-alive HTTP/1.1 connection, reopened when it breaks.
struct Conn {
    target: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
}

impl Conn {
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> std::io::Result<(u16, Vec<u8>)> {
        // A kept-alive connection the server has closed fails the first
        // try; one fresh connection gets a second.
        for fresh in [false, true] {
            if self.stream.is_none() {
                self.stream = Some(BufReader::new(TcpStream::connect(self.target).await?));
            }
            match self.exchange(method, path, headers, body).await {
                Err(_) if !fresh => self.stream = None,
                result => return result,
            }
        }
        Err(std::io::ErrorKind::NotConnected.into())
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let stream = self.stream.as_mut().expect("connected");
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: waitgate\r\n");
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        if let Some(body) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ));
        } else {
            req.push_str("\r\n");
        }
        stream.get_mut().write_all(req.as_bytes()).await?;
        let mut line = String::new();
        if stream.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("bad status line"))?;
        let mut length = 0;
        let mut close = false;
        loop {
            line.clear();
            stream.read_line(&mut line).await?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((n, v)) = l.split_once(':') {
                if n.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                } else if n.eq_ignore_ascii_case("connection") && v.trim() == "close" {
                    close = true;
                }
            }
        }
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await?;
        if close {
            self.stream = None;
        }
        Ok((status, body))
    }
}

#[derive(Default)]
struct Stats {
    latency: BTreeMap<&'static str, Vec<Duration>>,
    errors: BTreeMap<String, usize>,
    /// (estimated, actual) wait of each admitted user, seconds.
    waits: Vec<(f64, f64)>,
    admitted_at: Vec<Instant>,
    completed: usize,
}

impl Stats {
    fn error(&mut self, what: String) {
        *self.errors.entry(what).or_default() += 1;
    }
}

type Shared = Arc<Mutex<Stats>>;

/// One timed call that must answer `expect`: its JSON body when it does,
/// `None` (with the error counted) when it does not.
#[allow(clippy::too_many_arguments)]
async fn step(
    stats: &Shared,
    conn: &mut Conn,
    endpoint: &'static str,
    expect: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Option<serde_json::Value> {
    let start = Instant::now();
    let result = conn.call(method, path, headers, body).await;
    let took = start.elapsed();
    let mut s = stats.lock().unwrap();
    match result {
        Ok((status, body)) => {
            s.latency.entry(endpoint).or_default().push(took);
            if status != expect {
                s.error(format!("{endpoint}: {status}"));
                return None;
            }
            Some(serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
        }
        Err(e) => {
            s.error(format!("{endpoint}: {e}"));
            None
        }
    }
}

async fn user(id: usize, o: Arc<Options>, stats: Shared) {
    let mut conn = Conn {
        target: o.target,
        stream: None,
    };
    let user = format!("load-{}-{id}", std::process::id());
    let queue = o
        .queue
        .as_ref()
        .map(|q| format!(",\"queue\":\"{q}\""))
        .unwrap_or_default();
    let queue_param = o
        .queue
        .as_ref()
        .map(|q| format!("&queue={q}"))
        .unwrap_or_default();
    let registered = Instant::now();
    let body = format!("{{\"userId\":\"{user}\"{queue}}}");
    let register_path = "/api/v1/queue/register";
    let Some(reg) = step(
        &stats,
        &mut conn,
        "register",
        200,
        "POST",
        register_path,
        &[],
        Some(&body),
    )
    .await
    else {
        return;
    };
    let estimate = reg["estimatedWaitSeconds"].as_f64();
    let credential = reg["queueCredential"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // Poll until admitted.
    let rank_path = format!("/api/v1/queue/rank?userId={user}{queue_param}");
    loop {
        if registered.elapsed() > o.max_wait {
            stats.lock().unwrap().error("gave up waiting".into());
            return;
        }
        let Some(r) = step(&stats, &mut conn, "rank", 200, "GET", &rank_path, &[], None).await
        else {
            return;
        };
        if r["status"] == "ACTIVE" {
            let mut s = stats.lock().unwrap();
            s.admitted_at.push(Instant::now());
            if let Some(e) = estimate {
                s.waits.push((e, registered.elapsed().as_secs_f64()));
            }
            break;
        }
        // The server's advice, unless a fixed period was asked for.
        let advised = r["pollAfterMs"].as_u64().map(Duration::from_millis);
        tokio::time::sleep(o.poll.or(advised).unwrap_or(Duration::from_millis(500))).await;
    }

    let body = format!("{{\"userId\":\"{user}\",\"queueCredential\":\"{credential}\"{queue}}}");
    let token_path = "/api/v1/queue/active/token";
    let Some(t) = step(
        &stats,
        &mut conn,
        "token",
        200,
        "POST",
        token_path,
        &[],
        Some(&body),
    )
    .await
    else {
        return;
    };
    let bearer = format!("Bearer {}", t["accessToken"].as_str().unwrap_or_default());
    let auth = [("Authorization", bearer.as_str())];
    step(
        &stats,
        &mut conn,
        "protected",
        200,
        "GET",
        &o.path,
        &auth,
        None,
    )
    .await;
    let dropout_path = format!("/api/v1/queue/dropout?userId={user}{queue_param}");
    let proof = [("X-Queue-Credential", credential.as_str())];
    if step(
        &stats,
        &mut conn,
        "dropout",
        204,
        "DELETE",
        &dropout_path,
        &proof,
        None,
    )
    .await
    .is_some()
    {
        stats.lock().unwrap().completed += 1;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let o = Arc::new(options());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let stats: Shared = Arc::default();
    let started = Instant::now();
    runtime.block_on(async {
        let mut tasks = Vec::with_capacity(o.users);
        let gap = Duration::from_secs_f64(1.0 / o.rate);
        for id in 0..o.users {
            tasks.push(tokio::spawn(user(id, o.clone(), stats.clone())));
            tokio::time::sleep(gap).await;
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let s = stats.lock().unwrap();
    let requests: usize = s.latency.values().map(Vec::len).sum();
    println!(
        "{} users arriving at {}/s: {} completed the whole flow in {elapsed:.1} s; {requests} requests, {:.0} requests/s",
        o.users,
        o.rate,
        s.completed,
        requests as f64 / elapsed
    );
    println!("| endpoint | requests | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for (endpoint, latencies) in &s.latency {
        let mut l = latencies.clone();
        l.sort();
        println!(
            "| {endpoint} | {} | {:.2?} | {:.2?} | {:.2?} | {:.2?} |",
            l.len(),
            percentile(&l, 0.5),
            percentile(&l, 0.9),
            percentile(&l, 0.99),
            l.last().copied().unwrap_or_default()
        );
    }
    let mut admitted = s.admitted_at.clone();
    admitted.sort();
    if admitted.len() > 1 {
        let span = admitted[admitted.len() - 1]
            .duration_since(admitted[0])
            .as_secs_f64();
        let observed = (admitted.len() - 1) as f64 / span.max(1e-9);
        match (o.batch, o.interval_ms) {
            (Some(b), Some(i)) => println!(
                "admission rate: observed {observed:.1} users/s (from first to last admission seen by polling), configured {:.1} users/s",
                b / (i / 1000.0)
            ),
            _ => println!("admission rate: observed {observed:.1} users/s"),
        }
    }
    if !s.waits.is_empty() {
        let errors: Vec<f64> = s.waits.iter().map(|(e, a)| e - a).collect();
        let mean_abs = errors.iter().map(|e| e.abs()).sum::<f64>() / errors.len() as f64;
        let max_abs = errors.iter().map(|e| e.abs()).fold(0.0, f64::max);
        let bias = errors.iter().sum::<f64>() / errors.len() as f64;
        let mean_wait = s.waits.iter().map(|(_, a)| a).sum::<f64>() / s.waits.len() as f64;
        println!(
            "wait estimate: mean |error| {mean_abs:.2} s, max |error| {max_abs:.2} s, mean signed error {bias:+.2} s, over {} users (mean wait {mean_wait:.1} s; polling every {:?} adds up to that much)",
            s.waits.len(),
            o.poll
        );
    }
    if s.errors.is_empty() {
        println!("errors: none");
    } else {
        println!("errors: {:?}", s.errors);
    }
}
