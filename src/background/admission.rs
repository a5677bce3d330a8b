//! The admission loop: calls the global gate (`lua/admit.lua`) at the start
//! of every window, by Redis's clock.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::shared::{run_per_queue, FailureLog, Shared, RETRY};
use crate::queues::Queue;
use crate::store::AdmitOutcome;

pub struct Admission(pub Shared);

#[async_trait]
impl BackgroundService for Admission {
    async fn start(&self, shutdown: ShutdownWatch) {
        run_per_queue(&self.0, shutdown, admit_loop).await;
    }
}

/// How often to look again while the queue is empty, so that the first
/// arrival after a quiet spell is admitted promptly.
fn idle_tick(interval: Duration) -> Duration {
    (interval / 10).clamp(Duration::from_millis(5), Duration::from_millis(250))
}

async fn admit_loop(shared: Shared, queue: Arc<Queue>) {
    let interval = queue.admission.interval;
    let interval_ms = interval.as_millis() as u64;
    let mut log = FailureLog::new("admission");
    loop {
        let pause = match shared.store.admit(&queue.keys, &queue.admission).await {
            Ok(a) => {
                log.succeeded(&queue.name);
                if a.admitted > 0 {
                    shared
                        .metrics
                        .admitted
                        .with_label_values(&[&queue.name])
                        .inc_by(a.admitted);
                    tracing::debug!(queue = %queue.name, admitted = a.admitted, window = a.window, "admitted");
                }
                let to_next_window = Duration::from_millis(
                    (a.window + 1) * interval_ms - a.now_ms.min((a.window + 1) * interval_ms),
                );
                match a.outcome {
                    AdmitOutcome::Empty => idle_tick(interval).min(to_next_window),
                    // A small random offset spreads the instances' calls
                    // over the first moments of the next window.
                    _ => to_next_window + jitter(interval),
                }
            }
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
