//! The queue API that waitgate answers itself.
//!
//! One file per endpoint: `register`, `rank`, `dropout`, `token`. Each has a
//! pure part (parse the input through [`input`], and turn the store's
//! answer into a reply) and exactly one store call between the two. Status
//! bodies are built in [`body`] so that register and rank always describe a
//! user the same way.

mod body;
mod calls;
pub mod credential;
mod dropout;
pub mod estimates;
mod fairness;
pub mod input;
pub mod page;
mod proof;
pub mod rank;
pub mod register;
mod reseat;
pub mod token;
mod who;

use std::sync::Arc;

use arc_swap::ArcSwap;
use pingora::proxy::Session;

use crate::browser::cookie::CookieJar;
use crate::browser::origin;
use crate::browser::Caller;
use crate::config::{BrowserConfig, Config};
use crate::durability::Durability;
use crate::edge::jwt::{Identity, Tokens};
use crate::edge::login::Logins;
use crate::edge::secret::Keys;
use crate::entry::challenge::Challenges;
use crate::error::ApiError;
use crate::fairness::receipt::ReceiptKeys;
use crate::limits::ClientLimits;
use crate::metrics::{Metrics, REVOKED_BY_RELEASE};
pub use crate::path::Endpoint;
use crate::queues::{Queue, Queues};
use crate::reply::Reply;
use crate::revocation::revoke;
use crate::store::{Store, StoreError};
use crate::user::UserId;
use credential::Credentials;

/// A release's Redis call is tried this many times, the pauses between
/// doubling from `RELEASE_RETRY` (about 3 s in all).
const RELEASE_ATTEMPTS: u32 = 5;
const RELEASE_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// What the queue API reaches Redis through: the store its calls go to,
/// and what writes a queue's state back when Redis lost it.
pub struct Redis {
    pub store: Arc<Store>,
    pub durability: Arc<Durability>,
}

/// The queue API: the queues and the store behind them.
pub struct QueueApi {
    /// Replaced whole by a reload.
    queues: Arc<ArcSwap<Queues>>,
    store: Arc<Store>,
    tokens: Arc<Tokens>,
    credentials: Credentials,
    /// Issues and checks the proofs of work of queues that ask one.
    challenges: Challenges,
    metrics: Arc<Metrics>,
    /// A body must arrive whole within this.
    body_timeout: std::time::Duration,
    /// The site's login, when register and rank take the user from it.
    logins: Option<Logins>,
    /// How cookies are written and which origins count: replaced whole by
    /// a reload, like the queues, so that a reload that drops an origin or
    /// turns `Secure` on holds from the next request.
    browsers: Arc<ArcSwap<BrowserConfig>>,
    /// The store's register, rank and token calls, coalesced.
    calls: calls::Calls,
    /// Writes back a queue's state when Redis lost it (a call refused as
    /// lost is made again after), and seats again the users whose places
    /// went with it.
    durability: Arc<Durability>,
    /// A sample of users' last wait estimates, to measure their error.
    estimates: estimates::Estimates,
    /// The per-client limits both HTTP paths check first.
    limits: Arc<ClientLimits>,
    /// Signs the receipts register gives, and publishes their keys.
    receipts: ReceiptKeys,
    /// Per queue, the last draw commitment read for a receipt (the last
    /// look knew no such draw yet): when committed (ms), and what.
    commitments: std::sync::Mutex<std::collections::HashMap<String, (u64, String)>>,
}

impl QueueApi {
    pub fn new(
        config: &Config,
        queues: Arc<ArcSwap<Queues>>,
        redis: Redis,
        tokens: Arc<Tokens>,
        keys: &Keys,
        metrics: Arc<Metrics>,
        logins: Option<Logins>,
    ) -> QueueApi {
        let Redis { store, durability } = redis;
        let limits = Arc::new(ClientLimits::new(&config.limits, metrics.clone()));
        QueueApi {
            durability,
            calls: calls::Calls::new(store.clone(), metrics.clone(), &config.redis),
            queues,
            store,
            tokens,
            credentials: Credentials::with_keys(keys),
            challenges: Challenges::with_keys(keys),
            metrics,
            body_timeout: config.clients.body_timeout,
            logins,
            browsers: Arc::new(ArcSwap::from_pointee(config.browsers.clone())),
            estimates: estimates::Estimates::default(),
            limits,
            receipts: ReceiptKeys::generated(),
            commitments: Default::default(),
        }
    }

