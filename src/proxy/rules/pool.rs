//! Kept-alive upstream connections, and the distrust they deserve.
//!
//! An idle upstream connection has nothing to say until it is sent a
//! request. One that has bytes waiting (a late second response, a body sent
//! after a HEAD, 204 or 304 answer, bytes past `Content-Length`) or that
//! the upstream closed would hand those bytes, or a failure, to whoever is
//! served next. So a kept connection is asked before reuse, with one
//! non-blocking `recv(MSG_PEEK)`: `WouldBlock` is the only answer that
//! keeps it. That costs one system call per reuse, where Pingora's pool
//! keeps a task per idle connection watching it.
//!
//! Connections go back only after a response that ended exactly where its
//! framing said, with nothing read past it: the lane's relay
//! (`crate::proxy::lane`) and the Pingora path's watched connections
//! (`crate::proxy::watched`) both keep that rule.
//!
//! **Whose they are.** A kept connection is its client connection's
//! ([`Kept`]), never another's: it is reused for the same client's next
//! requests, on either HTTP path, and closed when that client's connection
//! ends. No check can make sharing safe. An upstream that slips in one
//! unrequested response while a request is on its way is a response ahead
//! from then on: the slipped-in bytes read as the answer, and the real
//! answer arrives a moment after the connection was given back, too late
//! for any look at the socket. HTTP/1.1 has no way to tell the two apart.
//! Shared, such a connection handed one user's answer to the next client
//! (measured: every try on loopback, both paths); kept by its client, a
//! confused upstream can only confuse the answers of the client that was
//! talking to it. The cost is one upstream connection per client connection
//! that makes protected requests, where a shared pool could serve several
//! one-request clients with one (HAProxy's `http-reuse never` makes the same
//! trade; the operations guide sizes it).
//!
//! A client connection's [`Kept`] is found through the task that serves
//! it: an HTTP/1 connection is served by one task from its accept to its
//! end (`crate::proxy::connections`), which runs under [`for_client`]; an
//! HTTP/2 connection's streams are served on tasks of Pingora's, and find
//! theirs by the connection's socket ([`for_connection`]).

use std::collections::HashMap;
use std::future::Future;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use pingora::protocols::SocketDigest;
use tokio::net::TcpStream;

use crate::proxy::rules::failure::Failure;

/// How long an idle upstream connection is kept: upstreams commonly close
/// idle connections after 60 s or more.
pub const UPSTREAM_IDLE: Duration = Duration::from_secs(55);

/// Idle upstream connections one client connection keeps. An HTTP/1
/// client has one request in flight, so one per upstream address it uses;
/// an HTTP/2 client, one per stream it runs at once, up to this many.
const KEPT_PER_CLIENT: usize = 32;

/// One upstream address and the timeouts of the connections made to it.
#[derive(Debug)]
pub struct Pool {
    pub addr: SocketAddr,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
}

/// Connections are reused only for the same address and timeouts.
type Key = (SocketAddr, Duration, Duration);

/// The idle upstream connections of one client connection.
#[derive(Debug)]
pub struct Kept {
    /// Tells one client's connections from every other's, as Pingora's
    /// pool key for TLS upstreams (`HttpPeer::group_key`).
    pub id: u64,
    /// Oldest first; taken from the end.
    idle: Mutex<Vec<Idle>>,
}

#[derive(Debug)]
struct Idle {
    key: Key,
    conn: TcpStream,
    since: Instant,
}

tokio::task_local! {
    /// The client connection this task serves.
    static CLIENT: Arc<Kept>;
}

/// Runs `serve`, a task's service of one client connection, with that
/// connection's [`Kept`]: every upstream connection kept while it runs is
/// its client's, and closed when `serve` ends. Not an `async fn`: one would
/// hold `serve` twice (its argument, and the scope it moves it into), and
/// every connection's future, idle or not, with it (8 KB measured).
pub fn for_client<F: Future>(serve: F) -> impl Future<Output = F::Output> {
    CLIENT.scope(Arc::new(Kept::new()), serve)
}

/// The client connection the running task serves, if any.
pub fn this_client() -> Option<Arc<Kept>> {
    CLIENT.try_with(Arc::clone).ok()
}

/// HTTP/2 connections' [`Kept`], by the address of their socket's digest,
/// which one allocation holds for the connection's life: the `Weak` keeps
/// the address from being reused while the entry is here, and [`sweep`]
/// removes the entries of connections that ended.
type ByConnection = HashMap<usize, (Weak<SocketDigest>, Arc<Kept>)>;

