//! Per-connection limits around the proxy: a cap on open connections and a
//! deadline for each request header.
//!
//! Pingora's HTTP/1 reader times out each read on its own (60 s), so a
//! client that sends one header byte a minute (slowloris) could hold a
//! connection forever. [`Guarded`] wraps the proxy's connection loop:
//! - each request head must arrive whole within `client-header-timeout-ms`
//!   of the moment the connection is ready for it (accept, or the end of the
//!   previous reply), or the connection is closed; the same deadline bounds
//!   an idle keep-alive connection;
//! - past `max-connections` open connections, a new one gets a 503 and is
//!   closed without being read;
//! - on the TLS listener, the handshake is this loop's too, under the same
//!   cap and the same deadline: a connection is counted from its accept,
//!   one past the cap is closed before any handshake (a 503 would need
//!   one), and one whose handshake is not done within
//!   `client-header-timeout-ms` is closed. Left to Pingora's listener, the
//!   handshake came before any cap and had 60 s: 19,960 bare connections
//!   took every file descriptor while `waitgate_connections` read 0.
//!
//! The loop reads the whole request head itself, under that deadline,
//! before either HTTP path sees it ([`read_head`]). The head is then offered
//! to the direct lane (`super::lane`), which serves the protected routes'
//! plain requests itself; what it does not take is handed to the Pingora
//! proxy, which parses the head already read, and is lent the connection up
//! to the request's end (`super::fenced`). Bytes a client pipelines behind
//! a request stay with this loop, which serves them next, whichever path
//! answered the request before.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::BytesMut;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::listeners::tls::Acceptor;
use pingora::protocols::http::ServerSession;
use pingora::protocols::l4::stream::Stream as TcpStream;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use prometheus::IntGauge;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::fenced;
use super::head::{head_end_from, MAX_REQUEST_HEAD_BYTES};
use super::lane::{DirectLane, Lane};
use super::rules::forward::{self, REQUEST_ID};
use super::rules::pool;
use super::rules::record::Record;
use super::rules::request;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::reply::Reply;

/// An HTTP/2 client's connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Room made for each read of a request head.
const READ_SIZE: usize = 4096;

/// The least room a head read is given before the buffer grows. The first
/// read of a head returns only the byte the idle wait peeked (Pingora's
/// stream hands a peeked byte back on its own); growing the buffer after
/// it, as a fixed reserve per read did, moved every head to a second
/// allocation: 13% of the protected GET's instructions (callgrind, 30,721
/// against 26,581 a request).
const MIN_SPARE: usize = 1024;

/// What reading a request head came to.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// The whole head is in the buffer.
    Read,
    /// More than [`MAX_REQUEST_HEAD_BYTES`] without its end.
    TooLarge,
    /// Closed, failed, or no whole head before the deadline.
    Closed,
}

/// Reads into `pending` until it holds a whole request head, by `deadline`.
async fn read_head(stream: &mut Stream, pending: &mut BytesMut, deadline: Instant) -> Head {
    let mut scanned = 0;
    loop {
        if let Some(end) = head_end_from(pending, scanned) {
            // One read may take the buffer past the limit and the head's end
            // with it: still too large.
            return if end > MAX_REQUEST_HEAD_BYTES {
                Head::TooLarge
            } else {
                Head::Read
            };
        }
        if pending.len() > MAX_REQUEST_HEAD_BYTES {
            return Head::TooLarge;
        }
        scanned = pending.len();
        if pending.capacity() - pending.len() < MIN_SPARE {
            pending.reserve(READ_SIZE);
        }
        if !read_more(stream, pending, deadline).await {
            return Head::Closed;
        }
    }
}

/// Reads what the client has sent into `buf`, waiting until `deadline` at
/// the latest: false when the connection closed or failed, or nothing came
/// in time.
async fn read_more(stream: &mut Stream, buf: &mut BytesMut, deadline: Instant) -> bool {
    let remaining = deadline.saturating_duration_since(Instant::now());
    // Pingora's coarse timer wheel: far cheaper per request than a tokio
    // timer, and 10 ms of precision is plenty here.
    matches!(
        pingora::time::timeout(remaining, stream.read_buf(buf)).await,
        Ok(Ok(n)) if n > 0
    )
}

/// The limits, from the config.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

/// The TLS listener: its address, and the acceptor that makes the
/// handshake with its certificate.
pub struct TlsListener {
    pub address: std::net::SocketAddr,
    pub acceptor: Acceptor,
}

