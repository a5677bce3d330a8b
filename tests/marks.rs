//! Marks: the heartbeat of a numbered registration as four bytes at its
//! number (`marks` in lua/lib.lua). A poll far back that brings the numbered
//! credential reads and writes that mark alone; cleanup removes a user only
//! when both the mark and the `due` HASH say so, and a scan of the marks
//! removes those whose mark stopped; a dropout clears the mark.

mod common;

use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::*;
use redis::Commands;
use waitgate::store::marks::{mark_due, mark_of};

const WAITING: &str = "queue:{baseball}:waiting";
const DUE: &str = "queue:{baseball}:due";
const NUMBERING: &str = "queue:{baseball}:numbering";
const MARKS: &str = "queue:{baseball}:marks";
const ARRIVALS: &str = "queue:{baseball}:arrivals";

fn start(redis: &Redis, heartbeat: &str) -> Waitgate {
    let queue = format!("baseball:\n  admission: {{max-active: 1}}\n  heartbeat: {heartbeat}");
    TestConfig::on_free_ports(&redis.url(), free_port())
        .queues(&queue)
        .start()
}

/// `n` users `u0`.. after `head` (registered through the API), written
/// straight into Redis, unnumbered, a microsecond apart, with heartbeats
/// due in an hour; in one transaction (see `fill` in tests/ranks.rs).
fn fill(wg: &Waitgate, redis: &Redis, n: usize) {
    assert_eq!(register(wg.addr, "head").status, 200);
    let mut c = redis.conn();
    let tail: Vec<(String, f64)> = c.zrange_withscores(WAITING, -1, -1).unwrap();
    let base = tail[0].1 as u64 + 1;
    let due = redis.now_ms() + 3_600_000;
    let mut pipe = redis::pipe();
    pipe.atomic();
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        let (mut places, mut dues) = (Vec::new(), Vec::new());
        for &i in chunk {
            let arrival = base + i as u64;
            places.push((arrival, format!("u{i}")));
            dues.push((format!("u{i}"), format!("{due}:{arrival}")));
        }
        pipe.zadd_multiple(WAITING, &places).ignore();
        pipe.hset_multiple(DUE, &dues).ignore();
    }
    let () = pipe.query(&mut c).unwrap();
}

/// `far`, registered through the API behind the 30,000 users `fill` writes
/// and ahead of three more: numbered, and far back once the instance's
/// samples cover it. Its credential.
fn far_back(wg: &Waitgate, redis: &Redis) -> String {
    fill(wg, redis, 30_000);
    let credential = register_new(wg.addr, "far");
    assert_eq!(credential.len(), 43, "{credential}");
    for i in 0..3 {
        register(wg.addr, &format!("tail{i}"));
    }
    credential
}

/// The arrival and the number a numbered credential names.
fn numbered(credential: &str) -> (u64, u64) {
    let raw = URL_SAFE_NO_PAD.decode(credential).unwrap();
    assert_eq!(raw.len(), 32, "not a numbered credential: {credential}");
    let word = |at: usize| u64::from_be_bytes(raw[at..at + 8].try_into().unwrap());
    (word(0), word(8))
}

fn rank_with(wg: &Waitgate, user: &str, credential: &str) -> Response {
    get_with(
        wg.addr,
        &format!("/api/v1/queue/rank?userId={user}"),
        &[("X-Queue-Credential", credential)],
    )
}

fn polls(wg: &Waitgate, path: &str) -> f64 {
    wg.metric(&format!(
        r#"waitgate_rank_polls_total{{path="{path}",queue="baseball"}}"#
    ))
    .unwrap_or(0.0)
}

/// A half of a number's slot in the marks: the mark (`bits` 0) or the tag
/// of the arrival it was given at, mod 2^32 (`bits` 32).
fn slot_half(c: &mut redis::Connection, number: u64, bits: u64) -> u32 {
    let at = offset(c, number);
    let got: Vec<u32> = redis::cmd("BITFIELD")
        .arg(MARKS)
        .arg("GET")
        .arg("u32")
        .arg(at * 64 + bits)
        .query(c)
        .unwrap();
    got[0]
}

