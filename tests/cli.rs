//! The command line and the shipped configuration files.

mod common;

use std::path::Path;

use common::*;

fn conf_files() -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("conf"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}

/// Golden test: every shipped config passes `-t`.
#[test]
fn every_shipped_config_is_valid() {
    let files = conf_files();
    assert!(!files.is_empty());
    for file in files {
        let out = run_binary(&["-c", file.to_str().unwrap(), "-t"], Some(SECRET_B64));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("OK"), "{stdout}");
    }
}

/// Golden test: the example config holds the documented defaults.
#[test]
fn example_config_holds_the_documented_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/waitgate.yaml");
    let c = waitgate::config::Config::load(&path).unwrap();
    let q = &c.queues["baseball"];
    assert_eq!(q.heartbeat.timeout.as_millis(), 30_000);
    assert_eq!(q.heartbeat.cleanup_interval.as_millis(), 10_000);
    assert_eq!(q.heartbeat.cleanup_batch_size, 500);
    assert_eq!(q.admission.interval.as_millis(), 3_000);
    assert_eq!(q.admission.batch_size, 100);
    assert_eq!(q.admission.active_ttl.as_millis(), 600_000);
    assert_eq!(c.jwt.ttl.as_millis(), 600_000);
    assert_eq!(c.routes[0].prefix, "/api/v1/follow-up");
}

/// A PEM file whose certificate section is cut short: it only looks like
/// one.
fn write_cut_pem(path: &std::path::Path) {
    std::fs::write(path, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
}

/// Asserts that `waitgate -t` passes `config` (with the test secret).
/// The binary run on `config` (written to a file of its own), with `args`
/// after `-c <file>`.
fn run_on(config: &str, args: &[&str], secret: Option<&str>) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, config).unwrap();
    let mut all = vec!["-c", path.to_str().unwrap()];
    all.extend_from_slice(args);
    run_binary(&all, secret)
}

fn check_passes(config: &str) {
    let out = run_on(config, &["-t"], Some(SECRET_B64));
    assert!(out.status.success(), "{out:?}");
}

fn check_fails(config: &str, secret: Option<&str>) -> String {
    let out = run_on(config, &["-t"], secret);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
    stderr
}

const GOOD: &str =
    "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues: {q: {}}\nupstreams: {}\nroutes: []\n";

#[test]
fn a_bad_config_is_one_line_naming_the_key() {
    let e = check_fails(&format!("{GOOD}treads: 3\n"), Some(SECRET_B64));
    assert!(e.contains("treads"), "{e}");
    let e = check_fails(
        "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues: {q: {admission: {batch-size: 0}}}\nupstreams: {}\nroutes: []\n",
        Some(SECRET_B64),
    );
    assert!(e.contains("queues.q.admission.batch-size"), "{e}");
    let e = check_fails("queues: [", Some(SECRET_B64));
    assert!(e.starts_with("waitgate: "), "{e}");
}

#[test]
fn the_check_resolves_upstream_names_and_refuses_shadowed_routes() {
    let base = "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues: {q: {}}\n";
    for (config, named) in [
        // `.invalid` never resolves (RFC 6761).
        (
            format!("{base}upstreams: {{up: {{address: 'no-such-host.invalid:80'}}}}\nroutes: [{{prefix: /x, upstream: up, queue: q}}]\n"),
            ["upstreams.up: cannot resolve", "no-such-host.invalid"],
        ),
        (
            format!("{base}upstreams: {{up: {{address: 'localhost:80'}}}}\nroutes: [{{prefix: /api, upstream: up, queue: q}}, {{prefix: /api/v2, upstream: up, queue: q}}]\n"),
            ["routes[1].prefix", "shadowed"],
        ),
    ] {
        let e = check_fails(&config, Some(SECRET_B64));
        assert!(named.iter().all(|n| e.contains(n)), "{e}");
    }
}

#[test]
fn a_missing_short_or_garbled_secret_stops_start_up() {
    let e = check_fails(GOOD, None);
    assert!(e.contains("JWT_SECRET"), "{e}");
    let e = check_fails(GOOD, Some("c2hvcnQ=")); // "short"
    assert!(e.contains("JWT_SECRET") && e.contains("32"), "{e}");
    let e = check_fails(GOOD, Some("***not base64***"));
    assert!(e.contains("JWT_SECRET") && e.contains("Base64"), "{e}");
    // The secret is never echoed.
    assert!(!e.contains("***not"), "{e}");

    // Without -t the server refuses to start the same way.
    let out = run_on(GOOD, &[], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("JWT_SECRET"));
}

#[test]
fn a_port_in_use_is_one_line_naming_the_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let config = format!(
        "listen: 127.0.0.1:{port}\nadmin-listen: 127.0.0.1:{}\n{GOOD}",
        free_port()
    );
    let out = run_on(&config, &[], Some(SECRET_B64));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("listen") && stderr.contains(&port.to_string()),
        "{stderr}"
    );
}