    /// Receipts signed with `receipts` (start-up reads them from the
    /// environment, and refuses to start on a bad key).
    pub fn with_receipts(mut self, receipts: ReceiptKeys) -> QueueApi {
        self.receipts = receipts;
        self
    }

    /// Answers one request to `endpoint`.
    pub async fn serve(&self, endpoint: Endpoint, session: &mut Session) -> Reply {
        // Owned, since the handlers read the body through the session.
        let head = session.req_header().clone();
        let caller = Caller::from_fields(
            head.headers
                .iter()
                .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
        )
        .with_authority(head.uri.authority().map(|a| a.as_str()));
        let method = head.method.as_str();
        if method == "OPTIONS" && caller.sent().origin.is_some() {
            return self.preflight(&caller);
        }
        let reply = if method != endpoint.method() {
            Reply::from(ApiError::MethodNotAllowed {
                path: endpoint.path(),
                allow: endpoint.method(),
            })
        } else {
            match endpoint {
                Endpoint::Register => register::handle(self, session, &caller).await,
                Endpoint::Rank => rank::answer(self, head.uri.query(), &caller).await,
                Endpoint::Dropout => dropout::handle(self, &head, &caller).await,
                Endpoint::Token => token::handle(self, session, &caller).await,
                Endpoint::Challenge => self.challenge(head.uri.query()),
                Endpoint::Fairness => self.fairness(head.uri.query()),
                Endpoint::Keys => Reply {
                    cache_control: "public, max-age=300",
                    ..Reply::json_bytes(200, self.receipts.jwks())
                },
            }
        };
        self.finish(reply, &caller)
    }

    /// The answer to a rank request, for the direct lane: the same as
    /// [`QueueApi::serve`] gives.
    pub async fn rank(&self, query: Option<&str>, caller: &Caller) -> Reply {
        self.finish(rank::answer(self, query, caller).await, caller)
    }

    /// The answer to a register request, for the direct lane, which has
    /// read its `application/json` body (`Content-Length`, at most
    /// [`input::MAX_QUEUE_BODY_BYTES`]): the same as [`QueueApi::serve`] gives.
    pub async fn register(&self, body: &[u8], caller: &Caller) -> Reply {
        let reply = match register::registered(self, body, caller).await {
            Ok(reply) | Err(reply) => reply,
        };
        self.finish(reply, caller)
    }

    /// Every queue API reply to an allowed origin carries CORS headers.
    fn finish(&self, mut reply: Reply, caller: &Caller) -> Reply {
        if let Some(headers) = self.browsers().origins.cors(caller.sent()) {
            reply.headers.extend(headers);
        }
        reply
    }

    /// A CORS preflight: allowed origins get the methods and headers the
    /// queue API takes; others 403.
    fn preflight(&self, caller: &Caller) -> Reply {
        match origin::preflight(&self.browsers().origins, caller.sent()) {
            Some(headers) => {
                let mut reply = Reply::no_content();
                reply.headers.extend(headers);
                reply
            }
            None => Reply::from(ApiError::OriginNotAllowed),
        }
    }

    /// Where a reload puts new cookie and origin settings.
    /// The per-client limits: both HTTP paths check them before calling
    /// the API, and a reload updates them.
    pub fn limits(&self) -> &Arc<ClientLimits> {
        &self.limits
    }

    pub fn browser_settings(&self) -> Arc<ArcSwap<BrowserConfig>> {
        self.browsers.clone()
    }

    /// The cookie and origin settings in force now.
    pub fn browsers(&self) -> arc_swap::Guard<Arc<BrowserConfig>> {
        self.browsers.load()
    }

    pub fn jar(&self) -> CookieJar {
        CookieJar {
            secure: self.browsers().secure_cookies,
        }
    }

    pub fn logins(&self) -> Option<&Logins> {
        self.logins.as_ref()
    }

