//! Highly available Redis on loopback, for the failover tests and drills:
//! nodes, replicas, Sentinels and a Cluster, each a real `redis-server`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{free_port, wait_until, ChildGuard};

/// One `redis-server` (a node, a replica or a Sentinel), killed on drop.
pub struct Node {
    pub port: u16,
    process: ChildGuard,
}

impl Node {
    pub fn start(dir: &Path, args: &[String]) -> Node {
        let port = free_port();
        Node::start_on(port, dir, args)
    }

    pub fn start_on(port: u16, dir: &Path, args: &[String]) -> Node {
        let mut cmd = Command::new("redis-server");
        cmd.args(args)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", dir.to_str().unwrap(), "--save", ""]);
        Node::ready(
            port,
            ChildGuard::spawn(&format!("redis on {port}"), &mut cmd),
        )
    }

    /// Once it answers PING.
    fn ready(port: u16, mut process: ChildGuard) -> Node {
        process.expect_ready(Duration::from_secs(10), || {
            redis_cli(port, &["PING"]).is_some_and(|r| r == "PONG")
        });
        Node { port, process }
    }

    /// A Sentinel watching `master` as `waitgate`. A failover whose
    /// election fails (votes split, more likely on a loaded machine) is
    /// tried again after twice `failover-timeout`: 6 s here, not the 20 s
    /// that 10 s would give.
    pub fn sentinel(dir: &Path, master: u16) -> Node {
        Node::sentinel_after(dir, master, 1000)
    }

