//! The integration-test harness: a real `redis-server` on a free port, the
//! real `waitgate` binary on free ports, a recording upstream, and a small
//! HTTP/1.1 client that can also send malformed requests.
//!
//! Nothing here talks to the Redis on 6379: every test owns its Redis.

#![allow(dead_code)]

pub mod ha;
pub mod scripted;
pub mod tls;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A fixed test key (Base64 of 32 bytes), so tests can sign their own tokens.
pub const SECRET_B64: &str = "dGVzdC1zZWNyZXQtZm9yLXdhaXRnYXRlLXRlc3RzLTAx";

pub fn secret_bytes() -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(SECRET_B64)
        .unwrap()
}

/// A port nobody listens on right now, from below the kernel's ephemeral
/// range. Test servers that bind port 0 (recording upstreams, scripted
/// backends) get ephemeral ports, so they can never take a port handed out
/// here in the moment between this check and waitgate's or Redis's own
/// bind: a waitgate whose admin port was taken that way polled the other
/// test's upstream for `/healthz`, and those requests showed up in what it
/// recorded.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Each test process starts at its own place in the range, so that two
    // processes rarely hand out the same port in the same moment; within
    // a process, steps of a prime that does not divide the span visit
    // every port once before any comes again.
    static START: OnceLock<u32> = OnceLock::new();
    let start = *START.get_or_init(|| {
        std::process::id().wrapping_mul(2_654_435_761)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
    });
    let (low, high) = handout_range();
    let span = u32::from(high - low) + 1;
    let stride: u32 = if span % 7919 == 0 { 7907 } else { 7919 };
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let offset = (u64::from(start) + u64::from(step) * u64::from(stride)) % u64::from(span);
        let port = low + offset as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {low}..={high}");
}

/// The ports [`free_port`] hands out: those below the ephemeral range
/// (`ip_local_port_range`), or above it when it starts too low to leave
/// room.
fn handout_range() -> (u16, u16) {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|n| n.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    if ephemeral.0 >= 12_000 {
        (10_000, ephemeral.0 - 1)
    } else {
        (ephemeral.1.saturating_add(1).min(64_000), 65_535)
    }
}

/// Waits until `ready` holds, failing with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} not ready within {timeout:?}");
}

// ---------------------------------------------------------------------------
// Redis

/// The active entry that holds admission shut in queue `baseball` (see
/// [`Redis::start`]).
pub const HOLDER: &str = "~admission-held";

/// A `redis-server` of the test's own, killed on drop.
pub struct Redis {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
    hold: bool,
}

impl Redis {
    /// A Redis in which queue `baseball` admits nobody: the harness config
    /// sets `max-active: 1` for it, and this puts one never-expiring
    /// [`HOLDER`] in its active set (again after every restart). Tests that
    /// are not about admission can then rely on users staying WAITING.
    pub fn start() -> Redis {
        Redis::launch(&[], true)
    }

    /// A Redis with admission free to run.
    pub fn start_free() -> Redis {
        Redis::launch(&[], false)
    }

    /// Starts with extra `redis-server` arguments (e.g. AOF settings), with
    /// admission free to run.
    pub fn start_with(extra: &[&str]) -> Redis {
        Redis::launch(extra, false)
    }

    fn launch(extra: &[&str], hold: bool) -> Redis {
        let mut redis = Redis {
            port: free_port(),
            dir: tempfile::tempdir().unwrap(),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            hold,
        };
        // A port another test's server took since `free_port` checked it:
        // this one exits, and another port is tried.
        for _ in 0..5 {
            if redis.try_spawn() {
                return redis;
            }
            redis.port = free_port();
        }
        panic!("redis-server found no free port in 5 tries");
    }

    fn spawn(&mut self) {
        assert!(
            self.try_spawn(),
            "redis-server did not start on {}",
            self.port
        );
    }

