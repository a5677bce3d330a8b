//! The direct lane: the hot path of a waiting room, relayed without Pingora's
//! general proxy machinery.
//!
//! Once admitted, users hammer the protected routes with small `GET`s. For
//! those, Pingora's proxy builds a request context, runs a dozen phases,
//! streams through two tasks joined by channels, and hands every upstream
//! connection back to a pool that spawns a watcher task per release. The
//! direct lane does what such a request needs and nothing else: parse the
//! head, make the same decision as the proxy (`super::decide_target`), write
//! the request to a kept-alive upstream connection, and relay the response
//! bytes as they come, tracking only where the body ends.
//!
//! It takes a request only when all of these hold:
//! - HTTP/1.1, `GET` or `HEAD`, origin-form target, exactly one `Host`;
//! - no `Content-Length`, `Transfer-Encoding`, `Upgrade` or `Expect`, and a
//!   `Connection` header (if any) naming only `close` or `keep-alive`;
//! - the decision is to forward (a valid token for the route's queue);
//! - the route's upstream is plain TCP.
//!
//! The one queue API call that needs no body, and that every waiting user
//! repeats every few seconds, `GET /api/v1/queue/rank`, is answered here too,
//! by the same handler the proxy uses (`crate::queue::rank::answer`).
//!
//! Anything else (the other queue API calls, refusals, bodies, upgrades, TLS
//! upstreams, heads over [`MAX_HEAD`]) is handed back unconsumed, and the
//! Pingora proxy reads and answers it exactly as before. Replies to forwarded requests keep
//! the proxy's contract: the identity headers replace any sent by the
//! client, hop-by-hop headers are not forwarded, an unreachable upstream is a
//! JSON 502 and a slow one a JSON 504.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use pingora::protocols::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::routes::{RouteTable, UPSTREAM_IDLE};
use super::{decide_target, Decision, QUEUE_HEADER, USER_HEADER};
use crate::edge::jwt::{self, Tokens};
use crate::metrics::Metrics;
use crate::queue::{rank, Endpoint, QueueApi};
use crate::reply::Reply;
use crate::server::InFlight;

/// The largest request head the lane reads; a longer one is handed to the
/// proxy (which has its own, larger limit).
pub const MAX_HEAD: usize = 16 * 1024;

/// The largest response head accepted from an upstream.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// Header slots for parsing; a request with more is handed to the proxy.
const MAX_HEADERS: usize = 64;

/// Room made for each read (client and upstream).
const READ_SIZE: usize = 4096;

/// Idle connections kept per upstream.
const POOL_SIZE: usize = 128;

/// What became of the connection's next request.
#[derive(Debug, PartialEq, Eq)]
pub enum Lane {
    /// Not for the lane: everything read is still in the buffer, for the
    /// proxy to read again.
    Pass,
    /// Answered; the connection carries on to its next request. A reply
    /// that ends the connection is [`Lane::Closed`].
    Served,
    /// The client went away, sent no whole head in time, or the reply could
    /// not be completed: close the connection.
    Closed,
}

/// One upstream's kept-alive connections.
struct Upstream {
    addr: SocketAddr,
    connect_timeout: Duration,
    read_timeout: Duration,
    idle: Mutex<Vec<(TcpStream, Instant)>>,
}

impl Upstream {
    /// The most recently used idle connection that is young enough.
    fn take(&self) -> Option<TcpStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < UPSTREAM_IDLE {
                return Some(conn);
            }
        }
        None
    }

    fn put(&self, conn: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < POOL_SIZE {
            idle.push((conn, Instant::now()));
        }
    }

    async fn connect(&self) -> Result<TcpStream, Failure> {
        match pingora::time::timeout(self.connect_timeout, TcpStream::connect(self.addr)).await {
            Ok(Ok(conn)) => {
                let _ = conn.set_nodelay(true);
                Ok(conn)
            }
            Ok(Err(_)) => Err(Failure::Unavailable),
            Err(_) => Err(Failure::Timeout),
        }
    }
}

