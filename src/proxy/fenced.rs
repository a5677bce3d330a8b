//! A client connection lent to the Pingora proxy for one request, fenced at
//! that request's end, so that pipelined requests are served in turn on
//! both HTTP paths.
//!
//! Pingora reads a client connection as it likes. A next request that came
//! in the same read as a head is to it bytes past a body, and it closes the
//! connection after the answer; one that arrives while the answer is on its
//! way fails the request in flight ("sent data after end of body", a 400 to
//! a request the upstream may already have acted on). Which of the two a
//! client got depended on how its bytes were split. The direct lane reads a
//! head and no further, and serves what follows once its answer is out, as
//! nginx does (RFC 9112 §9.3.2).
//!
//! [`Fenced`] gives the proxy path the same behaviour: Pingora is handed the
//! bytes of one request (its head, and its body: as long as its one
//! `Content-Length` says, or up to the end of its chunked framing, found
//! with the scanner both paths use for upstream bodies) and no more; what
//! the client sends past them is held, unseen by Pingora, for the
//! connection loop to serve next. A request whose end cannot be known
//! (an `Upgrade`, whose connection may become a tunnel; `CONNECT`; framing
//! Pingora refuses) is not fenced: Pingora reads it as it would.
//! Written here because Pingora keeps what it reads past a request to itself
//! (it has no getter for a session's pipelined bytes).
//!
//! A lent connection also gathers Pingora's writes until it flushes: the
//! client's stream has no write buffer of its own (an idle connection holds
//! none, `super::listener`), and Pingora writes a reply's head, its body and
//! each chunk's framing apart, then flushes.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use futures::FutureExt;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::SslDigest;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::head::MAX_REQUEST_HEAD_BYTES;
use super::rules::chunked::{ChunkedEnd, Malformed};
use super::rules::request::{self, Body};

/// How much a client may send past the fenced request before it is read no
/// further until the answer is out: a next head of the longest size taken.
const HOLD_BYTES: usize = MAX_REQUEST_HEAD_BYTES + 4096;

/// How much of Pingora's writing is gathered before it goes out: what
/// Pingora's own stream buffers (a TCP segment's payload).
const GATHER_BYTES: usize = pingora::protocols::l4::stream::DEFAULT_L4_WRITE_BUFFER_SIZE;

/// Header slots for finding a request's length: as many as Pingora parses.
const SLOTS: usize = 256;

/// Where a request ends, as its head tells.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// After so many bytes (the head and a body of known length).
    At(usize),
    /// At the end of a chunked body that starts after so many bytes.
    Chunked(usize),
}

/// Where the request at the start of `buf` ends, counted from the start of
/// `buf`: its head, then its body as the shared request rules read its
/// framing (`rules::request::check`, which the proxy path applies to the
/// same head). `None` for a request whose end is not known: an `Upgrade`
/// (its connection may become a tunnel), `CONNECT`, a head the parser or
/// the rules refuse (answered 400 and closed). Pingora reads such a request
/// unfenced.
pub fn request_end(buf: &[u8]) -> Option<End> {
    let mut slots = [httparse::EMPTY_HEADER; SLOTS];
    let mut request = httparse::Request::new(&mut slots);
    let head = match request.parse(buf) {
        Ok(httparse::Status::Complete(head)) => head,
        _ => return None,
    };
    if request.method == Some("CONNECT") {
        return None;
    }
    let fields = request.headers.iter().map(|h| (h.name.as_bytes(), h.value));
    let shape = request::check(request.version == Some(1), fields).ok()?;
    if shape.upgrade {
        return None;
    }
    match shape.body {
        Body::None => Some(End::At(head)),
        Body::Length(length) => head.checked_add(length).map(End::At),
        Body::Chunked => Some(End::Chunked(head)),
    }
}

/// How far the request still goes.
#[derive(Debug)]
enum Fence {
    /// So many bytes; at 0, what comes is held.
    Length(usize),
    /// To the end of a chunked body.
    Chunked(ChunkedEnd),
    /// Nowhere: everything is passed on (the replayed HTTP/2 preface).
    Open,
    /// A chunked body the scanner refused: Pingora has had the bytes before
    /// the refused one and a line end its parser refuses too (see
    /// [`REFUSED`]); from here the client's bytes end.
    Refused,
}

