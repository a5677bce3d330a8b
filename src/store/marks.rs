//! Marks: the heartbeats of numbered registrations, a slot of eight bytes
//! each at the registration's number (the mark, then a tag of the arrival
//! the number was given at; the design: `marks` in `lua/lib.lua`, whose
//! codec this one follows), and the scan that takes out the users whose
//! mark stopped.

use super::connection::{Resend, Store};
use super::error::{count, StoreError};
use super::keys::QueueKeys;
use super::scripts::LAPSE;
use crate::config::HeartbeatConfig;

/// The bytes of a number's slot: the mark (a u32), then its tag (a u32).
pub const SLOT_BYTES: u64 = 8;

/// BITFIELD's bit offset of the mark at a number's offset.
pub fn mark_bits(offset: u64) -> u64 {
    offset * SLOT_BYTES * 8
}

/// The tag of a registration at `arrival` (microseconds): the arrival mod
/// 2^32. A number is given again only after Redis lost it (a failover's
/// lag, or a restore from an older snapshot), and its new arrival has the
/// old one's tag only if the two are a multiple of 2^32 µs (71 minutes)
/// apart to the microsecond: a 32-bit check where the arrival's full
/// 64 bits were checked before, for one read a number instead of two.
pub fn tag_of(arrival: u64) -> u32 {
    arrival as u32
}

/// The mark and the tag of a slot read whole, as `GET i64` (big-endian:
/// the mark is the high half).
pub fn slot_parts(slot: i64) -> (u32, u32) {
    let slot = slot as u64;
    ((slot >> 32) as u32, slot as u32)
}

/// The most numbers a queue's marks hold (`MAX_NUMBERS` in `lua/lib.lua`):
/// a poll reads no mark past it, so that no credential can make a read
/// Redis refuses (an offset past 512 MB), whatever the batch it is in.
pub const MAX_NUMBERS: u64 = 60_000_000;

/// The bytes of the marks one read of the scan takes (8,192 numbers).
const SCAN_BYTES: u64 = 64 * 1024;

/// The numbers one call of `lua/lapse.lua` looks at, at most.
const LAPSE_NUMBERS: usize = 1000;

/// The mark of a heartbeat due at `due_ms`: the time mod 2^32, 1 for 0.
pub fn mark_of(due_ms: u64) -> u32 {
    match due_ms as u32 {
        0 => 1,
        mark => mark,
    }
}

/// When a mark says its heartbeat is due (ms), seen at `now_ms`; `None`
/// for no mark. A mark tells any due within 24 days of `now_ms`.
pub fn mark_due(mark: u32, now_ms: u64) -> Option<u64> {
    if mark == 0 {
        return None;
    }
    let ahead = mark.wrapping_sub(now_ms as u32) as i32;
    Some(now_ms.saturating_add_signed(i64::from(ahead)))
}

/// What one scan of a queue's marks did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Lapsed {
    /// Users removed from waiting: silent in their mark and their heartbeat.
    pub removed: u64,
    /// Marks cleared: of the users removed, of registrations no longer
    /// waiting, and of users the `due` HASH's heartbeat keeps.
    pub cleared: u64,
}

