//! Whether Redis can keep a queue's promises: it keeps data across a
//! restart (an AOF, or RDB saves), and under Sentinel or Cluster each
//! queue's master has a replica to fail over to. Asked at start and by
//! `/healthz/redis`; the answer is warnings, not a failure: waitgate works
//! either way, but an incident then loses what Redis did not keep.

use super::connection::{Resend, Store};
use super::error::StoreError;
use super::keys::QueueKeys;
use super::scripts::HEALTH;

impl Store {
    /// What the Redis that holds `queues` cannot keep, in words (none: it
    /// keeps data across a restart and, where failover is configured, each
    /// queue's master has a replica).
    pub async fn durability_warnings(
        &self,
        queues: &[(&str, &QueueKeys)],
    ) -> Result<Vec<String>, StoreError> {
        let mut warnings = Vec::new();
        // `save ""` turns RDB snapshots off. A managed Redis may refuse
        // CONFIG: then only the AOF is known.
        let save: Result<Vec<String>, StoreError> = self
            .call(Resend::Safe, |mut c| async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("save")
                    .query_async::<Vec<String>>(&mut c)
                    .await
            })
            .await;
        let snapshots = match save {
            Ok(pair) => Some(pair.get(1).is_some_and(|s| !s.trim().is_empty())),
            Err(StoreError::Failed(_)) => None,
            Err(e) => return Err(e),
        };
        let mut lonely = Vec::new();
        let mut forgetful = false;
        for (name, keys) in queues {
            let invocation = HEALTH.invoke(keys);
            let (aof, role, replicas): (i64, String, i64) =
                self.run(invocation, Resend::Safe).await?;
            if aof == 0 && snapshots != Some(true) {
                forgetful = true;
            }
            if self.fails_over() && role == "master" && replicas == 0 {
                lonely.push(*name);
            }
        }
        if forgetful {
            warnings.push(match snapshots {
                Some(_) => "redis keeps no data across a restart (no AOF, no RDB saves): a restart empties every queue and waitgate can only write back what its instances remember; turn on appendonly".to_string(),
                None => "redis has no AOF and does not say whether it saves RDB snapshots (CONFIG is refused): a restart may empty every queue; turn on appendonly".to_string(),
            });
        }
        if !lonely.is_empty() {
            warnings.push(format!(
                "the redis master of queue {} has no replica: a failover has nowhere to go, and a master lost is its data lost",
                lonely.join(", ")
            ));
        }
        Ok(warnings)
    }
}
