//! Watching and interposing on what waitgate says to Redis.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

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
