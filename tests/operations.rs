//! What an operator relies on, against real processes: readiness behind a
//! real load balancer while Redis is down, key rotation across restarts,
//! the access log from both HTTP paths, rate-limited outage warnings, and
//! the Redis and process metrics.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn protected(addr: SocketAddr, token: &str) -> Response {
    with_token(addr, "GET", "/api/v1/follow-up/seat", token, None)
}

/// A protected POST with `token` and a chunked body: always Pingora's
/// proxy, where a GET (or a length-framed POST) may take the direct lane.
fn protected_post(addr: SocketAddr, target: &str, token: &str) -> Response {
    let auth = bearer(token);
    request_chunked(addr, "POST", target, &[("Authorization", &auth)], b"{}").unwrap()
}

/// A haproxy in front of `backends`, health-checking each one's
/// `/readyz` on its admin port every 100 ms (down after 2 failures).
struct Haproxy {
    addr: SocketAddr,
    _process: ChildGuard,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(backends: &[&Waitgate]) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, wg)| {
                format!(
                    "    server wg{i} {} check port {} inter 100ms fall 2 rise 1\n",
                    wg.addr,
                    wg.admin.port()
                )
            })
            .collect();
        let config = format!(
            "global\n    maxconn 1000\n\
             defaults\n    mode http\n    timeout connect 1s\n    timeout client 10s\n    timeout server 10s\n\
             frontend public\n    bind 127.0.0.1:{port}\n    default_backend waitgate\n\
             backend waitgate\n    balance roundrobin\n    option httpchk GET /readyz\n    http-check expect status 200\n{servers}"
        );
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let process = ChildGuard::spawn_on_port(
            "haproxy (apt-get install haproxy)",
            Command::new("haproxy").arg("-f").arg(&path).arg("-db"),
            port,
        );
        Haproxy {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            _process: process,
            _dir: dir,
        }
    }
}

#[test]
fn admitted_users_keep_getting_through_a_load_balancer_while_redis_is_down() {
    let mut redis = Redis::start();
    let upstream = Upstream::start();
    let (p1, p2) = (Ports::new(), Ports::new());
    let wg1 = Waitgate::start(&config(&redis.url(), &p1, upstream.port), &p1);
    let wg2 = Waitgate::start(&config(&redis.url(), &p2, upstream.port), &p2);
    let token = admitted_token(&wg1, &redis, "fan_1");
    let lb = Haproxy::start(&[&wg1, &wg2]);
    // Both backends are checked up before the outage.
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..10 {
        assert_eq!(protected(lb.addr, &token).status, 200);
    }

    redis.kill();
    // Many health-check rounds: a backend that failed its check would be
    // out by now.
    std::thread::sleep(Duration::from_millis(1500));
    let mut statuses = std::collections::BTreeMap::new();
    for _ in 0..100 {
        *statuses
            .entry(protected(lb.addr, &token).status)
            .or_insert(0) += 1;
    }
    assert_eq!(
        statuses.get(&200),
        Some(&100),
        "through the load balancer: {statuses:?}"
    );

    // Readiness stays up; Redis health says what it is.
    for wg in [&wg1, &wg2] {
        let ready = get(wg.admin, "/readyz").unwrap();
        assert_eq!(ready.status, 200);
        assert_eq!(ready.json()["redis"], "down");
        let health = get(wg.admin, "/healthz/redis").unwrap();
        assert_eq!(health.status, 503);
        assert_eq!(health.error_code(), "redis_unavailable");
        let metrics = get(wg.admin, "/metrics").unwrap().text();
        assert!(metrics.contains("\nwaitgate_redis_up 0\n"), "{metrics}");
    }
    // The queue API itself answers 503 through the balancer, fast.
    let started = Instant::now();
    let r = get(lb.addr, "/api/v1/queue/rank?userId=fan_1").unwrap();
    assert_eq!(r.status, 503);
    assert!(started.elapsed() < Duration::from_secs(2));

    redis.restart();
    wg1.wait_for_metrics("\nwaitgate_redis_up 1\n", Duration::from_secs(5));
    assert_eq!(get(wg1.admin, "/healthz/redis").unwrap().status, 200);
}