fn tag(c: &mut redis::Connection, number: u64) -> u32 {
    slot_half(c, number, 32)
}

/// The offset of a number in the marks.
fn offset(c: &mut redis::Connection, number: u64) -> u64 {
    let base: u64 = c.hget(NUMBERING, "base").unwrap();
    number - base
}

fn mark(c: &mut redis::Connection, number: u64) -> u32 {
    slot_half(c, number, 0)
}

fn set_mark(c: &mut redis::Connection, number: u64, mark: u32) {
    let at = offset(c, number);
    let _: Vec<i64> = redis::cmd("BITFIELD")
        .arg(MARKS)
        .arg("SET")
        .arg("u32")
        .arg(at * 64)
        .arg(mark)
        .query(c)
        .unwrap();
}

/// Polls `user` with its credential until the instance answers from its
/// mark (samples must first cover the user), up to 15 s.
fn until_marked(wg: &Waitgate, user: &str, credential: &str) {
    let before = polls(wg, "marked");
    wait_until(
        "a poll answered from its mark",
        Duration::from_secs(15),
        || {
            assert_eq!(rank_with(wg, user, credential).status, 200);
            if polls(wg, "marked") > before {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
            false
        },
    );
}

/// A registration at the tail is numbered: its credential names the number,
/// whose arrival and mark Redis keeps. A poll far back with that credential
/// is answered from the mark: Redis is asked no heartbeat of the user (no
/// `HMGET` naming it, no script call with it), the mark is written when the
/// time it has left is not a fair advice, and the `due` HASH is left as it
/// was.
#[test]
fn a_poll_far_back_that_brings_its_number_reads_and_writes_its_mark_alone() {
    let redis = Redis::start();
    let wg = start(&redis, "{cleanup-interval-ms: 200}");
    let mut c = redis.conn();
    let credential = far_back(&wg, &redis);
    let (arrival, number) = numbered(&credential);
    let waiting: f64 = c.zscore(WAITING, "far").unwrap();
    assert_eq!(waiting as u64, arrival);
    let at = offset(&mut c, number);
    let given: Vec<i64> = redis::cmd("BITFIELD")
        .arg(ARRIVALS)
        .arg("GET")
        .arg("i64")
        .arg(format!("#{at}"))
        .query(&mut c)
        .unwrap();
    assert_eq!(given[0] as u64, arrival, "the number's arrival");
    assert_eq!(tag(&mut c, number), arrival as u32, "the slot's tag");
    let due: String = c.hget(DUE, "far").unwrap();
    assert!(due.ends_with(&format!(":{arrival}:{number}")), "{due}");
    assert_ne!(mark(&mut c, number), 0, "a mark at registration");

    until_marked(&wg, "far", &credential);

    // The mark says the heartbeat is due in two seconds: not a fair advice,
    // so the poll writes it anew, due `poll-max-ms` (30 s) from now.
    set_mark(&mut c, number, mark_of(redis.now_ms() + 2_000));
    let hashed: String = c.hget(DUE, "far").unwrap();
    redis.slowlog_from_now(0, 1000);
    let before = redis.now_ms();
    let r = rank_with(&wg, "far", &credential);
    let after = redis.now_ms();
    let ran = redis.commands_logged();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["pollAfterMs"].as_u64(), Some(30_000));
    let exact: u64 = c.zrank(WAITING, "far").unwrap();
    let told = r.json()["rank"].as_u64().unwrap();
    assert!(
        told.abs_diff(exact) as f64 <= exact as f64 * 0.001,
        "rank {told} against {exact}"
    );
    let due = mark_due(mark(&mut c, number), after).unwrap();
    assert!(
        due >= before + 30_000 && due <= after + 30_000,
        "the mark says due at {due}, not {before}..{after} + 30 s"
    );
    let unchanged: String = c.hget(DUE, "far").unwrap();
    assert_eq!(unchanged, hashed, "the HASH's heartbeat was written");

    let names = |user: &str, command: &str| {
        ran.iter()
            .any(|a| a[0].eq_ignore_ascii_case(command) && a.iter().any(|x| x == user))
    };
    for command in [
        "hmget", "hget", "hset", "evalsha", "zscore", "zrank", "rpush",
    ] {
        assert!(!names("far", command), "{command} of the user: {ran:?}");
    }
    assert!(
        ran.iter()
            .any(|a| a[0].eq_ignore_ascii_case("bitfield") && a[1] == MARKS),
        "no write of the mark: {ran:?}"
    );
    // One read a number: the slot holds the mark and the arrival's tag, so
    // the arrivals are not read.
    assert!(
        !ran.iter().any(|a| a.iter().any(|x| x == ARRIVALS)),
        "the arrivals read: {ran:?}"
    );
    let reads: Vec<_> = ran
        .iter()
        .filter(|a| a[0].eq_ignore_ascii_case("bitfield_ro") && a[1] == MARKS)
        .collect();
    assert_eq!(reads.len(), 1, "{ran:?}");
    assert_eq!(
        reads[0][2..],
        ["GET", "i64", &format!("#{}", offset(&mut c, number))]
    );
}

