//! The Pingora path's plain-TCP upstream connections, watched as their
//! bytes go by.
//!
//! Why this exists: Pingora's HTTP client, reading a response head with
//! both `Content-Length` and `Transfer-Encoding`, drops the length before
//! any hook of waitgate's sees the head (RFC 9112 §6.3 lets an
//! intermediary do so), and keeps the raw head where no hook can reach it.
//! The rules (`super::rules::response`) say such a head is a 502, as the
//! direct lane answers. So the Pingora path makes its plain-TCP upstream
//! connections here (Pingora's `custom_l4`): each is a [`Watched`] stream
//! that passes every byte through unchanged, reads the request head it
//! carries and the response heads and bodies as they pass with the shared
//! rules, and fails the read of a head the rules refuse. Pingora then
//! answers 502 before anything of the response reached the client.
//!
//! What it takes on as a consequence: Pingora reuses a connection only when
//! it can match the socket's file descriptor, which a stream of this kind
//! does not expose. So keeping connections alive is done here too, as the
//! lane keeps them, for the client connection only (`super::rules::pool`):
//! a watched stream gives its socket back to that client's kept ones when
//! Pingora drops it, only if its one exchange ended exactly (the
//! request and the response both whole by their framing, nothing read past
//! the response, no `Connection: close`, no tunnel). A socket is checked
//! for unread bytes and EOF again when taken. And as Pingora retries an
//! idempotent request whose reused connection failed before answering, a
//! socket taken from the pool that fails before any byte of a response
//! fails with [`Stale`], which the proxy (`super::gate`) retries the same
//! way.
//!
//! TLS upstreams keep Pingora's own connections: the bytes a stream here
//! would see are encrypted. For them, a head with both framing headers is
//! relayed with Pingora's reading (docs/security.md says so).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::connectors::L4Connect;
use pingora::protocols::l4::socket::SocketAddr as PeerAddr;
use pingora::protocols::l4::stream::Stream;
use pingora::protocols::l4::virt::{VirtualSockOpt, VirtualSocket, VirtualSocketStream};
use pingora::{Error, ErrorType};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::rules::chunked::ChunkedEnd;
use super::rules::pool::{Kept, Pool};
use super::rules::response::{self, Body, Unread};

/// The largest request or response head watched; a longer one is passed
/// through unwatched and its connection is not kept (Pingora's client
/// refuses response heads of 1 MiB and more anyway).
const MAX_WATCHED_HEAD_BYTES: usize = 1_048_576;

/// The read error of a socket taken from the pool that failed before any
/// byte of a response came: the upstream closed it as it was taken. A
/// request that may be repeated is retried on another connection, as
/// Pingora retries one whose reused connection failed.
#[derive(Debug)]
pub struct Stale;

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a kept-alive upstream connection closed before answering")
    }
}

impl std::error::Error for Stale {}

/// A response head the rules refuse (the read fails with it, and the
/// client gets a 502), or a body's framing (the client's reply is cut).
#[derive(Debug)]
pub struct Refused(pub &'static str);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the response was refused: {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// Whether a proxy error came from a watched socket that went stale.
pub fn is_stale(error: &Error) -> bool {
    io_cause::<Stale>(error).is_some()
}

/// What the rules refused, when a proxy error is their refusal of a
/// response head or body: from a watched socket, or from the response
/// filter's own judgement of the head.
pub fn refusal(error: &Error) -> Option<&'static str> {
    io_cause::<Refused>(error).map(|r| r.0)
}

/// The `T` under a proxy error: the inner error of a watched socket's I/O
/// error, or a cause of its own.
fn io_cause<T: std::error::Error + 'static>(error: &Error) -> Option<&T> {
    let mut cause: Option<&(dyn std::error::Error + Send + Sync + 'static)> =
        error.cause.as_deref();
    while let Some(e) = cause {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return io.get_ref().and_then(|inner| inner.downcast_ref::<T>());
        }
        // Pingora's errors carry their cause in a field, not as a source,
        // and one wraps another boxed.
        cause = if let Some(pingora) = e.downcast_ref::<Box<Error>>() {
            pingora.cause.as_deref()
        } else if let Some(pingora) = e.downcast_ref::<Error>() {
            pingora.cause.as_deref()
        } else {
            None
        };
    }
    None
}

