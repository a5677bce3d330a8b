//! The `ProxyHttp` implementation: Pingora's path for every request the
//! direct lane does not take.
//!
//! [`decide`] makes the decision from the request head; the phases below
//! only act on it, and every HTTP rule they apply comes from
//! [`super::rules`].

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use http::{HeaderName, Method, Version};
use pingora::http::{HeaderNameVariant, RequestHeader, ResponseHeader};
use pingora::modules::http::HttpModules;
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorType, Result};

use super::decision::{decide, request_target, Decision, RequestHead};
use super::routes::RouteTable;
use super::rules;
use super::rules::failure::why::NO_HEALTHY_ADDRESS;
use super::rules::failure::{self, Failure};
use super::rules::forward::{self, Hop, Peer, TrustedProxies, REQUEST_ID};
use super::rules::pool;
use super::rules::record::Record;
use super::rules::Field;
use super::upstream::Chosen;
use super::watched;
use crate::browser::{Caller, PagePath};
use crate::edge::jwt::{self, Identity, Tokens};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::queue_api::{self, Endpoint, QueueApi};
use crate::reply::Reply;
use crate::shutdown::{InFlight, InFlightGuard};

/// What one request carries between phases.
pub struct RequestCtx {
    /// When the request header was read: for the latency metric and logs.
    pub started: Instant,
    /// Sent upstream, returned to the client, written to the access log.
    pub request_id: String,
    pub peer: Peer,
    /// The client as the access log names it (`forward::client`); `None`
    /// before the request is read.
    pub client: Option<IpAddr>,
    /// The queue API endpoint, when the request was one.
    pub endpoint: Option<Endpoint>,
    /// The request was for the waiting-room page or its files.
    pub page: bool,
    /// The route table the request was decided with (a reload may replace
    /// the table while the request runs), and the protected route in it,
    /// once chosen.
    pub routes: Option<Arc<RouteTable>>,
    pub route: Option<usize>,
    /// Who the verified token speaks for, for the identity headers.
    pub identity: Option<Identity>,
    /// The request asks to switch protocols, on a route that allows it.
    pub upgrade: bool,
    /// The upstream address the request went to, counted as under way
    /// there until the request ends.
    pub chosen: Option<Chosen>,
    /// Set when waitgate wrote the reply itself.
    pub status: Option<u16>,
    /// Whether the reply had begun when forwarding failed, once it has.
    pub failed_after_start: Option<bool>,
    /// Whom a queue API reply was for (the access log's queue and user).
    pub subject: Option<Box<crate::reply::Subject>>,
    /// How the upstream framed its response's body, once its head came.
    pub upstream_body: Option<rules::response::Body>,
    /// Held for the life of the request; dropping it ends the request for
    /// the shutdown drain, whichever way the request ends.
    _in_flight: InFlightGuard,
}

/// The proxy: the queue API plus the protected routes.
pub struct Gate {
    pub api: Arc<QueueApi>,
    /// Replaced whole by a reload.
    pub routes: Arc<ArcSwap<RouteTable>>,
    pub tokens: Arc<Tokens>,
    /// Counts requests under way, so that SIGTERM can exit as soon as they
    /// are done instead of sleeping out the whole grace period.
    pub in_flight: Arc<InFlight>,
    pub metrics: Arc<Metrics>,
    pub trusted: TrustedProxies,
    /// How long a client may take between two reads of its body.
    pub body_timeout: std::time::Duration,
}

impl Gate {
    /// Decides what to do with a request Pingora has parsed, with `routes`.
    /// `target` is the request target as received (see [`request_target`]).
    pub fn decide(
        &self,
        routes: &RouteTable,
        header: &RequestHeader,
        target: &[u8],
        now: u64,
    ) -> Decision {
        let list = fields(&header.headers);
        let head = RequestHead {
            method: header.method.as_str(),
            http11: header.version == Version::HTTP_11,
            target,
            authority: header.uri.authority().map(|a| a.as_str()),
            fields: list.iter().copied(),
        };
        decide(routes, &self.tokens, &head, now)
    }
}

use crate::queue_api::page::Returns;

