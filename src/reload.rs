//! SIGHUP: read the config file again and apply it with no connection
//! dropped.
//!
//! What changes at once: the routes and upstreams (both HTTP paths; the
//! direct lane keeps the pools of upstreams that did not change), the
//! queues and their parameters (the background loops restart with them),
//! the cookie and origin settings (`cookies`, `cors`, `public-origin`:
//! the queue API's and the same-site rule of the routes), the log
//! filter and access-log switch, the per-client limits, and the admin
//! tokens' file. A changed admission value that a live override masks is
//! named in a warning. What needs a restart is named in the log: the listeners, threads, the Redis connection, the JWT policy,
//! identity binding, the client limits, `direct-lane`, `trusted-proxies`
//! and `log.format`.
//!
//! A file that does not validate, or whose upstreams do not resolve, is
//! refused with one log line, and the running config stays. Requests under
//! way finish with the tables they started with: each table is swapped
//! whole (`arc-swap`), never edited in place.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::watch;

use crate::config::{BrowserConfig, Config};
use crate::control::AdminAccess;
use crate::limits::ClientLimits;
use crate::metrics::Metrics;
use crate::proxy::lane::DirectLane;
use crate::proxy::routes::RouteTable;
use crate::queues::Queues;
use crate::store::Store;

/// Set by the SIGHUP handler installed at start-up ([`catch_sighup`]), so
/// that a SIGHUP that arrives before the reloader runs is not lost, and
/// never kills the process.
static REQUESTED: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

/// Installs the SIGHUP handler: from now on SIGHUP asks for a reload
/// instead of ending the process (its default).
pub fn catch_sighup() -> std::io::Result<()> {
    let flag = REQUESTED.get_or_init(|| Arc::new(AtomicBool::new(false)));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, flag.clone()).map(drop)
}

/// What a reload replaces, and what it tells.
pub struct Reloader {
    pub path: PathBuf,
    /// What the process started with: the keys that only apply at start
    /// are compared with it.
    pub started: Config,
    /// The files read only at start, as they were then.
    pub started_files: StartFiles,
    /// The config applied last.
    pub current: Mutex<Config>,
    pub routes: Arc<ArcSwap<RouteTable>>,
    pub lane: Option<Arc<DirectLane>>,
    pub queues: Arc<ArcSwap<Queues>>,
    /// The queue API's cookie and origin settings (the routes' same-site
    /// rule reads the route table's copy).
    pub browsers: Arc<ArcSwap<BrowserConfig>>,
    /// Bumped after the queues are replaced: the background loops restart.
    pub reloaded: watch::Sender<u64>,
    pub metrics: Arc<Metrics>,
    /// The admin tokens: their file is read again on each reload.
    pub admin_access: Option<Arc<AdminAccess>>,
    /// Where live overrides are read, to warn of a reloaded value one
    /// masks.
    pub store: Arc<Store>,
    /// The per-client limits: new rates at once.
    pub limits: Arc<ClientLimits>,
}

#[async_trait]
impl BackgroundService for Reloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        {
            Ok(signal) => signal,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGHUP; reloads are off");
                return;
            }
        };
        let requested = REQUESTED.get().cloned();
        loop {
            if requested
                .as_ref()
                .is_some_and(|flag| flag.swap(false, Ordering::Relaxed))
            {
                self.reload().await;
                continue;
            }
            tokio::select! {
                _ = hangup.recv() => {}
                _ = shutdown.changed() => return,
            }
            // The flag was set by the same signal.
            if let Some(flag) = &requested {
                flag.store(false, Ordering::Relaxed);
            }
            // A SIGHUP that comes during a reload leads to one more: the
            // file may have changed after it was read.
            self.reload().await;
        }
    }
}

