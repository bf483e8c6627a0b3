//! The shell of R11 (docs/semantics.md): one [`ServerHealth`] machine per API server, shared by
//! every informer of one factory (one kube `Client`), with its probe and its timers.
//!
//! Each informer's reflector driver holds a [`ServerLoop`] (one per informer): it reports its
//! requests, its successes (a LIST page, a WATCH that opened) and its outage failures (R9's
//! kinds), and whether it is watching. The supervisor subscribes to the [`ServerNotice`]s:
//! on a return it cuts the backoff it is waiting in (`handle_server_back`), and at the end of
//! a backoff it asks [`ServerLoop::retry_allowed`] whether the shared probe already did the
//! retry (`handle_server_down`).
//!
//! While the server is down, a task sends the probe (`GET /version` through kube's `Client`)
//! when the machine asks for it; it runs on kinformer's I/O runtime (not on an informer's
//! thread: the probe outlives any one informer, and its connections join the client's pool)
//! and ends once the server is stable again (a later outage starts another). The task is the
//! machine's only timer: a held return (after flaps) is announced by it.
//!
//! "Watching again": from a return, the time until each loop is watching with its cache known
//! current (R10) again, and until every loop of the client is ([`ServerHealthStats`]).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use kinformer::server_health::{
    ServerHealth, ServerHealthConfig, ServerHealthCounters, ServerHealthEvent,
};
use kube::Client;
use tokio::sync::{Notify, watch};

/// How long a probe may take before it counts as a failure (a server that accepts but never
/// answers is down too).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the shared handle announces to the loops, through a `tokio::sync::watch` channel (the
/// last value is what counts: a loop that missed a notice still reads the current epoch).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerNotice {
    /// Returns announced so far (R11); a loop compares it with the last it saw.
    pub epoch: u64,
    /// When the last return was announced.
    pub returned_at: Option<Instant>,
    /// From the last return until every loop of the client was watching again (None while
    /// some loop is not, or before any return).
    pub all_watching_after: Option<Duration>,
}

/// What the shared handle saw (a copy).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerHealthStats {
    /// The machine's counters: outages, returns, flaps, probes, requests while down.
    pub counters: ServerHealthCounters,
    /// Loops (informers) sharing the server now.
    pub loops: usize,
    /// True while the server is taken to be down.
    pub down: bool,
    /// From the last return until every loop was watching again (R11's figure).
    pub last_watching_again: Option<Duration>,
    /// The longest such time so far.
    pub max_watching_again: Option<Duration>,
    /// Returns after which every loop watched again.
    pub watching_again_count: u64,
}

/// One loop's state as the handle keeps it.
#[derive(Clone, Copy, Debug, Default)]
struct LoopState {
    /// Watching with its cache known current (or parked on an empty shard).
    watching: bool,
    /// A return was announced and this loop has not watched again since.
    pending: bool,
}

struct Inner {
    machine: ServerHealth,
    loops: BTreeMap<u64, LoopState>,
    next_id: u64,
    /// The return whose "watching again" is still being measured.
    measuring: Option<Instant>,
    stats: ServerHealthStats,
    /// True while a probe task runs.
    task: bool,
}

struct Shared {
    inner: Mutex<Inner>,
    notices: watch::Sender<ServerNotice>,
    /// Wakes the probe task when an input moved the machine's timer.
    wake: Notify,
    /// The client probes go through (None: the loops' own requests only).
    client: Option<Client>,
    /// False in unit tests that drive the machine's clock themselves: no probe task.
    drive: bool,
}

