//! The protected routes: path prefix -> (queue, upstream).

use crate::browser::origin::Origins;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::Config;
use crate::path::under_prefix;

pub use super::upstream::{ResolveError, Upstream, UPSTREAM_IDLE};

/// One protected route.
pub struct ProtectedRoute {
    pub prefix: String,
    /// Tokens for this route must carry this queue.
    pub queue: String,
    /// Shared with every other route that names the same upstream.
    pub upstream: Arc<Upstream>,
    /// Takes `Upgrade` requests (WebSocket); other routes refuse them.
    pub websocket: bool,
    /// Browsers without a valid token are sent to the waiting room.
    pub waiting_room: bool,
}

/// The routes in file order: the first matching prefix wins.
pub struct RouteTable {
    routes: Vec<ProtectedRoute>,
    upstreams: Vec<Arc<Upstream>>,
    /// This site's origin and the allowed others: a request that a token
    /// cookie authenticates and that may change something must come from
    /// one of them.
    origins: Origins,
}

impl RouteTable {
    /// Builds every upstream a route names, resolving its names now
    /// (blocking: at start, or off the runtime on a reload); they are
    /// resolved again in the background (`resolve-interval-s`).
    pub fn build(config: &Config) -> Result<RouteTable, ResolveError> {
        RouteTable::build_after(config, None)
    }

    /// As [`RouteTable::build`], for a reload: an upstream of `previous`
    /// whose settings (and CA file) did not change is kept as it is, with
    /// its addresses' health and its connections. Built anew, every address
    /// counted as healthy until its first check, and a reload while one was
    /// down sent requests to it (502s).
    pub fn build_after(
        config: &Config,
        previous: Option<&RouteTable>,
    ) -> Result<RouteTable, ResolveError> {
        let mut upstreams: BTreeMap<&str, Arc<Upstream>> = BTreeMap::new();
        let mut routes = Vec::with_capacity(config.routes.len());
        for route in &config.routes {
            let upstream = match upstreams.get(route.upstream.as_str()) {
                Some(upstream) => upstream.clone(),
                None => {
                    let settings = &config.upstreams[&route.upstream];
                    let kept = previous.and_then(|p| {
                        p.upstreams
                            .iter()
                            .find(|u| u.name == route.upstream && u.built_from(settings))
                            .cloned()
                    });
                    let built = match kept {
                        Some(kept) => kept,
                        None => Arc::new(Upstream::build(&route.upstream, settings)?),
                    };
                    upstreams.insert(&route.upstream, built.clone());
                    built
                }
            };
            routes.push(ProtectedRoute {
                prefix: route.prefix.clone(),
                queue: route.queue.clone(),
                upstream,
                websocket: route.websocket,
                waiting_room: route.waiting_room,
            });
        }
        Ok(RouteTable {
            routes,
            upstreams: upstreams.into_values().collect(),
            origins: config.browsers.origins.clone(),
        })
    }

    /// The index of the first route whose prefix holds `path`.
    pub fn find(&self, path: &str) -> Option<usize> {
        self.routes
            .iter()
            .position(|r| under_prefix(path, &r.prefix))
    }

    pub fn origins(&self) -> &Origins {
        &self.origins
    }

    pub fn get(&self, index: usize) -> Option<&ProtectedRoute> {
        self.routes.get(index)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ProtectedRoute> {
        self.routes.iter()
    }

    /// Every upstream a route names, once each.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }
}

/// Runs every upstream's discovery and health checks when they are due,
/// for whatever route table is current (a reload brings new upstreams),
/// and sets `waitgate_upstream_up` from what they found, every second.
pub struct Maintenance {
    pub routes: Arc<arc_swap::ArcSwap<RouteTable>>,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// How often due work is looked for; below the shortest check interval.
const MAINTENANCE_TICK: std::time::Duration = std::time::Duration::from_millis(25);

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for Maintenance {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let mut tick = tokio::time::interval(MAINTENANCE_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut swept = std::time::Instant::now();
        let mut gauged: Option<std::time::Instant> = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            if swept.elapsed() >= super::rules::pool::SWEEP_EVERY {
                swept = std::time::Instant::now();
                tokio::task::spawn_blocking(super::rules::pool::sweep);
            }
            let routes = self.routes.load_full();
            if gauged.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(1)) {
                gauged = Some(std::time::Instant::now());
                self.metrics
                    .upstreams
                    .set_health(routes.upstreams().iter().flat_map(|u| {
                        u.health()
                            .into_iter()
                            .map(|(address, up)| (u.name.clone(), address, up))
                    }));
            }
            for upstream in routes.upstreams() {
                let upstream = upstream.clone();
                // Each on its own task: a slow check of one upstream never
                // delays another's.
                tokio::spawn(async move { upstream.maintain().await });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(routes: &str) -> RouteTable {
        let yaml = format!(
            "redis: {{url: 'redis://x:1'}}\nqueues: {{q: {{}}, r: {{}}}}\nupstreams: {{a: {{address: '127.0.0.1:9000'}}, b: {{address: '127.0.0.1:9001'}}}}\nroutes: {routes}\n"
        );
        RouteTable::build(&Config::from_yaml(&yaml).unwrap()).unwrap()
    }

    #[test]
    fn first_matching_prefix_wins_at_segment_boundaries() {
        let t = table(
            "[{prefix: /api/v1/follow-up/special, upstream: b, queue: r}, {prefix: /api/v1/follow-up, upstream: a, queue: q}]",
        );
        assert_eq!(t.find("/api/v1/follow-up/special/x"), Some(0));
        assert_eq!(t.find("/api/v1/follow-up/specialx"), Some(1));
        assert_eq!(t.find("/api/v1/follow-up"), Some(1));
        assert_eq!(t.find("/api/v1/follow-upx"), None);
        assert_eq!(t.find("/api/v1/Follow-up"), None);
        assert_eq!(t.get(0).unwrap().queue, "r");
        assert_eq!(t.get(1).unwrap().upstream.name, "a");
    }

    #[test]
    fn routes_to_one_upstream_share_it() {
        let t = table("[{prefix: /x, upstream: a, queue: q}, {prefix: /y, upstream: a, queue: r}]");
        assert!(Arc::ptr_eq(
            &t.get(0).unwrap().upstream,
            &t.get(1).unwrap().upstream
        ));
        assert_eq!(t.upstreams().len(), 1);
    }
}
