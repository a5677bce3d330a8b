//! Highly available Redis, for real, on loopback (the harness is in
//! `common::ha`): a master, a replica and
//! three Sentinels; a Cluster of three masters with a replica each. The
//! master that holds the queue is killed under a steady stream of
//! registrations, and the test measures what users saw and what was lost:
//!
//! - seconds from the kill until the queue API answered again;
//! - acknowledged registrations (a 200 with a credential) missing after the
//!   failover, with `redis.wait-replicas: 0` and `1`;
//! - no user admitted twice, and admission working after the failover with
//!   no restart.
//!
//! Every figure is printed (`--success-output immediate` shows them).

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::ha::*;
use common::*;

/// What a stream of registrations and polls saw across a failover.
struct Run {
    acknowledged: Vec<String>,
    /// From the kill to the first success of a request sent after it: when
    /// the queue API answered again.
    back: Duration,
    failures: usize,
    /// Failed requests more than a second after `back`, and all requests
    /// in that stretch: the API must stay back, not flap.
    late_failures: usize,
    late_requests: usize,
    /// Successes and failures per half second from the kill (by when the
    /// request was sent), shown when a promise is broken.
    timeline: String,
}

/// The acknowledged users; for every request, when it was sent, when it
/// was answered and whether it succeeded; and the failures.
type Stream = (Vec<String>, Vec<(Instant, Instant, bool)>, usize);

/// From 4 clients until `stop`, each registers a new user and then polls
/// the place of the last user it had acknowledged, noting every
/// acknowledged user and every request's outcome.
fn register_stream(
    addr: SocketAddr,
    queue: &'static str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Stream> {
    std::thread::spawn(move || {
        let clients: Vec<_> = (0..4)
            .map(|t| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let (mut acked, mut times, mut failures) = (Vec::new(), Vec::new(), 0);
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let user = format!("{queue}_{t}_{i}");
                        i += 1;
                        let body =
                            serde_json::json!({ "userId": user, "queue": queue }).to_string();
                        let sent = Instant::now();
                        let ok = match post_json(addr, "/api/v1/queue/register", &body) {
                            Ok(r) if r.status == 200 && r.json()["queueCredential"].is_string() => {
                                acked.push(user);
                                true
                            }
                            Ok(r) if r.status == 503 => false,
                            Ok(r) => panic!("unexpected answer: {r:?}"),
                            Err(_) => false,
                        };
                        times.push((sent, Instant::now(), ok));
                        failures += usize::from(!ok);
                        let Some(last) = acked.last() else { continue };
                        let sent = Instant::now();
                        // A user a failover lost is 404: an answer, and
                        // counted as lost by the caller.
                        let ok = match get(
                            addr,
                            &format!("/api/v1/queue/rank?userId={last}&queue={queue}"),
                        ) {
                            Ok(r) if [200, 404].contains(&r.status) => true,
                            Ok(r) if r.status == 503 => false,
                            Ok(r) => panic!("unexpected answer: {r:?}"),
                            Err(_) => false,
                        };
                        times.push((sent, Instant::now(), ok));
                        failures += usize::from(!ok);
                    }
                    (acked, times, failures)
                })
            })
            .collect();
        let mut all = (Vec::new(), Vec::new(), 0);
        for c in clients {
            let (a, t, f) = c.join().unwrap();
            all.0.extend(a);
            all.1.extend(t);
            all.2 += f;
        }
        all.1.sort();
        all
    })
}

