//! One API server's health as every informer of one client sees it (docs/semantics.md R11).
//!
//! client-go's reflectors back off alone: each has its own backoff manager (R8), and one that
//! reaches a server that is back again tells the others nothing, so after an outage each
//! informer waits out the backoff it grew while the server was down (measured against a
//! kube-apiserver 1.34 restart: 3.2–7.6 s until every informer watched again, 8.9–12 s for a
//! second restart within two minutes). The closest client-go piece is `rest.URLBackoff`, a
//! backoff per server host reset by any success; it is off by default and the reflectors'
//! backoff managers never hear of it.
//!
//! [`ServerHealth`] is that shared view as a pure machine (time passed in as `now`), one per
//! server (all the informers of one factory or one kube `Client`). Every loop reports its
//! outage failures ([`handle_failure`](ServerHealth::handle_failure)), the requests it sends
//! ([`handle_request`](ServerHealth::handle_request)) and its successes
//! ([`handle_success`](ServerHealth::handle_success)); while the server is down, one shared
//! probe (`GET /version`, [`poll_probe`](ServerHealth::poll_probe)) stands in for the loops'
//! own retries. The first success after a run of outage failures is a *return*:
//! [`poll_event`](ServerHealth::poll_event) announces it, and each loop waiting in a backoff
//! makes its next request due at once (the reflector's `handle_server_back`). In the actors,
//! `kinformer_actors::ServerHealthHandle` drives it: one per factory, its probe and timers in
//! one task.
//!
//! Two bounds keep this from hammering a server (R11):
//! - **Budget.** While down, the probes and the loops' own requests together never exceed what
//!   client-go's informers could send by then: `loops` reflectors each retrying on R8's shortest
//!   schedule (0.8 s, 2.4 s, 5.6 s, … after the outage began: no jitter, doubling up to the cap),
//!   and probes are at least `probe_interval` apart.
//! - **Flaps.** A return followed by an outage failure within `stable_after` is a *flap*. The
//!   next return is then announced only after a backoff of its own (R8's parameters, growing
//!   with every flap), so a server that answers once and fails again costs each loop at most
//!   one request per announcement, never a hot loop. A return that holds for `stable_after`
//!   resets that backoff and ends the outage's budget period.

use std::{collections::VecDeque, time::Duration, time::Instant};

use crate::backoff::{Backoff, BackoffConfig};

/// Parameters of [`ServerHealth`].
#[derive(Clone, Debug, PartialEq)]
pub struct ServerHealthConfig {
    /// The loops' backoff (R8), whose shortest schedule sets the request budget while down.
    pub backoff: BackoffConfig,
    /// Shortest time between two probes (500 ms): a return is noticed within about this long
    /// while the budget lasts.
    pub probe_interval: Duration,
    /// How long a return must hold (no outage failure) before it counts as stable (10 s): an
    /// outage failure sooner is a flap; one later starts a new outage with a fresh budget.
    pub stable_after: Duration,
}

impl Default for ServerHealthConfig {
    fn default() -> Self {
        ServerHealthConfig {
            backoff: BackoffConfig::default(),
            probe_interval: Duration::from_millis(500),
            stable_after: Duration::from_secs(10),
        }
    }
}

/// What the machine announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerHealthEvent {
    /// The server is back (R11): loops waiting in a backoff after an outage may retry now.
    Returned {
        /// Increases by one per announced return.
        epoch: u64,
        /// When the return was announced (the first success, or the end of the flap backoff).
        at: Instant,
        /// How long the server had been failing when the return was noticed.
        down_for: Duration,
    },
}

/// Counters of what the machine saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerHealthCounters {
    /// Outages: runs of outage failures that started while the server was up.
    pub outages: u64,
    /// Returns announced.
    pub returns: u64,
    /// Returns followed by an outage failure within `stable_after`.
    pub flaps: u64,
    /// Probes sent.
    pub probes: u64,
    /// Probes that found the server down.
    pub probe_failures: u64,
    /// Requests the loops sent while the server was down.
    pub requests_while_down: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Answering. `returned`: when the last return was announced (None: before any outage, or
    /// the return held for `stable_after`).
    Up { returned: Option<Instant> },
    /// A success came but the flap backoff holds the announcement until `announce_at`.
    Holding {
        announce_at: Instant,
        since: Instant,
    },
    /// Failing since `since`.
    Down { since: Instant },
}