/// Why a forwarded request got no upstream reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Refused, reset, closed early or answered with something that is not
    /// HTTP/1.x: 502.
    Unavailable,
    /// No connection or no answer within the upstream's timeouts: 504.
    Timeout,
}

impl Failure {
    fn reply(self) -> Reply {
        match self {
            Failure::Unavailable => {
                Reply::error(502, "upstream_unavailable", "The upstream failed.")
            }
            Failure::Timeout => Reply::error(
                504,
                "upstream_timeout",
                "The upstream did not answer in time.",
            ),
        }
        .closing()
    }
}

/// A request the lane takes.
enum Take {
    Forward(Plan),
    /// `GET /api/v1/queue/rank`, answered from Redis like the proxy does.
    Rank {
        query: Option<String>,
        consumed: usize,
        client_close: bool,
    },
}

/// A request to forward, ready to send.
struct Plan {
    route: usize,
    /// The request as the upstream gets it.
    head: Vec<u8>,
    /// Bytes of the client's request head.
    consumed: usize,
    is_head: bool,
    client_close: bool,
}

/// How a response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

/// A parsed upstream response head.
struct Response {
    status: u16,
    /// Bytes of the upstream's head.
    consumed: usize,
    framing: Framing,
    /// The upstream will not take another request on this connection.
    upstream_close: bool,
    /// Status line and headers as the client gets them, without the final
    /// empty line.
    head: Vec<u8>,
    /// An interim (1xx) response, relayed before the final one.
    interim: bool,
}

/// The lane: the routes, and a pool per upstream.
pub struct DirectLane {
    routes: Arc<RouteTable>,
    tokens: Arc<Tokens>,
    api: Arc<QueueApi>,
    metrics: Arc<Metrics>,
    in_flight: Arc<InFlight>,
    /// Per route, in route order; `None` for TLS upstreams.
    upstreams: Vec<Option<Arc<Upstream>>>,
}

impl DirectLane {
    pub fn new(
        routes: Arc<RouteTable>,
        tokens: Arc<Tokens>,
        api: Arc<QueueApi>,
        metrics: Arc<Metrics>,
        in_flight: Arc<InFlight>,
    ) -> DirectLane {
        // Routes to the same upstream share its pool.
        let mut by_name: BTreeMap<&str, Arc<Upstream>> = BTreeMap::new();
        let upstreams = routes
            .iter()
            .map(|route| {
                if route.tls {
                    return None;
                }
                let upstream = by_name.entry(&route.upstream).or_insert_with(|| {
                    Arc::new(Upstream {
                        addr: route.addr,
                        connect_timeout: route.connect_timeout,
                        read_timeout: route.read_timeout,
                        idle: Mutex::new(Vec::new()),
                    })
                });
                Some(upstream.clone())
            })
            .collect();
        DirectLane {
            routes,
            tokens,
            api,
            metrics,
            in_flight,
            upstreams,
        }
    }