#[test]
fn the_redis_build_and_process_metrics_are_exported() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port).start();
    // The probe runs every second.
    let text = wg.wait_for_metrics("\nwaitgate_redis_up 1\n", Duration::from_secs(5));
    let version = env!("CARGO_PKG_VERSION");
    for line in [
        format!("waitgate_build_info{{version=\"{version}\"}} 1"),
        "process_open_fds ".to_string(),
        "process_resident_memory_bytes ".to_string(),
        "process_cpu_seconds_total ".to_string(),
        "process_start_time_seconds ".to_string(),
    ] {
        assert!(text.contains(&line), "missing {line}");
    }
    // A refusal at the edge counts under the route that refused it.
    let r = with_token(wg.addr, "GET", "/api/v1/follow-up/seat", "nope", None);
    assert_eq!(r.status, 401);
    // The request is counted once its reply is written: a scrape may come
    // a moment before.
    let counted = "waitgate_http_requests_total{route=\"/api/v1/follow-up\",status=\"401\"} 1";
    wg.wait_for_metrics(counted, Duration::from_secs(2));
}

/// User plus system CPU seconds of `pid`, from `/proc` (ticks of 1/100 s,
/// `getconf CLK_TCK` on every common Linux build).
fn cpu_seconds_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 1..];
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse().unwrap())
        .collect();
    (fields[0] + fields[1]) as f64 / 100.0
}

#[test]
fn process_cpu_seconds_keep_their_fraction() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port).start();
    let scrape = || {
        let text = get(wg.admin, "/metrics").unwrap().text();
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter"),
            "{text}"
        );
        text.lines()
            .find_map(|l| l.strip_prefix("process_cpu_seconds_total "))
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    // A scrape between two readings of /proc within one whole second, the
    // first not on a whole second: a value cut to whole seconds falls
    // below the first reading.
    for _ in 0..50 {
        let before = cpu_seconds_of(wg.pid());
        let reported = scrape();
        let after = cpu_seconds_of(wg.pid());
        if before.fract() > 0.0 && before.floor() == after.floor() {
            assert!(
                before - 0.001 <= reported && reported <= after + 0.001,
                "{before} <= {reported} <= {after}"
            );
            return;
        }
        // Spend some CPU in waitgate and try again.
        for _ in 0..20 {
            get(wg.addr, "/api/v1/queue/rank?userId=nobody").unwrap();
        }
    }
    panic!("no reading of /proc fell inside a second");
}

/// The JSON access lines of a log.
fn access_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "waitgate::access")
        .collect()
}

/// The access lines of `wg`'s log once there are `n` (or after 3 s, what
/// there is).
fn access_lines_at_least(wg: &Waitgate, n: usize) -> Vec<serde_json::Value> {
    let mut lines = Vec::new();
    eventually(Duration::from_secs(3), || {
        lines = access_lines(&wg.log());
        lines.len() >= n
    });
    lines
}

/// waitgate logging JSON with the config's own filter, as in production;
/// `extra` is more top-level keys (YAML), `log` among them if it takes the
/// place of `{format: json}`.
fn start_json_logged(redis: &Redis, upstream: &Upstream, extra: &str) -> Waitgate {
    let ports = Ports::new();
    let config = TestConfig::new(&redis.url(), &ports, upstream.port)
        .log("{format: json}")
        .with(extra)
        .yaml();
    Waitgate::start_env(&config, &ports, &[("RUST_LOG", "")])
}

/// Behind a trusted load balancer the access log names the client it saw
/// (the last `X-Forwarded-For` address) and the balancer as `peer`, on
/// both paths; an address that is not one leaves the peer as the client.
#[test]
fn behind_a_trusted_proxy_the_access_log_names_the_client_it_saw() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let wg = start_json_logged(&redis, &upstream, "trusted-proxies: [127.0.0.1]\n");
    let token = admitted_token(&wg, &redis, "fan_7");
    let auth = bearer(&token);
    let xff = ("X-Forwarded-For", "203.0.113.9, 198.51.100.4");
    let send = |method: &str, path: &str, headers: &[(&str, &str)]| {
        let mut all = headers.to_vec();
        if method == "POST" {
            all.push(("Content-Type", "application/json"));
            return request_chunked(wg.addr, method, path, &all, b"{}")
                .unwrap()
                .status;
        }
        request(wg.addr, method, path, &all, None).unwrap().status
    };
    // A plain GET (the direct lane when it is on), a chunked POST (always
    // Pingora's proxy), a rank poll, then a GET with a forwarded value that
    // is no address, and one with none.
    assert_eq!(
        send(
            "GET",
            "/api/v1/follow-up/a",
            &[("Authorization", &auth), xff]
        ),
        200
    );
    assert_eq!(
        send(
            "POST",
            "/api/v1/follow-up/b",
            &[("Authorization", &auth), xff]
        ),
        200
    );
    assert_eq!(send("GET", "/api/v1/queue/rank?userId=fan_7", &[xff]), 200);
    let junk = ("X-Forwarded-For", "unknown");
    assert_eq!(
        send(
            "GET",
            "/api/v1/follow-up/c",
            &[("Authorization", &auth), junk]
        ),
        200
    );
    assert_eq!(
        send("GET", "/api/v1/follow-up/d", &[("Authorization", &auth)]),
        200
    );
    let lines = access_lines_at_least(&wg, 7);
    let line = |path: &str| {
        lines
            .iter()
            .find(|l| l["path"] == path)
            .unwrap_or_else(|| panic!("no line for {path}: {lines:#?}"))
    };
    for path in [
        "/api/v1/follow-up/a",
        "/api/v1/follow-up/b",
        "/api/v1/queue/rank",
    ] {
        assert_eq!(line(path)["client"], "198.51.100.4", "{}", line(path));
        assert_eq!(line(path)["peer"], "127.0.0.1", "{}", line(path));
    }
    for path in ["/api/v1/follow-up/c", "/api/v1/follow-up/d"] {
        assert_eq!(line(path)["client"], "127.0.0.1", "{}", line(path));
        assert!(line(path)["peer"].is_null(), "{}", line(path));
    }
}

