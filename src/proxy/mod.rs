//! The `ProxyHttp` implementation: a dispatcher.
//!
//! A request flows one way: framing and path checks, then routing, then
//! either the queue API (answered here, never forwarded) or a protected
//! route (JWT checked at the edge, then forwarded). [`Gate::decide`] makes
//! that decision from the request header alone, as a plain value; the phases
//! below only act on it.

pub mod connections;
pub mod direct;
pub mod framing;
pub mod path;
pub mod routes;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use pingora::http::RequestHeader;
use pingora::modules::http::HttpModules;
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorSource, ErrorType, Result};

use crate::edge::jwt::{self, Identity, Reject, Tokens};
use crate::metrics::Metrics;
use crate::queue::{self, Endpoint, QueueApi};
use crate::reply::Reply;
use crate::server::{InFlight, InFlightGuard};
use routes::RouteTable;

/// The headers through which the upstream learns who is calling. Copies sent
/// by the client are removed before waitgate sets its own.
pub const USER_HEADER: &str = "x-waitgate-user";
pub const QUEUE_HEADER: &str = "x-waitgate-queue";

/// What to do with a request, decided from its header alone.
#[derive(Debug)]
pub enum Decision {
    /// Answered by the queue API.
    Queue(Endpoint),
    /// Forward to the route's upstream on behalf of `identity`. `origin` is
    /// set when the target was absolute-form and must be rewritten to the
    /// path that was checked.
    Forward {
        route: usize,
        identity: Identity,
        origin: Option<Vec<u8>>,
    },
    /// Refused at the edge (401/403).
    Deny(Reject),
    /// Answered at once (bad framing or path, no such route).
    Respond(Reply),
}

/// What one request carries between phases.
pub struct RequestCtx {
    /// When the request header was read: for the latency metric and logs.
    pub started: Instant,
    /// The queue API endpoint, when the request was one.
    pub endpoint: Option<Endpoint>,
    /// The protected route, once chosen.
    pub route: Option<usize>,
    /// Who the verified token speaks for, for the identity headers.
    pub identity: Option<Identity>,
    /// Set when waitgate wrote the reply itself.
    pub status: Option<u16>,
    /// Held for the life of the request; dropping it ends the request for
    /// the shutdown drain, whichever way the request ends.
    _in_flight: InFlightGuard,
}

/// The proxy: the queue API plus the protected routes.
pub struct Gate {
    api: Arc<QueueApi>,
    routes: Arc<RouteTable>,
    tokens: Arc<Tokens>,
    /// Counts requests under way, so that SIGTERM can exit as soon as they
    /// are done instead of sleeping out the whole grace period.
    in_flight: Arc<InFlight>,
    metrics: Arc<Metrics>,
    body_timeout: std::time::Duration,
}

impl Gate {
    pub fn new(
        api: Arc<QueueApi>,
        routes: Arc<RouteTable>,
        tokens: Arc<Tokens>,
        in_flight: Arc<InFlight>,
        metrics: Arc<Metrics>,
        body_timeout: std::time::Duration,
    ) -> Gate {
        Gate {
            api,
            routes,
            tokens,
            in_flight,
            metrics,
            body_timeout,
        }
    }

    /// Decides what to do with a request. `now` is the proxy's clock in
    /// seconds, for the token's `exp` and `iat`.
    pub fn decide(&self, header: &RequestHeader, now: u64) -> Decision {
        if let Err(why) = framing::check(&header.headers) {
            return Decision::Respond(Reply::error(400, "bad_request", why));
        }
        let authorization = header
            .headers
            .get_all(http::header::AUTHORIZATION)
            .into_iter()
            .map(|v| v.as_bytes());
        decide_target(
            &self.routes,
            &self.tokens,
            header.raw_path(),
            authorization,
            now,
        )
    }
}