    /// Serves the next request of a connection if it is one for the lane.
    ///
    /// `pending` holds bytes already read from the client; more are read
    /// into it until a whole head is there or `deadline` passes. On
    /// [`Lane::Pass`] it holds everything read; on [`Lane::Served`] it holds
    /// what followed the request (a pipelined next request). `closing` asks
    /// for `Connection: close` (the server is shutting down).
    pub async fn serve(
        &self,
        client: &mut Stream,
        pending: &mut BytesMut,
        deadline: Instant,
        closing: bool,
    ) -> Lane {
        let take = loop {
            if !pending.is_empty() {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut request = httparse::Request::new(&mut headers);
                match request.parse(pending) {
                    Ok(httparse::Status::Complete(consumed)) => {
                        match self.plan(&request, consumed) {
                            Some(take) => break take,
                            None => return Lane::Pass,
                        }
                    }
                    Ok(httparse::Status::Partial) => {}
                    // The proxy answers malformed requests.
                    Err(_) => return Lane::Pass,
                }
            }
            if pending.len() >= MAX_HEAD {
                return Lane::Pass;
            }
            pending.reserve(READ_SIZE);
            let remaining = deadline.saturating_duration_since(Instant::now());
            match pingora::time::timeout(remaining, client.read_buf(pending)).await {
                Ok(Ok(n)) if n > 0 => {}
                // Closed, failed, or no whole head before the deadline.
                _ => return Lane::Closed,
            }
        };

        let _in_flight = self.in_flight.enter();
        let started = Instant::now();
        let (route, status, outcome) = match take {
            Take::Forward(plan) => {
                pending.advance(plan.consumed);
                let close = plan.client_close || closing;
                let (status, outcome) = self.forward(&plan, client, close).await;
                let route = self.routes.get(plan.route).map(|r| r.prefix.as_str());
                (route.unwrap_or("other"), status, outcome)
            }
            Take::Rank {
                query,
                consumed,
                client_close,
            } => {
                pending.advance(consumed);
                let mut reply = rank::answer(&self.api, query.as_deref()).await;
                if client_close || closing {
                    reply = reply.closing();
                }
                let (status, close) = (reply.status, reply.close);
                let outcome = if send(client, &reply).await && !close {
                    Lane::Served
                } else {
                    Lane::Closed
                };
                (Endpoint::Rank.name(), status, outcome)
            }
        };
        if status > 0 {
            self.metrics
                .observe_request(route, status, started.elapsed().as_secs_f64());
        }
        tracing::debug!(
            route,
            status,
            elapsed_us = started.elapsed().as_micros() as u64,
            "request"
        );
        outcome
    }

    /// Whether the lane takes this request, and what it sends upstream.
    fn plan(&self, request: &httparse::Request<'_, '_>, consumed: usize) -> Option<Take> {
        if request.version != Some(1) {
            return None;
        }
        let method = request.method?;
        let is_head = match method {
            "GET" => false,
            "HEAD" => true,
            _ => return None,
        };
        let target = request.path?.as_bytes();
        if !target.starts_with(b"/") {
            return None;
        }
        let mut hosts = 0;
        let mut client_close = false;
        for header in request.headers.iter() {
            let name = header.name.as_bytes();
            if is(name, "content-length")
                || is(name, "transfer-encoding")
                || is(name, "upgrade")
                || is(name, "expect")
            {
                return None;
            }
            if is(name, "host") {
                hosts += 1;
            } else if is(name, "connection") {
                for token in header.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"close") {
                        client_close = true;
                    } else if !token.is_empty() && !token.eq_ignore_ascii_case(b"keep-alive") {
                        // It names another hop-by-hop header.
                        return None;
                    }
                }
            }
        }
        if hosts != 1 {
            return None;
        }

        let authorization = request
            .headers
            .iter()
            .filter(|h| is(h.name.as_bytes(), "authorization"))
            .map(|h| h.value);
        let (route, identity) = match decide_target(
            &self.routes,
            &self.tokens,
            target,
            authorization,
            jwt::now_s(),
        ) {
            Decision::Forward {
                route,
                identity,
                origin: None,
            } => (route, identity),
            Decision::Queue(Endpoint::Rank) if !is_head => {
                let query = target
                    .iter()
                    .position(|&b| b == b'?')
                    .map(|at| String::from_utf8_lossy(&target[at + 1..]).into_owned());
                return Some(Take::Rank {
                    query,
                    consumed,
                    client_close,
                });
            }
            _ => return None,
        };
        self.upstreams.get(route)?.as_ref()?;

        let mut head = Vec::with_capacity(consumed + 96);
        head.extend_from_slice(method.as_bytes());
        head.push(b' ');
        head.extend_from_slice(target);
        head.extend_from_slice(b" HTTP/1.1\r\n");
        for header in request.headers.iter() {
            let name = header.name.as_bytes();
            if is_hop_by_hop(name) || is(name, USER_HEADER) || is(name, QUEUE_HEADER) {
                continue;
            }
            push_field(&mut head, name, header.value);
        }
        push_field(&mut head, USER_HEADER.as_bytes(), identity.user.as_bytes());
        push_field(
            &mut head,
            QUEUE_HEADER.as_bytes(),
            identity.queue.as_bytes(),
        );
        head.extend_from_slice(b"\r\n");
        Some(Take::Forward(Plan {
            route,
            head,
            consumed,
            is_head,
            client_close,
        }))
    }

    /// Sends the request and relays the response. Returns the status the
    /// client got (0 if none) and what becomes of the client connection.
    async fn forward(&self, plan: &Plan, client: &mut Stream, close: bool) -> (u16, Lane) {
        let Some(upstream) = self.upstreams.get(plan.route).and_then(Option::as_ref) else {
            return (0, Lane::Closed);
        };
        let mut buf = BytesMut::with_capacity(8 * 1024);
        let (conn, response) = match exchange(upstream, plan, &mut buf, client).await {
            Ok(answer) => answer,
            Err(failure) => {
                let reply = failure.reply();
                tracing::warn!(upstream = %upstream.addr, status = reply.status, "upstream failed");
                send(client, &reply).await;
                return (reply.status, Lane::Closed);
            }
        };
        let close = close || response.framing == Framing::UntilClose;
        let mut out = response.head;
        if close {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");

        let upstream_close = response.upstream_close;
        let relayed = relay(
            conn,
            upstream,
            upstream_close,
            &mut buf,
            response.framing,
            out,
            client,
        )
        .await;
        match relayed {
            Ok(()) => {}
            // Broken before anything was sent: the client can still be told.
            Err(Broken { sent: false }) => {
                let reply = Failure::Unavailable.reply();
                send(client, &reply).await;
                return (reply.status, Lane::Closed);
            }
            // The reply is cut short: only closing tells the client.
            Err(Broken { sent: true }) => return (response.status, Lane::Closed),
        }
        if client.flush().await.is_err() {
            return (response.status, Lane::Closed);
        }
        let lane = if close { Lane::Closed } else { Lane::Served };
        (response.status, lane)
    }
}

