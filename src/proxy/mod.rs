//! The `ProxyHttp` implementation: a dispatcher.
//!
//! A request flows one way: path check, then route, then either the queue
//! API (answered here, never forwarded) or a protected route. Decisions are
//! plain values from plain functions ([`Gate::route`]); the phases below only
//! act on them.

pub mod path;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use pingora::prelude::HttpPeer;
use pingora::proxy::{ProxyHttp, Session};
use pingora::{Error, ErrorType, Result};

use crate::queue::{self, Endpoint, QueueApi};
use crate::reply::Reply;
use crate::server::{InFlight, InFlightGuard};

/// Where a request goes, decided from its header alone.
#[derive(Debug)]
pub enum Route {
    /// Answered by the queue API.
    Queue(Endpoint),
    /// Answered at once with this reply (bad path, no such route).
    Respond(Reply),
}

/// What one request carries between phases.
pub struct RequestCtx {
    /// When the request header was read: for the latency metric and logs.
    pub started: Instant,
    /// The label this request is counted under.
    pub route: &'static str,
    /// Set when waitgate wrote the reply itself.
    pub status: Option<u16>,
    /// Held for the life of the request; dropping it ends the request for
    /// the shutdown drain, whichever way the request ends.
    _in_flight: InFlightGuard,
}

/// The proxy: the queue API plus the protected routes.
pub struct Gate {
    api: QueueApi,
    /// Counts requests under way, so that SIGTERM can exit as soon as they
    /// are done instead of sleeping out the whole grace period.
    in_flight: Arc<InFlight>,
}

impl Gate {
    pub fn new(api: QueueApi, in_flight: Arc<InFlight>) -> Gate {
        Gate { api, in_flight }
    }

    /// Decides where a request goes from its target alone.
    pub fn route(target: &[u8]) -> Route {
        if let Err(why) = path::classify(target) {
            return Route::Respond(Reply::error(400, "bad_path", why.message()));
        }
        // classify() accepted only ASCII, so this cannot fail.
        let target = std::str::from_utf8(target).unwrap_or("/");
        let path = target.split('?').next().unwrap_or(target);
        if queue::is_queue_api_path(path) {
            return match Endpoint::from_path(path) {
                Some(endpoint) => Route::Queue(endpoint),
                None => Route::Respond(not_found()),
            };
        }
        Route::Respond(not_found())
    }
}

fn not_found() -> Reply {
    Reply::error(404, "not_found", "No route serves this path.")
}

#[async_trait]
impl ProxyHttp for Gate {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            started: Instant::now(),
            route: "other",
            status: None,
            _in_flight: self.in_flight.enter(),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        ctx.started = Instant::now();
        let mut reply = match Gate::route(session.req_header().raw_path()) {
            Route::Respond(reply) => reply,
            Route::Queue(endpoint) => {
                ctx.route = endpoint.name();
                self.api.serve(endpoint, session).await
            }
        };
        // An unread body would have to be drained before the connection could
        // carry another request; closing is cheaper and safer.
        if !session.as_downstream_mut().is_body_done() {
            reply = reply.closing();
        }
        ctx.status = Some(reply.status);
        reply.send(session).await?;
        Ok(true)
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        // request_filter answers every request until routes are wired.
        Err(Error::explain(
            ErrorType::InternalError,
            "no upstream chosen",
        ))
    }

    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut RequestCtx) {
        let status = ctx
            .status
            .or_else(|| session.response_written().map(|r| r.status.as_u16()))
            .unwrap_or(0);
        let elapsed = ctx.started.elapsed();
        match error {
            Some(e) => tracing::warn!(
                route = ctx.route,
                status,
                elapsed_us = elapsed.as_micros() as u64,
                error = %e,
                "request failed"
            ),
            None => tracing::debug!(
                route = ctx.route,
                status,
                elapsed_us = elapsed.as_micros() as u64,
                "request"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(target: &str) -> u16 {
        match Gate::route(target.as_bytes()) {
            Route::Respond(r) => r.status,
            Route::Queue(_) => 0,
        }
    }

    #[test]
    fn queue_endpoints_are_recognised_exactly() {
        assert!(matches!(
            Gate::route(b"/api/v1/queue/register"),
            Route::Queue(Endpoint::Register)
        ));
        assert!(matches!(
            Gate::route(b"/api/v1/queue/rank?userId=a"),
            Route::Queue(Endpoint::Rank)
        ));
        assert!(matches!(
            Gate::route(b"/api/v1/queue/dropout?userId=a"),
            Route::Queue(Endpoint::Dropout)
        ));
        assert_eq!(status("/api/v1/queue/register/"), 404);
        assert_eq!(status("/api/v1/queue/Register"), 404);
        assert_eq!(status("/api/v1/queue"), 404);
        assert_eq!(status("/api/v1/queuex"), 404);
        assert_eq!(status("/"), 404);
    }

    #[test]
    fn bad_paths_are_refused_before_routing() {
        assert_eq!(status("/api/v1/queue/../queue/register"), 400);
        assert_eq!(status("/api/v1/queue/%72egister"), 404);
        assert_eq!(status("/api/v1//queue/register"), 400);
    }
}