impl TlsListener {
    /// Whether a connection accepted at `local` came in on this listener.
    fn accepted(&self, local: std::net::SocketAddr) -> bool {
        accepted_by(self.address, local)
    }
}

/// Whether a connection accepted at `local` came in on a listener at
/// `address`. The config refuses a `listen` that `listen-tls` could cover by
/// the same rule (`config::overlap`): `0.0.0.0` covers IPv4 addresses only
/// (an IPv6 `listen` on the same port is another socket), `::` all.
fn accepted_by(address: std::net::SocketAddr, local: std::net::SocketAddr) -> bool {
    let local_ip = local.ip().to_canonical();
    let covered = match address.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => local_ip.is_ipv4(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => true,
        ours => ours.to_canonical() == local_ip,
    };
    local.port() == address.port() && covered
}

/// What a TLS handshake came to.
enum Handshake {
    Done(Stream),
    /// Failed, or not done in time: the connection is gone.
    Failed,
}

/// Makes the TLS handshake of a connection accepted on the TLS listener,
/// within `limit`. A failure is one log line a second at most (a scanner,
/// a plain-HTTP client or a balancer's TCP check can repeat one at will).
async fn handshake(tls: &TlsListener, stream: Stream, limit: Duration) -> Handshake {
    let peer = stream
        .get_socket_digest()
        .and_then(|d| d.peer_addr().cloned());
    // Accepted on a TCP listener: the stream is Pingora's TCP stream, which
    // its acceptor takes as it is.
    let Ok(tcp) = stream.into_any().downcast::<TcpStream>() else {
        return Handshake::Failed;
    };
    let failed = match pingora::time::timeout(limit, tls.acceptor.tls_handshake(*tcp)).await {
        Ok(Ok(tls)) => return Handshake::Done(Box::new(tls)),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("not done within client-header-timeout-ms ({limit:?})"),
    };
    if let Some(count) = crate::logging::limited("tls handshake") {
        let peer = peer.map(|p| p.to_string()).unwrap_or_default();
        tracing::info!(count, peer, error = %failed, "TLS handshake failed");
    }
    Handshake::Failed
}

/// The proxy application with connection limits in front.
pub struct Guarded<A> {
    inner: Arc<A>,
    limits: Limits,
    /// The open-connection count, kept in the metric that exports it.
    open: IntGauge,
    /// For the requests this loop answers itself.
    metrics: Arc<Metrics>,
    direct: Option<Arc<DirectLane>>,
    tls: Option<TlsListener>,
}

impl<A> Guarded<A> {
    /// `tls`: the TLS listener, whose connections are accepted as plain
    /// TCP and given their handshake here.
    pub fn new(
        inner: A,
        limits: Limits,
        metrics: Arc<Metrics>,
        direct: Option<Arc<DirectLane>>,
        tls: Option<TlsListener>,
    ) -> Guarded<A> {
        Guarded {
            inner: Arc::new(inner),
            limits,
            open: metrics.connections.clone(),
            metrics,
            direct,
            tls,
        }
    }

    /// The admin listener's loop: the same head deadline, and a cap of its
    /// own, counted apart (`waitgate_admin_connections`), so that a crowd
    /// on it cannot take the proxy's connections, nor the proxy's its.
    pub fn admin(inner: A, limits: Limits, metrics: Arc<Metrics>) -> Guarded<A> {
        Guarded {
            inner: Arc::new(inner),
            limits,
            open: metrics.admin_connections.clone(),
            metrics,
            direct: None,
            tls: None,
        }
    }

    /// The TLS listener, when `stream` came in on it.
    fn tls_for(&self, stream: &Stream) -> Option<&TlsListener> {
        let tls = self.tls.as_ref()?;
        let local = stream
            .get_socket_digest()
            .and_then(|d| d.local_addr().and_then(|a| a.as_inet()).copied())?;
        tls.accepted(local).then_some(tls)
    }
}

