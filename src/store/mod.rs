//! Redis: the scripts of `lua/` behind typed calls.
//!
//! Every change to queue state is one Lua script, so each API call is one
//! round-trip and no reader ever sees half a change. Scripts are sent with
//! EVALSHA; on NOSCRIPT (a restarted or flushed Redis) `redis::Script` loads
//! the script and retries, so waitgate recovers without a restart.
//!
//! Every call is bounded by `redis.command-timeout-ms`. A Redis that is down,
//! hung or slow turns into [`StoreError::Unavailable`] within that time, and
//! the caller answers 503 instead of queueing work behind it.

mod keys;

use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script, ScriptInvocation};

use crate::config::{AdmissionConfig, HeartbeatConfig};

pub use keys::QueueKeys;

/// Why a store call failed. Both kinds become a 503 for the client; they
/// differ in what the operator needs to know.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis did not answer in time, refused the connection or dropped it.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// Redis answered with an error or a reply the script never gives:
    /// something outside waitgate changed the keys, or a bug.
    #[error("redis error: {0}")]
    Failed(String),
}

/// The scripts, compiled into the binary so that what runs is what was built.
/// Each is loaded after `lua/lib.lua`, the helpers they share.
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../lua/lib.lua"),
                include_str!(concat!("../../lua/", $file))
            ))
        })
    };
}
static REGISTER: LazyLock<Script> = script!("register.lua");
static RANK: LazyLock<Script> = script!("rank.lua");
static DROPOUT: LazyLock<Script> = script!("dropout.lua");
static ADMIT: LazyLock<Script> = script!("admit.lua");
static CLEANUP: LazyLock<Script> = script!("cleanup.lua");
/// Read-only: the `no-writes` flag lets Redis run it on a replica and
/// refuse it any write.
static TOKEN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "#!lua flags=no-writes\n",
        include_str!("../../lua/lib.lua"),
        include_str!("../../lua/token.lua")
    ))
});

/// A waiting user's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Users ahead (0-based).
    pub rank: u64,
    /// Expected wait, from the gate's observed rate (see `lua/lib.lua`).
    pub wait_ms: u64,
}

/// The outcome of `register`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// Added at the tail at `arrival` (its score in the waiting set), which
    /// the queueCredential signs.
    New { place: Place, arrival: u64 },
    /// Was already waiting; place and credential unchanged.
    AlreadyWaiting(Place),
    /// Is active until this time (Redis clock, ms since the epoch).
    Active { expires_at_ms: u64 },
}

/// The outcome of `rank`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Waiting(Place),
    Active { expires_at_ms: u64 },
    NotQueued,
}

/// The outcome of one admission call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    pub admitted: u64,
    /// The window the call fell in: floor(Redis time / interval).
    pub window: u64,
    pub outcome: AdmitOutcome,
    /// Redis time of the call (ms), to sleep until the next window.
    pub now_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitOutcome {
    /// This call decided the window (and admitted `admitted` users).
    Decided,
    /// The window was already decided, by this or another instance.
    AlreadyDecided,
    /// Nobody waits; the window stays open.
    Empty,
    /// `max-active` left no room this window.
    AtCapacity,
}

/// What one cleanup pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cleanup {
    pub stale_waiting: u64,
    pub expired_active: u64,
}

/// Queue sizes, for the gauges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub waiting: u64,
    pub active: u64,
    /// Users admitted per window, as observed; `None` before any admission.
    pub rate_per_window: Option<f64>,
}

/// The outcome of `dropout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropout {
    Removed,
    NotQueued,
    CredentialMismatch,
}

/// The store: one lazily opened, self-reconnecting multiplexed connection.
pub struct Store {
    client: redis::Client,
    /// Opened on first use, inside whichever Pingora runtime gets there
    /// first: a Redis connection must be created inside a runtime, and
    /// Pingora's runtimes only exist once the server runs.
    connection: OnceLock<ConnectionManager>,
    timeout: Duration,
}

