//! Per-connection limits around the proxy: a cap on open connections and a
//! deadline for each request header.
//!
//! Pingora's HTTP/1 reader times out each read on its own (60 s), so a
//! client that sends one header byte a minute (slowloris) could hold a
//! connection forever. [`Guarded`] wraps the proxy's connection loop:
//! - each request header must arrive whole within `client-header-timeout-ms`
//!   of the moment the connection is ready for it (accept, or the end of the
//!   previous reply), or the connection is closed; the same deadline bounds
//!   an idle keep-alive connection;
//! - past `max-connections` open connections, a new one gets a 503 and is
//!   closed without being read.
//!
//! The proxy marks "header read" from `Gate::new_ctx`, which Pingora calls
//! right after parsing a request header, through a task-local flag: the
//! request runs in the same task as this loop.
//!
//! Each request is first offered to the direct lane (`super::lane`), which
//! serves the protected routes' plain requests itself; what it does not take
//! is put back in front of the stream, unconsumed, for the Pingora proxy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::BytesMut;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::l4::stream::Stream as TcpStream;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use prometheus::IntGauge;
use tokio::io::AsyncWriteExt;

use super::lane::{DirectLane, Lane};

tokio::task_local! {
    /// Set once the current connection's request header has been read.
    static HEADER_READ: Arc<AtomicBool>;
}

/// Called by the proxy when a request header has been read.
pub fn header_read() {
    // Outside a guarded connection (unit tests) there is nothing to mark.
    let _ = HEADER_READ.try_with(|flag| flag.store(true, Ordering::Relaxed));
}

/// The limits, from the config.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

/// The proxy application with connection limits in front.
pub struct Guarded<A> {
    inner: Arc<A>,
    limits: Limits,
    /// The open-connection count, kept in the metric that exports it.
    open: IntGauge,
    direct: Option<DirectLane>,
}

impl<A> Guarded<A> {
    pub fn new(inner: A, limits: Limits, open: IntGauge, direct: Option<DirectLane>) -> Guarded<A> {
        Guarded {
            inner: Arc::new(inner),
            limits,
            open,
            direct,
        }
    }
}

/// Puts bytes read by the direct lane back in front of the stream, for the
/// proxy to read. `None` if the stream is not a plain TCP one (the lane is
/// only used on those, so this does not happen).
fn unread(stream: Stream, bytes: &[u8]) -> Option<Stream> {
    if bytes.is_empty() {
        return Some(stream);
    }
    let mut tcp = stream.into_any().downcast::<TcpStream>().ok()?;
    tcp.rewind(bytes);
    Some(tcp)
}

/// One open connection; dropping it takes it off the count.
struct Open(IntGauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The 503 for a connection past the cap, built once (with its length
/// computed, not counted by hand).
static OVER_CAPACITY: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let body =
        r#"{"error":"too_many_connections","message":"The server has too many open connections."}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nRetry-After: 1\r\nCache-Control: no-store\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
});

/// Answers 503 without reading the request, then closes gently: closing a
/// socket with unread input makes the kernel send a reset, which can destroy
/// the reply before the client reads it. So the write side is shut first and
/// what the client sent is drained briefly (nginx's "lingering close").
async fn refuse(stream: &mut Stream) {
    use tokio::io::AsyncReadExt;
    if stream.write_all(&OVER_CAPACITY).await.is_err() {
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

/// How long a refused connection is drained before it is closed.
const LINGER: Duration = Duration::from_millis(200);

#[async_trait]
impl<A> ServerApp for Guarded<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        self.open.inc();
        let _open = Open(self.open.clone());
        if self.open.get() as usize > self.limits.max_connections {
            refuse(&mut stream).await;
            return None;
        }

        let flag = Arc::new(AtomicBool::new(false));
        let mut stream = stream;
        let mut settings = None;
        let mut shutdown_rx = shutdown.clone();
        let direct = self
            .direct
            .as_ref()
            .filter(|_| stream.as_any().is::<TcpStream>());
        let peer = direct.map(|lane| lane.peer(&stream));
        // Bytes the direct lane read past a request (a pipelined next one).
        let mut pending = BytesMut::new();
        loop {
            let deadline = Instant::now() + self.limits.header_timeout;
            // Wait for the next request's first byte holding nothing but the
            // socket: Pingora's per-request state (tens of KB) is only built
            // once there is something to read, so idle keep-alive
            // connections stay cheap.
            if pending.is_empty() {
                pending = BytesMut::new();
                let mut first = [0u8; 1];
                tokio::select! {
                    ready = pingora::time::timeout(self.limits.header_timeout, stream.try_peek(&mut first)) => {
                        if !matches!(ready, Ok(Ok(_))) {
                            return None;
                        }
                    }
                    _ = shutdown_rx.changed() => return None,
                }
            }
            if let (Some(lane), Some(peer)) = (direct, peer) {
                let closing = *shutdown.borrow();
                match lane
                    .serve(&mut stream, &mut pending, deadline, closing, peer)
                    .await
                {
                    Lane::Served => continue,
                    Lane::Closed => return None,
                    Lane::Pass => {
                        stream = unread(stream, &pending)?;
                        pending.clear();
                    }
                }
            }
            let mut session = ServerSession::new_http1(stream);
            if let Some(settings) = settings.take() {
                HttpPersistentSettings::apply_to_session(settings, &mut session);
            }
            if *shutdown.borrow() {
                session.set_keepalive(None);
            } else {
                // Pingora's per-read idle limit; the whole-header deadline
                // below is the one that matters.
                session.set_keepalive(Some(self.limits.header_timeout.as_secs().max(1)));
            }
            flag.store(false, Ordering::Relaxed);
            let request =
                HEADER_READ.scope(flag.clone(), self.inner.process_new_http(session, shutdown));
            tokio::pin!(request);
            let remaining = deadline.saturating_duration_since(Instant::now());
            let reused = tokio::select! {
                reused = &mut request => reused,
                // Pingora's coarse timer wheel: far cheaper per request than
                // a tokio timer, and 10 ms of precision is plenty here.
                _ = pingora::time::sleep(remaining) => {
                    if !flag.load(Ordering::Relaxed) {
                        // No whole header in time: drop the request, which
                        // closes the connection.
                        return None;
                    }
                    request.await
                }
            };
            (stream, settings) = reused?.consume();
        }
    }

    async fn cleanup(&self) {
        self.inner.http_cleanup().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_over_capacity_reply_is_well_formed() {
        let text = std::str::from_utf8(&OVER_CAPACITY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"], "too_many_connections");
    }
}