/// One open connection; dropping it takes it off the count.
struct Open(IntGauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Answers 503 without reading the request, then closes gently: closing a
/// socket with unread input makes the kernel send a reset, which can destroy
/// the reply before the client reads it. So the write side is shut first and
/// what the client sent is drained briefly (nginx's "lingering close").
async fn refuse(stream: &mut Stream) {
    let reply = Reply::from(ApiError::TooManyConnections).closing();
    if stream
        .write_all(&reply.to_http1(false, false))
        .await
        .is_err()
    {
        return;
    }
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let drain = async {
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// Answers a request head refused before either HTTP path reads it (a
/// 400 with a request id of waitgate's own), and ends the connection:
/// where such a request ends is not something every reader agrees on.
/// Counted and logged as every other request is (route `other`).
async fn refuse_head(stream: &mut Stream, head: &[u8], error: ApiError, metrics: &Metrics) {
    let started = std::time::Instant::now();
    let request_id = forward::generated_id();
    let reply = Reply::from(error)
        .header(REQUEST_ID, request_id.as_str())
        .closing();
    let _ = stream
        .write_all(&reply.to_http1(head.starts_with(b"HEAD "), false))
        .await;
    let _ = stream.shutdown().await;
    // The peer, even behind a trusted balancer: a head that no parser reads
    // one way has no header to believe.
    let client = stream.get_socket_digest().and_then(|d| {
        d.peer_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip().to_canonical())
    });
    let (method, path) = loggable_line(head);
    Record {
        request_id: &request_id,
        client,
        peer: client,
        method,
        path,
        status: reply.status,
        route: "other",
        queue: None,
        user: None,
        upstream: None,
        upstream_name: None,
        elapsed: started.elapsed(),
        failed: None,
    }
    .finish(metrics);
}

/// The method and path of a refused request line, for its log line: each
/// only if it is plain printable ASCII (a refused line may hold anything),
/// else `-`; the path without its query.
fn loggable_line(head: &[u8]) -> (&str, &str) {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    fn plain(part: Option<&[u8]>) -> &str {
        part.filter(|p| !p.is_empty() && p.iter().all(|b| b.is_ascii_graphic()))
            .and_then(|p| std::str::from_utf8(p).ok())
            .unwrap_or("-")
    }
    let method = plain(parts.next());
    let target = plain(parts.next());
    (method, target.split('?').next().unwrap_or("-"))
}

/// Ends a TLS connection this loop closes on its own (idle at its
/// timeout, a head cut off, the client's own close, shutdown) with a
/// close_notify alert, so that the client can tell an orderly close from a
/// cut one (RFC 8446 §6.1), as a reply that closes the connection already
/// does. Bounded: a client that reads nothing cannot hold the connection.
async fn close_notify(stream: &mut Stream) {
    let _ = pingora::time::timeout(LINGER, stream.shutdown()).await;
}

/// How long a refused connection is drained before it is closed.
const LINGER: Duration = Duration::from_millis(200);

#[async_trait]
impl<A> ServerApp for Guarded<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // The upstream connections this connection's requests use are its
        // own, and closed with it (`super::rules::pool`).
        pool::for_client(self.serve(stream, shutdown)).await
    }

    async fn cleanup(&self) {
        self.inner.http_cleanup().await;
    }
}

