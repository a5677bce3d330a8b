//! Assembles the Pingora server: the proxy, the admin listener and the
//! background services, from one validated [`Config`].

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use pingora::apps::HttpServerOptions;
use pingora::listeners::tls::TlsSettings;
use pingora::protocols::http::v2::server::{default_h2_options, H2Options};
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server};
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use crate::admin::AdminApp;
use crate::background::{Admission, Cleanup, Probe, Revocations, Sampler, Shared, Watch};
use crate::config::Config;
use crate::control::{AdminAccess, ControlApi};
use crate::durability::Durability;
use crate::edge::jwt::Tokens;
use crate::edge::login::Logins;
use crate::edge::secret::Keys;
use crate::fairness::receipt::ReceiptKeys;
use crate::metrics::Metrics;
use crate::proxy::connections::{Guarded, Limits, TlsListener};
use crate::proxy::lane::DirectLane;
use crate::proxy::listener::Listener;
use crate::proxy::routes::Maintenance;
use crate::proxy::routes::RouteTable;
use crate::proxy::rules::forward::TrustedProxies;
use crate::proxy::Gate;
use crate::queue_api::QueueApi;
use crate::queues::Queues;
use crate::reload::Reloader;
use crate::shutdown::{Drain, InFlight, Signals};
use crate::store::Store;