    /// The queue a request names, or the only one when it names none.
    fn queue(&self, name: Option<&str>) -> Result<Arc<Queue>, ApiError> {
        self.queues.load().find(name).cloned()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The arrival a presented credential names, when it is one of ours
    /// for this user on this queue: checked here, with no Redis call.
    /// Any other credential matches no registration.
    pub(super) fn arrival_of(
        &self,
        queue: &Queue,
        user: &UserId,
        credential: &str,
    ) -> Result<u64, ApiError> {
        self.credentials
            .check(&queue.name, user.as_str(), credential)
            .ok_or(ApiError::CredentialMismatch)
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Ends `identity`'s active state and revokes its tokens, because the
    /// backend said it is done with the user (`X-Waitgate-Release`). Called
    /// with the response head, before the client has any of it: this
    /// instance refuses the user's tokens from now on, by its own clock.
    /// Redis (the active state, and every other instance) is told apart
    /// from the response, which does not wait for it, and retried for a
    /// few seconds: the first call after a Redis reconnect can fail.
    pub fn release(&self, identity: &Identity) {
        let Ok(queue) = self.queue(Some(&identity.queue)) else {
            return;
        };
        let now_ms = crate::time::now_ms();
        self.tokens
            .revoked()
            .insert(&queue.name, &identity.user, now_ms);
        self.metrics
            .releases
            .with_label_values(&[&queue.name])
            .inc();
        let store = self.store.clone();
        let tokens = self.tokens.clone();
        let metrics = self.metrics.clone();
        let user = identity.user.clone();
        tokio::spawn(async move {
            let mut pause = RELEASE_RETRY;
            for attempt in 1..=RELEASE_ATTEMPTS {
                match revoke(&store, &tokens, &metrics, &queue, &user, REVOKED_BY_RELEASE).await {
                    Ok((was_active, _)) => {
                        tracing::info!(queue = %queue.name, user = &*user, was_active, "released by the upstream");
                        return;
                    }
                    Err(e) => {
                        metrics.redis_error("revoke");
                        if attempt == RELEASE_ATTEMPTS {
                            match &e {
                                // A backend releasing users during an
                                // outage would otherwise write a line each.
                                StoreError::Unavailable(_) | StoreError::Lost => {
                                    crate::logging::warn_limited_noting(
                                        "release",
                                        "only this instance refuses the released users' tokens",
                                        &e,
                                    )
                                }
                                StoreError::Failed(_) => {
                                    tracing::error!(queue = %queue.name, user = &*user, %e, "release failed: redis; only this instance refuses the user's tokens")
                                }
                            }
                            return;
                        }
                    }
                }
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        });
    }

    /// Reads and drops the body of a request refused before it was read
    /// (a per-client limit's 429), as the direct lane has read it when it
    /// answers: a JSON body of at most 4,096 bytes, within the body
    /// timeout, not asked for with `100 Continue`. Whether the connection
    /// may stay; anything else closes it, on both paths.
    pub async fn read_refused_body(&self, session: &mut Session) -> bool {
        if session.as_downstream_mut().is_body_empty() {
            return true;
        }
        if crate::wire::body::expects_continue(&session.req_header().headers) {
            return false;
        }
        self.read_body(session).await.is_ok()
    }

    /// Reads a JSON body within the body timeout.
    async fn read_body(&self, session: &mut Session) -> Result<bytes::Bytes, Reply> {
        match tokio::time::timeout(self.body_timeout, input::read_json_body(session)).await {
            Ok(body) => body,
            Err(_) => Err(Reply::from(ApiError::RequestTimeout).closing()),
        }
    }

    /// The 503 for a store failure, logged and counted here for every
    /// endpoint.
    fn unavailable(&self, endpoint: Endpoint, error: StoreError) -> ApiError {
        self.metrics.redis_error(endpoint.name());
        match &error {
            // An outage fails every request: one line a second says so.
            // The state being written back after Redis lost it is as
            // short an outage.
            StoreError::Unavailable(_) | StoreError::Lost => {
                crate::logging::warn_limited(endpoint.name(), &error)
            }
            // So can Redis refusing every call (a password it no longer
            // takes): at `error`, as often.
            StoreError::Failed(_) => crate::logging::error_limited(endpoint.name(), &error),
        }
        ApiError::RedisUnavailable
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::config::Config;
    use crate::queues::{Queue, Queues};

    /// One configured queue, for the handlers' pure parts.
    pub fn queue() -> Queue {
        let config = Config::from_yaml(
            "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues: {baseball: {}}\nupstreams: {}\nroutes: []\n",
        )
        .unwrap();
        let queues = Queues::new(&config);
        let queue = queues.find(None).unwrap();
        Queue::new(&queue.name, &queue.config)
    }
}
