//! The direct lane: the hot path of a waiting room, relayed without
//! Pingora's general proxy machinery.
//!
//! Why it exists: once admitted, users hammer the protected routes with
//! small `GET`s, and waiting users poll `rank` every few seconds. For those,
//! Pingora's proxy builds a request context, runs a dozen phases, streams
//! through two tasks joined by channels, and hands every upstream
//! connection back to a pool that spawns a watcher task per release. The
//! lane does what such a request needs and nothing else, and measured about
//! twice the throughput of bare Pingora (README, "Performance").
//!
//! What it takes (everything else is handed back unread, and the Pingora
//! proxy reads and answers it):
//! - HTTP/1.1 `GET` or `HEAD` with an origin-form target and no body, or
//!   `POST`, `PUT`, `PATCH` or `DELETE` with no body or one framed by a
//!   single plain-digit `Content-Length` whose body (at most 16 KiB) has
//!   arrived whole with its head (read on without waiting); no `Transfer-Encoding`, no
//!   `Upgrade`, no `Expect`, and a `Connection` header, if any, naming only
//!   `close` or `keep-alive`;
//! - that the proxy's own decision (`crate::proxy::decision::decide`) forwards, to a
//!   plain-TCP upstream, or is the queue API's `GET rank`, which it answers
//!   with the proxy's handler (`crate::queue_api::QueueApi::rank`);
//! - and `POST /api/v1/queue/register` with one `application/json`
//!   `Content-Type`, one `Content-Length` of at most 4 KiB in plain digits,
//!   and the body already read with the head, answered with the proxy's
//!   handler once the body is read (`crate::queue_api::QueueApi::register`).
//!
//! What it holds: nothing the proxy path also decides. The decision, the
//! request and response header rules, the framing rules (with the chunked
//! scanner), the upstream connection pool and its check before reuse, the
//! 502/504 mapping and the request record come from `crate::proxy::rules`;
//! the lane owns only its parser loop ([`request`]), its reading of a
//! response head ([`response`]), and its relay ([`relay`]). `direct-lane: false` switches it off; the
//! suites run both ways and `tests/differential.rs` compares them.

mod io;
mod relay;
pub mod request;
pub mod response;

pub use io::Lane;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::{Buf, BytesMut};
use futures::FutureExt;
use pingora::protocols::Stream;
use tokio::io::AsyncReadExt;

use super::routes::RouteTable;
use super::rules::failure::why::NO_HEALTHY_ADDRESS;
use super::rules::failure::Failure;
use super::rules::forward::{Peer, TrustedProxies, REQUEST_ID};
use super::rules::pool::Pool;
use super::rules::record::Record;
use super::upstream::Upstream;
use crate::edge::jwt::Tokens;
use crate::metrics::Metrics;
use crate::queue_api::{Endpoint, QueueApi};
use crate::reply::Reply;
use crate::shutdown::InFlight;
use io::send;
use request::{Take, Taken};

/// The largest request head the lane takes; a longer one is handed to the
/// proxy (which has its own, larger limit).
pub const MAX_LANE_HEAD_BYTES: usize = 16 * 1024;

// A body must fit the read its head came in: the two limits are written
// apart (the request module may not import this one), and kept in step here.
const _: () = assert!(request::MAX_LANE_BODY_BYTES <= MAX_LANE_HEAD_BYTES);

/// Header slots for parsing a request; one with more is handed to the proxy.
const MAX_HEADERS: usize = 64;

/// The routes the lane serves, and a pool per upstream address: replaced
/// whole when the config is reloaded.
pub struct LaneTable {
    routes: Arc<RouteTable>,
    /// By address and timeouts; made as addresses are first chosen.
    pools: Mutex<HashMap<PoolKey, Arc<Pool>>>,
    /// Per route, the pool of an upstream with one fixed address: found
    /// without the lock and the map.
    fixed: Vec<Option<Arc<Pool>>>,
}

/// Connections are shared by upstreams with the same address and timeouts.
type PoolKey = (SocketAddr, Duration, Duration);