/// What Pingora is given in place of the byte the scanner refused: a CR
/// and a second CR where only LF may follow. Its chunk parser refuses that
/// in every state of a chunked body (a size line, the CRLF after data, the
/// trailer), so the request is its 400, as the proxy answers a framing
/// error. Pingora alone took a chunk-size line over 8 KiB when the line
/// came in one read and refused it in pieces: the client's answer
/// depended on how its bytes were split. Bytes instead of an I/O error,
/// because Pingora answers a failed read with nothing.
const REFUSED: &[u8] = b"\r\r";

/// A client connection that yields the rest of one request and holds what
/// comes after it.
pub struct Fenced {
    /// The client's stream: taken only by [`Fenced::into_parts`], which
    /// ends the wrapper.
    inner: Option<Stream>,
    /// Bytes read before the stream was lent, given first (see
    /// [`replaying`]).
    first: BytesMut,
    /// Where the request ends, from here.
    fence: Fence,
    /// What the client sent past the request, in order.
    held: BytesMut,
    /// Pingora's writes not yet sent, up to [`GATHER_BYTES`].
    gathered: BytesMut,
}

impl Fenced {
    /// `inner` lent up to `fence`, with `first` (read from it already)
    /// given first, and `held` already read past the request.
    fn lent(inner: Stream, first: BytesMut, fence: Fence, held: BytesMut) -> Stream {
        Box::new(Fenced {
            inner: Some(inner),
            first,
            fence,
            held,
            gathered: BytesMut::new(),
        })
    }

    /// The connection, and what was read past the request. Pingora flushes
    /// a reply before it gives the connection back, and the connection loop
    /// flushes it again, so nothing gathered is left.
    pub fn into_parts(mut self) -> (Stream, BytesMut) {
        let held = std::mem::take(&mut self.held);
        match self.inner.take() {
            Some(inner) => (inner, held),
            None => unreachable!("only this takes the stream, and it ends the wrapper"),
        }
    }

    /// The client's stream.
    fn stream(&self) -> &Stream {
        match &self.inner {
            Some(inner) => inner,
            None => unreachable!("only `into_parts` takes the stream, and it ends the wrapper"),
        }
    }

    fn stream_mut(&mut self) -> &mut Stream {
        present(&mut self.inner)
    }

    /// Sends what is gathered.
    fn send_gathered(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.gathered.is_empty() {
            let Some(inner) = &mut self.inner else {
                return Poll::Ready(Ok(()));
            };
            let sent = ready!(Pin::new(inner).poll_write(cx, &self.gathered))?;
            if sent == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            bytes::Buf::advance(&mut self.gathered, sent);
        }
        Poll::Ready(Ok(()))
    }

    /// Reads past the fence into `held` until the connection has nothing
    /// more, or `held` is full. Pingora sees none of it: its wait for the
    /// client's next byte while a request is in flight stays pending, as it
    /// does on a connection where the client sent nothing.
    ///
    /// The end of the client's sending is not passed on either: the lane
    /// does not read the client while its answer is on the way, and a
    /// client that half-closes after its request gets the answer on both
    /// paths (waitgate does not abort an exchange on it, RFC 9112 §9.6),
    /// so Pingora seeing it changed only its answer's `Connection` header.
    /// The loop finds the end once the answer is out, after serving what is
    /// held.
    fn hold(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut chunk = [0u8; 4096];
        while self.held.len() < HOLD_BYTES {
            let room = (HOLD_BYTES - self.held.len()).min(chunk.len());
            let mut read = ReadBuf::new(&mut chunk[..room]);
            ready!(Pin::new(self.stream_mut()).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                return Poll::Pending;
            }
            self.held.extend_from_slice(read.filled());
        }
        Poll::Pending
    }
}