fn by_connection() -> &'static Mutex<ByConnection> {
    static BY_CONNECTION: OnceLock<Mutex<ByConnection>> = OnceLock::new();
    BY_CONNECTION.get_or_init(Default::default)
}

/// The [`Kept`] of the connection whose socket `digest` describes (an
/// HTTP/2 stream's, served on a task of Pingora's).
pub fn for_connection(digest: &Arc<SocketDigest>) -> Arc<Kept> {
    let key = Arc::as_ptr(digest) as usize;
    let mut all = by_connection().lock().unwrap_or_else(|e| e.into_inner());
    let entry = all
        .entry(key)
        .or_insert_with(|| (Arc::downgrade(digest), Arc::new(Kept::new())));
    entry.1.clone()
}

/// How often [`sweep`] runs.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Forgets the HTTP/2 connections that ended, closing the upstream
/// connections they kept. Run every [`SWEEP_EVERY`]
/// (`crate::proxy::routes::Maintenance`).
pub fn sweep() {
    let ended: Vec<Arc<Kept>> = {
        let mut all = by_connection().lock().unwrap_or_else(|e| e.into_inner());
        let mut ended = Vec::new();
        all.retain(|_, (digest, kept)| {
            let live = digest.strong_count() > 0;
            if !live {
                ended.push(kept.clone());
            }
            live
        });
        ended
    };
    // Closed outside the lock.
    drop(ended);
}

impl Kept {
    fn new() -> Kept {
        Kept {
            id: Kept::unique_id(),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An id no other client connection has or will have.
    pub fn unique_id() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// The most recently kept connection to `pool`'s address that is young
    /// enough and has nothing waiting on it. Others found on the way are
    /// closed.
    pub fn take(&self, pool: &Pool) -> Option<TcpStream> {
        let key = pool.key();
        loop {
            let found = {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                let at = idle.iter().rposition(|i| i.key == key)?;
                idle.remove(at)
            };
            if found.since.elapsed() < UPSTREAM_IDLE && is_quiet(&found.conn) {
                return Some(found.conn);
            }
        }
    }

    /// Keeps a connection to `pool`'s address whose last response ended
    /// exactly at `since`; past [`KEPT_PER_CLIENT`], the oldest is closed.
    pub fn put(&self, pool: &Pool, conn: TcpStream, since: Instant) {
        if since.elapsed() >= UPSTREAM_IDLE {
            return;
        }
        let closed = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            // Oldest first, as `take` expects.
            let at = idle.partition_point(|i| i.since <= since);
            idle.insert(
                at,
                Idle {
                    key: pool.key(),
                    conn,
                    since,
                },
            );
            (idle.len() > KEPT_PER_CLIENT).then(|| idle.remove(0))
        };
        drop(closed);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.idle.lock().unwrap().len()
    }
}

impl Pool {
    pub fn new(addr: SocketAddr, connect_timeout: Duration, read_timeout: Duration) -> Pool {
        Pool {
            addr,
            connect_timeout,
            read_timeout,
        }
    }

    fn key(&self) -> Key {
        (self.addr, self.connect_timeout, self.read_timeout)
    }

    /// A connection the running task's client kept, as [`Kept::take`].
    pub fn take(&self) -> Option<TcpStream> {
        CLIENT.try_with(|kept| kept.take(self)).ok().flatten()
    }

    /// Gives a connection whose last response just ended exactly to the
    /// running task's client; closed if the task serves none.
    pub fn put(&self, conn: TcpStream) {
        let _ = CLIENT.try_with(|kept| kept.put(self, conn, Instant::now()));
    }

