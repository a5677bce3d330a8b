//! The upstreams' metrics: what each address answered and how long the
//! requests sent to an upstream took, and each address's health as the
//! checks see it. Written from the request record (both HTTP paths) and
//! from the upstreams' maintenance.

use std::collections::HashSet;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Mutex;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::BUCKETS;

pub struct UpstreamMetrics {
    /// Requests sent to an upstream address, by the status the client got
    /// (502 or 504 when the upstream failed).
    requests: IntCounterVec,
    /// From the request head to the end of the reply, for requests sent to
    /// the upstream.
    duration: HistogramVec,
    /// 1 while an address takes traffic (healthy, or without a check).
    up: IntGaugeVec,
    /// The (upstream, address) series `up` holds, so that an address a
    /// reload or a new resolution dropped loses its series.
    known: Mutex<HashSet<(String, String)>>,
}

/// `value` written into `buffer` without allocating: the label values of
/// a request's series, on the hot path.
fn label(buffer: &mut [u8], value: impl std::fmt::Display) -> &str {
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    let _ = write!(cursor, "{value}");
    let end = cursor.position() as usize;
    std::str::from_utf8(&buffer[..end]).unwrap_or("")
}

impl UpstreamMetrics {
    pub fn new(registry: &Registry) -> UpstreamMetrics {
        let requests = IntCounterVec::new(
            Opts::new(
                "waitgate_upstream_requests_total",
                "Requests sent to an upstream address, by the status the client got.",
            ),
            &["upstream", "address", "status"],
        )
        .expect("static metric");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "waitgate_upstream_duration_seconds",
                "Time from request header to the end of the reply, for requests sent to the upstream.",
            )
            .buckets(BUCKETS.to_vec()),
            &["upstream"],
        )
        .expect("static metric");
        let up = IntGaugeVec::new(
            Opts::new(
                "waitgate_upstream_up",
                "1 while an upstream address takes traffic (healthy, or not checked), else 0.",
            ),
            &["upstream", "address"],
        )
        .expect("static metric");
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(duration.clone()),
            Box::new(up.clone()),
        ] {
            registry.register(collector).expect("registered once");
        }
        UpstreamMetrics {
            requests,
            duration,
            up,
            known: Mutex::new(HashSet::new()),
        }
    }

    /// Counts a request sent to `address` of `upstream`.
    pub fn observe(&self, upstream: &str, address: SocketAddr, status: u16, seconds: f64) {
        let (mut a, mut s) = ([0u8; 64], [0u8; 8]);
        let address = label(&mut a, address);
        let status = label(&mut s, status);
        self.requests
            .with_label_values(&[upstream, address, status])
            .inc();
        self.duration
            .with_label_values(&[upstream])
            .observe(seconds);
    }

    /// Sets each address's health, from every upstream's addresses now
    /// (`(upstream, address, takes traffic)`); the series of an address no
    /// longer among them are removed.
    pub fn set_health(&self, now: impl IntoIterator<Item = (String, SocketAddr, bool)>) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = HashSet::new();
        for (upstream, address, up) in now {
            let address = address.to_string();
            self.up
                .with_label_values(&[&upstream, &address])
                .set(i64::from(up));
            seen.insert((upstream, address));
        }
        for (upstream, address) in known.difference(&seen) {
            let _ = self.up.remove_label_values(&[upstream, address]);
        }
        *known = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_written_without_allocating_and_whole() {
        let mut buffer = [0u8; 64];
        let address: SocketAddr = "[2001:db8::1]:8443".parse().unwrap();
        assert_eq!(label(&mut buffer, address), "[2001:db8::1]:8443");
        let mut status = [0u8; 8];
        assert_eq!(label(&mut status, 504u16), "504");
    }

    #[test]
    fn an_address_no_longer_there_loses_its_series() {
        let registry = Registry::new();
        let metrics = UpstreamMetrics::new(&registry);
        let a: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:9001".parse().unwrap();
        metrics.set_health([("t".to_string(), a, true), ("t".to_string(), b, false)]);
        assert_eq!(
            metrics.up.with_label_values(&["t", "127.0.0.1:9001"]).get(),
            0
        );
        metrics.set_health([("t".to_string(), a, true)]);
        let series: Vec<_> = registry
            .gather()
            .into_iter()
            .filter(|f| f.name() == "waitgate_upstream_up")
            .flat_map(|f| f.get_metric().to_vec())
            .collect();
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].get_gauge().get_value(), 1.0);
    }
}