#[test]
fn sigterm_drains_in_flight_requests_then_exits_quickly() {
    let redis = Redis::start();
    let mut wg = TestConfig::on_free_ports(&redis.url(), free_port()).start();
    assert_eq!(register(wg.addr, "a").status, 200);

    // A request in flight: headers sent, body still to come.
    use std::io::Write;
    let mut slow = std::net::TcpStream::connect(wg.addr).unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let body = br#"{"userId":"late"}"#;
    write!(
        slow,
        "POST /api/v1/queue/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));

    let start = std::time::Instant::now();
    wg.signal("TERM");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(wg.is_running(), "exited with a request in flight");
    // New connections are refused while draining.
    assert!(std::net::TcpStream::connect(wg.addr).is_err());
    // The in-flight request completes.
    slow.write_all(body).unwrap();
    let r = read_response(&mut std::io::BufReader::new(slow)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["userId"], "late");
    // Its connection ends with it: the reply says so.
    assert_eq!(r.header("Connection"), Some("close"), "{r:?}");
    // Then the process exits well within the 3 s grace period.
    let status = wg
        .wait_exit(std::time::Duration::from_secs(3))
        .expect("exits within the grace period");
    assert!(status.success(), "{status}");
    println!("exited {:?} after SIGTERM", start.elapsed());
}

/// Golden test: every metric the shipped Grafana dashboard uses is one
/// waitgate exports.
#[test]
fn the_dashboard_uses_only_exported_metrics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/monitoring");
    let config = waitgate::config::Config::from_yaml(GOOD).unwrap();
    let metrics = waitgate::metrics::Metrics::new(&config);
    // Request series appear with the first request, an upstream's with
    // the first request sent to it and its first health reading.
    metrics.observe_request("register", 200, 0.001);
    let address: std::net::SocketAddr = "127.0.0.1:9000".parse().unwrap();
    metrics.upstreams.observe("ticketing", address, 200, 0.001);
    metrics
        .upstreams
        .set_health([("ticketing".to_string(), address, true)]);
    let exported = String::from_utf8(metrics.encode()).unwrap();
    for file in ["grafana-dashboard.json"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        if file.ends_with(".json") {
            serde_json::from_str::<serde_json::Value>(&text).expect("valid JSON");
        }
        let mut used = 0;
        for name in metric_names_in(&text) {
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                exported.contains(&format!("# TYPE {family} ")),
                "{file} uses {name}, which is not exported"
            );
            used += 1;
        }
        assert!(used > 0, "{file} uses no metric");
    }
}

/// `-t` refuses an admin token that start-up would refuse, with the same
/// one line.
#[test]
fn the_check_refuses_an_admin_token_start_up_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, GOOD).unwrap();
    for token in ["short", "has a space in it, and is long enough"] {
        let out = std::process::Command::new(binary())
            .args(["-c", path.to_str().unwrap(), "-t"])
            .env("JWT_SECRET", SECRET_B64)
            .env("WAITGATE_ADMIN_TOKEN", token)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{token:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("WAITGATE_ADMIN_TOKEN"), "{stderr}");
    }
    let out = std::process::Command::new(binary())
        .args(["-c", path.to_str().unwrap(), "-t"])
        .env("JWT_SECRET", SECRET_B64)
        .env("WAITGATE_ADMIN_TOKEN", "a-token-long-enough-0123")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// A TLS listener's certificate and key are loaded and matched by the
/// check, as the listener will load them: a key of another certificate, or
/// a file that only looks like PEM, is one line naming the key (the check
/// said OK, and the listener's thread panicked at start while the health
/// checks answered 200).
#[test]
fn the_check_refuses_a_tls_key_that_does_not_fit_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    tls::ca(d);
    tls::signed(d, "one", "localhost", "subjectAltName=DNS:localhost\n");
    tls::signed(d, "two", "localhost", "subjectAltName=DNS:localhost\n");
    write_cut_pem(&d.join("junk.pem"));
    let with = |cert: &str, key: &str| {
        format!(
            "{GOOD}listen-tls: {{address: '127.0.0.1:1', cert-file: '{}', key-file: '{}'}}\n",
            d.join(cert).display(),
            d.join(key).display()
        )
    };
    let e = check_fails(&with("one.pem", "two.key"), Some(SECRET_B64));
    assert!(e.contains("listen-tls.key-file"), "{e}");
    let e = check_fails(&with("junk.pem", "one.key"), Some(SECRET_B64));
    assert!(e.contains("listen-tls"), "{e}");
    let e = check_fails(&with("one.pem", "junk.pem"), Some(SECRET_B64));
    assert!(e.contains("listen-tls"), "{e}");
    // The pair that fits passes.
    check_passes(&with("one.pem", "one.key"));
}

