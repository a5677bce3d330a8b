//! The Redis probe: a `PING` every second, kept in `waitgate_redis_up`.
//!
//! Redis health is its own signal, not readiness: while Redis is down the
//! queue API answers 503, but admitted users' tokens are checked with no
//! Redis call, so the instance still does its main job and stays ready.

use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::time::MissedTickBehavior;

use super::shared::{FailureLog, Shared};

/// How often Redis is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

pub struct Probe(pub Shared);

#[async_trait]
impl BackgroundService for Probe {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let shared = &self.0;
        let mut ticker = tokio::time::interval(PROBE_INTERVAL);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut log = FailureLog::new("probe");
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.changed() => return,
            }
            match shared.store.ping().await {
                Ok(()) => {
                    shared.metrics.redis_up.set(1);
                    log.succeeded("*");
                }
                Err(e) => {
                    shared.metrics.redis_up.set(0);
                    shared.metrics.redis_error("ping");
                    log.failed("*", &e);
                }
            }
        }
    }
}