#[test]
fn the_access_log_has_one_line_per_request_with_its_fields_from_both_paths() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let wg = start_json_logged(&redis, &upstream, "");
    let token = admitted_token(&wg, &redis, "fan_7");
    // A plain GET (the direct lane when it is on) and a chunked POST
    // (always Pingora's proxy).
    assert_eq!(protected(wg.addr, &token).status, 200);
    let post = protected_post(wg.addr, "/api/v1/follow-up/seat?secret=1", &token);
    assert_eq!(post.status, 200);
    // A rank poll (the direct lane's too when it is on), and refusals of
    // calls that named their user: a rank and a dropout of nobody.
    assert_eq!(
        get(wg.addr, "/api/v1/queue/rank?userId=fan_7")
            .unwrap()
            .status,
        200
    );
    assert_eq!(
        get(wg.addr, "/api/v1/queue/rank?userId=nobody_8")
            .unwrap()
            .status,
        404
    );
    let dropout = dropout(wg.addr, "nobody_9", "not-a-credential");
    assert!(dropout.status >= 400, "{dropout:?}");
    let lines = access_lines_at_least(&wg, 7);
    // register, token, GET, POST (the admission was by hand).
    let forwarded: Vec<_> = lines
        .iter()
        .filter(|l| l["route"] == "/api/v1/follow-up")
        .collect();
    assert_eq!(forwarded.len(), 2, "{lines:#?}");
    for (line, method) in forwarded.iter().zip(["GET", "POST"]) {
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["method"], method);
        assert_eq!(line["path"], "/api/v1/follow-up/seat", "no query: {line}");
        assert_eq!(line["status"], 200);
        assert_eq!(line["client"], "127.0.0.1");
        assert!(line["peer"].is_null(), "no proxy in between: {line}");
        assert_eq!(line["queue"], "baseball");
        assert_eq!(line["user"], "fan_7");
        assert!(line["duration_ms"].as_f64().is_some(), "{line}");
        assert!(line["timestamp"].as_str().is_some(), "{line}");
        assert_eq!(line["request_id"].as_str().unwrap().len(), 32, "{line}");
    }
    // Queue API calls name the queue and the user they were for.
    let register = lines.iter().find(|l| l["route"] == "register").unwrap();
    assert_eq!(register["method"], "POST");
    assert_eq!(register["status"], 200);
    for route in ["register", "token", "rank"] {
        let line = lines.iter().find(|l| l["route"] == route);
        let line = line.unwrap_or_else(|| panic!("no {route} line: {lines:#?}"));
        assert_eq!(line["queue"], "baseball", "{line}");
        assert_eq!(line["user"], "fan_7", "{line}");
    }
    for (route, user, status) in [("rank", "nobody_8", 404), ("dropout", "nobody_9", 0)] {
        let line = lines
            .iter()
            .find(|l| l["route"] == route && l["user"] == user);
        let line = line.unwrap_or_else(|| panic!("no {route} line for {user}: {lines:#?}"));
        assert_eq!(line["queue"], "baseball", "{line}");
        if status > 0 {
            assert_eq!(line["status"], status, "{line}");
        }
    }
    // The line as written, for the docs.
    let log = wg.log();
    let raw = log
        .lines()
        .find(|l| l.contains("waitgate::access") && l.contains("\"GET\""))
        .unwrap();
    println!("{raw}");

    // log.access: false turns the lines off.
    let wg = start_json_logged(&redis, &upstream, "log: {format: json, access: false}");
    assert_eq!(
        get(wg.addr, "/api/v1/queue/rank?userId=nobody")
            .unwrap()
            .status,
        404
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(access_lines(&wg.log()).is_empty(), "{}", wg.log());
}