/// Makes the watched connections of one upstream address for one client
/// connection, keeping its idle ones for that client only
/// (`super::rules::pool`).
pub struct Connector {
    pool: Arc<Pool>,
    /// The client connection the request is for; none: a new connection,
    /// not kept.
    kept: Option<Arc<Kept>>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the pool's sockets: a peer is printed with its options.
        write!(f, "Connector({})", self.pool.addr)
    }
}

#[async_trait]
impl L4Connect for Connector {
    async fn connect(&self, _addr: &PeerAddr) -> pingora::Result<Stream> {
        let taken = self.kept.as_ref().and_then(|kept| kept.take(&self.pool));
        let (conn, pooled) = match taken {
            Some(conn) => (conn, true),
            None => (connect(&self.pool).await?, false),
        };
        let watched = Watched {
            conn: Some(conn),
            pool: self.pool.clone(),
            kept: self.kept.as_ref().map(Arc::downgrade),
            pooled,
            answered: false,
            exchange: Exchange::default(),
        };
        Ok(Stream::from(VirtualSocketStream::new(Box::new(watched))))
    }
}

/// A new socket to the pool's address, within its connect timeout. Errors
/// are typed as Pingora's own connector types them, so that both map to
/// the same 502 or 504.
async fn connect(pool: &Pool) -> pingora::Result<TcpStream> {
    match pingora::time::timeout(pool.connect_timeout, TcpStream::connect(pool.addr)).await {
        Ok(Ok(conn)) => {
            let _ = conn.set_nodelay(true);
            Ok(conn)
        }
        Ok(Err(e)) => {
            let kind = match e.kind() {
                io::ErrorKind::ConnectionRefused => ErrorType::ConnectRefused,
                io::ErrorKind::TimedOut => ErrorType::ConnectTimedout,
                _ => ErrorType::ConnectError,
            };
            Err(Error::because(kind, format!("cannot connect to {}", pool.addr), e).into_up())
        }
        Err(_) => Err(Error::explain(
            ErrorType::ConnectTimedout,
            format!(
                "timeout {:?} connecting to {}",
                pool.connect_timeout, pool.addr
            ),
        )
        .into_up()),
    }
}

/// The addresses of an upstream, each made into a [`Pool`] as it is first
/// used.
#[derive(Debug, Default)]
pub struct Connectors {
    by_addr: Mutex<HashMap<SocketAddr, Arc<Pool>>>,
}

impl Connectors {
    /// A connector to `addr` for the client connection `kept`.
    pub fn get(
        &self,
        addr: SocketAddr,
        connect_timeout: Duration,
        read_timeout: Duration,
        kept: Option<Arc<Kept>>,
    ) -> Arc<Connector> {
        let pool = {
            let mut by_addr = self.by_addr.lock().unwrap_or_else(|p| p.into_inner());
            by_addr
                .entry(addr)
                .or_insert_with(|| Arc::new(Pool::new(addr, connect_timeout, read_timeout)))
                .clone()
        };
        Arc::new(Connector { pool, kept })
    }
}

/// Where one direction of the exchange stands.
#[derive(Debug)]
enum Side {
    /// Reading a head: the bytes of it seen so far, and how far they were
    /// searched for its end.
    Head(Vec<u8>, usize),
    /// Inside a body of this many bytes more.
    Length(u64),
    /// Inside a chunked body.
    Chunked(ChunkedEnd),
    /// Ended exactly.
    Done,
    /// No longer followed: a tunnel, a body read until close, a head too
    /// large or not HTTP, a body Pingora's client refuses too.
    Lost,
}

impl Side {
    fn head() -> Side {
        Side::Head(Vec::new(), 0)
    }

