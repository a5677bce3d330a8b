//! The record of one request: its metrics and its access-log line, written
//! in one place for both paths.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::failure::Logged;
use crate::metrics::Metrics;

/// One access line at `$level`: the fields every line has, then `$more`.
macro_rules! access_line {
    ($record:ident, $level:ident, $duration_ms:ident, $($more:tt)*) => {
        tracing::$level!(
            target: "waitgate::access",
            request_id = $record.request_id,
            client = $record.client.map(tracing::field::display),
            peer = $record.relayed_by().map(tracing::field::display),
            method = $record.method,
            path = $record.path,
            status = $record.status,
            duration_ms = $duration_ms,
            route = $record.route,
            queue = $record.queue,
            user = $record.user,
            upstream = $record.upstream.map(tracing::field::display),
            $($more)*
        )
    };
}

/// What is known of a request once it is over.
#[derive(Debug)]
pub struct Record<'a> {
    pub request_id: &'a str,
    /// The client as a trusted peer named it, else the peer (see
    /// `forward::client`).
    pub client: Option<IpAddr>,
    /// The connection's peer.
    pub peer: Option<IpAddr>,
    pub method: &'a str,
    /// The path without the query (which may carry user data).
    pub path: &'a str,
    /// The status the client got; 0 when it got none (it went away).
    pub status: u16,
    /// The metric label: the queue API endpoint, the route's prefix, or
    /// `other`.
    pub route: &'a str,
    pub queue: Option<&'a str>,
    pub user: Option<&'a str>,
    /// The upstream address the request was sent to, if it was.
    pub upstream: Option<SocketAddr>,
    /// The name of that address's upstream.
    pub upstream_name: Option<&'a str>,
    pub elapsed: Duration,
    /// The upstream's failure, if the request failed there.
    pub failed: Option<Logged>,
}

impl Record<'_> {
    /// The peer, when it is not the client: the proxy that relayed the
    /// request.
    fn relayed_by(&self) -> Option<IpAddr> {
        self.peer.filter(|_| self.peer != self.client)
    }

    /// Counts the request and writes its access-log line (target
    /// `waitgate::access`): at `info` when the access log is on, and at
    /// `warn` when the request failed upstream, so that a failure is one
    /// line, whichever path served it. With the access log off, failures
    /// are at most one line a second with the `count` it stands for: an
    /// upstream that is down fails every request, and any holder of a
    /// token could otherwise fill the log.
    pub fn finish(&self, metrics: &Metrics) {
        let seconds = self.elapsed.as_secs_f64();
        if self.status > 0 {
            metrics.observe_request(self.route, self.status, seconds);
            if let (Some(name), Some(address)) = (self.upstream_name, self.upstream) {
                metrics
                    .upstreams
                    .observe(name, address, self.status, seconds);
            }
        }
        // Milliseconds with microseconds: what people read, still exact.
        let duration_ms = self.elapsed.as_micros() as f64 / 1000.0;
        if let Some(Logged { error, reason }) = self.failed {
            let count = if crate::logging::access_enabled() {
                Some(1)
            } else {
                crate::logging::limited("request failed")
            };
            let Some(count) = count else {
                return;
            };
            access_line!(
                self,
                warn,
                duration_ms,
                error,
                reason,
                count,
                "request failed"
            );
            return;
        }
        if !crate::logging::access_enabled() {
            return;
        }
        access_line!(self, info, duration_ms, "request");
    }
}