impl AsyncRead for Fenced {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.first.is_empty() {
            let n = this.first.len().min(buf.remaining());
            buf.put_slice(&this.first.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let allowed = match &mut this.fence {
            Fence::Length(0) => return this.hold(cx),
            Fence::Length(allowed) => allowed,
            Fence::Open => return Pin::new(present(&mut this.inner)).poll_read(cx, buf),
            Fence::Refused => return Poll::Ready(Ok(())),
            Fence::Chunked(scanner) => {
                let before = buf.filled().len();
                ready!(Pin::new(present(&mut this.inner)).poll_read(cx, buf))?;
                match scanner.scan(&buf.filled()[before..]) {
                    Ok(None) => {}
                    Ok(Some(n)) => {
                        // The body ended inside this read: what follows it
                        // is taken back from Pingora's buffer.
                        let end = before + n;
                        this.held.extend_from_slice(&buf.filled()[end..]);
                        buf.set_filled(end);
                        this.fence = Fence::Length(0);
                    }
                    Err(Malformed { at }) => {
                        buf.set_filled(before + at);
                        this.first = BytesMut::from(REFUSED);
                        this.fence = Fence::Refused;
                        // At least the refused byte's room is free.
                        let n = this.first.len().min(buf.remaining());
                        buf.put_slice(&this.first.split_to(n));
                    }
                }
                return Poll::Ready(Ok(()));
            }
        };
        if *allowed >= buf.remaining() {
            let before = buf.filled().len();
            ready!(Pin::new(present(&mut this.inner)).poll_read(cx, buf))?;
            *allowed -= buf.filled().len() - before;
            return Poll::Ready(Ok(()));
        }
        // The request's last bytes: read no further than its end.
        let mut chunk = [0u8; 4096];
        let want = (*allowed).min(chunk.len());
        let mut read = ReadBuf::new(&mut chunk[..want]);
        ready!(Pin::new(present(&mut this.inner)).poll_read(cx, &mut read))?;
        *allowed -= read.filled().len();
        buf.put_slice(read.filled());
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Fenced {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    /// Pieces written together (a chunk's size line, its data and its
    /// CRLF; an HTTP/2 frame's header and payload) are gathered together
    /// when they fit, and otherwise go out in one vectored write after what
    /// was gathered: one syscall (one TLS record) as with a write buffer.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.gathered.len() + total > GATHER_BYTES {
            ready!(this.send_gathered(cx))?;
        }
        if total >= GATHER_BYTES {
            return Pin::new(present(&mut this.inner)).poll_write_vectored(cx, bufs);
        }
        for buf in bufs {
            this.gathered.extend_from_slice(buf);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.send_gathered(cx))?;
        Pin::new(self.stream_mut()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.send_gathered(cx))?;
        Pin::new(self.stream_mut()).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for Fenced {
    async fn shutdown(&mut self) {
        // What is gathered goes first; if it cannot, the close says so.
        let _ = std::future::poll_fn(|cx| self.send_gathered(cx)).await;
        Shutdown::shutdown(&mut **self.stream_mut()).await
    }
}

impl UniqueID for Fenced {
    fn id(&self) -> UniqueIDType {
        self.stream().id()
    }
}

impl Ssl for Fenced {
    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.stream().get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.stream().selected_alpn_proto()
    }
}

impl GetTimingDigest for Fenced {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.stream().get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.stream().get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.stream().get_write_pending_time()
    }
}

impl GetProxyDigest for Fenced {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.stream().get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.stream_mut().set_proxy_digest(digest)
    }
}

impl GetSocketDigest for Fenced {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.stream().get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.stream_mut().set_socket_digest(digest)
    }
}

/// A [`Fenced`]'s stream, borrowed apart from its other fields.
fn present(inner: &mut Option<Stream>) -> &mut Stream {
    match inner {
        Some(inner) => inner,
        None => unreachable!("only `into_parts` takes the stream, and it ends the wrapper"),
    }
}

/// What Pingora wrote and never flushed still goes, as far as the socket
/// takes it at once: Pingora drops a connection whose reply failed part
/// way (an upstream that closed mid-body) without a flush, and its own
/// stream's buffer is sent the same way when dropped, so the client gets
/// what was relayed before the failure on either path.
impl Drop for Fenced {
    fn drop(&mut self) {
        if !self.gathered.is_empty() {
            let _ = std::future::poll_fn(|cx| self.send_gathered(cx)).now_or_never();
        }
    }
}

/// Peeking is not offered: what Pingora may see is only what it reads.
impl Peek for Fenced {}

impl fmt::Debug for Fenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fenced")
            .field("inner", &self.inner)
            .field("fence", &self.fence)
            .field("held", &self.held.len())
            .finish()
    }
}

