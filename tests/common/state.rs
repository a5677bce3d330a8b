//! Queue state set by hand in a test's Redis: the gate held, users admitted,
//! a queue given its state, credentials made as waitgate makes them.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use super::*;

// ---------------------------------------------------------------------------
// Watching admission in queue `baseball`

pub const WAITING_KEY: &str = "queue:{baseball}:waiting";
pub const ACTIVE_KEY: &str = "queue:{baseball}:active";
pub const CREDENTIAL_KEY: &str = "queue:{baseball}:credential";

/// Queue `baseball`'s waiting and active users, each in order, in one
/// atomic read: admission moves users between them meanwhile, and two
/// reads could see one in both or in neither.
pub fn waiting_and_active(c: &mut redis::Connection) -> (Vec<String>, Vec<String>) {
    redis::pipe()
        .atomic()
        .zrange(WAITING_KEY, 0, -1)
        .zrange(ACTIVE_KEY, 0, -1)
        .query(c)
        .unwrap()
}

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

/// `count` instances on `redis` whose queue `baseball` admits `batch` a
/// window of `interval_ms`, each admission good for `ttl_ms`.
pub fn admitting_instances(
    redis: &Redis,
    count: usize,
    interval_ms: u64,
    batch: u64,
    ttl_ms: u64,
) -> Vec<Waitgate> {
    let queue = format!(
        "baseball:\n  admission: {{interval-ms: {interval_ms}, batch-size: {batch}, active-ttl-ms: {ttl_ms}}}"
    );
    (0..count)
        .map(|_| {
            TestConfig::on_free_ports(&redis.url(), free_port())
                .queues(&queue)
                .start()
        })
        .collect()
}

/// Registers `users` users (`prefix` and a number) across `instances` in
/// turn, under a held gate ([`hold_gate`]), then releases it.
pub fn register_across(redis: &Redis, instances: &[Waitgate], prefix: &str, users: usize) {
    hold_gate(redis);
    for i in 0..users {
        let wg = &instances[i % instances.len()];
        let r = register(wg.addr, &format!("{prefix}{i:03}"));
        assert_eq!(r.status, 200, "{r:?}");
    }
    release_gate(redis);
}

/// Waits until nobody waits in queue `baseball`, checking on every look
/// (one atomic read of both sets) that all `users` are in exactly one of
/// them. Returns how long that took.
pub fn wait_until_all_admitted(redis: &Redis, users: usize, limit: Duration) -> Duration {
    let mut c = redis.conn();
    let start = Instant::now();
    let mut waiting = 0;
    let all = eventually(limit, || {
        let active: u64;
        (waiting, active) = redis::pipe()
            .atomic()
            .zcard(WAITING_KEY)
            .zcard(ACTIVE_KEY)
            .query(&mut c)
            .unwrap();
        assert_eq!(waiting + active, users as u64, "nobody lost or doubled");
        waiting == 0
    });
    assert!(all, "{waiting} still waiting after {limit:?}");
    start.elapsed()
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
    .key(CREDENTIAL_KEY)
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

/// `lua/register.lua` with the library before it, for tests that call
/// the script themselves.
pub const REGISTER_LUA: &str = concat!(
    include_str!("../../lua/lib.lua"),
    "\n",
    include_str!("../../lua/register.lua")
);

/// Queue `q`'s keys in the order `lua/register.lua` takes them.
pub fn register_keys(q: &str) -> [String; 13] {
    let k = waitgate::store::QueueKeys::new(q);
    [
        k.waiting,
        k.heartbeat,
        k.credential,
        k.active,
        k.admission,
        k.control,
        k.prequeue,
        k.due,
        k.dues,
        k.proofs,
        k.numbering,
        k.marks,
        k.arrivals,
    ]
}

/// An `EVAL` of `script` (a `register.lua`) on queue `q`'s keys; the
/// caller adds the arguments.
pub fn register_eval(script: &str, q: &str) -> redis::Cmd {
    let mut call = redis::cmd("EVAL");
    call.arg(script).arg(13).arg(&register_keys(q)[..]);
    call
}

/// A credential as waitgate issues it (with the test secret) for a
/// registration of `user` in queue `baseball` at `arrival`: well made, so a
/// refusal can only come from Redis's answer.
pub fn credential_for(user: &str, arrival: u64) -> String {
    let secret = waitgate::edge::secret::Secret::from_base64(SECRET_B64).unwrap();
    waitgate::queue_api::credential::Credentials::new(&secret)
        .issue("baseball", user, arrival, None)
}