impl LaneTable {
    /// Keeps the pools of `old` (with their idle connections): an address
    /// a reload kept is still the same server.
    fn build(routes: Arc<RouteTable>, old: Option<&LaneTable>) -> LaneTable {
        let pools = old
            .map(|t| t.pools.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .unwrap_or_default();
        let mut table = LaneTable {
            routes: routes.clone(),
            pools: Mutex::new(pools),
            fixed: Vec::new(),
        };
        table.fixed = routes
            .iter()
            .map(|route| {
                let addr = route.upstream.fixed.filter(|_| !route.upstream.tls)?;
                Some(table.pool(&route.upstream, addr))
            })
            .collect();
        table
    }

    /// Whether the lane serves a route: plain-TCP upstreams only.
    fn serves(&self, route: usize) -> bool {
        self.routes.get(route).is_some_and(|r| !r.upstream.tls)
    }

    fn pool(&self, upstream: &Upstream, addr: SocketAddr) -> Arc<Pool> {
        let key = (addr, upstream.connect_timeout, upstream.read_timeout);
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Pool::new(
                    addr,
                    upstream.connect_timeout,
                    upstream.read_timeout,
                ))
            })
            .clone()
    }
}

/// The lane: its table, and what it shares with the proxy.
pub struct DirectLane {
    table: ArcSwap<LaneTable>,
    tokens: Arc<Tokens>,
    api: Arc<QueueApi>,
    metrics: Arc<Metrics>,
    in_flight: Arc<InFlight>,
    trusted: TrustedProxies,
}

/// Whether `pending` holds `want` bytes, having read what the client has
/// already sent, without waiting for more. The connection loop reads a head
/// 4 KiB at a time, so a body sent with its head in one write is often
/// partly still in the socket's buffer; a client still sending is left to
/// the proxy, which streams its body under the body timeout. Bounded:
/// `want` is a head and a body the lane takes (each at most 16 KiB).
fn arrived(client: &mut Stream, pending: &mut BytesMut, want: usize) -> bool {
    while pending.len() < want {
        pending.reserve(want - pending.len());
        match client.read_buf(pending).now_or_never() {
            Some(Ok(read)) if read > 0 => {}
            // Nothing more yet, the client's end, or a failure: the proxy
            // reads on from here, and finds the same.
            _ => return false,
        }
    }
    true
}

impl DirectLane {
    pub fn new(
        routes: Arc<RouteTable>,
        tokens: Arc<Tokens>,
        api: Arc<QueueApi>,
        metrics: Arc<Metrics>,
        in_flight: Arc<InFlight>,
        trusted: TrustedProxies,
    ) -> DirectLane {
        DirectLane {
            table: ArcSwap::from_pointee(LaneTable::build(routes, None)),
            tokens,
            api,
            metrics,
            in_flight,
            trusted,
        }
    }

    /// Serves `routes` from now on (a reload). Requests under way finish
    /// with the table they started with.
    pub fn update(&self, routes: Arc<RouteTable>) {
        let old = self.table.load_full();
        self.table
            .store(Arc::new(LaneTable::build(routes, Some(&old))));
    }