/// The mark counts only for the registration its number was given at: a
/// number whose arrival is not the credential's (a state Redis lost and
/// numbered again) is not read, and the poll takes the path it would take
/// without a number.
#[test]
fn a_mark_whose_number_names_another_arrival_is_not_read() {
    let redis = Redis::start();
    let wg = start(&redis, "{cleanup-interval-ms: 200}");
    let mut c = redis.conn();
    let credential = far_back(&wg, &redis);
    until_marked(&wg, "far", &credential);
    let (arrival, number) = numbered(&credential);
    let at = offset(&mut c, number);
    let _: Vec<i64> = redis::cmd("BITFIELD")
        .arg(MARKS)
        .arg("SET")
        .arg("u32")
        .arg(at * 64 + 32)
        .arg(arrival.wrapping_add(1) as u32)
        .query(&mut c)
        .unwrap();
    let marked = polls(&wg, "marked");
    let r = rank_with(&wg, "far", &credential);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        polls(&wg, "marked"),
        marked,
        "read a mark of another arrival"
    );
    assert!(r.json()["rank"].as_u64().unwrap() > 29_000);
}

/// A dropout clears the registration's mark: the credential of a user who
/// left polls no place, however fresh the mark was.
#[test]
fn a_dropout_clears_the_mark_and_the_old_credential_polls_no_place() {
    let redis = Redis::start();
    let wg = start(&redis, "{cleanup-interval-ms: 200}");
    let mut c = redis.conn();
    let credential = far_back(&wg, &redis);
    until_marked(&wg, "far", &credential);
    let (_, number) = numbered(&credential);
    let left = dropout(wg.addr, "far", &credential);
    assert_eq!(left.status, 204, "{}", left.text());
    assert_eq!(mark(&mut c, number), 0, "the mark stayed");
    let r = rank_with(&wg, "far", &credential);
    assert!(
        r.json().get("rank").is_none(),
        "a place after the dropout: {} {}",
        r.status,
        r.text()
    );
}