/// The shared view of one server (R11). See the [module docs](self).
///
/// ```
/// use std::time::{Duration, Instant};
/// use kinformer::server_health::*;
/// let t = Instant::now();
/// let mut h = ServerHealth::new(ServerHealthConfig::default(), 3);
/// h.handle_failure(t);
/// assert!(h.is_down());
/// h.handle_success(t + Duration::from_secs(5));
/// assert!(matches!(h.poll_event(), Some(ServerHealthEvent::Returned { epoch: 1, .. })));
/// ```
#[derive(Clone, Debug)]
pub struct ServerHealth {
    config: ServerHealthConfig,
    loops: usize,
    state: State,
    /// Start of the current budget period: the first outage failure after the server was last
    /// stable; None while stable.
    trouble_since: Option<Instant>,
    /// Requests (probes included) sent while down in the budget period.
    spent: u64,
    last_probe: Option<Instant>,
    probe_in_flight: bool,
    /// When a probe last found the server down.
    last_probe_failure: Option<Instant>,
    /// Grows with every flap; the delay before the next announcement.
    flap: Backoff,
    /// After a flap, no return is announced before this.
    next_announce_at: Option<Instant>,
    epoch: u64,
    events: VecDeque<ServerHealthEvent>,
    counters: ServerHealthCounters,
}

impl ServerHealth {
    /// A server taken to be up, shared by `loops` loops (at least one counts).
    pub fn new(config: ServerHealthConfig, loops: usize) -> Self {
        let flap = Backoff::new(BackoffConfig {
            // The announcement's own backoff: R8's steps without jitter, so the bound is exact.
            jitter: 0.0,
            ..config.backoff.clone()
        });
        ServerHealth {
            config,
            loops: loops.max(1),
            state: State::Up { returned: None },
            trouble_since: None,
            spent: 0,
            last_probe: None,
            probe_in_flight: false,
            last_probe_failure: None,
            flap,
            next_announce_at: None,
            epoch: 0,
            events: VecDeque::new(),
            counters: ServerHealthCounters::default(),
        }
    }

    /// How many loops share this server (their R8 retries make the budget).
    pub fn set_loops(&mut self, loops: usize) {
        self.loops = loops.max(1);
    }

    /// The parameters the machine was made with.
    pub fn config(&self) -> &ServerHealthConfig {
        &self.config
    }

    /// True while the server is failing (from an outage failure until the next success).
    pub fn is_down(&self) -> bool {
        matches!(self.state, State::Down { .. })
    }

    /// The number of returns announced so far.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// What the machine saw.
    pub fn counters(&self) -> &ServerHealthCounters {
        &self.counters
    }

    /// Whether a loop whose backoff after an outage ends at `now`, and whose last failure was
    /// at `last_failure`, sends its retry (R11): always while the server is not known down;
    /// while it is, only if no probe found it down since that failure (the probe did the
    /// retry for it) and the budget has room. Otherwise the loop backs off again without a
    /// request (the reflector's `handle_server_down`).
    pub fn retry_allowed(&self, now: Instant, last_failure: Instant) -> bool {
        if !self.is_down() {
            return true;
        }
        if self.last_probe_failure.is_some_and(|t| t > last_failure) {
            return false;
        }
        let elapsed = self
            .trouble_since
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.spent < self.budget(elapsed)
    }

    // ---- inputs --------------------------------------------------------------------------

    /// A loop failed as in an outage (R9's kinds: transport, 5xx, an answer that broke off, a
    /// silent watch).
    pub fn handle_failure(&mut self, now: Instant) {
        match self.state {
            State::Down { .. } => return,
            State::Up { returned } => {
                if let Some(r) = returned
                    && now.saturating_duration_since(r) < self.config.stable_after
                {
                    self.flapped(now);
                } else {
                    // A new outage after a stable period (its timer may not have fired yet):
                    // a fresh budget, and flaps forgotten.
                    self.stable();
                }
            }
            // The return held back did not last: another flap.
            State::Holding { .. } => self.flapped(now),
        }
        if self.trouble_since.is_none() {
            self.trouble_since = Some(now);
            self.spent = 0;
        }
        self.counters.outages += 1;
        self.state = State::Down { since: now };
    }

    /// A loop sent a request (counted against the budget while down).
    pub fn handle_request(&mut self, _now: Instant) {
        if self.is_down() {
            self.spent += 1;
            self.counters.requests_while_down += 1;
        }
    }

    /// A request succeeded (a LIST page, a WATCH that opened, a probe answered): after outage
    /// failures, the server is back; announced now, or once the flap backoff allows.
    pub fn handle_success(&mut self, now: Instant) {
        match self.state {
            State::Down { since } => {
                let announce_at = self.next_announce_at.unwrap_or(now);
                if announce_at <= now {
                    self.announce(now, since);
                } else {
                    self.state = State::Holding { announce_at, since };
                }
            }
            State::Holding { .. } => self.handle_timeout(now),
            State::Up { returned } => {
                if let Some(r) = returned
                    && now.saturating_duration_since(r) >= self.config.stable_after
                {
                    self.stable();
                }
            }
        }
    }

    /// The probe [`poll_probe`](Self::poll_probe) asked for was answered (`ok`: any answer
    /// that is not an outage) or failed.
    pub fn handle_probe_result(&mut self, now: Instant, ok: bool) {
        self.probe_in_flight = false;
        if ok {
            self.handle_success(now);
        } else {
            self.counters.probe_failures += 1;
            self.last_probe_failure = Some(now);
            self.handle_failure(now);
        }
    }