    /// Adds `bytes` to a head being read (a `Side::Head`): its length
    /// before, once it holds a whole head; `None` while it needs more. One
    /// that grows past [`MAX_WATCHED_HEAD_BYTES`] is no longer followed (`Side::Lost`).
    fn grow_head(&mut self, bytes: &[u8]) -> Option<usize> {
        let Side::Head(head, searched) = self else {
            return None;
        };
        let before = head.len();
        head.extend_from_slice(bytes);
        if head_end(head, *searched).is_some() {
            return Some(before);
        }
        *searched = head.len();
        if head.len() > MAX_WATCHED_HEAD_BYTES {
            *self = Side::Lost;
        }
        None
    }

    /// Follows `bytes` of a body (a `Side::Length` or `Side::Chunked`): how
    /// many of them it took, `Done` once it ended; or where the byte its
    /// framing refuses stands.
    fn take_body(&mut self, bytes: &[u8]) -> Result<usize, usize> {
        match self {
            Side::Length(left) => {
                let take = bytes
                    .len()
                    .min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= take as u64;
                if *left == 0 {
                    *self = Side::Done;
                }
                Ok(take)
            }
            Side::Chunked(scanner) => match scanner.scan(bytes) {
                Ok(Some(end)) => {
                    *self = Side::Done;
                    Ok(end)
                }
                Ok(None) => Ok(bytes.len()),
                Err(malformed) => Err(malformed.at),
            },
            Side::Head(..) | Side::Done | Side::Lost => Ok(0),
        }
    }
}

/// What a watched socket has seen of its one exchange: the request written
/// and the response read, followed with the shared rules.
#[derive(Debug)]
pub struct Exchange {
    request: Side,
    response: Side,
    /// The request was `HEAD`: its response has no body.
    head_request: bool,
    /// The socket may not be kept: a `Connection: close`, bytes past the
    /// response, a request not understood, a side no longer followed, or a
    /// failure. Response heads are still judged.
    spoiled: bool,
    /// When the exchange ended exactly: the socket has been idle since
    /// (Pingora may hold the stream a while before dropping it).
    ended: Option<Instant>,
    /// Pingora's client found it reusable too: it read the socket once more
    /// after the exchange ended and found nothing (its check before it keeps
    /// a connection). A socket Pingora drops on an error it saw, and this
    /// watcher did not, is not kept.
    released: bool,
    /// The response's body was refused: nothing more of it is passed on.
    cut: bool,
}

impl Default for Exchange {
    fn default() -> Exchange {
        Exchange {
            request: Side::head(),
            response: Side::head(),
            head_request: false,
            spoiled: false,
            ended: None,
            released: false,
            cut: false,
        }
    }
}

/// One upstream exchange through a socket, watched. See the module doc.
#[derive(Debug)]
struct Watched {
    /// Always there until dropped.
    conn: Option<TcpStream>,
    pool: Arc<Pool>,
    /// The client connection it is kept for, while that one lasts.
    kept: Option<Weak<Kept>>,
    /// Taken from the pool, rather than connected for this exchange.
    pooled: bool,
    /// A byte of a response has come.
    answered: bool,
    exchange: Exchange,
}

/// Where a head that starts `head` ends, searching from `from` (what was
/// searched before, less the three bytes an end can straddle).
fn head_end(head: &[u8], from: usize) -> Option<usize> {
    let from = from.saturating_sub(3);
    memchr::memchr_iter(b'\n', &head[from..])
        .map(|i| from + i)
        .find(|&i| head[..i].ends_with(b"\n") || head[..i].ends_with(b"\n\r"))
        .map(|i| i + 1)
}

