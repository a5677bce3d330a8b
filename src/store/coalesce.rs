//! Coalesced Redis calls: concurrent calls of one kind for one queue share
//! one script call.
//!
//! At a big open most of Redis's time per poll is the cost of a script call
//! itself (parsing `EVALSHA`, setting up the script, the round trip), not
//! the few sorted-set lookups it makes. So calls that arrive while one of
//! their kind is under way wait for it, and then all go together as the
//! next call, at most [`MAX_USERS_PER_CALL`] at a time. A call that finds none under
//! way goes at once: nothing is ever held back to wait for company, so a
//! lone call costs only a task hop more than an uncoalesced one.
//!
//! Polls can also be paced ([`Coalescer::paced`]): while calls follow one
//! another (requests came in while the last one was under way), the next
//! starts no sooner than the pace after the last one started, unless a full
//! call is waiting. A call's fixed cost in Redis (the script's own work:
//! 57 µs for a rank call with no users, with Redis alone on the development
//! VM, several times that under load) is then shared by the polls of a
//! pace rather than of a round trip. A call that finds none under way still
//! goes at once, so a lone poll, or one client polling in turn, is not held
//! back. So the pace bounds an instance's calls only while its polls
//! overlap its calls (about one a pace then); polls further apart than a
//! call takes each go alone, as before.
//!
//! The calls are made by a task of their own, not by whichever caller came
//! first, so that a caller that goes away (its client disconnected) cannot
//! leave the others waiting.
//!
//! A Redis that hangs must still give every caller a fast 503, as it does
//! without coalescing: a call that fails as unavailable fails everything
//! pending with it (they would go to the same Redis), a caller waits no
//! longer than its deadline, and the requests of callers that gave up are
//! not sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::StoreError;

/// The most requests one coalesced call carries (the scripts take up to
/// `store::MAX_USERS_PER_SCRIPT` users; fewer keeps each call short).
pub const MAX_USERS_PER_CALL: usize = 200;

/// One kind of call, made for a batch of requests at once.
pub trait Batch: Send + Sync + 'static {
    type Request: Send + 'static;
    type Answer: Send + 'static;
    /// One answer per request, in order; or one error for them all.
    fn call(
        &self,
        requests: Vec<Self::Request>,
    ) -> BoxFuture<'static, Result<Vec<Self::Answer>, StoreError>>;
}

type Waiting<B> = (
    <B as Batch>::Request,
    oneshot::Sender<Result<<B as Batch>::Answer, StoreError>>,
);

/// Requests of one kind for one queue, and whether a call is under way.
pub struct Coalescer<B: Batch> {
    batch: B,
    /// The longest a caller waits for its answer, from its arrival.
    deadline: Duration,
    /// The least time from one call's start to the next while calls follow
    /// one another, short of a full call (zero: none).
    pace: Duration,
    /// Told when a full call is pending, to end a pace early.
    full: tokio::sync::Notify,
    state: Mutex<State<B>>,
}

struct State<B: Batch> {
    busy: bool,
    pending: Vec<Waiting<B>>,
}

impl<B: Batch> State<B> {
    /// Drops the callers that gave up (deadline, or their client left);
    /// how many are left.
    fn live(&mut self) -> usize {
        self.pending.retain(|(_, tx)| !tx.is_closed());
        self.pending.len()
    }
}

impl<B: Batch> Coalescer<B> {
    pub fn new(batch: B, deadline: Duration) -> Arc<Coalescer<B>> {
        Coalescer::paced(batch, deadline, Duration::ZERO)
    }

    /// A coalescer whose calls, while they follow one another, start at
    /// least `pace` apart unless a full call is waiting. The pace is at most
    /// a quarter of the deadline, so that the wait leaves a caller time for
    /// its call.
    pub fn paced(batch: B, deadline: Duration, pace: Duration) -> Arc<Coalescer<B>> {
        Arc::new(Coalescer {
            batch,
            deadline,
            pace: pace.min(deadline / 4),
            full: tokio::sync::Notify::new(),
            state: Mutex::new(State {
                busy: false,
                pending: Vec::new(),
            }),
        })
    }