    /// A timer fired: a held return is announced, a return that held becomes stable.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            State::Holding { announce_at, since } if now >= announce_at => {
                self.announce(now, since);
            }
            State::Up {
                returned: Some(r), ..
            } if now.saturating_duration_since(r) >= self.config.stable_after => self.stable(),
            _ => {}
        }
    }

    // ---- outputs -------------------------------------------------------------------------

    /// True when a probe should go out now; the caller sends it and reports the answer with
    /// [`handle_probe_result`](Self::handle_probe_result).
    pub fn poll_probe(&mut self, now: Instant) -> bool {
        if self.probe_in_flight || !self.is_down() {
            return false;
        }
        match self.next_probe_at() {
            Some(at) if at <= now => {
                self.probe_in_flight = true;
                self.last_probe = Some(now);
                self.spent += 1;
                self.counters.probes += 1;
                true
            }
            _ => false,
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) or [`poll_probe`](Self::poll_probe) is
    /// next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Holding { announce_at, .. } => Some(announce_at),
            State::Up { returned: Some(r) } => Some(r + self.config.stable_after),
            State::Up { returned: None } => None,
            State::Down { .. } if self.probe_in_flight => None,
            State::Down { .. } => self.next_probe_at(),
        }
    }

    /// The next announcement.
    pub fn poll_event(&mut self) -> Option<ServerHealthEvent> {
        self.events.pop_front()
    }

    /// How many requests the budget allows `elapsed` after the outage began: `loops` times
    /// the retries R8's shortest schedule (no jitter) has made by then.
    pub fn budget(&self, elapsed: Duration) -> u64 {
        retries_by(&self.config.backoff, elapsed) * self.loops as u64
    }

    // ---- internals -----------------------------------------------------------------------

    /// A return did not last: the next announcement waits a backoff that grows per flap.
    fn flapped(&mut self, now: Instant) {
        self.counters.flaps += 1;
        let wait = self.flap.next_delay(now, 0.0);
        self.next_announce_at = Some(now + wait);
    }

    fn announce(&mut self, now: Instant, since: Instant) {
        self.epoch += 1;
        self.counters.returns += 1;
        self.state = State::Up {
            returned: Some(now),
        };
        self.events.push_back(ServerHealthEvent::Returned {
            epoch: self.epoch,
            at: now,
            down_for: now.saturating_duration_since(since),
        });
    }

    fn stable(&mut self) {
        self.state = State::Up { returned: None };
        self.trouble_since = None;
        self.spent = 0;
        self.flap.reset();
        self.next_announce_at = None;
    }

    /// The next probe: once the budget has room for it, and paced: at least `probe_interval`
    /// after the last one, and at least the current step of R8's schedule divided by the loops
    /// (so the budget of a step is spread over it instead of spent in a burst that leaves the
    /// rest of the step blind).
    fn next_probe_at(&self) -> Option<Instant> {
        let start = self.trouble_since?;
        let budget_at = start + budget_reached(&self.config.backoff, self.spent + 1, self.loops)?;
        let Some(last) = self.last_probe.filter(|l| *l >= start) else {
            return Some(budget_at);
        };
        let step = step_delay(&self.config.backoff, last.saturating_duration_since(start));
        let spacing = self
            .config
            .probe_interval
            .max(step.div_f64(self.loops as f64));
        Some((last + spacing).max(budget_at))
    }
}

/// The retries R8's shortest schedule (no jitter) makes within `elapsed` of the first failure.
fn retries_by(b: &BackoffConfig, elapsed: Duration) -> u64 {
    let mut at = Duration::ZERO;
    let mut delay = b.initial;
    let mut n = 0;
    // Bounded: the delay only grows, so the loop ends once `at` passes `elapsed`; the cap on
    // iterations guards a zero initial delay.
    while n < 1_000_000 {
        at += delay.max(Duration::from_millis(1));
        if at > elapsed {
            break;
        }
        n += 1;
        delay = delay.mul_f64(b.factor.max(1.0)).min(b.max);
    }
    n
}

/// The delay of the step of R8's shortest schedule that contains `elapsed`.
fn step_delay(b: &BackoffConfig, elapsed: Duration) -> Duration {
    let mut at = Duration::ZERO;
    let mut delay = b.initial;
    for _ in 0..1_000_000 {
        let next = at + delay.max(Duration::from_millis(1));
        if next > elapsed {
            break;
        }
        at = next;
        delay = delay.mul_f64(b.factor.max(1.0)).min(b.max);
    }
    delay
}

/// How long after the first failure the budget reaches `n` requests (None: never, for a
/// schedule that cannot grow).
fn budget_reached(b: &BackoffConfig, n: u64, loops: usize) -> Option<Duration> {
    let retries = n.div_ceil(loops.max(1) as u64);
    let mut at = Duration::ZERO;
    let mut delay = b.initial;
    for _ in 0..retries.min(1_000_000) {
        at = at.checked_add(delay.max(Duration::from_millis(1)))?;
        delay = delay.mul_f64(b.factor.max(1.0)).min(b.max);
    }
    Some(at)
}

#[cfg(test)]
mod tests;
