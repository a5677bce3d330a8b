//! The admission loop: calls the global gate (`lua/admit.lua`) at the start
//! of every window, by Redis's clock.

use std::sync::Arc;
use std::time::Duration;

use super::shared::{per_queue_service, FailureLog, Shared, RETRY};
use crate::queues::Queue;
use crate::store::{AdmitOutcome, StoreError};

per_queue_service!(Admission, admit_loop);

/// The longest the loop sleeps between two calls, so that a window an
/// operator shortened live takes effect within a second.
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// The pause before the gate is called again once the state Redis lost
/// has been written back.
const LOST_RETRY: Duration = Duration::from_millis(20);

/// How often to look again while the queue is empty, so that the first
/// arrival after a quiet spell is admitted promptly.
fn idle_tick(interval: Duration) -> Duration {
    (interval / 10).clamp(Duration::from_millis(5), Duration::from_millis(250))
}

async fn admit_loop(shared: Shared, queue: Arc<Queue>) {
    let interval = queue.config.admission.interval;
    let mut log = FailureLog::new("admission");
    loop {
        let seen = shared.durability.seen(&queue).await;
        let pause = match shared.store.admit(queue.store_ref(), seen).await {
            Ok(a) => {
                log.succeeded(&queue.name);
                if let Some(record) = a.record {
                    shared.durability.admitted(&queue, record, a.next_ms).await;
                }
                if a.admitted > 0 {
                    shared
                        .metrics
                        .admitted(&queue.name, a.admitted, &a.waited_ms, a.out_of_order);
                    if a.out_of_order > 0 {
                        tracing::warn!(queue = %queue.name, users = a.out_of_order, "admitted out of arrival order");
                    }
                    tracing::debug!(queue = %queue.name, admitted = a.admitted, window = a.window, "admitted");
                }
                let to_next = Duration::from_millis(a.next_ms.saturating_sub(a.now_ms));
                match a.outcome {
                    AdmitOutcome::Empty
                    | AdmitOutcome::Paused
                    | AdmitOutcome::Closed
                    | AdmitOutcome::NotOpen => idle_tick(interval),
                    // Another step of the pre-queue at once.
                    AdmitOutcome::Placing => Duration::ZERO,
                    // A small random offset spreads the instances' calls
                    // over the first moments of the next window. An
                    // operator may shorten the window live: look again
                    // within a second whatever the window's length.
                    _ => (to_next + jitter(interval)).min(MAX_SLEEP),
                }
            }
            // Redis lost the queue's state: what this instance knows is
            // written back, then the gate is called again.
            Err(StoreError::Lost) => match shared.durability.look(&queue).await {
                Ok(()) => LOST_RETRY,
                Err(e) => {
                    shared.metrics.redis_error("watch");
                    log.failed(&queue.name, &e);
                    RETRY.min(interval)
                }
            },
            Err(e) => {
                shared.metrics.redis_error("admit");
                log.failed(&queue.name, &e);
                RETRY.min(interval)
            }
        };
        tokio::time::sleep(pause).await;
    }
}

/// Up to 1% of the interval, at most 20 ms.
fn jitter(interval: Duration) -> Duration {
    let max_us = (interval.as_micros() as u64 / 100).clamp(1, 20_000);
    Duration::from_micros(rand::random::<u64>() % max_us)
}
