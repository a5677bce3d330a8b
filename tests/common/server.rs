//! The `waitgate` binary on free ports, its config, and its admin API.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::*;

// ---------------------------------------------------------------------------
// waitgate

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
    process: ChildGuard,
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
        let mut cmd = Command::new(binary());
        cmd.arg("-c")
            .arg(&path)
            .env("JWT_SECRET", SECRET_B64)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied());
        let process =
            ChildGuard::spawn_logged("waitgate", &mut cmd, &dir.path().join("waitgate.log"));
        let mut wg = Waitgate {
            addr: SocketAddr::from(([127, 0, 0, 1], listen)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
            process,
            dir,
        };
        // A port taken between `free_port` and waitgate's bind (another
        // test's upstream, say) makes waitgate exit at once, naming it: give
        // it that moment before polling, so that the poll never lands on
        // the other test's server and shows up in what it recorded.
        std::thread::sleep(Duration::from_millis(100));
        if let Some(status) = wg.process.exited() {
            return Err(format!("exited with {status}: {}", wg.log()));
        }
        let (addr, admin) = (wg.addr, wg.admin);
        wg.process.wait_ready(Duration::from_secs(15), || {
            get(admin, "/healthz").is_ok_and(|r| r.status == 200)
                && TcpStream::connect(addr).is_ok()
        })?;
        Ok(wg)
    }

    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Waits up to 5 s for `needle` to be in the log `count` times: the
    /// log is written by a background thread, so a line about a request
    /// may land just after its answer.
    pub fn wait_for_log(&self, needle: &str, count: usize) {
        let logged = eventually(Duration::from_secs(5), || {
            self.log().matches(needle).count() >= count
        });
        assert!(logged, "no {needle:?} in the log:\n{}", self.log());
    }

    /// Waits up to `timeout` until the admin listener's `/metrics` has
    /// `needle`; returns that text.
    pub fn wait_for_metrics(&self, needle: &str, timeout: Duration) -> String {
        let mut text = String::new();
        let found = eventually(timeout, || {
            text = get(self.admin, "/metrics")
                .map(|r| r.text())
                .unwrap_or_default();
            text.contains(needle)
        });
        assert!(
            found,
            "no {needle:?} in /metrics within {timeout:?}:\n{text}"
        );
        text
    }

    /// The value of the sample `series` (a metric's name and labels as
    /// written) on the admin listener's `/metrics`, if it has one.
    pub fn metric<T: std::str::FromStr>(&self, series: &str) -> Option<T> {
        sample(&get(self.admin, "/metrics").unwrap().text(), series)
    }

    /// The lines of the log that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }

    /// The config file the process was started with (a reload reads it).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("waitgate.yaml")
    }

    /// Writes `yaml` over the config file and sends SIGHUP: a reload,
    /// whose outcome the log tells.
    pub fn reload(&self, yaml: impl AsRef<[u8]>) {
        std::fs::write(self.config_path(), yaml).unwrap();
        self.signal("HUP");
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    pub fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    /// Waits for the process to end; `None` if it outlives `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.process.wait_exit(timeout)
    }

    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }
}

/// The value of the sample `series` (a metric's name and labels as
/// written) in a `/metrics` text, if it has one.
pub fn sample<T: std::str::FromStr>(text: &str, series: &str) -> Option<T> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The `waitgate_*` metric names `text` names, once for each time it
/// names one.
pub fn metric_names_in(text: &str) -> Vec<String> {
    text.match_indices("waitgate_")
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
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

/// Schedules queue `baseball`'s event through the admin API: an open at
/// `open_at` (ms), a pre-queue from `prequeue_from` if any, shuffled or
/// not. Asserts that it was taken; its answer.
pub fn schedule(
    wg: &Waitgate,
    prequeue_from: Option<u64>,
    open_at: u64,
    shuffle: bool,
) -> Response {
    let at = waitgate::time::rfc3339;
    let mut event = serde_json::json!({ "openAt": at(open_at) });
    if let Some(from) = prequeue_from {
        event["prequeueFrom"] = at(from).into();
    }
    if shuffle {
        event["shuffle"] = true.into();
    }
    let r = admin(
        wg,
        "PUT",
        "/admin/v1/queues/baseball/event",
        Some(&event.to_string()),
    );
    assert_eq!(r.status, 200, "{r:?}");
    r
}

/// Changes queue `baseball`'s admission settings through the admin API
/// (`json`, such as `{"batchSize":2}`); the answer, whatever it is.
pub fn patch_admission(wg: &Waitgate, json: &str) -> Response {
    admin(
        wg,
        "PATCH",
        "/admin/v1/queues/baseball/admission",
        Some(json),
    )
}

/// Revokes `user` of queue `baseball` through the admin API; the answer,
/// whatever it is.
pub fn revoke(wg: &Waitgate, user: &str) -> Response {
    let body = serde_json::json!({ "userId": user }).to_string();
    admin(wg, "POST", "/admin/v1/queues/baseball/revoke", Some(&body))
}

/// A call of the admin API with [`ADMIN_TOKEN`], a JSON body if any.
pub fn admin(wg: &Waitgate, method: &str, path: &str, body: Option<&str>) -> Response {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let mut headers = vec![("Authorization", auth.as_str())];
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    request(wg.admin, method, path, &headers, body.map(str::as_bytes)).unwrap()
}

/// A waitgate with its own Redis and recording upstream, logging by
/// `filter` (the config's `log.filter`, with `RUST_LOG` unset so that the
/// config decides), and the token of an admitted user.
pub fn logging_by(filter: &str, user: &str) -> (Redis, super::Upstream, Waitgate, String) {
    let redis = Redis::start();
    let ports = Ports::new();
    let upstream = super::Upstream::start();
    let config = TestConfig::new(&redis.url(), &ports, upstream.port)
        .log(&format!("{{filter: '{filter}'}}"))
        .yaml();
    let wg = Waitgate::start_env(&config, &ports, &[("RUST_LOG", "")]);
    let token = super::admitted_token(&wg, &redis, user);
    (redis, upstream, wg, token)
}
