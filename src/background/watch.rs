//! The watch loop: once a second, each queue is looked at
//! ([`Durability::look`]): stamped as seen, so that an outage is noticed and
//! not counted against heartbeats, and its state remembered, so that it can
//! be written back should Redis lose it.

use std::sync::Arc;
use std::time::Duration;

use super::shared::{per_queue_service, ticker, FailureLog, Shared};
use crate::durability::Durability;
use crate::queues::Queue;

/// How often each queue is looked at. An outage is a gap of more than three
/// of these between any instance's looks (see `outage_cutoff` in
/// `lua/lib.lua`).
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

per_queue_service!(Watch, watch_loop);

async fn watch_loop(shared: Shared, queue: Arc<Queue>) {
    let durability: Arc<Durability> = shared.durability.clone();
    let mut ticker = ticker(WATCH_INTERVAL);
    let mut log = FailureLog::new("watch");
    loop {
        ticker.tick().await;
        match durability.look(&queue).await {
            Ok(()) => log.succeeded(&queue.name),
            Err(e) => {
                shared.metrics.redis_error("watch");
                log.failed(&queue.name, &e);
            }
        }
    }
}