/// The shared health of one API server (R11); cheap to clone, all clones share it. A factory
/// makes one for its client and hands a [`ServerLoop`] to every informer it makes.
#[derive(Clone)]
pub struct ServerHealthHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ServerHealthHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHealthHandle")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl ServerHealthHandle {
    /// A server taken to be up, probed through `client` while down (None: no probe; the loops'
    /// own requests notice the return).
    pub fn new(config: ServerHealthConfig, client: Option<Client>) -> Self {
        let (notices, _) = watch::channel(ServerNotice::default());
        ServerHealthHandle {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    machine: ServerHealth::new(config, 1),
                    loops: BTreeMap::new(),
                    next_id: 0,
                    measuring: None,
                    stats: ServerHealthStats::default(),
                    task: false,
                }),
                notices,
                wake: Notify::new(),
                client,
                drive: true,
            }),
        }
    }

    /// Registers one more loop (an informer); it counts in the budget until dropped.
    pub fn register(&self) -> ServerLoop {
        let mut g = self.lock();
        let id = g.next_id;
        g.next_id += 1;
        g.loops.insert(id, LoopState::default());
        let n = g.loops.len();
        g.machine.set_loops(n);
        ServerLoop {
            handle: self.clone(),
            id,
        }
    }

    /// The announcements, last value first.
    pub fn subscribe(&self) -> watch::Receiver<ServerNotice> {
        self.shared.notices.subscribe()
    }

    /// What the handle saw so far.
    pub fn stats(&self) -> ServerHealthStats {
        let g = self.lock();
        ServerHealthStats {
            counters: *g.machine.counters(),
            loops: g.loops.len(),
            down: g.machine.is_down(),
            ..g.stats
        }
    }

    /// The parameters of the shared machine: its request budget follows `backoff`.
    pub fn config(&self) -> ServerHealthConfig {
        self.lock().machine.config().clone()
    }

    /// True while the server is taken to be down.
    pub fn is_down(&self) -> bool {
        self.lock().machine.is_down()
    }

    /// The budget of requests `elapsed` into an outage (client-go's rate, R11).
    pub fn budget(&self, elapsed: Duration) -> u64 {
        self.lock().machine.budget(elapsed)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.shared.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drains the machine's announcements into the channel and the loops' measurements, and
    /// starts the probe task when the server went down without one (or, from a loop's input,
    /// wakes it: its timer may have moved; the task never wakes itself, or it would spin).
    fn after_input(&self, g: &mut Inner, now: Instant, from_task: bool) {
        while let Some(ServerHealthEvent::Returned {
            epoch,
            at,
            down_for,
        }) = g.machine.poll_event()
        {
            tracing::info!(
                epoch,
                down_for_ms = down_for.as_millis() as u64,
                "API server back (R11)"
            );
            g.measuring = Some(at);
            for l in g.loops.values_mut() {
                l.pending = !l.watching;
            }
            self.shared.notices.send_modify(|n| {
                n.epoch = epoch;
                n.returned_at = Some(at);
                n.all_watching_after = None;
            });
            self.check_all_watching(g, now);
        }
        if g.machine.poll_timeout().is_some() {
            if g.task {
                if !from_task {
                    self.shared.wake.notify_one();
                }
            } else if self.spawn(probe_task(self.clone())) {
                g.task = true;
            }
        }
    }

    /// Runs `task` on kinformer's I/O runtime, where kube requests are opened (a connection
    /// the probe opens joins the client's pool, so it must not live on an informer's thread,
    /// see `runtime::io`); false when that runtime could not start.
    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) -> bool {
        if !self.shared.drive {
            return false;
        }
        match crate::runtime::io() {
            Some(rt) => {
                rt.spawn(task);
                true
            }
            None => false,
        }
    }

    /// After a return: once no loop is pending, the client watches again.
    fn check_all_watching(&self, g: &mut Inner, now: Instant) {
        let Some(at) = g.measuring else { return };
        if g.loops.values().any(|l| l.pending) {
            return;
        }
        g.measuring = None;
        let d = now.saturating_duration_since(at);
        g.stats.last_watching_again = Some(d);
        g.stats.max_watching_again = Some(g.stats.max_watching_again.map_or(d, |m| m.max(d)));
        g.stats.watching_again_count += 1;
        tracing::info!(
            after_ms = d.as_millis() as u64,
            "every informer watching again (R11)"
        );
        self.shared
            .notices
            .send_modify(|n| n.all_watching_after = Some(d));
    }
}

