//! The hand-off between a ProcessorListener and its handler thread: a bounded queue the listener
//! fills one notification at a time and the thread empties a batch at a time.
//!
//! Why not a channel: a bounded channel frees one slot per receive. A handler thread behind its
//! listener (the steady state on one core, or under a slow handler) then freed one slot per
//! notification, and each freed slot woke the listener's actor to send exactly one more: two
//! context switches and a wake per notification and per handler, a third of the pipeline's CPU
//! on one core (BENCHMARKS.md session 11). Here the thread takes everything queued at once, the
//! listener is woken only when half of the room is free again, and the thread only when it
//! sleeps: at most a wake per batch on each side.
//!
//! At most [`CAPACITY`] notifications are between the listener and the end of their handler
//! call (queued, taken by the thread, or running): the bound the listener's buffer and its
//! overflow policy (B3) sit behind.

use std::{
    collections::VecDeque,
    sync::{
        Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use tokio::sync::Notify;

/// Notifications that may be between a listener and the end of their handler call.
pub(crate) const CAPACITY: usize = 64;

/// A listener waiting for room is woken once this few remain in flight: half the room, so it
/// refills in batches while the thread works through the other half.
const LOW_WATER: usize = CAPACITY / 2;

/// The queue between one listener (the pusher) and one handler thread (the taker).
pub(crate) struct Handoff<T> {
    state: Mutex<State<T>>,
    /// The thread waits here for notifications (or the close).
    ready: Condvar,
    /// Pushed and not yet finished by the thread (queued, taken or running).
    in_flight: AtomicUsize,
    /// The listener found no room and waits on `room`.
    listener_waiting: AtomicBool,
    /// Wakes the waiting listener (a permit is kept when it is not waiting yet, so no wake is lost).
    room: Notify,
}

struct State<T> {
    queue: VecDeque<T>,
    /// The thread sleeps on `ready`: the next push wakes it (once).
    thread_waiting: bool,
    /// The listener pushes nothing more; the thread exits once the queue is empty.
    closed: bool,
    /// The thread exited: pushes fail.
    gone: bool,
}

/// What became of a push.
pub(crate) enum Pushed<T> {
    /// Queued for the thread.
    Queued,
    /// No room: the notification is handed back.
    Full(T),
    /// The thread exited: the notification is handed back.
    Gone(T),
}

impl<T> Handoff<T> {
    /// An empty, open hand-off.
    pub(crate) fn new() -> Self {
        Handoff {
            state: Mutex::new(State {
                queue: VecDeque::with_capacity(CAPACITY),
                thread_waiting: false,
                closed: false,
                gone: false,
            }),
            ready: Condvar::new(),
            in_flight: AtomicUsize::new(0),
            listener_waiting: AtomicBool::new(false),
            room: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // No code that can panic runs under this lock (queue moves, flags), so a poisoned lock
        // still holds a consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Listener side: queues `item` if there is room, waking the thread if it sleeps.
    pub(crate) fn try_push(&self, item: T) -> Pushed<T> {
        let pushed = self.try_push_quietly(item);
        if matches!(pushed, Pushed::Queued) {
            self.wake();
        }
        pushed
    }

    /// Listener side: queues `item` if there is room, without waking the thread: the caller
    /// pushes a batch this way, then calls [`wake`](Self::wake) once. Woken at the first push,
    /// a thread on the same core would run (and sleep again) between every two pushes.
    pub(crate) fn try_push_quietly(&self, item: T) -> Pushed<T> {
        let mut s = self.lock();
        if s.gone || s.closed {
            return Pushed::Gone(item);
        }
        if self.in_flight.load(Ordering::SeqCst) >= CAPACITY {
            return Pushed::Full(item);
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        s.queue.push_back(item);
        Pushed::Queued
    }

    /// Listener side: wakes the thread if it sleeps (after [`try_push_quietly`](Self::try_push_quietly)).
    pub(crate) fn wake(&self) {
        let mut s = self.lock();
        // A sleeping thread with nothing queued stays asleep, and marked so.
        let wake = s.thread_waiting && !s.queue.is_empty();
        if wake {
            s.thread_waiting = false;
        }
        drop(s);
        if wake {
            self.ready.notify_one();
        }
    }

    /// Listener side: waits for room, then queues `item`; false when the thread is gone.
    pub(crate) async fn push(&self, mut item: T) -> bool {
        loop {
            match self.try_push(item) {
                Pushed::Queued => return true,
                Pushed::Gone(_) => return false,
                Pushed::Full(back) => item = back,
            }
            // Announced before the re-check, so a thread finishing in between sees it (both
            // sides SeqCst: one of them sees the other's write).
            self.listener_waiting.store(true, Ordering::SeqCst);
            if self.in_flight.load(Ordering::SeqCst) < CAPACITY || self.lock().gone {
                continue;
            }
            self.room.notified().await;
        }
    }

    /// Listener side: nothing more will be pushed; the thread handles what is queued and exits.
    pub(crate) fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        drop(s);
        self.ready.notify_all();
    }

    /// Thread side: waits until something is queued and moves all of it to the back of `into`;
    /// false once the listener closed and the queue is empty.
    pub(crate) fn take_all(&self, into: &mut VecDeque<T>) -> bool {
        let mut s = self.lock();
        loop {
            if !s.queue.is_empty() {
                into.append(&mut s.queue);
                return true;
            }
            if s.closed {
                return false;
            }
            s.thread_waiting = true;
            s = self.ready.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Thread side, without waiting: moves what is queued to the back of `into`, at most `max`.
    pub(crate) fn take_some(&self, into: &mut VecDeque<T>, max: usize) {
        let mut s = self.lock();
        let n = max.min(s.queue.len());
        into.extend(s.queue.drain(..n));
    }

    /// Thread side: `n` taken notifications were handled (or skipped); wakes a waiting listener
    /// once at most [`LOW_WATER`] remain in flight.
    pub(crate) fn finished(&self, n: usize) {
        let left = self.in_flight.fetch_sub(n, Ordering::SeqCst) - n;
        // A load first: the swap, a write to a line the listener reads, only when it waits.
        if left <= LOW_WATER
            && self.listener_waiting.load(Ordering::SeqCst)
            && self.listener_waiting.swap(false, Ordering::SeqCst)
        {
            self.room.notify_one();
        }
    }

    /// Thread side, on exit: later pushes fail, what is still queued is dropped, a waiting
    /// listener is woken to find the thread gone.
    pub(crate) fn thread_exited(&self) {
        let mut s = self.lock();
        s.gone = true;
        let dropped = std::mem::take(&mut s.queue);
        drop(s);
        drop(dropped);
        self.listener_waiting.store(false, Ordering::SeqCst);
        self.room.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{sync::Arc, time::Duration};

    #[test]
    fn full_at_capacity_until_the_thread_finishes() {
        let h = Handoff::new();
        for i in 0..CAPACITY {
            assert!(matches!(h.try_push(i), Pushed::Queued));
        }
        assert!(matches!(h.try_push(99), Pushed::Full(99)));
        let mut taken = VecDeque::new();
        assert!(h.take_all(&mut taken));
        assert_eq!(taken.len(), CAPACITY);
        // Taken is still in flight: the bound covers the thread's batch too.
        assert!(matches!(h.try_push(99), Pushed::Full(99)));
        h.finished(1);
        assert!(matches!(h.try_push(99), Pushed::Queued));
    }

    #[test]
    fn a_quiet_push_wakes_the_thread_only_at_wake() {
        let h = Arc::new(Handoff::new());
        let (tx, rx) = std::sync::mpsc::channel();
        let t = {
            let h = Arc::clone(&h);
            std::thread::spawn(move || {
                let mut local = VecDeque::new();
                while h.take_all(&mut local) {
                    let n = local.len();
                    tx.send(local.drain(..).collect::<Vec<u32>>())
                        .expect("send");
                    h.finished(n);
                }
            })
        };
        // Wait until the thread sleeps on an empty queue.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !h.lock().thread_waiting && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        for i in 0..5 {
            assert!(matches!(h.try_push_quietly(i), Pushed::Queued));
        }
        // Not woken by the quiet pushes: nothing was taken.
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        h.wake();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(30)).expect("a batch"),
            vec![0, 1, 2, 3, 4],
            "one batch, after the one wake"
        );
        h.close();
        t.join().expect("the thread");
    }

    #[test]
    fn the_thread_gets_every_item_in_order_then_the_close() {
        let h = Arc::new(Handoff::new());
        let t = {
            let h = Arc::clone(&h);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut local = VecDeque::new();
                while h.take_all(&mut local) {
                    let n = local.len();
                    got.extend(local.drain(..));
                    h.finished(n);
                }
                h.thread_exited();
                got
            })
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            for i in 0..10_000u32 {
                assert!(h.push(i).await);
            }
        });
        h.close();
        let got = t.join().expect("the thread");
        assert_eq!(got, (0..10_000).collect::<Vec<_>>());
        assert!(matches!(h.try_push(1), Pushed::Gone(1)));
    }

    #[test]
    fn a_waiting_listener_learns_the_thread_is_gone() {
        let h = Arc::new(Handoff::new());
        for i in 0..CAPACITY {
            assert!(matches!(h.try_push(i), Pushed::Queued));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let h2 = Arc::clone(&h);
        let exiter = std::thread::spawn(move || {
            // Exits only once the listener waits, so the waiting path is what is tested.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !h2.listener_waiting.load(Ordering::SeqCst)
                && std::time::Instant::now() < deadline
            {
                std::thread::yield_now();
            }
            h2.thread_exited();
        });
        let pushed =
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), h.push(7)).await });
        exiter.join().expect("the exiting thread");
        assert_eq!(pushed, Ok(false));
    }
}