    /// Starts redis-server on its port: false if this process is not the
    /// one that answers there (it exited, the port being taken), so that a
    /// test never shares another test's Redis.
    fn try_spawn(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("redis-server must be installed");
        let port = self.port;
        let pid = child.id();
        let mut ours = false;
        wait_until("redis-server", Duration::from_secs(10), || {
            if child.try_wait().ok().flatten().is_some() {
                return true;
            }
            let server = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c));
            match server {
                Ok(info) => {
                    ours = info.contains(&format!("process_id:{pid}\r\n"));
                    // Another's: wait for this one to exit.
                    ours
                }
                Err(_) => false,
            }
        });
        if !ours {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        self.child = Some(child);
        if self.hold {
            let _: () = redis::cmd("ZADD")
                .arg("queue:{baseball}:active")
                .arg("32503680000000")
                .arg(HOLDER)
                .query(&mut self.conn())
                .unwrap();
        }
        true
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Redis's clock (`TIME`), in ms: the time the scripts see.
    pub fn now_ms(&self) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut self.conn()).unwrap();
        s * 1000 + us / 1000
    }

    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }

    /// SIGKILL: no chance to save or close connections.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port and directory (an AOF, if any, is
    /// replayed).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(child.id().to_string())
                .status()
                .unwrap();
            assert!(status.success());
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        // A stopped process would ignore SIGKILL until continued on some
        // kernels' process accounting; continue it first.
        self.signal("CONT");
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// waitgate

/// The ports and Redis a config is written for.
pub struct Ports {
    pub listen: u16,
    pub admin: u16,
}

impl Ports {
    pub fn new() -> Ports {
        Ports {
            listen: free_port(),
            admin: free_port(),
        }
    }
}

/// A config with one queue `baseball` (the defaults, but at most one
/// active user: with [`Redis::start`] nobody is admitted), one upstream
/// `ticketing` and one route.
pub fn config(redis_url: &str, ports: &Ports, upstream_port: u16) -> String {
    config_with(
        redis_url,
        ports,
        upstream_port,
        "baseball: {admission: {max-active: 1}}",
    )
}

/// Whether the tests run with the direct lane (`direct-lane`): on unless
/// `WAITGATE_TEST_DIRECT_LANE=off`. CI runs the edge suites both ways, so
/// every behaviour they check holds whichever path serves a request.
pub fn direct_lane() -> bool {
    !matches!(
        std::env::var("WAITGATE_TEST_DIRECT_LANE").as_deref(),
        Ok("off" | "false" | "0")
    )
}

/// The `direct-lane` line of a test config; none with
/// `WAITGATE_TEST_DIRECT_LANE=unset` (for builds that predate the key).
fn direct_lane_line() -> String {
    match std::env::var("WAITGATE_TEST_DIRECT_LANE").as_deref() {
        Ok("unset") => String::new(),
        _ => format!("direct-lane: {}\n", direct_lane()),
    }
}

pub fn config_with(redis_url: &str, ports: &Ports, upstream_port: u16, queues: &str) -> String {
    format!(
        "listen: 127.0.0.1:{listen}
admin-listen: 127.0.0.1:{admin}
threads: 2
grace-period-s: 3
{lane}redis:
  url: {redis_url}
  command-timeout-ms: 300
jwt:
  issuer: waitgate
  audience: ticketing
  ttl-ms: 600000
  leeway-s: 5
queues:
{queues}
upstreams:
  ticketing:
    address: 127.0.0.1:{upstream_port}
routes:
  - prefix: /api/v1/follow-up
    upstream: ticketing
    queue: baseball
",
        listen = ports.listen,
        admin = ports.admin,
        lane = direct_lane_line(),
        queues = indent(queues),
    )
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect::<String>()
}

/// The heartbeat of `user` in `queue`: when their next poll is due (ms),
/// as `lua/lib.lua` writes it (`<due>:<arrival>`).
pub fn heartbeat_of(c: &mut redis::Connection, queue: &str, user: &str) -> Option<u64> {
    let value: Option<String> =
        redis::Commands::hget(c, format!("queue:{{{queue}}}:due"), user).unwrap();
    value.map(|v| v.split(':').next().unwrap().parse().unwrap())
}