    /// Makes `request` with whatever else is pending: at once when nothing
    /// is under way, else as part of the next call.
    pub async fn call(self: &Arc<Self>, request: B::Request) -> Result<B::Answer, StoreError> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut state = self.lock();
            state.pending.push((request, tx));
            if state.pending.len() == MAX_USERS_PER_CALL {
                self.full.notify_waiters();
            }
            !std::mem::replace(&mut state.busy, true)
        };
        if start {
            tokio::spawn(self.clone().drive());
        }
        match tokio::time::timeout(self.deadline, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(StoreError::Failed("a coalesced call was dropped".into())),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {} ms",
                self.deadline.as_millis()
            ))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests came in while the last call (`started` then) was under way:
    /// waits to gather more for a pace from its start, unless a call is
    /// full, or nothing is pending (the loop is then done at once).
    async fn pace_from(&self, started: tokio::time::Instant) {
        // Listening before looking: a call filled in between still ends
        // the wait.
        let filled = self.full.notified();
        tokio::pin!(filled);
        filled.as_mut().enable();
        let pending = self.lock().live();
        if (1..MAX_USERS_PER_CALL).contains(&pending) {
            tokio::select! {
                _ = tokio::time::sleep_until(started + self.pace) => {}
                _ = filled => {}
            }
        }
    }

    /// Makes calls until nothing is pending.
    async fn drive(self: Arc<Self>) {
        let mut driving = Driving {
            coalescer: &self,
            done: false,
        };
        // When the last call started; none yet: the first goes at once.
        let mut last: Option<tokio::time::Instant> = None;
        loop {
            if let Some(started) = last.filter(|_| !self.pace.is_zero()) {
                self.pace_from(started).await;
            }
            let taken: Vec<Waiting<B>> = {
                let mut state = self.lock();
                if state.live() == 0 {
                    state.busy = false;
                    driving.done = true;
                    return;
                }
                let n = state.pending.len().min(MAX_USERS_PER_CALL);
                state.pending.drain(..n).collect()
            };
            let (requests, senders): (Vec<_>, Vec<_>) = taken.into_iter().unzip();
            let asked = requests.len();
            last = Some(tokio::time::Instant::now());
            match self.batch.call(requests).await {
                Ok(answers) if answers.len() == asked => {
                    for (tx, answer) in senders.into_iter().zip(answers) {
                        let _ = tx.send(Ok(answer));
                    }
                }
                Ok(answers) => {
                    let error = format!("{} answers for {asked} requests", answers.len());
                    for tx in senders {
                        let _ = tx.send(Err(StoreError::Failed(error.clone())));
                    }
                }
                Err(error) => {
                    let mut failed = senders;
                    if matches!(error, StoreError::Unavailable(_)) {
                        failed.extend(self.lock().pending.drain(..).map(|(_, tx)| tx));
                    }
                    for tx in failed {
                        let _ = tx.send(Err(error.clone()));
                    }
                }
            }
        }
    }
}

/// Frees a coalescer whose driving task ended before its work did
/// (cancelled at shutdown, or a panic in a call): not busy any more, and
/// the pending callers answered (their senders dropped), so that the next
/// call starts afresh instead of waiting for a task that is gone.
struct Driving<'a, B: Batch> {
    coalescer: &'a Coalescer<B>,
    done: bool,
}