impl<A> Guarded<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    /// Serves a connection accepted by the proxy's own listener
    /// (`super::listener`) until it ends: this loop, and Pingora's for
    /// whatever it hands on (HTTP/2).
    pub async fn connection(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) {
        // Not through `process_new`, which boxes the loop's future apart
        // from the task that holds it: one allocation a connection, not two.
        let mut next = pool::for_client(self.serve(stream, shutdown)).await;
        while let Some(stream) = next {
            next = self.process_new(stream, shutdown).await;
        }
    }

    /// One client connection, from its accept to its end.
    async fn serve(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        self.open.inc();
        let _open = Open(self.open.clone());
        // The first request's wait counts from here: a TLS handshake takes
        // from the same time (`client-header-timeout-ms` from the accept).
        let accepted = Instant::now();
        let tls = self.tls_for(&stream);
        if self.open.get() as usize > self.limits.max_connections {
            // Over TLS, a reply would need a handshake first: closed.
            if tls.is_none() {
                // Boxed: its 4 KB drain buffer would otherwise be part of
                // every connection's future.
                Box::pin(refuse(&mut stream)).await;
            }
            return None;
        }
        if let Some(tls) = tls {
            // Boxed: the handshake's future is only needed while it runs.
            match Box::pin(handshake(tls, stream, self.limits.header_timeout)).await {
                Handshake::Done(secure) => stream = secure,
                Handshake::Failed => return None,
            }
        }

        let mut stream = stream;
        let mut settings = None;
        let mut shutdown_rx = shutdown.clone();
        // The TLS listener: HTTP/2 (as ALPN chose) is Pingora's own loop,
        // which frames every message itself. HTTP/1.1 over TLS is read by
        // this loop, as on the plain listener (the whole-head deadline, the
        // checks of a head before either path reads it, pipelining), and
        // served by the Pingora proxy: the direct lane speaks for the plain
        // listener (the scheme it forwards is `http`).
        let plain = stream.as_any().is::<TcpStream>();
        match stream.selected_alpn_proto() {
            Some(ALPN::H2) if !plain => {
                // Its preface within the header timeout, as a head would
                // be (Pingora would wait for it as long as the client
                // likes); Pingora reads it again from the stream.
                let mut preface = BytesMut::with_capacity(H2_PREFACE.len());
                let deadline = accepted + self.limits.header_timeout;
                while preface.len() < H2_PREFACE.len() {
                    let read = tokio::select! {
                        read = read_more(&mut stream, &mut preface, deadline) => read,
                        _ = shutdown_rx.changed() => false,
                    };
                    if !read {
                        close_notify(&mut stream).await;
                        return None;
                    }
                }
                // Not HTTP/2 (HTTP/1.1 on a connection that chose h2, say):
                // closed, as the RFC allows without GOAWAY. Left to Pingora,
                // each one was an ERROR line a client could repeat at will.
                if preface[..H2_PREFACE.len()] != H2_PREFACE[..] {
                    tracing::debug!("an HTTP/2 connection without the HTTP/2 preface, closed");
                    close_notify(&mut stream).await;
                    return None;
                }
                let stream = fenced::replaying(stream, preface);
                return self.inner.process_new(stream, shutdown).await;
            }
            Some(ALPN::Custom(_)) if !plain => {
                return self.inner.process_new(stream, shutdown).await
            }
            _ => {}
        }
        let lane = self.direct.as_ref().filter(|_| plain);
        let peer = lane.map(|lane| lane.peer(&stream));
        // Bytes read but not yet answered: a head, or a pipelined next one.
        let mut pending = BytesMut::new();
        // When the wait for the next request began: the accept, then the
        // end of each reply.
        let mut waiting_since = accepted;
        // Where the loop itself ends the connection (idle, a head cut off,
        // the client's close, shutdown), it breaks out to close it.
        loop {
            // Wait for the next request's first byte holding nothing but the
            // socket: buffers are only allocated once there is something to
            // read, so idle keep-alive connections stay cheap.
            // A TLS stream cannot be peeked: its next head is waited for by
            // reading it, under the same deadline and shutdown watch.
            let mut unpeeked = false;
            if pending.is_empty() {
                pending = BytesMut::new();
                let mut first = [0u8; 1];
                let wait = (waiting_since + self.limits.header_timeout)
                    .saturating_duration_since(Instant::now());
                tokio::select! {
                    ready = pingora::time::timeout(wait, stream.try_peek(&mut first)) => {
                        match ready {
                            Ok(Ok(peeked)) => unpeeked = !peeked,
                            _ => break,
                        }
                    }
                    _ = shutdown_rx.changed() => break,
                }
            }
            // The whole head within the header timeout of its first byte
            // (of the wait for it, where the stream cannot be peeked: over
            // TLS, of the accept or the end of the previous reply).
            let deadline = if unpeeked {
                waiting_since + self.limits.header_timeout
            } else {
                Instant::now() + self.limits.header_timeout
            };
            let head = if unpeeked {
                tokio::select! {
                    head = read_head(&mut stream, &mut pending, deadline) => head,
                    _ = shutdown_rx.changed() => break,
                }
            } else {
                read_head(&mut stream, &mut pending, deadline).await
            };
            match head {
                Head::Read => {}
                Head::Closed => break,
                Head::TooLarge => {
                    let reply = Reply::from(ApiError::HeadersTooLarge).closing();
                    let _ = stream.write_all(&reply.to_http1(false, false)).await;
                    let _ = stream.shutdown().await;
                    return None;
                }
            }
            // A request line that reads more than one way is answered here,
            // before either path reads it (`request::check_line`).
            if let Err(why) = request::check_line(&pending) {
                refuse_head(
                    &mut stream,
                    &pending,
                    ApiError::BadPath(why.message()),
                    &self.metrics,
                )
                .await;
                return None;
            }
            if let (Some(lane), Some(peer)) = (lane, peer) {
                let closing = *shutdown.borrow();
                // Not boxed: allocating the lane's future per request cost
                // the protected GET 13% of its throughput (measured), and 8%
                // again on 2026-12-06, against 3.7 KB of each idle
                // connection's memory (docs/performance.md, idle
                // connections); its large parts, the queue API's calls, are
                // boxed inside.
                match lane.serve(&mut stream, &mut pending, closing, peer).await {
                    Lane::Served => {
                        waiting_since = Instant::now();
                        continue;
                    }
                    Lane::Closed => return None,
                    Lane::Pass => {}
                }
            }
            // What Pingora's reader would refuse with a bare 400, refused
            // here with waitgate's own (`request::check_readable`).
            if let Err(error) = request::check_readable(&pending) {
                refuse_head(&mut stream, &pending, error, &self.metrics).await;
                return None;
            }
            // The request, and no more: what the client pipelines behind
            // it is held for this loop (`super::fenced`).
            let (lent, first) = fenced::lend(stream, &mut pending);
            let mut session = ServerSession::new_http1(lent);
            if let Some(settings) = settings.take() {
                HttpPersistentSettings::apply_to_session(settings, &mut session);
            }
            // Parsed from what was read, without a second read or copy.
            session.set_pipelined_prefix(first);
            if *shutdown.borrow() {
                session.set_keepalive(None);
            } else {
                // Pingora's per-read idle limit, for a request body; the
                // head is already read.
                session.set_keepalive(Some(self.limits.header_timeout.as_secs().max(1)));
            }
            // Boxed: inlined, a request's future (tens of KB for Pingora's)
            // would be part of the connection's for as long as it is open.
            let reused = Box::pin(self.inner.process_new_http(session, shutdown)).await;
            let mut lent;
            (lent, settings) = reused?.consume();
            // Pingora flushed its reply; anything still gathered goes before
            // the next request's answer (`super::fenced`).
            if lent.flush().await.is_err() {
                return None;
            }
            (stream, pending) = fenced::take_back(lent);
            waiting_since = Instant::now();
        }
        if !plain {
            close_notify(&mut stream).await;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `make` would return, without calling it.
    fn size_of_made<F>(_make: impl FnOnce() -> F) -> usize {
        std::mem::size_of::<F>()
    }

    type Proxy = Guarded<pingora::proxy::HttpProxy<crate::proxy::Gate>>;

    /// The size of a connection's future, from the types of what makes it.
    fn size_of_connection(
        guarded: Option<&'static Arc<Proxy>>,
        shutdown: Option<&'static ShutdownWatch>,
        stream: Option<Stream>,
    ) -> usize {
        size_of_made(move || {
            let (Some(guarded), Some(shutdown), Some(stream)) = (guarded, shutdown, stream) else {
                unreachable!("only its type is asked for");
            };
            guarded.connection(stream, shutdown)
        })
    }

    /// Each open connection's task is its loop's future, held for as long
    /// as the connection is open: its size is most of what an idle
    /// keep-alive connection costs (docs/performance.md). What a request
    /// needs while it is served (Pingora's session, the queue API's calls,
    /// a request head's parsed fields: 5,088 bytes with them) must not be
    /// part of it.
    #[test]
    fn a_connections_task_holds_a_small_future() {
        let size = size_of_connection(None, None, None);
        eprintln!("a connection's future: {size} bytes");
        assert!(size <= 4096, "a connection's future is {size} bytes");
    }

    #[test]
    fn a_connection_is_the_tls_listeners_by_the_config_rule() {
        let at = |address: &str, local: &str| {
            let address: std::net::SocketAddr = address.parse().unwrap();
            let local: std::net::SocketAddr = local.parse().unwrap();
            accepted_by(address, local)
        };
        assert!(at("0.0.0.0:8443", "10.0.0.1:8443"));
        assert!(at("0.0.0.0:8443", "[::ffff:10.0.0.1]:8443"));
        assert!(
            !at("0.0.0.0:8443", "[::1]:8443"),
            "an IPv6 listen on the same port"
        );
        assert!(!at("0.0.0.0:8443", "10.0.0.1:8080"));
        assert!(at("[::]:8443", "[::1]:8443"));
        assert!(at("127.0.0.1:8443", "127.0.0.1:8443"));
        assert!(!at("127.0.0.1:8443", "127.0.0.2:8443"));
    }
}