/// The probe and timer task: runs while the machine has a timer (down, holding a return, or a
/// return not yet stable).
async fn probe_task(h: ServerHealthHandle) {
    // Clears `task` however the task ends (its runtime may stop with an informer).
    struct Running {
        handle: ServerHealthHandle,
        armed: bool,
    }
    impl Drop for Running {
        fn drop(&mut self) {
            if self.armed {
                self.handle.lock().task = false;
            }
        }
    }
    let mut running = Running {
        handle: h.clone(),
        armed: true,
    };
    let h = &h;
    loop {
        let (probe, next) = {
            let mut g = h.lock();
            let now = Instant::now();
            g.machine.handle_timeout(now);
            // No informer left to serve (all shut down): nothing to probe for.
            let probe = !g.loops.is_empty() && g.machine.poll_probe(now);
            h.after_input(&mut g, now, true);
            let next = g.machine.poll_timeout();
            if !probe && (next.is_none() || g.loops.is_empty()) {
                // Under the lock: an input after this starts a new task, which this one's
                // guard must not mark as ended.
                g.task = false;
                running.armed = false;
                return;
            }
            (probe, next)
        };
        if probe {
            let ok = probe_once(h.shared.client.as_ref()).await;
            let mut g = h.lock();
            let now = Instant::now();
            g.machine.handle_probe_result(now, ok);
            h.after_input(&mut g, now, true);
            continue;
        }
        if let Some(at) = next {
            tokio::select! {
                _ = tokio::time::sleep_until(at.into()) => {}
                _ = h.shared.wake.notified() => {}
            }
        }
    }
}

/// `GET /version`: true when the server answered anything but an outage (a 5xx).
async fn probe_once(client: Option<&Client>) -> bool {
    let Some(client) = client else {
        // No client to probe with: a probe that fails, so the loops' own retries decide.
        return false;
    };
    match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => true,
        Ok(Err(kube::Error::Api(s))) => s.code > 0 && s.code < 500,
        _ => false,
    }
}

/// One informer's part in the shared health (R11); deregisters when dropped.
pub struct ServerLoop {
    handle: ServerHealthHandle,
    id: u64,
}

impl std::fmt::Debug for ServerLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerLoop").field("id", &self.id).finish()
    }
}

impl ServerLoop {
    /// The shared handle.
    pub fn handle(&self) -> &ServerHealthHandle {
        &self.handle
    }

    /// A request is about to be sent (counted against the budget while down).
    pub fn request(&self, now: Instant) {
        self.handle.lock().machine.handle_request(now);
    }

    /// A request succeeded: a LIST page, a WATCH that opened.
    pub fn success(&self, now: Instant) {
        let mut g = self.handle.lock();
        g.machine.handle_success(now);
        self.handle.after_input(&mut g, now, false);
    }

    /// The loop failed as in an outage (R9's kinds).
    pub fn failure(&self, now: Instant) {
        let mut g = self.handle.lock();
        g.machine.handle_failure(now);
        if let Some(l) = g.loops.get_mut(&self.id) {
            l.watching = false;
        }
        self.handle.after_input(&mut g, now, false);
    }

    /// Whether the loop, whose backoff after an outage ends at `now` and whose last failure
    /// was at `last_failure`, sends its retry (false: a probe found the server down since, or
    /// the budget is spent; the loop backs off again without a request).
    pub fn retry_allowed(&self, now: Instant, last_failure: Instant) -> bool {
        self.handle.lock().machine.retry_allowed(now, last_failure)
    }

    /// The loop is watching with its cache known current (or not). Returns, the first time it
    /// is after a return, how long after the return that was.
    pub fn set_watching(&self, watching: bool, now: Instant) -> Option<Duration> {
        let mut g = self.handle.lock();
        let returned = g.measuring;
        let l = g.loops.get_mut(&self.id)?;
        if l.watching == watching {
            return None;
        }
        l.watching = watching;
        if !watching || !l.pending {
            return None;
        }
        l.pending = false;
        let d = returned.map(|at| now.saturating_duration_since(at));
        self.handle.check_all_watching(&mut g, now);
        d
    }
}