impl Store {
    pub fn new(url: &str, timeout: Duration) -> Result<Store, StoreError> {
        let client = redis::Client::open(url).map_err(|e| StoreError::Failed(e.to_string()))?;
        Ok(Store {
            client,
            connection: OnceLock::new(),
            timeout,
        })
    }

    fn connection(&self) -> Result<ConnectionManager, StoreError> {
        if let Some(c) = self.connection.get() {
            return Ok(c.clone());
        }
        // Retries are few and short: a caller never waits past `timeout`
        // anyway, and the next call starts a new reconnect if this one fails.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| StoreError::Failed(e.to_string()))?;
        Ok(self.connection.get_or_init(|| manager).clone())
    }

    /// Awaits one Redis call within the command timeout (on Pingora's coarse
    /// timer, cheaper per call than a tokio timer), classifying its error.
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match pingora::time::timeout(self.timeout, call).await {
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
            Ok(Err(e)) => Err(classify(e)),
            Ok(Ok(value)) => Ok(value),
        }
    }

    /// Runs one script invocation within the command timeout.
    async fn run<T: FromRedisValue>(
        &self,
        invocation: ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection()?;
        self.bounded(invocation.invoke_async(&mut connection)).await
    }

    /// Answers while Redis answers: for `/readyz`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut connection = self.connection()?;
        let ping = redis::cmd("PING");
        self.bounded(ping.query_async::<String>(&mut connection))
            .await
            .map(drop)
    }

    pub async fn register(
        &self,
        keys: &QueueKeys,
        user: &str,
        admission: &AdmissionConfig,
    ) -> Result<Registration, StoreError> {
        let mut invocation = REGISTER.prepare_invoke();
        invocation
            .key(&keys.waiting)
            .key(&keys.heartbeat)
            .key(&keys.credential)
            .key(&keys.active)
            .key(&keys.admission)
            .arg(user)
            .arg(admission.interval.as_millis() as u64)
            .arg(admission.batch_size);
        let (code, value, wait, arrival): (i64, i64, i64, i64) = self.run(invocation).await?;
        match code {
            1 => Ok(Registration::New {
                place: place(value, wait)?,
                arrival: count(arrival)?,
            }),
            2 => Ok(Registration::AlreadyWaiting(place(value, wait)?)),
            3 => Ok(Registration::Active {
                expires_at_ms: count(value)?,
            }),
            _ => Err(unexpected("register", code)),
        }
    }

    pub async fn rank(
        &self,
        keys: &QueueKeys,
        user: &str,
        admission: &AdmissionConfig,
    ) -> Result<Position, StoreError> {
        let mut invocation = RANK.prepare_invoke();
        invocation
            .key(&keys.waiting)
            .key(&keys.heartbeat)
            .key(&keys.active)
            .key(&keys.admission)
            .arg(user)
            .arg(admission.interval.as_millis() as u64)
            .arg(admission.batch_size);
        let (code, value, wait): (i64, i64, i64) = self.run(invocation).await?;
        match code {
            0 => Ok(Position::NotQueued),
            1 => Ok(Position::Waiting(place(value, wait)?)),
            3 => Ok(Position::Active {
                expires_at_ms: count(value)?,
            }),
            _ => Err(unexpected("rank", code)),
        }
    }

    /// One call of the global admission gate.
    pub async fn admit(
        &self,
        keys: &QueueKeys,
        admission: &AdmissionConfig,
    ) -> Result<Admission, StoreError> {
        let mut invocation = ADMIT.prepare_invoke();
        invocation
            .key(&keys.waiting)
            .key(&keys.heartbeat)
            .key(&keys.active)
            .key(&keys.admission)
            .key(&keys.credential)
            .arg(admission.interval.as_millis() as u64)
            .arg(admission.batch_size)
            .arg(admission.active_ttl.as_millis() as u64)
            .arg(admission.max_active);
        let (admitted, window, why, now_ms): (i64, i64, i64, i64) = self.run(invocation).await?;
        let outcome = match why {
            0 => AdmitOutcome::Decided,
            1 => AdmitOutcome::AlreadyDecided,
            2 => AdmitOutcome::Empty,
            3 => AdmitOutcome::AtCapacity,
            _ => return Err(unexpected("admit", why)),
        };
        Ok(Admission {
            admitted: count(admitted)?,
            window: count(window)?,
            outcome,
            now_ms: count(now_ms)?,
        })
    }

    /// One cleanup pass.
    pub async fn cleanup(
        &self,
        keys: &QueueKeys,
        heartbeat: &HeartbeatConfig,
    ) -> Result<Cleanup, StoreError> {
        let mut invocation = CLEANUP.prepare_invoke();
        invocation
            .key(&keys.waiting)
            .key(&keys.heartbeat)
            .key(&keys.credential)
            .key(&keys.active)
            .arg(heartbeat.timeout.as_millis() as u64)
            .arg(heartbeat.cleanup_batch_size);
        let (stale, expired): (i64, i64) = self.run(invocation).await?;
        Ok(Cleanup {
            stale_waiting: count(stale)?,
            expired_active: count(expired)?,
        })
    }

    /// The sizes of a queue, in one round-trip (reads only, no script).
    pub async fn sample(&self, keys: &QueueKeys) -> Result<Sample, StoreError> {
        let mut pipe = redis::pipe();
        pipe.zcard(&keys.waiting)
            .zcard(&keys.active)
            .hget(&keys.admission, "rate");
        let mut connection = self.connection()?;
        let (waiting, active, rate_per_window) = self
            .bounded(pipe.query_async::<(u64, u64, Option<f64>)>(&mut connection))
            .await?;
        Ok(Sample {
            waiting,
            active,
            rate_per_window,
        })
    }

    /// Takes out the registration at `arrival`, the one a checked
    /// credential names.
    pub async fn dropout(
        &self,
        keys: &QueueKeys,
        user: &str,
        arrival: u64,
    ) -> Result<Dropout, StoreError> {
        let mut invocation = DROPOUT.prepare_invoke();
        invocation
            .key(&keys.waiting)
            .key(&keys.heartbeat)
            .key(&keys.credential)
            .key(&keys.active)
            .arg(user)
            .arg(arrival);
        let code: i64 = self.run(invocation).await?;
        match code {
            1 => Ok(Dropout::Removed),
            0 => Ok(Dropout::NotQueued),
            -1 => Ok(Dropout::CredentialMismatch),
            _ => Err(unexpected("dropout", code)),
        }
    }

    /// The active-state expiry (Redis clock, ms) when the user is active and
    /// was admitted from the registration at `arrival`; `None` for either
    /// failure, alike.
    pub async fn token(
        &self,
        keys: &QueueKeys,
        user: &str,
        arrival: u64,
    ) -> Result<Option<u64>, StoreError> {
        let mut invocation = TOKEN.prepare_invoke();
        invocation
            .key(&keys.active)
            .key(&keys.credential)
            .arg(user)
            .arg(arrival);
        let expiry: i64 = self.run(invocation).await?;
        Ok(u64::try_from(expiry).ok().filter(|&ms| ms > 0))
    }
}

fn classify(e: redis::RedisError) -> StoreError {
    use redis::{ErrorKind, ServerErrorKind};
    // A Redis that is loading its AOF after a restart, failing over or busy
    // with a long script is unavailable for now, not broken.
    let transient = matches!(
        e.kind(),
        ErrorKind::Io
            | ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::ClusterDown
            )
    );
    if transient
        || e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
    {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Failed(e.to_string())
    }
}

fn place(rank: i64, wait_ms: i64) -> Result<Place, StoreError> {
    Ok(Place {
        rank: count(rank)?,
        wait_ms: count(wait_ms)?,
    })
}

fn count(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Failed(format!("negative count {value}")))
}

fn unexpected(script: &str, code: i64) -> StoreError {
    StoreError::Failed(format!("{script} script returned unknown code {code}"))
}