impl Exchange {
    /// Follows the request bytes written.
    pub fn wrote(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.request {
                Side::Head(head, _) => {
                    if head.is_empty() {
                        // The method alone says whether the response has a
                        // body, even for a head this watcher cannot parse.
                        self.head_request = bytes.starts_with(b"HEAD ");
                    }
                    let Some(before) = self.request.grow_head(bytes) else {
                        self.spoiled |= matches!(self.request, Side::Lost);
                        return;
                    };
                    let Side::Head(head, searched) = &mut self.request else {
                        return;
                    };
                    match request_head(head) {
                        Ok(Some((consumed, body))) => {
                            bytes = &bytes[consumed.saturating_sub(before).min(bytes.len())..];
                            self.request = body;
                        }
                        Ok(None) => {
                            // An end of line or two before the head itself.
                            *searched = head.len();
                            return;
                        }
                        Err(()) => {
                            self.spoiled = true;
                            self.request = Side::Lost;
                        }
                    }
                }
                Side::Length(_) | Side::Chunked(_) => match self.request.take_body(bytes) {
                    Ok(took) => bytes = &bytes[took..],
                    Err(_) => {
                        self.spoiled = true;
                        self.request = Side::Lost;
                    }
                },
                // A second request on one exchange: never written by
                // Pingora's client, and not kept if it were.
                Side::Done | Side::Lost => {
                    self.spoiled = true;
                    self.request = Side::Lost;
                    return;
                }
            }
        }
    }

    /// Follows the response bytes read; a head the rules refuse is an
    /// error (the bytes are then not passed on). How many of the bytes to
    /// pass on: all of them, unless a chunked body's framing is refused
    /// (one the shared scanner refuses, where Pingora's reader might have
    /// taken it, depending on how the bytes were split): then those before
    /// the refused byte, and the next read fails.
    pub fn read(&mut self, mut bytes: &[u8]) -> Result<usize, Refused> {
        let all = bytes.len();
        while !bytes.is_empty() {
            match &mut self.response {
                Side::Head(..) => {
                    let Some(before) = self.response.grow_head(bytes) else {
                        self.spoiled |= matches!(self.response, Side::Lost);
                        return Ok(all);
                    };
                    let Side::Head(head, searched) = &mut self.response else {
                        return Ok(all);
                    };
                    let Some((consumed, next, close)) = response_head(head, self.head_request)?
                    else {
                        // An end of line or two before the head itself.
                        *searched = head.len();
                        return Ok(all);
                    };
                    self.spoiled |= close;
                    bytes = &bytes[consumed.saturating_sub(before).min(bytes.len())..];
                    self.response = next;
                }
                Side::Length(_) | Side::Chunked(_) => match self.response.take_body(bytes) {
                    Ok(took) => bytes = &bytes[took..],
                    Err(at) => {
                        self.spoiled = true;
                        self.cut = true;
                        self.response = Side::Lost;
                        return Ok(all - bytes.len() + at);
                    }
                },
                // Bytes past the end of the response: never asked for.
                Side::Done => {
                    self.spoiled = true;
                    self.response = Side::Lost;
                }
                Side::Lost => break,
            }
        }
        // A response that ended while the request was still being written
        // was an early answer: the upstream may not read the rest as a body
        // (it could read a request hidden in it), so the socket is not kept.
        if matches!(self.response, Side::Done) && !matches!(self.request, Side::Done) {
            self.spoiled = true;
        }
        Ok(all)
    }

    /// Notes when both sides have ended.
    fn settle(&mut self) {
        if self.ended.is_none() && self.ended_exactly() {
            self.ended = Some(Instant::now());
        }
    }

    /// Whether both the request and the response ended exactly where their
    /// framing said, with nothing after them.
    pub fn ended_exactly(&self) -> bool {
        !self.spoiled && matches!(self.request, Side::Done) && matches!(self.response, Side::Done)
    }

    /// Whether the socket can serve another exchange: it ended exactly,
    /// and Pingora's client kept it too.
    fn reusable(&self) -> bool {
        self.ended_exactly() && self.released
    }
}

impl Watched {
    fn conn(&mut self) -> Pin<&mut TcpStream> {
        // `conn` is taken only in `drop`.
        Pin::new(
            self.conn
                .as_mut()
                .expect("a watched socket until it is dropped"),
        )
    }

