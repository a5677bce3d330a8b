//! One guard for every child process a test starts (`redis-server`,
//! `waitgate`, `haproxy`, `openssl s_server`): spawned with no input and
//! its output thrown away or written to a log file, ready once a port
//! accepts (or a check of the caller's holds), killed and reaped on drop.

#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A child process, killed (SIGKILL) and waited for on drop.
pub struct ChildGuard {
    what: String,
    child: Option<Child>,
    log: Option<PathBuf>,
}

impl ChildGuard {
    /// Starts `cmd` with no standard input and its output thrown away.
    /// `what` names it in panics.
    pub fn spawn(what: &str, cmd: &mut Command) -> ChildGuard {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        ChildGuard::start(what, cmd, None)
    }

    /// Starts `cmd` with no standard input, its standard output thrown
    /// away and its standard error written to `log` (read by
    /// [`ChildGuard::log`]).
    pub fn spawn_logged(what: &str, cmd: &mut Command, log: &Path) -> ChildGuard {
        let file = std::fs::File::create(log)
            .unwrap_or_else(|e| panic!("{what}: cannot create {}: {e}", log.display()));
        cmd.stdout(Stdio::null()).stderr(file);
        ChildGuard::start(what, cmd, Some(log.to_path_buf()))
    }

    fn start(what: &str, cmd: &mut Command, log: Option<PathBuf>) -> ChildGuard {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} did not start (is it installed?): {e}"));
        ChildGuard {
            what: what.to_string(),
            child: Some(child),
            log,
        }
    }

    /// Waits until `ready` holds, polling every 20 ms: `Err` with how the
    /// process ended (and its log) if it exits first, or if `ready` still
    /// fails after `timeout`.
    pub fn wait_ready(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if ready() {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                return Err(format!(
                    "{} exited with {status}: {}",
                    self.what,
                    self.log()
                ));
            }
            if started.elapsed() > timeout {
                return Err(format!(
                    "{} not up after {timeout:?}: {}",
                    self.what,
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`ChildGuard::wait_ready`], panicking with its error.
    pub fn expect_ready(&mut self, timeout: Duration, ready: impl FnMut() -> bool) {
        if let Err(e) = self.wait_ready(timeout, ready) {
            panic!("{e}");
        }
    }

    /// Waits until 127.0.0.1:`port` accepts a connection; panics if the
    /// process exits first or the port stays shut for `timeout`.
    pub fn wait_port(&mut self, port: u16, timeout: Duration) {
        self.expect_ready(timeout, || TcpStream::connect(("127.0.0.1", port)).is_ok());
    }

    /// [`ChildGuard::spawn`], then [`ChildGuard::wait_port`] for 10 s.
    pub fn spawn_on_port(what: &str, cmd: &mut Command, port: u16) -> ChildGuard {
        let mut guard = ChildGuard::spawn(what, cmd);
        guard.wait_port(port, Duration::from_secs(10));
        guard
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends `signal` (a name such as `STOP`, `HUP`) to a process that has
    /// not been killed; asserts that `kill` delivered it.
    pub fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            signal_pid(child.id(), signal);
        }
    }

    /// How it ended, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().unwrap()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
    }

    /// Waits for the process to end; `None` if it outlives `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.child.as_ref()?;
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if started.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, and reaps it: no chance to save or close connections.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether it was killed ([`ChildGuard::kill`]).
    pub fn is_killed(&self) -> bool {
        self.child.is_none()
    }

    /// What it wrote to its log so far (empty without one).
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `kill -<signal> <pid>`; asserts that it was delivered.
pub fn signal_pid(pid: u32, signal: &str) {
    let signal = signal.trim_start_matches('-');
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}
