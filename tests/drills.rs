//! Failover drills: a crowd of waiting clients that behave like the page
//! (they poll at `pollAfterMs` and back off 1, 2, 4, then 8 s on a 503 or
//! no answer) while Redis has an incident, and admission runs under a
//! `max-active` cap. Each drill reports places lost, users admitted twice,
//! how far the cap was exceeded, and how long requests failed; the target
//! is 0 / 0 / 0.
//!
//! - a standalone Redis with an AOF, killed and restarted after an outage;
//! - a Sentinel failover;
//! - a Cluster master killed.
//!
//! CI runs them shortened. The figures in docs/performance.md come from
//! longer runs with more clients, by environment:
//! `WAITGATE_DRILL_CLIENTS` (default 300), `WAITGATE_DRILL_OUTAGE_S` (the
//! standalone outage, default 10), `WAITGATE_DRILL_DOWN_AFTER_MS` (the
//! Sentinels' `down-after-milliseconds`, default 5000; Redis's own is
//! 30000) and `WAITGATE_DRILL_NODE_TIMEOUT_MS` (the Cluster's
//! `cluster-node-timeout`, default 2000).

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ha::*;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const MAX_ACTIVE: u64 = 40;

/// The drilled queue: a heartbeat timeout of 3 s (a tenth of an outage),
/// admission of 5 a second up to 40 active, who stay active longer than
/// the drill.
const QUEUE: &str = "  baseball:
    heartbeat: {timeout-ms: 3000, poll-min-ms: 1000, poll-max-ms: 5000, cleanup-interval-ms: 1000}
    admission: {interval-ms: 1000, batch-size: 5, max-active: 40, active-ttl-ms: 600000}
";

/// What one client saw.
#[derive(Debug, Default, Clone)]
struct Fate {
    user: String,
    /// Told its place was gone (404).
    told_gone: usize,
    /// Told it was admitted.
    active: bool,
    /// When its requests failed (503 or no answer), from the drill's start.
    failed_at: Vec<Duration>,
    /// Its last answered poll, from the drill's start, and the advice.
    last_ok: Option<(Duration, u64)>,
    /// Its first answered poll after the incident began.
    back_at: Option<Duration>,
}

