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
//! does not expose. So keeping connections alive is done here too, with the
//! lane's pool (`super::rules::pool`): a watched stream gives its socket
//! back when Pingora drops it, only if its one exchange ended exactly (the
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
use std::sync::{Arc, Mutex};
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
use super::rules::pool::Pool;
use super::rules::response::{shape, Body};

/// The largest request or response head watched; a longer one is passed
/// through unwatched and its connection is not kept (Pingora's client
/// refuses response heads of 1 MiB and more anyway).
const MAX_HEAD: usize = 1_048_576;

/// Header slots for parsing a watched head; one with more is passed through
/// unwatched and its connection is not kept.
const MAX_HEADERS: usize = 256;

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

/// A response head the rules refuse: the read fails with it, and the
/// client gets a 502.
#[derive(Debug)]
pub struct Refused(pub &'static str);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the response head was refused: {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// Whether a proxy error came from a watched socket that went stale.
pub fn is_stale(error: &Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + Send + Sync + 'static)> =
        error.cause.as_deref();
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return io.get_ref().is_some_and(|inner| inner.is::<Stale>());
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
    false
}

/// Makes the watched connections of one upstream address, keeping its
/// idle ones.
#[derive(Debug)]
pub struct Connector {
    pool: Arc<Pool>,
}

impl Connector {
    pub fn new(addr: SocketAddr, connect_timeout: Duration, read_timeout: Duration) -> Connector {
        Connector {
            pool: Arc::new(Pool::new(addr, connect_timeout, read_timeout)),
        }
    }
}

#[async_trait]
impl L4Connect for Connector {
    async fn connect(&self, _addr: &PeerAddr) -> pingora::Result<Stream> {
        let (conn, pooled) = match self.pool.take() {
            Some(conn) => (conn, true),
            None => (connect(&self.pool).await?, false),
        };
        let watched = Watched {
            conn: Some(conn),
            pool: self.pool.clone(),
            pooled,
            request: Side::Head(Vec::new()),
            response: Side::Head(Vec::new()),
            head_request: false,
            answered: false,
            spoiled: false,
            ended: None,
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

/// The connectors of an upstream's addresses, made as each is first used.
#[derive(Debug, Default)]
pub struct Connectors {
    by_addr: Mutex<HashMap<SocketAddr, Arc<Connector>>>,
}

impl Connectors {
    pub fn get(
        &self,
        addr: SocketAddr,
        connect_timeout: Duration,
        read_timeout: Duration,
    ) -> Arc<Connector> {
        let mut by_addr = self.by_addr.lock().unwrap_or_else(|p| p.into_inner());
        by_addr
            .entry(addr)
            .or_insert_with(|| Arc::new(Connector::new(addr, connect_timeout, read_timeout)))
            .clone()
    }
}

/// Where one direction of the exchange stands.
#[derive(Debug)]
enum Side {
    /// Reading a head: the bytes of it seen so far.
    Head(Vec<u8>),
    /// Inside a body of this many bytes more.
    Length(u64),
    /// Inside a chunked body.
    Chunked(ChunkedEnd),
    /// Ended exactly.
    Done,
}

/// One upstream exchange through a socket, watched. See the module doc.
#[derive(Debug)]
struct Watched {
    /// Always there until dropped.
    conn: Option<TcpStream>,
    pool: Arc<Pool>,
    /// Taken from the pool, rather than connected for this exchange.
    pooled: bool,
    request: Side,
    response: Side,
    /// The request was `HEAD`: its response has no body.
    head_request: bool,
    /// A byte of a response has come.
    answered: bool,
    /// The socket may not be kept: a tunnel, a body read until close, a
    /// `Connection: close`, bytes past the response, something not
    /// understood, or a failure.
    spoiled: bool,
    /// When the exchange ended exactly: the socket has been idle since
    /// (Pingora may hold the stream a while before dropping it).
    ended: Option<Instant>,
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

    /// Follows the request bytes written.
    fn wrote(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.spoiled {
            match &mut self.request {
                Side::Head(head) => {
                    let before = head.len();
                    head.extend_from_slice(bytes);
                    match request_head(head) {
                        Ok(Some((consumed, head_request, body))) => {
                            self.head_request = head_request;
                            bytes = &bytes[consumed - before..];
                            self.request = body;
                        }
                        Ok(None) if head.len() <= MAX_HEAD => return,
                        _ => self.spoiled = true,
                    }
                }
                Side::Length(left) => {
                    let take = bytes
                        .len()
                        .min(usize::try_from(*left).unwrap_or(usize::MAX));
                    *left -= take as u64;
                    bytes = &bytes[take..];
                    if *left == 0 {
                        self.request = Side::Done;
                    }
                }
                Side::Chunked(scanner) => match scanner.scan(bytes) {
                    Ok(Some(end)) => {
                        bytes = &bytes[end..];
                        self.request = Side::Done;
                    }
                    Ok(None) => return,
                    Err(_) => self.spoiled = true,
                },
                // A second request on one exchange: never written by
                // Pingora's client, and not kept if it were.
                Side::Done => self.spoiled = true,
            }
        }
    }

    /// Follows the response bytes read; a head the rules refuse is an
    /// error (the bytes are then not passed on).
    fn read(&mut self, mut bytes: &[u8]) -> Result<(), Refused> {
        while !bytes.is_empty() && !self.spoiled {
            match &mut self.response {
                Side::Head(head) => {
                    let before = head.len();
                    head.extend_from_slice(bytes);
                    match response_head(head, self.head_request)? {
                        Some((consumed, next, close)) => {
                            self.spoiled |= close;
                            bytes = &bytes[consumed - before..];
                            self.response = next;
                        }
                        None if head.len() <= MAX_HEAD => return Ok(()),
                        None => self.spoiled = true,
                    }
                }
                Side::Length(left) => {
                    let take = bytes
                        .len()
                        .min(usize::try_from(*left).unwrap_or(usize::MAX));
                    *left -= take as u64;
                    bytes = &bytes[take..];
                    if *left == 0 {
                        self.response = Side::Done;
                    }
                }
                Side::Chunked(scanner) => match scanner.scan(bytes) {
                    Ok(Some(end)) => {
                        bytes = &bytes[end..];
                        self.response = Side::Done;
                    }
                    Ok(None) => return Ok(()),
                    // Pingora's client refuses it too, as it reads the body.
                    Err(_) => self.spoiled = true,
                },
                // Bytes past the end of the response: never asked for.
                Side::Done => self.spoiled = true,
            }
        }
        Ok(())
    }

    /// Notes when both sides have ended.
    fn settle(&mut self) {
        if self.ended.is_none() && self.reusable() {
            self.ended = Some(Instant::now());
        }
    }

    /// Whether the socket can serve another exchange.
    fn reusable(&self) -> bool {
        !self.spoiled && matches!(self.request, Side::Done) && matches!(self.response, Side::Done)
    }

    /// The error to give for a failed read or write: [`Stale`] if the
    /// socket came from the pool and nothing of a response came yet.
    fn failed(&mut self, e: io::Error) -> io::Error {
        self.spoiled = true;
        if self.pooled && !self.answered {
            io::Error::new(e.kind(), Stale)
        } else {
            e
        }
    }
}

/// A whole request head at the start of `head`: its length, whether it is
/// `HEAD`, and where its body ends. `Err` for one the watcher cannot follow.
fn request_head(head: &[u8]) -> Result<Option<(usize, bool, Side)>, ()> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut slots);
    let consumed = match parsed.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(()),
    };
    let mut length = None;
    let mut chunked = false;
    for h in parsed.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
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
    Ok(Some((consumed, parsed.method == Some("HEAD"), body)))
}

/// A whole response head at the start of `head`, judged by the rules: its
/// length, what follows it (the next head after a 1xx), and whether the
/// socket may not be kept after it. `Err` for a head the rules refuse.
fn response_head(head: &[u8], head_request: bool) -> Result<Option<(usize, Side, bool)>, Refused> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut slots);
    // The same leniency as Pingora's client, so both read a head alike.
    let mut config = httparse::ParserConfig::default();
    config.allow_spaces_after_header_name_in_responses(true);
    config.allow_obsolete_multiline_headers_in_responses(true);
    let consumed = match config.parse_response(&mut parsed, head) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        // Not HTTP: Pingora's client refuses it itself, with the same 502.
        Err(_) => return Ok(Some((head.len(), Side::Done, true))),
    };
    let Some(status) = parsed.code else {
        return Ok(Some((head.len(), Side::Done, true)));
    };
    // Whether a 101 was asked for is the proxy's to judge (it refuses one
    // that was not); here a 101 only means a tunnel, never kept.
    let judged = shape(
        status,
        parsed.version == Some(1),
        head_request,
        true,
        parsed.headers.iter().map(|h| (h.name.as_bytes(), h.value)),
    )
    .map_err(|refusal| Refused(refusal.message()))?;
    Ok(Some(match judged.body {
        _ if judged.interim => (consumed, Side::Head(Vec::new()), false),
        Body::Empty => (consumed, Side::Done, judged.upstream_close),
        Body::Length(0) => (consumed, Side::Done, judged.upstream_close),
        Body::Length(n) => (consumed, Side::Length(n), judged.upstream_close),
        Body::Chunked => (
            consumed,
            Side::Chunked(ChunkedEnd::default()),
            judged.upstream_close,
        ),
        Body::UntilClose | Body::Tunnel => (consumed, Side::Done, true),
    }))
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match this.conn().poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(this.failed(e))),
            Poll::Pending => return Poll::Pending,
        }
        let read = &buf.filled()[before..];
        if read.is_empty() {
            // EOF. Before any answer on a socket from the pool: stale.
            if this.pooled && !this.answered && !matches!(this.response, Side::Done) {
                let stale = io::Error::new(io::ErrorKind::UnexpectedEof, Stale);
                return Poll::Ready(Err(this.failed(stale)));
            }
            this.spoiled = true;
            return Poll::Ready(Ok(()));
        }
        this.answered = true;
        if let Err(refused) = this.read(read) {
            this.spoiled = true;
            buf.set_filled(before);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, refused)));
        }
        this.settle();
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
                this.wrote(&buf[..n]);
                this.settle();
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
        self.spoiled = true;
        self.conn().poll_shutdown(cx)
    }
}