impl Reloader {
    /// Reads, checks and applies the file; or refuses it and says why.
    pub async fn reload(&self) {
        if let Some(access) = &self.admin_access {
            access.reload();
        }
        let path = self.path.clone();
        let previous = self.routes.load_full();
        // Resolving upstream names blocks: off the runtime's threads.
        let loaded = tokio::task::spawn_blocking(move || {
            let config = Config::load(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let routes =
                RouteTable::build_after(&config, Some(&previous)).map_err(|e| e.to_string())?;
            Ok::<_, String>((config, routes))
        })
        .await
        .unwrap_or_else(|e| Err(format!("the reload task failed: {e}")));
        let (config, routes) = match loaded {
            Ok(loaded) => loaded,
            Err(error) => {
                self.metrics.reloads.with_label_values(&["refused"]).inc();
                tracing::warn!(%error, "reload refused; the running config stays");
                return;
            }
        };
        let old_queues = self.apply(config, routes);
        self.warn_of_masked_values(&old_queues).await;
    }

    /// Puts a checked config in force; the queues it replaced.
    fn apply(&self, config: Config, routes: RouteTable) -> Arc<Queues> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        for key in needs_restart(&self.started, &config) {
            tracing::warn!(
                key,
                "differs from what the process started with; takes effect after a restart"
            );
        }
        for (key, path) in self.started_files.changed() {
            tracing::warn!(
                key,
                file = %path.display(),
                "the file changed since start; it is read only at start, so the change \
                 takes effect after a restart"
            );
        }
        if current.queues.len() == 1 && config.queues.len() > 1 {
            // With one queue, the queue API takes requests that name none;
            // with several it cannot tell which was meant.
            tracing::warn!(
                queues = config.queues.len(),
                "the config now has several queues: queue API calls that name no queue \
                 are refused from now on (400), and clients that leave it out stop polling"
            );
        }
        let routes = Arc::new(routes);
        self.routes.store(routes.clone());
        if let Some(lane) = &self.lane {
            lane.update(routes);
        }
        let old_queues = self.queues.swap(Arc::new(Queues::new(&config)));
        self.browsers.store(Arc::new(config.browsers.clone()));
        let gone = current
            .queues
            .keys()
            .filter(|q| !config.queues.contains_key(*q));
        self.metrics.remove_queues(gone.map(String::as_str));
        self.metrics
            .add_queues(config.queues.keys().map(String::as_str));
        self.reloaded.send_modify(|generation| *generation += 1);
        crate::logging::reload(&config.log);
        self.limits.update(&config.limits);
        self.metrics.reloads.with_label_values(&["ok"]).inc();
        tracing::info!(
            routes = config.routes.len(),
            upstreams = config.upstreams.len(),
            queues = config.queues.len(),
            "config reloaded"
        );
        *current = config;
        old_queues
    }

    /// A reload that changes an admission value a live override
    /// (`PATCH .../admission`) masks changes nothing in effect: said once
    /// per value, naming it, with how to drop the override.
    async fn warn_of_masked_values(&self, old: &Queues) {
        let new = self.queues.load_full();
        for queue in new.iter() {
            let Ok(before) = old.find(Some(&queue.name)) else {
                continue;
            };
            match crate::control::masked(&self.store, before, queue).await {
                Ok(masked) => {
                    for (key, configured, in_effect) in masked {
                        tracing::warn!(
                            queue = %queue.name,
                            key = %format_args!("queues.{}.admission.{key}", queue.name),
                            configured,
                            in_effect,
                            "the reloaded value is masked by a live override and is not in \
                             effect; DELETE /admin/v1/queues/{}/admission drops the override",
                            queue.name
                        );
                    }
                }
                Err(error) => tracing::warn!(
                    queue = %queue.name,
                    %error,
                    "the reload changed admission settings; whether a live override masks \
                     them could not be read"
                ),
            }
        }
    }
}

