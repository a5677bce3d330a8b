//! Slow and greedy clients: half-sent headers and bodies (slowloris) are cut
//! off at their deadline without starving anyone else, and the connection
//! cap answers 503 instead of running out of file descriptors.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

fn start_with(extra: &str) -> (Redis, Waitgate) {
    let redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .with(extra)
        .start();
    (redis, wg)
}

/// Waits until the server closes `stream`; returns how long that took.
fn closed_after(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = [0u8; 1024];
    poll_for(limit, || match stream.read(&mut buf) {
        Ok(0) => Some(start.elapsed()),
        Ok(_) => None,
        Err(e)
            if e.kind() == std::io::ErrorKind::WouldBlock
                || e.kind() == std::io::ErrorKind::TimedOut =>
        {
            None
        }
        Err(_) => Some(start.elapsed()),
    })
}

#[test]
fn slowloris_headers_are_cut_off_and_others_are_served_meanwhile() {
    let (_redis, wg) = start_with("client-header-timeout-ms: 600\n");
    register(wg.addr, "regular");
    let started = Instant::now();
    let mut slow: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = TcpStream::connect(wg.addr).unwrap();
            s.write_all(b"GET /api/v1/queue/rank?userId=regular HTTP/1.1\r\nHo")
                .unwrap();
            s
        })
        .collect();
    // They keep trickling a byte at a time, and normal requests keep working.
    let mut slowest = Duration::ZERO;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(150));
        for s in slow.iter_mut() {
            let _ = s.write_all(b"s");
        }
        let t = Instant::now();
        assert_eq!(rank(wg.addr, "regular").status, 200);
        slowest = slowest.max(t.elapsed());
    }
    // Every slow connection is closed shortly after the 600 ms deadline.
    let mut last_close = Duration::ZERO;
    for s in slow.iter_mut() {
        closed_after(s, Duration::from_secs(3)).expect("slowloris connection closed");
        last_close = started.elapsed();
    }
    println!(
        "100 slowloris connections: all closed {last_close:?} after they opened (deadline 600 ms); \
         slowest normal request meanwhile {slowest:?}"
    );
    assert!(last_close < Duration::from_millis(1500), "{last_close:?}");
    assert!(slowest < Duration::from_millis(200), "{slowest:?}");
}

#[test]
fn idle_keep_alive_connections_are_closed_after_the_header_deadline() {
    let (_redis, wg) = start_with("client-header-timeout-ms: 500\n");
    register(wg.addr, "k");
    let mut s = TcpStream::connect(wg.addr).unwrap();
    s.write_all(b"GET /api/v1/queue/rank?userId=k HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let r = read_response(&mut BufReader::new(s.try_clone().unwrap())).unwrap();
    assert_eq!(r.status, 200);
    let idle = closed_after(&mut s, Duration::from_secs(3)).expect("idle connection closed");
    assert!(idle >= Duration::from_millis(400), "{idle:?}");
    assert!(idle < Duration::from_millis(1200), "{idle:?}");
}

#[test]
fn a_slow_queue_api_body_gets_408() {
    let (redis, wg) = start_with("client-body-timeout-ms: 400\n");
    let mut s = TcpStream::connect(wg.addr).unwrap();
    s.write_all(
        b"POST /api/v1/queue/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"user",
    )
    .unwrap();
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let r = read_response(&mut BufReader::new(s)).unwrap();
    let took = start.elapsed();
    assert_eq!(r.status, 408, "{r:?}");
    assert_eq!(r.error_code(), "request_timeout");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(took < Duration::from_millis(1000), "{took:?}");
    let mut c = redis.conn();
    let waiting: u64 = redis::Commands::zcard(&mut c, "queue:{baseball}:waiting").unwrap();
    assert_eq!(waiting, 0);
}

#[test]
fn past_max_connections_new_connections_get_503() {
    let (_redis, wg) = start_with("max-connections: 20\nclient-header-timeout-ms: 5000\n");
    // The harness's own readiness probe may still be counted for a moment.
    std::thread::sleep(Duration::from_millis(100));
    let held: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(wg.addr).unwrap())
        .collect();
    // Accepted, all 20.
    wg.wait_for_metrics("waitgate_connections 20\n", Duration::from_secs(2));
    let r = get(wg.addr, "/api/v1/queue/rank?userId=a").unwrap();
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.error_code(), "too_many_connections");
    assert!(r.header("retry-after").is_some());
    // The gauge counts the 20 held connections (the refused one leaves it
    // once its lingering close ends).
    wg.wait_for_metrics("waitgate_connections 20\n", Duration::from_secs(2));
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        get(wg.addr, "/api/v1/queue/rank?userId=a").unwrap().status,
        404
    );
}

/// The admin listener has the proxy's head deadline (a head trickled in a
/// byte a second is cut off at `client-header-timeout-ms`) and a cap of its
/// own (128 connections; past it a 503), so that it cannot be held open,
/// nor its connections take the proxy's descriptors. Probes still answer
/// once the crowd is gone, and the proxy never noticed it.
#[test]
fn the_admin_listener_has_the_head_deadline_and_a_cap_of_its_own() {
    let (_redis, wg) = start_with("client-header-timeout-ms: 1000\n");
    let mut slow = TcpStream::connect(wg.admin).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
    let started = Instant::now();
    let cut = poll_for(Duration::from_secs(6), || {
        if slow.write_all(b"s").is_err() {
            return Some(started.elapsed());
        }
        closed_after(&mut slow, Duration::from_millis(300))
            .map(|after| started.elapsed().min(after + started.elapsed()))
    });
    let cut = cut.expect("the admin listener held a trickling head for 6 s");
    assert!(cut < Duration::from_millis(2500), "{cut:?}");

    // 128 idle connections fill its cap; the next one gets a 503, the
    // proxy listener serves all along.
    let held: Vec<TcpStream> = (0..128)
        .map(|_| TcpStream::connect(wg.admin).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = get(wg.admin, "/healthz").unwrap();
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.error_code(), "too_many_connections");
    assert_eq!(
        get(wg.addr, "/api/v1/queue/rank?userId=a").unwrap().status,
        404
    );
    drop(held);
    wait_until(
        "the admin listener answers again",
        Duration::from_secs(2),
        || get(wg.admin, "/healthz").is_ok_and(|r| r.status == 200),
    );
    // Counted apart: the scrape's own connection, on the admin gauge only.
    wait_until(
        "the admin gauge counts the scrape alone",
        Duration::from_secs(2),
        || {
            let metrics = get(wg.admin, "/metrics").unwrap().text();
            metrics.contains("waitgate_admin_connections 1\n")
                && metrics.contains("waitgate_connections 0\n")
        },
    );
}
