//! The queue API's Redis calls, coalesced per queue and kind (see
//! `store::coalesce`) unless `redis.coalesce: false`: then each request
//! makes its own call, as a batch of one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::config::RedisConfig;
use crate::entry::challenge::Spent;
use crate::metrics::Metrics;
use crate::queues::Queue;
use crate::store::coalesce::{Batch, Coalescer};
use crate::store::{Joining, Polled, Registration, SpentProof, Store, StoreError};

/// Who a call is for; every request of a batch is for one queue, whose
/// settings (as of the first request) the call uses.
pub struct ForUser {
    queue: Arc<Queue>,
    user: String,
    /// The arrival a credential names (token exchange only).
    arrival: u64,
    /// The arrival and the number a numbered credential names (rank only:
    /// see `Store::poll_many`).
    numbered: Option<(u64, u64)>,
    /// The proof of work and the invite the user sent (register only,
    /// where the queue asks them).
    spends: Vec<Spent>,
}

impl ForUser {
    fn spends(&self) -> Vec<SpentProof<'_>> {
        self.spends
            .iter()
            .map(|p| SpentProof {
                id: &p.id,
                expires_at_ms: p.expires_at_ms,
            })
            .collect()
    }
}

/// One kind of call: the store's batch call for it, and the histogram of
/// its batches' sizes.
struct Kind<A> {
    store: Arc<Store>,
    call: BatchCall<A>,
    sizes: prometheus::Histogram,
}

type BatchCall<A> = fn(Arc<Store>, Vec<ForUser>) -> BoxFuture<'static, Result<Vec<A>, StoreError>>;

impl<A> Kind<A> {
    fn new(calls: &Calls, call: BatchCall<A>, name: &str) -> Kind<A> {
        Kind {
            store: calls.store.clone(),
            call,
            sizes: calls.metrics.batch_users.with_label_values(&[name]),
        }
    }
}

impl<A: Send + 'static> Batch for Kind<A> {
    type Request = ForUser;
    type Answer = A;
    fn call(&self, requests: Vec<ForUser>) -> BoxFuture<'static, Result<Vec<A>, StoreError>> {
        self.sizes.observe(requests.len() as f64);
        (self.call)(self.store.clone(), requests)
    }
}

fn registers(
    store: Arc<Store>,
    requests: Vec<ForUser>,
) -> BoxFuture<'static, Result<Vec<Registration>, StoreError>> {
    Box::pin(async move {
        let queue = &requests[0].queue;
        let spends: Vec<Vec<SpentProof<'_>>> = requests.iter().map(ForUser::spends).collect();
        let users: Vec<Joining<'_>> = requests
            .iter()
            .zip(&spends)
            .map(|(r, spends)| Joining {
                user: &r.user,
                spends,
            })
            .collect();
        store.register_many(queue.store_ref(), &users).await
    })
}

fn ranks(
    store: Arc<Store>,
    requests: Vec<ForUser>,
) -> BoxFuture<'static, Result<Vec<Polled>, StoreError>> {
    Box::pin(async move {
        let queue = &requests[0].queue;
        let users: Vec<&str> = requests.iter().map(|r| r.user.as_str()).collect();
        let numbered: Vec<Option<(u64, u64)>> = requests.iter().map(|r| r.numbered).collect();
        let samples = queue.ranks.get();
        store
            .poll_many(
                queue.store_ref(),
                &users,
                &numbered,
                samples.as_deref(),
                &queue.near_head,
            )
            .await
    })
}

fn tokens(
    store: Arc<Store>,
    requests: Vec<ForUser>,
) -> BoxFuture<'static, Result<Vec<Option<u64>>, StoreError>> {
    Box::pin(async move {
        let queue = &requests[0].queue;
        let users: Vec<(&str, u64)> = requests
            .iter()
            .map(|r| (r.user.as_str(), r.arrival))
            .collect();
        store.token_many(&queue.keys, &users).await
    })
}

/// One queue's coalescers.
struct QueueCalls {
    register: Arc<Coalescer<Kind<Registration>>>,
    rank: Arc<Coalescer<Kind<Polled>>>,
    token: Arc<Coalescer<Kind<Option<u64>>>>,
}

/// The store, reached through a coalescer per queue and kind, or directly.
pub struct Calls {
    store: Arc<Store>,
    metrics: Arc<Metrics>,
    coalesce: bool,
    /// The least time between a queue's rank calls while polls follow one
    /// another (`redis.poll-pace-ms`).
    pace: Duration,
    /// By queue name, made at a queue's first call (a reload may add
    /// queues; a removed one's entry is only a few idle structures).
    queues: Mutex<HashMap<String, Arc<QueueCalls>>>,
}

impl Calls {
    pub fn new(store: Arc<Store>, metrics: Arc<Metrics>, redis: &RedisConfig) -> Calls {
        Calls {
            store,
            metrics,
            coalesce: redis.coalesce,
            pace: redis.poll_pace,
            queues: Mutex::new(HashMap::new()),
        }
    }

    fn of(&self, queue: &Queue) -> Arc<QueueCalls> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        // A caller may wait for the call under way and then make its own.
        let deadline = 2 * self.store.longest_call();
        queues
            .entry(queue.name.clone())
            .or_insert_with(|| {
                Arc::new(QueueCalls {
                    register: Coalescer::new(Kind::new(self, registers, "register"), deadline),
                    // Polls, the steady load of a big queue, are paced;
                    // a registration or an exchange is a user's one-off
                    // step, and goes as soon as it can.
                    rank: Coalescer::paced(Kind::new(self, ranks, "rank"), deadline, self.pace),
                    token: Coalescer::new(Kind::new(self, tokens, "token"), deadline),
                })
            })
            .clone()
    }

    fn request(queue: &Arc<Queue>, user: &str, arrival: u64) -> ForUser {
        ForUser {
            queue: queue.clone(),
            user: user.to_string(),
            arrival,
            numbered: None,
            spends: Vec::new(),
        }
    }

    /// Registers `user`, spending their proof of work and invite (where
    /// the queue asks them) if they buy the place.
    pub async fn register(
        &self,
        queue: &Arc<Queue>,
        user: &str,
        spends: Vec<Spent>,
    ) -> Result<Registration, StoreError> {
        let request = ForUser {
            spends,
            ..Calls::request(queue, user, 0)
        };
        if !self.coalesce {
            let spends = request.spends();
            return self
                .store
                .register(
                    queue.store_ref(),
                    Joining {
                        user,
                        spends: &spends,
                    },
                )
                .await;
        }
        self.of(queue).register.call(request).await
    }

    /// The place of `user`, whose credential named this arrival and number
    /// (`numbered`), if it was a numbered one.
    pub async fn rank(
        &self,
        queue: &Arc<Queue>,
        user: &str,
        numbered: Option<(u64, u64)>,
    ) -> Result<Polled, StoreError> {
        if !self.coalesce {
            return self
                .store
                .rank(queue.store_ref(), user, queue.ranks.get().as_deref())
                .await;
        }
        self.of(queue)
            .rank
            .call(ForUser {
                numbered,
                ..Calls::request(queue, user, 0)
            })
            .await
    }

    pub async fn token(
        &self,
        queue: &Arc<Queue>,
        user: &str,
        arrival: u64,
    ) -> Result<Option<u64>, StoreError> {
        if !self.coalesce {
            return self.store.token(&queue.keys, user, arrival).await;
        }
        self.of(queue)
            .token
            .call(Calls::request(queue, user, arrival))
            .await
    }
}