/// Sends the request head and reads the final response head, relaying any
/// interim (1xx) response to the client. A kept-alive connection that fails
/// before any answer (the upstream closed it while idle) is retried once on a
/// new connection: the lane only carries `GET` and `HEAD`, which are safe to
/// repeat.
async fn exchange(
    upstream: &Upstream,
    plan: &Plan,
    buf: &mut BytesMut,
    client: &mut Stream,
) -> Result<(TcpStream, Response), Failure> {
    let mut fresh_only = false;
    loop {
        let (mut conn, reused) = match (!fresh_only).then(|| upstream.take()).flatten() {
            Some(conn) => (conn, true),
            None => (upstream.connect().await?, false),
        };
        buf.clear();
        let sent = pingora::time::timeout(upstream.read_timeout, conn.write_all(&plan.head)).await;
        let answer = match sent {
            Ok(Ok(())) => read_response(&mut conn, upstream, buf, plan.is_head, client).await,
            Ok(Err(_)) => Err(Failure::Unavailable),
            Err(_) => Err(Failure::Timeout),
        };
        match answer {
            Ok(response) => return Ok((conn, response)),
            Err(Failure::Unavailable) if reused && buf.is_empty() => fresh_only = true,
            Err(failure) => return Err(failure),
        }
    }
}

