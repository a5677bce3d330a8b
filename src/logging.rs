//! Logs: `tracing` events, one line each (text or JSON), written to stderr
//! off the request path, with a filter that a reload can change.
//!
//! - The filter is `log.filter`, or `RUST_LOG` when that is set (then a
//!   reload leaves it alone and says so).
//! - Lines are handed to a writer thread (`tracing-appender`'s non-blocking
//!   writer), so a request never waits on a `write(2)` to stderr: at tens of
//!   thousands of requests a second, one system call per access line would
//!   be a measured share of the proxy's time. If the writer falls 128,000
//!   lines behind, further lines are dropped rather than requests slowed.
//! - The access log (`log.access`) is one line per request at `info`,
//!   target `waitgate::access`, written by the request record
//!   (`proxy::rules::record`) for both HTTP paths.
//! - [`warn_limited`] writes a repeated warning (a Redis outage fails every
//!   request, every early release and every admin change) at most once a
//!   second per cause, with the count it stood for.
//!
//! Pingora logs through the `log` crate; the subscriber's `log` bridge turns
//! those records into events too, so one filter governs both. Pingora's own
//! `debug` and `trace` lines carry whole request heads, tokens with them:
//! they are written only when the filter names Pingora ([`guarded`]).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

use crate::config::{LogConfig, LogFormat, DEFAULT_LOG_FILTER};

static ACCESS: AtomicBool = AtomicBool::new(false);
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
/// Dropping it flushes the writer thread; taken by [`flush`].
static GUARD: Mutex<Option<WorkerGuard>> = Mutex::new(None);

/// `RUST_LOG`, when set and not empty.
fn env_filter() -> Option<String> {
    std::env::var("RUST_LOG")
        .ok()
        .filter(|f| !f.trim().is_empty())
}

/// The filter as applied: Pingora's crates log request and response heads
/// at `debug` and `trace` with every header, Authorization and Cookie with
/// them (live tokens and credentials). So when the filter's default level
/// is `debug` or `trace`, they are held at `info`, unless the filter names
/// Pingora itself: an operator who turns on waitgate's debug lines gets no
/// tokens in the log without asking for Pingora's by name.
fn guarded(filter: &str) -> String {
    if filter.contains("pingora") {
        return filter.to_string();
    }
    let default = filter
        .split(',')
        .map(str::trim)
        .rfind(|d| d.parse::<tracing::level_filters::LevelFilter>().is_ok());
    match default.map(str::to_ascii_lowercase).as_deref() {
        Some("debug" | "trace") => format!("{filter},pingora=info"),
        _ => filter.to_string(),
    }
}

/// Sets up logging from the config. A second call (tests build several
/// servers in one process) keeps the first subscriber.
pub fn init(config: &LogConfig) {
    ACCESS.store(config.access, Ordering::Relaxed);
    let filter_text = env_filter().unwrap_or_else(|| config.filter.clone());
    let filter = EnvFilter::builder()
        .parse(guarded(&filter_text))
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    let (filter, handle) = reload::Layer::new(filter);
    let (writer, guard) = tracing_appender::non_blocking(std::io::stderr());
    let ansi = std::io::stderr().is_terminal();
    let format = match config.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(ansi)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_writer(writer)
            .boxed(),
    };
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(format.with_filter(Handshakes))
        .try_init()
        .is_ok();
    if installed {
        let _ = FILTER.set(handle);
        *GUARD.lock().unwrap_or_else(|p| p.into_inner()) = Some(guard);
    }
}

/// Applies a reloaded config's log settings: the access log switch, and the
/// filter unless `RUST_LOG` fixes it. The format needs a restart.
pub fn reload(config: &LogConfig) {
    ACCESS.store(config.access, Ordering::Relaxed);
    if env_filter().is_some() {
        tracing::info!("log.filter not applied: RUST_LOG is set and wins");
        return;
    }
    let Some(handle) = FILTER.get() else { return };
    match EnvFilter::builder().parse(guarded(&config.filter)) {
        Ok(filter) => {
            if handle.reload(filter).is_err() {
                tracing::warn!("log.filter could not be applied");
            }
        }
        Err(e) => tracing::warn!(error = %e, "log.filter not applied"),
    }
}

/// Pingora logs every failed HTTP/2 handshake at ERROR, one line each
/// (`H2 handshake error`, from its application loop): a client that
/// chooses HTTP/2, sends the preface and a bogus frame, and goes, repeats
/// one at will (74 lines for 100 connections, measured). Those lines pass
/// at most once a second; Pingora's other lines all pass. (TLS handshakes
/// are waitgate's own, logged once a second in `proxy::connections`.)
struct Handshakes;

/// Where Pingora logs a failed handshake from.
const HANDSHAKE_TARGETS: [&str; 2] = ["pingora_core::apps", "pingora_core::services::listening"];

impl<S> tracing_subscriber::layer::Filter<S> for Handshakes {
    fn enabled(
        &self,
        _: &tracing::Metadata<'_>,
        _: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        true
    }

    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        _: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        // Pingora's lines come through the `log` bridge: their own target is
        // the `log.target` field.
        if event.metadata().level() != &tracing::Level::ERROR {
            return true;
        }
        #[derive(Default)]
        struct Seen {
            pingora: bool,
            handshake: bool,
        }
        impl tracing::field::Visit for Seen {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "log.target" {
                    self.pingora |= HANDSHAKE_TARGETS.contains(&value);
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.handshake |= format!("{value:?}").contains("handshake");
                }
            }
        }
        let mut seen = Seen {
            pingora: HANDSHAKE_TARGETS.contains(&event.metadata().target()),
            ..Seen::default()
        };
        event.record(&mut seen);
        !(seen.pingora && seen.handshake) || due("pingora handshake", Instant::now()).is_some()
    }
}