/// Why the server could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{key}: cannot listen on {addr}: {source}")]
    Listen {
        key: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("redis: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Resolve(#[from] crate::proxy::routes::ResolveError),
    #[error("listen-tls: {0}")]
    Tls(String),
    #[error(transparent)]
    AdminToken(#[from] crate::control::AdminTokenError),
    #[error("identity: {0}")]
    Login(#[from] crate::edge::login::LoginKeyError),
}

/// Builds the whole server, ready to [`run`].
/// `path` is the file `config` came from: a SIGHUP reads it again.
pub fn build(
    config: &Config,
    keys: &Keys,
    receipts: ReceiptKeys,
    path: &Path,
) -> Result<Server, StartError> {
    // Pingora reports a port in use by panicking in a service thread; check
    // first so the operator gets one line that names the key.
    check_bindable("listen", config.listen)?;
    check_bindable("admin-listen", config.admin_listen)?;
    if let Some(tls) = &config.listen_tls {
        check_bindable("listen-tls.address", tls.address)?;
    }
    raise_fd_limit(config.clients.max_connections);

    // SIGTERM: the drain service below exits once nothing is in flight, and
    // at the latest when the grace period ends. Pingora's own timer is a
    // second longer, so it never cuts the drain short.
    let conf = ServerConf {
        threads: config.threads,
        grace_period_seconds: Some(config.grace_period.as_secs() + 1),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    // Two Redis connections: one for the queue API, one for the background
    // tasks and probes. Each opens lazily in the runtime that uses it first,
    // so the proxy's Redis traffic is driven on the proxy's own threads
    // instead of waking a background thread for every call.
    let store = Arc::new(Store::new(&config.redis)?);
    let control = Arc::new(Store::new(&config.redis)?);
    let in_flight = Arc::new(InFlight::default());

    let metrics = Arc::new(Metrics::new(config));
    let tokens = Arc::new(Tokens::with_keys(keys, &config.jwt));
    let routes = Arc::new(ArcSwap::from_pointee(RouteTable::build(config)?));
    let queues = Arc::new(ArcSwap::from_pointee(Queues::new(config)));
    let (reloaded, reloaded_rx) = watch::channel(0u64);
    let logins = config.identity.as_ref().map(Logins::load).transpose()?;
    let durability = Arc::new(Durability::new(
        control.clone(),
        tokens.revoked().clone(),
        metrics.clone(),
    ));
    let api = Arc::new(
        QueueApi::new(
            config,
            queues.clone(),
            crate::queue_api::Redis {
                store: store.clone(),
                durability: durability.clone(),
            },
            tokens.clone(),
            keys,
            metrics.clone(),
            logins,
        )
        .with_receipts(receipts),
    );
    let browsers = api.browser_settings();
    let admin_access = AdminAccess::from_env()?.map(Arc::new);
    let control_api = ControlApi {
        access: admin_access.clone(),
        store: control.clone(),
        queues: queues.clone(),
        tokens: tokens.clone(),
        metrics: metrics.clone(),
        durability: durability.clone(),
    };
    let trusted = TrustedProxies::new(config.trusted_proxies.clone());
    let direct = config.direct_lane.then(|| {
        Arc::new(DirectLane::new(
            routes.load_full(),
            tokens.clone(),
            api.clone(),
            metrics.clone(),
            in_flight.clone(),
            trusted.clone(),
        ))
    });
    let client_limits = api.limits().clone();
    let gate = Gate {
        api,
        routes: routes.clone(),
        tokens: tokens.clone(),
        in_flight: in_flight.clone(),
        metrics: metrics.clone(),
        trusted,
        body_timeout: config.clients.body_timeout,
    };
    let limits = Limits {
        max_connections: config.clients.max_connections,
        header_timeout: config.clients.header_timeout,
    };
    let mut http = pingora::proxy::http_proxy(&server.configuration, gate);
    // An idle HTTP/2 connection (no stream open) is closed after the time
    // an idle HTTP/1.1 keep-alive connection is given: Pingora keeps it
    // open for good by default.
    let mut options = HttpServerOptions::default();
    options.h2_idle_timeout = Some(config.clients.header_timeout);
    http.server_options = Some(options);
    if let Some(tls) = &config.listen_tls {
        http.h2_options = Some(h2_options(tls));
    }
    // The TLS listener accepts plain TCP: the handshake is made by the
    // connection loop, under its cap and deadline (`proxy::connections`).
    let tls = match &config.listen_tls {
        Some(tls) => {
            let mut settings = TlsSettings::intermediate(
                &tls.cert_file.to_string_lossy(),
                &tls.key_file.to_string_lossy(),
            )
            .map_err(|e| StartError::Tls(e.to_string()))?;
            // ALPN: h2, then http/1.1.
            settings.enable_h2();
            // The config's check loaded this pair (`config::check_tls_pair`);
            // the build loads it again, and panics where it cannot.
            let acceptor =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || settings.build()))
                    .map_err(|_| {
                        StartError::Tls("the certificate or key could not be loaded".into())
                    })?;
            Some(TlsListener {
                address: tls.address,
                acceptor,
            })
        }
        None => None,
    };
    let addresses = std::iter::once(config.listen)
        .chain(tls.as_ref().map(|t| t.address))
        .collect();
    let guarded = Guarded::new(http, limits, metrics.clone(), direct.clone(), tls);
    server.add_service(Listener::new("waitgate proxy", addresses, guarded));

    let shared = Shared {
        store: control.clone(),
        metrics: metrics.clone(),
        queues: queues.clone(),
        reloaded: reloaded_rx,
        durability,
    };
    server.add_service(background_service("admission", Admission(shared.clone())));
    server.add_service(background_service("cleanup", Cleanup(shared.clone())));
    server.add_service(background_service("watch", Watch(shared.clone())));
    server.add_service(background_service("sampler", Sampler(shared.clone())));
    server.add_service(background_service(
        "probe",
        Probe {
            shared: shared.clone(),
            api: store,
        },
    ));
    server.add_service(background_service(
        "revocations",
        Revocations {
            shared,
            revoked: tokens.revoked().clone(),
            keep: tokens.longest_life(),
        },
    ));
    server.add_service(background_service(
        "upstream checks",
        Maintenance {
            routes: routes.clone(),
            metrics: metrics.clone(),
        },
    ));
    server.add_service(background_service(
        "reload",
        Reloader {
            path: path.to_path_buf(),
            started: config.clone(),
            started_files: crate::reload::StartFiles::read(config),
            current: std::sync::Mutex::new(config.clone()),
            routes,
            lane: direct,
            queues,
            browsers,
            reloaded,
            metrics: metrics.clone(),
            admin_access,
            store: control.clone(),
            limits: client_limits,
        },
    ));

    // The admin listener gets the proxy's head deadline and a small cap of
    // its own: probes, scrapes and operators need a few connections, and
    // it shares the process's file descriptors with the proxy.
    let admin_app = AdminApp::new(control.clone(), metrics.clone(), Arc::new(control_api));
    let admin_limits = Limits {
        max_connections: ADMIN_MAX_CONNECTIONS,
        header_timeout: config.clients.header_timeout,
    };
    let mut admin = Service::new(
        "waitgate admin".to_string(),
        Guarded::admin(admin_app, admin_limits, metrics.clone()),
    );
    admin.add_tcp(&config.admin_listen.to_string());
    // One thread is plenty for scrapes and probes.
    admin.threads = Some(1);
    server.add_service(admin);

    server.add_service(background_service(
        "drain",
        Drain::new(in_flight, config.grace_period, crate::logging::flush),
    ));
    Ok(server)
}

/// What an HTTP/2 connection may hold: each stream open is a request in
/// flight, with all it costs (Pingora's session and the request's state),
/// so the streams open at once are what bounds a connection's memory; with
/// Pingora's default of 100 one connection cost 25.34 HTTP/1.1 ones, with 6
/// it costs 2.43 (tests/h2_budget.rs; docs/performance.md). The window
/// bounds the body bytes buffered ahead of the reader, each way.
/// Header blocks get the limit an HTTP/1.1 head has.
fn h2_options(tls: &crate::config::TlsListener) -> H2Options {
    let mut options = default_h2_options();
    options
        .max_concurrent_streams(tls.h2_max_streams)
        .initial_window_size(tls.h2_window_bytes)
        .initial_connection_window_size(tls.h2_window_bytes)
        .max_send_buffer_size(tls.h2_window_bytes as usize)
        .max_header_list_size(crate::proxy::head::MAX_REQUEST_HEAD_BYTES as u32);
    options
}

/// Open connections the admin listener takes; past them, a new one gets a
/// 503. Kubernetes probes and a few Prometheus scrapers hold one or two
/// each.
pub const ADMIN_MAX_CONNECTIONS: usize = 128;

/// Runs until SIGINT (at once) or SIGTERM or SIGQUIT (after draining).
pub fn run(server: Server) {
    server.run(RunArgs {
        shutdown_signal: Box::new(Signals),
    });
}

/// Every connection is a file descriptor, and the usual soft limit (1024)
/// is far below `max-connections`: raise it to the hard limit, as nginx's
/// `worker_rlimit_nofile` would, and say so when even that is too low.
fn raise_fd_limit(max_connections: usize) {
    let Ok(current) = rlimit::increase_nofile_limit(u64::MAX) else {
        return;
    };
    // Connections to Redis, upstreams and the admin listener need some too.
    let needed = max_connections as u64 + 256;
    if current < needed {
        tracing::warn!(
            fd_limit = current,
            max_connections,
            "the open-file limit is below max-connections; raise it (ulimit -n) or lower max-connections"
        );
    }
}

fn check_bindable(key: &'static str, addr: SocketAddr) -> Result<(), StartError> {
    TcpListener::bind(addr)
        .map(drop)
        .map_err(|source| StartError::Listen { key, addr, source })
}