/// Reads response heads until a final one; interim ones go to the client.
async fn read_response(
    conn: &mut TcpStream,
    upstream: &Upstream,
    buf: &mut BytesMut,
    is_head: bool,
    client: &mut Stream,
) -> Result<Response, Failure> {
    loop {
        if !buf.is_empty() {
            match parse_response(buf, is_head)? {
                Some(response) if response.interim => {
                    let mut interim = response.head;
                    interim.extend_from_slice(b"\r\n");
                    client
                        .write_all(&interim)
                        .await
                        .map_err(|_| Failure::Unavailable)?;
                    buf.advance(response.consumed);
                    continue;
                }
                Some(response) => {
                    buf.advance(response.consumed);
                    return Ok(response);
                }
                None => {}
            }
            if buf.len() >= MAX_RESPONSE_HEAD {
                return Err(Failure::Unavailable);
            }
        }
        buf.reserve(READ_SIZE);
        match pingora::time::timeout(upstream.read_timeout, conn.read_buf(buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => return Err(Failure::Unavailable),
            Err(_) => return Err(Failure::Timeout),
        }
    }
}

/// Parses a response head, if a whole one is there.
fn parse_response(buf: &[u8], is_head: bool) -> Result<Option<Response>, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let consumed = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Failure::Unavailable),
    };
    let status = response.code.ok_or(Failure::Unavailable)?;
    // A switch of protocols was never asked for.
    if status == 101 {
        return Err(Failure::Unavailable);
    }
    let interim = (100..200).contains(&status);

    let mut length: Option<u64> = None;
    let mut encoded = None;
    let mut upstream_close = response.version != Some(1);
    for header in response.headers.iter() {
        let name = header.name.as_bytes();
        if is(name, "content-length") {
            let value = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or(Failure::Unavailable)?;
            if length.is_some_and(|l| l != value) {
                return Err(Failure::Unavailable);
            }
            length = Some(value);
        } else if is(name, "transfer-encoding") {
            // Only the last coding says how the message ends.
            let last = header.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
            encoded = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if is(name, "connection") {
            for token in header.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    upstream_close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && response.version == Some(0) {
                    upstream_close = false;
                }
            }
        }
    }
    let framing = if interim || is_head || status == 204 || status == 304 {
        Framing::Empty
    } else {
        match (encoded, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::UntilClose,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::UntilClose,
        }
    };

    let mut head = Vec::with_capacity(consumed + 32);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.to_string().as_bytes());
    head.push(b' ');
    head.extend_from_slice(response.reason.unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for header in response.headers.iter() {
        let name = header.name.as_bytes();
        if is_hop_by_hop(name) && !is(name, "transfer-encoding") {
            continue;
        }
        // With a transfer coding the length is not the message's (RFC 9112 §6.3).
        if encoded.is_some() && is(name, "content-length") {
            continue;
        }
        push_field(&mut head, name, header.value);
    }
    Ok(Some(Response {
        status,
        consumed,
        framing,
        upstream_close,
        head,
        interim,
    }))
}

/// A relay that could not finish: the upstream failed, timed out or sent a
/// body that does not match its framing, or the client went away. `sent`
/// tells whether the client got any of the reply.
#[derive(Debug)]
struct Broken {
    sent: bool,
}

/// Relays the body after the head in `out`. The upstream connection goes
/// back to the pool if the response ended exactly where its framing says
/// (and the upstream keeps it open), before the client gets the last bytes:
/// a client's next request then finds it there.
async fn relay(
    mut conn: TcpStream,
    upstream: &Upstream,
    upstream_close: bool,
    buf: &mut BytesMut,
    framing: Framing,
    mut out: Vec<u8>,
    client: &mut Stream,
) -> Result<(), Broken> {
    let mut chunks = ChunkedEnd::default();
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    let mut sent = false;
    loop {
        // Move what the upstream sent so far into `out`, up to the body's end.
        let (take, done) = match framing {
            Framing::Empty => (0, true),
            Framing::Length(_) => {
                let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                left -= take as u64;
                (take, left == 0)
            }
            Framing::Chunked => match chunks.feed(buf) {
                Ok(Some(end)) => (end, true),
                Ok(None) => (buf.len(), false),
                Err(()) => return Err(Broken { sent }),
            },
            Framing::UntilClose => (buf.len(), false),
        };
        out.extend_from_slice(&buf[..take]);
        buf.advance(take);
        if done {
            // Anything past the end was never asked for: do not reuse.
            if buf.is_empty() && !upstream_close {
                upstream.put(conn);
            }
            return client
                .write_all(&out)
                .await
                .map_err(|_| Broken { sent: true });
        }
        if !out.is_empty() {
            sent = true;
            client.write_all(&out).await.map_err(|_| Broken { sent })?;
            out.clear();
        }
        buf.reserve(READ_SIZE);
        match pingora::time::timeout(upstream.read_timeout, conn.read_buf(buf)).await {
            Ok(Ok(0)) if framing == Framing::UntilClose => return Ok(()),
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(Broken { sent }),
        }
    }
}

