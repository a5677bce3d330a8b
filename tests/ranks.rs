//! Ranks far back derived from samples of the waiting set (src/store/ranks.rs):
//! within 0.1% of the exact rank, exact near the head, and never read off
//! the samples of an earlier waiting set.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Commands;

const WAITING: &str = "queue:{baseball}:waiting";
const DUE: &str = "queue:{baseball}:due";
const DUES: &str = "queue:{baseball}:dues";

fn start(redis: &Redis) -> Waitgate {
    start_at(&redis.url())
}

fn start_at(redis_url: &str) -> Waitgate {
    let ports = Ports::new();
    let queue = "baseball:\n  admission: {max-active: 1}\n  heartbeat: {cleanup-interval-ms: 200, cleanup-batch-size: 2000}";
    let cfg = config_with(redis_url, &ports, free_port(), queue);
    Waitgate::start(&cfg, &ports)
}

/// `n` more users after `first` (registered through the API, which starts
/// the waiting set's epoch), written straight into Redis as registrations
/// would write them: arrivals `spacing` microseconds apart from `base` (or
/// from `first`'s), heartbeats due in an hour. Returns the base.
///
/// All in one transaction: a sampler never sees part of them (samples of
/// a set half written, taken on a slow machine before the rest came, end
/// short of the users a test polls).
fn fill(
    wg: &Waitgate,
    redis: &Redis,
    (first, prefix, n): (&str, &str, usize),
    base: Option<u64>,
    spacing: u64,
) -> u64 {
    assert_eq!(register(wg.addr, first).status, 200);
    let mut c = redis.conn();
    let base = base.unwrap_or_else(|| {
        let tail: Vec<(String, f64)> = c.zrange_withscores(WAITING, -1, -1).unwrap();
        tail[0].1 as u64 + 1
    });
    let due = redis.now_ms() + 3_600_000;
    let mut waiting = redis::pipe();
    waiting.atomic();
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        let (mut places, mut dues) = (Vec::new(), Vec::new());
        for &i in chunk {
            let user = format!("{prefix}{i}");
            let arrival = base + spacing * i as u64;
            dues.push((user.clone(), format!("{due}:{arrival}")));
            places.push((arrival, user));
        }
        waiting.zadd_multiple(WAITING, &places).ignore();
        waiting.hset_multiple(DUE, &dues).ignore();
    }
    let () = waiting.query(&mut c).unwrap();
    base
}