/// `redis.tls`'s files are read by the check as the Redis client reads them
/// when it connects: a CA or certificate file with no certificate, a
/// broken PEM section, or a key file with no key is one line naming the
/// key, not an OK that fails every connection later.
#[test]
fn the_check_reads_the_redis_tls_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    tls::ca(d);
    tls::signed(d, "client", "waitgate", "extendedKeyUsage=clientAuth\n");
    write_cut_pem(&d.join("cut.pem"));
    std::fs::write(d.join("text.pem"), "not a certificate\n").unwrap();
    let with = |ca: &str, cert: &str, key: &str| {
        format!(
            "redis: {{url: 'rediss://127.0.0.1:1/0', tls: {{ca-file: '{}', cert-file: '{}', key-file: '{}'}}}}\nqueues: {{q: {{}}}}\nupstreams: {{}}\nroutes: []\n",
            d.join(ca).display(),
            d.join(cert).display(),
            d.join(key).display()
        )
    };
    for (config, key) in [
        (
            with("text.pem", "client.pem", "client.key"),
            "redis.tls.ca-file",
        ),
        (
            with("cut.pem", "client.pem", "client.key"),
            "redis.tls.ca-file",
        ),
        (
            with("ca.pem", "text.pem", "client.key"),
            "redis.tls.cert-file",
        ),
        (
            with("ca.pem", "client.pem", "client.pem"),
            "redis.tls.key-file",
        ),
    ] {
        let e = check_fails(&config, Some(SECRET_B64));
        assert!(e.contains(key), "{e}");
        assert!(!e.contains("[45, "), "the parser's bytes: {e}");
    }
    check_passes(&with("ca.pem", "client.pem", "client.key"));
}

/// A reply written once a drain has begun ends its connection: it says
/// `Connection: close`, on both paths, though the request came while the
/// connection could still be kept. (It said keep-alive and the connection
/// closed under the client's next request: a 502 at a load balancer that
/// pools its connections, on every rolling restart.)
#[test]
fn replies_written_while_draining_say_connection_close() {
    use std::time::Duration;
    let redis = Redis::start();
    let upstream = Upstream::start();
    let mut wg = TestConfig::on_free_ports(&redis.url(), upstream.port).start();
    let token = admitted_token(&wg, &redis, "drained");
    *upstream.delay.lock().unwrap() = Duration::from_millis(700);
    // In flight when the drain begins: a plain GET (the direct lane, when
    // it is on), a length-framed POST (the direct lane too) and a chunked
    // POST (the Pingora proxy), all waiting on the upstream.
    let mut clients: Vec<Client> = Vec::new();
    for request in [
        format!(
            "GET /api/v1/follow-up/a HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\r\n"
        ),
        format!(
            "POST /api/v1/follow-up/b HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\
             Content-Length: 2\r\n\r\nhi"
        ),
        format!(
            "POST /api/v1/follow-up/c HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\
             Transfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
        ),
    ] {
        let mut c = Client::connect(wg.addr);
        c.send(&request);
        clients.push(c);
    }
    std::thread::sleep(Duration::from_millis(200));
    wg.signal("TERM");
    for (i, c) in clients.iter_mut().enumerate() {
        let (head, _) = c.response();
        assert_eq!(head.status, 200, "{i}: {head:?}");
        assert_eq!(head.header("Connection"), Some("close"), "{i}: {head:?}");
    }
    let status = wg
        .wait_exit(Duration::from_secs(3))
        .expect("exits within the grace period");
    assert!(status.success(), "{status}");
}

/// A queue or an upstream named twice is refused, naming it: YAML took the
/// last of the two, and an edit to the first changed nothing.
#[test]
fn a_queue_or_upstream_named_twice_is_refused() {
    for (config, named) in [
        (
            "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues:\n  soccer: {admission: {batch-size: 7}}\n  soccer: {admission: {batch-size: 9}}\nupstreams: {}\nroutes: []\n",
            ["queues", "duplicate name `soccer`"],
        ),
        (
            "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues: {q: {}}\nupstreams:\n  t: {address: '127.0.0.1:1'}\n  t: {address: '127.0.0.1:2'}\nroutes: []\n",
            ["upstreams", "duplicate name `t`"],
        ),
    ] {
        let e = check_fails(config, Some(SECRET_B64));
        assert!(named.iter().all(|n| e.contains(n)), "{e}");
    }
}

/// `-t` refuses a receipt key that is neither PKCS#8 PEM nor a 32-byte
/// seed in Base64, naming the variable; either form passes.
#[test]
fn the_check_refuses_a_receipt_key_start_up_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let check = |name: &str, key: &str| {
        std::process::Command::new(binary())
            .args(["-c", path.to_str().unwrap(), "-t"])
            .env("JWT_SECRET", SECRET_B64)
            .env(name, key)
            .output()
            .unwrap()
    };
    let pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIBERERERERERERERERERERERERERERERERERERERERER\n-----END PRIVATE KEY-----\n";
    for (name, key) in [
        ("WAITGATE_RECEIPT_KEY", "not-a-key"),
        ("WAITGATE_RECEIPT_KEY", "c2hvcnQ="),
        ("WAITGATE_RECEIPT_KEY_PREVIOUS", "not-a-key"),
    ] {
        let out = check(name, key);
        assert_eq!(out.status.code(), Some(1), "{name}={key}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(name), "{stderr}");
    }
    let seed = "ERERERERERERERERERERERERERERERERERERERERERE=";
    for key in [seed, pem] {
        let out = check("WAITGATE_RECEIPT_KEY", key);
        assert!(out.status.success(), "{key}: {out:?}");
    }
}