/// Makes `users` of `queue` silent long ago: their heartbeat long past, in
/// a heartbeat bucket long past, so that the next cleanup removes them.
pub fn make_silent(c: &mut redis::Connection, queue: &str, users: &[String]) {
    let due = format!("queue:{{{queue}}}:due");
    let dues = format!("queue:{{{queue}}}:dues");
    let mut p = redis::pipe();
    for user in users {
        p.hset(&due, user, 1).ignore();
        p.rpush(format!("{dues}:1000"), user).ignore();
    }
    p.zadd(&dues, 1000, 1000).ignore();
    let () = p.query(c).unwrap();
}

/// A running `waitgate` binary, killed on drop.
pub struct Waitgate {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

/// The binary under test: this build, or `WAITGATE_TEST_BINARY` (to run a
/// suite against an earlier build and see which tests it fails).
pub fn binary() -> PathBuf {
    std::env::var_os("WAITGATE_TEST_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_waitgate")))
}

impl Waitgate {
    /// Writes `config` to a file, starts the binary, and waits until both
    /// listeners answer.
    ///
    /// Free ports are checked free and let go ([`free_port`]), so another
    /// test process can take one before waitgate binds it. When
    /// waitgate reports a listen failure, the ports are picked again (and
    /// replaced in the config) a few times; use `addr`/`admin`, not `ports`.
    pub fn start(config: &str, ports: &Ports) -> Waitgate {
        Waitgate::start_env(config, ports, &[])
    }

    /// [`Waitgate::start`] with extra environment variables (which may
    /// replace `JWT_SECRET` and `RUST_LOG`).
    pub fn start_env(config: &str, ports: &Ports, env: &[(&str, &str)]) -> Waitgate {
        let mut config = config.to_string();
        let (mut listen, mut admin) = (ports.listen, ports.admin);
        for _ in 0..5 {
            match Waitgate::try_start(&config, listen, admin, env) {
                Ok(wg) => return wg,
                Err(log) if log.contains("cannot listen") => {
                    let (new_listen, new_admin) = (free_port(), free_port());
                    let (old_l, old_a) = (
                        format!("listen: 127.0.0.1:{listen}"),
                        format!("admin-listen: 127.0.0.1:{admin}"),
                    );
                    config = config
                        .lines()
                        .map(|line| {
                            if line == old_l {
                                format!("listen: 127.0.0.1:{new_listen}\n")
                            } else if line == old_a {
                                format!("admin-listen: 127.0.0.1:{new_admin}\n")
                            } else {
                                format!("{line}\n")
                            }
                        })
                        .collect();
                    (listen, admin) = (new_listen, new_admin);
                }
                Err(log) => panic!("waitgate did not start: {log}"),
            }
        }
        panic!("waitgate found no free ports in 5 tries");
    }

