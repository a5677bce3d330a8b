//! What one connection may cost: a client that opens requests whose bodies
//! never come (a register, `Content-Length: 36`, nothing sent) holds the
//! memory of each until `client-body-timeout-ms`. Over HTTP/1.1 that is one
//! request a connection; over HTTP/2 it was 100 (Pingora's default), and
//! 1,000 such connections took 1,657 MiB against HTTP/1.1's 62 MiB. With
//! `h2-max-streams` (default 6) and the window budget, one HTTP/2
//! connection costs at most about three HTTP/1.1 ones under the same
//! attack. Measured here on waitgate's resident memory (`VmRSS`), each
//! protocol on a fresh process.
//!
//! `WAITGATE_H2_CONNECTIONS` sets the connections of each run (200 by
//! default; docs/security.md gives the figure at 1,000).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::AsyncWriteExt;
use tokio_rustls::rustls;

/// The register that never sends its body.
const PATH: &str = "/api/v1/queue/register";

/// A waitgate with a TLS listener and a body deadline long enough to
/// measure in.
struct Target {
    dir: tempfile::TempDir,
    _redis: Redis,
    wg: Waitgate,
    tls: SocketAddr,
}

/// `tls_extra`: more keys of `listen-tls` (YAML).
fn start(tls_extra: &str) -> Target {
    let dir = tempfile::tempdir().unwrap();
    tls::ca_and_server(dir.path(), "localhost");
    let redis = Redis::start();
    let port = free_port();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .set("client-body-timeout-ms", "60000")
        .set("max-connections", "20000")
        .listen_tls(port, dir.path())
        .merge("listen-tls", tls_extra)
        .start();
    Target {
        dir,
        _redis: redis,
        wg,
        tls: SocketAddr::from(([127, 0, 0, 1], port)),
    }
}

/// waitgate's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn connector(dir: &Path, alpn: &[u8]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// What a client holds open: each connection's streams, to keep them.
type Held = Vec<Box<dyn std::any::Any + Send>>;

/// One HTTP/2 connection opening as many hanging registers as waitgate
/// lets it (at most `streams`): returns how many it got open.
async fn h2_connection(
    connector: tokio_rustls::TlsConnector,
    addr: SocketAddr,
    streams: usize,
    held: &mut Held,
) -> usize {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (client, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(connection);
    let mut opened = 0;
    for _ in 0..streams {
        let Ok(mut ready) = client.clone().ready().await else {
            break;
        };
        let request = http::Request::post(format!("https://localhost{PATH}"))
            .header("content-type", "application/json")
            .header("content-length", "36")
            .body(())
            .unwrap();
        let (response, send) = ready.send_request(request, false).unwrap();
        held.push(Box::new((response, send)));
        opened += 1;
    }
    // The client queues what is past the server's concurrent streams.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let open = opened.min(client.current_max_send_streams());
    held.push(Box::new(client));
    open
}

/// One HTTP/1.1 connection over TLS with one hanging register.
async fn h1_connection(connector: tokio_rustls::TlsConnector, addr: SocketAddr, held: &mut Held) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 36\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    held.push(Box::new(tls));
}

