//! The watch loop: once a second, each queue is looked at
//! ([`Durability::look`]): stamped as seen, so that an outage is noticed and
//! not counted against heartbeats, and its state remembered, so that it can
//! be written back should Redis lose it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::time::MissedTickBehavior;

use super::shared::{run_per_queue, FailureLog, Shared};
use crate::durability::Durability;
use crate::queues::Queue;

/// How often each queue is looked at. An outage is a gap of more than three
/// of these between any instance's looks (see `outage_cutoff` in
/// `lua/lib.lua`).
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

pub struct Watch(pub Shared);

#[async_trait]
impl BackgroundService for Watch {
    async fn start(&self, shutdown: ShutdownWatch) {
        run_per_queue(&self.0, shutdown, watch_loop).await;
    }
}

async fn watch_loop(shared: Shared, queue: Arc<Queue>) {
    let durability: Arc<Durability> = shared.durability.clone();
    let mut ticker = tokio::time::interval(WATCH_INTERVAL);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
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
