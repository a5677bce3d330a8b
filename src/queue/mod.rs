//! The queue API that waitgate answers itself (SPEC §3).
//!
//! One file per endpoint: `register`, `rank`, `dropout`, `token`. Each reads
//! its input through [`input`], makes exactly one store call, and returns a
//! [`Reply`]. Status bodies are built here so that register and rank always
//! describe a user the same way.

pub mod credential;
mod dropout;
pub mod input;
pub mod rank;
pub mod register;
pub mod token;

use std::collections::BTreeMap;
use std::sync::Arc;

use http::Method;
use pingora::proxy::Session;
use serde::Serialize;

use crate::config::{AdmissionConfig, Config};
use crate::edge::jwt::Tokens;
use crate::metrics::Metrics;
use crate::proxy::path::under_prefix;
use crate::reply::Reply;
use crate::store::{Place, QueueKeys, Store, StoreError};
use credential::Credentials;

/// Everything under this prefix is the queue API; nothing under it is ever
/// forwarded.
pub const PREFIX: &str = "/api/v1/queue";

pub fn is_queue_api_path(path: &str) -> bool {
    under_prefix(path, PREFIX)
}

/// The endpoints of the queue API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Register,
    Rank,
    Dropout,
    Token,
}

impl Endpoint {
    pub fn from_path(path: &str) -> Option<Endpoint> {
        match path {
            "/api/v1/queue/register" => Some(Endpoint::Register),
            "/api/v1/queue/rank" => Some(Endpoint::Rank),
            "/api/v1/queue/dropout" => Some(Endpoint::Dropout),
            "/api/v1/queue/active/token" => Some(Endpoint::Token),
            _ => None,
        }
    }

    pub fn method(self) -> Method {
        match self {
            Endpoint::Register => Method::POST,
            Endpoint::Rank => Method::GET,
            Endpoint::Dropout => Method::DELETE,
            Endpoint::Token => Method::POST,
        }
    }

    /// The name used in logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Register => "register",
            Endpoint::Rank => "rank",
            Endpoint::Dropout => "dropout",
            Endpoint::Token => "token",
        }
    }
}

/// A configured queue, with what the API needs of it.
#[derive(Debug)]
pub struct Queue {
    pub name: String,
    pub keys: QueueKeys,
    pub admission: AdmissionConfig,
}

/// The queue API: the queues and the store behind them.
pub struct QueueApi {
    queues: BTreeMap<String, Queue>,
    /// The queue used when a request names none (only with exactly one queue).
    default_queue: Option<String>,
    store: Arc<Store>,
    tokens: Arc<Tokens>,
    credentials: Credentials,
    metrics: Arc<Metrics>,
    /// A body must arrive whole within this.
    body_timeout: std::time::Duration,
}

impl QueueApi {
    pub fn new(
        config: &Config,
        store: Arc<Store>,
        tokens: Arc<Tokens>,
        credentials: Credentials,
        metrics: Arc<Metrics>,
    ) -> QueueApi {
        let queues = config
            .queues
            .iter()
            .map(|(name, q)| {
                let queue = Queue {
                    name: name.clone(),
                    keys: QueueKeys::new(name),
                    admission: q.admission.clone(),
                };
                (name.clone(), queue)
            })
            .collect();
        QueueApi {
            queues,
            default_queue: config.single_queue().map(str::to_string),
            store,
            tokens,
            credentials,
            metrics,
            body_timeout: config.clients.body_timeout,
        }
    }

    /// Answers one request to `endpoint`.
    pub async fn serve(&self, endpoint: Endpoint, session: &mut Session) -> Reply {
        if session.req_header().method != endpoint.method() {
            let allow = endpoint.method().to_string();
            return Reply::error(
                405,
                "method_not_allowed",
                &format!("{} only accepts {allow}.", endpoint_path(endpoint)),
            )
            .header("Allow", allow);
        }
        match endpoint {
            Endpoint::Register => register::handle(self, session).await,
            Endpoint::Rank => rank::handle(self, session).await,
            Endpoint::Dropout => dropout::handle(self, session).await,
            Endpoint::Token => token::handle(self, session).await,
        }
    }

    /// The queue a request names, or the only one when it names none.
    fn queue(&self, name: Option<&str>) -> Result<&Queue, Reply> {
        let name = match name.or(self.default_queue.as_deref()) {
            Some(name) => name,
            None => {
                return Err(Reply::error(
                    400,
                    "invalid_request",
                    "queue is required when several queues are configured.",
                ))
            }
        };
        self.queues
            .get(name)
            .ok_or_else(|| Reply::error(404, "unknown_queue", "No queue has that name."))
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

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Reads a JSON body within the body timeout.
    async fn read_body(&self, session: &mut Session) -> Result<bytes::Bytes, Reply> {
        match tokio::time::timeout(self.body_timeout, input::read_json_body(session)).await {
            Ok(body) => body,
            Err(_) => Err(Reply::error(
                408,
                "request_timeout",
                "The request body did not arrive in time.",
            )
            .closing()),
        }
    }

    /// The 503 for a store failure, logged and counted here for every
    /// endpoint.
    fn unavailable(&self, endpoint: Endpoint, error: StoreError) -> Reply {
        self.metrics.redis_error(endpoint.name());
        match &error {
            StoreError::Unavailable(_) => {
                tracing::warn!(op = endpoint.name(), %error, "redis call failed")
            }
            StoreError::Failed(_) => {
                tracing::error!(op = endpoint.name(), %error, "redis call failed")
            }
        }
        Reply::error(
            503,
            "redis_unavailable",
            "The queue store is unavailable; retry shortly.",
        )
    }
}

fn endpoint_path(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Register => "/api/v1/queue/register",
        Endpoint::Rank => "/api/v1/queue/rank",
        Endpoint::Dropout => "/api/v1/queue/dropout",
        Endpoint::Token => "/api/v1/queue/active/token",
    }
}

/// A waiting user, as register and rank describe it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WaitingBody<'a> {
    user_id: &'a str,
    queue: &'a str,
    status: &'static str,
    rank: u64,
    estimated_waiting_count: u64,
    estimated_wait_seconds: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_credential: Option<&'a str>,
}

/// An admitted user.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ActiveBody<'a> {
    user_id: &'a str,
    queue: &'a str,
    status: &'static str,
}

/// `estimatedWaitSeconds` is the gate's estimate (see `lua/lib.lua`),
/// rounded to the nearest second.
fn waiting_reply(queue: &Queue, user: &str, place: Place, credential: Option<&str>) -> Reply {
    Reply::json(
        200,
        &WaitingBody {
            user_id: user,
            queue: &queue.name,
            status: "WAITING",
            rank: place.rank,
            estimated_waiting_count: place.rank + 1,
            estimated_wait_seconds: place.wait_ms.saturating_add(500) / 1000,
            queue_credential: credential,
        },
    )
}

fn active_reply(queue: &Queue, user: &str) -> Reply {
    Reply::json(
        200,
        &ActiveBody {
            user_id: user,
            queue: &queue.name,
            status: "ACTIVE",
        },
    )
}