    /// The error to give for a failed read or write: [`Stale`] if the
    /// socket came from the pool and nothing of a response came yet.
    fn failed(&mut self, e: io::Error) -> io::Error {
        self.exchange.spoiled = true;
        if self.pooled && !self.answered {
            io::Error::new(e.kind(), Stale)
        } else {
            e
        }
    }
}

/// Header slots tried first for a request head; one with more is parsed
/// again with [`REQUEST_HEADERS`] (a few dozen slots on the stack cost less
/// than zeroing hundreds on every head). Response heads are read by the
/// rules' reader (`response::read_head`).
const FEW_HEADERS: usize = 48;

/// Header slots for a request head Pingora writes: its client's limit, and
/// the headers waitgate adds.
const REQUEST_HEADERS: usize = 512;

/// A whole request head at the start of `head`: its length, and where its
/// body ends. `Err` for one the watcher cannot follow.
fn request_head(head: &[u8]) -> Result<Option<(usize, Side)>, ()> {
    let mut few = [httparse::EMPTY_HEADER; FEW_HEADERS];
    match request_head_with(&mut few, head) {
        Err(httparse::Error::TooManyHeaders) => {
            let mut many = vec![httparse::EMPTY_HEADER; REQUEST_HEADERS];
            request_head_with(&mut many, head).map_err(|_| ())?
        }
        parsed => parsed.map_err(|_| ())?,
    }
}

fn request_head_with<'b>(
    slots: &mut [httparse::Header<'b>],
    head: &'b [u8],
) -> Result<Result<Option<(usize, Side)>, ()>, httparse::Error> {
    let mut parsed = httparse::Request::new(slots);
    let consumed = match parsed.parse(head)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(Ok(None)),
    };
    Ok(request_framing(&parsed, consumed))
}

fn request_framing(
    parsed: &httparse::Request<'_, '_>,
    consumed: usize,
) -> Result<Option<(usize, Side)>, ()> {
    let mut length = None;
    let mut chunked = false;
    for h in parsed.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = crate::wire::length::content_length(h.value)
                .bytes()
                .ok_or(())?;
            if length.is_some_and(|l| l != n) {
                return Err(());
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        }
    }
    let body = match (chunked, length) {
        (true, _) => Side::Chunked(ChunkedEnd::default()),
        (false, Some(n)) if n > 0 => Side::Length(n),
        _ => Side::Done,
    };
    Ok(Some((consumed, body)))
}

