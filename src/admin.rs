//! The admin listener: `/metrics`, `/healthz`, `/readyz`, `/healthz/redis`,
//! and the operators' API under `/admin/v1/` (see [`crate::control`]).
//!
//! It listens apart from the proxy so that probes and scrapes never compete
//! with, or are exposed to, the public listener.
//!
//! Readiness is not Redis health. An instance whose Redis is down still
//! serves admitted users (their tokens are checked with no Redis call); a
//! load balancer that took it out would turn a Redis blip into a full
//! outage. So `/readyz` answers 200 while the process serves, and Redis has
//! its own signals: `waitgate_redis_up` and `/healthz/redis`.

use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::control::{self, ControlApi};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::reply::Reply;
use crate::store::Store;
use crate::wire;

pub struct AdminApp {
    store: Arc<Store>,
    metrics: Arc<Metrics>,
    control: Arc<ControlApi>,
}

impl AdminApp {
    pub fn new(store: Arc<Store>, metrics: Arc<Metrics>, control: Arc<ControlApi>) -> AdminApp {
        AdminApp {
            store,
            metrics,
            control,
        }
    }
}

fn reply(status: u16, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header("Content-Type", content_type)
        .header("Content-Length", body.len())
        .header("Cache-Control", "no-store")
        .body(body)
        .unwrap_or_else(|_| Response::new(Vec::new()))
}

fn json(status: u16, body: &str) -> Response<Vec<u8>> {
    reply(status, "application/json", body.as_bytes().to_vec())
}

fn error(error: ApiError) -> Response<Vec<u8>> {
    Reply::from(error).into_response()
}

/// How long an admin request body may take to arrive.
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a request body of at most `limit` bytes within [`BODY_TIMEOUT`],
/// as the queue API reads its bodies: 413 at once when the declared length
/// passes the limit, and `100 Continue` to a client that waits for it.
async fn read_body(session: &mut ServerSession, limit: usize) -> Result<Vec<u8>, ApiError> {
    let headers = &session.req_header().headers;
    if wire::body::declares_more_than(headers, limit) {
        return Err(ApiError::BodyTooLarge);
    }
    if wire::body::expects_continue(headers) && session.write_continue_response().await.is_err() {
        return Err(ApiError::InvalidRequest(
            "The request body could not be read.".into(),
        ));
    }
    let read = async {
        let mut body = Vec::new();
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > limit {
                        return Err(ApiError::BodyTooLarge);
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(body),
                Err(_) => {
                    return Err(ApiError::InvalidRequest(
                        "The request body could not be read.".into(),
                    ))
                }
            }
        }
    };
    tokio::time::timeout(BODY_TIMEOUT, read)
        .await
        .unwrap_or(Err(ApiError::RequestTimeout))
}

/// Every value of one header, as sent.
fn values(headers: &http::HeaderMap, name: http::header::HeaderName) -> Vec<&[u8]> {
    headers.get_all(name).iter().map(|v| v.as_bytes()).collect()
}

/// The admin API: authorised first, then its body read, then answered.
async fn control_request(control: &ControlApi, session: &mut ServerSession) -> Reply {
    let header = session.req_header();
    let authorization = values(&header.headers, http::header::AUTHORIZATION);
    let actor = match control.authorize(&authorization) {
        Ok(actor) => actor,
        Err(reply) => return reply,
    };
    let body = match read_body(session, control::MAX_ADMIN_BODY_BYTES).await {
        Ok(body) => body,
        Err(error) => {
            // Where an unread or broken body ends is unknown: whatever
            // follows on this connection must not be read as a request.
            session.set_keepalive(None);
            return Reply::from(error).closing();
        }
    };
    let header = session.req_header();
    let content_type = values(&header.headers, http::header::CONTENT_TYPE);
    let request = control::Request {
        actor: &actor,
        method: header.method.as_str(),
        path: header.uri.path(),
        content_type: &content_type,
        body: &body,
    };
    control.serve(request).await
}

/// Whether the client asked for the connection to end after this answer:
/// `Connection: close`, or HTTP/1.0 without `keep-alive` (RFC 9112 §9.3).
/// Pingora's plain HTTP apps keep every connection open after a request.
fn ends_connection(header: &pingora::http::RequestHeader) -> bool {
    let (mut close, mut keep) = (false, false);
    for value in header.headers.get_all(http::header::CONNECTION) {
        for token in crate::proxy::rules::elements(value.as_bytes()) {
            close |= token.eq_ignore_ascii_case(b"close");
            keep |= token.eq_ignore_ascii_case(b"keep-alive");
        }
    }
    close || (header.version < http::Version::HTTP_11 && !keep)
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        if ends_connection(session.req_header()) {
            session.set_keepalive(None);
        }
        if session.req_header().uri.path().starts_with(control::PREFIX) {
            return control_request(&self.control, session)
                .await
                .into_response();
        }
        let header = session.req_header();
        if header.method != http::Method::GET && header.method != http::Method::HEAD {
            return error(ApiError::MethodNotAllowed {
                path: "Each admin endpoint",
                allow: "GET",
            });
        }
        match header.uri.path() {
            // The process runs and its runtime answers.
            "/healthz" => json(200, r#"{"status":"ok"}"#),
            // Prometheus text format; the gauges come from the sampler and
            // the probe, so a scrape never waits on Redis.
            "/metrics" => reply(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                self.metrics.encode(),
            ),
            // Ready while the process serves: the proxy runs in this same
            // process, and answers admitted users whatever Redis does. The
            // body says what the probe last saw of Redis, for people.
            "/readyz" => {
                if self.metrics.redis_up.get() == 1 {
                    json(200, r#"{"status":"ready","redis":"up"}"#)
                } else {
                    json(200, r#"{"status":"ready","redis":"down"}"#)
                }
            }
            // Redis, asked now.
            // Up, and what it cannot keep (warnings, not a failure).
            "/healthz/redis" => match self.store.ping().await {
                Ok(()) => {
                    let warnings = self
                        .control
                        .durability_warnings()
                        .await
                        .unwrap_or_else(|e| {
                            vec![format!("could not ask redis what it keeps: {e}")]
                        });
                    let body = serde_json::json!({ "redis": "up", "warnings": warnings });
                    json(200, &body.to_string())
                }
                Err(e) => {
                    self.metrics.redis_error("ping");
                    tracing::debug!(%e, "redis health check failed");
                    error(ApiError::RedisUnavailable)
                }
            },
            _ => error(ApiError::NotFound),
        }
    }
}
