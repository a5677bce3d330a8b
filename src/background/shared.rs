//! What every background loop shares: the store, the metrics, the queues,
//! a loop runner and a log that reports an outage once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use pingora::server::ShutdownWatch;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::durability::Durability;
use crate::metrics::Metrics;
use crate::queues::{Queue, Queues};
use crate::store::Store;

/// What every background loop shares.
#[derive(Clone)]
pub struct Shared {
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    /// Replaced whole by a reload, which then bumps `reloaded`.
    pub queues: Arc<ArcSwap<Queues>>,
    pub reloaded: watch::Receiver<u64>,
    /// What keeps each queue's state through Redis incidents.
    pub durability: Arc<Durability>,
}

/// A background service that runs its loop once per queue (see
/// [`run_per_queue`]): `per_queue_service!(Name, job)`.
macro_rules! per_queue_service {
    ($(#[$doc:meta])* $name:ident, $job:path) => {
        $(#[$doc])*
        pub struct $name(pub Shared);

        #[async_trait::async_trait]
        impl pingora::services::background::BackgroundService for $name {
            async fn start(&self, shutdown: pingora::server::ShutdownWatch) {
                super::shared::run_per_queue(&self.0, shutdown, $job).await;
            }
        }
    };
}
pub(super) use per_queue_service;

/// A ticker every `period` that, when a tick is late, waits a whole period
/// after it rather than bursting to catch up.
pub(super) fn ticker(period: Duration) -> tokio::time::Interval {
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker
}

/// Runs `job` once per queue until shutdown, and again for the new queues
/// after each reload. Dropping a set of loops cancels them between two
/// Redis calls' awaits, never inside a script (a script is one atomic
/// command on the Redis side); every loop keeps its state in Redis, so a
/// restarted loop carries on where the old one stopped.
pub(super) async fn run_per_queue<F, Fut>(shared: &Shared, mut shutdown: ShutdownWatch, job: F)
where
    F: Fn(Shared, Arc<Queue>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut reloaded = shared.reloaded.clone();
    loop {
        let mut loops = JoinSet::new();
        for queue in shared.queues.load().iter() {
            loops.spawn(job(shared.clone(), queue.clone()));
        }
        tokio::select! {
            // Shutdown, or the server dropped the sender.
            _ = shutdown.changed() => {
                loops.shutdown().await;
                return;
            }
            changed = reloaded.changed() => {
                loops.shutdown().await;
                if changed.is_err() {
                    // Nothing can reload any more: run these until shutdown.
                    for queue in shared.queues.load().iter() {
                        loops.spawn(job(shared.clone(), queue.clone()));
                    }
                    let _ = shutdown.changed().await;
                    loops.shutdown().await;
                    return;
                }
            }
        }
    }
}

/// Logs a Redis failure once when it starts and once when it ends, not on
/// every retry of an outage.
pub(super) struct FailureLog {
    what: &'static str,
    failing: bool,
}

impl FailureLog {
    pub(super) fn new(what: &'static str) -> FailureLog {
        FailureLog {
            what,
            failing: false,
        }
    }

    pub(super) fn failed(&mut self, queue: &str, error: &dyn std::fmt::Display) {
        if !self.failing {
            tracing::warn!(queue, task = self.what, %error, "background redis call failing");
            self.failing = true;
        }
    }

    pub(super) fn succeeded(&mut self, queue: &str) {
        if self.failing {
            tracing::info!(queue, task = self.what, "background redis call recovered");
            self.failing = false;
        }
    }
}

/// A pause used between retries while Redis fails.
pub(super) const RETRY: Duration = Duration::from_millis(200);
