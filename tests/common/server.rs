//! The `waitgate` binary on free ports, its config, and its admin API.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

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