/// A whole response head at the start of `head` (its end was found),
/// judged by the rules: its length, what follows it (the next head after a
/// 1xx), and whether the socket may not be kept after it. `Err` for a head
/// the rules refuse.
fn response_head(head: &[u8], head_request: bool) -> Result<Option<(usize, Side, bool)>, Refused> {
    // Whether a 101 was asked for is the proxy's to judge (it refuses one
    // that was not); here a 101 only means a tunnel, never kept.
    let judged = response::read_head(head, head_request, true, |_, consumed, judged| {
        let close = judged.upstream_close;
        match judged.body {
            _ if judged.interim => (consumed, Side::head(), false),
            Body::Empty | Body::Length(0) => (consumed, Side::Done, close),
            Body::Length(n) => (consumed, Side::Length(n), close),
            Body::Chunked => (consumed, Side::Chunked(ChunkedEnd::default()), close),
            Body::UntilClose | Body::Tunnel => (consumed, Side::Lost, true),
        }
    });
    match judged {
        Ok(read) => Ok(read),
        // Not HTTP, or more headers than Pingora's client takes: it refuses
        // the head itself, with the same 502.
        Err(Unread::NotHttp) => Ok(Some((head.len(), Side::Lost, true))),
        Err(Unread::Refused(refusal)) => Err(Refused(refusal.message())),
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if this.exchange.cut {
            return Poll::Ready(Err(body_refused()));
        }
        // Pingora's check before it keeps a connection reads one byte.
        let probe = buf.remaining() == 1;
        let before = buf.filled().len();
        match this.conn().poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(this.failed(e))),
            Poll::Pending => {
                // Nothing more after the exchange ended.
                this.exchange.released |= probe && this.exchange.ended_exactly();
                return Poll::Pending;
            }
        }
        let read = &buf.filled()[before..];
        if read.is_empty() {
            // EOF. Before any answer on a socket from the pool: stale.
            if this.pooled && !this.answered && !matches!(this.exchange.response, Side::Done) {
                let stale = io::Error::new(io::ErrorKind::UnexpectedEof, Stale);
                return Poll::Ready(Err(this.failed(stale)));
            }
            this.exchange.spoiled = true;
            return Poll::Ready(Ok(()));
        }
        this.answered = true;
        match this.exchange.read(read) {
            Err(refused) => {
                this.exchange.spoiled = true;
                buf.set_filled(before);
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, refused)));
            }
            // A body refused inside this read: what came before goes on,
            // and the next read fails (above). Pingora's reader may have
            // refused it at the same byte or taken it whole.
            Ok(pass) if pass < read.len() => {
                buf.set_filled(before + pass);
                if pass == 0 {
                    return Poll::Ready(Err(body_refused()));
                }
            }
            Ok(_) => {}
        }
        this.exchange.settle();
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this.conn().poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.exchange.wrote(&buf[..n]);
                this.exchange.settle();
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(this.failed(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.conn().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.exchange.spoiled = true;
        self.conn().poll_shutdown(cx)
    }
}

impl VirtualSocket for Watched {
    fn set_socket_option(&self, opt: VirtualSockOpt) -> io::Result<()> {
        let Some(conn) = &self.conn else {
            return Ok(());
        };
        match opt {
            // Set once, when the socket was connected (`connect`): Pingora
            // asks again for every request, which on a kept-alive socket
            // was one `setsockopt` a request for nothing (measured: 1.0
            // a protected POST, docs/performance.md).
            VirtualSockOpt::NoDelay => Ok(()),
            // Likewise kept from the first request on the socket.
            VirtualSockOpt::KeepAlive(_) if self.pooled => Ok(()),
            VirtualSockOpt::KeepAlive(ka) => {
                let keepalive = socket2::TcpKeepalive::new()
                    .with_time(ka.idle)
                    .with_interval(ka.interval);
                socket2::SockRef::from(conn).set_tcp_keepalive(&keepalive)
            }
            // Options of later Pingora versions: none applies here.
            _ => Ok(()),
        }
    }
}

/// The read error once a chunked body's framing was refused.
fn body_refused() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        Refused(super::rules::chunked::REFUSED),
    )
}