impl VirtualSocket for Watched {
    fn set_socket_option(&self, opt: VirtualSockOpt) -> io::Result<()> {
        let Some(conn) = &self.conn else {
            return Ok(());
        };
        match opt {
            VirtualSockOpt::NoDelay => conn.set_nodelay(true),
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

impl Drop for Watched {
    fn drop(&mut self) {
        if self.reusable() {
            if let (Some(conn), Some(ended)) = (self.conn.take(), self.ended) {
                self.pool.put_idle_since(conn, ended);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched() -> Watched {
        Watched {
            conn: None,
            pool: Arc::new(Pool::new(
                "127.0.0.1:1".parse().unwrap(),
                Duration::from_secs(1),
                Duration::from_secs(1),
            )),
            pooled: false,
            request: Side::Head(Vec::new()),
            response: Side::Head(Vec::new()),
            head_request: false,
            answered: false,
            spoiled: false,
            ended: None,
        }
    }

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
            assert!(!w.reusable(), "cut {cut}");
            w.read(&response[cut..]).unwrap();
            assert!(w.reusable(), "cut {cut}");
        }
    }

    #[test]
    fn both_framing_headers_are_refused() {
        let mut w = watched();
        w.wrote(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let refused = w.read(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        );
        assert!(refused.is_err());
    }

    #[test]
    fn bytes_past_the_response_or_a_body_on_head_spoil_the_socket() {
        let mut w = watched();
        w.wrote(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        w.read(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiX")
            .unwrap();
        assert!(!w.reusable());

        let mut w = watched();
        w.wrote(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
        w.read(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
            .unwrap();
        assert!(w.reusable());
        w.read(b"hi").unwrap();
        assert!(!w.reusable());
    }

    #[test]
    fn a_request_body_not_yet_written_keeps_the_socket_from_the_pool() {
        let mut w = watched();
        w.wrote(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
        w.read(b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        assert!(!w.reusable());
        w.wrote(b"lo\r\n0\r\n\r\n");
        assert!(w.reusable());
    }

    #[test]
    fn close_tunnels_and_bodies_until_close_are_never_kept() {
        for response in [
            &b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"[..],
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        ] {
            let mut w = watched();
            w.wrote(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            w.read(response).unwrap();
            assert!(!w.reusable(), "{:?}", String::from_utf8_lossy(response));
        }
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