/// The memory each of `connections` attacking connections added, in KiB,
/// and the streams an HTTP/2 one got open (1 for HTTP/1.1).
fn measure(h2: bool, connections: usize, tls_extra: &str) -> (f64, usize) {
    let target = start(tls_extra);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // A warm-up connection of the same kind, so that the baseline has
    // every lazily made part (the TLS or the lane's first use).
    let connector = connector(target.dir.path(), if h2 { b"h2" } else { b"http/1.1" });
    let mut held: Held = Vec::new();
    let mut streams = 1;
    runtime.block_on(async {
        if h2 {
            h2_connection(connector.clone(), target.tls, 1, &mut held).await;
        } else {
            h1_connection(connector.clone(), target.tls, &mut held).await;
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_kib(target.wg.pid());
    runtime.block_on(async {
        for _ in 0..connections {
            if h2 {
                streams = h2_connection(connector.clone(), target.tls, 100, &mut held).await;
            } else {
                h1_connection(connector.clone(), target.tls, &mut held).await;
            }
        }
    });
    // Every request read and waiting for its body.
    std::thread::sleep(Duration::from_millis(1500));
    let after = rss_kib(target.wg.pid());
    drop(held);
    runtime.shutdown_background();
    (
        (after.saturating_sub(before)) as f64 / connections as f64,
        streams,
    )
}

/// `WAITGATE_H2_STREAMS` sets `h2-max-streams` for the measure (the
/// default when unset), to see what each value costs.
fn streams_line() -> String {
    std::env::var("WAITGATE_H2_STREAMS")
        .map(|n| format!("  h2-max-streams: {n}\n"))
        .unwrap_or_default()
}

fn connections() -> usize {
    std::env::var("WAITGATE_H2_CONNECTIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

/// The attack, over HTTP/1.1 and over HTTP/2 at the defaults: an HTTP/2
/// connection opens at most `h2-max-streams` (6), and each request it holds
/// costs no more than the same request on an HTTP/1.1 connection of its
/// own, so that HTTP/2 multiplies nothing but by the streams allowed.
/// (Against a whole HTTP/1.1 connection it was 2.27 times while each TLS
/// connection held a 64 KiB read buffer, and is about 4 times since none
/// does: both got cheaper, HTTP/1.1 more.)
#[test]
fn an_http2_connection_costs_at_most_its_streams_in_http1_connections_under_hanging_bodies() {
    let n = connections();
    let (h1, _) = measure(false, n, "");
    let (h2, streams) = measure(true, n, &streams_line());
    println!(
        "H2 BUDGET {n} connections each: HTTP/1.1 {h1:.1} KiB a connection; HTTP/2 {h2:.1} KiB a connection ({streams} streams each), {:.2}x; {:.1} KiB a stream",
        h2 / h1,
        h2 / streams as f64
    );
    if streams_line().is_empty() {
        assert_eq!(streams, 6, "h2-max-streams by default");
        assert!(
            h2 / streams as f64 <= h1,
            "HTTP/2 {h2:.1} KiB for {streams} streams against HTTP/1.1 {h1:.1} KiB for one request"
        );
    }
}

/// `h2-max-streams` is the streams a connection may have open at once.
#[test]
fn h2_max_streams_is_what_a_connection_gets_open() {
    let (_, streams) = measure(true, 3, "  h2-max-streams: 3\n");
    assert_eq!(streams, 3);
}

/// An idle keep-alive connection on the plain listener, after one request
/// (a protected route answered 401), holds at most 8 KiB of waitgate's
/// memory: idle browsers between polls are most of what a waiting room
/// holds. Each connection was 19.5 KB when Pingora's listener spawned
/// its tasks, and is under 6 KB with waitgate's own (docs/performance.md).
#[test]
fn an_idle_keep_alive_connection_costs_at_most_8_kib() {
    use std::io::{Read, Write};
    const CONNECTIONS: usize = 4000;
    let _ = rlimit::increase_nofile_limit(CONNECTIONS as u64 * 2 + 1000);
    let redis = Redis::start();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .set("max-connections", "20000")
        .set("client-header-timeout-ms", "60000")
        .start();
    let request = b"GET /api/v1/follow-up/seat HTTP/1.1\r\nHost: t\r\n\r\n";
    let open = || {
        let mut c = std::net::TcpStream::connect(wg.addr).unwrap();
        c.write_all(request).unwrap();
        c
    };
    // A warm-up connection, so that the baseline has every lazily made
    // part (the lane's first use, the log's and the metrics' series).
    let mut warm = open();
    let mut reply = [0u8; 4096];
    let n = warm.read(&mut reply).unwrap();
    assert!(reply[..n].starts_with(b"HTTP/1.1 401"));
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_kib(wg.pid());
    let mut held: Vec<_> = (0..CONNECTIONS).map(|_| open()).collect();
    for c in &mut held {
        let n = c.read(&mut reply).unwrap();
        assert!(
            reply[..n].starts_with(b"HTTP/1.1 401"),
            "every request answered"
        );
    }
    std::thread::sleep(Duration::from_millis(1000));
    let after = rss_kib(wg.pid());
    let each = (after.saturating_sub(before)) as f64 * 1024.0 / CONNECTIONS as f64;
    println!("IDLE {CONNECTIONS} keep-alive connections: {each:.0} bytes each ({before} KiB before, {after} KiB after)");
    assert!(each <= 8192.0, "an idle connection holds {each:.0} bytes");
    // Still open and served: idle, not closed.
    held[0].write_all(request).unwrap();
    let n = held[0].read(&mut reply).unwrap();
    assert!(reply[..n].starts_with(b"HTTP/1.1 401"));
}
