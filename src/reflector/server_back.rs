//! The reflector's side of R11 (docs/semantics.md): the server's return, announced by the
//! shared [`ServerHealth`](crate::server_health::ServerHealth) of its client, cuts a backoff
//! after an outage short; a shared probe that found the server down stands in for a retry.
//!
//! Kept apart from `mod.rs` because it only adds inputs around the backoff: nothing here
//! changes how a request is chosen.

use std::time::Instant;

use rand::Rng;

use super::{Phase, ReflectorMachine, State, Versioned};

impl<T: Versioned> ReflectorMachine<T> {
    /// True while the machine waits in a backoff whose last failure was an outage (R9's kinds:
    /// the server did not answer or said it was unavailable): the waits R11 may cut short.
    pub fn backing_off_after_outage(&self) -> bool {
        self.after_outage
            && matches!(
                self.state,
                State::Idle {
                    not_before: Some(_),
                    ..
                }
            )
    }

    /// The server is back (R11): another loop of the same client got an answer. When the
    /// machine is backing off after an outage, its next request becomes due within
    /// `[0, return_jitter)` (never later than it already was) and the backoff starts over from
    /// its initial delay; returns when the next request is due. Otherwise (no backoff, or one
    /// after a failure that was not an outage: a 429, a 410, a very short watch) nothing
    /// changes and it returns None: the server answered those, and their backoff is kept.
    ///
    /// When the retry meets a 410 (a restarted server's watch cache), the relist R9 asks for goes
    /// out at once instead of after the recovery jitter: the return jitter already spread the
    /// client's loops, and a second jitter would only keep the cache stale longer.
    ///
    /// A failure right after the return backs off from the initial delay again; what keeps a
    /// flapping server from a hot loop is the shared machine, which announces returns after a
    /// backoff of their own once they flap, and probes within client-go's request budget.
    pub fn handle_server_back(&mut self, now: Instant) -> Option<Instant> {
        if !self.backing_off_after_outage() {
            return None;
        }
        let r: f64 = self.rng.random();
        let at = now + self.backoff.return_delay(r);
        self.backoff.reset();
        self.returned = true;
        self.counters.server_returns += 1;
        let State::Idle {
            not_before: Some(until),
            ..
        } = &mut self.state
        else {
            // Checked by `backing_off_after_outage`.
            return None;
        };
        if at < *until {
            *until = at;
        }
        let until = *until;
        // Silently: the driver that holds the machine between reflectors publishes the phase.
        self.phase = Phase::BackingOff { until };
        Some(until)
    }

