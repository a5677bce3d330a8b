//! TLS to Redis with a private CA and a client certificate, both made in the
//! test: `rediss://` with `redis.tls` works; without the CA, or without the
//! client certificate the server asks for, the queue API answers 503.

mod common;

use std::path::Path;
use std::process::Command;

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
    _process: ChildGuard,
}

impl TlsRedis {
    fn start(dir: &Path) -> TlsRedis {
        let port = free_port();
        let process = ChildGuard::spawn_on_port(
            "redis-server with TLS",
            Command::new("redis-server")
                .args(["--port", "0", "--bind", "127.0.0.1", "--save", ""])
                .args(["--tls-port", &port.to_string()])
                .args([
                    "--tls-cert-file",
                    "server.pem",
                    "--tls-key-file",
                    "server.key",
                ])
                .args(["--tls-ca-cert-file", "ca.pem", "--tls-auth-clients", "yes"])
                .current_dir(dir),
            port,
        );
        TlsRedis {
            port,
            _process: process,
        }
    }
}

/// The status of a registration through a waitgate whose `redis.tls` is
/// `tls` (YAML), if any.
fn register_with(redis: &TlsRedis, tls: Option<&str>, user: &str) -> u16 {
    let ports = Ports::new();
    let url = format!("rediss://127.0.0.1:{}/0", redis.port);
    let mut config =
        TestConfig::new(&url, &ports, free_port()).set("redis.command-timeout-ms", "1000");
    if let Some(tls) = tls {
        config = config.set("redis.tls", tls);
    }
    let config = config.yaml();
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
        "{{ca-file: '{}', cert-file: '{}', key-file: '{}'}}",
        file("ca.pem"),
        file("client.pem"),
        file("client.key")
    );
    assert_eq!(register_with(&redis, Some(&tls), "tls_fan"), 200);

    // The public roots do not know the private CA.
    assert_eq!(register_with(&redis, None, "no_ca"), 503);
    // The server asks for a client certificate.
    let ca_only = format!("{{ca-file: '{}'}}", file("ca.pem"));
    assert_eq!(register_with(&redis, Some(&ca_only), "no_client_cert"), 503);
}