/// Runs the stream, kills `victim` after a second, keeps going until
/// registrations have succeeded for 2 s after the outage (at most 30 s).
fn failover(wg: &Waitgate, queue: &'static str, victim: &mut Node) -> Run {
    let addr = wg.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let stream = register_stream(addr, queue, stop.clone());
    std::thread::sleep(Duration::from_secs(1));
    // From when the master is gone (kill waits for the process to end), so
    // that every request sent later reached whoever serves next.
    victim.kill();
    let killed = Instant::now();
    // Until the API answers again (a probe every 100 ms or so), and then
    // 2 s more.
    let back = eventually(Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_millis(100));
        let ok = post_json(
            addr,
            "/api/v1/queue/register",
            &serde_json::json!({ "userId": format!("probe-{}", killed.elapsed().as_millis()), "queue": queue }).to_string(),
        )
        .is_ok_and(|r| r.status == 200);
        ok && killed.elapsed() > Duration::from_secs(2)
    });
    if !back {
        let log = wg.log();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        panic!(
            "the queue API did not come back within 30 s; the log ends:\n{}",
            tail.join("\n")
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let (acknowledged, times, failures) = stream.join().unwrap();
    // Requests sent after the kill, by when they were sent (a request under
    // way at the kill may still have been answered by the old master).
    let after_kill: Vec<(Duration, Duration, bool)> = times
        .iter()
        .filter(|(sent, _, _)| *sent >= killed)
        .map(|(sent, answered, ok)| {
            (
                sent.duration_since(killed),
                answered.duration_since(killed),
                *ok,
            )
        })
        .collect();
    // The first answer to succeed; none at all shows as never back.
    let back = after_kill
        .iter()
        .filter(|(_, _, ok)| *ok)
        .map(|(_, answered, _)| *answered)
        .min()
        .unwrap_or(Duration::MAX);
    let late: Vec<bool> = after_kill
        .iter()
        .filter(|(sent, _, _)| *sent > back.saturating_add(Duration::from_secs(1)))
        .map(|(_, _, ok)| *ok)
        .collect();
    let mut buckets = std::collections::BTreeMap::<u128, (u32, u32)>::new();
    for (sent, _, ok) in &after_kill {
        let bucket = buckets.entry(sent.as_millis() / 500).or_default();
        if *ok {
            bucket.0 += 1;
        } else {
            bucket.1 += 1;
        }
    }
    let timeline = buckets
        .iter()
        .map(|(b, (ok, failed))| format!("{:.1}s {ok}/{failed}", *b as f64 / 2.0))
        .collect::<Vec<_>>()
        .join(", ");
    Run {
        acknowledged,
        back,
        failures,
        late_failures: late.iter().filter(|ok| !**ok).count(),
        late_requests: late.len(),
        timeline,
    }
}

/// The acknowledged users that Redis no longer has, waiting or active.
fn lost(acknowledged: &[String], mut present: impl FnMut(&str) -> bool) -> usize {
    acknowledged.iter().filter(|u| !present(u)).count()
}

/// Starts waitgate on ports of its own with `redis_section` and `queues`
/// (YAML text) in its config.
fn start_waitgate(redis_section: &str, queues: &str) -> Waitgate {
    let ports = Ports::new();
    let config = format!(
        "listen: 127.0.0.1:{}\nadmin-listen: 127.0.0.1:{}\nthreads: 2\n{redis_section}\
         queues:\n{queues}upstreams: {{}}\nroutes: []\nlog: {{filter: 'warn,waitgate=info'}}\n",
        ports.listen, ports.admin
    );
    Waitgate::start(&config, &ports)
}

/// The `redis` section of Sentinel mode through `sentinels`, for the
/// master `master_name`, a command timeout of 300 ms, and the keys of
/// `more` (each a line of its own).
fn sentinel_redis(sentinels: &[Node], master_name: &str, more: &str) -> String {
    let urls: Vec<String> = sentinels.iter().map(Node::url).collect();
    format!(
        "redis:\n  mode: sentinel\n  sentinels: [{}]\n  master-name: {master_name}\n  command-timeout-ms: 300\n{more}",
        urls.join(", ")
    )
}

/// A master, `replicas` replicas and three Sentinels; waitgate on top.
/// Kills the master under load and reports, for `wait_replicas`.
fn sentinel_failover(wait_replicas: u64, replicas: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (mut master, replicas, sentinels) = sentinel_group(dir.path(), replicas, 1000);
    let wg = start_waitgate(
        &sentinel_redis(
            &sentinels,
            "waitgate",
            &format!("  wait-replicas: {wait_replicas}\n  wait-timeout-ms: 500\n"),
        ),
        "  baseball:\n    admission: {interval-ms: 200, batch-size: 5}\n    heartbeat: {timeout-ms: 60000, cleanup-interval-ms: 200}\n",
    );
    wait_until(
        "waitgate to reach the master",
        Duration::from_secs(10),
        || register(wg.addr, "warm-up").status == 200,
    );

    let run = failover(&wg, "baseball", &mut master);
    // The new master, as the Sentinels name it now.
    let addr = sentinels[0]
        .cmd(&["SENTINEL", "get-master-addr-by-name", "waitgate"])
        .unwrap();
    let new_port: u16 = addr.lines().nth(1).unwrap().trim().parse().unwrap();
    let replica = replicas
        .iter()
        .find(|r| r.port == new_port)
        .expect("a replica was promoted");
    let lost = lost(&run.acknowledged, |user| {
        ["queue:{baseball}:waiting", "queue:{baseball}:active"]
            .iter()
            .any(|key| {
                replica
                    .cmd(&["ZSCORE", key, user])
                    .is_some_and(|s| !s.is_empty())
            })
    });
    let topology = format!("sentinel failover, {} replica(s)", replicas.len());
    judge(&topology, wait_replicas, &run, lost, &wg, |key| {
        replica
            .cmd(&["ZCARD", key])
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    });
}

/// Prints a failover's figures and holds it to the promises: back within
/// 15 s, the gate admitting afterwards, and with `WAIT` nothing
/// acknowledged lost and nobody admitted twice.
fn judge(
    topology: &str,
    wait_replicas: u64,
    run: &Run,
    lost: usize,
    wg: &Waitgate,
    zcard: impl Fn(&str) -> u64,
) {
    println!(
        "{topology}, wait-replicas {wait_replicas}: queue API back {:.2} s after the master was killed; \
         {} registrations acknowledged, {lost} of them lost; {} failed registrations and polls (503) meanwhile; \
         {} of the {} requests from a second after recovery failed",
        run.back.as_secs_f64(),
        run.acknowledged.len(),
        run.failures,
        run.late_failures,
        run.late_requests,
    );
    if wait_replicas > 0 {
        assert_eq!(
            lost, 0,
            "with WAIT no acknowledged registration may be lost"
        );
    }
    assert!(
        run.back < Duration::from_secs(15),
        "back after {:?}; successes/failures per half second: {}",
        run.back,
        run.timeline
    );
    // Once back, the API stays back. A write that a busy replica does not
    // confirm within `wait-timeout-ms` is an honest 503 now and then on a
    // loaded machine; a flapping master would fail far more than 2%.
    assert!(
        run.late_failures * 50 <= run.late_requests,
        "{} of {} requests failed after recovery; successes/failures per half second: {}",
        run.late_failures,
        run.late_requests,
        run.timeline
    );
    let (admitted, active) = admission_survives(wg, zcard);
    if wait_replicas > 0 {
        assert!(
            admitted <= active,
            "admitted {admitted} times for {active} users"
        );
    }
}

/// After the failover the gate goes on admitting, with no restart: the
/// active set grows by the batch every window. And nobody was admitted
/// twice: every admission this instance counted (`waitgate_admitted_total`)
/// is one distinct user in the active set (nobody expires or leaves during
/// the test), so an admission lost in the failover and made again would
/// show as a count above the set. Returns (admissions counted, active).
fn admission_survives(wg: &Waitgate, zcard: impl Fn(&str) -> u64) -> (u64, u64) {
    // Enough waiting for the 2 s below (5 a window of 200 ms), however few
    // registrations a slow machine made during the failover: the admitter
    // may have taken them all already.
    for i in 0..60 {
        let body = serde_json::json!({ "userId": format!("later-{i}"), "queue": "baseball" });
        let r = post_json(wg.addr, "/api/v1/queue/register", &body.to_string()).unwrap();
        assert_eq!(r.status, 200, "{r:?}");
    }
    let before = zcard("queue:{baseball}:active");
    std::thread::sleep(Duration::from_secs(2));
    let after = zcard("queue:{baseball}:active");
    println!("admission after the failover: {before} -> {after} active in 2 s");
    assert!(after >= before + 5, "{before} -> {after}");
    // The count, read between two reads of the set.
    let low = zcard("queue:{baseball}:active");
    let metrics = get(wg.admin, "/metrics").unwrap().text();
    let high = zcard("queue:{baseball}:active");
    let sample = |text: &str, series: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let admitted = sample(&metrics, "waitgate_admitted_total{queue=\"baseball\"}");
    // An admission whose `WAIT` fell short (or whose answer was lost with
    // the master) is counted as a failed call, not as admitted, though
    // Redis may have made it: each such call admits at most a batch.
    let unconfirmed = sample(&metrics, "waitgate_redis_errors_total{op=\"admit\"}");
    println!(
        "admissions counted {admitted} (and {unconfirmed} failed admission calls), users active {low}..{high}"
    );
    assert!(
        admitted + 5 * unconfirmed >= low,
        "counted {admitted} with {unconfirmed} failed calls < active {low}"
    );
    // The cleanup runs every 200 ms: over a second after the failover its
    // Redis calls all succeed.
    let cleanup_errors = |text: &str| sample(text, "waitgate_redis_errors_total{op=\"cleanup\"}");
    let first = cleanup_errors(&get(wg.admin, "/metrics").unwrap().text());
    std::thread::sleep(Duration::from_secs(1));
    let second = cleanup_errors(&get(wg.admin, "/metrics").unwrap().text());
    println!("cleanup errors: {first} during the failover, none in the second after ({second})");
    assert_eq!(first, second, "the cleanup still fails after the failover");
    (admitted, high)
}

#[test]
fn a_sentinel_failover_is_survived_and_measured() {
    sentinel_failover(0, 1);
}

/// `WAIT 1` needs a replica left after the failover, so the master starts
/// with two: with one, the promoted master has none and every write is
/// refused (503) until a replica joins it, by design.
#[test]
fn with_wait_a_sentinel_failover_loses_no_acknowledged_registration() {
    sentinel_failover(1, 2);
}

/// Stops (or lets go on) a process, as a replica that falls behind.
fn signal(node: &Node, signal: &str) {
    signal_pid(node.pid(), signal);
}

/// A `WAIT` may take all of `wait-timeout-ms`, which may be longer than
/// `command-timeout-ms`: a replica that confirms late but within the wait
/// makes the write a success, and one that never confirms is the 503 of
/// too few replicas once the wait is over, not a Redis taken for silent at
/// the command timeout.
#[test]
fn a_wait_longer_than_the_command_timeout_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let master = Node::start(dir.path(), &[]);
    let replica = replicas_of(dir.path(), &master, 1).remove(0);
    let wg = start_waitgate(
        &format!(
            // Not coalesced: the registrations below are writes at once.
            "redis:\n  url: {}\n  command-timeout-ms: 200\n  wait-replicas: 1\n  wait-timeout-ms: 1500\n  coalesce: false\n",
            master.url()
        ),
        "  q:\n    admission: {max-active: 1}\n",
    );
    wait_until("waitgate to reach Redis", Duration::from_secs(10), || {
        register(wg.addr, "warm-up").status == 200
    });

    let leaver = register_new(wg.addr, "leaver");
    let leaver_2 = register_new(wg.addr, "leaver-2");

    // The replica stops, and goes on 600 ms later: the write waits for it.
    signal(&replica, "-STOP");
    let resume = std::thread::spawn({
        let pid = replica.pid();
        move || {
            std::thread::sleep(Duration::from_millis(600));
            signal_pid(pid, "-CONT");
        }
    });
    // Several writes at once each wait for it (no write waits behind
    // another's WAIT), a dropout among them.
    let started = Instant::now();
    let addr = wg.addr;
    let others: Vec<_> = (0..3)
        .map(|i| std::thread::spawn(move || register(addr, &format!("confirmed-late-{i}"))))
        .collect();
    let leaving = std::thread::spawn(move || dropout(addr, "leaver", &leaver));
    let late = register(wg.addr, "confirmed-late");
    let took = started.elapsed();
    resume.join().unwrap();
    assert_eq!(late.status, 200, "{}", late.text());
    assert!(
        took >= Duration::from_millis(500),
        "answered after {took:?}"
    );
    for other in others {
        let other = other.join().unwrap();
        assert_eq!(other.status, 200, "{}", other.text());
    }
    let left = leaving.join().unwrap();
    assert_eq!(left.status, 204, "{}", left.text());

    // A replica that stays stopped: too few replicas, after the wait. And
    // while a write waits, polls are answered as ever: the wait holds up
    // no call that does not wait.
    signal(&replica, "-STOP");
    let logged = wg.log().len();
    let started = Instant::now();
    let addr = wg.addr;
    let waiting = std::thread::spawn(move || register(addr, "never-confirmed"));
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..5 {
        let polled = Instant::now();
        let poll = rank(wg.addr, "confirmed-late");
        assert_eq!(poll.status, 200, "{}", poll.text());
        assert!(
            polled.elapsed() < Duration::from_millis(500),
            "a poll took {:?} while a write waited",
            polled.elapsed()
        );
    }
    let never = waiting.join().unwrap();
    let took = started.elapsed();
    assert_eq!(never.status, 503, "{}", never.text());
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_millis(3000),
        "answered after {took:?}"
    );
    // A dropout removes the user, and no replica has it: 503. Its retry
    // finds nobody to remove and writes nothing, on another connection
    // than the first try's: still no replica has the removal, so it is
    // still no success (a `WAIT` for that connection's own writes would
    // say every replica has them).
    let first_try = dropout(wg.addr, "leaver-2", &leaver_2);
    assert_eq!(first_try.status, 503, "{}", first_try.text());
    let retry = dropout(wg.addr, "leaver-2", &leaver_2);
    signal(&replica, "-CONT");
    assert_eq!(retry.status, 503, "{}", retry.text());
    // It was the replicas' answer, not a cut-off call.
    let log = wg.log()[logged..].to_string();
    assert!(
        log.contains("the write reached 0 of 1 replicas in time"),
        "{log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("cause=\"register\"") && l.contains("no answer within")),
        "{log}"
    );
    // Redis itself answered all along: the next write goes through.
    wait_until("the replica to catch up", Duration::from_secs(10), || {
        register(wg.addr, "afterwards").status == 200
    });
}