impl Drop for ServerLoop {
    fn drop(&mut self) {
        let mut g = self.handle.lock();
        g.loops.remove(&self.id);
        let n = g.loops.len();
        g.machine.set_loops(n);
        let now = Instant::now();
        self.handle.check_all_watching(&mut g, now);
        if n == 0 && g.task {
            // The probe task ends: no informer is left to probe for.
            self.handle.shared.wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle without a probe task: the test's times are the machine's only clock.
    fn handle() -> ServerHealthHandle {
        let mut h = ServerHealthHandle::new(ServerHealthConfig::default(), None);
        if let Some(s) = Arc::get_mut(&mut h.shared) {
            s.drive = false;
        }
        h
    }

    #[test]
    fn a_return_is_announced_and_measured_until_every_loop_watches() {
        let h = handle();
        let (a, b) = (h.register(), h.register());
        let mut rx = h.subscribe();
        let t = Instant::now();
        assert_eq!(a.set_watching(true, t), None);
        assert_eq!(b.set_watching(true, t), None);
        a.failure(t);
        b.failure(t);
        assert!(h.is_down());
        // b's LIST answers first: the server is back.
        let back = t + Duration::from_secs(4);
        b.success(back);
        assert!(!h.is_down());
        assert!(rx.has_changed().unwrap_or(false));
        let n = *rx.borrow_and_update();
        assert_eq!(n.epoch, 1);
        assert_eq!(n.returned_at, Some(back));
        assert_eq!(n.all_watching_after, None);
        assert_eq!(
            b.set_watching(true, back + Duration::from_millis(300)),
            Some(Duration::from_millis(300))
        );
        assert_eq!(h.stats().last_watching_again, None, "a still not watching");
        assert_eq!(
            a.set_watching(true, back + Duration::from_millis(900)),
            Some(Duration::from_millis(900))
        );
        let s = h.stats();
        assert_eq!(s.last_watching_again, Some(Duration::from_millis(900)));
        assert_eq!(s.watching_again_count, 1);
        assert_eq!(
            rx.borrow_and_update().all_watching_after,
            Some(Duration::from_millis(900))
        );
    }

    #[test]
    fn a_loop_that_leaves_does_not_hold_the_measure_open() {
        let h = handle();
        let a = h.register();
        let b = h.register();
        let t = Instant::now();
        a.failure(t);
        b.failure(t);
        a.success(t + Duration::from_secs(1));
        a.set_watching(true, t + Duration::from_secs(1));
        assert_eq!(h.stats().watching_again_count, 0);
        drop(b);
        assert_eq!(h.stats().watching_again_count, 1);
        assert_eq!(h.stats().loops, 1);
    }

    #[test]
    fn the_probe_task_runs_while_down_and_ends_with_the_last_informer() {
        let h = ServerHealthHandle::new(ServerHealthConfig::default(), None);
        let a = h.register();
        a.failure(Instant::now());
        assert!(h.lock().task, "an outage starts the probe task");
        // Without a client every probe fails: the task keeps probing, paced.
        let deadline = Instant::now() + Duration::from_secs(30);
        while h.stats().counters.probes == 0 {
            assert!(Instant::now() < deadline, "no probe: {:?}", h.stats());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(h.is_down());
        drop(a);
        while h.lock().task {
            assert!(Instant::now() < deadline, "the task outlived its informers");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn loops_set_the_budget() {
        let h = handle();
        let one = h.budget(Duration::from_secs(6));
        let _a = h.register();
        let _b = h.register();
        let _c = h.register();
        // R8's shortest schedule has retried at 0.8, 2.4 and 5.6 s by 6 s: 3 per loop.
        assert_eq!(one, 3);
        assert_eq!(h.budget(Duration::from_secs(6)), 9);
    }
}