    fn try_start(
        config: &str,
        listen: u16,
        admin: u16,
        env: &[(&str, &str)],
    ) -> Result<Waitgate, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("waitgate.yaml");
        std::fs::write(&path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("waitgate.log")).unwrap();
        let child = Command::new(binary())
            .arg("-c")
            .arg(&path)
            .env("JWT_SECRET", SECRET_B64)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut wg = Waitgate {
            addr: SocketAddr::from(([127, 0, 0, 1], listen)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
            child: Some(child),
            dir,
        };
        // A port taken between `free_port` and waitgate's bind (another
        // test's upstream, say) makes waitgate exit at once, naming it: give
        // it that moment before polling, so that the poll never lands on
        // the other test's server and shows up in what it recorded.
        std::thread::sleep(Duration::from_millis(100));
        if let Some(status) = wg.child.as_mut().unwrap().try_wait().unwrap() {
            return Err(format!("exited with {status}: {}", wg.log()));
        }
        let started = Instant::now();
        loop {
            if get(wg.admin, "/healthz").is_ok_and(|r| r.status == 200)
                && TcpStream::connect(wg.addr).is_ok()
            {
                return Ok(wg);
            }
            if let Some(status) = wg.child.as_mut().unwrap().try_wait().unwrap() {
                return Err(format!("exited with {status}: {}", wg.log()));
            }
            if started.elapsed() > Duration::from_secs(15) {
                return Err(format!("not up after 15 s: {}", wg.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("waitgate.log")).unwrap_or_default()
    }

    /// Waits up to 5 s for `needle` to be in the log `count` times: the
    /// log is written by a background thread, so a line about a request
    /// may land just after its answer.
    pub fn wait_for_log(&self, needle: &str, count: usize) {
        let started = Instant::now();
        while self.log().matches(needle).count() < count {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "no {needle:?} in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The config file the process was started with (a reload reads it).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("waitgate.yaml")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to end; `None` if it outlives `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for Waitgate {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the binary to completion (for `-t` and start-up failures).
pub fn run_binary(args: &[&str], secret: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(binary());
    cmd.args(args).env_remove("JWT_SECRET");
    if let Some(secret) = secret {
        cmd.env("JWT_SECRET", secret);
    }
    cmd.output().unwrap()
}

// ---------------------------------------------------------------------------
// HTTP client

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The `error` code of an error body, checking its shape on the way.
    pub fn error_code(&self) -> String {
        let v = self.json();
        let obj = v.as_object().expect("error body is an object");
        assert_eq!(
            obj.len(),
            2,
            "error body has exactly error and message: {v}"
        );
        assert!(
            obj["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{v}"
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{:?}",
            self.headers
        );
        obj["error"]
            .as_str()
            .expect("error is a string")
            .to_string()
    }
}

/// Sends raw bytes on a new connection and reads one response.
pub fn raw(addr: SocketAddr, request: &[u8]) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request)?;
    read_response(&mut BufReader::new(stream))
}

/// Reads one response (Content-Length, chunked, or until close).
pub fn read_response(reader: &mut impl BufRead) -> std::io::Result<Response> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a response",
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _): &&(String, String)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if status == 204 || status == 304 || (100..200).contains(&status) {
        // no body
    } else if let Some(len) = find("content-length") {
        let len: usize = len.parse().unwrap();
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    } else if find("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size_hex = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_hex, 16).unwrap_or(0);
            if size == 0 {
                // Trailer fields, if any, up to the empty line.
                loop {
                    line.clear();
                    if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        reader.read_to_end(&mut body)?;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> std::io::Result<Response> {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(body) = body {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    if let Some(body) = body {
        bytes.extend_from_slice(body);
    }
    raw(addr, &bytes)
}

pub fn get(addr: SocketAddr, target: &str) -> std::io::Result<Response> {
    request(addr, "GET", target, &[], None)
}

pub fn post_json(addr: SocketAddr, target: &str, body: &str) -> std::io::Result<Response> {
    request(
        addr,
        "POST",
        target,
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    )
}

pub fn delete(
    addr: SocketAddr,
    target: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Response> {
    request(addr, "DELETE", target, headers, None)
}

// Queue API shortcuts.

pub fn register(addr: SocketAddr, user: &str) -> Response {
    post_json(
        addr,
        "/api/v1/queue/register",
        &serde_json::json!({ "userId": user }).to_string(),
    )
    .unwrap()
}

/// Registers a new user and returns the queueCredential of the reply.
pub fn register_new(addr: SocketAddr, user: &str) -> String {
    let r = register(addr, user);
    match r.json()["queueCredential"].as_str() {
        Some(credential) => credential.to_string(),
        None => panic!("{user} got no credential: {r:?}"),
    }
}

pub fn rank(addr: SocketAddr, user: &str) -> Response {
    get(addr, &format!("/api/v1/queue/rank?userId={user}")).unwrap()
}

pub fn dropout(addr: SocketAddr, user: &str, credential: &str) -> Response {
    delete(
        addr,
        &format!("/api/v1/queue/dropout?userId={user}"),
        &[("X-Queue-Credential", credential)],
    )
    .unwrap()
}

/// Registers `user` in queue `baseball`, admits them by hand (far into the
/// future) and trades the credential for a token.
pub fn admitted_token(wg: &Waitgate, redis: &Redis, user: &str) -> String {
    let credential = register_new(wg.addr, user);
    admit_by_hand(&mut redis.conn(), user, u64::MAX / 2_000_000);
    let r = post_json(
        wg.addr,
        "/api/v1/queue/active/token",
        &serde_json::json!({ "userId": user, "queueCredential": credential }).to_string(),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    r.json()["accessToken"].as_str().unwrap().to_string()
}

// ---------------------------------------------------------------------------
// A raw client: one kept-alive connection, read a response at a time

/// One client connection.
pub struct Client {
    pub writer: TcpStream,
    pub reader: BufReader<TcpStream>,
}

/// A response head: status and headers.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn length(&self) -> usize {
        self.header("content-length").unwrap().parse().unwrap()
    }
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        }
    }

    pub fn send(&mut self, request: &str) {
        self.send_bytes(request.as_bytes());
    }

    pub fn send_bytes(&mut self, request: &[u8]) {
        self.writer.write_all(request).unwrap();
    }

    /// The next response head; panics if the connection ends first.
    pub fn head(&mut self) -> Head {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_else(|| panic!("no status line: {line:?}"))
            .parse()
            .unwrap();
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            let (n, v) = line.trim_end().split_once(':').unwrap();
            headers.push((n.to_string(), v.trim().to_string()));
        }
        Head { status, headers }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut body = vec![0; n];
        self.reader.read_exact(&mut body).unwrap();
        body
    }

    /// One whole response, whatever its framing.
    pub fn response(&mut self) -> (Head, Vec<u8>) {
        let r = read_response(&mut self.reader).unwrap();
        let head = Head {
            status: r.status,
            headers: r.headers,
        };
        (head, r.body)
    }

    /// Everything until the server closes the connection (or 10 s pass).
    pub fn rest(&mut self) -> Vec<u8> {
        let mut rest = Vec::new();
        let _ = self.reader.read_to_end(&mut rest);
        rest
    }

    /// Whether the server closed the connection with nothing more to say
    /// (EOF, or a reset: closing with unread input resets).
    pub fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        match self.reader.read_to_end(&mut rest) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset && rest.is_empty(),
            Ok(_) => false,
        }
    }
}

// ---------------------------------------------------------------------------
// A recording upstream

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// An HTTP/1.1 upstream that records every request it receives and answers
/// 200 `{"upstream":"ok"}`. Keep-alive is supported, so connection reuse can
/// be observed through [`Upstream::connections`].
pub struct Upstream {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<Mutex<usize>>,
    /// Delay before answering, for slow-upstream tests.
    pub delay: Arc<Mutex<Duration>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let delay = Arc::new(Mutex::new(Duration::ZERO));
        let (s, c, d) = (seen.clone(), connections.clone(), delay.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                *c.lock().unwrap() += 1;
                let (s, d) = (s.clone(), d.clone());
                std::thread::spawn(move || serve_upstream(stream, s, d));
            }
        });
        Upstream {
            port,
            seen,
            connections,
            delay,
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

fn serve_upstream(stream: TcpStream, seen: Arc<Mutex<Vec<Seen>>>, delay: Arc<Mutex<Duration>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_string(), v.trim().to_string()));
            }
        }
        let chunked = headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
        });
        let body = if chunked {
            match read_chunked(&mut reader) {
                Some(body) => body,
                None => return,
            }
        } else {
            let len = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            body
        };
        seen.lock().unwrap().push(Seen {
            method,
            target,
            headers,
            body,
        });
        let pause = *delay.lock().unwrap();
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
        let reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"upstream\":\"ok\"}";
        if writer.write_all(reply).is_err() {
            return;
        }
    }
}