/// The user a page load's queue cookie names (`credential.rank.user`), and
/// the cookie as a browser sends it back.
fn page_visitor(r: &Response) -> (String, String) {
    let set = r
        .headers
        .iter()
        .find(|(n, v)| n.eq_ignore_ascii_case("set-cookie") && v.starts_with("waitgate-queue-"))
        .map(|(_, v)| v.split(';').next().unwrap().to_string())
        .unwrap_or_else(|| panic!("no queue cookie: {r:?}"));
    let user = set
        .split_once('=')
        .unwrap()
        .1
        .splitn(3, '.')
        .nth(2)
        .unwrap();
    (user.to_string(), set)
}

#[test]
fn the_access_log_names_the_queue_and_user_of_a_waiting_room_page_load() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    for format in ["json", "text"] {
        let wg = TestConfig::on_free_ports(&redis.url(), upstream.port)
            .set("cookies", "{secure: false}")
            .log(&format!("{{format: {format}}}"))
            .start_env(&[("RUST_LOG", "")]);
        let page = "/waiting-room/baseball";
        let html = ("Accept", "text/html");
        // The first load mints the visitor; the second is a poll with its
        // cookie.
        let first = request(wg.addr, "GET", page, &[html], None).unwrap();
        assert_eq!(first.status, 200, "{first:?}");
        let (user, cookie) = page_visitor(&first);
        let again = request(wg.addr, "GET", page, &[html, ("Cookie", &cookie)], None).unwrap();
        assert_eq!(again.status, 200, "{again:?}");
        // A load another site's image tag makes names no user.
        let image = request(wg.addr, "GET", page, &[("Sec-Fetch-Dest", "image")], None).unwrap();
        assert_eq!(image.status, 403);
        wg.wait_for_log("waiting_room", 3);
        let log = wg.log();
        if format == "json" {
            let lines: Vec<_> = access_lines(&log)
                .into_iter()
                .filter(|l| l["route"] == "waiting_room")
                .collect();
            assert_eq!(lines.len(), 3, "{log}");
            for line in &lines[..2] {
                assert_eq!(line["path"], page);
                assert_eq!(line["status"], 200);
                assert_eq!(line["queue"], "baseball", "{line}");
                assert_eq!(line["user"], user.as_str(), "{line}");
            }
            assert_eq!(lines[2]["queue"], "baseball", "{}", lines[2]);
            assert!(lines[2].get("user").is_none(), "{}", lines[2]);
        } else {
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("waitgate::access") && l.contains("route=\"waiting_room\""))
                .collect();
            assert_eq!(lines.len(), 3, "{log}");
            for line in &lines[..2] {
                assert!(line.contains("queue=\"baseball\""), "{line}");
                assert!(line.contains(&format!("user=\"{user}\"")), "{line}");
            }
        }
    }
}

