//! Rules that both Lua and Rust need to know have one owner, the Lua side
//! (`lua/lib.lua`, which every script runs). What waitgate reads itself
//! is checked here against Lua's own reading, run in a real Redis, on a
//! table of cases: the heartbeat codec. (The event's phase has no Rust
//! copy: `lua/status.lua` reports it.)

mod common;

use common::*;

const LIB: &str = include_str!("../lua/lib.lua");

/// Lua's reading of a heartbeat (`parse_heartbeat`): the due time (0 for a
/// due that is not a number: a heartbeat long past) and the arrival, if it
/// reads one, as numbers.
fn lua_reads(c: &mut redis::Connection, value: &str) -> (f64, Option<f64>) {
    let script = redis::Script::new(&format!(
        "{LIB}\nlocal due, arrival = parse_heartbeat(ARGV[1])\n\
         return {{tostring(due), arrival and tostring(arrival) or false}}"
    ));
    let (due, arrival): (String, Option<String>) = script.arg(value).invoke(c).unwrap();
    (due.parse().unwrap(), arrival.map(|a| a.parse().unwrap()))
}

/// Heartbeats as waitgate writes them, as written by hand, and malformed.
const VALUES: &[&str] = &[
    "1500:1700000000000000",
    "0:0",
    "1500",
    "",
    ":",
    "1500:",
    ":1700000000000000",
    "abc",
    "abc:5",
    "1500:abc",
    " 1500:5",
    "1500 :5",
    "+1500:5",
    "-5:5",
    "0x10:5",
    "1e3:5",
    "15.5:5",
    "1500:5:6",
    "1500:1700000000000000:1700000000000000",
    "1500:5:",
    "1500:5:x",
    "1500::6",
    "1500:5:6:7",
    "1500:x:6",
    "99999999999999999999999:5",
];

/// Where waitgate reads a heartbeat far back itself (`heartbeat::parse`),
/// it reads the numbers Lua reads; where it cannot, rank.lua does.
#[test]
fn a_heartbeat_read_far_back_is_read_as_lua_reads_it() {
    let redis = Redis::start();
    let mut c = redis.conn();
    let mut read = 0;
    for value in VALUES {
        let (due, arrival) = lua_reads(&mut c, value);
        if let Some((ours_due, (text, ours_arrival))) = waitgate::store::heartbeat::parse(value) {
            read += 1;
            assert_eq!(ours_due as f64, due, "{value:?}");
            assert_eq!(Some(ours_arrival as f64), arrival, "{value:?}");
            assert_eq!(value.split_once(':').map(|(_, a)| a), Some(text));
        }
    }
    assert_eq!(read, 4, "the well-formed values are read");
}

/// Cleanup's reading before its script (`heartbeat::may_be_stale`) never
/// calls fresh a heartbeat Lua takes as past: whatever it keeps, the
/// script would keep.
#[test]
fn cleanup_never_keeps_a_heartbeat_lua_takes_as_past() {
    let redis = Redis::start();
    let mut c = redis.conn();
    for value in VALUES {
        let (due, _) = lua_reads(&mut c, value);
        for cutoff in [0i64, 1_000, 1_500, 1_501, 2_000_000_000_000] {
            let lua_stale = due < cutoff as f64;
            let ours = waitgate::store::heartbeat::may_be_stale(value, cutoff);
            assert!(
                ours || !lua_stale,
                "{value:?} at cutoff {cutoff}: kept, but Lua reads due {due}"
            );
            // Plain digits are read alike, both ways.
            let due_text = value.split_once(':').map_or(*value, |(d, _)| d);
            if !due_text.is_empty() && due_text.bytes().all(|b| b.is_ascii_digit()) {
                assert_eq!(ours, lua_stale, "{value:?} at cutoff {cutoff}");
            }
        }
    }
}