/// Reads a chunked body (RFC 9112 §7.1), trailers included; `None` if the
/// stream ends or the framing is broken.
pub fn read_chunked(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        if reader.read_line(&mut size_line).ok()? == 0 {
            return None;
        }
        let size_hex = size_line.trim().split(';').next()?;
        let size = usize::from_str_radix(size_hex, 16).ok()?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).ok()? == 0 || line.trim_end().is_empty() {
                    return Some(body);
                }
            }
        }
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).ok()?;
        body.extend_from_slice(&chunk[..size]);
    }
}

// ---------------------------------------------------------------------------
// Watching admission in queue `baseball`

pub const WAITING_KEY: &str = "queue:{baseball}:waiting";
pub const ACTIVE_KEY: &str = "queue:{baseball}:active";

/// Holds queue `baseball`'s admission gate: a window far in the future
/// counts as decided, so no instance admits anyone until [`release_gate`].
/// Tests fill the queue under it, so that a slow registration cannot leave
/// early windows short.
pub fn hold_gate(redis: &Redis) {
    // With the window's length (1 ms: a number this large is then still
    // far in the future), as the gate records it.
    let _: () = redis::Commands::hset_multiple(
        &mut redis.conn(),
        "queue:{baseball}:admission",
        &[("window", i64::MAX / 2), ("window_ms", 1)],
    )
    .unwrap();
}

