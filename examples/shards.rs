//! The design of `docs/scale.md#ten-million-on-a-cluster`, run on three
//! Redis servers on loopback: one queue split into three sub-queues, one
//! arrival order from a ticket counter, and one admission gate that takes
//! the global head, raced by several instances, with users leaving
//! meanwhile. It checks that admission is strictly first come, first served
//! across the sub-queues, that no window admits more than the batch, and
//! that nobody is admitted twice or lost.
//!
//! ```text
//! redis-server --port 19301 --save '' --daemonize yes   # and 19302, 19303
//! cargo run --release --example shards -- 3000000 127.0.0.1:19301 127.0.0.1:19302 127.0.0.1:19303
//! ```
//! (`scripts/shards.sh` does all of it.) The first address also holds the
//! ticket counter and the gate. It prints the figures and exits non-zero if
//! a check fails.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use redis::AsyncCommands;

/// Users per registration call, admitted per window, and the instances
/// that race for each window.
const CHUNK: usize = 5_000;
const BATCH: usize = 1_000;
const INSTANCES: usize = 3;

/// Registers users in one sub-queue at the tickets given (idempotent: a
/// user already waiting keeps its ticket).
const REGISTER: &str = r"
for i = 1, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], 'NX', ARGV[i + 1], ARGV[i])
end
return #ARGV / 2";

/// The gate, on the ticket shard: decides window ARGV[1] once, recording
/// the batch (ticket:user pairs) given by the first instance to ask.
const DECIDE: &str = r"
local done = redis.call('HGET', KEYS[1], 'window')
if done and tonumber(done) >= tonumber(ARGV[1]) then
  return redis.call('HGET', KEYS[1], 'batch:' .. ARGV[1])
end
redis.call('HSET', KEYS[1], 'window', ARGV[1], 'batch:' .. ARGV[1], ARGV[2])
return ARGV[2]";

/// Carries out a decided batch in one sub-queue: moves those of the users
/// still waiting to active (idempotent).
const MOVE: &str = r"
local moved = 0
for i = 1, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('SADD', KEYS[2], ARGV[i])
    moved = moved + 1
  end
end
return moved";

fn sub_queue(user: &str, shards: usize) -> usize {
    // FNV-1a: the same shard for a user on every instance.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in user.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    (h % shards as u64) as usize
}

fn waiting(s: usize) -> String {
    format!("queue:{{big#{s}}}:waiting")
}

fn active(s: usize) -> String {
    format!("queue:{{big#{s}}}:active")
}

/// One instance's turn at a window: read every sub-queue's head, propose
/// the global smallest `BATCH` tickets, take whatever the gate decided, and
/// carry it out.
async fn admit_window(
    conns: &mut [redis::aio::MultiplexedConnection],
    window: u64,
) -> redis::RedisResult<Vec<(u64, String)>> {
    let mut candidates: Vec<(u64, String)> = Vec::new();
    for (s, c) in conns.iter_mut().enumerate() {
        let head: Vec<(String, f64)> = c
            .zrange_withscores(waiting(s), 0, BATCH as isize - 1)
            .await?;
        candidates.extend(head.into_iter().map(|(u, t)| (t as u64, u)));
    }
    candidates.sort();
    candidates.truncate(BATCH);
    let proposal: String = candidates
        .iter()
        .map(|(t, u)| format!("{t}:{u}"))
        .collect::<Vec<_>>()
        .join(",");
    let decided: String = redis::Script::new(DECIDE)
        .key("queue:{big}:gate")
        .arg(window)
        .arg(&proposal)
        .invoke_async(&mut conns[0])
        .await?;
    let batch: Vec<(u64, String)> = decided
        .split(',')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (t, u) = p.split_once(':')?;
            Some((t.parse().ok()?, u.to_string()))
        })
        .collect();
    let shards = conns.len();
    let mut by_shard: Vec<Vec<&str>> = vec![Vec::new(); shards];
    for (_, u) in &batch {
        by_shard[sub_queue(u, shards)].push(u);
    }
    let script = redis::Script::new(MOVE);
    for (s, users) in by_shard.iter().enumerate() {
        if users.is_empty() {
            continue;
        }
        let mut inv = script.prepare_invoke();
        inv.key(waiting(s)).key(active(s));
        for u in users {
            inv.arg(*u);
        }
        let _: i64 = inv.invoke_async(&mut conns[s]).await?;
    }
    Ok(batch)
}

