//! A registration bot that solves waitgate's proof of work in native code,
//! as fast as its threads can: the strongest single-machine bot the
//! challenge faces. `scripts/bot.sh` runs it (docs/security.md, "A
//! measured attack").
//!
//! ```text
//! cargo run --release --example proof_bot -- --target 127.0.0.1:8080 \
//!     --threads 2 --seconds 15 --address 10.6.6.6
//! ```
//!
//! Each thread loops: fetch a challenge, find the nonce (SHA-256, one core),
//! register a new made-up userId with the proof, all from `--address`
//! (`X-Forwarded-For`, as a trusted balancer writes it). At the end it
//! prints one line: `places=<n> refused=<n> hashes=<n> seconds=<s>`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use waitgate::entry::challenge::leading_zero_bits;

struct Args {
    target: String,
    queue: String,
    threads: usize,
    seconds: u64,
    address: String,
}

fn args() -> Args {
    let mut args = Args {
        target: "127.0.0.1:8080".into(),
        queue: "baseball".into(),
        threads: 2,
        seconds: 15,
        address: "10.6.6.6".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--target" => args.target = value,
            "--queue" => args.queue = value,
            "--threads" => args.threads = value.parse().expect("--threads is a number"),
            "--seconds" => args.seconds = value.parse().expect("--seconds is a number"),
            "--address" => args.address = value,
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// One request on a connection of its own; the status and body.
fn call(target: &str, request: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(target)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    Ok((status, body))
}

/// The proof for a challenge, and how many hashes it took.
fn solve(challenge: &str, bits: u32) -> (String, u64) {
    let prefix = Sha256::new_with_prefix(format!("{challenge}:").as_bytes());
    for n in 0u64.. {
        let digest = prefix
            .clone()
            .chain_update(n.to_string().as_bytes())
            .finalize();
        if leading_zero_bits(&digest) >= bits {
            return (format!("{challenge}:{n}"), n + 1);
        }
    }
    unreachable!("a nonce is found long before u64 runs out")
}

fn field<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    let start = body.find(&format!("\"{name}\":"))? + name.len() + 3;
    let rest = &body[start..];
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    let end = rest.find(['"', ',', '}'])?;
    Some(&rest[..end])
}

fn main() {
    let args = args();
    let (places, refused, hashes) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds);
    std::thread::scope(|s| {
        for t in 0..args.threads {
            let (args, places, refused, hashes) = (&args, &places, &refused, &hashes);
            s.spawn(move || {
                let mut i = 0u64;
                while Instant::now() < until {
                    i += 1;
                    let ask = format!(
                        "GET /api/v1/queue/challenge?queue={} HTTP/1.1\r\nHost: {}\r\nX-Forwarded-For: {}\r\nConnection: close\r\n\r\n",
                        args.queue, args.target, args.address
                    );
                    let Ok((200, body)) = call(&args.target, &ask) else {
                        refused.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let (Some(challenge), Some(bits)) = (
                        field(&body, "challenge"),
                        field(&body, "difficultyBits").and_then(|b| b.parse().ok()),
                    ) else {
                        refused.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let (proof, tried) = solve(challenge, bits);
                    hashes.fetch_add(tried, Ordering::Relaxed);
                    let json = format!(r#"{{"userId":"bot-{t}-{i}","queue":"{}"}}"#, args.queue);
                    let register = format!(
                        "POST /api/v1/queue/register HTTP/1.1\r\nHost: {}\r\nX-Forwarded-For: {}\r\nContent-Type: application/json\r\nX-Waitgate-Proof: {proof}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{json}",
                        args.target,
                        args.address,
                        json.len()
                    );
                    match call(&args.target, &register) {
                        Ok((200, _)) => places.fetch_add(1, Ordering::Relaxed),
                        _ => refused.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
    });
    println!(
        "places={} refused={} hashes={} seconds={:.1}",
        places.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        hashes.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
}