/// Finds where a chunked body ends (RFC 9112 §7.1), as the bytes pass by.
/// Chunk sizes, extensions, data and trailers are only scanned; the bytes
/// themselves are relayed unchanged.
#[derive(Debug, Default)]
struct ChunkedEnd {
    state: Chunk,
    /// The chunk size read so far.
    size: u64,
    digits: u8,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading the hex size.
    #[default]
    Size,
    /// After the size: an extension or whitespace, up to the line end.
    Extension,
    /// Expecting LF after CR at the end of the size line.
    SizeLf,
    /// Inside chunk data, `size` bytes left.
    Data,
    /// Expecting CR (or LF) after the data.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// Expecting LF after a trailer line's CR.
    TrailerLf,
    /// Expecting the LF of the final empty line.
    EndLf,
}

impl ChunkedEnd {
    /// Scans `data`. `Ok(Some(n))`: the body ends after `n` bytes of it.
    /// `Err(())`: not a chunked body; the relay stops and closes.
    fn feed(&mut self, data: &[u8]) -> Result<Option<usize>, ()> {
        let mut i = 0;
        while i < data.len() {
            let byte = data[i];
            match self.state {
                Chunk::Size => match byte {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let digit = (byte as char).to_digit(16).unwrap_or(0) as u64;
                        self.digits += 1;
                        if self.digits > 15 {
                            return self.fail();
                        }
                        self.size = self.size * 16 + digit;
                    }
                    b';' | b' ' | b'\t' if self.digits > 0 => self.state = Chunk::Extension,
                    b'\r' if self.digits > 0 => self.state = Chunk::SizeLf,
                    b'\n' if self.digits > 0 => self.end_of_size_line(),
                    _ => return self.fail(),
                },
                Chunk::Extension => match byte {
                    b'\r' => self.state = Chunk::SizeLf,
                    b'\n' => self.end_of_size_line(),
                    _ => {}
                },
                Chunk::SizeLf => match byte {
                    b'\n' => self.end_of_size_line(),
                    _ => return self.fail(),
                },
                Chunk::Data => {
                    let take =
                        (data.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    self.size -= take as u64;
                    i += take;
                    if self.size == 0 {
                        self.state = Chunk::DataCr;
                    }
                    continue;
                }
                Chunk::DataCr => match byte {
                    b'\r' => self.state = Chunk::DataLf,
                    b'\n' => self.next_chunk(),
                    _ => return self.fail(),
                },
                Chunk::DataLf => match byte {
                    b'\n' => self.next_chunk(),
                    _ => return self.fail(),
                },
                Chunk::TrailerStart => match byte {
                    b'\r' => self.state = Chunk::EndLf,
                    b'\n' => return Ok(Some(i + 1)),
                    _ => self.state = Chunk::Trailer,
                },
                Chunk::Trailer => match byte {
                    b'\r' => self.state = Chunk::TrailerLf,
                    b'\n' => self.state = Chunk::TrailerStart,
                    _ => {}
                },
                Chunk::TrailerLf => match byte {
                    b'\n' => self.state = Chunk::TrailerStart,
                    _ => return self.fail(),
                },
                Chunk::EndLf => match byte {
                    b'\n' => return Ok(Some(i + 1)),
                    _ => return self.fail(),
                },
            }
            i += 1;
        }
        Ok(None)
    }

    fn end_of_size_line(&mut self) {
        self.state = if self.size == 0 {
            Chunk::TrailerStart
        } else {
            Chunk::Data
        };
    }

    fn next_chunk(&mut self) {
        self.state = Chunk::Size;
        self.size = 0;
        self.digits = 0;
    }

    fn fail(&mut self) -> Result<Option<usize>, ()> {
        Err(())
    }
}

/// Writes one reply of waitgate's own and flushes it; false if the client
/// is gone.
async fn send(client: &mut Stream, reply: &Reply) -> bool {
    client.write_all(&reply.to_http1()).await.is_ok() && client.flush().await.is_ok()
}

