//! A `redis-server` of the test's own, and what tests read of it.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::*;

// ---------------------------------------------------------------------------
// Redis

/// The active entry that holds admission shut in queue `baseball` (see
/// [`Redis::start`]).
pub const HOLDER: &str = "~admission-held";

/// The calls of `command` in the text of `INFO commandstats`; 0 when it
/// was never called.
pub fn calls_in(commandstats: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    commandstats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.split(',').next().unwrap().parse().unwrap())
}

/// A `redis-server` of the test's own, killed on drop.
pub struct Redis {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<ChildGuard>,
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
            .args(&self.extra);
        let mut child = ChildGuard::spawn("redis-server", &mut cmd);
        let url = format!("redis://127.0.0.1:{}/", self.port);
        let pid = format!("process_id:{}\r\n", child.id());
        // Another's answer: wait for this one to exit.
        let ours = child.wait_ready(Duration::from_secs(10), || {
            redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c))
                .is_ok_and(|info| info.contains(&pid))
        });
        match ours {
            Ok(()) => {}
            Err(e) if child.is_running() => panic!("{e}"),
            Err(_) => return false,
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

    /// `CONFIG SET name value`.
    pub fn config_set(&self, name: &str, value: impl redis::ToRedisArgs) {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut self.conn())
            .unwrap();
    }

    /// Logs every command slower than `micros` in a slow log of `len`
    /// entries, emptied now.
    pub fn slowlog_from_now(&self, micros: u64, len: u64) {
        self.config_set("slowlog-log-slower-than", micros);
        self.config_set("slowlog-max-len", len);
        let () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query(&mut self.conn())
            .unwrap();
    }

    /// The Redis commands that ran since [`Redis::slowlog_from_now`] (with
    /// every command logged): each one's name and arguments, oldest first.
    pub fn commands_logged(&self) -> Vec<Vec<String>> {
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query(&mut self.conn())
            .unwrap();
        let mut out: Vec<Vec<String>> = log
            .into_iter()
            .map(|entry| {
                let redis::Value::Array(fields) = entry else {
                    panic!("a slowlog entry: {entry:?}")
                };
                redis::from_redis_value::<Vec<String>>(fields[3].clone()).unwrap()
            })
            .collect();
        out.reverse();
        out
    }

    /// The text of `INFO section`.
    pub fn info(&self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query(&mut self.conn())
            .unwrap()
    }

    /// The calls of `command` since start or the last `CONFIG RESETSTAT`
    /// (`INFO commandstats`); 0 when it was never called.
    pub fn calls(&self, command: &str) -> u64 {
        calls_in(&self.info("commandstats"), command)
    }

    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }

    /// SIGKILL: no chance to save or close connections.
    pub fn kill(&mut self) {
        self.child = None;
    }

    /// Starts again on the same port and directory (an AOF, if any, is
    /// replayed).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            child.signal(signal);
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