/// The files waitgate reads only at start (the TLS listener's certificate
/// and key, `redis.tls`'s files, the login keys' JWKS), each with a digest
/// of what it held then. Reading them again on a reload would take new
/// listeners and connections; a reload says which changed instead, as
/// nginx users expect a certificate swap to be noticed on SIGHUP.
pub struct StartFiles(Vec<(&'static str, PathBuf, Option<u64>)>);

impl StartFiles {
    pub fn read(config: &Config) -> StartFiles {
        let mut files: Vec<(&'static str, PathBuf)> = Vec::new();
        if let Some(tls) = &config.listen_tls {
            files.push(("listen-tls.cert-file", tls.cert_file.clone()));
            files.push(("listen-tls.key-file", tls.key_file.clone()));
        }
        if let Some(tls) = &config.redis.tls {
            for (key, path) in [
                ("redis.tls.ca-file", &tls.ca_file),
                ("redis.tls.cert-file", &tls.cert_file),
                ("redis.tls.key-file", &tls.key_file),
            ] {
                if let Some(path) = path {
                    files.push((key, path.clone()));
                }
            }
        }
        if let Some(identity) = &config.identity {
            if let crate::config::IdentityKey::JwksFile(path) = &identity.key {
                files.push(("identity.jwks-file", path.clone()));
            }
        }
        StartFiles(
            files
                .into_iter()
                .map(|(key, path)| {
                    let digest = digest(&path);
                    (key, path, digest)
                })
                .collect(),
        )
    }

    /// The keys and paths of the files whose content is not what it was.
    fn changed(&self) -> Vec<(&'static str, &PathBuf)> {
        self.0
            .iter()
            .filter(|(_, path, then)| digest(path) != *then)
            .map(|(key, path, _)| (*key, path))
            .collect()
    }
}

/// A digest of a file's content (`None` when it cannot be read): enough to
/// tell a change, not a checksum against tampering.
fn digest(path: &std::path::Path) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let content = std::fs::read(path).ok()?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    content.hash(&mut hasher);
    Some(hasher.finish())
}

/// The keys that differ between `old` and `new` but only apply at start.
fn needs_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let differs =
        |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| format!("{a:?}") != format!("{b:?}");
    let mut keys = Vec::new();
    let checks: [(&'static str, bool); 12] = [
        ("listen", old.listen != new.listen),
        ("listen-tls", old.listen_tls != new.listen_tls),
        ("admin-listen", old.admin_listen != new.admin_listen),
        ("threads", old.threads != new.threads),
        ("grace-period-s", old.grace_period != new.grace_period),
        (
            "max-connections and client timeouts",
            differs(&old.clients, &new.clients),
        ),
        ("direct-lane", old.direct_lane != new.direct_lane),
        (
            "trusted-proxies",
            old.trusted_proxies != new.trusted_proxies,
        ),
        ("redis", differs(&old.redis, &new.redis)),
        ("jwt", differs(&old.jwt, &new.jwt)),
        // The login keys (a JWKS file, a secret's variable) are read once.
        ("identity", differs(&old.identity, &new.identity)),
        ("log.format", old.log.format != new.log.format),
    ];
    for (key, changed) in checks {
        if changed {
            keys.push(key);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str =
        "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues: {q: {}}\nupstreams: {}\nroutes: []\n";

    #[test]
    fn only_start_time_keys_are_reported() {
        let old = Config::from_yaml(BASE).unwrap();
        let same = Config::from_yaml(&format!(
            "{BASE}log: {{filter: debug}}\ncookies: {{secure: false}}\n\
             cors: {{allowed-origins: ['https://shop.example']}}\n\
             public-origin: https://tickets.example\n"
        ))
        .unwrap();
        assert!(needs_restart(&old, &same).is_empty());
        let moved = Config::from_yaml(&format!(
            "listen: 127.0.0.1:8081\nthreads: 3\n{BASE}jwt: {{issuer: other}}\n"
        ))
        .unwrap();
        assert_eq!(needs_restart(&old, &moved), ["listen", "threads", "jwt"]);
    }
}