fn samples_of(wg: &Waitgate) -> f64 {
    wg.metric(r#"waitgate_rank_samples{queue="baseball"}"#)
        .unwrap_or(0.0)
}

/// [`fill`] with `head` and `n` users `u0`.. a microsecond apart, once
/// the sampler has sampled them. Returns the base.
fn fill_sampled(wg: &Waitgate, redis: &Redis, n: usize) -> u64 {
    let base = fill(wg, redis, ("head", "u", n), None, 1);
    wait_for_samples(wg, 0.0);
    base
}

/// A waitgate on a Redis of its own, with [`fill_sampled`]'s `n` users;
/// the base.
fn sampled(n: usize) -> (Redis, Waitgate, u64) {
    let redis = Redis::start();
    let wg = start(&redis);
    let base = fill_sampled(&wg, &redis, n);
    (redis, wg, base)
}

fn wait_for_samples(wg: &Waitgate, more_than: f64) {
    wait_until("samples", Duration::from_secs(15), || {
        samples_of(wg) > more_than
    });
}

/// Waits (up to 5 s) until cleanup has taken `user` out of the waiting set.
fn wait_removed(c: &mut redis::Connection, user: &str) {
    wait_until("cleanup", Duration::from_secs(5), || {
        c.zscore::<_, _, Option<f64>>(WAITING, user)
            .unwrap()
            .is_none()
    });
}

/// The API's rank of `user`, and the exact ranks just before and after it.
fn ranks_of(wg: &Waitgate, c: &mut redis::Connection, user: &str) -> (u64, u64, u64) {
    let before: u64 = c.zrank(WAITING, user).unwrap();
    let r = rank(wg.addr, user);
    assert_eq!(r.status, 200, "{}", r.text());
    let after: u64 = c.zrank(WAITING, user).unwrap();
    (r.json()["rank"].as_u64().unwrap(), before, after)
}

fn assert_within(api: u64, exact: u64, what: &str) {
    let off = api.abs_diff(exact) as f64;
    assert!(
        off <= exact as f64 * 0.001,
        "{what}: rank {api} against {exact}, {off} off"
    );
}

#[test]
fn ranks_far_back_are_derived_within_a_thousandth_and_exact_near_the_head() {
    let (redis, wg, _) = sampled(60_000);
    let mut c = redis.conn();

    // Far back, no ZRANK: the rank is read off the samples.
    let walks = redis.calls("zrank");
    for i in (15_000..60_000).step_by(1_500) {
        let (api, exact, _) = ranks_of(&wg, &mut c, &format!("u{i}"));
        assert_within(api, exact, "far back");
    }
    // The test's own two ZRANKs per user, none of waitgate's.
    assert_eq!(redis.calls("zrank") - walks, 2 * 30);

    // Near the head, exact.
    for i in [0, 1, 998, 4_000, 9_000] {
        let (api, exact, _) = ranks_of(&wg, &mut c, &format!("u{i}"));
        assert_eq!(api, exact, "u{i}");
    }

    // 700 users near the head go silent and cleanup takes them out: every
    // rank behind them is 700 less, derived or asked again exactly.
    let stale: Vec<String> = (2_000..2_700).map(|i| format!("u{i}")).collect();
    make_silent(&mut c, "baseball", &stale);
    wait_removed(&mut c, "u2699");
    for i in (15_000..60_000).step_by(4_500) {
        let (api, exact, _) = ranks_of(&wg, &mut c, &format!("u{i}"));
        assert_within(api, exact, "after the cleanup");
        assert!(
            api < i as u64 - 690,
            "u{i} at {api}: the removals are not counted"
        );
    }

    // Once sampled again, a few counted removals keep ranks derived: five
    // more go silent, and far back nobody's rank is walked.
    std::thread::sleep(Duration::from_millis(5_500));
    let few: Vec<String> = (3_000..3_005).map(|i| format!("u{i}")).collect();
    make_silent(&mut c, "baseball", &few);
    wait_removed(&mut c, "u3004");
    let walks = redis.calls("zrank");
    for i in (20_000..60_000).step_by(4_000) {
        let (api, exact, _) = ranks_of(&wg, &mut c, &format!("u{i}"));
        assert_within(api, exact, "after a few removals");
    }
    assert_eq!(redis.calls("zrank") - walks, 2 * 10, "ranks walked");
}

/// Users who leave from anywhere in the queue leave ranks far back derived:
/// the rank call brings the log of the departures since the samples, so
/// the instance knows how many of those who left were ahead of each user.
/// The samples are held as published (the sampler's lease is elsewhere):
/// 1,300 departures since (dropouts through the API near the head and far
/// back, users gone silent at places far back whom cleanup removes) would
/// otherwise leave every rank far back unsure, and walked. That is more
/// than one call returns of the log (1,000): what is left is read by the
/// next calls, whether or not a rank could be derived meanwhile.
#[test]
fn ranks_far_back_stay_derived_however_many_leave_from_anywhere() {
    let redis = Redis::start();
    let wg = start(&redis);
    let mut c = redis.conn();
    // The one admitted (max-active 1): the head.
    assert_eq!(register(wg.addr, "first").status, 200);
    let near: Vec<(String, String)> = (0..100)
        .map(|i| {
            let user = format!("d{i}");
            let credential = register_new(wg.addr, &user);
            (user, credential)
        })
        .collect();
    let base = fill_sampled(&wg, &redis, 60_000);
    let () = redis::cmd("SET")
        .arg("queue:{baseball}:sampler")
        .arg("elsewhere")
        .arg("PX")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    // A refresh under way when the lease went may still publish.
    std::thread::sleep(Duration::from_millis(1_500));
    let published: Vec<u8> = c.get("queue:{baseball}:samples").unwrap();

    // Places far back that leave, none of them polled below.
    let polled: Vec<usize> = (15_000..60_000).step_by(1_500).collect();
    let leaving: Vec<usize> = (0..)
        .map(|k| 1_000 + 47 * k)
        .filter(|i| !polled.contains(i))
        .take(1_200)
        .collect();
    let far_dropouts: Vec<(String, String)> = leaving[..100]
        .iter()
        .map(|i| {
            (
                format!("u{i}"),
                credential_for(&format!("u{i}"), base + *i as u64),
            )
        })
        .collect();
    for (user, credential) in near.iter().chain(&far_dropouts) {
        let r = dropout(wg.addr, user, credential);
        assert_eq!(r.status, 204, "{user}: {}", r.text());
    }
    let silent: Vec<String> = leaving[100..].iter().map(|i| format!("u{i}")).collect();
    make_silent(&mut c, "baseball", &silent);
    wait_until("cleanup", Duration::from_secs(5), || {
        let left: Vec<Option<f64>> = redis::cmd("ZMSCORE")
            .arg(WAITING)
            .arg(&silent)
            .query(&mut c)
            .unwrap();
        left.iter().all(Option::is_none)
    });
    let removed: u64 = c.hget("queue:{baseball}:admission", "removed").unwrap();
    assert_eq!(removed, 1_300, "departures counted");

    // The log is read over the next calls, the first of which finds the
    // rank unsure (what it has not read may have been ahead).
    for _ in 0..3 {
        assert_eq!(rank(wg.addr, "u30001").status, 200);
    }
    let walks = redis.calls("zrank");
    for &i in &polled {
        let (api, exact, _) = ranks_of(&wg, &mut c, &format!("u{i}"));
        assert_within(api, exact, "after the departures");
        assert!(
            api < i as u64,
            "u{i} at {api}: the departures are not counted"
        );
    }
    assert_eq!(
        redis.calls("zrank") - walks,
        2 * polled.len() as u64,
        "ranks walked"
    );
    let still: Vec<u8> = c.get("queue:{baseball}:samples").unwrap();
    assert_eq!(still, published, "the samples were taken again");
}

/// The log a rank call returns follows on only from what the instance read:
/// if the entry it read last no longer holds the arrival it read (a Redis
/// gone back in time numbers departures again), or the log no longer holds
/// the entries after it, the call says so, and the instance stops adding to
/// what it read.
#[test]
fn the_departure_log_is_read_on_only_where_it_still_holds_what_was_read() {
    let redis = Redis::start();
    let mut c = redis.conn();
    let admission = "queue:{baseball}:admission";
    let log = "queue:{baseball}:admission:departed";
    let () = c.hset(admission, "removed", 3).unwrap();
    let () = c
        .rpush(
            log,
            &[
                "1:1000000000000001",
                "2:1000000000000002",
                "3:1000000000000003",
            ],
        )
        .unwrap();
    let rank = redis::Script::new(&format!(
        "{}{}",
        include_str!("../lua/lib.lua"),
        include_str!("../lua/rank.lua")
    ));
    // The tail after the batch's twelve numbers: from, follows, arrivals.
    let tail = |c: &mut redis::Connection, have: &str| -> Vec<i64> {
        let mut call = rank.prepare_invoke();
        for key in [
            "waiting",
            "heartbeat",
            "active",
            "admission",
            "control",
            "prequeue",
            "due",
            "dues",
            "numbering",
            "marks",
        ] {
            call.key(format!("queue:{{baseball}}:{key}"));
        }
        call.arg(1000)
            .arg(10)
            .arg(30_000)
            .arg(1000)
            .arg(30_000)
            .arg(0)
            .arg(0)
            .arg(0)
            .arg(have);
        let flat: Vec<i64> = call.invoke(c).unwrap();
        flat[12..].to_vec()
    };
    assert_eq!(tail(&mut c, "-1"), Vec::<i64>::new());
    assert_eq!(
        tail(&mut c, "0"),
        [0, 1, 1000000000000001, 1000000000000002, 1000000000000003]
    );
    assert_eq!(tail(&mut c, "2:1000000000000002"), [2, 1, 1000000000000003]);
    assert_eq!(tail(&mut c, "3:1000000000000003"), [3, 1]);
    // Entry 2 now holds another arrival: what was read of it is not the log.
    assert_eq!(tail(&mut c, "2:1000000000000009"), [2, 0]);
    // Cut short: entries 1 and 2 gone.
    let () = c.ltrim(log, -1, -1).unwrap();
    assert_eq!(tail(&mut c, "1:1000000000000001"), [2, 0]);
    assert_eq!(tail(&mut c, "2:1000000000000002"), [2, 1, 1000000000000003]);
}

/// During an upgrade, an instance of an earlier version takes a user out
/// of the waiting set without the heartbeat hash (a dropout): asked about
/// that user, this version does not read a rank off the heartbeat it left.
#[test]
fn a_user_an_earlier_version_removed_is_not_told_a_derived_rank() {
    let (redis, wg, _) = sampled(40_000);
    let mut c = redis.conn();
    assert_eq!(rank(wg.addr, "u30000").status, 200);
    // The earlier version's heartbeat set, and its dropout of u30000 (the
    // counts made to agree, as another uncounted change could make them).
    let () = c.zadd("queue:{baseball}:heartbeat", "someone", 1).unwrap();
    let () = c.zrem(WAITING, "u30000").unwrap();
    let () = c.hincr("queue:{baseball}:admission", "removed", 1).unwrap();
    let r = rank(wg.addr, "u30000");
    assert_eq!(r.status, 404, "{}", r.text());
    // Others far back are still told their place.
    let (api, exact, _) = ranks_of(&wg, &mut c, "u35000");
    assert_within(api, exact, "beside it");
}

#[test]
fn a_new_waiting_set_is_never_read_off_the_samples_of_the_last() {
    let redis = Redis::start();
    let wg = start(&redis);
    let mut c = redis.conn();
    // The same span of arrivals twice: first 40,000 users, then (after the
    // set empties) 20,000, two microseconds apart. The first set's samples
    // would put b10000 at about 20,000.
    for _attempt in 0..3 {
        let () = c.del(&[WAITING, DUE, DUES]).unwrap();
        let base = fill(&wg, &redis, ("head", "a", 40_000), None, 1);
        wait_for_samples(&wg, 0.0);
        let first = samples_of(&wg);
        let (api, exact, _) = ranks_of(&wg, &mut c, "a30000");
        assert_within(api, exact, "first set");

        let () = c.del(&[WAITING, DUE, DUES]).unwrap();
        fill(&wg, &redis, ("again", "b", 20_000), Some(base), 2);
        let (api, exact, after) = ranks_of(&wg, &mut c, "b10000");
        assert_eq!(exact, 10_000);
        assert_eq!((api, after), (exact, exact));
        // Unless the sampler ran in between, that was the first set's
        // samples turned down; otherwise try again.
        if samples_of(&wg) == first {
            return;
        }
    }
    panic!("the sampler ran between the two sets every time");
}

/// A poll far back is decided by the instance, with plain commands: the
/// rank script is asked for the batch's numbers alone (no user passes
/// through Lua), the heartbeats are read with `HMGET`, and a heartbeat that
/// must be written goes as `RPUSH` of its candidate, `ZADD` of the bucket
/// and `HSET`, with what rank.lua would write: due at Redis's time plus
/// `poll-max-ms`, the arrival kept. A heartbeat with a fair time left is
/// kept, and that time is the advice.
#[test]
fn a_poll_far_back_is_decided_by_the_instance_in_plain_commands() {
    let (redis, wg, base) = sampled(30_000);
    let mut c = redis.conn();
    // u20000's heartbeat has 20 s left (of a 30 s advice): kept.
    let kept_due = redis.now_ms() + 20_000;
    let arrival = base + 20_000;
    let () = c
        .hset(DUE, "u20000", format!("{kept_due}:{arrival}"))
        .unwrap();
    redis.slowlog_from_now(0, 1000);

    let before = redis.now_ms();
    let r = rank(wg.addr, "u20000");
    assert_eq!(r.status, 200, "{}", r.text());
    let advice = r.json()["pollAfterMs"].as_u64().unwrap();
    assert!(
        (19_000..=20_000).contains(&advice),
        "kept: the time left, {advice}"
    );
    let value: String = c.hget(DUE, "u20000").unwrap();
    assert_eq!(value, format!("{kept_due}:{arrival}"), "kept unchanged");

    // u25000's heartbeat is an hour away (the fill's): written anew.
    let r = rank(wg.addr, "u25000");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["pollAfterMs"].as_u64(), Some(30_000));
    let after = redis.now_ms();
    let value: String = c.hget(DUE, "u25000").unwrap();
    let (due, written_arrival) = value.split_once(':').unwrap();
    let due: u64 = due.parse().unwrap();
    assert_eq!(written_arrival, (base + 25_000).to_string());
    assert!(
        due >= before + 30_000 && due <= after + 30_000,
        "{due} not {before}..{after} + 30 s"
    );
    // Its candidate, in the bucket of that time (a second wide).
    let bucket = (due / 1000 + 1) * 1000;
    let listed: Vec<String> = c.lrange(format!("{DUES}:{bucket}"), 0, -1).unwrap();
    assert!(listed.contains(&"u25000".to_string()), "{listed:?}");
    let indexed: Option<f64> = c.zscore(DUES, bucket).unwrap();
    assert_eq!(indexed, Some(bucket as f64));

    let (api, exact, _) = ranks_of(&wg, &mut c, "u25000");
    assert_within(api, exact, "far back");

    // What ran: no call of rank.lua with a user in it, and the plain
    // commands. (The admitter's and cleanup's scripts may run meanwhile.)
    let ran = redis.commands_logged();
    let rank_sha = redis::Script::new(&format!(
        "{}{}",
        include_str!("../lua/lib.lua"),
        include_str!("../lua/rank.lua")
    ))
    .get_hash()
    .to_string();
    let scripts: Vec<&Vec<String>> = ran
        .iter()
        .filter(|a| a[0].eq_ignore_ascii_case("evalsha") && a.get(1) == Some(&rank_sha))
        .collect();
    assert!(!scripts.is_empty(), "{ran:?}");
    for call in &scripts {
        // EVALSHA sha 10 <10 keys> <9 arguments>: no users.
        assert_eq!(call.len(), 22, "a script call with users: {call:?}");
    }
    let named = |name: &str, user: &str| {
        ran.iter()
            .any(|a| a[0].eq_ignore_ascii_case(name) && a.iter().any(|x| x == user))
    };
    assert!(
        named("hmget", "u20000") && named("hmget", "u25000"),
        "{ran:?}"
    );
    assert!(
        named("hset", "u25000") && named("rpush", "u25000"),
        "{ran:?}"
    );
    assert!(
        !named("hset", "u20000"),
        "a kept heartbeat written: {ran:?}"
    );
}