#[test]
fn a_redis_outage_is_one_warning_a_second_not_one_per_request() {
    let mut redis = Redis::start();
    let upstream = Upstream::start();
    let wg =
        TestConfig::on_free_ports(&redis.url(), upstream.port).start_env(&[("RUST_LOG", "warn")]);
    redis.kill();
    let failed = repeat_for(Duration::from_millis(1900), || {
        let r = get(wg.addr, "/api/v1/queue/rank?userId=someone").unwrap();
        assert_eq!(r.status, 503);
    });
    let warnings = few_lines(&wg, failed, 10, 3, |l| {
        l.contains("redis call failed") && l.contains("cause=\"rank\"")
    });
    // The lines account for the requests they stand for.
    let counted: u64 = warnings
        .iter()
        .filter_map(|l| l.split("count=").nth(1))
        .filter_map(|c| c.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert!(counted >= 1 && counted <= failed, "{counted} of {failed}");
}

/// The lines of `wg`'s log that `matches`, once the last is written, after
/// `failed` failing calls (at least `least`): one line a second, so at
/// least one and at most `most`, not one a failure.
fn few_lines(
    wg: &Waitgate,
    failed: u64,
    least: u64,
    most: usize,
    matches: impl Fn(&str) -> bool,
) -> Vec<String> {
    std::thread::sleep(Duration::from_millis(300));
    let log = wg.log();
    let lines: Vec<String> = log
        .lines()
        .filter(|l| matches(l))
        .map(String::from)
        .collect();
    assert!(failed >= least, "{failed}");
    assert!(
        (1..=most).contains(&lines.len()),
        "{failed} failures, {} lines:\n{log}",
        lines.len()
    );
    lines
}

/// A second fixed key, for rotation.
const OTHER_SECRET_B64: &str = "b3RoZXIta2V5LWZvci13YWl0Z2F0ZS1yb3RhdGlvbi10ZXN0cw==";

#[test]
fn a_rotated_key_keeps_old_tokens_and_credentials_until_it_is_removed() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let start = |env: &[(&str, &str)]| {
        TestConfig::on_free_ports(&redis.url(), upstream.port).start_env(env)
    };

    // Before: one key. A token and a waiting user's credential made with it.
    let old = start(&[]);
    let token = admitted_token(&old, &redis, "fan_1");
    let credential = register_new(old.addr, "fan_2");
    drop(old);

    // During the rotation: the new key, and the old one as previous.
    let rotating = start(&[
        ("JWT_SECRET", OTHER_SECRET_B64),
        ("JWT_SECRET_PREVIOUS", SECRET_B64),
    ]);
    assert_eq!(protected(rotating.addr, &token).status, 200);
    // The waiting user's credential still proves who they are.
    admit_by_hand(&mut redis.conn(), "fan_2", u64::MAX / 2_000_000);
    let exchange = |addr, credential: &str| {
        post_json(
            addr,
            "/api/v1/queue/active/token",
            &serde_json::json!({ "userId": "fan_2", "queueCredential": credential }).to_string(),
        )
        .unwrap()
    };
    let r = exchange(rotating.addr, &credential);
    assert_eq!(r.status, 200, "{r:?}");
    let new_token = r.json()["accessToken"].as_str().unwrap().to_string();
    assert_eq!(protected(rotating.addr, &new_token).status, 200);
    drop(rotating);

    // After: the previous key removed. What it made stops working; what the
    // new key made goes on.
    let rotated = start(&[("JWT_SECRET", OTHER_SECRET_B64)]);
    let r = protected(rotated.addr, &token);
    assert_eq!(r.status, 401);
    assert_eq!(r.error_code(), "invalid_token");
    assert_eq!(exchange(rotated.addr, &credential).status, 403);
    assert_eq!(protected(rotated.addr, &new_token).status, 200);

    // A previous key equal to the current one is refused at start.
    let out = run_binary(
        &["-c", rotated.config_path().to_str().unwrap(), "-t"],
        Some(SECRET_B64),
    );
    assert!(out.status.success());
    let mut cmd = Command::new(binary());
    let out = cmd
        .args(["-c", rotated.config_path().to_str().unwrap(), "-t"])
        .env("JWT_SECRET", SECRET_B64)
        .env("JWT_SECRET_PREVIOUS", SECRET_B64)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("JWT_SECRET_PREVIOUS"));
}

#[test]
fn an_upstream_failure_is_one_log_line() {
    let redis = Redis::start();
    // Nothing listens on the upstream's port.
    let dead = free_port();
    let wg = TestConfig::on_free_ports(&redis.url(), dead).start_env(&[("RUST_LOG", "")]);
    let token = admitted_token(&wg, &redis, "fan_9");
    let r = protected(wg.addr, &token);
    assert_eq!(r.status, 502);
    let id = r.header("x-request-id").unwrap().to_string();
    std::thread::sleep(Duration::from_millis(300));
    let log = wg.log();
    let about: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&id) || l.to_lowercase().contains("fail to proxy"))
        .collect();
    assert_eq!(about.len(), 1, "{log}");
    assert!(
        about[0].contains("request failed") && about[0].contains("WARN"),
        "{log}"
    );
}

/// With the access log off, an upstream that is down is at most a line a
/// second, with the count of failures it stands for: every request fails,
/// and a token holder could fill the log (19,353 lines in 3 s, measured).
#[test]
fn upstream_failures_without_the_access_log_are_a_line_a_second() {
    let redis = Redis::start();
    let dead = free_port();
    let wg = TestConfig::on_free_ports(&redis.url(), dead)
        .log("{access: false}")
        .start_env(&[("RUST_LOG", "")]);
    let token = admitted_token(&wg, &redis, "fan_9");
    let failed = repeat_for(Duration::from_millis(1500), || {
        assert_eq!(protected(wg.addr, &token).status, 502);
    });
    few_lines(&wg, failed, 50, 2, |l| l.contains("request failed"));
}