#[tokio::main]
async fn main() -> redis::RedisResult<()> {
    let mut args = std::env::args().skip(1);
    let users: usize = args
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_000_000);
    let addrs: Vec<String> = args.collect();
    assert!(
        addrs.len() >= 2,
        "give the users and at least two redis addresses"
    );
    let shards = addrs.len();
    let mut conns = Vec::new();
    for a in &addrs {
        let client = redis::Client::open(format!("redis://{a}/"))?;
        let mut c = client.get_multiplexed_async_connection().await?;
        redis::cmd("FLUSHALL").query_async::<()>(&mut c).await?;
        conns.push(c);
    }

    // Registration: a ticket from the counter on the first shard, then the
    // user's sub-queue, a chunk at a time.
    let started = Instant::now();
    let register = redis::Script::new(REGISTER);
    for from in (0..users).step_by(CHUNK) {
        let n = CHUNK.min(users - from);
        let last: u64 = conns[0].incr("queue:{big}:ticket", n).await?;
        let first = last - n as u64 + 1;
        let mut per: Vec<Vec<(String, u64)>> = vec![Vec::new(); shards];
        for i in 0..n {
            let user = format!("u{}", from + i);
            per[sub_queue(&user, shards)].push((user, first + i as u64));
        }
        for (s, list) in per.into_iter().enumerate() {
            let mut inv = register.prepare_invoke();
            inv.key(waiting(s));
            for (u, t) in &list {
                inv.arg(u).arg(*t);
            }
            let _: i64 = inv.invoke_async(&mut conns[s]).await?;
        }
    }
    let mut sizes = Vec::new();
    for (s, c) in conns.iter_mut().enumerate() {
        let n: usize = c.zcard(waiting(s)).await?;
        sizes.push(n);
    }
    println!(
        "registered {users} users in {:.1} s over {shards} sub-queues: {sizes:?}",
        started.elapsed().as_secs_f64()
    );

    // Some users leave: 1 in 97, at random places in every sub-queue.
    let mut left = HashSet::new();
    for i in (0..users).step_by(97) {
        let user = format!("u{i}");
        let s = sub_queue(&user, shards);
        let _: i64 = conns[s].zrem(waiting(s), &user).await?;
        left.insert(user);
    }

    // Windows, each raced by INSTANCES instances at once.
    let windows = 60u64;
    let mut admitted: BTreeMap<u64, Vec<(u64, String)>> = BTreeMap::new();
    let started = Instant::now();
    for w in 1..=windows {
        let racers: Vec<_> = (0..INSTANCES)
            .map(|_| {
                let mut mine = conns.clone();
                tokio::spawn(async move { admit_window(&mut mine, w).await })
            })
            .collect();
        let mut seen = None;
        for r in racers {
            let batch = r.await.expect("an instance ran")?;
            // Every racer sees the one decision of the window.
            if let Some(previous) = &seen {
                assert_eq!(previous, &batch, "two decisions for window {w}");
            }
            seen = Some(batch);
        }
        admitted.insert(w, seen.unwrap_or_default());
    }
    let took = started.elapsed();

    // The checks: every window admitted exactly BATCH (the queue is long),
    // the tickets in admission order are the smallest remaining, strictly
    // increasing, nobody twice, nobody who left.
    let mut all = Vec::new();
    for (w, batch) in &admitted {
        assert_eq!(batch.len(), BATCH, "window {w} admitted {}", batch.len());
        all.extend(batch.iter().cloned());
    }
    let tickets: Vec<u64> = all.iter().map(|(t, _)| *t).collect();
    assert!(
        tickets.windows(2).all(|p| p[0] < p[1]),
        "not first come, first served"
    );
    let expected: Vec<u64> = (1..=users as u64)
        .filter(|t| !left.contains(&format!("u{}", t - 1)))
        .take(all.len())
        .collect();
    assert_eq!(tickets, expected, "not the global head");
    let unique: HashSet<&String> = all.iter().map(|(_, u)| u).collect();
    assert_eq!(unique.len(), all.len(), "someone admitted twice");
    let mut in_active = 0;
    for (s, c) in conns.iter_mut().enumerate() {
        let n: usize = c.scard(active(s)).await?;
        in_active += n;
    }
    assert_eq!(
        in_active,
        all.len(),
        "active sets disagree with the decisions"
    );
    println!(
        "{windows} windows raced by {INSTANCES} instances: {} admitted, {BATCH} per window, \
         strictly by ticket across {shards} sub-queues, none twice, none of the {} who left; \
         {:.1} ms per window",
        all.len(),
        left.len(),
        took.as_secs_f64() * 1000.0 / windows as f64
    );
    Ok(())
}