/// A user far back who polls within each answer's advice is never removed,
/// and one who stops is removed within its advice, the timeout and a
/// cleanup interval: the rule of every poll, kept by the instance's own
/// decisions far back.
#[test]
fn far_back_a_user_who_polls_within_the_advice_is_never_removed() {
    let redis = Redis::start();
    let queue = "baseball:\n  admission: {max-active: 1}\n  heartbeat: {timeout-ms: 300, cleanup-interval-ms: 20, poll-min-ms: 20, poll-max-ms: 200}";
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .queues(queue)
        .start();
    let mut c = redis.conn();
    fill(&wg, &redis, ("head", "u", 20_000), None, 1);
    let mut steady = register(wg.addr, "steady").json()["pollAfterMs"]
        .as_u64()
        .unwrap();
    let mut quitter = register(wg.addr, "quitter").json()["pollAfterMs"]
        .as_u64()
        .unwrap();
    // Behind them, so that the samples' last place is past them.
    for i in 0..3 {
        register(wg.addr, &format!("tail{i}"));
    }
    // Until samples cover them, every poll is rank.lua's.
    let covered = samples_of(&wg);
    // The users poll meanwhile, every 50 ms or so.
    wait_until("samples", Duration::from_secs(15), || {
        let taken = samples_of(&wg);
        if taken != covered && taken != 0.0 {
            return true;
        }
        for user in ["steady", "quitter"] {
            assert_eq!(rank(wg.addr, user).status, 200);
        }
        for i in 0..3 {
            assert_eq!(rank(wg.addr, &format!("tail{i}")).status, 200);
        }
        std::thread::sleep(Duration::from_millis(30));
        false
    });
    let writes = || redis.calls("hset");
    let written = writes();
    let paces = [
        0.9, 0.1, 1.0, 0.5, 0.95, 0.2, 0.99, 0.7, 1.0, 0.3, 0.97, 0.6,
    ];
    let mut quit_at = None;
    for (i, pace) in paces.iter().enumerate() {
        std::thread::sleep(Duration::from_millis((steady as f64 * pace) as u64));
        let r = rank(wg.addr, "steady");
        assert_eq!(r.status, 200, "the steady user was removed at poll {i}");
        steady = r.json()["pollAfterMs"].as_u64().unwrap();
        if i < 4 {
            let r = rank(wg.addr, "quitter");
            assert_eq!(r.status, 200);
            quitter = r.json()["pollAfterMs"].as_u64().unwrap();
            quit_at = Some(Instant::now());
        }
    }
    assert!(writes() > written, "no heartbeat written far back");
    let bound = Duration::from_millis(quitter + 300 + 20 + 20 + 150);
    let quit_at = quit_at.unwrap();
    let removed = eventually(bound.saturating_sub(quit_at.elapsed()), || {
        c.zscore::<_, _, Option<f64>>(WAITING, "quitter")
            .unwrap()
            .is_none()
    });
    assert!(removed, "still there after {:?}", quit_at.elapsed());
    assert!(
        quit_at.elapsed() >= Duration::from_millis(quitter + 300 - 10),
        "removed {:?} after its last poll, before its advice and the timeout",
        quit_at.elapsed()
    );
    assert_eq!(rank(wg.addr, "steady").status, 200);
}