impl<B: Batch> Drop for Driving<'_, B> {
    fn drop(&mut self) {
        if !self.done {
            let mut state = self.coalescer.lock();
            state.busy = false;
            state.pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Doubles numbers, slowly, counting its calls and their sizes.
    struct Doubler {
        calls: Arc<AtomicUsize>,
        sizes: Arc<Mutex<Vec<usize>>>,
        fail: bool,
    }

    impl Batch for Doubler {
        type Request = u32;
        type Answer = u32;
        fn call(&self, requests: Vec<u32>) -> BoxFuture<'static, Result<Vec<u32>, StoreError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.sizes.lock().unwrap().push(requests.len());
            let fail = self.fail;
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if fail {
                    return Err(StoreError::Unavailable("down".into()));
                }
                Ok(requests.into_iter().map(|n| n * 2).collect())
            })
        }
    }

    /// The coalescer, its call count and the sizes of its calls.
    type Counted = (
        Arc<Coalescer<Doubler>>,
        Arc<AtomicUsize>,
        Arc<Mutex<Vec<usize>>>,
    );

    fn doubler(fail: bool) -> Counted {
        paced_doubler(fail, Duration::ZERO)
    }

    fn paced_doubler(fail: bool, pace: Duration) -> Counted {
        let calls = Arc::new(AtomicUsize::new(0));
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let c = Coalescer::paced(
            Doubler {
                calls: calls.clone(),
                sizes: sizes.clone(),
                fail,
            },
            Duration::from_secs(5),
            pace,
        );
        (c, calls, sizes)
    }

    #[tokio::test]
    async fn a_lone_call_goes_at_once_and_concurrent_ones_share_calls() {
        let (c, calls, sizes) = doubler(false);
        let started = std::time::Instant::now();
        assert_eq!(c.call(21).await.unwrap(), 42);
        assert!(
            started.elapsed() < Duration::from_millis(60),
            "not held back"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        for (n, h) in (0..500u32).zip(at_once(&c, 0..500)) {
            let doubled = h.await.unwrap().unwrap();
            assert_eq!(doubled, n * 2, "each caller gets its own answer");
        }
        let made = calls.load(Ordering::SeqCst) - 1;
        assert!(made <= 5, "500 concurrent calls made {made} calls");
        assert!(sizes
            .lock()
            .unwrap()
            .iter()
            .all(|&n| n <= MAX_USERS_PER_CALL));
    }

    #[tokio::test]
    async fn a_failed_call_fails_every_request_in_it_and_the_next_call_still_goes() {
        let (c, _, _) = doubler(true);
        for h in at_once(&c, [1, 2]) {
            assert!(h.await.unwrap().is_err());
        }
        assert!(c.call(3).await.is_err(), "not stuck busy");
    }

    #[tokio::test]
    async fn a_caller_that_goes_away_leaves_the_others_answered() {
        let (c, _, _) = doubler(false);
        let first = at_once(&c, [1]).remove(0);
        tokio::time::sleep(Duration::from_millis(1)).await;
        first.abort();
        assert_eq!(c.call(5).await.unwrap(), 10);
    }

    /// A caller every `every` for `during`, each checked for its answer.
    async fn steady<B: Batch<Request = u32, Answer = u32>>(
        c: &Arc<Coalescer<B>>,
        every: Duration,
        during: Duration,
    ) {
        let started = tokio::time::Instant::now();
        let mut callers = Vec::new();
        for n in 0.. {
            if started.elapsed() >= during {
                break;
            }
            callers.extend(at_once(c, [n]));
            tokio::time::sleep(every).await;
        }
        for (n, h) in callers.into_iter().enumerate() {
            assert_eq!(h.await.unwrap().unwrap(), 2 * n as u32);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn paced_calls_start_a_pace_apart_while_callers_keep_coming() {
        // A caller every 2 ms for 600 ms; a call takes 20 ms.
        let (every, during) = (Duration::from_millis(2), Duration::from_millis(600));
        let (c, calls, _) = doubler(false);
        steady(&c, every, during).await;
        let unpaced = calls.load(Ordering::SeqCst);
        let (c, calls, sizes) = paced_doubler(false, Duration::from_millis(100));
        steady(&c, every, during).await;
        let paced = calls.load(Ordering::SeqCst);
        assert!(unpaced >= 25, "{unpaced} calls unpaced");
        // The first at once, then one a pace.
        assert!(paced <= 8, "{paced} calls paced");
        assert!(sizes.lock().unwrap().iter().skip(1).all(|&n| n >= 40));
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_lone_call_goes_at_once_and_a_full_call_waits_for_no_pace() {
        let pace = Duration::from_secs(1);
        let (c, calls, sizes) = paced_doubler(false, pace);
        let started = tokio::time::Instant::now();
        assert_eq!(c.call(21).await.unwrap(), 42);
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(20),
            "one call's time"
        );
        // Long after: alone again, at once.
        tokio::time::sleep(pace * 2).await;
        let started = tokio::time::Instant::now();
        let first = at_once(&c, [1]);
        tokio::time::sleep(Duration::from_millis(1)).await;
        // A full call gathered behind it goes as the first returns.
        let full = at_once(&c, 0..MAX_USERS_PER_CALL as u32);
        for h in first.into_iter().chain(full) {
            h.await.unwrap().unwrap();
        }
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(40),
            "two calls' time"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(sizes.lock().unwrap()[1..], [1, MAX_USERS_PER_CALL]);

        // A call that fills while its pace is under way goes then.
        tokio::time::sleep(pace * 2).await;
        let started = tokio::time::Instant::now();
        let mut callers = at_once(&c, [1]);
        tokio::time::sleep(Duration::from_millis(1)).await;
        callers.extend(at_once(&c, [2]));
        // The first call is back, and the next waits out its pace.
        tokio::time::sleep(Duration::from_millis(30)).await;
        callers.extend(at_once(&c, 0..MAX_USERS_PER_CALL as u32 - 1));
        for h in callers {
            h.await.unwrap().unwrap();
        }
        assert_eq!(started.elapsed(), Duration::from_millis(51), "not a pace");
        assert_eq!(sizes.lock().unwrap()[3..], [1, MAX_USERS_PER_CALL]);
    }

    /// A Redis that hangs: every call takes `hang` and then fails as
    /// unavailable, or panics (the first `panics` calls).
    struct Hung {
        hang: Duration,
        calls: Arc<AtomicUsize>,
        panics: usize,
    }

    impl Batch for Hung {
        type Request = u32;
        type Answer = u32;
        fn call(&self, _: Vec<u32>) -> BoxFuture<'static, Result<Vec<u32>, StoreError>> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let (hang, panics) = (self.hang, n < self.panics);
            Box::pin(async move {
                tokio::time::sleep(hang).await;
                assert!(!panics, "a call that panics");
                Err(StoreError::Unavailable("timed out".into()))
            })
        }
    }

    fn hung(
        hang: Duration,
        deadline: Duration,
        panics: usize,
    ) -> (Arc<Coalescer<Hung>>, Arc<AtomicUsize>) {
        paced_hung(hang, deadline, panics, Duration::ZERO)
    }

    fn paced_hung(
        hang: Duration,
        deadline: Duration,
        panics: usize,
        pace: Duration,
    ) -> (Arc<Coalescer<Hung>>, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let batch = Hung {
            hang,
            calls: calls.clone(),
            panics,
        };
        (Coalescer::paced(batch, deadline, pace), calls)
    }

    /// Calls with these requests at once, each in a task of its own.
    fn at_once<B: Batch<Request = u32>>(
        c: &Arc<Coalescer<B>>,
        requests: impl IntoIterator<Item = u32>,
    ) -> Vec<tokio::task::JoinHandle<Result<B::Answer, StoreError>>> {
        requests
            .into_iter()
            .map(|n| {
                let c = c.clone();
                tokio::spawn(async move { c.call(n).await })
            })
            .collect()
    }

    /// That many callers at once against a hung Redis are all told it is
    /// unavailable within `limit`.
    async fn all_refused_within(c: &Arc<Coalescer<Hung>>, callers: u32, limit: Duration) {
        let started = std::time::Instant::now();
        for h in at_once(c, 0..callers) {
            assert!(matches!(h.await.unwrap(), Err(StoreError::Unavailable(_))));
        }
        let took = started.elapsed();
        assert!(took < limit, "the last answer after {took:?}");
    }

    #[tokio::test]
    async fn an_unavailable_call_fails_everything_pending_at_once() {
        // 2,000 callers would be ten calls of 200 one after the other.
        let (c, calls) = hung(Duration::from_millis(100), Duration::from_secs(5), 0);
        all_refused_within(&c, 2_000, Duration::from_millis(300)).await;
        assert!(calls.load(Ordering::SeqCst) <= 2, "{calls:?} calls");
    }

    #[tokio::test]
    async fn paced_an_unavailable_redis_still_fails_everything_pending_at_once() {
        let (c, calls) = paced_hung(
            Duration::from_millis(100),
            Duration::from_secs(5),
            0,
            Duration::from_millis(250),
        );
        // Behind a first call that fails: the pace adds nothing to the 503s.
        all_refused_within(&c, 2_000, Duration::from_millis(300)).await;
        assert!(calls.load(Ordering::SeqCst) <= 2, "{calls:?} calls");
    }

    #[tokio::test]
    async fn no_caller_waits_past_its_deadline_and_those_who_gave_up_are_not_sent() {
        let (c, calls) = hung(Duration::from_millis(400), Duration::from_millis(100), 0);
        all_refused_within(&c, 500, Duration::from_millis(250)).await;
        // What was pending behind the first call is not sent once it ends.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_call_that_panics_leaves_the_coalescer_free() {
        let (c, calls) = hung(Duration::from_millis(20), Duration::from_secs(5), 1);
        let started = std::time::Instant::now();
        for h in at_once(&c, 0..50) {
            assert!(h.await.unwrap().is_err());
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        // The next call starts afresh, and gets Redis's own answer.
        assert!(matches!(c.call(1).await, Err(StoreError::Unavailable(_))));
        assert!(calls.load(Ordering::SeqCst) >= 2);
    }
}
