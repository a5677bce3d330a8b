//! The protected routes: path prefix -> (queue, upstream peer).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use pingora::prelude::HttpPeer;

use crate::config::Config;
use crate::path::under_prefix;

/// How long an idle upstream connection stays in the pool.
pub const UPSTREAM_IDLE: Duration = Duration::from_secs(55);

/// One protected route, with its upstream resolved once at start.
pub struct ProtectedRoute {
    pub prefix: String,
    /// Tokens for this route must carry this queue.
    pub queue: String,
    pub upstream: String,
    /// The upstream's address, resolved at start, and how to reach it: what
    /// the direct lane (`super::lane`) needs.
    pub addr: SocketAddr,
    pub tls: bool,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    /// Takes `Upgrade` requests (WebSocket); other routes refuse them.
    pub websocket: bool,
    /// Cloned per request. Pingora pools upstream connections by peer, so
    /// equal peers share kept-alive connections.
    peer: HttpPeer,
}

impl ProtectedRoute {
    pub fn peer(&self) -> Box<HttpPeer> {
        Box::new(self.peer.clone())
    }
}

/// Why a route table could not be built.
#[derive(Debug, thiserror::Error)]
#[error("upstreams.{name}.address: cannot resolve `{address}`: {problem}")]
pub struct ResolveError {
    name: String,
    address: String,
    problem: String,
}

/// The routes in file order: the first matching prefix wins.
pub struct RouteTable {
    routes: Vec<ProtectedRoute>,
}

impl RouteTable {
    /// Resolves every upstream address once. DNS changes need a restart;
    /// resolving per request would put a blocking lookup on the hot path.
    pub fn build(config: &Config) -> Result<RouteTable, ResolveError> {
        let mut routes = Vec::with_capacity(config.routes.len());
        for route in &config.routes {
            let upstream = &config.upstreams[&route.upstream];
            let addr = resolve(&route.upstream, &upstream.address)?;
            let mut peer = HttpPeer::new(addr, upstream.tls, upstream.sni.clone());
            peer.options.connection_timeout = Some(upstream.connect_timeout);
            peer.options.read_timeout = Some(upstream.read_timeout);
            peer.options.write_timeout = Some(upstream.read_timeout);
            // Kept-alive connections idle this long are closed rather than
            // reused: upstreams commonly close idle connections after 60 s+.
            peer.options.idle_timeout = Some(UPSTREAM_IDLE);
            routes.push(ProtectedRoute {
                prefix: route.prefix.clone(),
                queue: route.queue.clone(),
                upstream: route.upstream.clone(),
                addr,
                tls: upstream.tls,
                connect_timeout: upstream.connect_timeout,
                read_timeout: upstream.read_timeout,
                websocket: route.websocket,
                peer,
            });
        }
        Ok(RouteTable { routes })
    }

    /// The index of the first route whose prefix holds `path`.
    pub fn find(&self, path: &str) -> Option<usize> {
        self.routes
            .iter()
            .position(|r| under_prefix(path, &r.prefix))
    }

    pub fn get(&self, index: usize) -> Option<&ProtectedRoute> {
        self.routes.get(index)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ProtectedRoute> {
        self.routes.iter()
    }
}

fn resolve(name: &str, address: &str) -> Result<SocketAddr, ResolveError> {
    let error = |problem: String| ResolveError {
        name: name.to_string(),
        address: address.to_string(),
        problem,
    };
    address
        .to_socket_addrs()
        .map_err(|e| error(e.to_string()))?
        .next()
        .ok_or_else(|| error("no address found".to_string()))
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
        assert_eq!(t.get(1).unwrap().upstream, "a");
    }
}