    pub async fn connect(&self) -> Result<TcpStream, Failure> {
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

/// Whether an idle connection is still open with nothing to read.
fn is_quiet(conn: &TcpStream) -> bool {
    let mut byte = [MaybeUninit::<u8>::uninit(); 1];
    // The socket is non-blocking (tokio's), so this never waits: bytes,
    // EOF (Ok(0)) or an error all mean the connection must go.
    matches!(
        socket2::SockRef::from(conn).peek(&mut byte),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    fn pool() -> Pool {
        Pool::new(
            "127.0.0.1:1".parse().unwrap(),
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
    }

    #[tokio::test]
    async fn a_quiet_connection_is_reused_by_its_client() {
        let (conn, _server) = pair().await;
        let pool = pool();
        for_client(async {
            pool.put(conn);
            assert!(pool.take().is_some());
            assert!(pool.take().is_none());
        })
        .await;
    }

    #[tokio::test]
    async fn a_clients_connection_is_never_another_clients_and_ends_with_it() {
        let (conn, server) = pair().await;
        let pool = Arc::new(pool());
        let first = pool.clone();
        // Two client connections served at once, on two tasks.
        let (kept_by_first, other_took) = tokio::join!(
            for_client(async move {
                first.put(conn);
                tokio::time::sleep(Duration::from_millis(50)).await;
                this_client().unwrap().len()
            }),
            for_client(async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                pool.take().is_some()
            })
        );
        assert_eq!((kept_by_first, other_took), (1, false));
        // The first client's task ended: its upstream connection is closed.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut byte = [MaybeUninit::<u8>::uninit(); 1];
        assert!(matches!(
            socket2::SockRef::from(&server).peek(&mut byte),
            Ok(0)
        ));
        // Outside any client's task, nothing is kept.
        let (conn, _server) = pair().await;
        pool.put(conn);
        assert!(pool.take().is_none());
    }

    #[tokio::test]
    async fn a_connection_the_upstream_wrote_on_or_closed_is_not_reused() {
        let pool = pool();
        for closed in [false, true] {
            let (conn, mut server) = pair().await;
            let kept = Kept::new();
            kept.put(&pool, conn, Instant::now());
            if closed {
                drop(server);
            } else {
                server
                    .write_all(b"HTTP/1.1 302 Found\r\n\r\n")
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(kept.take(&pool).is_none(), "closed: {closed}");
        }
    }

    #[tokio::test]
    async fn a_bad_connection_does_not_hide_a_good_one_behind_it() {
        let (good, _keep) = pair().await;
        let (bad, server) = pair().await;
        let pool = pool();
        let kept = Kept::new();
        kept.put(&pool, good, Instant::now());
        kept.put(&pool, bad, Instant::now());
        drop(server);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(kept.take(&pool).is_some());
    }

    #[tokio::test]
    async fn connections_are_reused_only_for_their_own_address_and_timeouts() {
        let (conn, _server) = pair().await;
        let kept = Kept::new();
        kept.put(&pool(), conn, Instant::now());
        let slower = Pool::new(pool().addr, Duration::from_secs(1), Duration::from_secs(2));
        assert!(kept.take(&slower).is_none());
        assert!(kept.take(&pool()).is_some());
    }

    #[tokio::test]
    async fn one_client_keeps_a_bounded_number_the_oldest_closed_first() {
        let pool = pool();
        let kept = Kept::new();
        let mut servers = Vec::new();
        for _ in 0..KEPT_PER_CLIENT + 3 {
            let (conn, server) = pair().await;
            kept.put(&pool, conn, Instant::now());
            servers.push(server);
        }
        assert_eq!(kept.len(), KEPT_PER_CLIENT);
        // The first three were closed: their upstream sides read EOF.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let closed = servers
            .iter()
            .map(|s| {
                let mut byte = [MaybeUninit::<u8>::uninit(); 1];
                matches!(socket2::SockRef::from(s).peek(&mut byte), Ok(0))
            })
            .collect::<Vec<_>>();
        assert_eq!(closed.iter().filter(|c| **c).count(), 3, "{closed:?}");
        assert!(closed[..3].iter().all(|c| *c));
    }

    #[tokio::test]
    async fn an_http2_connections_streams_share_its_kept_until_it_ends() {
        let (socket, _server) = pair().await;
        let digest = Arc::new(SocketDigest::from_raw_fd(std::os::fd::AsRawFd::as_raw_fd(
            &socket,
        )));
        let one = for_connection(&digest);
        assert!(Arc::ptr_eq(&one, &for_connection(&digest)));
        let other = Arc::new(SocketDigest::from_raw_fd(0));
        assert!(!Arc::ptr_eq(&one, &for_connection(&other)));
        let weak = Arc::downgrade(&one);
        drop(one);
        sweep();
        assert!(
            weak.upgrade().is_some(),
            "forgotten while the connection lives"
        );
        drop(digest);
        sweep();
        assert!(weak.upgrade().is_none(), "kept after the connection ended");
    }
}