impl Store {
    /// Scans the marks of a queue: reads them in plain `GETRANGE`s of
    /// [`SCAN_BYTES`] and asks `lua/lapse.lua` about each number whose mark
    /// looked past the cutoff cleanup uses, as of the start (the script
    /// checks each again).
    pub async fn lapse_marks(
        &self,
        keys: &QueueKeys,
        heartbeat: &HeartbeatConfig,
    ) -> Result<Lapsed, StoreError> {
        let mut head = redis::pipe();
        head.cmd("TIME")
            .cmd("HGET")
            .arg(&keys.numbering)
            .arg("base")
            .cmd("STRLEN")
            .arg(&keys.marks);
        let head = &head;
        type Head = ((u64, u64), Option<u64>, u64);
        let ((secs, micros), base, length): Head = self
            .call(Resend::Safe, |mut c| async move {
                head.query_async::<Head>(&mut c).await
            })
            .await?;
        let mut done = Lapsed::default();
        let Some(base) = base else {
            return Ok(done);
        };
        let now_ms = secs * 1000 + micros / 1000;
        // The cutoff as cleanup counts it (outages and closures left out),
        // asked of the script with no numbers.
        let oldest = self.lapse(keys, heartbeat, &[], &mut done).await?;
        let mut lapsed: Vec<u64> = Vec::new();
        let mut from = 0;
        while from < length {
            let to = (from + SCAN_BYTES).min(length) - 1;
            let read = redis::cmd("GETRANGE")
                .arg(&keys.marks)
                .arg(from)
                .arg(to)
                .clone();
            let read = &read;
            let bytes: Vec<u8> = self
                .call(Resend::Safe, |mut c| async move {
                    read.query_async::<Vec<u8>>(&mut c).await
                })
                .await?;
            for (i, slot) in bytes.chunks_exact(SLOT_BYTES as usize).enumerate() {
                let mark = u32::from_be_bytes(slot[..4].try_into().expect("four bytes"));
                if mark_due(mark, now_ms).is_some_and(|due| due < oldest) {
                    lapsed.push(base + from / SLOT_BYTES + i as u64);
                }
            }
            while lapsed.len() >= LAPSE_NUMBERS {
                let rest = lapsed.split_off(LAPSE_NUMBERS);
                self.lapse(keys, heartbeat, &lapsed, &mut done).await?;
                lapsed = rest;
            }
            from = to + 1;
        }
        if !lapsed.is_empty() {
            self.lapse(keys, heartbeat, &lapsed, &mut done).await?;
        }
        Ok(done)
    }

    /// One call of `lua/lapse.lua` on `numbers`: the cutoff it used.
    async fn lapse(
        &self,
        keys: &QueueKeys,
        heartbeat: &HeartbeatConfig,
        numbers: &[u64],
        done: &mut Lapsed,
    ) -> Result<u64, StoreError> {
        let mut invocation = LAPSE.invoke(keys);
        invocation
            .arg(heartbeat.timeout.as_millis() as u64)
            .arg(heartbeat.outage_grace.as_millis() as u64)
            .arg(numbers);
        let (removed, cleared, cutoff): (i64, i64, i64) =
            self.run_write(invocation, &keys.waiting).await?;
        done.removed += count(removed)?;
        done.cleared += count(cleared)?;
        Ok(cutoff.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_tells_its_due_exactly_within_24_days() {
        let now = 1_795_000_000_500;
        let day = 86_400_000;
        for due in [
            now,
            now + 1,
            now + 30_000,
            now - 1,
            now - 24 * day,
            now + 24 * day,
        ] {
            assert_eq!(mark_due(mark_of(due), now), Some(due), "{due}");
        }
        assert_eq!(mark_due(0, now), None);
        // A due time that is 0 mod 2^32 is told a millisecond later.
        let zero = (now >> 32) << 32;
        assert_eq!(mark_due(mark_of(zero), zero), Some(zero + 1));
    }

    #[test]
    fn a_slot_reads_as_its_mark_then_its_tag() {
        let arrival = 1_795_000_000_123_456u64;
        let mark = mark_of(1_795_000_030_500);
        // As Redis returns the eight bytes read as `GET i64`.
        let bytes = [mark.to_be_bytes(), tag_of(arrival).to_be_bytes()].concat();
        let slot = i64::from_be_bytes(bytes.try_into().unwrap());
        assert_eq!(slot_parts(slot), (mark, tag_of(arrival)));
        assert_eq!(tag_of(arrival), (arrival % (1 << 32)) as u32);
        // A mark past 2^31 makes the slot negative as an i64.
        let high = [u32::MAX.to_be_bytes(), 7u32.to_be_bytes()].concat();
        assert_eq!(
            slot_parts(i64::from_be_bytes(high.try_into().unwrap())),
            (u32::MAX, 7)
        );
        assert_eq!(mark_bits(3), 192);
    }
}
