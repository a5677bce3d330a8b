//! A heartbeat as the `due` HASH keeps it: `<due>:<arrival>` (when the next
//! poll is due, ms of Redis time, and the place's arrival, µs), with
//! `:<number>` after it for a numbered registration (see `marks` in
//! `lua/lib.lua`), or `<due>` alone (as by hand).
//!
//! The codec is Lua's (`parse_heartbeat` in `lua/lib.lua`, and the same
//! reading inlined in rank.lua, cleanup.lua and sweep.lua, which read it
//! with `tonumber`). What waitgate reads of it itself, it reads the same or
//! more cautiously, and `tests/lua_rules.rs` checks that on a table of
//! values, malformed ones included.

/// The due time and the arrival (the text after the due as written, which
/// a write reuses, and the arrival as a number) of a heartbeat in plain
/// digits, `<due>:<arrival>` or, for a numbered registration,
/// `<due>:<arrival>:<number>`; `None` for any other form, which rank.lua's
/// path reads instead. Where this reads numbers, Lua reads the same ones.
pub fn parse(value: &str) -> Option<(u64, (&str, u64))> {
    let (due, text) = value.split_once(':')?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let arrival = match text.split_once(':') {
        Some((arrival, number)) if digits(number) => arrival,
        Some(_) => return None,
        None => text,
    };
    if !digits(due) || !digits(arrival) {
        return None;
    }
    Some((due.parse().ok()?, (text, arrival.parse().ok()?)))
}

/// Whether a heartbeat may be past `cutoff` (ms): anything but a due time
/// in plain digits at or after it. The script decides, by its own reading;
/// this only must never keep a user the script would take, so a value Lua
/// might read as fresh but this cannot read is "may be stale".
pub fn may_be_stale(value: &str, cutoff: i64) -> bool {
    let due = value.split_once(':').map_or(value, |(due, _)| due);
    if due.is_empty() || !due.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    // Past u64, Lua's reading is a float far beyond any cutoff: fresh.
    due.parse::<u64>()
        .is_ok_and(|due| i128::from(due) < i128::from(cutoff))
}
