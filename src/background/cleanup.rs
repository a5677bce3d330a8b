//! The cleanup loop: every `cleanup-interval-ms`, one call of
//! `lua/cleanup.lua` removes up to a batch of silent waiting users and a
//! batch of expired active users.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::time::MissedTickBehavior;

use super::shared::{run_per_queue, FailureLog, Shared};
use crate::metrics::{CLEANUP_EXPIRED, CLEANUP_HEARTBEAT};
use crate::queues::Queue;

pub struct Cleanup(pub Shared);

#[async_trait]
impl BackgroundService for Cleanup {
    async fn start(&self, shutdown: ShutdownWatch) {
        run_per_queue(&self.0, shutdown, cleanup_loop).await;
    }
}

async fn cleanup_loop(shared: Shared, queue: Arc<Queue>) {
    let mut ticker = tokio::time::interval(queue.heartbeat.cleanup_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut log = FailureLog::new("cleanup");
    loop {
        ticker.tick().await;
        match shared.store.cleanup(&queue.keys, &queue.heartbeat).await {
            Ok(removed) => {
                log.succeeded(&queue.name);
                let m = &shared.metrics.cleanup_removed;
                m.with_label_values(&[&queue.name, CLEANUP_HEARTBEAT])
                    .inc_by(removed.stale_waiting);
                m.with_label_values(&[&queue.name, CLEANUP_EXPIRED])
                    .inc_by(removed.expired_active);
                if removed.stale_waiting + removed.expired_active > 0 {
                    tracing::debug!(
                        queue = %queue.name,
                        stale = removed.stale_waiting,
                        expired = removed.expired_active,
                        "cleaned up"
                    );
                }
            }
            Err(e) => {
                shared.metrics.redis_error("cleanup");
                log.failed(&queue.name, &e);
            }
        }
    }
}