/// Whether to write one line per request.
pub fn access_enabled() -> bool {
    ACCESS.load(Ordering::Relaxed)
}

/// Writes out every line still queued for the writer thread. Called just
/// before the process exits on its own.
pub fn flush() {
    drop(GUARD.lock().unwrap_or_else(|p| p.into_inner()).take());
}

/// When each cause last logged, and how many it has not logged since.
static LIMITED: LazyLock<Mutex<HashMap<&'static str, (Instant, u64)>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// At most one line a second per cause.
const LIMIT_INTERVAL: Duration = Duration::from_secs(1);

/// Logs a warning for `cause` at most once a second; the line says how many
/// occurrences it stands for (`count`, this one included).
pub fn warn_limited(cause: &'static str, error: &dyn std::fmt::Display) {
    if let Some(count) = due(cause, Instant::now()) {
        tracing::warn!(cause, count, %error, "redis call failed");
    }
}

/// [`warn_limited`] for a failure that leaves something undone, which
/// `note` says (the line stands for many users, so it names none).
pub fn warn_limited_noting(cause: &'static str, note: &'static str, error: &dyn std::fmt::Display) {
    if let Some(count) = due(cause, Instant::now()) {
        tracing::warn!(cause, count, note, %error, "redis call failed");
    }
}

/// `Some(count)` when `cause` may log at `now`: the occurrences since its
/// last line, this one included.
/// [`warn_limited`] at `error`, for Redis answering with an error (a
/// script or command it refuses, a password it no longer takes): as
/// repeatable as an outage, and as much a flood one line per request.
pub fn error_limited(cause: &'static str, error: &dyn std::fmt::Display) {
    if let Some(count) = due_in(&ERRORS, cause, Instant::now()) {
        tracing::error!(op = cause, count, %error, "redis call failed");
    }
}

/// When each cause of [`error_limited`] last logged, apart from the
/// warnings' (one cause may be both).
static ERRORS: LazyLock<Mutex<HashMap<&'static str, (Instant, u64)>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Whether a line for `cause` is due now (at most one a second), and the
/// occurrences it stands for.
pub fn limited(cause: &'static str) -> Option<u64> {
    due(cause, Instant::now())
}

fn due(cause: &'static str, now: Instant) -> Option<u64> {
    due_in(&LIMITED, cause, now)
}

fn due_in(
    table: &Mutex<HashMap<&'static str, (Instant, u64)>>,
    cause: &'static str,
    now: Instant,
) -> Option<u64> {
    let mut limited = table.lock().unwrap_or_else(|p| p.into_inner());
    let entry = limited.entry(cause).or_insert((now - LIMIT_INTERVAL, 0));
    entry.1 += 1;
    if now.duration_since(entry.0) < LIMIT_INTERVAL {
        return None;
    }
    let count = entry.1;
    *entry = (now, 0);
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingora_is_held_at_info_unless_named() {
        assert_eq!(guarded("debug"), "debug,pingora=info");
        assert_eq!(
            guarded("waitgate=info,TRACE"),
            "waitgate=info,TRACE,pingora=info"
        );
        for kept in [
            "info",
            "warn,waitgate=debug",
            "debug,pingora_proxy=debug",
            "waitgate=trace",
        ] {
            assert_eq!(guarded(kept), kept);
        }
    }

    /// Pingora's failed-handshake lines (as a client that opens HTTP/2
    /// and goes makes them) pass once a second; its other errors, and
    /// waitgate's, all pass.
    #[test]
    fn pingoras_handshake_errors_pass_once_a_second() {
        use std::sync::atomic::{AtomicUsize, Ordering as Counted};
        use std::sync::Arc;
        use tracing_subscriber::layer::SubscriberExt;
        struct Count(Arc<AtomicUsize>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
            fn on_event(
                &self,
                _: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                self.0.fetch_add(1, Counted::Relaxed);
            }
        }
        let written = Arc::new(AtomicUsize::new(0));
        let subscriber =
            tracing_subscriber::registry().with(Count(written.clone()).with_filter(Handshakes));
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..100 {
                tracing::error!(target: "pingora_core::apps", "H2 handshake error  HandshakeError");
            }
            assert_eq!(written.load(Counted::Relaxed), 1);
            tracing::error!(target: "pingora_core::apps", "H2 error, connection closed");
            tracing::error!(target: "waitgate::proxy", "handshake of our own");
            tracing::warn!(target: "pingora_core::apps", "H2 handshake warning");
            assert_eq!(written.load(Counted::Relaxed), 4);
        });
    }

    #[test]
    fn a_repeated_warning_is_written_once_a_second_with_its_count() {
        let start = Instant::now() + Duration::from_secs(10);
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(due("test-a", at(0)), Some(1));
        for ms in 1..=19 {
            assert_eq!(due("test-a", at(ms * 50)), None);
        }
        // Another cause has its own budget.
        assert_eq!(due("test-b", at(500)), Some(1));
        assert_eq!(due("test-a", at(1000)), Some(20));
        assert_eq!(due("test-a", at(1001)), None);
    }
}
