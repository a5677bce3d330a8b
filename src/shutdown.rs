//! Shutdown: the signals that start it, the count of requests under way,
//! and the drain that ends the process as soon as a SIGTERM finds none
//! left.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::{ShutdownSignal, ShutdownSignalWatch, ShutdownWatch};
use pingora::services::background::BackgroundService;

/// The signals that stop waitgate: SIGINT at once; SIGTERM, and SIGQUIT
/// too, by draining.
///
/// Pingora reads SIGQUIT as "hand the listening sockets to a new process
/// over the upgrade socket, then drain". waitgate offers no binary upgrade
/// (a rolling restart behind the load balancer does the same with no shared
/// socket path), and with nothing listening on that path the hand-over
/// fails after an error line and five more seconds of accepting; were
/// another Pingora process waiting there, it would get waitgate's
/// listeners. So SIGQUIT is a plain graceful stop, said in one line.
pub struct Signals;

#[async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(%e, "cannot catch a stop signal");
                None
            }
        };
        let (mut quit, mut term, mut int) = (
            listen(SignalKind::quit()),
            listen(SignalKind::terminate()),
            listen(SignalKind::interrupt()),
        );
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => drop(s.recv().await),
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = next(&mut quit) => {
                tracing::info!("SIGQUIT: waitgate has no binary upgrade; draining as for SIGTERM");
                ShutdownSignal::GracefulTerminate
            }
            _ = next(&mut term) => ShutdownSignal::GracefulTerminate,
            _ = next(&mut int) => ShutdownSignal::FastShutdown,
        }
    }
}

/// The number of requests under way, and whether the server is draining.
#[derive(Default)]
pub struct InFlight(AtomicUsize, AtomicBool);

/// One request under way; dropping it ends the request.
pub struct InFlightGuard(Arc<InFlight>);

impl InFlight {
    pub fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::Relaxed);
        InFlightGuard(self.clone())
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Whether a drain has begun: every reply from then on says
    /// `Connection: close`, as it is written, so that a client (or a load
    /// balancer's pool) never sends another request on a connection that
    /// is about to go. A reply decided before the drain began said
    /// keep-alive, and the next request on its connection found it closed.
    pub fn draining(&self) -> bool {
        self.1.load(Ordering::Relaxed)
    }

    fn start_draining(&self) {
        self.1.store(true, Ordering::Relaxed);
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Ends the process as soon as a SIGTERM drain is complete, and at the
/// latest when the grace period ends.
///
/// Pingora sleeps the whole grace period after SIGTERM whatever is left to
/// do, then gives its runtimes more time to stop. Listeners are closed and
/// idle keep-alive connections released as soon as the shutdown starts, so
/// once no request is in flight there is nothing left to wait for: this
/// service then exits the process.
pub struct Drain {
    in_flight: Arc<InFlight>,
    grace: Duration,
    /// Runs just before the process exits (writes out buffered log lines).
    before_exit: fn(),
}

impl Drain {
    pub fn new(in_flight: Arc<InFlight>, grace: Duration, before_exit: fn()) -> Drain {
        Drain {
            in_flight,
            grace,
            before_exit,
        }
    }
}

/// How long the in-flight count must stay at zero before exiting: covers a
/// request whose header was read just as the shutdown began.
const DRAIN_QUIET: Duration = Duration::from_millis(100);

#[async_trait]
impl BackgroundService for Drain {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if shutdown.changed().await.is_err() {
            return;
        }
        self.in_flight.start_draining();
        let started = Instant::now();
        tracing::info!(
            in_flight = self.in_flight.count(),
            grace_s = self.grace.as_secs(),
            "draining"
        );
        let mut quiet_since: Option<Instant> = None;
        while started.elapsed() < self.grace {
            if self.in_flight.count() == 0 {
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= DRAIN_QUIET {
                    tracing::info!(
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "drained, exiting"
                    );
                    (self.before_exit)();
                    std::process::exit(0);
                }
            } else {
                quiet_since = None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The grace period is a promise to the operator: requests still in
        // flight now are cut off rather than keeping the process alive.
        tracing::warn!(
            in_flight = self.in_flight.count(),
            grace_s = self.grace.as_secs(),
            "grace period over, exiting with requests in flight"
        );
        (self.before_exit)();
        std::process::exit(0);
    }
}