/// A user far back who polls within each answer's advice with its numbered
/// credential, so that only its mark is written, is never removed (its
/// `due` HASH heartbeat goes stale, and cleanup's candidates check the
/// mark); one who stops is removed by the scan of the marks within its
/// advice, the timeout and a cleanup interval, and not
/// before its advice and the timeout.
#[test]
fn far_back_a_user_polling_by_its_mark_is_never_removed_and_one_who_stops_is() {
    let redis = Redis::start();
    let wg = start(
        &redis,
        "{timeout-ms: 300, cleanup-interval-ms: 50, poll-min-ms: 20, poll-max-ms: 200}",
    );
    let mut c = redis.conn();
    fill(&wg, &redis, 20_000);
    let steady_credential = register_new(wg.addr, "steady");
    let quitter_credential = register_new(wg.addr, "quitter");
    for i in 0..3 {
        register(wg.addr, &format!("tail{i}"));
    }
    // Until samples cover them, polls are rank.lua's; all poll meanwhile.
    let marked_before = polls(&wg, "marked");
    wait_until("polls answered from marks", Duration::from_secs(15), || {
        for (user, credential) in [
            ("steady", &steady_credential),
            ("quitter", &quitter_credential),
        ] {
            assert_eq!(rank_with(&wg, user, credential).status, 200);
        }
        for i in 0..3 {
            assert_eq!(rank(wg.addr, &format!("tail{i}")).status, 200);
        }
        std::thread::sleep(Duration::from_millis(30));
        polls(&wg, "marked") >= marked_before + 2.0
    });
    let paces = [
        0.9, 0.1, 1.0, 0.5, 0.95, 0.2, 0.99, 0.7, 1.0, 0.3, 0.97, 0.6, 1.0, 0.9, 1.0, 0.8,
    ];
    let (mut steady, mut quitter) = (0, 0);
    let mut quit_at = None;
    for (i, pace) in paces.iter().enumerate() {
        std::thread::sleep(Duration::from_millis((steady as f64 * pace) as u64));
        let r = rank_with(&wg, "steady", &steady_credential);
        assert_eq!(r.status, 200, "the steady user was removed at poll {i}");
        let waiting: Option<f64> = c.zscore(WAITING, "steady").unwrap();
        assert!(waiting.is_some(), "the steady user was removed by poll {i}");
        steady = r.json()["pollAfterMs"].as_u64().unwrap();
        if i < 4 {
            let r = rank_with(&wg, "quitter", &quitter_credential);
            assert_eq!(r.status, 200);
            quitter = r.json()["pollAfterMs"].as_u64().unwrap();
            quit_at = Some(Instant::now());
        }
    }
    assert!(
        polls(&wg, "marked") >= marked_before + 10.0,
        "polls not from marks"
    );
    let quit_at = quit_at.unwrap();
    let bound = Duration::from_millis(quitter + 300 + 50 + 300);
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
    assert_eq!(rank_with(&wg, "steady", &steady_credential).status, 200);
    let (_, number) = numbered(&quitter_credential);
    assert_eq!(mark(&mut c, number), 0, "the quitter's mark stayed");
}

/// Whatever takes a numbered user out of waiting clears its mark, found by
/// the registration's arrival: here cleanup, for a user whose `due` HASH
/// heartbeat was written without its number (by hand, long past) and filed
/// as a candidate. The credential then polls no place, however fresh the
/// mark was.
#[test]
fn a_user_cleanup_removes_polls_no_place_with_its_credential() {
    let redis = Redis::start();
    let wg = start(&redis, "{cleanup-interval-ms: 100}");
    let mut c = redis.conn();
    let credential = far_back(&wg, &redis);
    until_marked(&wg, "far", &credential);
    let (_, number) = numbered(&credential);
    assert_ne!(mark(&mut c, number), 0);
    let () = redis::pipe()
        .hset(DUE, "far", 1)
        .rpush("queue:{baseball}:dues:1000", "far")
        .zadd("queue:{baseball}:dues", 1000, 1000)
        .query(&mut c)
        .unwrap();
    wait_until("cleanup", Duration::from_secs(5), || {
        c.zscore::<_, _, Option<f64>>(WAITING, "far")
            .unwrap()
            .is_none()
    });
    assert_eq!(mark(&mut c, number), 0, "the mark stayed");
    let r = rank_with(&wg, "far", &credential);
    assert!(
        r.json().get("rank").is_none(),
        "a place after cleanup took the user: {} {}",
        r.status,
        r.text()
    );
}

