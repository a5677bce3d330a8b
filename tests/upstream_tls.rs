//! TLS to an upstream signed by a private CA made in the test: verified by
//! default, with `tls.ca-file` and `tls.sni`; an unknown issuer or a wrong
//! name is a 502, never a connection that skipped the check.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// `openssl s_server -www`: answers any GET over TLS with 200 and a page.
struct TlsServer {
    port: u16,
    _process: ChildGuard,
}

impl TlsServer {
    fn start(dir: &Path) -> TlsServer {
        TlsServer::start_as(dir, "-www")
    }

    /// With `-HTTP`, a path is answered with the file of that name under
    /// `dir`, as it is: a whole response, head and body.
    fn start_as(dir: &Path, mode: &str) -> TlsServer {
        let port = free_port();
        let process = ChildGuard::spawn_on_port(
            "openssl s_server",
            Command::new("openssl")
                .args(["s_server", "-quiet", mode, "-accept"])
                .arg(format!("127.0.0.1:{port}"))
                .args(["-cert", "server.pem", "-key", "server.key"])
                .current_dir(dir),
            port,
        );
        TlsServer {
            port,
            _process: process,
        }
    }
}

fn answer(redis: &Redis, port: u16, tls: &str, user: &str) -> Response {
    let wg = TestConfig::on_free_ports(&redis.url(), port)
        .set("upstreams.ticketing.tls", tls)
        .start();
    let token = admitted_token(&wg, redis, user);
    with_token(wg.addr, "GET", "/api/v1/follow-up/seat", &token, None)
}

#[test]
fn an_upstream_certificate_is_verified_against_the_configured_ca_and_name() {
    let dir = tempfile::tempdir().unwrap();
    tls::ca_and_server(dir.path(), "tickets.internal");
    let server = TlsServer::start(dir.path());
    let ca = dir.path().join("ca.pem");
    let redis = Redis::start();

    let with_ca = |sni: &str, user: &str| {
        let tls = format!("{{sni: {sni}, ca-file: '{}'}}", ca.display());
        answer(&redis, server.port, &tls, user)
    };
    // The private CA and the certificate's name: through.
    let ok = with_ca("tickets.internal", "fan_1");
    assert_eq!(ok.status, 200, "{ok:?}");
    assert!(ok.text().contains("s_server"), "{}", ok.text());

    // TLS on, but only the public roots: the issuer is unknown.
    let unknown = answer(&redis, server.port, "{sni: tickets.internal}", "fan_2");
    assert_eq!(unknown.status, 502, "{unknown:?}");
    assert_eq!(unknown.error_code(), "upstream_unavailable");

    // The right CA, the wrong name.
    let wrong = with_ca("other.internal", "fan_3");
    assert_eq!(wrong.status, 502, "{wrong:?}");

    // A CA file that is not one is refused at start, naming the key.
    std::fs::write(dir.path().join("bad.pem"), "not a certificate").unwrap();
    let config = TestConfig::new(&redis.url(), &Ports::new(), server.port)
        .set(
            "upstreams.ticketing.tls",
            &format!("{{ca-file: '{}'}}", dir.path().join("bad.pem").display()),
        )
        .yaml();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, config).unwrap();
    let out = run_binary(&["-c", path.to_str().unwrap(), "-t"], Some(SECRET_B64));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("upstreams.ticketing.tls.ca-file"));
}

/// Answers from a TLS upstream are read by Pingora's own client, with no
/// watched socket in between: a chunked body that is not one is logged in
/// the words a plain upstream's gets, with the rule as its reason.
#[test]
fn a_tls_upstreams_broken_chunked_body_is_logged_as_one() {
    let dir = tempfile::tempdir().unwrap();
    tls::ca_and_server(dir.path(), "tickets.internal");
    let files = dir.path().join("api/v1/follow-up");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(
        files.join("broken"),
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnope\r\n",
    )
    .unwrap();
    let server = TlsServer::start_as(dir.path(), "-HTTP");
    let redis = Redis::start();
    let port = server.port;
    let wg = TestConfig::on_free_ports(&redis.url(), port)
        .set(
            "upstreams.ticketing.tls",
            &format!(
                "{{sni: tickets.internal, ca-file: '{}'}}",
                dir.path().join("ca.pem").display()
            ),
        )
        .log("{format: json}")
        .start_env(&[("RUST_LOG", "")]);
    let token = admitted_token(&wg, &redis, "fan_4");
    let mut c = std::net::TcpStream::connect(wg.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(
        &mut c,
        format!(
            "GET /api/v1/follow-up/broken HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {token}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut c, &mut got);
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    let failed = || {
        wg.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["message"] == "request failed")
    };
    let line = poll_for(Duration::from_secs(5), failed)
        .unwrap_or_else(|| panic!("no failure line:\n{}", wg.log()));
    assert_eq!(
        line["error"], "the response body's framing was refused",
        "{line}"
    );
    assert_eq!(line["reason"], "the chunked body's framing", "{line}");
    assert_eq!(line["status"], 200, "{line}");
}
