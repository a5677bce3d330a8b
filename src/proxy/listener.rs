//! The proxy's accept loop: its listening sockets (`listen`, and
//! `listen-tls`, whose connections are accepted as plain TCP and given
//! their handshake by the connection loop), and one task per connection.
//!
//! Written here rather than taken from Pingora's listening service because
//! of what it costs an idle connection. Pingora's service spawns, for each
//! connection, a task whose future holds the state of a TLS handshake
//! whatever the listener, and boxes the connection's own loop apart from
//! it: 8.8 KB of each idle keep-alive connection's 19.7 KB (heaptrack,
//! docs/performance.md). Here a connection's task is its own loop alone.
//! The sockets are made as Pingora's are (`SO_REUSEADDR`, a backlog of
//! 65,535, `TCP_NODELAY` on each accepted connection, the socket digest
//! that gives the peer's address), and its graceful shutdown is honoured.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::{HttpServerApp, ServerApp};
use pingora::protocols::l4::stream::Stream as TcpStream;
use pingora::protocols::{GetSocketDigest, SocketDigest};
use pingora::server::{ListenFds, ShutdownWatch};
use pingora::services::Service;
use tokio::net::{TcpListener, TcpSocket};

use super::connections::Guarded;

/// Connections the kernel queues for each socket before they are accepted,
/// as Pingora's listener asks.
const BACKLOG: u32 = 65_535;

/// How long accepting pauses when the process is out of file descriptors:
/// `accept` would fail again at once, in a busy loop.
const OUT_OF_DESCRIPTORS_PAUSE: Duration = Duration::from_secs(1);

/// The proxy's listening service.
pub struct Listener<A> {
    name: String,
    addresses: Vec<SocketAddr>,
    app: Arc<Guarded<A>>,
}

impl<A> Listener<A> {
    /// Accepts on each of `addresses` and serves every connection with
    /// `app`.
    pub fn new(name: &str, addresses: Vec<SocketAddr>, app: Guarded<A>) -> Listener<A> {
        Listener {
            name: name.to_string(),
            addresses,
            app: Arc::new(app),
        }
    }
}

/// A listening socket made as Pingora makes its own.
fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match address {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }?;
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(BACKLOG)
}

#[async_trait]
impl<A> Service for Listener<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn start_service(
        &mut self,
        _fds: Option<ListenFds>,
        shutdown: ShutdownWatch,
        _listeners_per_fd: usize,
    ) {
        let mut loops = Vec::with_capacity(self.addresses.len());
        for &address in &self.addresses {
            match bind(address) {
                Ok(listener) => {
                    loops.push(tokio::spawn(accept(
                        listener,
                        self.app.clone(),
                        shutdown.clone(),
                    )));
                }
                // The start checked that each address can be bound; one
                // taken since cannot be served, and a proxy that listens on
                // part of its config is worse than none.
                Err(error) => {
                    tracing::error!(%address, %error, "cannot listen");
                    crate::logging::flush();
                    std::process::exit(1);
                }
            }
        }
        for accepting in loops {
            let _ = accepting.await;
        }
        self.app.cleanup().await;
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// Accepts connections until the server shuts down, each served by a task
/// of its own.
async fn accept<A>(listener: TcpListener, app: Arc<Guarded<A>>, mut shutdown: ShutdownWatch)
where
    A: HttpServerApp + Send + Sync + 'static,
{
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            changed = shutdown.changed() => match changed {
                Ok(()) if !*shutdown.borrow() => continue,
                _ => break,
            },
        };
        match accepted {
            Ok((tcp, peer)) => {
                // Small replies go out at once, as on Pingora's listener. A
                // socket that cannot take the option is already failing, and
                // its first read or write says so.
                let _ = tcp.set_nodelay(true);
                let digest = SocketDigest::from_raw_fd(tcp.as_raw_fd());
                // The peer as `accept` gave it: looked up later, it is gone
                // once the client has closed, and the request's log line
                // would have no client.
                let _ = digest.peer_addr.set(Some(peer.into()));
                // Without buffers of the stream's own: every reader of the
                // connection (the connection loop, the direct lane, Pingora's
                // session) reads into a buffer of its own, allocated while it
                // reads, and every writer writes whole replies or flushes
                // (`super::fenced` gathers Pingora's writes). Buffers of the
                // stream's would copy bytes twice and hold memory for each
                // idle keep-alive connection (docs/performance.md).
                let mut stream = TcpStream::from(tcp);
                stream.set_socket_digest(digest);
                let app = app.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move { app.connection(Box::new(stream), &shutdown).await });
            }
            Err(error) => {
                tracing::error!(%error, "accept failed");
                if matches!(
                    error.raw_os_error(),
                    Some(libc_errno::EMFILE | libc_errno::ENFILE)
                ) {
                    tokio::time::sleep(OUT_OF_DESCRIPTORS_PAUSE).await;
                }
            }
        }
    }
}

/// The two `accept` errors that say the process or the system has no file
/// descriptor left (Linux's numbers).
mod libc_errno {
    pub const ENFILE: i32 = 23;
    pub const EMFILE: i32 = 24;
}
