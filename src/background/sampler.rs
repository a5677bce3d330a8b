//! The gauge sampler: reads queue sizes from Redis on a timer, so that a
//! scrape never touches Redis.

use std::sync::Arc;
use std::time::Duration;

use super::shared::{per_queue_service, ticker, FailureLog, Shared};
use crate::metrics::EVENT_PHASES;
use crate::queues::Queue;
use crate::store::published::{self, Sampled};
use crate::store::ranks;

/// How often the gauges are refreshed.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

per_queue_service!(Sampler, sample_loop);

async fn sample_loop(shared: Shared, queue: Arc<Queue>) {
    tokio::join!(
        gauge_loop(shared.clone(), queue.clone()),
        rank_loop(shared, queue)
    );
}

/// Samples the waiting set every `ranks::SAMPLES_REFRESH`, from which the queue's
/// ranks far back are derived (see `store::ranks`), or reads the samples
/// the instance holding the queue's sampler lease published
/// (`store::published`). Without fresh samples every rank is asked of
/// Redis exactly.
async fn rank_loop(shared: Shared, queue: Arc<Queue>) {
    let mut ticker = ticker(ranks::SAMPLES_REFRESH);
    let mut log = FailureLog::new("rank sampler");
    let first = queue
        .config
        .exact_rank_window
        .max(ranks::FIRST_SAMPLED_PLACE);
    loop {
        ticker.tick().await;
        let id = published::instance_id();
        let current = queue.ranks.get();
        match shared
            .store
            .shared_samples(&queue.keys, first, id, current.as_deref())
            .await
        {
            Ok(Sampled::Kept) => log.succeeded(&queue.name),
            Ok(Sampled::Took(samples) | Sampled::Read(samples)) => {
                log.succeeded(&queue.name);
                let points = samples.as_ref().map_or(0, |s| s.points.len());
                shared
                    .metrics
                    .rank_samples
                    .with_label_values(&[&queue.name])
                    .set(points as i64);
                queue.ranks.set(samples);
            }
            Err(e) => {
                shared.metrics.redis_error("rank_samples");
                log.failed(&queue.name, &e);
            }
        }
    }
}

async fn gauge_loop(shared: Shared, queue: Arc<Queue>) {
    let mut ticker = ticker(SAMPLE_INTERVAL);
    let mut log = FailureLog::new("sampler");
    let configured_interval_ms = queue.config.admission.interval.as_millis() as u64;
    let m = &shared.metrics;
    loop {
        ticker.tick().await;
        match shared.store.sample(&queue.keys).await {
            Ok(sample) => {
                log.succeeded(&queue.name);
                let name = queue.name.as_str();
                m.queue_waiting
                    .with_label_values(&[name])
                    .set(sample.waiting as i64);
                m.queue_active
                    .with_label_values(&[name])
                    .set(sample.active as i64);
                if let Some(rate) = sample.rate_per_window {
                    let interval_ms = sample.interval_ms.unwrap_or(configured_interval_ms);
                    m.admission_rate
                        .with_label_values(&[name])
                        .set(rate * 1000.0 / interval_ms.max(1) as f64);
                }
                m.queue_paused
                    .with_label_values(&[name])
                    .set(i64::from(sample.paused));
                m.queue_closed
                    .with_label_values(&[name])
                    .set(i64::from(sample.closed));
                for phase in EVENT_PHASES {
                    m.event_phase
                        .with_label_values(&[name, phase])
                        .set(i64::from(phase == sample.phase));
                }
            }
            Err(e) => {
                m.redis_error("sample");
                log.failed(&queue.name, &e);
            }
        }
    }
}
