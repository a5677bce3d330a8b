//! The waitgate config a test starts with, as a YAML document to change by
//! key ([`TestConfig`]) rather than by editing its text.

#![allow(dead_code)]

use serde_yaml::{Mapping, Value};

use super::{free_port, Redis, Waitgate};

/// The ports a config is written for.
pub struct Ports {
    pub listen: u16,
    pub admin: u16,
}

impl Ports {
    pub fn new() -> Ports {
        Ports {
            listen: free_port(),
            admin: free_port(),
        }
    }
}

/// Whether the tests run with the direct lane (`direct-lane`): on unless
/// `WAITGATE_TEST_DIRECT_LANE=off`. CI runs the edge suites both ways, so
/// every behaviour they check holds whichever path serves a request.
pub fn direct_lane() -> bool {
    !matches!(
        std::env::var("WAITGATE_TEST_DIRECT_LANE").as_deref(),
        Ok("off" | "false" | "0")
    )
}

/// The environment variable `name` read as a `T`, or `default` when it is
/// unset or does not parse: a test's size or seed, set by whoever runs it.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether a test config has a `direct-lane` key: not with
/// `WAITGATE_TEST_DIRECT_LANE=unset` (for builds that predate the key).
fn direct_lane_key() -> bool {
    std::env::var("WAITGATE_TEST_DIRECT_LANE").as_deref() != Ok("unset")
}

/// A waitgate config as a YAML document. [`TestConfig::new`] is the
/// harness's: one queue `baseball` (the defaults, but at most one active
/// user: with [`Redis::start`](super::Redis::start) nobody is admitted),
/// one upstream `ticketing` and one route to it. Each method changes one
/// part and returns the config, so a test reads as what it changes:
///
/// ```ignore
/// let yaml = TestConfig::new(&redis.url(), &ports, upstream.port)
///     .set("redis.coalesce", "true")
///     .set("upstreams.ticketing.read-timeout-ms", "300")
///     .log("{format: json}")
///     .yaml();
/// ```
#[derive(Debug, Clone)]
pub struct TestConfig {
    doc: Value,
}

impl TestConfig {
    pub fn new(redis_url: &str, ports: &Ports, upstream_port: u16) -> TestConfig {
        let mut doc = Mapping::new();
        let mut put = |key: &str, value: Value| doc.insert(key.into(), value);
        put("listen", format!("127.0.0.1:{}", ports.listen).into());
        put("admin-listen", format!("127.0.0.1:{}", ports.admin).into());
        put("threads", 2.into());
        put("grace-period-s", 3.into());
        if direct_lane_key() {
            put("direct-lane", direct_lane().into());
        }
        put(
            "redis",
            parse(&format!("{{url: '{redis_url}', command-timeout-ms: 300}}")),
        );
        put(
            "jwt",
            parse("{issuer: waitgate, audience: ticketing, ttl-ms: 600000, leeway-s: 5}"),
        );
        put("queues", parse("baseball: {admission: {max-active: 1}}"));
        put(
            "upstreams",
            parse(&format!(
                "ticketing: {{address: '127.0.0.1:{upstream_port}'}}"
            )),
        );
        put(
            "routes",
            parse("[{prefix: /api/v1/follow-up, upstream: ticketing, queue: baseball}]"),
        );
        TestConfig {
            doc: Value::Mapping(doc),
        }
    }

    /// [`TestConfig::new`] on ports of its own ([`Ports::new`]).
    pub fn on_free_ports(redis_url: &str, upstream_port: u16) -> TestConfig {
        TestConfig::new(redis_url, &Ports::new(), upstream_port)
    }

    /// A config from its YAML text.
    pub fn from_yaml(yaml: &str) -> TestConfig {
        TestConfig { doc: parse(yaml) }
    }

    /// The config in a file (the one a running waitgate reads, say).
    pub fn read(path: &std::path::Path) -> TestConfig {
        TestConfig::from_yaml(&std::fs::read_to_string(path).unwrap())
    }

    /// `queues`: the whole mapping, as YAML (`"baseball: {}"`).
    pub fn queues(self, yaml: &str) -> TestConfig {
        self.set("queues", yaml)
    }

    /// Sets the value at a dotted path (`redis.coalesce`, `routes.0.queue`)
    /// to `yaml` parsed as YAML; mappings on the way are made as needed.
    pub fn set(mut self, path: &str, yaml: &str) -> TestConfig {
        *self.at(path) = parse(yaml);
        self
    }

    /// Takes out the value at a dotted path, if there is one.
    pub fn remove(mut self, path: &str) -> TestConfig {
        let (parent, last) = match path.rsplit_once('.') {
            Some((parent, last)) => (self.at(parent), last),
            None => (&mut self.doc, path),
        };
        match parent {
            Value::Mapping(m) => {
                m.remove(last);
            }
            Value::Sequence(s) => {
                s.remove(index(last, path));
            }
            _ => {}
        }
        self
    }

    /// Upstream `name`, as YAML (`"{address: '127.0.0.1:80'}"`).
    pub fn upstream(self, name: &str, yaml: &str) -> TestConfig {
        self.set(&format!("upstreams.{name}"), yaml)
    }