/// The race itself, on two instances: between one instance's read of a
/// heartbeat far back and its write, another instance takes the user's
/// dropout (and, in the second round, the user's new registration at the
/// tail). The write is held at the exact point by a relay in front of
/// Redis. Whatever the write then says, the user's heartbeat ends as the
/// waiting set has it, and the poll is answered as of after the change.
#[test]
fn a_dropout_or_a_new_registration_between_an_instances_read_and_write_far_back_is_seen() {
    let redis = Redis::start();
    let relay = Interposer::start(redis.port, &[b"RPUSH", b"u2"]);
    let wg = start_at(&relay.url());
    let other = start(&redis);
    let mut c = redis.conn();
    let base = fill_sampled(&wg, &redis, 30_000);

    // A dropout and a new registration: the write names the arrival the
    // user had.
    let to = other.addr;
    relay.arm(move || {
        let credential = credential_for("u20000", base + 20_000);
        assert_eq!(dropout(to, "u20000", &credential).status, 204);
        assert_eq!(register(to, "u20000").status, 200);
    });
    let r = rank(wg.addr, "u20000");
    assert!(relay.fired(), "the write far back was not held");
    assert_eq!(r.status, 200, "{}", r.text());
    let arrival: f64 = c.zscore(WAITING, "u20000").unwrap();
    let exact: u64 = c.zrank(WAITING, "u20000").unwrap();
    assert_eq!(
        r.json()["rank"].as_u64().unwrap(),
        exact,
        "answered at the new place, exactly"
    );
    // `<due>:<arrival>`, and the new registration's number after it.
    let value: String = c.hget(DUE, "u20000").unwrap();
    assert_eq!(
        value.split(':').nth(1),
        Some((arrival as u64).to_string().as_str()),
        "the heartbeat names the new arrival {arrival}: {value}"
    );
    let number: u64 = c.hget("queue:{baseball}:numbering", "next").unwrap();
    assert!(
        value.ends_with(&format!(":{}", number - 1)),
        "and the new registration's number: {value}"
    );

    // A dropout alone: the user is not waiting, and keeps no heartbeat.
    let credential = credential_for("u21000", base + 21_000);
    relay.arm(move || assert_eq!(dropout(to, "u21000", &credential).status, 204));
    let r = rank(wg.addr, "u21000");
    assert!(relay.fired(), "the write far back was not held");
    assert_eq!(r.status, 404, "{}", r.text());
    let stray: Option<String> = c.hget(DUE, "u21000").unwrap();
    assert_eq!(stray, None, "the stray heartbeat removed");
}