fn cluster_failover(wait_replicas: u64, replicas: usize) {
    let mut cluster = Cluster::start(replicas);
    let seeds: Vec<String> = cluster.nodes.iter().map(Node::url).collect();
    let queues: String = ["baseball", "soccer", "tennis", "golf"]
        .iter()
        .map(|q| {
            format!(
                "  {q}:\n    admission: {{interval-ms: 200, batch-size: 5}}\n    heartbeat: {{timeout-ms: 60000, cleanup-interval-ms: 200}}\n"
            )
        })
        .collect();
    let wg = start_waitgate(
        &format!(
            "redis:\n  mode: cluster\n  nodes: [{}]\n  command-timeout-ms: 300\n  wait-replicas: {wait_replicas}\n  wait-timeout-ms: 500\n",
            seeds.join(", ")
        ),
        &queues,
    );
    // The queues live on different masters, and every one works.
    let owners: BTreeSet<usize> = ["baseball", "soccer", "tennis", "golf"]
        .iter()
        .map(|q| cluster.master_of(&format!("queue:{{{q}}}:waiting")))
        .collect();
    println!("4 queues over {} of the 3 masters", owners.len());
    assert!(owners.len() >= 2, "{owners:?}");
    for q in ["baseball", "soccer", "tennis", "golf"] {
        let body = serde_json::json!({ "userId": format!("first-{q}"), "queue": q }).to_string();
        wait_until("a registration", Duration::from_secs(10), || {
            post_json(wg.addr, "/api/v1/queue/register", &body).is_ok_and(|r| r.status == 200)
        });
    }

    let victim = cluster.master_of("queue:{baseball}:waiting");
    let run = failover(&wg, "baseball", &mut cluster.nodes[victim]);
    let lost = lost(&run.acknowledged, |user| {
        ["queue:{baseball}:waiting", "queue:{baseball}:active"]
            .iter()
            .any(|key| cluster.zscore(key, user).is_some_and(|s| !s.is_empty()))
    });
    let topology = format!("cluster failover, {replicas} replica(s) per master");
    judge(&topology, wait_replicas, &run, lost, &wg, |key| {
        cluster.zcard(key)
    });
}

