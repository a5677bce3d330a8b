//! The connection layer: one Redis server, a Sentinel-watched master or a
//! Cluster behind one `Store`, with the command timeout, the resend rules
//! after a dropped connection, and the writes that wait for replicas. The
//! typed calls (`store`'s other files) go through [`Store::run`],
//! [`Store::run_write`] and [`Store::call`].

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{FromRedisValue, ScriptInvocation};

use super::error::{classify, gone, no_answer, StoreError};
use crate::config::{RedisConfig, RedisMode, RedisTls};

/// The store: Redis as one server, a Sentinel-watched master, or a
/// Cluster, behind the same typed calls.
pub struct Store {
    backend: Backend,
    /// With `wait-replicas`, the writes that wait go over connections of
    /// their own, one write at a time each: Redis holds a connection's
    /// every later command until its `WAIT` is answered, so a replica that
    /// falls behind would otherwise hold up every other call on the
    /// connection, polls and other writes alike.
    waited: Option<WaitedWrites>,
    /// Counts the times `failed` forgot the Sentinel master or the Cluster
    /// map (see `KeptConnection`): a lookup that began before one of them may have
    /// found the master that just failed, so it is used for its own call
    /// and not kept; a call whose connection was found before one fails
    /// without forgetting the connection found since.
    forgotten: std::sync::atomic::AtomicU64,
    timeout: Duration,
    /// `WAIT replicas timeout` after each write, when configured.
    wait: Option<(u64, Duration)>,
}

/// How the store reaches Redis. Each is the redis crate's own support;
/// connections open on first use, inside whichever Pingora runtime gets
/// there first (a Redis connection must be made inside a runtime, and
/// Pingora's runtimes only exist once the server runs).
enum Backend {
    /// One server: a multiplexed connection that the calls share, dropped
    /// once a call or the probe finds it gone (see `Store::failed`) and
    /// opened again by the next call. Not the crate's `ConnectionManager`:
    /// while the server is down, its reconnection fails and it keeps that
    /// failure, and hands it ("connection refused") to the next call
    /// however long after the server came back (it reconnects only then).
    Standalone {
        client: redis::Client,
        current: KeptConnection<MultiplexedConnection>,
        /// One connection attempt at a time: the calls that find none wait
        /// for it rather than each opening their own.
        connecting: tokio::sync::Mutex<()>,
        /// The longest a call on it may take (the crate's own bound).
        response: Duration,
    },
    /// The master that the Sentinels name. The connection is dropped on any
    /// failure that may mean a failover (refused, reset, `READONLY`), and
    /// the Sentinels are asked again on the next call.
    Sentinel {
        sentinels: tokio::sync::Mutex<SentinelClient>,
        master: KeptConnection<MultiplexedConnection>,
        response: Duration,
    },
    /// A Redis Cluster: the crate follows `MOVED`/`ASK`. Every key of a
    /// queue shares its `{queue}` hash tag, so each script runs on the one
    /// node that owns the queue's slot. When a master dies, the crate keeps
    /// reconnecting to it rather than asking the cluster who took over
    /// (measured: no recovery within 30 s), so, as with Sentinel, the
    /// connection is dropped on such a failure and the next call maps the
    /// cluster again from the configured nodes.
    Cluster {
        client: ClusterClient,
        current: KeptConnection<ClusterConnection>,
        connecting: tokio::sync::Mutex<()>,
        /// Each configured node on its own, for the pub/sub subscription:
        /// a Cluster delivers every PUBLISH to every node, so any one
        /// serves.
        nodes: Vec<redis::Client>,
    },
}

/// The connections of the writes that wait for replicas (see
/// `Store::run_write`): each is used by one write at a time, for the script
/// and then its `WAIT`, and is dropped on any error. They never reconnect
/// on their own (a `WAIT` on a connection other than the write's would
/// answer at once, for nothing), and at most `WAITED_CONNECTIONS` exist.
struct WaitedWrites {
    /// How to open one; its calls may take the command and wait timeouts.
    backend: Backend,
    idle: Pool<Conn>,
    permits: tokio::sync::Semaphore,
}