    /// The backoff after an outage ended at `now`, but the client's shared probe found the
    /// server down since this machine last failed (R11): that probe stands for this retry, so
    /// the machine backs off again (the backoff grows, R8) without sending anything; returns
    /// when the next request is due. None (nothing changes) unless the machine is backing off
    /// after an outage and the backoff is over.
    pub fn handle_server_down(&mut self, now: Instant) -> Option<Instant> {
        if !self.backing_off_after_outage() {
            return None;
        }
        let r: f64 = self.rng.random();
        let State::Idle {
            not_before: Some(until),
            ..
        } = &mut self.state
        else {
            // Checked by `backing_off_after_outage`.
            return None;
        };
        if now < *until {
            return None;
        }
        let at = now + self.backoff.next_delay(now, r);
        *until = at;
        self.counters.probed_retries += 1;
        self.phase = Phase::BackingOff { until: at };
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::backoff::BackoffConfig;
    use crate::reflector::*;

    #[derive(Debug)]
    struct Obj;
    impl Versioned for Obj {
        fn resource_version(&self) -> Option<&str> {
            Some("1")
        }
    }

    /// A watching machine at `t`.
    fn watching(t: Instant) -> ReflectorMachine<Obj> {
        let mut m = ReflectorMachine::new(ReflectorConfig::default(), BackoffConfig::default(), 3);
        let Some(Request::List(_)) = m.poll_request(t) else {
            panic!("list first")
        };
        m.handle_list_page(
            t,
            ListPage {
                items: vec![Obj],
                resource_version: "1".into(),
                continue_token: None,
            },
        );
        let Some(Request::Watch(_)) = m.poll_request(t) else {
            panic!("then watch")
        };
        m.handle_watch_opened(t);
        m
    }

    fn transport() -> RequestError {
        RequestError::new(ErrorKind::Transport, "connection refused")
    }

    /// Fails every retry while the server is down, `n` times; returns the time of the last.
    fn outage(m: &mut ReflectorMachine<Obj>, t: Instant, n: usize) -> Instant {
        m.handle_watch_error(t, transport());
        let mut now = t;
        for _ in 0..n {
            now = m.poll_timeout().expect("backing off");
            let Some(Request::Watch(_)) = m.poll_request(now) else {
                panic!("a watch retry")
            };
            m.handle_watch_error(now, transport());
        }
        now
    }

    #[test]
    fn r11_the_servers_return_cuts_an_outage_backoff_short_and_starts_it_over() {
        let t = Instant::now();
        let mut m = watching(t);
        let last = outage(&mut m, t, 5);
        let grown = m.poll_timeout().expect("backing off") - last;
        assert!(grown >= Duration::from_secs(25), "grown to {grown:?}");
        let back = last + Duration::from_millis(100);
        let due = m.handle_server_back(back).expect("cut short");
        assert!(due - back < Duration::from_millis(250), "{:?}", due - back);
        assert_eq!(m.poll_timeout(), Some(due));
        assert!(m.poll_request(due).is_some(), "due then");
        // A failure right after starts from the initial delay (800 ms + jitter), not 30 s.
        m.handle_watch_error(due, transport());
        let next = m.poll_timeout().expect("backing off") - due;
        assert!(next < Duration::from_millis(1600), "{next:?}");
        assert_eq!(m.counters().server_returns, 1);
    }

    #[test]
    fn r11_after_a_return_the_410_relists_at_once() {
        let t = Instant::now();
        let mut m = watching(t);
        let last = outage(&mut m, t, 3);
        let back = last + Duration::from_millis(100);
        let due = m.handle_server_back(back).expect("cut short");
        let Some(Request::Watch(_)) = m.poll_request(due) else {
            panic!("the resumed watch")
        };
        m.handle_watch_opened(due);
        m.handle_watch_events(
            due,
            vec![WatchEvent::Error(RequestError::new(ErrorKind::Gone, "410"))],
        );
        assert_eq!(m.poll_timeout(), Some(due), "relist due at once");
        assert!(matches!(m.poll_request(due), Some(Request::List(_))));
        assert_eq!(m.counters().recovery_relists, 1);
        // Without a return announced, the same 410 waits R9's jitter (seeded: not zero here).
        let mut m = watching(t);
        outage(&mut m, t, 3);
        let retry = m.poll_timeout().expect("backing off");
        let Some(Request::Watch(_)) = m.poll_request(retry) else {
            panic!("the retry")
        };
        m.handle_watch_opened(retry);
        m.handle_watch_events(
            retry,
            vec![WatchEvent::Error(RequestError::new(ErrorKind::Gone, "410"))],
        );
        assert!(m.poll_timeout().is_some_and(|at| at > retry), "R9's jitter");
    }

    #[test]
    fn r11_the_return_leaves_backoffs_the_server_itself_asked_for() {
        let t = Instant::now();
        for e in [
            RequestError::new(
                ErrorKind::TooManyRequests {
                    retry_after: Some(Duration::from_secs(20)),
                },
                "429",
            ),
            RequestError::new(ErrorKind::Gone, "410"),
            RequestError::new(ErrorKind::Rejected { code: 403 }, "403"),
        ] {
            let mut m = watching(t);
            m.handle_watch_error(t, e.clone());
            let until = m.poll_timeout();
            assert_eq!(m.handle_server_back(t), None, "{e:?}");
            assert_eq!(m.poll_timeout(), until, "{e:?}");
        }
        // Nor a machine that is not backing off.
        let mut m = watching(t);
        assert_eq!(m.handle_server_back(t), None);
        assert!(m.is_watching());
    }

    #[test]
    fn r11_a_probe_that_found_the_server_down_counts_as_the_retry() {
        let t = Instant::now();
        let mut m = watching(t);
        m.handle_watch_error(t, transport());
        let due = m.poll_timeout().expect("backing off");
        assert_eq!(
            m.handle_server_down(due - Duration::from_millis(1)),
            None,
            "not due yet"
        );
        let next = m.handle_server_down(due).expect("backs off again");
        // R8 grows: the second delay is 1.6 s base plus jitter.
        assert!(
            next - due >= Duration::from_millis(1600),
            "{:?}",
            next - due
        );
        assert!(m.poll_request(due).is_none(), "nothing sent");
        assert_eq!(m.counters().probed_retries, 1);
    }
}
