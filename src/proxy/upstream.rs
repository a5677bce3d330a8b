//! An upstream: its addresses, the choice among them, and their health, on
//! `pingora-load-balancing`, for both HTTP paths.
//!
//! - Addresses may be names. They are resolved at start (every address of
//!   every name, not just the first) and again every `resolve-interval-s`,
//!   off the request path; a lookup that fails keeps the addresses known.
//! - With `health-check`, each address gets `GET path` every `interval-ms`;
//!   an address that does not answer 200 within `timeout-ms` gets no
//!   traffic until it does again. With none healthy, a request gets 502 at
//!   once, without trying to connect.
//! - `round-robin` is the crate's selector. `least-connections` is ours:
//!   the crate has none (its selection module lists it as to do), and it is
//!   a few lines over the requests under way per address, which both paths
//!   count through [`Chosen`].

use std::collections::{BTreeSet, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::http::RequestHeader;
use pingora::lb::discovery::ServiceDiscovery;
use pingora::lb::health_check::{HealthCheck, HttpHealthCheck, TcpHealthCheck};
use pingora::lb::selection::RoundRobin;
use pingora::lb::{Backend, Backends, LoadBalancer};
use pingora::prelude::HttpPeer;
use pingora::protocols::tls::CaType;
use pingora::upstreams::peer::{H1UpgradePolicy, HttpUpstreamRequestPolicy};
use pingora::utils::tls::{parse_x509, WrappedX509};

use super::rules::pool::Kept;
pub use super::rules::pool::UPSTREAM_IDLE;

/// How long Pingora keeps a watched connection it released before dropping
/// it (which hands the socket back to its client's kept ones).
const WATCHED_IDLE: Duration = Duration::from_millis(1);
use super::watched::Connectors;
use crate::config::{HealthCheckConfig, LoadBalancing, UpstreamConfig};

/// Why an upstream could not be built.
#[derive(Debug, thiserror::Error)]
#[error("upstreams.{name}: cannot {what} `{address}`: {problem}")]
pub struct ResolveError {
    what: &'static str,
    name: String,
    address: String,
    problem: String,
}

/// One upstream, shared by every route that names it.
pub struct Upstream {
    pub name: String,
    pub tls: bool,
    pub sni: String,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    /// The private CA the upstream's certificate must chain to.
    ca: Option<Arc<CaType>>,
    /// The one address of an upstream that can only ever have one: a
    /// single IP (no name to resolve again) with no health check. Requests
    /// go straight to it, without the balancer's per-request work (a set
    /// allocated and backends hashed per choice, measured on the hot path).
    pub fixed: Option<SocketAddr>,
    policy: LoadBalancing,
    balancer: LoadBalancer<RoundRobin>,
    /// Requests under way per address, for least-connections (both paths
    /// count).
    active: Mutex<HashMap<SocketAddr, Arc<AtomicUsize>>>,
    resolve_interval: Duration,
    check_interval: Option<Duration>,
    /// When discovery and health checks last ran, and whether one runs now.
    last_resolve: Mutex<Instant>,
    last_check: Mutex<Option<Instant>>,
    busy: AtomicBool,
    /// Whether the last resolution of the names failed: one warning when
    /// it starts failing, one line when it works again, not one a run.
    resolve_failing: AtomicBool,
    /// The Pingora path's plain-TCP connections, per address, with their
    /// idle ones (see `super::watched`).
    watched: Connectors,
    /// What it was built from, and the CA file's bytes then: a reload that
    /// leaves both as they were keeps this upstream (see
    /// `RouteTable::build`).
    config: UpstreamConfig,
    ca_pem: Option<Vec<u8>>,
}

/// The address a request goes to; counts as a request under way there
/// until dropped.
pub struct Chosen {
    pub addr: SocketAddr,
    /// Counted only for least-connections.
    active: Option<Arc<AtomicUsize>>,
}

impl Drop for Chosen {
    fn drop(&mut self) {
        if let Some(active) = &self.active {
            active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Upstream {
    /// Resolves every address now (blocking: at start-up, or off the
    /// runtime on a reload).
    pub fn build(name: &str, config: &UpstreamConfig) -> Result<Upstream, ResolveError> {
        let mut first = BTreeSet::new();
        for address in &config.addresses {
            for addr in resolve(name, address)? {
                first.insert(backend(addr));
            }
        }
        let discovery = Resolver {
            addresses: config.addresses.clone(),
            first: Mutex::new(Some(first)),
        };
        let ca = match &config.ca_file {
            Some(path) => Some(load_ca(name, path)?),
            None => None,
        };
        let mut backends = Backends::new(Box::new(discovery));
        if let Some(check) = &config.health_check {
            backends.set_health_check(health_check(check, config, ca.clone()));
        }
        let balancer = LoadBalancer::<RoundRobin>::from_backends(backends);
        // The first discovery returns the addresses resolved above without
        // waiting on anything, so it completes here.
        let _ = futures_lite_now(balancer.update());
        Ok(Upstream {
            name: name.to_string(),
            tls: config.tls,
            sni: config.sni.clone(),
            connect_timeout: config.connect_timeout,
            read_timeout: config.read_timeout,
            ca,
            fixed: match config.addresses.as_slice() {
                [one] if config.health_check.is_none() => one.parse().ok(),
                _ => None,
            },
            policy: config.load_balancing,
            balancer,
            active: Mutex::new(HashMap::new()),
            resolve_interval: config.resolve_interval,
            check_interval: config.health_check.as_ref().map(|c| c.interval),
            last_resolve: Mutex::new(Instant::now()),
            last_check: Mutex::new(None),
            busy: AtomicBool::new(false),
            resolve_failing: AtomicBool::new(false),
            watched: Connectors::default(),
            config: config.clone(),
            ca_pem: config.ca_file.as_ref().and_then(|p| std::fs::read(p).ok()),
        })
    }

    /// Whether this upstream is what `config` would build: the same
    /// settings, and the same CA file contents.
    pub fn built_from(&self, config: &UpstreamConfig) -> bool {
        self.config == *config
            && self.ca_pem == config.ca_file.as_ref().and_then(|p| std::fs::read(p).ok())
    }

    /// An address for the next request, by the upstream's policy among the
    /// healthy ones; `None` when none is healthy.
    pub fn select(&self) -> Option<Chosen> {
        if let Some(addr) = self.fixed {
            return Some(Chosen { addr, active: None });
        }
        let addr = match self.policy {
            LoadBalancing::RoundRobin => {
                let addr = inet(&self.balancer.select(b"", 256)?)?;
                return Some(Chosen { addr, active: None });
            }
            LoadBalancing::LeastConnections => self.least_busy()?,
        };
        let active = {
            let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
            active.entry(addr).or_default().clone()
        };
        active.fetch_add(1, Ordering::Relaxed);
        Some(Chosen {
            addr,
            active: Some(active),
        })
    }

    fn least_busy(&self) -> Option<SocketAddr> {
        let backends = self.balancer.backends();
        let all = backends.get_backend();
        let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        all.iter()
            .filter(|b| backends.ready(b))
            .filter_map(inet)
            .min_by_key(|addr| active.get(addr).map_or(0, |n| n.load(Ordering::Relaxed)))
    }

    /// Pingora's peer for `addr`, with this upstream's TLS and timeouts,
    /// whose connections are kept for the client connection `kept` only
    /// (`super::rules::pool`); none: a connection of its own, not kept.
    pub fn peer(&self, addr: SocketAddr, kept: Option<Arc<Kept>>) -> Box<HttpPeer> {
        let mut peer = HttpPeer::new(addr, self.tls, self.sni.clone());
        // Pingora keeps TLS connections itself, by a key this is part of:
        // one client's are never another's. Without a client, a key no
        // other request has.
        peer.group_key = kept.as_ref().map_or_else(Kept::unique_id, |k| k.id);
        // Pingora verifies the certificate and the name by default; a
        // private CA replaces the public roots for this upstream.
        peer.options.ca = self.ca.clone();
        peer.options.connection_timeout = Some(self.connect_timeout);
        peer.options.read_timeout = Some(self.read_timeout);
        peer.options.write_timeout = Some(self.read_timeout);
        // Kept-alive connections idle this long are closed rather than
        // reused: upstreams commonly close idle connections after 60 s+.
        peer.options.idle_timeout = Some(UPSTREAM_IDLE);
        // What the upstream gets of the client's fields is the rules' to say
        // (`rules::forward::Hop`, the direct lane's too): Pingora's own
        // stripping removes the same fields, but by swapping the last field
        // into each one's place, so that the two paths sent the upstream the
        // same fields in different orders. Upgrades (never the lane's) stay
        // Pingora's to normalise: `Connection: Upgrade` and `Upgrade:
        // websocket` for a WebSocket handshake, neither for anything else,
        // whatever the client's own `Connection` nominated.
        peer.options.http_upstream_request_policy = HttpUpstreamRequestPolicy {
            h1_upgrade: H1UpgradePolicy::WebSocketOnly,
            ..HttpUpstreamRequestPolicy::preserve()
        };
        if !self.tls {
            peer.options.custom_l4 =
                Some(
                    self.watched
                        .get(addr, self.connect_timeout, self.read_timeout, kept),
                );
            // Pingora cannot reuse a watched connection (see
            // `super::watched`): it lets go of one it keeps at once, which
            // gives the socket back to its client's kept ones.
            peer.options.idle_timeout = Some(WATCHED_IDLE);
        }
        Box::new(peer)
    }

    /// The addresses known now, each with whether it takes traffic.
    pub fn health(&self) -> Vec<(SocketAddr, bool)> {
        let backends = self.balancer.backends();
        backends
            .get_backend()
            .iter()
            .filter_map(|b| Some((inet(b)?, backends.ready(b))))
            .collect()
    }

    /// Runs what is due: discovery every `resolve-interval-s`, the health
    /// checks every `interval-ms`. At most one run at a time.
    pub async fn maintain(&self) {
        if self.busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let now = Instant::now();
        let resolve_due = {
            let mut last = self.last_resolve.lock().unwrap_or_else(|p| p.into_inner());
            let due = now.duration_since(*last) >= self.resolve_interval;
            if due {
                *last = now;
            }
            due
        };
        if resolve_due {
            match self.balancer.update().await {
                Err(e) => {
                    if !self.resolve_failing.swap(true, Ordering::AcqRel) {
                        tracing::warn!(upstream = %self.name, error = %e, "resolving the upstream's names failed; keeping its addresses until they resolve again");
                    }
                }
                Ok(()) => {
                    if self.resolve_failing.swap(false, Ordering::AcqRel) {
                        tracing::info!(upstream = %self.name, "the upstream's names resolve again");
                    }
                }
            }
        }
        let check_due = self.check_interval.is_some_and(|interval| {
            let mut last = self.last_check.lock().unwrap_or_else(|p| p.into_inner());
            let due = last.is_none_or(|at| now.duration_since(at) >= interval);
            if due {
                *last = Some(now);
            }
            due
        });
        if check_due {
            let before = self.health();
            self.balancer.backends().run_health_check(true).await;
            // Each address that changes state, once, under waitgate's own
            // name (Pingora's line for a recovery is below the default
            // filter).
            for (addr, healthy) in self.health() {
                let was = before.iter().find(|(a, _)| *a == addr).map(|(_, h)| *h);
                match (was, healthy) {
                    (Some(true), false) => {
                        tracing::warn!(upstream = %self.name, %addr, "an upstream address failed its health check; it gets no traffic")
                    }
                    (Some(false), true) => {
                        tracing::info!(upstream = %self.name, %addr, "an upstream address is healthy again")
                    }
                    _ => {}
                }
            }
        }
        self.busy.store(false, Ordering::Release);
    }
}

/// The certificates of a PEM file, as Pingora's per-peer CA list.
fn load_ca(name: &str, path: &std::path::Path) -> Result<Arc<CaType>, ResolveError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let error = |problem: String| ResolveError {
        what: "read the CA file",
        name: name.to_string(),
        address: path.display().to_string(),
        problem,
    };
    let certificates: Vec<WrappedX509> = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .map(|cert| {
            cert.map(|der| WrappedX509::new(der.to_vec(), parse_x509))
                .map_err(|e| error(e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    if certificates.is_empty() {
        return Err(error("no certificate in the CA file".to_string()));
    }
    Ok(Arc::from(certificates.into_boxed_slice()))
}

fn backend(addr: SocketAddr) -> Backend {
    Backend {
        addr: pingora::protocols::l4::socket::SocketAddr::Inet(addr),
        weight: 1,
        ext: Default::default(),
    }
}

fn inet(backend: &Backend) -> Option<SocketAddr> {
    backend.addr.as_inet().copied()
}

fn resolve(name: &str, address: &str) -> Result<Vec<SocketAddr>, ResolveError> {
    let error = |problem: String| ResolveError {
        what: "resolve",
        name: name.to_string(),
        address: address.to_string(),
        problem,
    };
    let addrs: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| error(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(error("no address found".to_string()));
    }
    Ok(addrs)
}

/// The health check a config asks for: `GET path` answered 200, within the
/// timeout, from each address; one failure marks it down, one success up.
fn health_check(
    check: &HealthCheckConfig,
    upstream: &UpstreamConfig,
    ca: Option<Arc<CaType>>,
) -> Box<dyn HealthCheck + Send + Sync> {
    let mut http = HttpHealthCheck::new(&upstream.sni, upstream.tls);
    http.peer_template.options.ca = ca;
    http.peer_template.options.connection_timeout = Some(check.timeout);
    http.peer_template.options.read_timeout = Some(check.timeout);
    http.peer_template.options.total_connection_timeout = Some(check.timeout);
    http.consecutive_failure = 1;
    http.consecutive_success = 1;
    match RequestHeader::build("GET", check.path.as_bytes(), None) {
        Ok(mut req) => {
            let _ = req.insert_header("Host", upstream.sni.as_str());
            let _ = req.insert_header("User-Agent", "waitgate-health-check");
            http.req = req;
            Box::new(http)
        }
        // The path was checked when the config was read; a TCP check is
        // the fallback that cannot fail to build.
        Err(_) => TcpHealthCheck::new(),
    }
}

/// Discovery by name: the first call returns the addresses resolved at
/// build time (so that building completes without a runtime); later calls
/// resolve every name again. A name that fails is skipped; all failing is
/// an error, which keeps the addresses known.
struct Resolver {
    addresses: Vec<String>,
    first: Mutex<Option<BTreeSet<Backend>>>,
}

#[async_trait]
impl ServiceDiscovery for Resolver {
    async fn discover(&self) -> pingora::Result<(BTreeSet<Backend>, HashMap<u64, bool>)> {
        if let Some(first) = self.first.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Ok((first, HashMap::new()));
        }
        let mut found = BTreeSet::new();
        for address in &self.addresses {
            if let Ok(addrs) = tokio::net::lookup_host(address.as_str()).await {
                found.extend(addrs.map(backend));
            }
        }
        if found.is_empty() {
            return Err(pingora::Error::explain(
                pingora::ErrorType::ConnectNoRoute,
                "no upstream name resolved",
            ));
        }
        Ok((found, HashMap::new()))
    }
}

/// Polls a future once: the first discovery never waits, so its update
/// completes on the first poll.
fn futures_lite_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}