    /// A Sentinel that takes the master for down after `down_after_ms`
    /// without an answer (Redis's default is 30 000).
    pub fn sentinel_after(dir: &Path, master: u16, down_after_ms: u64) -> Node {
        let port = free_port();
        let conf = dir.join(format!("sentinel-{port}.conf"));
        std::fs::write(
            &conf,
            format!(
                "sentinel monitor waitgate 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds waitgate {down_after_ms}\n\
                 sentinel failover-timeout waitgate 3000\n\
                 sentinel parallel-syncs waitgate 1\n"
            ),
        )
        .unwrap();
        let mut cmd = Command::new("redis-server");
        cmd.arg(&conf)
            .args([
                "--sentinel",
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args(["--dir", dir.to_str().unwrap()]);
        Node::ready(port, ChildGuard::spawn("a sentinel", &mut cmd))
    }

    /// `redis-cli` against this node; its output, if it answered.
    pub fn cmd(&self, args: &[&str]) -> Option<String> {
        redis_cli(self.port, args)
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Whether it still runs (was not killed).
    pub fn is_up(&self) -> bool {
        !self.process.is_killed()
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// `redis-cli` against the server on `port`; its output, if it answered.
pub fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.starts_with("Could not connect"))
}

/// `count` replicas of `master`, once each has synced with it.
pub fn replicas_of(dir: &Path, master: &Node, count: usize) -> Vec<Node> {
    let replicas: Vec<Node> = (0..count)
        .map(|_| {
            Node::start(
                dir,
                &[
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    master.port.to_string(),
                ],
            )
        })
        .collect();
    wait_until("replication", Duration::from_secs(10), || {
        replicas.iter().all(|r| {
            r.cmd(&["INFO", "replication"])
                .is_some_and(|i| i.contains("master_link_status:up"))
        })
    });
    replicas
}

/// A master, `replicas` replicas of it and three Sentinels that take it
/// for down after `down_after_ms`, once every Sentinel sees every replica:
/// the master, the replicas, the Sentinels.
pub fn sentinel_group(
    dir: &Path,
    replicas: usize,
    down_after_ms: u64,
) -> (Node, Vec<Node>, Vec<Node>) {
    let master = Node::start(dir, &[]);
    let replicas = replicas_of(dir, &master, replicas);
    let sentinels: Vec<Node> = (0..3)
        .map(|_| Node::sentinel_after(dir, master.port, down_after_ms))
        .collect();
    wait_until(
        "sentinels to see the replicas",
        Duration::from_secs(15),
        || {
            sentinels.iter().all(|s| {
                s.cmd(&["SENTINEL", "replicas", "waitgate"])
                    .is_some_and(|r| {
                        replicas
                            .iter()
                            .all(|replica| r.contains(&replica.port.to_string()))
                    })
            })
        },
    );
    (master, replicas, sentinels)
}

/// Three masters with one replica each, on loopback.
pub struct Cluster {
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Three masters with `replicas` replicas each.
    pub fn start(replicas: usize) -> Cluster {
        Cluster::start_with_timeout(replicas, 1000)
    }

    /// With `cluster-node-timeout` at `node_timeout_ms`.
    pub fn start_with_timeout(replicas: usize, node_timeout_ms: u64) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<Node> = (0..3 * (1 + replicas))
            .map(|_| {
                // A cluster node also listens on its port + 10000 (the
                // cluster bus): both must be free, and the bus port below
                // the ephemeral range too (from 32768 here), where no
                // socket bound to port 0 can take it.
                let port = std::iter::repeat_with(free_port)
                    .take(10_000)
                    .find(|p| {
                        *p < 22_768
                            && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok()
                    })
                    .expect("a port whose cluster bus port is free");
                Node::start_on(
                    port,
                    dir.path(),
                    &[
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-config-file".into(),
                        format!("nodes-{port}.conf"),
                        "--cluster-node-timeout".into(),
                        node_timeout_ms.to_string(),
                        // Fail over however long a replica was cut off: the
                        // test checks what was lost, rather than refusing.
                        "--cluster-replica-validity-factor".into(),
                        "0".into(),
                    ],
                )
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        wait_until("the cluster", Duration::from_secs(20), || {
            nodes.iter().all(|n| {
                n.cmd(&["CLUSTER", "INFO"])
                    .is_some_and(|i| i.contains("cluster_state:ok"))
            })
        });
        // Every replica has synced with its master: a failover before that
        // would have nothing to promote.
        wait_until("the replicas to sync", Duration::from_secs(30), || {
            nodes.iter().all(|n| {
                n.cmd(&["INFO", "replication"]).is_some_and(|i| {
                    i.contains("role:master") || i.contains("master_link_status:up")
                })
            })
        });
        Cluster { nodes, _dir: dir }
    }

    /// The node that is master of `key`'s slot now, as a live node sees
    /// the cluster.
    pub fn master_of(&self, key: &str) -> usize {
        let live = self.nodes.iter().find(|n| n.is_up()).unwrap();
        let slot: u16 = live
            .cmd(&["CLUSTER", "KEYSLOT", key])
            .unwrap()
            .parse()
            .unwrap();
        let nodes = live.cmd(&["CLUSTER", "NODES"]).unwrap();
        let port = nodes
            .lines()
            .find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let flags = fields.get(2)?;
                if !flags.contains("master") || flags.contains("fail") {
                    return None;
                }
                let serves = fields.iter().skip(8).any(|range| {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if lo <= slot && slot <= hi)
                });
                let addr = fields.get(1)?.split('@').next()?;
                serves.then(|| addr.rsplit(':').next()?.parse::<u16>().ok()).flatten()
            })
            .expect("a master serves the slot");
        self.nodes.iter().position(|n| n.port == port).unwrap()
    }

    /// `ZCARD` on whichever live node has the key, following the cluster.
    pub fn zcard(&self, key: &str) -> u64 {
        let Some(node) = self.nodes.iter().find(|n| n.is_up()) else {
            return 0;
        };
        Command::new("redis-cli")
            .args(["-c", "-p", &node.port.to_string(), "ZCARD", key])
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(0)
    }

    /// `ZSCORE` on whichever live node has the key, following the cluster.
    pub fn zscore(&self, key: &str, member: &str) -> Option<String> {
        let node = self.nodes.iter().find(|n| n.is_up())?;
        let out = Command::new("redis-cli")
            .args(["-c", "-p", &node.port.to_string(), "ZSCORE", key, member])
            .output()
            .ok()?;
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}
