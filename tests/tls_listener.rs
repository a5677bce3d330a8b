//! The TLS listener (`listen-tls`): HTTP/2 and HTTP/1.1 by ALPN, with the
//! edge rules unchanged, checked with a real HTTP/2 client (`curl --http2`)
//! against a certificate made in the test.
//!
//! The subset of the edge rules that means something over HTTP/2: the
//! queue API, the token check (missing, bad, good), path safety, the
//! identity headers (a client's own, in any spelling, never reach the
//! upstream), and the forwarded headers (`X-Forwarded-Proto: https`).
//! HTTP/1.1 framing attacks (CL+TE, pipelining, bare LF) have no HTTP/2
//! form: HTTP/2 frames every message itself.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// A CA and a certificate for 127.0.0.1 that it signs.
fn certificate(dir: &Path) {
    tls::ca(dir);
    tls::signed(
        dir,
        "server",
        "localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    );
}

struct Answer {
    status: u16,
    version: String,
    body: String,
}

/// One request with curl, over TLS to `port`, as `http` (`--http2` or
/// `--http1.1`).
fn curl(
    dir: &Path,
    port: u16,
    http: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: Option<&str>,
) -> Answer {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", http, "--cacert"])
        .arg(dir.join("ca.pem"))
        .args(["-X", method, "-w", "\n%{http_code} %{http_version}"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    if let Some(body) = body {
        cmd.args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ]);
    }
    cmd.arg(format!("https://127.0.0.1:{port}{path}"));
    let out = cmd.output().expect("curl is installed");
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, last) = text.rsplit_once('\n').unwrap();
    let (status, version) = last.split_once(' ').unwrap();
    Answer {
        status: status.parse().unwrap(),
        version: version.to_string(),
        body: body.to_string(),
    }
}

#[test]
fn the_tls_listener_speaks_http2_and_keeps_every_edge_rule() {
    let dir = tempfile::tempdir().unwrap();
    certificate(dir.path());
    let redis = Redis::start();
    let upstream = Upstream::start();
    let ports = Ports::new();
    let tls_port = free_port();
    let config = format!(
        "{}listen-tls:\n  address: 127.0.0.1:{tls_port}\n  cert-file: {}\n  key-file: {}\n",
        config(&redis.url(), &ports, upstream.port),
        dir.path().join("server.pem").display(),
        dir.path().join("server.key").display()
    );
    let wg = Waitgate::start(&config, &ports);
    let d = dir.path();

    // The queue API over HTTP/2.
    let r = curl(
        d,
        tls_port,
        "--http2",
        "POST",
        "/api/v1/queue/register",
        &[],
        Some(r#"{"userId":"h2_fan"}"#),
    );
    assert_eq!((r.status, r.version.as_str()), (200, "2"), "{}", r.body);
    assert!(r.body.contains("\"queueCredential\""), "{}", r.body);
    let r = curl(
        d,
        tls_port,
        "--http2",
        "GET",
        "/api/v1/queue/rank?userId=nobody",
        &[],
        None,
    );
    assert_eq!(r.status, 404);
    assert!(r.body.contains("user_not_queued"));
    // HTTP/2 has no Host field: this site's Origin is read against the
    // :authority, so a browser of this site may register without a userId
    // (the same-site rule), and another site may not.
    let own = format!("Origin: https://127.0.0.1:{tls_port}");
    for (origin, status) in [(own.as_str(), 200), ("Origin: https://evil.example", 403)] {
        let r = curl(
            d,
            tls_port,
            "--http2",
            "POST",
            "/api/v1/queue/register",
            &[origin],
            Some("{}"),
        );
        assert_eq!(
            (r.status, r.version.as_str()),
            (status, "2"),
            "{origin}: {}",
            r.body
        );
    }

    // The token check.
    let r = curl(
        d,
        tls_port,
        "--http2",
        "GET",
        "/api/v1/follow-up/seat",
        &[],
        None,
    );
    assert_eq!((r.status, r.version.as_str()), (401, "2"));
    assert!(r.body.contains("invalid_token"));
    let r = curl(
        d,
        tls_port,
        "--http2",
        "GET",
        "/api/v1/follow-up/seat",
        &["Authorization: Bearer not.a.token"],
        None,
    );
    assert_eq!(r.status, 401);
    let token = admitted_token(&wg, &redis, "h2_user");
    let auth = format!("Authorization: Bearer {token}");
    let r = curl(
        d,
        tls_port,
        "--http2",
        "GET",
        "/api/v1/follow-up/seat",
        &[
            &auth,
            "X-Waitgate-User: mallory",
            "x_waitgate_user: mallory",
            "X-Forwarded-Proto: gopher",
        ],
        None,
    );
    assert_eq!((r.status, r.version.as_str()), (200, "2"), "{}", r.body);
    let seen = upstream.seen().pop().unwrap();
    assert_eq!(seen.target, "/api/v1/follow-up/seat");
    assert_eq!(seen.headers_named("x-waitgate-user"), ["h2_user"]);
    assert!(seen.header("x_waitgate_user").is_none());
    assert_eq!(seen.headers_named("x-forwarded-proto"), ["https"]);

    // Path safety.
    let r = curl(
        d,
        tls_port,
        "--http2",
        "GET",
        "/api/v1/follow-up/%2e%2e/admin",
        &[&auth],
        None,
    );
    assert_eq!(r.status, 400);
    assert!(r.body.contains("bad_path"), "{}", r.body);
    let r = curl(d, tls_port, "--http2", "GET", "/admin", &[&auth], None);
    assert_eq!(r.status, 404);

    // HTTP/1.1 over the same listener, and the plain listener, still work.
    let r = curl(
        d,
        tls_port,
        "--http1.1",
        "GET",
        "/api/v1/follow-up/seat",
        &[&auth],
        None,
    );
    assert_eq!((r.status, r.version.as_str()), (200, "1.1"));
    assert_eq!(rank(wg.addr, "h2_fan").status, 200);
}