pub fn release_gate(redis: &Redis) {
    let _: () = redis::Commands::hdel(
        &mut redis.conn(),
        "queue:{baseball}:admission",
        &["window", "window_ms"],
    )
    .unwrap();
}

/// Waits until nobody waits in queue `baseball`, checking on every look
/// (one atomic read of both sets) that all `users` are in exactly one of
/// them. Returns how long that took.
pub fn wait_until_all_admitted(redis: &Redis, users: usize, limit: Duration) -> Duration {
    let mut c = redis.conn();
    let start = Instant::now();
    loop {
        let (waiting, active): (u64, u64) = redis::pipe()
            .atomic()
            .zcard(WAITING_KEY)
            .zcard(ACTIVE_KEY)
            .query(&mut c)
            .unwrap();
        assert_eq!(waiting + active, users as u64, "nobody lost or doubled");
        if waiting == 0 {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "{waiting} still waiting after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many users each admission window of queue `baseball` admitted, in
/// window order. An admission sets expiry = admission time + TTL, so the
/// window of each one can be read back from the active set.
pub fn admitted_per_window(redis: &Redis, ttl_ms: u64, interval_ms: u64) -> Vec<u64> {
    let active: Vec<(String, f64)> =
        redis::Commands::zrange_withscores(&mut redis.conn(), ACTIVE_KEY, 0, -1).unwrap();
    let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
    for (_, expiry) in &active {
        *per_window
            .entry((*expiry as u64 - ttl_ms) / interval_ms)
            .or_default() += 1;
    }
    per_window.into_values().collect()
}

/// The global gate's promise: no window over `batch`, and while the queue
/// is long every window full (only the first, decided while users still
/// arrive, and the last may be short).
pub fn assert_one_batch_per_window(counts: &[u64], batch: u64) {
    assert!(counts.iter().all(|&n| n <= batch), "{counts:?}");
    if counts.len() > 2 {
        assert!(
            counts[1..counts.len() - 1].iter().all(|&n| n == batch),
            "{counts:?}"
        );
    }
}

/// Moves a waiting user of queue `baseball` to active until `until_ms`, by
/// hand and in one step, as `lua/admit.lua` does: out of waiting and
/// heartbeat, into active, with its arrival kept for the token exchange. A
/// user the admitter took first stays active, until `until_ms`.
pub fn admit_by_hand(c: &mut redis::Connection, user: &str, until_ms: u64) {
    let moved: i64 = redis::Script::new(
        "local arrival = redis.call('ZSCORE', KEYS[1], ARGV[1])
         if not arrival then
           -- The admitter may have been first (a queue with room admits
           -- within a tick): the user is active all the same.
           if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
             redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
             return 1
           end
           return 0
         end
         redis.call('ZREM', KEYS[1], ARGV[1])
         redis.call('ZREM', KEYS[2], ARGV[1])
         redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
         redis.call('HSET', KEYS[4], ARGV[1], string.format('%.0f', tonumber(arrival)))
         return 1",
    )
    .key(WAITING_KEY)
    .key("queue:{baseball}:heartbeat")
    .key(ACTIVE_KEY)
    .key("queue:{baseball}:credential")
    .arg(user)
    .arg(until_ms)
    .invoke(c)
    .unwrap();
    assert_eq!(moved, 1, "{user} was not waiting");
}

/// Gives queue `queue` the incarnation an instance gives the state it
/// finds (see `lua/recover.lua`), for tests that call the scripts
/// themselves: register and admit refuse a queue without one.
pub fn give_state(c: &mut redis::Connection, queue: &str) {
    let _: () = redis::cmd("HSETNX")
        .arg(format!("queue:{{{queue}}}:control"))
        .arg("incarnation")
        .arg("0123abcd")
        .query(c)
        .unwrap();
}

/// A credential as waitgate issues it (with the test secret) for a
/// registration of `user` in queue `baseball` at `arrival`: well made, so a
/// refusal can only come from Redis's answer.
pub fn credential_for(user: &str, arrival: u64) -> String {
    let secret = waitgate::edge::secret::Secret::from_base64(SECRET_B64).unwrap();
    waitgate::queue::credential::Credentials::new(&secret).issue("baseball", user, arrival)
}

/// A TCP relay between waitgate and its Redis that, once armed, holds the
/// first client write that contains every one of `trigger`'s byte strings
/// until `meanwhile` has run: what another instance does between this
/// one's commands, made to happen at an exact point.
pub struct Interposer {
    pub port: u16,
    armed: Armed,
}

/// What runs before the next matching write, until it has run.
type Armed = Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>;

impl Interposer {
    pub fn start(redis_port: u16, trigger: &'static [&'static [u8]]) -> Interposer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Armed = Arc::new(Mutex::new(None));
        let shared = armed.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(mut client) = client else { return };
                let Ok(mut server) = TcpStream::connect(("127.0.0.1", redis_port)) else {
                    return;
                };
                let (mut from_server, mut to_client) =
                    (server.try_clone().unwrap(), client.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut from_server, &mut to_client));
                let armed = shared.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match client.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let chunk = &buf[..n];
                        let hit = trigger
                            .iter()
                            .all(|t| chunk.windows(t.len()).any(|w| w == *t));
                        if hit {
                            let meanwhile = armed.lock().unwrap().take();
                            if let Some(meanwhile) = meanwhile {
                                meanwhile();
                            }
                        }
                        if server.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    let _ = server.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Interposer { port, armed }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Runs `meanwhile` before the next write that matches the trigger.
    pub fn arm(&self, meanwhile: impl FnOnce() + Send + 'static) {
        *self.armed.lock().unwrap() = Some(Box::new(meanwhile));
    }

    /// Whether the armed `meanwhile` has run.
    pub fn fired(&self) -> bool {
        self.armed.lock().unwrap().is_none()
    }
}

/// The commands clients (not scripts) send Redis, as `MONITOR` shows them.
pub struct Monitor {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Monitor {
    pub fn start(redis: &Redis) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", redis.port)).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok, "+OK\r\n");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let shared = lines.clone();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                // A client's, not a script's ("[0 lua]").
                if line.contains(" 127.0.0.1:") {
                    shared.lock().unwrap().push(line);
                }
            }
        });
        Monitor { lines }
    }

    /// How many commands named `command` named `user` since the last call
    /// (which forgets every line seen until now).
    pub fn take(&self, command: &str, user: &str) -> usize {
        let lines = self.take_lines();
        let (command, user) = (format!("] \"{command}\""), format!(" \"{user}\""));
        lines
            .iter()
            .filter(|l| {
                l.contains(&command) && (l.ends_with(&user) || l.contains(&format!("{user} ")))
            })
            .count()
    }

    /// Every line seen since the last call.
    pub fn take_lines(&self) -> Vec<String> {
        // MONITOR lags a little behind the answers.
        std::thread::sleep(Duration::from_millis(100));
        std::mem::take(&mut *self.lines.lock().unwrap())
    }
}

/// The admin token the tests that use the admin API start waitgate with
/// (`WAITGATE_ADMIN_TOKEN`).
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// A call of the admin API with [`ADMIN_TOKEN`], a JSON body if any.
pub fn admin(wg: &Waitgate, method: &str, path: &str, body: Option<&str>) -> Response {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let mut headers = vec![("Authorization", auth.as_str())];
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    request(wg.admin, method, path, &headers, body.map(str::as_bytes)).unwrap()
}
