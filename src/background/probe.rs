//! The Redis probe: a `PING` every second, kept in `waitgate_redis_up`,
//! and a check of the queue API's own connection. When Redis first
//! answers, what it cannot keep (no persistence, no replica) is logged.
//!
//! Redis health is its own signal, not readiness: while Redis is down the
//! queue API answers 503, but admitted users' tokens are checked with no
//! Redis call, so the instance still does its main job and stays ready.
//!
//! The probe pings over the background tasks' connection. The queue API's
//! connection may sit idle while Redis restarts; the check finds it dead
//! then and drops it, so that the API's next call opens a new one instead
//! of failing on it (see `Store::check`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::shared::{ticker, FailureLog, Shared};
use crate::control::durability_warnings;
use crate::store::Store;

/// How often Redis is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

pub struct Probe {
    pub shared: Shared,
    /// The queue API's store, whose connection is checked but never opened
    /// here: its calls open it on the proxy's own threads.
    pub api: Arc<Store>,
}

#[async_trait]
impl BackgroundService for Probe {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let shared = &self.shared;
        let mut ticker = ticker(PROBE_INTERVAL);
        let mut log = FailureLog::new("probe");
        // What Redis cannot keep is said once, when it first answers.
        let mut asked = false;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.changed() => return,
            }
            self.api.check().await;
            match shared.store.ping().await {
                Ok(()) => {
                    shared.metrics.redis_up.set(1);
                    log.succeeded("*");
                    if !asked {
                        asked = true;
                        let queues = shared.queues.load_full();
                        match durability_warnings(&shared.store, &queues).await {
                            Ok(warnings) => {
                                for warning in warnings {
                                    tracing::warn!(%warning, "redis cannot keep every promise (docs/operations.md, Redis for a ticket open)");
                                }
                            }
                            Err(e) => tracing::warn!(%e, "could not ask redis what it keeps"),
                        }
                    }
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