/// A departure of someone else between an instance's read of a heartbeat
/// far back and its write is told from the departure log, read with the
/// write: the written users' scores are not read again (no `ZMSCORE`, a
/// lookup a user in a set of millions), and the poll is answered as it was
/// decided.
#[test]
fn a_departure_elsewhere_between_the_read_and_the_write_far_back_reads_no_scores() {
    let redis = Redis::start();
    let relay = Interposer::start(redis.port, &[b"RPUSH", b"u20000"]);
    let wg = start_at(&relay.url());
    let other = start(&redis);
    let mut c = redis.conn();
    let base = fill_sampled(&wg, &redis, 30_000);
    let monitor = Monitor::start(&redis);
    let to = other.addr;
    relay.arm(move || {
        let credential = credential_for("u25000", base + 25_000);
        assert_eq!(dropout(to, "u25000", &credential).status, 204);
    });
    let r = rank(wg.addr, "u20000");
    assert!(relay.fired(), "the write far back was not held");
    assert_eq!(r.status, 200, "{}", r.text());
    let exact: u64 = c.zrank(WAITING, "u20000").unwrap();
    let told = r.json()["rank"].as_u64().unwrap();
    assert!(
        told.abs_diff(exact) * 1000 <= exact,
        "told {told}, exactly {exact}"
    );
    let lines = monitor.take_lines();
    assert!(
        !lines.iter().any(|l| l.contains("\"ZMSCORE\"")),
        "the scores were read again: {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"LRANGE\"") && l.contains(":departed")),
        "the log was read with the write: {lines:#?}"
    );
    let value: String = c.hget(DUE, "u20000").unwrap();
    assert!(value.ends_with(&format!(":{}", base + 20_000)), "{value}");
}