/// The admin listener ends a connection when the client asks it to (HTTP/1.0
/// without `keep-alive`, or `Connection: close`), as the proxy listener
/// does, and keeps an HTTP/1.1 one.
#[test]
fn the_admin_listener_closes_when_the_client_asks() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port).start();
    for request in [
        "GET /healthz HTTP/1.0\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    ] {
        let mut c = Client::connect(wg.admin);
        c.send(request);
        let (head, _) = c.response();
        assert_eq!(head.status, 200, "{request:?}");
        assert_eq!(head.header("connection"), Some("close"), "{request:?}");
        assert!(c.closed(), "{request:?}");
    }
    let mut c = Client::connect(wg.admin);
    for _ in 0..2 {
        c.send("GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(c.response().0.status, 200);
    }
}

/// Redis refusing every call (here: the scripts taken from the user waitgate
/// logs in as, as an ACL change or a rotated password does) is at most one
/// ERROR line a second per endpoint, with its count: it was one a request.
#[test]
fn redis_refusing_every_call_is_one_error_line_a_second() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let wg =
        TestConfig::on_free_ports(&redis.url(), upstream.port).start_env(&[("RUST_LOG", "warn")]);
    assert_eq!(rank(wg.addr, "someone").status, 404);
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-@scripting")
        .query(&mut redis.conn())
        .unwrap();
    let failed = repeat_for(Duration::from_millis(1500), || {
        assert_eq!(rank(wg.addr, "someone").status, 503);
    });
    let lines = few_lines(&wg, failed, 20, 2, |l| {
        l.contains("redis call failed") && l.contains("ERROR")
    });
    assert!(lines[0].contains("count="), "{}", lines[0]);
}

/// A request refused before either HTTP path reads it (a request line that
/// reads two ways, two `Host`s) is counted and logged as every other
/// request is: one access line with its request id, and in
/// `waitgate_http_requests_total`. (Neither saw it.)
#[test]
fn requests_refused_by_the_connection_loop_are_counted_and_logged() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port).start_env(&[("RUST_LOG", "")]);
    let counted = |wg: &Waitgate| {
        get(wg.admin, "/metrics")
            .unwrap()
            .text()
            .lines()
            .find_map(|l| {
                l.strip_prefix(r#"waitgate_http_requests_total{route="other",status="400"} "#)
            })
            .map_or(0.0, |v| v.parse::<f64>().unwrap())
    };
    let before = counted(&wg);
    let mut ids = Vec::new();
    for request in [
        "GET /api/v1/follow-up/a/..  HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /api/v1/follow-up/a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET /\x1b[31mred HTTP/1.1\r\nHost: t\r\n\r\n",
    ] {
        let r = raw(wg.addr, request.as_bytes()).unwrap();
        assert_eq!(r.status, 400, "{request:?}");
        ids.push(r.header("x-request-id").unwrap().to_string());
    }
    eventually(Duration::from_secs(1), || counted(&wg) - before >= 3.0);
    assert_eq!(counted(&wg) - before, 3.0);
    for id in &ids {
        wg.wait_for_log(id, 1);
    }
    let log = wg.log();
    for id in &ids {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(id.as_str())).collect();
        assert_eq!(lines.len(), 1, "{id}: {log}");
        assert!(lines[0].contains("status=400"), "{}", lines[0]);
    }
    // Nothing a client sent raw reaches the log.
    assert!(!log.contains('\x1b'), "{log:?}");
}

/// Pingora's crates log request and response heads at `debug` and `trace`,
/// with their Authorization and Cookie headers. A filter that asks for
/// `debug` (to see waitgate's own lines) must not write live tokens to the
/// log: Pingora stays at `info` unless the filter names it.
#[test]
fn a_debug_log_filter_writes_no_tokens() {
    let (_redis, _upstream, wg, token) = logging_by("debug", "fan_12");
    // Both paths: a GET (the direct lane when it is on) and a POST.
    assert_eq!(protected(wg.addr, &token).status, 200);
    assert_eq!(
        protected_post(wg.addr, "/api/v1/follow-up/seat", &token).status,
        200
    );
    wg.wait_for_log("waitgate::access", 2);
    let signature = token.rsplit('.').next().unwrap();
    let log = wg.log();
    assert!(!log.contains(signature), "a token in the log:\n{log}");

    // An operator who names Pingora gets its lines, heads and all.
    let reloaded = TestConfig::read(&wg.config_path()).set("log.filter", "'debug,pingora=debug'");
    wg.reload(reloaded.yaml());
    wg.wait_for_log("config reloaded", 1);
    assert_eq!(protected(wg.addr, &token).status, 200);
    assert_eq!(
        protected_post(wg.addr, "/api/v1/follow-up/seat", &token).status,
        200
    );
    wg.wait_for_log(signature, 1);
}