/// The decision for a request whose framing was found sound, from its raw
/// target and its `Authorization` values. Shared by the Pingora proxy and the
/// direct lane, so both decide alike.
pub fn decide_target<'a>(
    routes: &RouteTable,
    tokens: &Tokens,
    raw: &[u8],
    authorization: impl Iterator<Item = &'a [u8]>,
    now: u64,
) -> Decision {
    let Some(target) = path::origin_form(raw) else {
        return Decision::Respond(Reply::error(
            400,
            "bad_path",
            "The request target must be a path or an absolute http(s) URL.",
        ));
    };
    if let Err(why) = path::classify(&target) {
        return Decision::Respond(Reply::error(400, "bad_path", why.message()));
    }
    // classify() accepted only ASCII, so this cannot fail.
    let target_str = std::str::from_utf8(&target).unwrap_or("/");
    let path = target_str.split('?').next().unwrap_or(target_str);

    if queue::is_queue_api_path(path) {
        return match Endpoint::from_path(path) {
            Some(endpoint) => Decision::Queue(endpoint),
            None => Decision::Respond(not_found()),
        };
    }
    let Some(index) = routes.find(path) else {
        return Decision::Respond(not_found());
    };
    let Some(route) = routes.get(index) else {
        return Decision::Respond(not_found());
    };
    match tokens.check(authorization, &route.queue, now) {
        Ok(identity) => Decision::Forward {
            route: index,
            identity,
            origin: match target {
                Cow::Owned(rewritten) => Some(rewritten),
                Cow::Borrowed(b) if b.len() != raw.len() => Some(b.to_vec()),
                Cow::Borrowed(_) => None,
            },
        },
        Err(reject) => Decision::Deny(reject),
    }
}

fn not_found() -> Reply {
    Reply::error(404, "not_found", "No route serves this path.")
}