/// A user this instance answered near the head is asked of rank.lua in the
/// batch's first call next time, without the plain read of the heartbeat
/// and the second call; a user it names who is far back by then is decided
/// far back, and read plainly the time after; so is one whose rank is
/// walked only for being past the last sample.
#[test]
fn a_user_answered_near_the_head_is_asked_in_the_first_call() {
    let (redis, wg, base) = sampled(30_000);
    let mut c = redis.conn();
    let monitor = Monitor::start(&redis);

    let (api, exact, _) = ranks_of(&wg, &mut c, "u5");
    assert_eq!(api, exact);
    assert_eq!(
        monitor.take("HMGET", "u5"),
        1,
        "the first poll reads the heartbeat"
    );
    let (api, exact, _) = ranks_of(&wg, &mut c, "u5");
    assert_eq!(api, exact);
    assert_eq!(
        monitor.take("HMGET", "u5"),
        0,
        "the second poll reads no heartbeat"
    );

    // u5 leaves and joins again at the tail: far back now.
    let credential = credential_for("u5", base + 5);
    assert_eq!(dropout(wg.addr, "u5", &credential).status, 204);
    assert_eq!(register(wg.addr, "u5").status, 200);
    // With others behind, once sampled again (past the last sample, a
    // rank is walked too).
    fill(&wg, &redis, ("next", "v", 5_000), None, 1);
    std::thread::sleep(Duration::from_millis(5_500));
    let _ = monitor.take("HMGET", "u5");
    let (api, exact, _) = ranks_of(&wg, &mut c, "u5");
    assert_within(api, exact, "far back, asked in the first call");
    assert_eq!(monitor.take("HMGET", "u5"), 0);
    let (api, exact, _) = ranks_of(&wg, &mut c, "u5");
    assert_within(api, exact, "far back, read plainly");
    assert_eq!(monitor.take("HMGET", "u5"), 1, "forgotten as near the head");

    // u6 too, but it joins again past the last sample: its rank is walked
    // there, yet it is not near the head, and is forgotten all the same.
    for _ in 0..2 {
        ranks_of(&wg, &mut c, "u6");
    }
    let _ = monitor.take("HMGET", "u6");
    let credential = credential_for("u6", base + 6);
    assert_eq!(dropout(wg.addr, "u6", &credential).status, 204);
    assert_eq!(register(wg.addr, "u6").status, 200);
    let (api, exact, _) = ranks_of(&wg, &mut c, "u6");
    assert_eq!(api, exact, "walked past the last sample");
    assert_eq!(monitor.take("HMGET", "u6"), 0, "still named near the head");
    ranks_of(&wg, &mut c, "u6");
    assert_eq!(monitor.take("HMGET", "u6"), 1, "forgotten");
}

