//! Samples one instance takes and every instance reads.
//!
//! Ranks far back are derived from samples of the waiting set
//! (`super::ranks`). Taking them costs Redis a few hundred script calls a
//! queue every refresh; were every instance to take its own, that cost
//! would grow with the instances. So the instance that holds a queue's
//! sampler lease (a key with its id, renewed at each refresh) takes them
//! and publishes them as one value; every other instance reads that value.
//! An instance that stops sampling loses the lease within
//! [`SAMPLER_LEASE`], and the next to refresh takes it over. Published
//! samples carry Redis's time of their taking, so every instance tells
//! their age by the same clock.

use std::time::Duration;

use super::connection::{Resend, Store};
use super::error::StoreError;
use super::keys::QueueKeys;
use super::ranks::{Samples, SAMPLES_MAX_AGE, SAMPLES_REFRESH};

/// How long a sampler's lease lasts unrenewed: five refreshes, so that a
/// holder that stops is replaced within six, and one that is slow for a
/// moment keeps it.
pub const SAMPLER_LEASE: Duration = Duration::from_secs(5 * SAMPLES_REFRESH.as_secs());

/// An instance's samples after a refresh, and whence they came.
#[derive(Debug)]
pub enum Sampled {
    /// This instance holds the lease: it took them and published them.
    /// Also what a set too short to sample gets, with none.
    Took(Option<Samples>),
    /// It holds the lease, and those it has still tell ranks as when
    /// taken ([`Samples::unchanged_at`]): kept, nothing taken.
    Kept,
    /// Another holds it: read as it published them.
    Read(Option<Samples>),
}

/// This process's id in the leases and claims it holds (the sampler's
/// lease, cleanup's pass): random, made once.
pub fn instance_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| format!("{:016x}", rand::random::<u64>()))
}

impl Store {
    /// This instance's samples of a queue's waiting set from place `first`
    /// on: taken and published when the instance `id` holds the sampler
    /// lease or wins it (unless `current` still holds), read as the holder
    /// published them otherwise. No samples (`None`): nothing to derive
    /// ranks from (a set too short to sample, one that started anew or
    /// changed uncounted while they were taken, or a holder that has
    /// published none recent enough). A set too short writes nothing: no
    /// lease, no samples.
    pub async fn shared_samples(
        &self,
        keys: &QueueKeys,
        first: u64,
        id: &str,
        current: Option<&Samples>,
    ) -> Result<Sampled, StoreError> {
        let now = self.sample_counters(keys).await?;
        if now.size <= first {
            return Ok(Sampled::Took(None));
        }
        if self.hold_lease(keys, id).await? {
            if current.is_some_and(|current| current.unchanged_at(&now)) {
                return Ok(Sampled::Kept);
            }
            let taken_ms = self.redis_now_ms().await?;
            let samples = self.take_samples(keys, first, now.total).await?;
            let publish = match &samples {
                Some(s) => {
                    let mut set = redis::cmd("SET");
                    set.arg(&keys.samples)
                        .arg(s.encode(taken_ms))
                        .arg("PX")
                        .arg(SAMPLES_MAX_AGE.as_millis() as u64);
                    set
                }
                // Samples of an earlier set must not outlive it.
                None => {
                    let mut del = redis::cmd("DEL");
                    del.arg(&keys.samples);
                    del
                }
            };
            let publish = &publish;
            self.call(Resend::Safe, |mut c| async move {
                publish.query_async::<()>(&mut c).await
            })
            .await?;
            return Ok(Sampled::Took(samples));
        }
        let mut read = redis::pipe();
        read.cmd("TIME").cmd("GET").arg(&keys.samples);
        let read = &read;
        let (time, published): ((u64, u64), Option<Vec<u8>>) = self
            .call(Resend::Safe, |mut c| async move {
                read.query_async(&mut c).await
            })
            .await?;
        let read = published.and_then(|bytes| Samples::decode(&bytes, milliseconds(time)));
        // The same as published last time (taken again): they go on from
        // the departures read since.
        Ok(Sampled::Read(read.map(|read| match current {
            Some(current) if read.same_as(current) => read.go_on_from(current),
            _ => read,
        })))
    }

    /// Whether `id` holds the sampler lease of a queue, having taken it if
    /// it was free; renewed when held.
    async fn hold_lease(&self, keys: &QueueKeys, id: &str) -> Result<bool, StoreError> {
        let lease = SAMPLER_LEASE.as_millis() as u64;
        match self.take_if_free(&keys.sampler, id, SAMPLER_LEASE).await? {
            // Free: taken.
            None => Ok(true),
            Some(holder) if holder == id => {
                let mut renew = redis::cmd("PEXPIRE");
                renew.arg(&keys.sampler).arg(lease);
                let renew = &renew;
                self.call(Resend::Safe, |mut c| async move {
                    renew.query_async::<()>(&mut c).await
                })
                .await?;
                Ok(true)
            }
            Some(_) => Ok(false),
        }
    }

    /// Sets `key` to `id` for `hold` if it is free (`SET NX GET PX`): the
    /// holder it found, `None` if it was free and is now `id`'s.
    pub(super) async fn take_if_free(
        &self,
        key: &str,
        id: &str,
        hold: Duration,
    ) -> Result<Option<String>, StoreError> {
        let mut take = redis::cmd("SET");
        take.arg(key)
            .arg(id)
            .arg("NX")
            .arg("GET")
            .arg("PX")
            .arg(hold.as_millis().max(1) as u64);
        let take = &take;
        self.call(Resend::Safe, |mut c| async move {
            take.query_async(&mut c).await
        })
        .await
    }

    /// Redis's clock, in milliseconds.
    async fn redis_now_ms(&self) -> Result<u64, StoreError> {
        let time: (u64, u64) = self
            .call(Resend::Safe, |mut c| async move {
                redis::cmd("TIME").query_async(&mut c).await
            })
            .await?;
        Ok(milliseconds(time))
    }
}

/// Redis's `TIME` (seconds, and microseconds within the second) in
/// milliseconds.
fn milliseconds((seconds, micros): (u64, u64)) -> u64 {
    seconds * 1000 + micros / 1000
}
