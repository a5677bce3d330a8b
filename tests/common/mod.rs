//! The integration-test harness: a real `redis-server` on a free port, the
//! real `waitgate` binary on free ports with a config built by key
//! ([`TestConfig`]), recording upstreams (one [`Recorded`] per request), a
//! small HTTP/1.1 client that can also send malformed requests, one
//! [`ChildGuard`] for every child process, and waits for a condition
//! ([`wait_until`], [`wait_for`]) instead of sleeps.
//!
//! Nothing here talks to the Redis on 6379: every test owns its Redis.

#![allow(dead_code)]

pub mod browser;
pub mod ha;
pub mod scripted;
pub mod tls;

mod client;
mod config;
mod process;
mod redis_server;
mod relay;
mod server;
mod state;
mod upstream;
mod wait;

// Each test binary uses some of it.
#[allow(unused_imports)]
pub use client::*;
#[allow(unused_imports)]
pub use config::*;
#[allow(unused_imports)]
pub use process::*;
#[allow(unused_imports)]
pub use redis_server::*;
#[allow(unused_imports)]
pub use relay::*;
#[allow(unused_imports)]
pub use server::*;
#[allow(unused_imports)]
pub use state::*;
#[allow(unused_imports)]
pub use upstream::*;
#[allow(unused_imports)]
pub use wait::*;

use std::net::TcpListener;

/// A fixed test key (Base64 of 32 bytes), so tests can sign their own tokens.
pub const SECRET_B64: &str = "dGVzdC1zZWNyZXQtZm9yLXdhaXRnYXRlLXRlc3RzLTAx";

pub fn secret_bytes() -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(SECRET_B64)
        .unwrap()
}

/// A port nobody listens on right now, from below the kernel's ephemeral
/// range. Test servers that bind port 0 (recording upstreams, scripted
/// backends) get ephemeral ports, so they can never take a port handed out
/// here in the moment between this check and waitgate's or Redis's own
/// bind: a waitgate whose admin port was taken that way polled the other
/// test's upstream for `/healthz`, and those requests showed up in what it
/// recorded.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Each test process starts at its own place in the range, so that two
    // processes rarely hand out the same port in the same moment; within
    // a process, steps of a prime that does not divide the span visit
    // every port once before any comes again.
    static START: OnceLock<u32> = OnceLock::new();
    let start = *START.get_or_init(|| {
        std::process::id().wrapping_mul(2_654_435_761)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
    });
    let (low, high) = handout_range();
    let span = u32::from(high - low) + 1;
    let stride: u32 = if span % 7919 == 0 { 7907 } else { 7919 };
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let offset = (u64::from(start) + u64::from(step) * u64::from(stride)) % u64::from(span);
        let port = low + offset as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {low}..={high}");
}

/// The ports [`free_port`] hands out: those below the ephemeral range
/// (`ip_local_port_range`), or above it when it starts too low to leave
/// room.
fn handout_range() -> (u16, u16) {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|n| n.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    if ephemeral.0 >= 12_000 {
        (10_000, ephemeral.0 - 1)
    } else {
        (ephemeral.1.saturating_add(1).min(64_000), 65_535)
    }
}
