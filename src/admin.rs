//! The admin listener: `/metrics`, `/healthz`, `/readyz`.
//!
//! It listens apart from the proxy so that probes and scrapes never compete
//! with, or are exposed to, the public listener.

use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::reply::Reply;
use crate::store::Store;

pub struct AdminApp {
    store: Arc<Store>,
    metrics: Arc<Metrics>,
}

impl AdminApp {
    pub fn new(store: Arc<Store>, metrics: Arc<Metrics>) -> AdminApp {
        AdminApp { store, metrics }
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

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
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
            // Ready only while Redis answers: a load balancer should not send
            // queue traffic to an instance that can only answer 503.
            // Prometheus text format; the gauges come from the sampler, so a
            // scrape never waits on Redis.
            "/metrics" => reply(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                self.metrics.encode(),
            ),
            "/readyz" => match self.store.ping().await {
                Ok(()) => json(200, r#"{"status":"ready"}"#),
                Err(e) => {
                    self.metrics.redis_error("ping");
                    tracing::debug!(%e, "not ready");
                    error(ApiError::RedisUnavailable)
                }
            },
            _ => error(ApiError::NotFound),
        }
    }
}
