//! TLS to Redis with a private CA and a client certificate, both made in the
//! test: `rediss://` with `redis.tls` works; without the CA, or without the
//! client certificate the server asks for, the queue API answers 503.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A CA; a server certificate for 127.0.0.1 and a client certificate, both
/// signed by it.
fn certificates(dir: &Path) {
    tls::ca(dir);
    tls::signed(dir, "server", "server", "subjectAltName=IP:127.0.0.1\n");
    tls::signed(dir, "client", "client", "extendedKeyUsage=clientAuth\n");
}

struct TlsRedis {
    port: u16,
    child: Child,
}

impl TlsRedis {
    fn start(dir: &Path) -> TlsRedis {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", "0", "--bind", "127.0.0.1", "--save", ""])
            .args(["--tls-port", &port.to_string()])
            .args([
                "--tls-cert-file",
                "server.pem",
                "--tls-key-file",
                "server.key",
            ])
            .args(["--tls-ca-cert-file", "ca.pem", "--tls-auth-clients", "yes"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis TLS did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsRedis { port, child }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn register_with(redis: &TlsRedis, tls: &str, user: &str) -> u16 {
    let ports = Ports::new();
    let config = config(
        &format!("rediss://127.0.0.1:{}/0", redis.port),
        &ports,
        free_port(),
    )
    .replace(
        "  command-timeout-ms: 300\n",
        &format!("  command-timeout-ms: 1000\n{tls}"),
    );
    let wg = Waitgate::start(&config, &ports);
    register(wg.addr, user).status
}

#[test]
fn redis_over_tls_with_a_private_ca_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let redis = TlsRedis::start(d);
    let file = |name: &str| d.join(name).display().to_string();

    let tls = format!(
        "  tls:\n    ca-file: {}\n    cert-file: {}\n    key-file: {}\n",
        file("ca.pem"),
        file("client.pem"),
        file("client.key")
    );
    assert_eq!(register_with(&redis, &tls, "tls_fan"), 200);

    // The public roots do not know the private CA.
    assert_eq!(register_with(&redis, "", "no_ca"), 503);
    // The server asks for a client certificate.
    let ca_only = format!("  tls:\n    ca-file: {}\n", file("ca.pem"));
    assert_eq!(register_with(&redis, &ca_only, "no_client_cert"), 503);
}