/// Appends one `name: value` header line.
fn push_field(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

fn is(name: &[u8], expected: &str) -> bool {
    name.eq_ignore_ascii_case(expected.as_bytes())
}

/// Headers for one connection only, never forwarded (RFC 9110 §7.6.1).
fn is_hop_by_hop(name: &[u8]) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|h| is(name, h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end_of(body: &[u8]) -> Result<Option<usize>, ()> {
        ChunkedEnd::default().feed(body)
    }

    #[test]
    fn finds_the_end_of_a_chunked_body() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\nNEXT";
        assert_eq!(end_of(body), Ok(Some(body.len() - 4)));
        let trailers = b"3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-More: 2\r\n\r\n";
        assert_eq!(end_of(trailers), Ok(Some(trailers.len())));
        let bare_lf = b"3\nabc\n0\n\n";
        assert_eq!(end_of(bare_lf), Ok(Some(bare_lf.len())));
        assert_eq!(end_of(b"A\r\n0123456789\r\n0\r\n\r\n"), Ok(Some(20)));
    }

    #[test]
    fn finds_it_across_any_split() {
        let body = b"5\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nT: v\r\n\r\n";
        for cut in 0..=body.len() {
            let mut end = ChunkedEnd::default();
            let first = end.feed(&body[..cut]).unwrap();
            let found = match first {
                Some(n) => n,
                None => cut + end.feed(&body[cut..]).unwrap().unwrap(),
            };
            assert_eq!(found, body.len(), "cut at {cut}");
        }
    }

    proptest::proptest! {
        /// Any chunked body, with extensions and trailers, cut anywhere, and
        /// followed by anything: the end is found exactly where it is.
        #[test]
        fn the_end_is_found_exactly(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 1..300), 0..8),
            extension in proptest::bool::ANY,
            trailers in 0usize..3,
            cut in 0usize..4000,
            after in proptest::collection::vec(proptest::num::u8::ANY, 0..20),
        ) {
            let mut body = Vec::new();
            for chunk in &chunks {
                body.extend_from_slice(format!("{:X}", chunk.len()).as_bytes());
                if extension {
                    body.extend_from_slice(b";name=\"v\"");
                }
                body.extend_from_slice(b"\r\n");
                body.extend_from_slice(chunk);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\n");
            for i in 0..trailers {
                body.extend_from_slice(format!("X-T{i}: v\r\n").as_bytes());
            }
            body.extend_from_slice(b"\r\n");
            let end = body.len();
            body.extend_from_slice(&after);
            let cut = cut.min(body.len());
            let mut tracker = ChunkedEnd::default();
            let found = match tracker.feed(&body[..cut]).unwrap() {
                Some(n) => n,
                None => cut + tracker.feed(&body[cut..]).unwrap().unwrap(),
            };
            proptest::prop_assert_eq!(found, end);
        }
    }

    #[test]
    fn refuses_what_is_not_chunked() {
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"5\r\nhelloXX",
            b"5\rX",
            b"10000000000000000\r\n",
        ] {
            assert_eq!(end_of(bad), Err(()), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(end_of(b"5\r\nhel"), Ok(None));
    }

    #[test]
    fn response_framing() {
        let framing = |head: &str, is_head: bool| {
            parse_response(head.as_bytes(), is_head)
                .unwrap()
                .unwrap()
                .framing
        };
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", false),
            Framing::Length(2)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", true),
            Framing::Empty
        );
        assert_eq!(
            framing("HTTP/1.1 204 No Content\r\n\r\n", false),
            Framing::Empty
        );
        assert_eq!(
            framing(
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                false
            ),
            Framing::Empty
        );
        assert_eq!(
            framing(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n",
                false
            ),
            Framing::Chunked
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false),
            Framing::UntilClose
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\n\r\n", false),
            Framing::UntilClose
        );
        assert!(parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
            false
        )
        .is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).is_err());
        assert!(parse_response(b"HTTP/1.1 101 Switching\r\n\r\n", false).is_err());
        assert!(parse_response(b"SSH-2.0-OpenSSH\r\n\r\n", false).is_err());
    }

    #[test]
    fn response_heads_lose_hop_by_hop_headers_only() {
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nKeep-Alive: timeout=5\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(r.upstream_close);
        assert_eq!(
            String::from_utf8(r.head).unwrap(),
            "HTTP/1.1 200 OK\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\n"
        );
        let old = parse_response(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert!(old.upstream_close);
    }
}