impl Gate {
    /// The waiting-room page (loading it with a `GET` registers and polls;
    /// a `HEAD` does neither) or one of its files.
    /// `client` is checked against the register limit for a load (which
    /// joins or polls); a `HEAD` changes nothing and is not counted.
    async fn page(
        &self,
        session: &Session,
        page: PagePath,
        returns: &Returns<'_>,
        client: Option<IpAddr>,
    ) -> Reply {
        let header = session.req_header();
        let method = header.method.as_str();
        match page {
            PagePath::Asset(asset) if matches!(method, "GET" | "HEAD") => {
                queue_api::page::asset(asset)
            }
            PagePath::Page(queue) if matches!(method, "GET" | "HEAD") => {
                let caller = Caller::from_fields(fields(&header.headers).into_iter())
                    .with_authority(header.uri.authority().map(|a| a.as_str()));
                if method == "HEAD" {
                    self.api.page_head(&queue, &caller)
                } else {
                    let limited = self.api.limits().check_page(client);
                    self.api
                        .page(&queue, header.uri.query(), &caller, returns, limited)
                        .await
                }
            }
            PagePath::Asset(_) => Reply::from(ApiError::MethodNotAllowed {
                path: "/waiting-room/assets/",
                allow: "GET, HEAD",
            }),
            _ => Reply::from(ApiError::MethodNotAllowed {
                path: "/waiting-room/",
                allow: "GET, HEAD",
            }),
        }
    }
}

/// A Pingora header's fields in the rules' form. Collected, because the
/// rules walk a head more than once and `http`'s iterator cannot be cloned.
fn fields(headers: &http::HeaderMap) -> Vec<Field<'_>> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()))
        .collect()
}

/// A Pingora request or response head, whose fields [`retain_in_order`]
/// thins out.
trait Fields {
    fn map_fields(
        &self,
        f: impl FnMut(HeaderNameVariant, &http::HeaderValue) -> Result<()>,
    ) -> Result<()>;
    fn names(&self) -> Vec<HeaderName>;
    fn remove(&mut self, name: &HeaderName);
    fn append(&mut self, name: String, value: http::HeaderValue) -> Result<()>;
}

macro_rules! fields_of {
    ($head:ty) => {
        impl Fields for $head {
            fn map_fields(
                &self,
                f: impl FnMut(HeaderNameVariant, &http::HeaderValue) -> Result<()>,
            ) -> Result<()> {
                self.map(f)
            }
            fn names(&self) -> Vec<HeaderName> {
                self.headers.keys().cloned().collect()
            }
            fn remove(&mut self, name: &HeaderName) {
                self.remove_header(name);
            }
            fn append(&mut self, name: String, value: http::HeaderValue) -> Result<()> {
                self.append_header(name, value).map(|_| ())
            }
        }
    };
}
fields_of!(RequestHeader);
fields_of!(ResponseHeader);

/// The names of the fields `keep` refuses.
fn not_kept(headers: &http::HeaderMap, keep: impl Fn(&[u8]) -> bool) -> Vec<HeaderName> {
    headers
        .keys()
        .filter(|name| !keep(name.as_str().as_bytes()))
        .cloned()
        .collect()
}

/// Removes the fields named in `dropped` through the Pingora head (which
/// keeps each name's spelling beside the map), and leaves the others in the
/// order they came, as the direct lane relays them: Pingora's
/// `remove_header` moves the map's last field into the removed one's place.
/// So where any field goes, every one is taken out and the kept ones put
/// back in order, each name as it was spelt.
fn retain_in_order(head: &mut impl Fields, dropped: &[HeaderName]) -> Result<()> {
    if dropped.is_empty() {
        return Ok(());
    }
    let mut kept = Vec::new();
    head.map_fields(|name, value| {
        let name = match name {
            HeaderNameVariant::Case(name) => String::from_utf8_lossy(name.as_slice()).into_owned(),
            HeaderNameVariant::Titled(name) => name.to_string(),
        };
        if !dropped
            .iter()
            .any(|d| d.as_str().eq_ignore_ascii_case(&name))
        {
            kept.push((name, value.clone()));
        }
        Ok(())
    })?;
    for name in head.names() {
        head.remove(&name);
    }
    for (name, value) in kept {
        head.append(name, value)?;
    }
    Ok(())
}

