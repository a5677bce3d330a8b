//! The cleanup loop: every `cleanup-interval-ms`, the instance that claims
//! the queue's pass first (`Store::claim_sweep`; the others skip it) runs
//! it: cleanup steps each look
//! at up to a batch of candidates (the users of heartbeat buckets that are
//! past) and remove the silent ones, and up to a batch of expired active
//! users (`Store::cleanup`: the look in plain commands, the removal by
//! `lua/sweep.lua`); while a step says more are left, the next goes at
//! once, up to [`CALLS_PER_PASS`].

use std::sync::Arc;
use std::time::Duration;

use super::shared::{per_queue_service, ticker, FailureLog, Shared};
use crate::metrics::{CLEANUP_EXPIRED, CLEANUP_HEARTBEAT, CLEANUP_STRAY};
use crate::queues::Queue;
use crate::store::published;
use crate::store::NextBucket;

/// The most calls of one pass. Every heartbeat written is a candidate: a
/// million users polling at the advised cadence (30 s far back) write
/// about 33,000 a second, 330,000 in the default 10 s interval, 660 calls
/// of the default batch of 500, each well under a millisecond of Redis
/// time. This bounds a pass that falls behind, not one that keeps up.
pub const CALLS_PER_PASS: usize = 10_000;

per_queue_service!(Cleanup, cleanup_loop);

async fn cleanup_loop(shared: Shared, queue: Arc<Queue>) {
    let interval = queue.config.heartbeat.cleanup_interval;
    let mut ticker = ticker(interval);
    let mut log = FailureLog::new("cleanup");
    let mut crowd = false;
    // The claim on a pass lasts a little less than the interval: see
    // `Store::claim_sweep`.
    let hold = interval - (interval / 10).min(Duration::from_millis(100));
    loop {
        ticker.tick().await;
        match shared
            .store
            .claim_sweep(&queue.keys, published::instance_id(), hold)
            .await
        {
            Ok(true) => {}
            // Another instance runs this interval's pass.
            Ok(false) => continue,
            Err(e) => {
                shared.metrics.redis_error("cleanup");
                log.failed(&queue.name, &e);
                continue;
            }
        }
        // Each call of a pass starts at the bucket the one before named,
        // and reads its candidates in the script while the calls before
        // found them mostly silent (across passes too: a crowd leaving
        // fills many buckets).
        let mut from = None;
        let mut failed = false;
        for _ in 0..CALLS_PER_PASS {
            let Some((more, next)) =
                cleanup_call(&shared, &queue, &mut log, from, &mut crowd).await
            else {
                failed = true;
                break;
            };
            if !more {
                break;
            }
            from = next;
        }
        if !failed {
            failed = !lapse_marks(&shared, &queue, &mut log).await;
        }
        if failed {
            // The pass failed: the claim goes back, so that an instance
            // that keeps failing does not keep the queue unswept.
            if let Err(e) = shared
                .store
                .release_sweep(&queue.keys, published::instance_id())
                .await
            {
                tracing::debug!(queue = %queue.name, error = %e, "cleanup claim not given back");
            }
        }
    }
}

/// The scan of the queue's marks (`Store::lapse_marks`): whether it ran.
async fn lapse_marks(shared: &Shared, queue: &Queue, log: &mut FailureLog) -> bool {
    match shared
        .store
        .lapse_marks(&queue.keys, &queue.config.heartbeat)
        .await
    {
        Ok(lapsed) => {
            shared
                .metrics
                .cleanup_removed
                .with_label_values(&[&queue.name, CLEANUP_HEARTBEAT])
                .inc_by(lapsed.removed);
            if lapsed.removed + lapsed.cleared > 0 {
                tracing::debug!(
                    queue = %queue.name,
                    stale = lapsed.removed,
                    cleared = lapsed.cleared,
                    "marks scanned"
                );
            }
            true
        }
        Err(e) => {
            shared.metrics.redis_error("cleanup");
            log.failed(&queue.name, &e);
            false
        }
    }
}

/// One call, from the bucket `from` (the last call's next): whether another
/// should follow at once, and from where (`None`: the call failed);
/// `crowd` is the last call's, and becomes this one's.
async fn cleanup_call(
    shared: &Shared,
    queue: &Queue,
    log: &mut FailureLog,
    from: Option<NextBucket>,
    crowd: &mut bool,
) -> Option<(bool, Option<NextBucket>)> {
    match shared
        .store
        .cleanup(&queue.keys, &queue.config.heartbeat, from, *crowd)
        .await
    {
        Ok(removed) => {
            log.succeeded(&queue.name);
            let m = &shared.metrics.cleanup_removed;
            m.with_label_values(&[&queue.name, CLEANUP_HEARTBEAT])
                .inc_by(removed.stale_waiting);
            m.with_label_values(&[&queue.name, CLEANUP_EXPIRED])
                .inc_by(removed.expired_active);
            m.with_label_values(&[&queue.name, CLEANUP_STRAY])
                .inc_by(removed.strays);
            if removed.strays > 0 {
                tracing::info!(queue = %queue.name, strays = removed.strays, "removed heartbeats with no place behind them (a write that reached a new master)");
            }
            if removed.stale_waiting + removed.expired_active > 0 {
                tracing::debug!(
                    queue = %queue.name,
                    stale = removed.stale_waiting,
                    expired = removed.expired_active,
                    "cleaned up"
                );
            }
            *crowd = removed.crowd;
            Some((removed.more, removed.next))
        }
        Err(e) => {
            *crowd = false;
            shared.metrics.redis_error("cleanup");
            log.failed(&queue.name, &e);
            None
        }
    }
}