/// Idle connections, each with when it was last used, and the times the
/// pool was cleared: a connection taken or opened before a clear is not
/// put back after it (it may be one to the master that failed).
struct Pool<C> {
    idle: std::sync::Mutex<Idle<C>>,
}

struct Idle<C> {
    connections: Vec<(std::time::Instant, C)>,
    cleared: u64,
}

impl<C> Pool<C> {
    fn new() -> Pool<C> {
        Pool {
            idle: std::sync::Mutex::new(Idle {
                connections: Vec::new(),
                cleared: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle<C>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection not idle too long, if there is one, and the
    /// pool's clears so far, to hand back to `keep`.
    fn take(&self) -> (u64, Option<C>) {
        let mut idle = self.lock();
        idle.connections
            .retain(|(since, _)| since.elapsed() < WAITED_IDLE);
        (idle.cleared, idle.connections.pop().map(|(_, c)| c))
    }

    /// A connection that served a write soundly, for the next one, unless
    /// the pool was cleared since it was taken (`cleared` from `take`).
    fn keep(&self, cleared: u64, connection: C) {
        let mut idle = self.lock();
        if idle.cleared == cleared {
            idle.connections
                .push((std::time::Instant::now(), connection));
        }
    }

    /// Closes the idle connections, and those in use once their write ends.
    fn forget(&self) {
        let mut idle = self.lock();
        idle.connections.clear();
        idle.cleared += 1;
    }
}

/// The connection that the calls share, with the count of
/// `Store::forgotten` it was found at: a failure on it forgets it only if
/// nothing was forgotten since. (Once a master fails, the calls in flight
/// on it fail one after another for up to a command timeout; each would
/// otherwise forget the new master found after the first.)
type KeptConnection<C> = std::sync::Mutex<Option<(u64, C)>>;

/// Keeps `found` (with the count it was looked up at) in `slot` for the
/// next calls, unless `Store::failed` forgot a connection since the lookup
/// began: that lookup may have reached the master that failed. A slot that
/// already holds one keeps it. `failed` counts under the same lock.
fn keep_unless_forgotten<C: Clone>(
    forgotten: &std::sync::atomic::AtomicU64,
    slot: &KeptConnection<C>,
    found: &(u64, C),
) {
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    if slot.is_none() && forgotten.load(Ordering::Acquire) == found.0 {
        *slot = Some(found.clone());
    }
}

/// Forgets what `slot` holds, and counts it, if nothing was forgotten since
/// the failed call's connection was found (`seen`). Whether it counted.
fn forget_once<C>(
    forgotten: &std::sync::atomic::AtomicU64,
    seen: u64,
    slot: &KeptConnection<C>,
) -> bool {
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    if forgotten.load(Ordering::Acquire) != seen {
        return false;
    }
    forgotten.fetch_add(1, Ordering::AcqRel);
    *slot = None;
    true
}

/// The counter a waited write increments before its `WAIT`, beside `key`
/// (`queue:{q}:<name>` becomes `queue:{q}:waited`).
fn waited_mark(key: &str) -> String {
    match key.rfind(':') {
        Some(at) => format!("{}:waited", &key[..at]),
        None => format!("{key}:waited"),
    }
}

/// A connection for waited writes idle longer than this is closed rather
/// than used: a server `timeout`, a NAT or a balancer may have dropped it.
const WAITED_IDLE: Duration = Duration::from_secs(30);

/// How often a Cluster call is tried again, after `MOVED` or with its
/// master gone.
const CLUSTER_RETRIES: u32 = 2;

/// Writes that may wait for replicas at once, per instance. More wait for
/// one of them to finish, within the same bound.
const WAITED_CONNECTIONS: usize = 8;

/// A connection of any backend, for the scripts and commands.
#[derive(Clone)]
pub(super) enum Conn {
    Multiplexed(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Multiplexed(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Multiplexed(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Multiplexed(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Store {
    /// Whether Redis fails over on its own: Sentinel or Cluster.
    pub(super) fn fails_over(&self) -> bool {
        matches!(
            self.backend,
            Backend::Sentinel { .. } | Backend::Cluster { .. }
        )
    }

    /// The longest one call can take when Redis does not answer: a
    /// connection attempt, the script (and its reload after NOSCRIPT), and,
    /// for a write with `wait-replicas`, the wait for a free connection and
    /// the `WAIT` after the write, each bounded.
    pub fn longest_call(&self) -> Duration {
        3 * self.timeout
            + self
                .wait
                .map_or(Duration::ZERO, |(_, wait)| self.timeout + 2 * wait)
    }

    /// A store for `config`; nothing is connected until the first call.
    pub fn new(config: &RedisConfig) -> Result<Store, StoreError> {
        let wait =
            (config.wait_replicas > 0).then_some((config.wait_replicas, config.wait_timeout));
        Ok(Store {
            backend: Store::backend(config, config.command_timeout, CLUSTER_RETRIES)?,
            waited: match wait {
                // A `WAIT` is answered once its own timeout is over: the
                // command timeout counts from then.
                Some((_, wait)) => Some(WaitedWrites {
                    // A cluster connection that retries would send a
                    // `WAIT` that failed with its master to the next one,
                    // which answers at once for a write it never had.
                    backend: Store::backend(config, config.command_timeout + wait, 0)?,
                    idle: Pool::new(),
                    permits: tokio::sync::Semaphore::new(WAITED_CONNECTIONS),
                }),
                None => None,
            },
            forgotten: std::sync::atomic::AtomicU64::new(0),
            timeout: config.command_timeout,
            wait,
        })
    }

    /// A way to Redis for `config` whose calls may take up to `response`;
    /// a Cluster's calls are tried again (after `MOVED`, or with a master
    /// gone) `retries` times.
    fn backend(
        config: &RedisConfig,
        response: Duration,
        retries: u32,
    ) -> Result<Backend, StoreError> {
        let failed = |e: redis::RedisError| StoreError::Failed(e.to_string());
        let certificates = config.tls.as_ref().map(tls_certificates).transpose()?;
        Ok(match &config.mode {
            RedisMode::Standalone { url } => {
                let client = match certificates {
                    Some(certs) => redis::Client::build_with_tls(url.as_str(), certs),
                    None => redis::Client::open(url.as_str()),
                }
                .map_err(failed)?;
                Backend::Standalone {
                    client,
                    current: std::sync::Mutex::new(None),
                    connecting: tokio::sync::Mutex::new(()),
                    response,
                }
            }
            RedisMode::Sentinel {
                sentinels,
                master_name,
            } => {
                let addresses = sentinels
                    .iter()
                    .map(|url| {
                        redis::IntoConnectionInfo::into_connection_info(url.as_str())
                            .map(|info| info.addr().clone())
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(failed)?;
                let mut builder = SentinelClientBuilder::new(
                    addresses,
                    master_name.clone(),
                    SentinelServerType::Master,
                )
                .map_err(failed)?;
                if let Some(certs) = certificates {
                    builder = builder
                        .set_client_to_redis_certificates(certs.clone())
                        .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                        .set_client_to_sentinel_certificates(certs)
                        .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure);
                }
                Backend::Sentinel {
                    sentinels: tokio::sync::Mutex::new(builder.build().map_err(failed)?),
                    master: std::sync::Mutex::new(None),
                    response,
                }
            }
            RedisMode::Cluster { nodes } => {
                let node_clients = nodes
                    .iter()
                    .map(|url| match &certificates {
                        Some(certs) => redis::Client::build_with_tls(url.as_str(), certs.clone()),
                        None => redis::Client::open(url.as_str()),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(failed)?;
                let mut builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                    .connection_timeout(config.command_timeout)
                    .response_timeout(response)
                    .retries(retries)
                    .min_retry_wait(20)
                    .max_retry_wait(200);
                if let Some(certs) = certificates {
                    builder = builder.certs(certs);
                }
                Backend::Cluster {
                    client: builder.build().map_err(failed)?,
                    current: std::sync::Mutex::new(None),
                    connecting: tokio::sync::Mutex::new(()),
                    nodes: node_clients,
                }
            }
        })
    }

    /// A connection for a call, and the count of forgettings it was found
    /// at, for `failed`.
    async fn connection(&self) -> Result<(u64, Conn), StoreError> {
        self.connect(&self.backend).await
    }

    /// The settings of a multiplexed connection whose calls may take up to
    /// `response`.
    fn connection_config(&self, response: Duration) -> redis::AsyncConnectionConfig {
        redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(response))
    }

    /// A new connection of `backend`'s that nobody else uses and that does
    /// not reconnect by itself.
    async fn open(&self, backend: &Backend) -> Result<Conn, StoreError> {
        match backend {
            Backend::Standalone {
                client, response, ..
            } => {
                let config = self.connection_config(*response);
                self.bounded(client.get_multiplexed_async_connection_with_config(&config))
                    .await
                    .map(Conn::Multiplexed)
            }
            Backend::Sentinel {
                sentinels,
                response,
                ..
            } => {
                let config = self.connection_config(*response);
                self.bounded(async {
                    let mut sentinels = sentinels.lock().await;
                    sentinels.get_async_connection_with_config(&config).await
                })
                .await
                .map(Conn::Multiplexed)
            }
            Backend::Cluster { client, .. } => self
                .bounded(client.get_async_connection())
                .await
                .map(Conn::Cluster),
        }
    }

    async fn connect(&self, backend: &Backend) -> Result<(u64, Conn), StoreError> {
        match backend {
            Backend::Standalone {
                client,
                current,
                connecting,
                response,
            } => {
                let (seen, c) = self
                    .shared(current, connecting, || async move {
                        let config = self.connection_config(*response);
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                    })
                    .await?;
                Ok((seen, Conn::Multiplexed(c)))
            }
            Backend::Sentinel {
                sentinels,
                master,
                response,
            } => {
                if let Some((seen, c)) = master.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                    return Ok((seen, Conn::Multiplexed(c)));
                }
                let seen = self.forgotten.load(Ordering::Acquire);
                let found = self
                    .bounded(async {
                        let mut sentinels = sentinels.lock().await;
                        // Another call may have found the master meanwhile.
                        if let Some(kept) = master.lock().unwrap_or_else(|p| p.into_inner()).clone()
                        {
                            return Ok(kept);
                        }
                        let config = self.connection_config(*response);
                        let found = sentinels.get_async_connection_with_config(&config).await?;
                        Ok((seen, found))
                    })
                    .await?;
                keep_unless_forgotten(&self.forgotten, master, &found);
                Ok((found.0, Conn::Multiplexed(found.1)))
            }
            Backend::Cluster {
                client,
                current,
                connecting,
                ..
            } => {
                let (seen, c) = self
                    .shared(current, connecting, || client.get_async_connection())
                    .await?;
                Ok((seen, Conn::Cluster(c)))
            }
        }
    }

    /// The connection `slot` holds for the calls to share, or one `open`
    /// makes, one attempt at a time (the calls that find none wait for it
    /// rather than each opening their own), kept for the next calls unless
    /// a connection was forgotten meanwhile (`keep_unless_forgotten`).
    async fn shared<C, Fut>(
        &self,
        slot: &KeptConnection<C>,
        connecting: &tokio::sync::Mutex<()>,
        open: impl FnOnce() -> Fut,
    ) -> Result<(u64, C), StoreError>
    where
        C: Clone,
        Fut: std::future::Future<Output = redis::RedisResult<C>>,
    {
        if let Some(kept) = slot.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(kept);
        }
        let seen = self.forgotten.load(Ordering::Acquire);
        let made = self
            .bounded(async {
                let _one_at_a_time = connecting.lock().await;
                if let Some(kept) = slot.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                    return Ok(kept);
                }
                Ok((seen, open().await?))
            })
            .await?;
        keep_unless_forgotten(&self.forgotten, slot, &made);
        Ok(made)
    }

    /// After a failure that may mean a failover, forgets the connection to
    /// the Sentinel master or the Cluster, so that the next call asks who
    /// serves now, and the idle connections of the writes that wait. One
    /// server has no failover: its connection is forgotten (with the idle
    /// ones, which went with the same server) only when the failure says it
    /// is `gone` (see [`gone`]); a hung or slow server keeps it, and answers
    /// on it once it resumes. `seen` is the count of forgettings the failed
    /// call's connection was found at: a call on a connection already
    /// forgotten forgets nothing more.
    fn failed(&self, error: &StoreError, seen: u64, gone: bool) {
        if !matches!(error, StoreError::Unavailable(_)) {
            return;
        }
        let counted = match &self.backend {
            Backend::Sentinel { master, .. } => forget_once(&self.forgotten, seen, master),
            Backend::Cluster { current, .. } => forget_once(&self.forgotten, seen, current),
            Backend::Standalone { current, .. } => {
                gone && forget_once(&self.forgotten, seen, current)
            }
        };
        if let (true, Some(waited)) = (counted, &self.waited) {
            waited.idle.forget();
        }
    }

    /// Sends one request on the connection the calls share, within the
    /// command timeout. A connection that the failure shows gone is
    /// forgotten, and the next call opens one. A request that may be sent
    /// twice (`Resend::Safe`) then goes once more on a new connection,
    /// within what is left of the same timeout: after Redis restarted, the
    /// connection of before is found dead only by the first request sent on
    /// it, and that request should not be the one to pay for it.
    pub(super) async fn call<T, F, Fut>(&self, resend: Resend, mut send: F) -> Result<T, StoreError>
    where
        F: FnMut(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let (seen, connection) = self.connection().await?;
        let sent = std::time::Instant::now();
        match pingora::time::timeout(self.timeout, send(connection)).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => {
                let gone = gone(&e);
                let error = classify(e);
                self.failed(&error, seen, gone);
                if !gone || resend == Resend::Never {
                    return Err(error);
                }
            }
            Err(_) => {
                let error = no_answer(self.timeout);
                self.failed(&error, seen, false);
                return Err(error);
            }
        }
        let left = self.timeout.saturating_sub(sent.elapsed());
        let mut found = None;
        let again = pingora::time::timeout(left, async {
            let (seen, connection) = self.connection().await.map_err(|e| (e, false))?;
            found = Some(seen);
            send(connection).await.map_err(|e| {
                let gone = gone(&e);
                (classify(e), gone)
            })
        })
        .await;
        match again {
            Ok(Ok(value)) => Ok(value),
            Ok(Err((error, gone))) => {
                if let Some(seen) = found {
                    self.failed(&error, seen, gone);
                }
                Err(error)
            }
            Err(_) => {
                let error = no_answer(self.timeout);
                if let Some(seen) = found {
                    self.failed(&error, seen, false);
                }
                Err(error)
            }
        }
    }

    /// For the probe: pings the connection the calls share, if there is
    /// one, and forgets it if it is gone, so that a connection that died
    /// while nobody called (Redis restarted in a quiet moment) is not the
    /// one the next write is sent on: a write found its connection gone is
    /// not sent again (see [`Resend`]). Opens no connection: the calls open
    /// theirs in the runtime that serves them. A Cluster connection is left
    /// to the crate, which reconnects to each node by itself.
    pub async fn check(&self) {
        let held = match &self.backend {
            Backend::Standalone { current, .. }
            | Backend::Sentinel {
                master: current, ..
            } => current.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            Backend::Cluster { .. } => None,
        };
        let Some((seen, mut connection)) = held else {
            return;
        };
        let ping = redis::cmd("PING");
        let answer =
            pingora::time::timeout(self.timeout, ping.query_async::<String>(&mut connection)).await;
        // A timeout says nothing about the connection (the calls time out
        // by themselves); an error answer is Redis's, on a live connection.
        if let Ok(Err(e)) = answer {
            let gone = gone(&e);
            self.failed(&classify(e), seen, gone);
        }
    }

    /// Awaits one Redis call within the command timeout (on Pingora's coarse
    /// timer, cheaper per call than a tokio timer), classifying its error.
    pub(super) async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        self.bounded_by(self.timeout, call).await
    }

    async fn bounded_by<T>(
        &self,
        limit: Duration,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match pingora::time::timeout(limit, call).await {
            Err(_) => Err(no_answer(limit)),
            Ok(Err(e)) => Err(classify(e)),
            Ok(Ok(value)) => Ok(value),
        }
    }

    /// Runs one script invocation within the command timeout; `resend`
    /// says whether the script may run twice.
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        invocation: ScriptInvocation<'_>,
        resend: Resend,
    ) -> Result<T, StoreError> {
        let invocation = &invocation;
        self.call(resend, |mut connection| async move {
            invocation.invoke_async(&mut connection).await
        })
        .await
    }

    /// Runs a script that writes, then, with `redis.wait-replicas`, waits
    /// until that many replicas have the write: an acknowledged change then
    /// survives the master's loss. Too few replicas in time is a 503, and
    /// the client's retry is safe (every write is idempotent for the same
    /// user). `key` routes the `WAIT` to the node that ran the script.
    pub(super) async fn run_write<T: FromRedisValue>(
        &self,
        invocation: ScriptInvocation<'_>,
        key: &str,
    ) -> Result<T, StoreError> {
        let (Some((replicas, timeout)), Some(waited)) = (self.wait, &self.waited) else {
            return self.run(invocation, Resend::Never).await;
        };
        // Redis answers a `WAIT` once its own timeout is over: the command
        // timeout counts from then, or a wait longer than it would be taken
        // for a Redis that stopped answering.
        let limit = self.timeout + timeout;
        let _permit = match pingora::time::timeout(limit, waited.permits.acquire()).await {
            Ok(Ok(permit)) => permit,
            _ => {
                return Err(StoreError::Unavailable(
                    "every connection for writes is waiting for replicas".into(),
                ))
            }
        };
        let seen = self.forgotten.load(Ordering::Acquire);
        let (cleared, idle) = waited.idle.take();
        let mut connection = match idle {
            Some(c) => c,
            None => self
                .open(&waited.backend)
                .await
                .inspect_err(|e| self.failed(e, seen, false))?,
        };
        let written = self.waited_write(&mut connection, invocation, key, replicas, timeout);
        let (value, acknowledged) = written.await.inspect_err(|e| {
            // The connection goes with the error; the others may have met
            // the same cause (a failover, a slot moved), whatever it was.
            self.failed(e, seen, false);
            waited.idle.forget();
        })?;
        if acknowledged < replicas {
            // Not kept: the next write asks anew who serves.
            return Err(StoreError::Unavailable(format!(
                "the write reached {acknowledged} of {replicas} replicas in time"
            )));
        }
        waited.idle.keep(cleared, connection);
        Ok(value)
    }

    /// The script, then how many replicas have it within `wait`. Redis
    /// `WAIT`s for the last write made on the connection that asks, and a
    /// script may write nothing (a retry finds its work done, on another
    /// connection than the first try's): so a write to a key of the
    /// queue's slot (`queue:{q}:waited`, a counter) comes first, whose
    /// place in the replication stream is after every write before it,
    /// this one's and anyone's.
    async fn waited_write<T: FromRedisValue>(
        &self,
        connection: &mut Conn,
        invocation: ScriptInvocation<'_>,
        key: &str,
        replicas: u64,
        wait: Duration,
    ) -> Result<(T, u64), StoreError> {
        let value = self.bounded(invocation.invoke_async(connection)).await?;
        let limit = self.timeout + wait;
        let mut marked = redis::pipe();
        marked
            .cmd("INCR")
            .arg(waited_mark(key))
            .ignore()
            .cmd("WAIT")
            .arg(replicas)
            .arg(wait.as_millis() as u64);
        let (acknowledged,): (u64,) =
            match connection {
                Conn::Cluster(c) => {
                    let route = redis::cluster_routing::SingleNodeRoutingInfo::SpecificNode(
                        redis::cluster_routing::Route::with_key(
                            key,
                            redis::cluster_routing::SlotAddr::Master,
                        ),
                    );
                    let replies = self
                        .bounded_by(limit, c.route_pipeline(marked, 0, 2, route))
                        .await?;
                    // (The last reply is the `WAIT`'s, whether or not the
                    // counter's is left out.)
                    let reply = replies
                        .into_iter()
                        .last()
                        .ok_or_else(|| StoreError::Failed("WAIT: no reply".into()))?;
                    (redis::from_redis_value(reply)
                        .map_err(|e| StoreError::Failed(e.to_string()))?,)
                }
                c => self.bounded_by(limit, marked.query_async(c)).await?,
            };
        Ok((value, acknowledged))
    }

    /// Answers while Redis answers: for the probe and `/healthz/redis`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.call(Resend::Safe, |mut connection| async move {
            redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await
        })
        .await
        .map(drop)
    }

    /// A connection subscribed to nothing yet, for the revocation push: the
    /// Redis server, the master the Sentinels name, or any Cluster node.
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub, StoreError> {
        match &self.backend {
            Backend::Standalone { client, .. } => self.bounded(client.get_async_pubsub()).await,
            Backend::Sentinel { sentinels, .. } => {
                let client = self
                    .bounded(async { sentinels.lock().await.async_get_client().await })
                    .await?;
                self.bounded(client.get_async_pubsub()).await
            }
            Backend::Cluster { nodes, .. } => {
                let mut last = StoreError::Unavailable("no cluster node configured".into());
                for node in nodes {
                    match self.bounded(node.get_async_pubsub()).await {
                        Ok(pubsub) => return Ok(pubsub),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
        }
    }
}

/// The certificates of `redis.tls`: a private CA to trust, and a client
/// certificate and key when the server asks for one.
fn tls_certificates(tls: &RedisTls) -> Result<redis::TlsCertificates, StoreError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| StoreError::Failed(format!("{}: {e}", path.display())))
    };
    let client_tls = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        _ => None,
    };
    let root_cert = tls.ca_file.as_deref().map(read).transpose()?;
    Ok(redis::TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// Whether a request may be sent again on a new connection after its
/// connection turned out gone under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resend {
    /// Reads (`PING`, the read-only scripts, the admin reads), and the rank
    /// poll, whose only writes are the heartbeats of the users it reads:
    /// sent twice, it does what a client polling twice does.
    Safe,
    /// Writes. A request handed to a connection that then turns out gone
    /// may have been written, and run, before the connection went: the
    /// crate answers `BrokenPipe` alike for a request it never wrote (its
    /// connection had already closed) and for one whose answer was lost.
    /// So a write is not sent twice: it answers 503, and the client's retry
    /// goes on the new connection.
    Never,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Mutex;

    #[test]
    fn a_connection_in_use_when_the_pool_is_cleared_is_not_put_back() {
        let pool = Pool::new();
        let (cleared, none) = pool.take();
        assert_eq!(none, None);
        pool.keep(cleared, 1);
        let (cleared, one) = pool.take();
        assert_eq!(one, Some(1));
        // Cleared while connection 1 serves a write: it is dropped after.
        pool.forget();
        pool.keep(cleared, 1);
        assert_eq!(pool.take().1, None);
        // One taken after the clear is kept as before.
        let (cleared, _) = pool.take();
        pool.keep(cleared, 2);
        assert_eq!(pool.take().1, Some(2));
    }

    #[test]
    fn a_clear_drops_the_idle_connections() {
        let pool = Pool::new();
        let (cleared, _) = pool.take();
        pool.keep(cleared, 1);
        pool.keep(cleared, 2);
        pool.forget();
        assert_eq!(pool.take().1, None);
    }

    /// How many times `failed` has forgotten the master and cleared the
    /// waited pool.
    fn forgettings(store: &Store) -> (u64, u64) {
        let waited = store.waited.as_ref().expect("wait-replicas is set");
        (
            store.forgotten.load(Ordering::Acquire),
            waited.idle.take().0,
        )
    }

    /// A store of `mode` whose servers nobody listens on, 100 ms bounds.
    fn unreachable_store(mode: RedisMode) -> Store {
        Store::new(&RedisConfig {
            mode,
            tls: None,
            command_timeout: Duration::from_millis(100),
            wait_replicas: 1,
            wait_timeout: Duration::from_millis(100),
            coalesce: false,
            poll_pace: Duration::ZERO,
        })
        .unwrap()
    }

    #[test]
    fn only_a_current_failure_that_may_be_a_failover_forgets_the_master_and_the_waited_pool() {
        let modes = [
            RedisMode::Sentinel {
                sentinels: vec!["redis://127.0.0.1:1".into()],
                master_name: "m".into(),
            },
            RedisMode::Cluster {
                nodes: vec!["redis://127.0.0.1:1".into()],
            },
        ];
        for mode in modes {
            let store = unreachable_store(mode.clone());
            let reset = StoreError::Unavailable("connection reset".into());
            store.failed(
                &StoreError::Failed("ERR a script's own error".into()),
                0,
                false,
            );
            assert_eq!(forgettings(&store), (0, 0), "{mode:?}");
            store.failed(&reset, 0, false);
            assert_eq!(forgettings(&store), (1, 1), "{mode:?}");
            // A call in flight on the master just forgotten fails late: it
            // forgets nothing more (the next master may be found already).
            store.failed(&reset, 0, false);
            assert_eq!(forgettings(&store), (1, 1), "{mode:?}");
            store.failed(&reset, 1, false);
            assert_eq!(forgettings(&store), (2, 2), "{mode:?}");
        }
    }

    #[test]
    fn one_server_forgets_its_connection_and_the_waited_pool_only_when_it_is_gone() {
        let store = unreachable_store(RedisMode::Standalone {
            url: "redis://127.0.0.1:1/0".into(),
        });
        // A hung or full Redis keeps its connection: it answers on it later.
        store.failed(&no_answer(Duration::from_millis(100)), 0, false);
        store.failed(&StoreError::Unavailable("OOM".into()), 0, false);
        assert_eq!(forgettings(&store), (0, 0));
        let reset = StoreError::Unavailable("broken pipe".into());
        store.failed(&reset, 0, true);
        assert_eq!(forgettings(&store), (1, 1));
        // Another call that was on the same dead connection.
        store.failed(&reset, 0, true);
        assert_eq!(forgettings(&store), (1, 1));
    }

    #[test]
    fn a_connection_is_gone_when_closed_reset_or_refused_not_when_slow() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::BrokenPipe,
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionRefused,
            ErrorKind::UnexpectedEof,
        ] {
            assert!(
                gone(&redis::RedisError::from(Error::from(kind))),
                "{kind:?}"
            );
        }
        assert!(!gone(&redis::RedisError::from(Error::from(
            ErrorKind::TimedOut
        ))));
        let answered: redis::RedisError = (redis::ErrorKind::Client, "an answer").into();
        assert!(!gone(&answered));
    }

    #[test]
    fn a_master_found_by_a_lookup_older_than_a_failure_is_not_kept() {
        let forgotten = AtomicU64::new(0);
        let slot = Mutex::new(None);
        let seen = forgotten.load(Ordering::Acquire);
        // A call fails, and forgets, while the lookup is under way.
        assert!(forget_once(&forgotten, seen, &slot));
        keep_unless_forgotten(&forgotten, &slot, &(seen, "old master"));
        assert_eq!(*slot.lock().unwrap(), None);
        // The next lookup, begun after the failure, is kept, and a late
        // failure of a call on the old master leaves it.
        let seen = forgotten.load(Ordering::Acquire);
        keep_unless_forgotten(&forgotten, &slot, &(seen, "new master"));
        assert!(!forget_once(&forgotten, 0, &slot));
        assert_eq!(*slot.lock().unwrap(), Some((1, "new master")));
        // A failure on it forgets it.
        assert!(forget_once(&forgotten, 1, &slot));
        assert_eq!(*slot.lock().unwrap(), None);
    }
}