#[async_trait]
impl ProxyHttp for Gate {
    type CTX = RequestCtx;

    /// No downstream modules: Pingora's default adds a (disabled) response
    /// compression module that would still run on every request and body
    /// chunk. waitgate forwards the upstream's bytes as they are.
    fn init_downstream_modules(&self, _modules: &mut HttpModules) {}

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            started: Instant::now(),
            request_id: String::new(),
            peer: Peer::new(None, &self.trusted),
            client: None,
            endpoint: None,
            page: false,
            routes: None,
            route: None,
            identity: None,
            upgrade: false,
            chosen: None,
            status: None,
            failed_after_start: None,
            subject: None,
            upstream_body: None,
            _in_flight: self.in_flight.enter(),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let client = session.client_addr().and_then(|a| a.as_inet()).copied();
        ctx.peer = Peer::new(client, &self.trusted);
        ctx.request_id =
            forward::request_id(ctx.peer, fields(&session.req_header().headers).into_iter());
        ctx.client = forward::client(
            ctx.peer,
            fields(&session.req_header().headers).into_iter(),
            &self.trusted,
        );
        let raw_head = session.as_downstream().to_h1_raw();
        let target = request_target(&raw_head)
            .unwrap_or_else(|| session.req_header().raw_path())
            .to_vec();
        let routes = self.routes.load_full();
        let decision = self.decide(&routes, session.req_header(), &target, jwt::now_s());
        ctx.routes = Some(routes);
        let mut reply = match decision {
            Decision::Forward {
                route,
                identity,
                origin,
                upgrade,
            } => {
                // What was checked is exactly what is forwarded.
                let checked = origin.unwrap_or(target);
                if session.req_header().raw_path() != checked.as_slice() {
                    session.req_header_mut().set_raw_path(&checked)?;
                }
                // A proxied body may pause this long between reads.
                session.set_read_timeout(Some(self.body_timeout));
                // A client that half-closes after its request still gets
                // the exchange finished (RFC 9112 §9.6), as on the direct
                // lane: the upstream's answer, and any release it carries,
                // are not dropped because the client stopped sending.
                session.downstream_session.set_abort_on_close(false);
                ctx.route = Some(route);
                ctx.identity = Some(identity);
                ctx.upgrade = upgrade;
                return Ok(false);
            }
            Decision::Queue(endpoint) => {
                ctx.endpoint = Some(endpoint);
                match self.api.limits().check_endpoint(endpoint, ctx.client) {
                    Ok(()) => self.api.serve(endpoint, session).await,
                    Err(limited) => {
                        let reply = Reply::from(limited);
                        if self.api.read_refused_body(session).await {
                            reply
                        } else {
                            reply.closing()
                        }
                    }
                }
            }
            Decision::Deny { route, reject } => {
                ctx.route = Some(route);
                self.metrics
                    .jwt_rejected
                    .with_label_values(&[reject.reason()])
                    .inc();
                Reply::from(ApiError::from(reject))
            }
            Decision::Respond { route, error } => {
                ctx.route = route;
                Reply::from(error)
            }
            Decision::Refuse { route, error } => {
                ctx.route = route;
                Reply::from(error).closing()
            }
            Decision::WaitingRoom { route, location } => {
                ctx.route = Some(route);
                Reply::see_other(location)
            }
            Decision::Page(page) => {
                ctx.page = true;
                let routes = ctx.routes.clone();
                let returns = Returns {
                    is_route: &|path: &str| routes.as_ref().is_some_and(|r| r.find(path).is_some()),
                    home: &|queue: &str| {
                        routes
                            .as_ref()
                            .and_then(|r| r.iter().find(|r| r.waiting_room && r.queue == queue))
                            .map_or_else(|| "/".to_string(), |r| r.prefix.clone())
                    },
                };
                self.page(session, page, &returns, ctx.client).await
            }
        };
        // An unread body would have to be drained before the connection could
        // carry another request; closing is cheaper and safer.
        if !session.as_downstream_mut().is_body_done() || self.in_flight.draining() {
            reply = reply.closing();
        }
        ctx.status = Some(reply.status);
        ctx.subject = reply.subject.take();
        reply
            .header(REQUEST_ID, ctx.request_id.as_str())
            .send(session)
            .await?;
        Ok(true)
    }

    async fn upstream_peer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        let Some(route) = ctx
            .routes
            .as_ref()
            .zip(ctx.route)
            .and_then(|(routes, i)| routes.get(i))
        else {
            return Err(Error::explain(ErrorType::InternalError, "no route chosen"));
        };
        // No healthy address: 502 at once, without trying to connect.
        let chosen = route.upstream.select().ok_or_else(|| {
            Error::explain(ErrorType::ConnectNoRoute, NO_HEALTHY_ADDRESS).into_up()
        })?;
        // The client connection's own kept upstream connections: HTTP/1's
        // by the task serving it, HTTP/2's by its socket.
        let kept = pool::this_client().or_else(|| {
            let digest = session.digest()?.socket_digest.as_ref()?;
            Some(pool::for_connection(digest))
        });
        let peer = route.upstream.peer(chosen.addr, kept);
        ctx.chosen = Some(chosen);
        Ok(peer)
    }

    /// The request the upstream gets: the client's, less what the rules say
    /// stops here, plus waitgate's own headers.
    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let Some(identity) = &ctx.identity else {
            return Err(Error::explain(ErrorType::InternalError, "no identity"));
        };
        let client = fields(&session.req_header().headers);
        let scheme = if session.digest().is_some_and(|d| d.ssl_digest.is_some()) {
            "https"
        } else {
            "http"
        };
        let hop = Hop::new(client.iter().copied(), ctx.upgrade, ctx.peer.trusted);
        let dropped = not_kept(&upstream_request.headers, |name| hop.forwards(name));
        retain_in_order(upstream_request, &dropped)?;
        let added = forward::Added::new(
            &ctx.peer,
            scheme,
            client.iter().copied(),
            &identity.user,
            &identity.queue,
            &ctx.request_id,
        );
        for (name, value) in added.fields() {
            upstream_request.insert_header(name, value)?;
        }
        // An HTTP/1.0 request may come without `Host`; the upstream gets
        // HTTP/1.1, which needs one: the address it is sent to, as nginx's
        // `proxy_pass` does. (The direct lane takes HTTP/1.1 only.)
        if !upstream_request.headers.contains_key(http::header::HOST) {
            if let Some(chosen) = &ctx.chosen {
                upstream_request.insert_header(http::header::HOST, chosen.addr.to_string())?;
            }
        }
        Ok(())
    }

    /// The response head is judged by the same rules as the lane's: framing
    /// that could be read two ways, or a switch of protocols nobody asked
    /// for, is a 502; connection-scoped headers stop here.
    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let head_request = session.req_header().method == Method::HEAD;
        let shape = rules::response::shape(
            response.status.as_u16(),
            response.version != Version::HTTP_10 && response.version != Version::HTTP_09,
            head_request,
            ctx.upgrade,
            fields(&response.headers).into_iter(),
        )
        .map_err(|refusal| {
            let why = refusal.message();
            Error::because(ErrorType::InvalidHTTPHeader, why, watched::Refused(why)).into_up()
        })?;
        if shape.release {
            if let Some(identity) = &ctx.identity {
                self.api.release(identity);
            }
        }
        if !shape.interim {
            ctx.upstream_body = Some(shape.body);
        }
        let switching = shape.body == rules::response::Body::Tunnel;
        let hop = Hop::new(fields(&response.headers).into_iter(), switching, false);
        let dropped = not_kept(&response.headers, |name| hop.relays(name));
        retain_in_order(response, &dropped)?;
        if !shape.interim {
            response.insert_header(REQUEST_ID, ctx.request_id.as_str())?;
        }
        // A proxy speaks its own version (RFC 9110 §6.2).
        response.set_version(Version::HTTP_11);
        // Draining: this reply ends its connection (see `InFlight::draining`).
        if self.in_flight.draining() {
            session.set_keepalive(None);
        }
        Ok(())
    }

    /// The head as the client gets it, after Pingora's own changes: a body
    /// without a length goes chunked to an HTTP/1.1 client (Pingora's doing)
    /// and until the close to an HTTP/1.0 one, which cannot read chunks
    /// ([`rules::response::client_body`]).
    async fn response_filter(
        &self,
        session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let version = session.req_header().version;
        let http1 = matches!(
            version,
            Version::HTTP_09 | Version::HTTP_10 | Version::HTTP_11
        );
        let Some(body) = ctx.upstream_body.filter(|_| http1) else {
            return Ok(());
        };
        if version == Version::HTTP_11 {
            return Ok(());
        }
        // No `Transfer-Encoding` to an HTTP/1.0 client at all (RFC 9112
        // §6.1), not even on a reply without a body (to HEAD).
        response.remove_header(&http::header::TRANSFER_ENCODING);
        if rules::response::client_body(body, false) == rules::response::ClientBody::UntilClose {
            session.set_keepalive(None);
        }
        Ok(())
    }

    /// Pingora retries an idempotent request (its body, if any, still
    /// buffered) when a reused upstream connection fails before answering.
    /// Watched connections (`super::watched`) are kept by waitgate rather
    /// than Pingora, which therefore takes each for a new one: a kept one
    /// that failed so says [`watched::Stale`], and is retried the same way.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        _ctx: &mut RequestCtx,
        client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        if !session.req_header().method.is_idempotent() || session.as_ref().retry_buffer_truncated()
        {
            e.set_retry(false);
        } else if watched::is_stale(&e) {
            e.set_retry(true);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        e
    }

    /// Upstream failures get the same JSON error shape as everything else,
    /// unless the reply has started: then the connection is closed.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let started = reply_started(session);
        ctx.failed_after_start = Some(started);
        let mut error_code = 0;
        if let Some(reply) = Failure::from_pingora(e).reply(started) {
            error_code = reply.status;
            ctx.status = Some(reply.status);
            let _ = reply
                .header(REQUEST_ID, ctx.request_id.as_str())
                .send(session)
                .await;
        }
        FailToProxy {
            error_code,
            can_reuse_downstream: false,
        }
    }

    /// The access record logs failures once; Pingora's own line would be a
    /// second one.
    fn suppress_error_log(&self, _session: &Session, _ctx: &RequestCtx, _error: &Error) -> bool {
        true
    }

    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut RequestCtx) {
        let status = ctx
            .status
            .or_else(|| session.response_written().map(|r| r.status.as_u16()))
            .unwrap_or(0);
        let route = ctx
            .routes
            .as_ref()
            .zip(ctx.route)
            .and_then(|(routes, i)| routes.get(i));
        let label = match (ctx.endpoint, route) {
            (Some(endpoint), _) => endpoint.name(),
            (None, _) if ctx.page => "waiting_room",
            (None, Some(route)) => route.prefix.as_str(),
            (None, None) => "other",
        };
        let header = session.req_header();
        let raw = header.raw_path();
        let path = raw.split(|&b| b == b'?').next().unwrap_or(raw);
        let path = String::from_utf8_lossy(path);
        // In the lane's words; a client that went away is no failure.
        let started = ctx
            .failed_after_start
            .unwrap_or_else(|| reply_started(session));
        let failed = error.and_then(|e| failure::logged(e, started, watched::refusal(e)));
        Record {
            request_id: &ctx.request_id,
            client: ctx.client.or(ctx.peer.ip),
            peer: ctx.peer.ip,
            method: header.method.as_str(),
            path: &path,
            status,
            route: label,
            queue: ctx
                .identity
                .as_ref()
                .map(|i| &*i.queue)
                .or(ctx.subject.as_ref().map(|s| s.queue.as_str()))
                .or(route.map(|r| r.queue.as_str())),
            user: ctx
                .identity
                .as_ref()
                .map(|i| &*i.user)
                .or(ctx.subject.as_ref().and_then(|s| s.user.as_deref())),
            upstream: ctx.chosen.as_ref().map(|c| c.addr),
            upstream_name: ctx
                .chosen
                .as_ref()
                .and(route)
                .map(|r| r.upstream.name.as_str()),
            elapsed: ctx.started.elapsed(),
            failed,
        }
        .finish(&self.metrics);
    }
}

