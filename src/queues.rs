//! The configured queues: one type that the queue API and the background
//! tasks both use.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::config::{Config, QueueConfig};
use crate::entry::invite::Invites;
use crate::error::ApiError;
use crate::store::ranks::NearHead;
use crate::store::{QueueKeys, QueueRef, Samples};

/// One queue: its name, its Redis keys, its configuration as loaded, and
/// what the instance keeps of it at run time.
#[derive(Debug)]
pub struct Queue {
    pub name: String,
    pub keys: QueueKeys,
    pub config: QueueConfig,
    /// The invite key of an invite-only queue, read from `config.invite`.
    pub invites: Option<Invites>,
    /// The samples ranks far back are derived from (see `store::ranks`).
    pub ranks: RankSamples,
    /// The users this instance last answered near the head.
    pub near_head: NearHead,
}

impl Queue {
    /// A queue as configured, with nothing learnt yet.
    pub fn new(name: &str, config: &QueueConfig) -> Queue {
        Queue {
            name: name.to_string(),
            keys: QueueKeys::new(name),
            config: config.clone(),
            invites: config.invite.as_ref().map(|i| Invites::new(&i.secret)),
            ranks: RankSamples::default(),
            near_head: NearHead::default(),
        }
    }

    /// The queue as the store's calls take it.
    pub fn store_ref(&self) -> QueueRef<'_> {
        QueueRef {
            keys: &self.keys,
            admission: &self.config.admission,
            heartbeat: &self.config.heartbeat,
        }
    }
}

/// A queue's latest samples of its waiting set, taken by the background
/// sampler and read by every rank call.
#[derive(Default)]
pub struct RankSamples(RwLock<Option<Arc<Samples>>>);

impl RankSamples {
    pub fn get(&self) -> Option<Arc<Samples>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, samples: Option<Samples>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = samples.map(Arc::new);
    }
}

impl std::fmt::Debug for RankSamples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let points = self.get().map_or(0, |s| s.points.len());
        write!(f, "RankSamples({points} points)")
    }
}

/// Every configured queue, by name.
#[derive(Debug)]
pub struct Queues {
    by_name: BTreeMap<String, Arc<Queue>>,
    /// The queue a request that names none means (only with exactly one).
    default: Option<Arc<Queue>>,
}

impl Queues {
    pub fn new(config: &Config) -> Queues {
        let by_name: BTreeMap<String, Arc<Queue>> = config
            .queues
            .iter()
            .map(|(name, q)| (name.clone(), Arc::new(Queue::new(name, q))))
            .collect();
        let default = match by_name.len() {
            1 => by_name.values().next().cloned(),
            _ => None,
        };
        Queues { by_name, default }
    }

    /// The queue a request names, or the only one when it names none.
    pub fn find(&self, name: Option<&str>) -> Result<&Arc<Queue>, ApiError> {
        match name {
            Some(name) => self.by_name.get(name).ok_or(ApiError::UnknownQueue),
            None => self
                .default
                .as_ref()
                .ok_or(ApiError::InvalidRequest(Cow::Borrowed(
                    "queue is required when several queues are configured.",
                ))),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Queue>> {
        self.by_name.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(names: &[&str]) -> Config {
        let queues: String = names.iter().map(|n| format!("  {n}: {{}}\n")).collect();
        let yaml = format!(
            "redis:\n  url: redis://127.0.0.1:6379/0\nqueues:\n{queues}upstreams: {{}}\nroutes: []\n"
        );
        Config::from_yaml(&yaml).expect("valid test config")
    }

    #[test]
    fn one_queue_is_the_default() {
        let queues = Queues::new(&config(&["baseball"]));
        assert_eq!(queues.find(None).unwrap().name, "baseball");
        assert_eq!(queues.find(Some("baseball")).unwrap().name, "baseball");
        assert_eq!(
            queues.find(Some("soccer")).unwrap_err(),
            ApiError::UnknownQueue
        );
    }

    #[test]
    fn several_queues_must_be_named() {
        let queues = Queues::new(&config(&["baseball", "soccer"]));
        assert_eq!(queues.find(None).unwrap_err().code(), "invalid_request");
        assert_eq!(queues.find(Some("soccer")).unwrap().name, "soccer");
        assert_eq!(queues.iter().count(), 2);
    }
}
