//! The benchmark reference: a bare Pingora pass-through proxy with default
//! settings, no checks at all. `scripts/bench.sh` runs it beside waitgate,
//! with the same threads and the same upstream, so the cost of waitgate's
//! own work (path checks, routing, the JWT check, identity headers) shows
//! as the difference.
//!
//! ```text
//! cargo run --release --example bare_proxy -- 127.0.0.1:8090 127.0.0.1:9000 1
//! curl -s 127.0.0.1:8090/anything
//! ```

use async_trait::async_trait;
use pingora::prelude::HttpPeer;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::Result;

struct Bare {
    upstream: std::net::SocketAddr,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();
    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:8090".into());
    let upstream = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:9000".into())
        .parse()
        .expect("upstream is ip:port");
    let threads = args.next().and_then(|t| t.parse().ok()).unwrap_or(1);
    let conf = ServerConf {
        threads,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(0),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut proxy = pingora::proxy::http_proxy_service(&server.configuration, Bare { upstream });
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    eprintln!("bare pingora proxy on {listen} -> {upstream}, {threads} thread(s)");
    server.run_forever();
}
