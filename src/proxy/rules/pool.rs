//! Kept-alive upstream connections, and the distrust they deserve.
//!
//! An idle upstream connection has nothing to say until it is sent a
//! request. One that has bytes waiting (a late second response, a body sent
//! after a HEAD, 204 or 304 answer, bytes past `Content-Length`) or that
//! the upstream closed would hand those bytes, or a failure, to whoever is
//! served next. So [`Pool::take`] asks the kernel before reuse, with one
//! non-blocking `recv(MSG_PEEK)`: `WouldBlock` is the only answer that
//! keeps a connection. That costs one system call per reuse, where Pingora's
//! pool keeps a task per idle connection watching it; the measured cost is
//! in the README's performance section.
//!
//! Connections go back only after a response that ended exactly where its
//! framing said, with nothing read past it: the lane's relay
//! (`crate::proxy::lane`) and the Pingora path's watched connections
//! (`crate::proxy::watched`) both keep that rule, and share the pools
//! ([`Pool::shared`]), one per upstream address and timeouts for the whole
//! process: a connection one path kept, the other may reuse, and a config
//! reload keeps them. [`sweep`] closes, once a second, the idle ones that
//! are too old or that the upstream closed, so that an address that no
//! longer gets requests does not hold sockets the upstream has let go.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::proxy::rules::failure::Failure;

/// How long an idle upstream connection stays in the pool: upstreams
/// commonly close idle connections after 60 s or more.
pub const UPSTREAM_IDLE: Duration = Duration::from_secs(55);

/// Idle connections kept per upstream.
const POOL_SIZE: usize = 128;

/// One upstream's kept-alive connections.
#[derive(Debug)]
pub struct Pool {
    pub addr: SocketAddr,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    /// Oldest first; taken from the end.
    idle: Mutex<Vec<(TcpStream, Instant)>>,
}

/// Pools are shared by upstream address and timeouts.
type Key = (SocketAddr, Duration, Duration);

fn pools() -> &'static Mutex<HashMap<Key, Arc<Pool>>> {
    static POOLS: OnceLock<Mutex<HashMap<Key, Arc<Pool>>>> = OnceLock::new();
    POOLS.get_or_init(Default::default)
}

/// How often [`sweep`] runs.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Closes the idle connections that are too old or have something to say,
/// in every pool, and forgets the pools nobody uses that hold none. Run
/// every [`SWEEP_EVERY`] (`crate::proxy::routes::Maintenance`).
pub fn sweep() {
    // Each pool's idle connections are looked at outside every lock, so
    // that requests taking and keeping connections meanwhile never wait on
    // the sweep's system calls.
    let all: Vec<Arc<Pool>> = {
        let pools = pools().lock().unwrap_or_else(|e| e.into_inner());
        pools.values().cloned().collect()
    };
    for pool in &all {
        let mut idle = std::mem::take(&mut *pool.idle.lock().unwrap_or_else(|e| e.into_inner()));
        idle.retain(|(conn, since)| since.elapsed() < UPSTREAM_IDLE && is_quiet(conn));
        if !idle.is_empty() {
            let mut now = pool.idle.lock().unwrap_or_else(|e| e.into_inner());
            // Those kept meanwhile are newer: they stay at the end.
            idle.append(&mut now);
            idle.truncate(POOL_SIZE);
            *now = idle;
        }
    }
    drop(all);
    let mut pools = pools().lock().unwrap_or_else(|e| e.into_inner());
    pools.retain(|_, pool| {
        Arc::strong_count(pool) > 1
            || !pool
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
    });
}

impl Pool {
    /// The process's pool for `addr` with these timeouts.
    pub fn shared(
        addr: SocketAddr,
        connect_timeout: Duration,
        read_timeout: Duration,
    ) -> Arc<Pool> {
        let mut pools = pools().lock().unwrap_or_else(|e| e.into_inner());
        pools
            .entry((addr, connect_timeout, read_timeout))
            .or_insert_with(|| Arc::new(Pool::new(addr, connect_timeout, read_timeout)))
            .clone()
    }

    pub fn new(addr: SocketAddr, connect_timeout: Duration, read_timeout: Duration) -> Pool {
        Pool {
            addr,
            connect_timeout,
            read_timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The most recently used idle connection that is young enough and has
    /// nothing waiting on it. Others found on the way are closed.
    pub fn take(&self) -> Option<TcpStream> {
        loop {
            let (conn, since) = {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                let newest = idle.pop()?;
                if newest.1.elapsed() >= UPSTREAM_IDLE {
                    // The rest are older still.
                    idle.clear();
                    return None;
                }
                newest
            };
            debug_assert!(since.elapsed() < UPSTREAM_IDLE);
            if is_quiet(&conn) {
                return Some(conn);
            }
        }
    }

    /// Keeps a connection whose last response ended exactly.
    pub fn put(&self, conn: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < POOL_SIZE {
            idle.push((conn, Instant::now()));
        }
    }

    /// Keeps a connection whose last response ended exactly at `since`.
    pub fn put_idle_since(&self, conn: TcpStream, since: Instant) {
        if since.elapsed() >= UPSTREAM_IDLE {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < POOL_SIZE {
            // Oldest first, as `take` expects.
            let at = idle.partition_point(|(_, t)| *t <= since);
            idle.insert(at, (conn, since));
        }
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
    async fn a_quiet_connection_is_reused() {
        let (conn, _server) = pair().await;
        let pool = pool();
        pool.put(conn);
        assert!(pool.take().is_some());
        assert!(pool.take().is_none());
    }

    #[tokio::test]
    async fn a_connection_with_unread_bytes_is_closed_not_reused() {
        let (conn, mut server) = pair().await;
        let pool = pool();
        pool.put(conn);
        server
            .write_all(b"HTTP/1.1 302 Found\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(pool.take().is_none());
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_is_not_reused() {
        let (conn, server) = pair().await;
        let pool = pool();
        pool.put(conn);
        drop(server);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(pool.take().is_none());
    }

    #[tokio::test]
    async fn a_bad_connection_does_not_hide_a_good_one_behind_it() {
        let (good, _keep) = pair().await;
        let (bad, server) = pair().await;
        let pool = pool();
        pool.put(good);
        pool.put(bad);
        drop(server);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(pool.take().is_some());
    }

    #[tokio::test]
    async fn a_sweep_closes_the_idle_connections_the_upstream_closed() {
        let (good, _keep) = pair().await;
        let (bad, server) = pair().await;
        // A pool of its own: the key is this test's upstream address.
        let pool = Pool::shared(
            server.local_addr().unwrap(),
            Duration::from_millis(1234),
            Duration::from_secs(1),
        );
        pool.put(good);
        pool.put(bad);
        drop(server);
        tokio::time::sleep(Duration::from_millis(50)).await;
        sweep();
        assert_eq!(pool.idle.lock().unwrap().len(), 1);
        // Kept while someone holds it; forgotten once nobody does and it
        // holds nothing.
        let key = (pool.addr, pool.connect_timeout, pool.read_timeout);
        assert!(pool.take().is_some());
        drop(pool);
        sweep();
        assert!(!pools().lock().unwrap().contains_key(&key));
    }
}