/// An upstream failure is logged in the same words whichever path served
/// the request: each broken answer below goes once to a GET (the direct
/// lane when it is on) and once to a chunked POST (always Pingora's proxy), and
/// both lines carry the same status and `error`. A client that leaves in
/// the middle of a body is no upstream failure on either path.
#[test]
fn an_upstream_failure_is_logged_alike_on_both_paths() {
    use common::scripted::{Scripted, Step};
    let head = |extra: &str| Step::Send(format!("HTTP/1.1 200 OK\r\n{extra}\r\n").into_bytes());
    let upstream = Scripted::start(move |r| match r.path() {
        "/api/v1/follow-up/closed" => vec![Step::Close],
        "/api/v1/follow-up/garbage" => vec![Step::Send(b"NOT HTTP AT ALL\r\n\r\n".to_vec())],
        "/api/v1/follow-up/lengths" => vec![Step::Send(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
        )],
        "/api/v1/follow-up/huge-head" => {
            let field = format!("X-Big: {}\r\n", "a".repeat(1_100_000));
            vec![head(&field), Step::Close]
        }
        "/api/v1/follow-up/slow" => vec![Step::Pause(Duration::from_millis(1500))],
        "/api/v1/follow-up/cut" => vec![
            head("Content-Length: 100\r\n"),
            Step::Send(b"ten bytes.".to_vec()),
            Step::Close,
        ],
        "/api/v1/follow-up/stall" => vec![
            head("Content-Length: 100\r\n"),
            Step::Send(b"ten bytes.".to_vec()),
            Step::Pause(Duration::from_millis(1500)),
        ],
        "/api/v1/follow-up/chunks" => vec![
            head("Transfer-Encoding: chunked\r\n"),
            Step::Send(b"zz\r\nnope\r\n".to_vec()),
        ],
        "/api/v1/follow-up/long" => {
            let mut steps = vec![head("Content-Length: 8000000\r\n")];
            for _ in 0..40 {
                steps.push(Step::Send(vec![b'x'; 200_000]));
                steps.push(Step::Pause(Duration::from_millis(10)));
            }
            steps
        }
        _ => vec![Step::Send(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec())],
    });
    let redis = Redis::start();
    let dead = free_port();
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port)
        .set("upstreams.ticketing.read-timeout-ms", "300")
        .upstream("dead", &format!("{{address: '127.0.0.1:{dead}'}}"))
        .route("{prefix: /api/v1/dead, upstream: dead, queue: baseball}")
        .log("{format: json}")
        .start_env(&[("RUST_LOG", "")]);
    let token = admitted_token(&wg, &redis, "fan_3");
    let send = |method: &str, path: &str, leave_early: bool| {
        let body = if method == "POST" {
            "Content-Length: 2\r\n\r\n{}"
        } else {
            "\r\n"
        };
        let mut c = TcpStream::connect(wg.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            c,
            "{method} {path} HTTP/1.1\r\nHost: tickets\r\nAuthorization: Bearer {token}\r\n{body}"
        )
        .unwrap();
        if leave_early {
            let mut first = [0; 1024];
            let _ = c.read(&mut first);
            let _ = socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO));
            return;
        }
        let mut all = Vec::new();
        let _ = c.read_to_end(&mut all);
    };
    // Each case: the path, the status, the error, and the rule that refused
    // the answer (where a rule of waitgate's did).
    let cases = [
        (
            "/api/v1/follow-up/closed",
            502,
            "closed before a response",
            None,
        ),
        (
            "/api/v1/follow-up/garbage",
            502,
            "the response head was refused",
            None,
        ),
        (
            "/api/v1/follow-up/lengths",
            502,
            "the response head was refused",
            Some("two different Content-Lengths"),
        ),
        (
            "/api/v1/follow-up/huge-head",
            502,
            "the response head is too large",
            None,
        ),
        ("/api/v1/follow-up/slow", 504, "no response in time", None),
        (
            "/api/v1/follow-up/cut",
            200,
            "the upstream closed mid-body",
            None,
        ),
        (
            "/api/v1/follow-up/stall",
            200,
            "the upstream stalled mid-body",
            None,
        ),
        (
            "/api/v1/follow-up/chunks",
            200,
            "the response body's framing was refused",
            Some("the chunked body's framing"),
        ),
        ("/api/v1/dead/seat", 502, "cannot connect", None),
    ];
    // The register and the token exchange, then each case twice.
    let mut expected = 2;
    for (path, ..) in cases {
        for method in ["GET", "POST"] {
            send(method, path, false);
            expected += 1;
        }
    }
    for method in ["GET", "POST"] {
        send(method, "/api/v1/follow-up/long", true);
        expected += 1;
    }
    let lines = access_lines_at_least(&wg, expected);
    let line = |method: &str, path: &str| {
        let found: Vec<_> = lines
            .iter()
            .filter(|l| l["method"] == method && l["path"] == path)
            .collect();
        assert_eq!(found.len(), 1, "{method} {path}: {lines:#?}");
        found[0].clone()
    };
    for (path, status, error, reason) in cases {
        for method in ["GET", "POST"] {
            let l = line(method, path);
            assert_eq!(l["level"], "WARN", "{method} {path}: {l}");
            assert_eq!(l["status"], status, "{method} {path}: {l}");
            assert_eq!(l["error"], error, "{method} {path}: {l}");
            assert_eq!(l["reason"].as_str(), reason, "{method} {path}: {l}");
            let port = if path.starts_with("/api/v1/dead") {
                dead
            } else {
                upstream.port
            };
            assert_eq!(l["upstream"], format!("127.0.0.1:{port}"), "{l}");
        }
    }
    for method in ["GET", "POST"] {
        let l = line(method, "/api/v1/follow-up/long");
        assert_eq!(l["level"], "INFO", "{method}: {l}");
        assert_eq!(l["status"], 200, "{method}: {l}");
        assert!(l.get("error").is_none(), "{method}: {l}");
    }
}