    /// One more route, after the others, as YAML.
    pub fn route(mut self, yaml: &str) -> TestConfig {
        let routes = self.at("routes");
        if !routes.is_sequence() {
            *routes = Value::Sequence(Vec::new());
        }
        routes.as_sequence_mut().unwrap().push(parse(yaml));
        self
    }

    /// `log`, as YAML (`"{format: json}"`).
    pub fn log(self, yaml: &str) -> TestConfig {
        self.set("log", yaml)
    }

    /// Every top-level key of `yaml` (a mapping, or nothing), each taking
    /// the place of the key of that name if there is one.
    pub fn with(mut self, yaml: &str) -> TestConfig {
        merge(&mut self.doc, yaml);
        self
    }

    /// [`TestConfig::with`] one level down: every key of `yaml` into the
    /// mapping at `path`.
    pub fn merge(mut self, path: &str, yaml: &str) -> TestConfig {
        merge(self.at(path), yaml);
        self
    }

    /// A TLS listener on `port` with the certificate and key in `dir`
    /// (`server.pem` and `server.key`, as [`tls::signed`](super::tls::signed)
    /// makes them for `server`).
    pub fn listen_tls(self, port: u16, dir: &std::path::Path) -> TestConfig {
        self.set(
            "listen-tls",
            &format!(
                "{{address: '127.0.0.1:{port}', cert-file: '{}', key-file: '{}'}}",
                dir.join("server.pem").display(),
                dir.join("server.key").display()
            ),
        )
    }

    /// The value at a dotted path, if there is one.
    pub fn get(&self, path: &str) -> Option<&Value> {
        path.split('.')
            .try_fold(&self.doc, |value, key| match value {
                Value::Sequence(s) => s.get(index(key, path)),
                _ => value.get(key),
            })
    }

    /// The ports it is written for (`listen` and `admin-listen`).
    pub fn ports(&self) -> Ports {
        let port = |key: &str| -> u16 {
            let address = self.get(key).and_then(Value::as_str).unwrap_or_default();
            let port = address.rsplit(':').next().unwrap_or_default();
            port.parse()
                .unwrap_or_else(|_| panic!("{key}: no port in {address:?}"))
        };
        Ports {
            listen: port("listen"),
            admin: port("admin-listen"),
        }
    }

    /// Starts waitgate with this config ([`Waitgate::start`]).
    pub fn start(&self) -> Waitgate {
        self.start_env(&[])
    }

    /// Starts waitgate with this config and extra environment variables
    /// ([`Waitgate::start_env`]).
    pub fn start_env(&self, env: &[(&str, &str)]) -> Waitgate {
        Waitgate::start_env(&self.yaml(), &self.ports(), env)
    }

    /// The document as YAML text, as waitgate reads it.
    pub fn yaml(&self) -> String {
        serde_yaml::to_string(&self.doc).unwrap()
    }

    /// The value at `path`, made (as an empty mapping on the way) if it is
    /// not there.
    fn at(&mut self, path: &str) -> &mut Value {
        let mut value = &mut self.doc;
        for key in path.split('.') {
            value = match value {
                Value::Sequence(s) => {
                    let i = index(key, path);
                    assert!(i < s.len(), "{path}: no item {i} of {}", s.len());
                    &mut s[i]
                }
                _ => {
                    if !value.is_mapping() {
                        *value = Value::Mapping(Mapping::new());
                    }
                    value
                        .as_mapping_mut()
                        .unwrap()
                        .entry(key.into())
                        .or_insert(Value::Null)
                }
            };
        }
        value
    }
}

/// Every key of `yaml` (a mapping, or nothing) into `into`.
fn merge(into: &mut Value, yaml: &str) {
    let extra = match parse(yaml) {
        Value::Null => return,
        Value::Mapping(extra) => extra,
        other => panic!("not a mapping of config keys: {other:?}"),
    };
    if !into.is_mapping() {
        *into = Value::Mapping(Mapping::new());
    }
    let into = into.as_mapping_mut().unwrap();
    for (key, value) in extra {
        into.insert(key, value);
    }
}

fn parse(yaml: &str) -> Value {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("not YAML ({e}): {yaml}"))
}

fn index(key: &str, path: &str) -> usize {
    key.parse()
        .unwrap_or_else(|_| panic!("{path}: {key:?} is not an index in a list"))
}

/// Starts waitgate on free ports with `queues` (YAML) for its queues, its
/// upstream on a port nobody listens on.
pub fn start_with_queues(redis: &Redis, queues: &str) -> Waitgate {
    TestConfig::on_free_ports(&redis.url(), free_port())
        .queues(queues)
        .start()
}

/// [`TestConfig::new`]'s config, as YAML.
pub fn config(redis_url: &str, ports: &Ports, upstream_port: u16) -> String {
    TestConfig::new(redis_url, ports, upstream_port).yaml()
}

/// [`TestConfig::new`]'s config with `queues` (YAML) for its queues.
pub fn config_with(redis_url: &str, ports: &Ports, upstream_port: u16, queues: &str) -> String {
    TestConfig::new(redis_url, ports, upstream_port)
        .queues(queues)
        .yaml()
}
