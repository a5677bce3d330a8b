//! Background work, run by every instance: the global admission gate, the
//! heartbeat cleanup, and the gauge sampler.
//!
//! Each is a Pingora `BackgroundService` that runs one loop per queue and
//! stops when the server shuts down. None of them needs a leader or a lock:
//! the scripts they call are atomic, and the admission gate keeps its window
//! in Redis, so any number of instances together admit at most one batch per
//! window.

mod admission;
mod cleanup;
mod sampler;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pingora::server::ShutdownWatch;
use tokio::task::JoinSet;

pub use admission::Admission;
pub use cleanup::Cleanup;
pub use sampler::{Sampler, SAMPLE_INTERVAL};

use crate::config::{AdmissionConfig, Config, HeartbeatConfig};
use crate::metrics::Metrics;
use crate::store::{QueueKeys, Store};

/// What a background loop needs of one queue.
pub struct QueueJob {
    pub name: String,
    pub keys: QueueKeys,
    pub heartbeat: HeartbeatConfig,
    pub admission: AdmissionConfig,
}

/// What every background loop shares.
#[derive(Clone)]
pub struct Shared {
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    pub queues: Arc<Vec<Arc<QueueJob>>>,
}

impl Shared {
    pub fn new(config: &Config, store: Arc<Store>, metrics: Arc<Metrics>) -> Shared {
        let queues = config
            .queues
            .iter()
            .map(|(name, q)| {
                Arc::new(QueueJob {
                    name: name.clone(),
                    keys: QueueKeys::new(name),
                    heartbeat: q.heartbeat.clone(),
                    admission: q.admission.clone(),
                })
            })
            .collect();
        Shared {
            store,
            metrics,
            queues: Arc::new(queues),
        }
    }
}

/// Runs `job` once per queue until shutdown; dropping the set on return
/// cancels the loops between two Redis calls' awaits, never inside a
/// script (a script is one atomic command on the Redis side).
async fn run_per_queue<F, Fut>(shared: &Shared, mut shutdown: ShutdownWatch, job: F)
where
    F: Fn(Shared, Arc<QueueJob>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut loops = JoinSet::new();
    for queue in shared.queues.iter() {
        loops.spawn(job(shared.clone(), queue.clone()));
    }
    // Returns on shutdown, or if the server dropped the sender.
    let _ = shutdown.changed().await;
    loops.shutdown().await;
}

/// Logs a Redis failure once when it starts and once when it ends, not on
/// every retry of an outage.
struct FailureLog {
    what: &'static str,
    failing: bool,
}

impl FailureLog {
    fn new(what: &'static str) -> FailureLog {
        FailureLog {
            what,
            failing: false,
        }
    }

    fn failed(&mut self, queue: &str, error: &dyn std::fmt::Display) {
        if !self.failing {
            tracing::warn!(queue, task = self.what, %error, "background redis call failing");
            self.failing = true;
        }
    }

    fn succeeded(&mut self, queue: &str) {
        if self.failing {
            tracing::info!(queue, task = self.what, "background redis call recovered");
            self.failing = false;
        }
    }
}

/// A pause used between retries while Redis fails.
const RETRY: Duration = Duration::from_millis(200);