/// The value of the series `name{labels}` in a metrics text, 0 if absent.
fn series(metrics: &str, name_and_labels: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Each admission is counted once with its wait from arrival, and the
/// followed users' last estimates are compared with their admission, on
/// the rank polls of both HTTP paths.
#[test]
fn admitted_waits_and_the_error_of_the_estimates_are_measured() {
    use waitgate::queue_api::estimates::followed;
    let redis = Redis::start_free();
    let wg = start_with_queues(
        &redis,
        "baseball: {admission: {interval-ms: 1000, batch-size: 2}}",
    );
    // Four users the estimates do not follow go first, then four they do.
    let mut others = (0..)
        .map(|i| format!("plain-{i}"))
        .filter(|u| !followed("baseball", u));
    let mut watched = (0..)
        .map(|i| format!("watched-{i}"))
        .filter(|u| followed("baseball", u));
    let users: Vec<String> = (0..4)
        .map(|_| others.next().unwrap())
        .chain((0..4).map(|_| watched.next().unwrap()))
        .collect();
    let started = Instant::now();
    for user in &users {
        assert_eq!(register(wg.addr, user).status, 200);
    }
    let mut active = std::collections::HashSet::new();
    wait_until("everyone admitted", Duration::from_secs(20), || {
        for user in &users {
            if !active.contains(user) && rank(wg.addr, user).json()["status"] == "ACTIVE" {
                active.insert(user.clone());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        active.len() == users.len()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let metrics = get(wg.admin, "/metrics").unwrap().text();
    let waits = r#"waitgate_admitted_wait_seconds_count{queue="baseball"}"#;
    assert_eq!(series(&metrics, waits), 8.0, "{metrics}");
    let sum = series(
        &metrics,
        r#"waitgate_admitted_wait_seconds_sum{queue="baseball"}"#,
    );
    // Two a window from an empty gate: about 0+0+1+1+2+2+3+3 s in all.
    assert!(sum >= 6.0 && sum <= 8.0 * elapsed, "{sum} s in {elapsed} s");
    let compared: f64 = ["early", "late"]
        .iter()
        .map(|d| {
            series(
                &metrics,
                &format!(
                    r#"waitgate_wait_estimate_error_seconds_count{{direction="{d}",queue="baseball"}}"#
                ),
            )
        })
        .sum();
    assert_eq!(compared, 4.0, "each followed user once:\n{metrics}");
}
