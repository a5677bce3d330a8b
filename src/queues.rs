//! The configured queues: one type that the queue API and the background
//! tasks both use.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{AdmissionConfig, Config, HeartbeatConfig, PageConfig};
use crate::error::ApiError;
use crate::store::QueueKeys;

/// One queue: its name, its Redis keys and its parameters.
#[derive(Debug)]
pub struct Queue {
    pub name: String,
    pub keys: QueueKeys,
    pub heartbeat: HeartbeatConfig,
    pub admission: AdmissionConfig,
    pub page: PageConfig,
    pub require_credential: bool,
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
            .map(|(name, q)| {
                let queue = Queue {
                    name: name.clone(),
                    keys: QueueKeys::new(name),
                    heartbeat: q.heartbeat.clone(),
                    admission: q.admission.clone(),
                    page: q.page.clone(),
                    require_credential: q.require_credential,
                };
                (name.clone(), Arc::new(queue))
            })
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