/// Lends `stream` to the proxy for the request at the start of `pending`:
/// the stream to give Pingora, and the bytes to give it first (the request
/// as far as it was read). What follows the request stays with the stream,
/// to be taken back with [`take_back`].
pub fn lend(stream: Stream, pending: &mut BytesMut) -> (Stream, BytesMut) {
    let end = match request_end(pending) {
        Some(End::At(end)) => end,
        Some(End::Chunked(head)) => {
            let mut scanner = ChunkedEnd::default();
            match scanner.scan(&pending[head..]) {
                Ok(Some(n)) => head + n,
                Ok(None) => {
                    let first = std::mem::take(pending);
                    let fence = Fence::Chunked(scanner);
                    return (
                        Fenced::lent(stream, BytesMut::new(), fence, BytesMut::new()),
                        first,
                    );
                }
                Err(_) => return (replaying(stream, BytesMut::new()), std::mem::take(pending)),
            }
        }
        None => return (replaying(stream, BytesMut::new()), std::mem::take(pending)),
    };
    let first = pending.split_to(end.min(pending.len()));
    let allowed = end - first.len();
    let held = std::mem::take(pending);
    let fence = Fence::Length(allowed);
    (Fenced::lent(stream, BytesMut::new(), fence, held), first)
}

/// `stream` with `first` (read from it already) put back in front, and
/// no fence, its writes gathered: for a request whose end is not known,
/// and for a connection lent for good (an HTTP/2 one, whose preface the
/// connection loop waited for).
pub fn replaying(stream: Stream, first: BytesMut) -> Stream {
    Fenced::lent(stream, first, Fence::Open, BytesMut::new())
}

/// The stream the proxy gave back, and what the client sent past the
/// request it was lent for.
pub fn take_back(stream: Stream) -> (Stream, BytesMut) {
    if !stream.as_any().is::<Fenced>() {
        return (stream, BytesMut::new());
    }
    match stream.into_any().downcast::<Fenced>() {
        Ok(fenced) => fenced.into_parts(),
        Err(_) => unreachable!("checked above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_ends_where_its_head_and_length_say() {
        let get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(request_end(get), Some(End::At(get.len())));
        let mut two = get.to_vec();
        two.extend_from_slice(get);
        assert_eq!(request_end(&two), Some(End::At(get.len())));
        let post = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhel";
        assert_eq!(request_end(post), Some(End::At(post.len() + 2)));
        let zeros = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0000000000000000000005\r\n\r\n";
        assert_eq!(request_end(zeros), Some(End::At(zeros.len() + 5)));
        let bare = b"GET / HTTP/1.1\nHost: a\n\nGET";
        assert_eq!(request_end(bare), Some(End::At(bare.len() - 3)));
        let chunked = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\n";
        assert_eq!(request_end(chunked), Some(End::Chunked(chunked.len() - 3)));
        let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..200 {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(request_end(&many), Some(End::At(many.len())));
    }

    #[test]
    fn a_request_whose_end_is_not_known_is_not_fenced() {
        let post = |fields: &str| format!("POST / HTTP/1.1\r\nHost: a\r\n{fields}\r\n\r\n");
        for (head, why) in [
            (
                post("Transfer-Encoding: gzip, chunked"),
                "a coding over chunked",
            ),
            (
                post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked"),
                "chunked twice",
            ),
            (
                post("Transfer-Encoding: chunked\r\nContent-Length: 5"),
                "both framings",
            ),
            (
                post("Content-Length: 5\r\nContent-Length: 5"),
                "two lengths",
            ),
            (post("Content-Length: +5"), "a signed length"),
            (post("Content-Length: 5,5"), "a list of lengths"),
            (
                post("Content-Length: 99999999999999999999"),
                "a length past 64 bits",
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
                    .into(),
                "an upgrade",
            ),
            (
                "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n".into(),
                "a tunnel",
            ),
            ("GET / HTTP/1.1\r\nHost: a\r\n".into(), "a head not ended"),
            (
                "GET /\x01 HTTP/1.1\r\n\r\n".into(),
                "a control byte in the target",
            ),
            // Refused by the request rules, answered 400 and closed.
            ("GET / HTTP/1.1\r\n\r\n".into(), "no Host"),
        ] {
            assert_eq!(request_end(head.as_bytes()), None, "{why}");
        }
    }
}
