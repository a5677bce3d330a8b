//! Per-client limits on the queue API (`limits.*-per-client`). Both HTTP
//! paths ask [`ClientLimits::check_endpoint`] (and the Pingora path, which
//! serves the waiting-room page, [`ClientLimits::check_page`]) before
//! anything else is done for the request: a refusal is a 429
//! `rate_limited` with `Retry-After`, costs no Redis call, and is counted
//! in `waitgate_rate_limited_total{route}`. Imports nothing of the proxy.
//!
//! - The client is the address the proxy reads through `trusted-proxies`
//!   (`proxy::rules::forward::client`, the access log's `client`). An IPv6 client counts by its /64, the block one
//!   subscriber is usually given, so that a bot cannot take a new budget
//!   with each of its addresses.
//! - Each limit is a GCRA (the "generic cell rate algorithm" of ATM
//!   networks, as `nginx limit_req` and Envoy's local rate limit behave):
//!   one timestamp a client and limit, `burst` requests at once, then
//!   `per-second`.
//! - Memory is bounded: at most `limits.max-clients` clients are
//!   remembered (an LRU, the `lru` crate, in 16 shards), about 100 bytes
//!   each. A client forgotten starts again with a full burst. The keyed
//!   limiter of the `governor` crate has no bound on its keys, which an
//!   attacker with many addresses would grow without end: hence our own
//!   few lines over an LRU.
//! - A reload applies new rates at once; one that changes a rate starts
//!   every client's count again (a count kept in one rate's units means
//!   nothing in another's: a raised limit must not wait out the old one).

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
use lru::LruCache;

use crate::config::{LimitsConfig, Rate};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::path::Endpoint;

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// Register calls and waiting-room page loads.
    Register,
    /// Rank polls.
    Rank,
    /// Token exchanges.
    Token,
}

impl Limited {
    fn index(self) -> usize {
        self as usize
    }
}

const SHARDS: usize = 16;

/// A client: its IPv4 address, or its IPv6 /64, as 128 bits.
type Client = u128;

/// Each limit's theoretical arrival time, in µs since [`ClientLimits`]
/// started (0: never seen).
type Used = [u64; 3];

type Shard = Mutex<LruCache<Client, Used, ahash::RandomState>>;

pub struct ClientLimits {
    config: ArcSwap<LimitsConfig>,
    shards: Vec<Shard>,
    hasher: ahash::RandomState,
    started: Instant,
    metrics: Arc<Metrics>,
}

fn client_key(ip: IpAddr) -> Client {
    match ip.to_canonical() {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        // The /64, and a bit no IPv4 key has.
        IpAddr::V6(v6) => (u128::from(v6) & !((1u128 << 64) - 1)) | 1 << 63,
    }
}

impl ClientLimits {
    pub fn new(config: &LimitsConfig, metrics: Arc<Metrics>) -> ClientLimits {
        let per_shard = NonZeroUsize::new(config.clients.div_ceil(SHARDS)).expect("not zero");
        ClientLimits {
            config: ArcSwap::from_pointee(config.clone()),
            shards: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::with_hasher(per_shard, ahash::RandomState::new())))
                .collect(),
            hasher: ahash::RandomState::new(),
            started: Instant::now(),
            metrics,
        }
    }

    /// A reload's limits: new rates and size. A changed rate starts every
    /// client's count again.
    pub fn update(&self, config: &LimitsConfig) {
        let old = self.config.load_full();
        let rates_changed =
            (old.register, old.rank, old.token) != (config.register, config.rank, config.token);
        if let Some(per_shard) = NonZeroUsize::new(config.clients.div_ceil(SHARDS)) {
            for shard in &self.shards {
                let mut clients = shard.lock().unwrap_or_else(|p| p.into_inner());
                if rates_changed {
                    clients.clear();
                }
                clients.resize(per_shard);
            }
        }
        self.config.store(Arc::new(config.clone()));
    }

    /// Whether `client` may make one more call of `endpoint` (a dropout is
    /// never limited: it only frees a place; nor is a challenge, which
    /// costs one HMAC and no Redis call).
    pub fn check_endpoint(
        &self,
        endpoint: Endpoint,
        client: Option<IpAddr>,
    ) -> Result<(), ApiError> {
        let (what, route) = match endpoint {
            Endpoint::Register => (Limited::Register, "register"),
            Endpoint::Rank => (Limited::Rank, "rank"),
            Endpoint::Token => (Limited::Token, "token"),
            Endpoint::Dropout | Endpoint::Challenge | Endpoint::Fairness | Endpoint::Keys => {
                return Ok(())
            }
        };
        self.check(what, route, client)
    }

    /// Whether `client` may load the waiting-room page once more: a load
    /// joins the queue (or polls), so it counts against the register limit.
    pub fn check_page(&self, client: Option<IpAddr>) -> Result<(), ApiError> {
        self.check(Limited::Register, "page", client)
    }

    /// Whether `client` may make one more request that `what` counts;
    /// `route` names it in the metric when it may not. A request with no
    /// known client address (never over TCP) is not limited.
    pub fn check(
        &self,
        what: Limited,
        route: &'static str,
        client: Option<IpAddr>,
    ) -> Result<(), ApiError> {
        let config = self.config.load();
        let rate = match what {
            Limited::Register => config.register,
            Limited::Rank => config.rank,
            Limited::Token => config.token,
        };
        let (Some(rate), Some(ip)) = (rate, client) else {
            return Ok(());
        };
        let now = self.started.elapsed().as_micros() as u64;
        let key = client_key(ip);
        let shard = &self.shards[self.hasher.hash_one(key) as usize % SHARDS];
        let waited = {
            let mut clients = shard.lock().unwrap_or_else(|p| p.into_inner());
            let used = clients.get_or_insert_mut(key, || [0; 3]);
            gcra(&mut used[what.index()], now, rate)
        };
        match waited {
            None => Ok(()),
            Some(wait_us) => {
                self.metrics.rate_limited.with_label_values(&[route]).inc();
                Err(ApiError::RateLimited {
                    retry_after_s: wait_us.div_ceil(1_000_000).max(1),
                })
            }
        }
    }
}