/// 401 (with the RFC 6750 challenge) or 403 for a refused token.
pub fn deny_reply(reject: Reject) -> Reply {
    match reject.status() {
        403 => Reply::error(403, "insufficient_scope", reject.message())
            .header("WWW-Authenticate", r#"Bearer error="insufficient_scope""#),
        status => Reply::error(status, "invalid_token", reject.message())
            .header("WWW-Authenticate", r#"Bearer error="invalid_token""#),
    }
}

#[async_trait]
impl ProxyHttp for Gate {
    type CTX = RequestCtx;

    /// No downstream modules: Pingora's default adds a (disabled) response
    /// compression module that would still run on every request and body
    /// chunk. waitgate forwards the upstream's bytes as they are.
    fn init_downstream_modules(&self, _modules: &mut HttpModules) {}

    fn new_ctx(&self) -> RequestCtx {
        // Pingora builds the context right after reading a request header.
        connections::header_read();
        RequestCtx {
            started: Instant::now(),
            endpoint: None,
            route: None,
            identity: None,
            status: None,
            _in_flight: self.in_flight.enter(),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let mut reply = match self.decide(session.req_header(), jwt::now_s()) {
            Decision::Forward {
                route,
                identity,
                origin,
            } => {
                if let Some(origin) = origin {
                    session.req_header_mut().set_raw_path(&origin)?;
                }
                // A proxied body may pause this long between reads.
                session.set_read_timeout(Some(self.body_timeout));
                ctx.route = Some(route);
                ctx.identity = Some(identity);
                return Ok(false);
            }
            Decision::Queue(endpoint) => {
                ctx.endpoint = Some(endpoint);
                self.api.serve(endpoint, session).await
            }
            Decision::Deny(reject) => {
                self.metrics
                    .jwt_rejected
                    .with_label_values(&[reject.reason()])
                    .inc();
                deny_reply(reject)
            }
            Decision::Respond(reply) => reply,
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
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        ctx.route
            .and_then(|i| self.routes.get(i))
            .map(|route| route.peer())
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no route chosen"))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        upstream_request.remove_header(USER_HEADER);
        upstream_request.remove_header(QUEUE_HEADER);
        if let Some(identity) = &ctx.identity {
            upstream_request.insert_header(USER_HEADER, &*identity.user)?;
            upstream_request.insert_header(QUEUE_HEADER, &*identity.queue)?;
        }
        Ok(())
    }

    /// Upstream failures get the same JSON error shape as everything else.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let (status, code, message) = match e.etype() {
            ErrorType::HTTPStatus(status) if *status < 500 => (
                *status,
                "bad_request",
                "The request could not be processed.",
            ),
            ErrorType::HTTPStatus(status) => {
                (*status, "upstream_unavailable", "The upstream failed.")
            }
            ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout
                if e.esource() == &ErrorSource::Upstream =>
            {
                (
                    504,
                    "upstream_timeout",
                    "The upstream did not answer in time.",
                )
            }
            _ => match e.esource() {
                ErrorSource::Upstream => (502, "upstream_unavailable", "The upstream failed."),
                ErrorSource::Downstream => match e.etype() {
                    ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => {
                        (0, "", "")
                    }
                    _ => (400, "bad_request", "The request could not be read."),
                },
                ErrorSource::Internal | ErrorSource::Unset => (
                    502,
                    "upstream_unavailable",
                    "The request could not be forwarded.",
                ),
            },
        };
        if status > 0 {
            ctx.status = Some(status);
            let _ = Reply::error(status, code, message)
                .closing()
                .send(session)
                .await;
        }
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut RequestCtx) {
        let status = ctx
            .status
            .or_else(|| session.response_written().map(|r| r.status.as_u16()))
            .unwrap_or(0);
        let route = match (ctx.endpoint, ctx.route.and_then(|i| self.routes.get(i))) {
            (Some(endpoint), _) => endpoint.name(),
            (None, Some(route)) => route.prefix.as_str(),
            (None, None) => "other",
        };
        let elapsed = ctx.started.elapsed();
        if status > 0 {
            self.metrics
                .observe_request(route, status, elapsed.as_secs_f64());
        }
        let elapsed_us = elapsed.as_micros() as u64;
        match error {
            Some(e) => tracing::warn!(route, status, elapsed_us, error = %e, "request failed"),
            None => tracing::debug!(route, status, elapsed_us, "request"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::edge::secret::Secret;
    use crate::queue::credential::Credentials;
    use crate::store::Store;

    const CONFIG: &str = "
redis: {url: 'redis://127.0.0.1:1/0'}
queues: {baseball: {}, soccer: {}}
upstreams: {ticketing: {address: '127.0.0.1:9000'}}
routes:
  - {prefix: /api/v1/follow-up, upstream: ticketing, queue: baseball}
  - {prefix: /soccer, upstream: ticketing, queue: soccer}
";

    fn gate() -> (Gate, Arc<Tokens>) {
        let config = Config::from_yaml(CONFIG).unwrap();
        let secret = Secret::from_base64("dGVzdC1zZWNyZXQtZm9yLXdhaXRnYXRlLXRlc3RzLTAx").unwrap();
        let tokens = Arc::new(Tokens::new(&secret, &config.jwt));
        let store = Arc::new(Store::new(&config.redis.url, config.redis.command_timeout).unwrap());
        let metrics = Arc::new(Metrics::new(&config));
        let api = Arc::new(QueueApi::new(
            &config,
            store,
            tokens.clone(),
            Credentials::new(&secret),
            metrics.clone(),
        ));
        let routes = Arc::new(RouteTable::build(&config).unwrap());
        let gate = Gate::new(
            api,
            routes,
            tokens.clone(),
            Arc::new(InFlight::default()),
            metrics,
            config.clients.body_timeout,
        );
        (gate, tokens)
    }

    fn request(target: &[u8], headers: &[(&str, &str)]) -> RequestHeader {
        let mut h = RequestHeader::build("GET", b"/", None).unwrap();
        h.set_raw_path(target).unwrap();
        for (n, v) in headers {
            h.append_header(n.to_string(), *v).unwrap();
        }
        h
    }

    fn status(d: Decision) -> u16 {
        match d {
            Decision::Respond(r) => r.status,
            Decision::Deny(r) => deny_reply(r).status,
            Decision::Queue(_) => 1,
            Decision::Forward { .. } => 2,
        }
    }

    fn bearer(tokens: &Tokens, queue: &str) -> String {
        let now = jwt::now_s();
        let t = tokens.issue("u1", queue, (now + 60) * 1000, now).unwrap();
        format!("Bearer {}", t.token)
    }

    #[test]
    fn queue_endpoints_are_recognised_exactly() {
        let (g, _) = gate();
        let now = jwt::now_s();
        for (target, want) in [
            ("/api/v1/queue/register", Endpoint::Register),
            ("/api/v1/queue/rank?userId=a", Endpoint::Rank),
            ("/api/v1/queue/dropout?userId=a", Endpoint::Dropout),
            ("/api/v1/queue/active/token", Endpoint::Token),
        ] {
            match g.decide(&request(target.as_bytes(), &[]), now) {
                Decision::Queue(e) => assert_eq!(e, want),
                other => panic!("{target}: {other:?}"),
            }
        }
        for target in [
            "/api/v1/queue/register/",
            "/api/v1/queue/Register",
            "/api/v1/queue",
            "/api/v1/queuex",
            "/",
        ] {
            assert_eq!(
                status(g.decide(&request(target.as_bytes(), &[]), now)),
                404,
                "{target}"
            );
        }
    }

    #[test]
    fn protected_routes_need_a_token_of_their_queue() {
        let (g, tokens) = gate();
        let now = jwt::now_s();
        let baseball = bearer(&tokens, "baseball");
        match g.decide(
            &request(b"/api/v1/follow-up/x", &[("authorization", &baseball)]),
            now,
        ) {
            Decision::Forward {
                route,
                identity,
                origin,
            } => {
                assert_eq!(route, 0);
                assert_eq!(&*identity.user, "u1");
                assert_eq!(origin, None);
            }
            other => panic!("{other:?}"),
        }
        let d = g.decide(
            &request(b"/soccer/seat", &[("authorization", &baseball)]),
            now,
        );
        assert!(matches!(d, Decision::Deny(Reject::Queue)), "{d:?}");
        let d = g.decide(&request(b"/api/v1/follow-up", &[]), now);
        assert!(matches!(d, Decision::Deny(Reject::Missing)), "{d:?}");
        assert_eq!(
            status(g.decide(
                &request(b"/api/v1/follow-upx", &[("authorization", &baseball)]),
                now
            )),
            404
        );
    }

    #[test]
    fn absolute_form_is_checked_and_rewritten_to_its_path() {
        let (g, tokens) = gate();
        let now = jwt::now_s();
        let auth = bearer(&tokens, "baseball");
        match g.decide(
            &request(
                b"http://evil.example/api/v1/follow-up/a?b=1",
                &[("authorization", &auth)],
            ),
            now,
        ) {
            Decision::Forward { origin, .. } => {
                assert_eq!(origin.as_deref(), Some(&b"/api/v1/follow-up/a?b=1"[..]))
            }
            other => panic!("{other:?}"),
        }
        let d = g.decide(
            &request(
                b"http://x/api/v1/follow-up/../admin",
                &[("authorization", &auth)],
            ),
            now,
        );
        assert_eq!(status(d), 400);
    }

    #[test]
    fn ambiguous_framing_is_refused_before_routing() {
        let (g, _) = gate();
        let now = jwt::now_s();
        let d = g.decide(
            &request(
                b"/api/v1/queue/register",
                &[("content-length", "3"), ("content-length", "3")],
            ),
            now,
        );
        assert_eq!(status(d), 400);
    }

    #[test]
    fn denials_carry_the_bearer_challenge() {
        let r = deny_reply(Reject::Expired);
        assert_eq!(r.status, 401);
        assert!(r
            .headers
            .iter()
            .any(|(n, v)| *n == "WWW-Authenticate" && v == r#"Bearer error="invalid_token""#));
        assert_eq!(deny_reply(Reject::Role).status, 403);
    }
}