/// Each poll is counted by how it was answered, with the age of the
/// samples the instance held, and each coalesced call by its users: near
/// the head walked, far back decided by the instance, and far back walked
/// once departures since the samples were taken leave them too coarse
/// (what churn cost before the departures were logged, and costs when the
/// log is lost).
#[test]
fn each_poll_is_counted_by_how_it_was_answered() {
    let (redis, wg, _) = sampled(30_000);
    let mut c = redis.conn();
    let polls = |path: &str| -> f64 {
        wg.metric(&format!(
            r#"waitgate_rank_polls_total{{path="{path}",queue="baseball"}}"#
        ))
        .unwrap_or(0.0)
    };
    assert_eq!(rank(wg.addr, "head").status, 200);
    assert_eq!(polls("near"), 1.0);
    assert_eq!(rank(wg.addr, "u25000").status, 200);
    assert_eq!(polls("instance"), 1.0);
    let aged: f64 = wg
        .metric(r#"waitgate_rank_poll_sample_age_seconds_count{path="instance",queue="baseball"}"#)
        .unwrap();
    assert_eq!(aged, 1.0);
    let batches: f64 = wg
        .metric(r#"waitgate_redis_batch_users_count{call="rank"}"#)
        .unwrap();
    assert!(batches >= 2.0, "{batches} rank calls");

    // 100 users ahead of u25000 leave (their heartbeats stale, cleanup
    // takes them) and the log of who left is lost: more than a derived
    // rank there may be unsure of, until the samples are taken again.
    let mut gone = 0;
    for round in 0..10 {
        let stale: Vec<String> = ((1_000 + round * 100)..(1_100 + round * 100))
            .map(|i| format!("u{i}"))
            .collect();
        make_silent(&mut c, "baseball", &stale);
        gone += 100;
        wait_until("cleanup", Duration::from_secs(5), || {
            c.zcard::<_, usize>(WAITING).unwrap() <= 30_001 - gone
        });
        // The log of who left, lost: the departures could each have been
        // ahead.
        let () = c.del("queue:{baseball}:admission:departed").unwrap();
        let (api, exact, _) = ranks_of(&wg, &mut c, "u25000");
        assert_within(api, exact, "after departures");
        if polls("walked") > 0.0 {
            let aged: f64 = wg
                .metric(r#"waitgate_rank_poll_sample_age_seconds_count{path="walked",queue="baseball"}"#)
                .unwrap();
            assert_eq!(aged, polls("walked"));
            return;
        }
    }
    panic!("no poll far back was walked after 1,000 departures unlogged");
}

/// The client address of each slowlog entry whose arguments `matches`.
fn callers(c: &mut redis::Connection, matches: impl Fn(&[String]) -> bool) -> Vec<String> {
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG").arg("GET").arg(-1).query(c).unwrap();
    let mut out: Vec<String> = log
        .into_iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                panic!("a slowlog entry: {entry:?}")
            };
            // Published samples are bytes: read lossily.
            let args: Vec<String> = redis::from_redis_value::<Vec<Vec<u8>>>(fields[3].clone())
                .unwrap()
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            matches(&args).then(|| redis::from_redis_value::<String>(fields[4].clone()).unwrap())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// With two instances on one Redis, one takes the samples of the waiting
/// set and publishes them, and the other derives ranks far back from what
/// was published, as well; once the sampling instance stops, the other
/// takes over within the lease.
#[test]
fn one_instance_samples_a_queue_and_every_instance_derives_from_it() {
    let redis = Redis::start();
    let (a, b) = (start(&redis), start(&redis));
    fill(&a, &redis, ("head", "u", 30_000), None, 1);
    wait_for_samples(&a, 0.0);
    wait_for_samples(&b, 0.0);
    let mut c = redis.conn();
    // samples.lua (the one script of these two keys, its header's) asked
    // for places: every instance also asks it for the counters alone.
    let sampling = |c: &mut redis::Connection| {
        callers(c, |args| {
            args[0].to_ascii_lowercase().starts_with("evalsha")
                && args[2..].starts_with(&[
                    "2".to_string(),
                    WAITING.to_string(),
                    "queue:{baseball}:admission".to_string(),
                ])
                && args.get(5) != Some(&u64::MAX.to_string())
        })
    };
    redis.slowlog_from_now(0, 100_000);
    // Past a still queue's refresh (5 s).
    std::thread::sleep(Duration::from_secs(7));
    let samplers = sampling(&mut c);
    assert_eq!(samplers.len(), 1, "sampled by {samplers:?}");
    for wg in [&a, &b] {
        assert!(samples_of(wg) > 0.0);
        let (api, exact, _) = ranks_of(wg, &mut c, "u25000");
        assert_within(api, exact, "far back");
    }

    // Which instance samples: the one whose connection asks rank.lua for
    // "head" when polled for it.
    assert_eq!(rank(a.addr, "head").status, 200);
    let a_calls = callers(&mut c, |args| args.iter().any(|x| x == "head"));
    let (sampler, other) = if a_calls.contains(&samplers[0]) {
        (a, b)
    } else {
        (b, a)
    };
    drop(sampler);
    redis.slowlog_from_now(0, 100_000);
    // The lease (5 s) runs out, and the next refresh (1 s) takes it.
    wait_until("another sampler", Duration::from_secs(25), || {
        !sampling(&mut c).is_empty()
    });
    std::thread::sleep(Duration::from_secs(6));
    assert!(samples_of(&other) > 0.0);
    let (api, exact, _) = ranks_of(&other, &mut c, "u25000");
    assert_within(api, exact, "far back, sampled by the survivor");
    assert_eq!(sampling(&mut c).len(), 1);
}