/// Whether the client's reply has begun: a final status line has gone out
/// (interim 1xx ones do not count).
fn reply_started(session: &Session) -> bool {
    session
        .response_written()
        .is_some_and(|r| !r.status.is_informational())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::edge::jwt::Reject;
    use crate::edge::secret::Secret;
    use crate::queues::Queues;
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
        let store = Arc::new(Store::new(&config.redis).unwrap());
        let metrics = Arc::new(Metrics::new(&config));
        let api = Arc::new(QueueApi::new(
            &config,
            Arc::new(ArcSwap::from_pointee(Queues::new(&config))),
            crate::queue_api::Redis {
                store: store.clone(),
                durability: Arc::new(crate::durability::Durability::new(
                    store,
                    tokens.revoked().clone(),
                    metrics.clone(),
                )),
            },
            tokens.clone(),
            &crate::edge::secret::Keys::single(secret.clone()),
            metrics.clone(),
            None,
        ));
        let routes = Arc::new(ArcSwap::from_pointee(RouteTable::build(&config).unwrap()));
        let gate = Gate {
            api,
            routes,
            tokens: tokens.clone(),
            in_flight: Arc::new(InFlight::default()),
            metrics,
            trusted: TrustedProxies::default(),
            body_timeout: config.clients.body_timeout,
        };
        (gate, tokens)
    }

    /// An HTTP/1.1 GET with one `Host` and these headers.
    fn request(target: &[u8], headers: &[(&str, &str)]) -> RequestHeader {
        let mut h = bare_request(target, headers);
        h.append_header("host", "tickets").unwrap();
        h
    }

    fn bare_request(target: &[u8], headers: &[(&str, &str)]) -> RequestHeader {
        let mut h = RequestHeader::build("GET", b"/", None).unwrap();
        assert_eq!(h.version, Version::HTTP_11);
        h.set_raw_path(target).unwrap();
        for (n, v) in headers {
            h.append_header(n.to_string(), *v).unwrap();
        }
        h
    }

    impl Gate {
        /// Decides on the target as Pingora parsed it (unit tests have no
        /// raw request line).
        fn decide_parsed(&self, header: &RequestHeader, now: u64) -> Decision {
            self.decide(&self.routes.load(), header, header.raw_path(), now)
        }

        /// Decides on an HTTP/1.1 GET of `target` with one `Host` and
        /// these headers, now.
        fn decide_now(&self, target: &[u8], headers: &[(&str, &str)]) -> Decision {
            self.decide_parsed(&request(target, headers), jwt::now_s())
        }
    }

    #[test]
    fn the_target_is_read_from_the_raw_request_line() {
        let raw = b"GET /x?a#frag HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(request_target(raw), Some(&b"/x?a#frag"[..]));
        assert_eq!(request_target(b"GET  /y  HTTP/1.0\n\n"), Some(&b"/y"[..]));
        assert_eq!(request_target(b"GET\r\n"), None);
        assert_eq!(
            request_target(b"\r\n\r\nGET /z#f HTTP/1.1\r\n\r\n"),
            Some(&b"/z#f"[..])
        );
    }

    /// The route and the reason of a denial.
    fn denied(d: &Decision) -> Option<(usize, Reject)> {
        match d {
            Decision::Deny { route, reject } => Some((*route, *reject)),
            _ => None,
        }
    }

    fn status(d: Decision) -> u16 {
        match d {
            Decision::Respond { error, .. } | Decision::Refuse { error, .. } => error.status(),
            Decision::Deny { reject, .. } => ApiError::from(reject).status(),
            Decision::Queue(_) => 1,
            Decision::Forward { .. } => 2,
            Decision::WaitingRoom { .. } => 303,
            Decision::Page(_) => 3,
        }
    }

    /// A gate, and a bearer token of queue `baseball` for it.
    fn gate_and_bearer() -> (Gate, String) {
        let (g, tokens) = gate();
        let auth = bearer(&tokens, "baseball");
        (g, auth)
    }

    fn bearer(tokens: &Tokens, queue: &str) -> String {
        let now = jwt::now_s();
        let t = tokens.issue("u1", queue, (now + 60) * 1000, now).unwrap();
        format!("Bearer {}", t.token)
    }

    #[test]
    fn queue_endpoints_are_recognised_exactly() {
        let (g, _) = gate();
        for (target, want) in [
            ("/api/v1/queue/register", Endpoint::Register),
            ("/api/v1/queue/rank?userId=a", Endpoint::Rank),
            ("/api/v1/queue/dropout?userId=a", Endpoint::Dropout),
            ("/api/v1/queue/active/token", Endpoint::Token),
        ] {
            match g.decide_now(target.as_bytes(), &[]) {
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
                status(g.decide_now(target.as_bytes(), &[])),
                404,
                "{target}"
            );
        }
    }

    #[test]
    fn protected_routes_need_a_token_of_their_queue() {
        let (g, baseball) = gate_and_bearer();
        let d = g.decide_now(b"/api/v1/follow-up/x", &[("authorization", &baseball)]);
        let Decision::Forward {
            route: 0,
            identity,
            origin: None,
            upgrade: false,
        } = &d
        else {
            panic!("{d:?}")
        };
        assert_eq!(&*identity.user, "u1");
        let d = g.decide_now(b"/soccer/seat", &[("authorization", &baseball)]);
        assert_eq!(denied(&d), Some((1, Reject::Queue)), "{d:?}");
        let d = g.decide_now(b"/api/v1/follow-up", &[]);
        assert_eq!(denied(&d), Some((0, Reject::Missing)), "{d:?}");
        assert_eq!(
            status(g.decide_now(b"/api/v1/follow-upx", &[("authorization", &baseball)])),
            404
        );
    }

    #[test]
    fn absolute_form_is_checked_and_rewritten_to_its_path() {
        let (g, auth) = gate_and_bearer();
        match g.decide_now(
            b"http://evil.example/api/v1/follow-up/a?b=1",
            &[("authorization", &auth)],
        ) {
            Decision::Forward { origin, .. } => {
                assert_eq!(origin.as_deref(), Some(&b"/api/v1/follow-up/a?b=1"[..]))
            }
            other => panic!("{other:?}"),
        }
        let d = g.decide_now(
            b"http://x/api/v1/follow-up/../admin",
            &[("authorization", &auth)],
        );
        assert_eq!(status(d), 400);
    }

    #[test]
    fn ambiguous_framing_is_refused_before_routing() {
        let (g, _) = gate();
        let d = g.decide_now(
            b"/api/v1/queue/register",
            &[("content-length", "3"), ("content-length", "3")],
        );
        assert_eq!(status(d), 400);
    }

    #[test]
    fn http11_without_exactly_one_host_is_refused_before_the_token_is_read() {
        let (g, tokens) = gate();
        let now = jwt::now_s();
        let auth = bearer(&tokens, "baseball");
        let d = g.decide_parsed(
            &bare_request(b"/api/v1/follow-up/x", &[("authorization", &auth)]),
            now,
        );
        assert_eq!(status(d), 400);
        let d = g.decide_now(
            b"/api/v1/follow-up/x",
            &[("authorization", &auth), ("host", "other")],
        );
        assert_eq!(status(d), 400);
        let mut old = bare_request(b"/api/v1/follow-up/x", &[("authorization", &auth)]);
        old.set_version(Version::HTTP_10);
        assert_eq!(status(g.decide_parsed(&old, now)), 2);
    }

    #[test]
    fn upgrades_are_refused_on_routes_that_do_not_switch_protocols() {
        let (g, auth) = gate_and_bearer();
        let upgrade = [("authorization", auth.as_str()), ("upgrade", "websocket")];
        match g.decide_now(b"/api/v1/follow-up/ws", &upgrade) {
            Decision::Refuse { route, error } => {
                assert_eq!(route, Some(0));
                assert_eq!(error, ApiError::UpgradeNotAllowed);
            }
            other => panic!("{other:?}"),
        }
        let d = g.decide_now(b"/api/v1/queue/rank?userId=a", &upgrade);
        assert_eq!(status(d), 400);
    }

    #[test]
    fn denials_carry_the_bearer_challenge() {
        for (reject, status, challenge) in [
            (Reject::Expired, 401, r#"Bearer error="invalid_token""#),
            (Reject::Role, 403, r#"Bearer error="insufficient_scope""#),
        ] {
            let r = Reply::from(ApiError::from(reject));
            assert_eq!(r.status, status);
            let sent = r.headers.iter().find(|(n, _)| *n == "WWW-Authenticate");
            assert_eq!(sent.map(|(_, v)| v.as_ref()), Some(challenge));
        }
    }
}
