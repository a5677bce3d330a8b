//! Upstream pools: several addresses, health-checked, on both HTTP paths.
//! One upstream is killed and one stalled mid-test: once the health check
//! has marked them down, no client sees an error; traffic returns when they
//! come back; with none healthy, a request gets 502 at once.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const SERVE: u8 = 0;
const STALL: u8 = 1;
const DEAD: u8 = 2;
/// Health checks answered at once, other requests after 800 ms.
const SLOW: u8 = 3;

/// A backend that answers `200` with its name, or stalls (accepts, never
/// answers), or is dead (nothing listens; its open connections are shut).
struct Backend {
    name: &'static str,
    port: u16,
    mode: Arc<AtomicU8>,
    served: Arc<AtomicUsize>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Backend {
    fn start(name: &'static str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let backend = Backend {
            name,
            port,
            mode: Arc::new(AtomicU8::new(SERVE)),
            served: Arc::new(AtomicUsize::new(0)),
            open: Arc::new(Mutex::new(Vec::new())),
        };
        backend.listen(listener);
        backend
    }

    fn listen(&self, listener: TcpListener) {
        let (mode, served, open, name) = (
            self.mode.clone(),
            self.served.clone(),
            self.open.clone(),
            self.name,
        );
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || loop {
            if mode.load(Ordering::SeqCst) == DEAD {
                return; // drops the listener: connections are refused
            }
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    open.lock().unwrap().push(stream.try_clone().unwrap());
                    let (mode, served) = (mode.clone(), served.clone());
                    std::thread::spawn(move || serve(stream, name, &mode, &served));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        });
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
        if mode == DEAD {
            for stream in self.open.lock().unwrap().drain(..) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
            // Let the accept loop see it and drop the listener.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn revive(&self) {
        let was_dead = self.mode.load(Ordering::SeqCst) == DEAD;
        self.mode.store(SERVE, Ordering::SeqCst);
        if was_dead {
            self.listen(TcpListener::bind(("127.0.0.1", self.port)).unwrap());
        }
    }

    fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, name: &str, mode: &AtomicU8, served: &AtomicUsize) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" || header == "\n" {
                break;
            }
        }
        match mode.load(Ordering::SeqCst) {
            SERVE => {}
            SLOW if path == "/health" => {}
            SLOW => std::thread::sleep(Duration::from_millis(800)),
            STALL => {
                // Never answers; holds the connection until it is closed.
                std::thread::sleep(Duration::from_secs(30));
                return;
            }
            _ => return,
        }
        if path != "/health" {
            served.fetch_add(1, Ordering::SeqCst);
        }
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{name}",
            name.len()
        );
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// The harness config with `backends` behind upstream `ticketing`,
/// balanced by `policy` and health-checked every 200 ms.
fn pool(redis: &Redis, backends: &[&Backend], policy: &str) -> TestConfig {
    let addresses: Vec<String> = backends
        .iter()
        .map(|b| format!("'127.0.0.1:{}'", b.port))
        .collect();
    TestConfig::on_free_ports(&redis.url(), 1).upstream(
        "ticketing",
        &format!(
            "{{addresses: [{}], load-balancing: {policy}, read-timeout-ms: 1000, \
             health-check: {{path: /health, interval-ms: 200, timeout-ms: 200}}}}",
            addresses.join(", ")
        ),
    )
}

fn get_seat(addr: SocketAddr, token: &str) -> (u16, String, Duration) {
    let started = Instant::now();
    let r = with_token(addr, "GET", "/api/v1/follow-up/seat", token, None);
    (r.status, r.text(), started.elapsed())
}

/// Two check rounds and their timeouts: enough for any change of health
/// to be seen.
const SETTLE: Duration = Duration::from_millis(700);