#[test]
fn a_cluster_failover_is_survived_and_measured() {
    cluster_failover(0, 1);
}

/// As with Sentinel, `WAIT 1` needs a replica left: two per master.
#[test]
fn with_wait_a_cluster_failover_loses_no_acknowledged_registration() {
    cluster_failover(1, 2);
}

/// What `WAIT 1` after each write costs: register throughput against a
/// master with one replica, with and without it, in the same run.
#[test]
fn what_waiting_for_a_replica_costs_in_register_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let master = Node::start(dir.path(), &[]);
    let _replica = replicas_of(dir.path(), &master, 1).remove(0);
    let mut rates = Vec::new();
    for wait in [0, 1] {
        let wg = start_waitgate(
            &format!(
                "redis:\n  url: {}\n  wait-replicas: {wait}\n  wait-timeout-ms: 200\n",
                master.url()
            ),
            &format!("  q{wait}:\n    admission: {{max-active: 1}}\n"),
        );
        let counted = Arc::new(Mutex::new(0usize));
        let until = Instant::now() + Duration::from_secs(2);
        let clients: Vec<_> = (0..4)
            .map(|t| {
                let (addr, counted) = (wg.addr, counted.clone());
                std::thread::spawn(move || {
                    let mut client = Client::connect(addr);
                    let mut i = 0;
                    while Instant::now() < until {
                        let body = format!(r#"{{"userId":"w{wait}_{t}_{i}"}}"#);
                        client.send(&format!(
                            "POST /api/v1/queue/register HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        ));
                        assert_eq!(client.response().0.status, 200);
                        i += 1;
                    }
                    *counted.lock().unwrap() += i;
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        let rate = *counted.lock().unwrap() as f64 / 2.0;
        rates.push(rate);
    }
    println!(
        "register throughput, 4 kept-alive clients, debug build, one replica: {:.0}/s without WAIT, {:.0}/s with WAIT 1 ({:.2}x)",
        rates[0],
        rates[1],
        rates[1] / rates[0]
    );
    assert!(rates[1] > 0.0);
}

/// Sentinels that know no master of the configured name are Redis being
/// unreachable, not Redis answering with an error: each call is a fast 503,
/// and the failures are one warning a second with a count, not an error
/// line per call.
#[test]
fn a_master_name_the_sentinels_do_not_know_is_an_outage_logged_once_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let master = Node::start(dir.path(), &[]);
    let sentinels: Vec<Node> = (0..3)
        .map(|_| Node::sentinel(dir.path(), master.port))
        .collect();
    let wg = start_waitgate(
        &sentinel_redis(&sentinels, "nosuch", ""),
        "  baseball: {}\n",
    );
    let started = Instant::now();
    for i in 0..30 {
        let r = register(wg.addr, &format!("u{i}"));
        assert_eq!(r.status, 503, "{r:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(1200));
    let log = wg.log();
    let lines = log
        .lines()
        .filter(|l| l.contains("redis call failed") && l.contains("register"))
        .count();
    assert!((1..=12).contains(&lines), "30 calls, {lines} lines:\n{log}");
    assert!(!log.contains("ERROR"), "{log}");
}