/// One HTTP/1.1 request with `Connection: close` (a GET with the
/// credential, or a POST of `body`): the status and body.
async fn ask(
    addr: SocketAddr,
    target: &str,
    credential: &str,
    body: Option<&str>,
) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = match body {
            None => format!(
                "GET {target} HTTP/1.1\r\nHost: {addr}\r\nX-Queue-Credential: {credential}\r\nConnection: close\r\n\r\n"
            ),
            Some(body) => format!(
                "POST {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        };
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text.get(9..12)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n")?.1.to_string();
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

/// A client that joins (within the first `spread`), then polls as the page
/// does until admitted or stopped.
async fn client(
    addrs: Vec<SocketAddr>,
    user: String,
    spread: Duration,
    joined: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    start: Instant,
    incident_ms: Arc<AtomicU64>,
) -> Fate {
    let mut fate = Fate {
        user: user.clone(),
        ..Fate::default()
    };
    tokio::time::sleep(Duration::from_millis(rand_ms(spread.as_millis() as u64))).await;
    let body = serde_json::json!({ "queue": "baseball", "userId": user }).to_string();
    let credential = loop {
        if let Some((200, answer)) = ask(addrs[0], "/api/v1/queue/register", "", Some(&body)).await
        {
            let v: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
            break v["queueCredential"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    joined.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(rand_ms(1000))).await;
    let mut failures = 0u32;
    let mut turn = rand_ms(1000) as usize;
    while !stop.load(Ordering::Relaxed) {
        let addr = addrs[turn % addrs.len()];
        turn += 1;
        let target = format!("/api/v1/queue/rank?queue=baseball&userId={user}");
        let wait = match ask(addr, &target, &credential, None).await {
            Some((200, body)) => {
                failures = 0;
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                if v["status"] == "ACTIVE" {
                    fate.active = true;
                    return fate;
                }
                let advice = v["pollAfterMs"].as_u64().unwrap_or(1000);
                let now = start.elapsed();
                fate.last_ok = Some((now, advice));
                let incident = incident_ms.load(Ordering::Relaxed);
                if fate.back_at.is_none() && incident > 0 && now.as_millis() as u64 > incident {
                    fate.back_at = Some(now);
                }
                advice
            }
            Some((404, _)) => {
                fate.told_gone += 1;
                1000
            }
            _ => {
                fate.failed_at.push(start.elapsed());
                failures += 1;
                1000 << (failures.min(4) - 1)
            }
        };
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    fate
}

fn rand_ms(max: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(max);
    h.finish() % max.max(1)
}

/// The figures of a drill.
struct Figures {
    lost: usize,
    admitted_twice: i64,
    over_cap: i64,
    /// From the incident to the last failed request.
    failing_for: Duration,
    /// From the incident to the first answered poll after it.
    back_after: Duration,
    failed_requests: usize,
}

/// Runs the crowd against `addrs`, has `incident` happen after 3 s (it
/// returns when Redis is meant to serve again), polls on for `after`,
/// then reads the outcome from `state` (a Redis that follows the queue's
/// current master).
fn drill(
    name: &str,
    wg: &Waitgate,
    clients: usize,
    incident: impl FnOnce(),
    after: Duration,
    state: impl Fn() -> redis::Connection,
) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let joined = Arc::new(AtomicUsize::new(0));
    let incident_ms = Arc::new(AtomicU64::new(0));
    // A thousand join a second, and each polls from when it joined.
    let spread = Duration::from_millis(clients as u64);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            runtime.spawn(client(
                vec![wg.addr],
                format!("d{i:05}"),
                spread,
                joined.clone(),
                stop.clone(),
                start,
                incident_ms.clone(),
            ))
        })
        .collect();
    wait_until(
        "the crowd to join",
        spread + Duration::from_secs(60),
        || joined.load(Ordering::Relaxed) == clients,
    );
    println!("{clients} joined in {:.1} s", start.elapsed().as_secs_f64());
    std::thread::sleep(Duration::from_secs(3));
    let incident_at = start.elapsed();
    incident_ms.store(incident_at.as_millis() as u64, Ordering::Relaxed);
    incident();
    std::thread::sleep(after);
    // The places as the clients stop (they finish their last wait after).
    stop.store(true, Ordering::Relaxed);
    let mut c = state();
    let waiting: BTreeSet<String> = redis::Commands::zrange(&mut c, WAITING_KEY, 0, -1).unwrap();
    let active: BTreeSet<String> = redis::Commands::zrange(&mut c, ACTIVE_KEY, 0, -1).unwrap();
    let fates: Vec<Fate> = runtime.block_on(async {
        let mut fates = Vec::new();
        for t in tasks {
            fates.push(t.await.unwrap());
        }
        fates
    });
    // (One admitted as the clients stopped, not told yet, is in `active`.)
    let lost = fates
        .iter()
        .filter(|f| {
            f.told_gone > 0
                || (!f.active && !waiting.contains(&f.user) && !active.contains(&f.user))
        })
        .count();
    let removed = get(wg.admin, "/metrics")
        .unwrap()
        .text()
        .lines()
        .filter(|l| l.starts_with("waitgate_cleanup_removed_total{queue=\"baseball\""))
        .map(String::from)
        .collect::<Vec<_>>();
    let gone: Vec<&Fate> = fates
        .iter()
        .filter(|f| {
            f.told_gone > 0
                || (!f.active && !waiting.contains(&f.user) && !active.contains(&f.user))
        })
        .take(5)
        .collect();
    if !gone.is_empty() {
        let marks: Vec<Option<String>> = redis::Commands::hmget(
            &mut c,
            "queue:{baseball}:admission",
            &["alive", "outages", "incident", "incident_at"][..],
        )
        .unwrap_or_default();
        let now: (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
        println!("lost, for example: {gone:?}; cleanup: {removed:?}; incident at {incident_at:?}, stopped at {:?}; redis now {} {marks:?}", start.elapsed(), now.0 * 1000 + now.1 / 1000);
    }
    let told_active: BTreeSet<&String> =
        fates.iter().filter(|f| f.active).map(|f| &f.user).collect();
    let ever_active: BTreeSet<&String> = told_active.iter().copied().chain(active.iter()).collect();
    let metrics = get(wg.admin, "/metrics").unwrap().text();
    let counted = metrics
        .lines()
        .find_map(|l| l.strip_prefix("waitgate_admitted_total{queue=\"baseball\"} "))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(0);
    // An admission counted twice is one user admitted twice.
    let admitted_twice = (counted - ever_active.len() as i64).max(0)
        + fates
            .iter()
            .filter(|f| f.active && waiting.contains(&f.user))
            .count() as i64;
    let over_cap = (ever_active.len() as i64 - MAX_ACTIVE as i64).max(0);
    let failed: Vec<Duration> = fates.iter().flat_map(|f| f.failed_at.clone()).collect();
    let failing_for = failed
        .iter()
        .max()
        .map_or(Duration::ZERO, |last| last.saturating_sub(incident_at));
    // Among the clients that waited through it, the first answer after it
    // began; answers within the first half second were in flight already.
    let back_after = fates
        .iter()
        .filter_map(|f| f.back_at)
        .filter(|at| *at > incident_at + Duration::from_millis(500))
        .min()
        .map_or(Duration::ZERO, |at| at - incident_at);
    let figures = Figures {
        back_after,
        lost,
        admitted_twice,
        over_cap,
        failing_for,
        failed_requests: failed.len(),
    };
    println!(
        "DRILL {name}: {clients} waiting clients; places lost {}, users admitted twice {}, cap exceeded by {} ({} admitted of max-active {MAX_ACTIVE}); the queue API answered again {:.1} s after the incident began, and the last failed request was at {:.1} s ({} failed requests); {} still waiting, {} told ACTIVE",
        figures.lost,
        figures.admitted_twice,
        figures.over_cap,
        ever_active.len(),
        figures.back_after.as_secs_f64(),
        figures.failing_for.as_secs_f64(),
        figures.failed_requests,
        waiting.len(),
        told_active.len(),
    );
    figures
}

fn judge(figures: &Figures, log: &str) {
    assert_eq!(figures.lost, 0, "places lost; log:\n{log}");
    assert_eq!(figures.admitted_twice, 0, "admitted twice");
    assert_eq!(figures.over_cap, 0, "cap exceeded");
}

fn config(ports: &Ports, redis_section: &str) -> String {
    format!(
        "listen: 127.0.0.1:{}\nadmin-listen: 127.0.0.1:{}\nthreads: 2\n{redis_section}\
         queues:\n{QUEUE}upstreams: {{}}\nroutes: []\nlog: {{filter: 'warn,waitgate=info,waitgate::access=warn'}}\n",
        ports.listen, ports.admin
    )
}

/// Waitgate with [`config`] on ports of its own.
fn start(redis_section: &str) -> Waitgate {
    let ports = Ports::new();
    Waitgate::start(&config(&ports, redis_section), &ports)
}

/// A connection to the Redis on `port`, to read the state after a drill.
fn connection_to(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn drill_a_standalone_redis_restarted_from_its_aof() {
    let clients = setting("WAITGATE_DRILL_CLIENTS", 300) as usize;
    let outage = Duration::from_secs(setting("WAITGATE_DRILL_OUTAGE_S", 10));
    let mut redis = Redis::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let wg = start(&format!(
        "redis:\n  url: {}\n  command-timeout-ms: 300\n",
        redis.url()
    ));
    let port = redis.port;
    let figures = drill(
        "standalone, AOF everysec",
        &wg,
        clients,
        || {
            redis.kill();
            std::thread::sleep(outage);
            redis.restart();
        },
        Duration::from_secs(18),
        || connection_to(port),
    );
    judge(&figures, &wg.log());
}

#[test]
fn drill_a_sentinel_failover() {
    let clients = setting("WAITGATE_DRILL_CLIENTS", 300) as usize;
    let down_after = setting("WAITGATE_DRILL_DOWN_AFTER_MS", 5000);
    let dir = tempfile::tempdir().unwrap();
    let (mut master, replicas, sentinels) = sentinel_group(dir.path(), 1, down_after);
    let urls: Vec<String> = sentinels.iter().map(Node::url).collect();
    let wg = start(&format!(
                "redis:\n  mode: sentinel\n  sentinels: [{}]\n  master-name: waitgate\n  command-timeout-ms: 300\n",
                urls.join(", ")
            ));
    let replica_port = replicas[0].port;
    let figures = drill(
        &format!("sentinel failover, down-after-milliseconds {down_after}"),
        &wg,
        clients,
        || {
            master.kill();
            let sentinel = &sentinels[0];
            wait_until(
                "the sentinels to promote the replica",
                Duration::from_millis(down_after + 30_000),
                || {
                    sentinel
                        .cmd(&["SENTINEL", "get-master-addr-by-name", "waitgate"])
                        .is_some_and(|a| a.contains(&replica_port.to_string()))
                },
            );
        },
        Duration::from_secs(18),
        || connection_to(replica_port),
    );
    judge(&figures, &wg.log());
}

#[test]
fn drill_a_cluster_master_killed() {
    let clients = setting("WAITGATE_DRILL_CLIENTS", 300) as usize;
    let node_timeout = setting("WAITGATE_DRILL_NODE_TIMEOUT_MS", 2000);
    let mut cluster = Cluster::start_with_timeout(1, node_timeout);
    let seeds: Vec<String> = cluster.nodes.iter().map(Node::url).collect();
    let wg = start(&format!(
        "redis:\n  mode: cluster\n  nodes: [{}]\n  command-timeout-ms: 300\n",
        seeds.join(", ")
    ));
    let victim = cluster.master_of(WAITING_KEY);
    let replica_of_victim = {
        let id = cluster.nodes[victim].cmd(&["CLUSTER", "MYID"]).unwrap();
        cluster
            .nodes
            .iter()
            .position(|n| {
                n.cmd(&["INFO", "replication"]).is_some_and(|i| {
                    i.contains(&format!("master_port:{}", cluster.nodes[victim].port))
                })
            })
            .unwrap_or_else(|| panic!("no replica of {id}"))
    };
    let replica_port = cluster.nodes[replica_of_victim].port;
    let nodes = &mut cluster.nodes;
    let figures = drill(
        &format!("cluster master killed, cluster-node-timeout {node_timeout}"),
        &wg,
        clients,
        || {
            nodes[victim].kill();
            let replica = &nodes[replica_of_victim];
            wait_until(
                "the replica promoted",
                Duration::from_millis(node_timeout * 10 + 20_000),
                || {
                    replica
                        .cmd(&["INFO", "replication"])
                        .is_some_and(|i| i.contains("role:master"))
                },
            );
        },
        Duration::from_secs(18),
        || connection_to(replica_port),
    );
    judge(&figures, &wg.log());
}