impl Drop for Watched {
    fn drop(&mut self) {
        if self.exchange.reusable() {
            let kept = self.kept.as_ref().and_then(Weak::upgrade);
            if let (Some(kept), Some(conn), Some(ended)) =
                (kept, self.conn.take(), self.exchange.ended)
            {
                kept.put(&self.pool, conn, ended);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched() -> Exchange {
        Exchange::default()
    }

    /// An exchange whose request was written whole.
    fn after(request: &[u8]) -> Exchange {
        let mut w = watched();
        w.wrote(request);
        w
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    #[test]
    fn an_exchange_that_ends_exactly_is_reusable_in_any_pieces() {
        let request = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        let response =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        for cut in 1..response.len() {
            let mut w = watched();
            w.wrote(&request[..7]);
            w.wrote(&request[7..]);
            w.read(&response[..cut]).unwrap();
            assert!(!w.ended_exactly(), "cut {cut}");
            w.read(&response[cut..]).unwrap();
            assert!(w.ended_exactly(), "cut {cut}");
        }
    }

    #[test]
    fn a_refused_chunked_body_is_passed_on_up_to_the_refused_byte() {
        let response = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nX\r\n";
        let bad = response.len() - 3;
        for cut in 1..response.len() {
            let mut w = after(GET);
            let first = w.read(&response[..cut]).unwrap();
            if cut <= bad {
                assert_eq!(first, cut, "cut {cut}");
                assert_eq!(w.read(&response[cut..]).unwrap(), bad - cut, "cut {cut}");
            } else {
                assert_eq!(first, bad, "cut {cut}");
            }
            assert!(w.cut && !w.reusable(), "cut {cut}");
        }
    }

    #[test]
    fn both_framing_headers_are_refused_even_after_empty_lines() {
        let both = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(after(GET).read(both).is_err());
        // Empty lines before a head, in any reads, do not hide it.
        let mut w = after(GET);
        w.read(b"\r\n").unwrap();
        assert!(w.read(&[&b"\r\n"[..], both].concat()).is_err());
    }

    #[test]
    fn bytes_past_the_response_or_a_body_on_head_spoil_the_socket() {
        let mut w = after(GET);
        w.read(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiX")
            .unwrap();
        assert!(!w.ended_exactly());

        let mut w = after(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
        w.read(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
            .unwrap();
        assert!(w.ended_exactly());
        w.read(b"hi").unwrap();
        assert!(!w.ended_exactly());
    }

    #[test]
    fn a_response_before_the_whole_request_keeps_the_socket_from_the_pool() {
        let mut w = watched();
        w.wrote(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
        w.read(b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        assert!(!w.ended_exactly());
        // The rest of the body may be read as a request of its own.
        w.wrote(b"lo\r\n0\r\n\r\n");
        assert!(!w.ended_exactly());
    }

    #[test]
    fn leading_empty_lines_of_a_request_end_nothing() {
        let mut w = watched();
        w.wrote(b"\r\n\r\n");
        w.wrote(GET);
        w.read(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
        assert!(w.ended_exactly());
    }

    #[test]
    fn close_tunnels_and_bodies_until_close_are_never_kept() {
        for (response, why) in [
            (
                &b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"[..],
                "close",
            ),
            (
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
                "a tunnel",
            ),
            (b"HTTP/1.1 200 OK\r\n\r\n", "a body until close"),
            (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", "HTTP/1.0"),
            (
                b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                "HTTP/1.0 with Transfer-Encoding",
            ),
        ] {
            let mut w = after(GET);
            w.read(response).unwrap();
            assert!(!w.ended_exactly(), "{why}");
        }
    }

    #[test]
    fn only_a_socket_pingora_kept_too_is_reusable() {
        let mut w = after(GET);
        w.read(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        w.settle();
        assert!(w.ended_exactly() && !w.reusable());
        w.released = true;
        assert!(w.reusable());
    }

    #[test]
    fn responses_are_judged_whatever_the_request_looked_like() {
        // More request headers than the watcher parses, or a head it cannot
        // parse: the socket is not kept, and the response still judged.
        let many: String = (0..600).map(|i| format!("X-{i}: v\r\n")).collect();
        for request in [
            format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n"),
            "GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n".to_string(),
        ] {
            let mut w = watched();
            w.wrote(request.as_bytes());
            let refused = w.read(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            );
            assert!(refused.is_err());
        }
        // And a HEAD is known from its method alone.
        let mut w = watched();
        w.wrote(format!("HEAD / HTTP/1.1\r\n{many}\r\n").as_bytes());
        assert!(w.head_request);
    }

    #[test]
    fn a_stale_error_is_found_in_a_proxy_error() {
        let io = io::Error::new(io::ErrorKind::UnexpectedEof, Stale);
        let e = Error::because(ErrorType::ReadError, "reading", io);
        assert!(is_stale(&e));
        // As the proxy sees it: wrapped again with the peer.
        let e = e.more_context("Peer: upstream");
        assert!(is_stale(&e));
        let other = Error::because(
            ErrorType::ReadError,
            "reading",
            io::Error::from(io::ErrorKind::ConnectionReset),
        );
        assert!(!is_stale(&other));
    }
}