/// One request at `now` (µs) against a limit whose theoretical arrival
/// time is `tat`: `None` and `tat` moved on when it may go, else the µs
/// until it may.
fn gcra(tat: &mut u64, now: u64, rate: Rate) -> Option<u64> {
    let interval = (1_000_000.0 / rate.per_second).max(1.0) as u64;
    let tolerance = interval.saturating_mul(u64::from(rate.burst));
    let next = (*tat).max(now).saturating_add(interval);
    if next > now.saturating_add(tolerance) {
        return Some(next - now - tolerance);
    }
    *tat = next;
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: f64, burst: u32) -> Rate {
        Rate { per_second, burst }
    }

    #[test]
    fn a_burst_then_the_rate() {
        let mut tat = 0;
        let r = rate(2.0, 3);
        let now = 10_000_000;
        for _ in 0..3 {
            assert_eq!(gcra(&mut tat, now, r), None);
        }
        // The fourth at once waits one interval (0.5 s).
        assert_eq!(gcra(&mut tat, now, r), Some(500_000));
        assert_eq!(gcra(&mut tat, now + 499_999, r), Some(1));
        assert_eq!(gcra(&mut tat, now + 500_000, r), None);
        // Two per second from then on, never more.
        let mut allowed = 0;
        for ms in 0..10_000u64 {
            if gcra(&mut tat, now + 500_000 + ms * 1_000, r).is_none() {
                allowed += 1;
            }
        }
        assert!((19..=21).contains(&allowed), "{allowed}");
        // A quiet spell refills the burst, and no more than it.
        let later = now + 60_000_000;
        let burst = (0..10)
            .filter(|_| gcra(&mut tat, later, r).is_none())
            .count();
        assert_eq!(burst, 3);
    }

    #[test]
    fn clients_are_addresses_and_ipv6_64s() {
        let key = |s: &str| client_key(s.parse().unwrap());
        assert_eq!(key("192.0.2.1"), key("::ffff:192.0.2.1"));
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_ne!(key("::c000:201"), key("192.0.2.1"));
    }

    #[test]
    fn limits_count_per_client_and_forget_the_least_recent() {
        let config = crate::config::Config::from_yaml(
            "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues: {q: {}}\nupstreams: {}\nroutes: []\n\
             limits: {register-per-client: {per-second: 1, burst: 2}, max-clients: 1600}\n",
        )
        .unwrap();
        let metrics = Arc::new(Metrics::new(&config));
        let limits = ClientLimits::new(&config.limits, metrics.clone());
        let a = Some("192.0.2.1".parse().unwrap());
        let b = Some("192.0.2.2".parse().unwrap());
        assert!(limits.check(Limited::Register, "register", a).is_ok());
        assert!(limits.check(Limited::Register, "register", a).is_ok());
        assert_eq!(
            limits.check(Limited::Register, "register", a),
            Err(ApiError::RateLimited { retry_after_s: 1 })
        );
        assert!(limits.check(Limited::Register, "register", b).is_ok());
        // No rank limit is set; no address, no limit.
        assert!((0..10).all(|_| limits.check(Limited::Rank, "rank", a).is_ok()));
        assert!((0..10).all(|_| limits.check(Limited::Register, "page", None).is_ok()));
        assert_eq!(
            metrics.rate_limited.with_label_values(&["register"]).get(),
            1
        );
        // 1,600 clients remembered at most: a flood of others pushes `a` out,
        // and it starts again with a full burst.
        for i in 0..20_000u32 {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            let _ = limits.check(Limited::Register, "register", Some(ip.into()));
        }
        let held: usize = limits.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= 1_600, "{held}");
        assert!(limits.check(Limited::Register, "register", a).is_ok());
    }
}