/// The numbers start again when a registration finds nobody waiting: the
/// marks and arrivals of earlier numbers go, and an earlier credential,
/// whose number is below the new base, is not read from a mark.
#[test]
fn the_numbers_start_again_when_nobody_waits() {
    let redis = Redis::start();
    let wg = start(&redis, "{cleanup-interval-ms: 200}");
    let mut c = redis.conn();
    let first: Vec<String> = (0..3)
        .map(|i| register_new(wg.addr, &format!("a{i}")))
        .collect();
    let marks: Vec<u8> = c.get(MARKS).unwrap();
    assert_eq!(marks.len(), 24, "three numbered");
    for (i, credential) in first.iter().enumerate() {
        assert_eq!(dropout(wg.addr, &format!("a{i}"), credential).status, 204);
    }
    let waiting: usize = c.zcard(WAITING).unwrap();
    assert_eq!(waiting, 0);
    let credential = register_new(wg.addr, "b");
    let (arrival, number) = numbered(&credential);
    let base: u64 = c.hget(NUMBERING, "base").unwrap();
    assert_eq!(
        (base, number),
        (arrival, arrival),
        "numbered from its arrival"
    );
    let marks: Vec<u8> = c.get(MARKS).unwrap();
    let arrivals: Vec<u8> = c.get(ARRIVALS).unwrap();
    assert_eq!((marks.len(), arrivals.len()), (8, 8));
    let (_, old) = numbered(&first[0]);
    assert!(
        old < base,
        "an earlier number {old} at or past the new base {base}"
    );
}

/// With `heartbeat.marks: false` (while instances of a version without
/// marks still run), registrations are not numbered: the credential is the
/// plain one, and Redis keeps no numbers.
#[test]
fn with_marks_off_registrations_are_not_numbered() {
    let redis = Redis::start();
    let wg = start(&redis, "{marks: false}");
    let mut c = redis.conn();
    let credential = register_new(wg.addr, "plain");
    assert_eq!(credential.len(), 32, "{credential}");
    let numbered: bool = c.exists(NUMBERING).unwrap();
    assert!(!numbered, "numbers given with marks off");
    let due: String = c.hget(DUE, "plain").unwrap();
    assert_eq!(due.matches(':').count(), 1, "{due}");
    assert_eq!(rank_with(&wg, "plain", &credential).status, 200);
}

/// A numbered credential whose arrival is nearer the head than polls are
/// decided far back is walked wherever it is asked, so it is asked of
/// rank.lua in the batch's first call, beside the batch's numbers: one
/// script call for the poll, not a first one and then a second for it.
#[test]
fn a_poll_near_the_head_with_its_number_takes_one_script_call() {
    let redis = Redis::start();
    let wg = start(&redis, "{cleanup-interval-ms: 200}");
    let first = register_new(wg.addr, "first");
    assert_eq!(first.len(), 43, "{first}");
    let far = far_back(&wg, &redis);
    // The instance has decided a poll far back: it knows where far back
    // starts.
    until_marked(&wg, "far", &far);
    redis.slowlog_from_now(0, 1000);
    let r = rank_with(&wg, "first", &first);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rank"].as_u64(), Some(0));
    // rank.lua's calls: ten keys, the waiting set first.
    let calls: Vec<Vec<String>> = redis
        .commands_logged()
        .into_iter()
        .filter(|a| a[0].eq_ignore_ascii_case("evalsha") && a[2] == "10" && a[3] == WAITING)
        .collect();
    assert_eq!(calls.len(), 1, "rank.lua calls: {calls:?}");
    assert!(calls[0].iter().any(|x| x == "first"), "{calls:?}");
}