#[test]
fn unhealthy_addresses_get_no_traffic_and_come_back_and_none_healthy_is_a_quick_502() {
    let redis = Redis::start();
    let (a, b, c) = (
        Backend::start("a"),
        Backend::start("b"),
        Backend::start("c"),
    );
    let wg = pool(&redis, &[&a, &b, &c], "round-robin").start();
    let token = admitted_token(&wg, &redis, "fan_1");

    // All healthy: round robin over the three.
    for _ in 0..60 {
        assert_eq!(get_seat(wg.addr, &token).0, 200);
    }
    for backend in [&a, &b, &c] {
        assert!(
            backend.served() >= 10,
            "{} served {}",
            backend.name,
            backend.served()
        );
    }

    // One killed, one stalled. After the health check has seen it, every
    // request goes to the one left.
    a.set(DEAD);
    b.set(STALL);
    std::thread::sleep(SETTLE);
    let before = c.served();
    for i in 0..100 {
        let (status, body, took) = get_seat(wg.addr, &token);
        assert_eq!(
            (status, body.as_str()),
            (200, "c"),
            "request {i} took {took:?}"
        );
    }
    assert_eq!(c.served() - before, 100);

    // Both back: traffic returns to them.
    a.revive();
    b.revive();
    std::thread::sleep(SETTLE);
    let (sa, sb) = (a.served(), b.served());
    for _ in 0..60 {
        assert_eq!(get_seat(wg.addr, &token).0, 200);
    }
    assert!(
        a.served() - sa >= 10 && b.served() - sb >= 10,
        "a {} b {}",
        a.served() - sa,
        b.served() - sb
    );
    // Each change of state is one line, whatever the number of checks.
    let log = wg.log();
    let count = |what: &str| log.lines().filter(|l| l.contains(what)).count();
    assert_eq!(count("failed its health check"), 2, "{log}");
    assert_eq!(count("is healthy again"), 2, "{log}");

    // None healthy: 502 at once, without trying them.
    a.set(DEAD);
    b.set(STALL);
    c.set(DEAD);
    std::thread::sleep(SETTLE);
    for _ in 0..5 {
        let started = Instant::now();
        let r = with_token(wg.addr, "GET", "/api/v1/follow-up/seat", &token, None);
        assert_eq!(r.status, 502, "{r:?}");
        assert_eq!(r.error_code(), "upstream_unavailable");
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "{:?}",
            started.elapsed()
        );
    }
    // The queue API is unaffected.
    assert_eq!(rank(wg.addr, "nobody").status, 404);
}

#[test]
fn least_connections_sends_new_requests_away_from_a_slow_address() {
    let redis = Redis::start();
    let (fast, slow) = (Backend::start("fast"), Backend::start("slow"));
    let wg = pool(&redis, &[&fast, &slow], "least-connections").start();
    let token = admitted_token(&wg, &redis, "fan_2");
    // Healthy, but each request takes 800 ms there: a request under way
    // on it keeps new ones away, where round robin would send it half.
    slow.set(SLOW);
    let until = Instant::now() + Duration::from_millis(1500);
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (addr, token) = (wg.addr, token.clone());
            std::thread::spawn(move || {
                let mut statuses = Vec::new();
                while Instant::now() < until {
                    statuses.push(get_seat(addr, &token).0);
                }
                statuses
            })
        })
        .collect();
    for client in clients {
        assert!(client.join().unwrap().iter().all(|&s| s == 200));
    }
    let (f, s) = (fast.served(), slow.served());
    println!("least-connections over 1.5 s, 4 clients: fast {f}, slow {s}");
    assert!(s >= 1, "the slow address is healthy and gets some: {s}");
    assert!(f >= 20 * s, "fast {f}, slow {s}");
}

/// A reload keeps what the health checks know of an upstream whose
/// settings it does not change: requests sent between reloads never go to
/// the address that is down (a reload built the upstream anew, every
/// address healthy until its next check, and requests went to the dead
/// one: 502). One that changes the upstream builds it anew.
#[test]
fn a_reload_keeps_the_health_of_an_unchanged_upstream() {
    let redis = Redis::start();
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    // Checks far apart: a reload that forgot them would show for seconds.
    let wg = pool(&redis, &[&a, &b], "round-robin")
        .set("upstreams.ticketing.health-check.interval-ms", "3000")
        .start();
    let token = admitted_token(&wg, &redis, "fan_1");
    a.set(DEAD);
    // The first check after the kill (within 3 s) marks it down.
    let marked = eventually(Duration::from_secs(8), || {
        wg.log().contains("failed its health check")
    });
    assert!(marked, "{}", wg.log());
    for round in 0..5 {
        wg.signal("HUP");
        std::thread::sleep(Duration::from_millis(150));
        for i in 0..10 {
            let (status, body, _) = get_seat(wg.addr, &token);
            assert_eq!(
                (status, body.as_str()),
                (200, "b"),
                "reload {round}, request {i}"
            );
        }
    }
    let log = wg.log();
    assert_eq!(log.matches("config reloaded").count(), 5, "{log}");
    assert_eq!(log.matches("failed its health check").count(), 1, "{log}");
}
