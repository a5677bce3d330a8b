//! The YAML configuration, parsed into one validated [`Config`].
//!
//! Parsing happens in two steps, as `waitgate -t` and start-up both need:
//! serde reads the file into plain structs that reject unknown keys, then
//! [`Config::from_yaml`] checks every value once and names the offending key
//! in its error. Nothing after this module needs to re-check a value.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// A section of the file whose keys each have a default: its raw struct
/// (kebab-case keys, unknown ones refused), each field beside its default,
/// and the `Default` made of them.
macro_rules! section {
    ($(#[$doc:meta])* $name:ident {
        $($(#[$field_doc:meta])* $field:ident: $ty:ty = $default:expr),* $(,)?
    }) => {
        $(#[$doc])*
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
        pub(super) struct $name {
            $($(#[$field_doc])* pub(super) $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $($field: $default,)*
                }
            }
        }
    };
}

mod browser;
mod checks;
mod defaults;
mod jwt;
mod limits;
mod listen;
mod log;
mod queue;
mod redis;
mod upstream;

pub use browser::{BrowserConfig, IdentityConfig, IdentityKey};
use browser::{RawCookies, RawCors, RawIdentity};
use checks::*;
pub use checks::{ConfigError, MAX_DURATION_MS, MIN_INTERVAL_MS};
pub use jwt::JwtConfig;
use jwt::RawJwt;
use limits::RawLimits;
pub use limits::{LimitsConfig, Rate};
use listen::{check_tls_pair, RawTlsListener};
pub use listen::{ClientLimits, TlsListener};
use log::RawLog;
pub use log::{LogConfig, LogFormat, DEFAULT_LOG_FILTER};
use queue::RawQueue;
pub use queue::{
    AdmissionConfig, ChallengeConfig, HeartbeatConfig, InviteConfig, PageConfig, QueueConfig,
    MAX_BATCH_SIZE, MAX_DIFFICULTY_BITS, MAX_EXACT_RANK_WINDOW,
};
use redis::RawRedis;
pub use redis::{RedisConfig, RedisMode, RedisTls};
use upstream::{check_route_prefix, RawRoute, RawUpstream};
pub use upstream::{HealthCheckConfig, LoadBalancing, RouteConfig, UpstreamConfig};

/// The whole, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the proxy (queue API and protected routes) listens.
    pub listen: SocketAddr,
    /// Where `/metrics`, `/healthz` and `/readyz` listen: kept apart from
    /// `listen` so that the public listener never exposes them.
    pub admin_listen: SocketAddr,
    /// A second proxy listener, with TLS, speaking HTTP/2 and HTTP/1.1.
    pub listen_tls: Option<TlsListener>,
    /// Worker threads of the proxy service.
    pub threads: usize,
    /// SIGTERM: stop accepting, drain in-flight requests, exit within this.
    pub grace_period: Duration,
    pub clients: ClientLimits,
    /// Serve plain GET/HEAD requests with a valid token, and rank polls,
    /// through waitgate's own HTTP/1.1 relay instead of Pingora's proxy.
    /// Same answers either way; `false` is the switch to rule it out.
    pub direct_lane: bool,
    /// Peers whose `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Request-Id`
    /// are believed (load balancers in front of waitgate).
    pub trusted_proxies: Vec<ipnet::IpNet>,
    pub redis: RedisConfig,
    pub jwt: JwtConfig,
    /// Queues by name, in name order.
    pub queues: BTreeMap<String, QueueConfig>,
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// In file order: the first matching prefix wins.
    pub routes: Vec<RouteConfig>,
    pub log: LogConfig,
    /// Cookies, this site's origin and the other origins allowed to call
    /// the queue API from a browser.
    pub browsers: BrowserConfig,
    /// Take register's and rank's userId from the site's own login token
    /// instead of from the request.
    pub identity: Option<IdentityConfig>,
    /// How often one client may register, poll and trade a credential.
    pub limits: LimitsConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawConfig {
    #[serde(default = "defaults::listen")]
    listen: String,
    #[serde(default = "defaults::admin_listen")]
    admin_listen: String,
    #[serde(default)]
    listen_tls: Option<RawTlsListener>,
    #[serde(default = "defaults::threads")]
    threads: u64,
    #[serde(default = "defaults::grace_period_s")]
    grace_period_s: u64,
    #[serde(default = "defaults::max_connections")]
    max_connections: u64,
    #[serde(default = "defaults::client_timeout_ms")]
    client_header_timeout_ms: u64,
    #[serde(default = "defaults::client_timeout_ms")]
    client_body_timeout_ms: u64,
    #[serde(default = "defaults::direct_lane")]
    direct_lane: bool,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    redis: RawRedis,
    #[serde(default)]
    jwt: RawJwt,
    #[serde(deserialize_with = "unique_keys")]
    queues: BTreeMap<String, RawQueue>,
    #[serde(deserialize_with = "unique_keys")]
    upstreams: BTreeMap<String, RawUpstream>,
    routes: Vec<RawRoute>,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    cookies: RawCookies,
    #[serde(default)]
    cors: RawCors,
    #[serde(default)]
    public_origin: Option<String>,
    #[serde(default)]
    identity: Option<RawIdentity>,
    #[serde(default)]
    limits: RawLimits,
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_yaml(&text)
    }

    /// Parses and validates a configuration held in memory.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        raw.validate()
    }

    /// The queue a request names, or the only one when it names none.
    pub fn single_queue(&self) -> Option<&str> {
        match self.queues.len() {
            1 => self.queues.keys().next().map(String::as_str),
            _ => None,
        }
    }
}

impl RawConfig {
    fn validate(self) -> Result<Config, ConfigError> {
        let listen = socket_addr("listen", &self.listen)?;
        let admin_listen = socket_addr("admin-listen", &self.admin_listen)?;
        let listen_tls = match self.listen_tls {
            None => None,
            Some(tls) => {
                let address = socket_addr("listen-tls.address", &tls.address)?;
                if overlap(address, listen) || overlap(address, admin_listen) {
                    return Err(invalid(
                        "listen-tls.address",
                        "must differ from listen and admin-listen",
                    ));
                }
                for (key, path) in [("cert-file", &tls.cert_file), ("key-file", &tls.key_file)] {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        invalid(
                            format!("listen-tls.{key}"),
                            format!("{}: {e}", path.display()),
                        )
                    })?;
                    if !text.contains("-----BEGIN ") {
                        return Err(invalid(
                            format!("listen-tls.{key}"),
                            format!("{}: not PEM", path.display()),
                        ));
                    }
                }
                check_tls_pair(&tls.cert_file, &tls.key_file)?;
                Some(TlsListener {
                    address,
                    cert_file: tls.cert_file,
                    key_file: tls.key_file,
                    h2_max_streams: ranged(
                        "listen-tls.h2-max-streams",
                        tls.h2_max_streams,
                        1,
                        1000,
                    )? as u32,
                    // The protocol's own bounds: at least its initial
                    // window, at most 2^31 - 1.
                    h2_window_bytes: ranged(
                        "listen-tls.h2-window-bytes",
                        tls.h2_window_bytes,
                        65_535,
                        (1 << 31) - 1,
                    )? as u32,
                })
            }
        };
        if overlap(listen, admin_listen) {
            return Err(invalid(
                "admin-listen",
                format!("must differ from listen ({listen})"),
            ));
        }
        let threads = ranged("threads", self.threads, 1, 256)? as usize;
        let grace_period =
            Duration::from_secs(ranged("grace-period-s", self.grace_period_s, 0, 300)?);
        let clients = ClientLimits {
            max_connections: ranged("max-connections", self.max_connections, 1, 1_000_000)?
                as usize,
            header_timeout: Duration::from_millis(ranged(
                "client-header-timeout-ms",
                self.client_header_timeout_ms,
                100,
                600_000,
            )?),
            body_timeout: Duration::from_millis(ranged(
                "client-body-timeout-ms",
                self.client_body_timeout_ms,
                100,
                600_000,
            )?),
        };

        let trusted_proxies = self
            .trusted_proxies
            .iter()
            .enumerate()
            .map(|(i, cidr)| cidr_or_ip(&format!("trusted-proxies[{i}]"), cidr))
            .collect::<Result<Vec<_>, _>>()?;
        let redis = self.redis.validate()?;
        let jwt = self.jwt.validate()?;

        if self.queues.is_empty() {
            return Err(invalid("queues", "at least one queue is required"));
        }
        let mut queues = BTreeMap::new();
        for (name, raw) in self.queues {
            let key = format!("queues.{name}");
            check_name(&key, &name)?;
            let queue = raw.validate(&key)?;
            queues.insert(name, queue);
        }

        let mut upstreams = BTreeMap::new();
        for (name, raw) in self.upstreams {
            let key = format!("upstreams.{name}");
            check_name(&key, &name)?;
            upstreams.insert(name, raw.validate(&key)?);
        }

        let mut routes = Vec::with_capacity(self.routes.len());
        for (i, raw) in self.routes.into_iter().enumerate() {
            let key = format!("routes[{i}]");
            check_route_prefix(&format!("{key}.prefix"), &raw.prefix)?;
            if !upstreams.contains_key(&raw.upstream) {
                return Err(invalid(
                    format!("{key}.upstream"),
                    format!("names no upstream: `{}`", raw.upstream),
                ));
            }
            if !queues.contains_key(&raw.queue) {
                return Err(invalid(
                    format!("{key}.queue"),
                    format!("names no queue: `{}`", raw.queue),
                ));
            }
            // The first matching prefix wins, so a route under an earlier
            // one would never be used.
            if let Some((earlier, shadow)) =
                routes
                    .iter()
                    .enumerate()
                    .find(|(_, r): &(usize, &RouteConfig)| {
                        crate::path::under_prefix(&raw.prefix, &r.prefix)
                    })
            {
                let why = if shadow.prefix == raw.prefix {
                    format!(
                        "`{}` is already the prefix of routes[{earlier}]",
                        raw.prefix
                    )
                } else {
                    format!(
                        "`{}` is shadowed by routes[{earlier}] (`{}`), which comes first and \
                         matches every path under it; list the longer prefix first",
                        raw.prefix, shadow.prefix
                    )
                };
                return Err(invalid(format!("{key}.prefix"), why));
            }
            routes.push(RouteConfig {
                prefix: raw.prefix,
                upstream: raw.upstream,
                queue: raw.queue,
                websocket: raw.websocket,
                waiting_room: raw.waiting_room,
            });
        }

        let mut allowed = Vec::new();
        for (i, origin) in self.cors.allowed_origins.iter().enumerate() {
            allowed.push(crate::browser::origin::parse_origin(origin).ok_or_else(|| {
                invalid(
                    format!("cors.allowed-origins[{i}]"),
                    "must be an origin: http(s)://host[:port], with no path",
                )
            })?);
        }
        let public = match &self.public_origin {
            None => None,
            Some(origin) => {
                Some(crate::browser::origin::parse_origin(origin).ok_or_else(|| {
                    invalid(
                        "public-origin",
                        "must be an origin: http(s)://host[:port], with no path",
                    )
                })?)
            }
        };
        let browsers = BrowserConfig {
            secure_cookies: self.cookies.secure,
            origins: crate::browser::origin::Origins { public, allowed },
        };
        let identity = self.identity.map(RawIdentity::validate).transpose()?;

        Ok(Config {
            listen,
            admin_listen,
            listen_tls,
            threads,
            grace_period,
            clients,
            direct_lane: self.direct_lane,
            trusted_proxies,
            redis,
            jwt,
            queues,
            upstreams,
            routes,
            log: self.log.validate()?,
            browsers,
            identity,
            limits: self.limits.validate()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "
redis:
  url: redis://127.0.0.1:6379/0
queues:
  baseball: {}
upstreams: {}
routes: []
";

    fn with(extra: &str) -> String {
        format!("{MINIMAL}{extra}")
    }

    /// A file of these three sections and no routes.
    fn file(redis: &str, queues: &str, upstreams: &str) -> String {
        format!("redis: {redis}\nqueues: {queues}\nupstreams: {upstreams}\nroutes: []\n")
    }

    fn error_of(text: &str) -> String {
        Config::from_yaml(text).unwrap_err().to_string()
    }

    /// That the file is refused with an error that starts with `key`.
    fn refused_at(text: &str, key: &str) -> String {
        let e = error_of(text);
        assert!(e.starts_with(key), "{text:?} gave {e}");
        e
    }

    /// That the file is refused with an error that names `word`.
    fn refused_naming(text: &str, word: &str) {
        let e = error_of(text);
        assert!(e.contains(word), "{text:?} gave {e}");
    }

    #[test]
    fn minimal_file_takes_the_defaults() {
        let c = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.admin_listen.to_string(), "127.0.0.1:9091");
        assert_eq!(c.threads, 2);
        assert_eq!(c.grace_period, Duration::from_secs(5));
        assert_eq!(c.clients.max_connections, 10_000);
        assert_eq!(c.clients.header_timeout, Duration::from_secs(10));
        assert_eq!(c.clients.body_timeout, Duration::from_secs(10));
        assert_eq!(c.redis.command_timeout, Duration::from_millis(500));
        assert_eq!(c.jwt.ttl, Duration::from_secs(600));
        assert_eq!(c.jwt.leeway, Duration::from_secs(5));
        let q = &c.queues["baseball"];
        assert_eq!(q.heartbeat.timeout, Duration::from_secs(30));
        assert_eq!(q.heartbeat.cleanup_interval, Duration::from_secs(10));
        assert_eq!(q.heartbeat.cleanup_batch_size, 500);
        assert_eq!(q.admission.interval, Duration::from_secs(3));
        assert_eq!(q.admission.batch_size, 100);
        assert_eq!(q.admission.active_ttl, Duration::from_secs(600));
        assert_eq!(q.admission.max_active, 0);
        assert_eq!(c.single_queue(), Some("baseball"));
        assert!(c.direct_lane);
        assert!(c.trusted_proxies.is_empty());
    }

    #[test]
    fn trusted_proxies_take_cidrs_and_single_addresses() {
        let c = Config::from_yaml(&with(
            "trusted-proxies: ['10.0.0.0/8', '192.0.2.7', '2001:db8::1/32']\ndirect-lane: false\n",
        ))
        .unwrap();
        let nets: Vec<String> = c.trusted_proxies.iter().map(|n| n.to_string()).collect();
        assert_eq!(nets, ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"]);
        assert!(!c.direct_lane);
        refused_at(
            &with("trusted-proxies: ['10.0.0.0/8', 'lb.internal']\n"),
            "trusted-proxies[1]:",
        );
    }

    #[test]
    fn a_queue_names_its_exact_rank_window() {
        let yaml = |q: &str| file("{url: 'redis://x:1'}", &format!("{{a: {q}}}"), "{}");
        let c = Config::from_yaml(&yaml("{exact-rank-window: 5000}")).unwrap();
        assert_eq!(c.queues["a"].exact_rank_window, 5000);
        let c = Config::from_yaml(&yaml("{}")).unwrap();
        assert_eq!(c.queues["a"].exact_rank_window, 1000);
        refused_naming(&yaml("{exact-rank-window: -1}"), "exact-rank-window");
        refused_naming(
            &yaml("{exact-rank-window: 1000000001}"),
            "exact-rank-window",
        );
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        refused_naming(&with("treads: 4\n"), "treads");
        refused_naming(
            &file("{url: 'redis://x:1', timeout: 3}", "{a: {}}", "{}"),
            "timeout",
        );
        refused_naming(
            &file("{url: 'redis://x:1'}", "{a: {admission: {batch: 3}}}", "{}"),
            "batch",
        );
    }

    #[test]
    fn an_upstream_address_listed_twice_is_refused() {
        let e = refused_at(
            &file(
                "{url: 'redis://x:1'}",
                "{a: {}}",
                "{u: {addresses: ['127.0.0.1:1', ' 127.0.0.1:1']}}",
            ),
            "upstreams.u.addresses:",
        );
        assert!(e.contains("listed twice"), "{e}");
    }

    #[test]
    fn required_keys_are_named_when_missing() {
        refused_naming("queues: {a: {}}\nupstreams: {}\nroutes: []\n", "redis");
        refused_naming(
            "redis: {url: 'redis://x:1'}\nupstreams: {}\nroutes: []\n",
            "queues",
        );
        refused_at(&file("{url: 'redis://x:1'}", "{}", "{}"), "queues:");
    }

    #[test]
    fn listeners_that_would_share_connections_overlap() {
        let a = |text: &str| text.parse::<SocketAddr>().unwrap();
        for (x, y) in [
            ("127.0.0.1:80", "127.0.0.1:80"),
            ("0.0.0.0:80", "10.1.2.3:80"),
            ("[::]:80", "127.0.0.1:80"),
            ("[::]:80", "[::1]:80"),
            ("0.0.0.0:80", "[::ffff:10.0.0.1]:80"),
        ] {
            assert!(overlap(a(x), a(y)), "{x} {y}");
            assert!(overlap(a(y), a(x)), "{y} {x}");
        }
        for (x, y) in [
            ("0.0.0.0:80", "0.0.0.0:81"),
            ("127.0.0.1:80", "127.0.0.2:80"),
            ("0.0.0.0:80", "[::1]:80"),
        ] {
            assert!(!overlap(a(x), a(y)), "{x} {y}");
        }
    }

    #[test]
    fn values_out_of_range_name_their_key() {
        let cases = [
            ("threads: 0\n", "threads:"),
            ("grace-period-s: 100000\n", "grace-period-s:"),
            ("listen: localhost\n", "listen:"),
            ("admin-listen: 127.0.0.1:8080\n", "admin-listen:"),
            (
                "listen: 0.0.0.0:8080\nadmin-listen: 127.0.0.1:8080\n",
                "admin-listen:",
            ),
            (
                "listen: '[::]:8080'\nadmin-listen: 127.0.0.1:8080\n",
                "admin-listen:",
            ),
            ("max-connections: 0\n", "max-connections:"),
            ("client-header-timeout-ms: 5\n", "client-header-timeout-ms:"),
        ];
        for (extra, key) in cases {
            let e = error_of(&with(extra));
            assert!(e.starts_with(key), "{extra:?} gave {e}");
        }
        let bad_queue = |body: &str| {
            error_of(&file(
                "{url: 'redis://x:1'}",
                &format!("{{q: {body}}}"),
                "{}",
            ))
        };
        let e = bad_queue("{admission: {batch-size: 0}}");
        assert!(e.starts_with("queues.q.admission.batch-size:"), "{e}");
        let e = bad_queue("{admission: {interval-ms: 0}}");
        assert!(e.starts_with("queues.q.admission.interval-ms:"), "{e}");
        let e = bad_queue("{heartbeat: {timeout-ms: 1}}");
        assert!(e.starts_with("queues.q.heartbeat.timeout-ms:"), "{e}");
        let e = bad_queue("{heartbeat: {cleanup-batch-size: 0}}");
        assert!(
            e.starts_with("queues.q.heartbeat.cleanup-batch-size:"),
            "{e}"
        );
        let e = bad_queue("{admission: {batch-size: -3}}");
        assert!(e.contains("batch-size"), "{e}");
    }

    #[test]
    fn redis_url_is_checked() {
        refused_at(&file("{url: 'http://x:1'}", "{a: {}}", "{}"), "redis.url:");
        refused_at(
            &file(
                "{url: 'redis://x:1', command-timeout-ms: 0}",
                "{a: {}}",
                "{}",
            ),
            "redis.command-timeout-ms:",
        );
    }

    #[test]
    fn queue_names_cannot_break_the_hash_tag() {
        refused_at(
            &file("{url: 'redis://x:1'}", "{'a}b': {}}", "{}"),
            "queues.a}b:",
        );
    }

    #[test]
    fn routes_must_name_known_upstreams_and_queues() {
        let base = "redis: {url: 'redis://x:1'}\nqueues: {q: {}}\nupstreams: {up: {address: '127.0.0.1:9000'}}\n";
        let ok = format!("{base}routes: [{{prefix: /api/v1/follow-up, upstream: up, queue: q}}]\n");
        let c = Config::from_yaml(&ok).unwrap();
        assert_eq!(c.routes[0].prefix, "/api/v1/follow-up");
        assert_eq!(c.upstreams["up"].sni, "127.0.0.1");

        let route = |prefix: &str, upstream: &str, queue: &str| {
            format!("{{prefix: {prefix}, upstream: {upstream}, queue: {queue}}}")
        };
        let cases = [
            (vec![route("/x", "nope", "q")], "routes[0].upstream:"),
            (vec![route("/x", "up", "nope")], "routes[0].queue:"),
            (vec![route("x", "up", "q")], "routes[0].prefix:"),
            (vec![route("/x/", "up", "q")], "routes[0].prefix:"),
            (vec![route("/a/../b", "up", "q")], "routes[0].prefix:"),
            (
                vec![route("/api/v1/queue/x", "up", "q")],
                "routes[0].prefix:",
            ),
            (
                vec![route("/.well-known/waitgate", "up", "q")],
                "routes[0].prefix: overlaps /.well-known/waitgate/keys",
            ),
            (
                vec![route("/.well-known/waitgate/keys", "up", "q")],
                "routes[0].prefix: overlaps /.well-known/waitgate/keys",
            ),
            (
                vec![route("/x", "up", "q"), route("/x", "up", "q")],
                "routes[1].prefix:",
            ),
            (
                vec![route("/x", "up", "q"), route("/x/y", "up", "q")],
                "routes[1].prefix: shadowed by routes[0]",
            ),
        ];
        for (routes, expected) in cases {
            let e = refused_at(
                &format!("{base}routes: [{}]\n", routes.join(", ")),
                expected.split(' ').next().unwrap(),
            );
            if let Some((_, words)) = expected.split_once(' ') {
                assert!(e.contains(words), "{e}");
            }
        }
        // The longer prefix first is fine, and so is a sibling.
        Config::from_yaml(&format!(
            "{base}routes: [{{prefix: /x/y, upstream: up, queue: q}}, {{prefix: /x, upstream: up, queue: q}}, {{prefix: /xy, upstream: up, queue: q}}]\n"
        ))
        .unwrap();
    }

    #[test]
    fn upstream_address_needs_a_port() {
        let base = "redis: {url: 'redis://x:1'}\nqueues: {q: {}}\nroutes: []\n";
        refused_at(
            &format!("{base}upstreams: {{up: {{address: 'backend'}}}}\n"),
            "upstreams.up.address:",
        );
        refused_at(
            &format!("{base}upstreams: {{up: {{address: 'backend:0'}}}}\n"),
            "upstreams.up.address:",
        );
        let c = Config::from_yaml(&format!(
            "{base}upstreams: {{up: {{address: '[::1]:443', tls: true}}}}\n"
        ))
        .unwrap();
        assert_eq!(c.upstreams["up"].sni, "::1");
        assert_eq!(c.upstreams["up"].connect_timeout, Duration::from_secs(2));
        assert_eq!(c.upstreams["up"].read_timeout, Duration::from_secs(30));
        refused_at(
            &format!("{base}upstreams: {{up: {{address: 'b:1', connect-timeout-ms: 0}}}}\n"),
            "upstreams.up.connect-timeout-ms:",
        );
    }

    #[test]
    fn several_queues_have_no_default() {
        let c = Config::from_yaml(&file("{url: 'redis://x:1'}", "{a: {}, b: {}}", "{}")).unwrap();
        assert_eq!(c.single_queue(), None);
    }
}