    /// The far end of a client connection, as the forwarding headers see it.
    pub fn peer(&self, client: &Stream) -> Peer {
        let addr = client
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).copied());
        Peer::new(addr, &self.trusted)
    }

    /// Serves the next request of a connection if it is one for the lane.
    ///
    /// `pending` holds a whole request head read by the connection loop
    /// (and perhaps more). On [`Lane::Pass`] it still holds everything; on
    /// [`Lane::Served`] it holds what followed the request (a pipelined next
    /// request). `closing` asks for `Connection: close` (the server is
    /// shutting down). `peer` is the client connection's far end.
    pub async fn serve(
        &self,
        client: &mut Stream,
        pending: &mut BytesMut,
        closing: bool,
        peer: Peer,
    ) -> Lane {
        if pending.len() > MAX_LANE_HEAD_BYTES {
            return Lane::Pass;
        }
        let table = self.table.load_full();
        // Parsed in a block of its own: the header slots (2 KiB) are then
        // no part of the future, which every idle connection holds.
        let taken = {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut request = httparse::Request::new(&mut headers);
            match request.parse(pending) {
                Ok(httparse::Status::Complete(consumed)) => match request::take(
                    &table.routes,
                    &self.tokens,
                    |route| table.serves(route),
                    &request,
                    consumed,
                    peer,
                    &self.trusted,
                ) {
                    Some(taken) => taken,
                    None => return Lane::Pass,
                },
                // Malformed, or more header fields than the lane parses: the
                // proxy answers it.
                _ => return Lane::Pass,
            }
        };

        // A body must be here whole: what came with its head, and what has
        // come since, read without waiting. If not, the proxy reads it
        // (under its body timeout) and streams it.
        let body_length = match &taken.take {
            Take::Register { body, .. } => *body,
            Take::Forward(plan) => plan.body,
            Take::Rank { .. } => 0,
        };
        if !arrived(client, pending, taken.consumed + body_length) {
            return Lane::Pass;
        }
        let _in_flight = self.in_flight.enter();
        let started = Instant::now();
        let Taken {
            mut take,
            consumed,
            client_close,
            request_id,
            client: logged_client,
            method,
            path,
        } = taken;
        pending.advance(consumed);
        // (Splitting off nothing would still share the buffer: an
        // allocation on every other request.)
        let body = if body_length > 0 {
            pending.split_to(body_length)
        } else {
            BytesMut::new()
        };
        // A forwarded body goes upstream in the same write as its head.
        if let Take::Forward(plan) = &mut take {
            plan.head.extend_from_slice(&body);
        }
        let close = client_close || closing;
        let subject;
        let mut record = Record {
            request_id: &request_id,
            client: logged_client,
            peer: peer.ip,
            method,
            path: &path,
            status: 0,
            route: "other",
            queue: None,
            user: None,
            upstream: None,
            upstream_name: None,
            elapsed: Default::default(),
            failed: None,
        };
        let lane = match &take {
            Take::Forward(plan) => {
                let route = table.routes.get(plan.route);
                record.route = route.map_or("other", |r| r.prefix.as_str());
                record.queue = Some(&plan.identity.queue);
                record.user = Some(&plan.identity.user);
                let Some(route) = route else {
                    return Lane::Closed;
                };
                // No healthy address: 502 at once, as the proxy answers.
                let outcome = match route.upstream.select() {
                    Some(chosen) => {
                        record.upstream = Some(chosen.addr);
                        record.upstream_name = Some(&route.upstream.name);
                        let pool = match table.fixed.get(plan.route) {
                            Some(Some(pool)) => pool.clone(),
                            _ => table.pool(&route.upstream, chosen.addr),
                        };
                        relay::forward(
                            &pool,
                            plan,
                            client,
                            (close, &self.in_flight),
                            &request_id,
                            || self.api.release(&plan.identity),
                        )
                        .await
                    }
                    None => {
                        relay::fail(
                            relay::failed(Failure::Unavailable, NO_HEALTHY_ADDRESS),
                            plan,
                            client,
                            &request_id,
                        )
                        .await
                    }
                };
                record.status = outcome.status;
                record.failed = outcome.failed;
                outcome.lane
            }
            Take::Rank { .. } | Take::Register { .. } => {
                // The queue API's futures are boxed: they wait on Redis, and
                // inlined they would make every connection's future (kept
                // for as long as it idles) larger by their size.
                let endpoint = match &take {
                    Take::Register { .. } => Endpoint::Register,
                    _ => Endpoint::Rank,
                };
                let reply = match self.api.limits().check_endpoint(endpoint, logged_client) {
                    Err(limited) => Reply::from(limited),
                    Ok(()) => match &take {
                        Take::Register { caller, .. } => {
                            Box::pin(self.api.register(&body, caller)).await
                        }
                        Take::Rank { query, caller } => {
                            Box::pin(self.api.rank(query.as_deref(), caller)).await
                        }
                        Take::Forward(_) => return Lane::Closed,
                    },
                };
                record.route = endpoint.name();
                let mut reply = reply.header(REQUEST_ID, request_id.as_str());
                // Draining closes the reply itself, as the proxy path does;
                // a close the client asked for is the connection's, written
                // after `Date` as Pingora's writer does.
                if self.in_flight.draining() {
                    reply = reply.closing();
                }
                record.status = reply.status;
                subject = reply.subject.take();
                if let Some(s) = &subject {
                    record.queue = Some(&s.queue);
                    record.user = s.user.as_deref();
                }
                if send(client, &reply, false, close).await && !reply.close && !close {
                    Lane::Served
                } else {
                    Lane::Closed
                }
            }
        };
        record.elapsed = started.elapsed();
        record.finish(&self.metrics);
        lane
    }
}
