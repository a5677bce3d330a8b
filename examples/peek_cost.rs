//! What the direct lane's pool check costs: the time of one non-blocking
//! `recv(MSG_PEEK)` on an idle loopback TCP connection (the answer is
//! `WouldBlock`, as for every healthy pooled connection), next to the time
//! of one whole request through the lane at the throughput given.
//!
//!     cargo run --release --example peek_cost -- 50000
//!     # 50000: the lane's measured requests/s on one thread (scripts/bench.sh)

use std::mem::MaybeUninit;
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

fn main() {
    let per_second: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000.0);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (_server, _) = listener.accept().expect("accept");
    client.set_nonblocking(true).expect("non-blocking");
    let socket = socket2::SockRef::from(&client);
    let mut byte = [MaybeUninit::<u8>::uninit(); 1];
    let rounds = 2_000_000;
    let mut quiet = 0;
    let started = Instant::now();
    for _ in 0..rounds {
        if matches!(socket.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
            quiet += 1;
        }
    }
    let per_peek = started.elapsed().as_nanos() as f64 / rounds as f64;
    let per_request = 1e9 / per_second;
    println!(
        "one peek: {per_peek:.0} ns ({quiet} of {rounds} answered WouldBlock); \
         one request at {per_second:.0}/s: {per_request:.0} ns; the check is {:.1}% of it",
        100.0 * per_peek / per_request
    );
}
