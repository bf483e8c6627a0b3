//! The shared-decode window of the lean mode (docs/semantics.md I7): how long the typed form an
//! in-flight [`LazyObject`](super::LazyObject) decoded stays with it.
//!
//! # Why
//!
//! Every handler of an informer gets the same lazy object per event, so K typed handlers decode
//! it once between them: the first decodes it and the others share the result. But each of them
//! also keeps the object until it has run it, and a handler that falls behind buffers up to two
//! notifications per key (B3's `Coalesce`): with the result pinned in each lazy object, the
//! decoded pods between the fastest and the slowest handler all stay alive (hundreds of MB for
//! 50,000 pods; measured at 0.3–0.9 GB peak RSS against ~100 MB of live heap, BENCHMARKS.md
//! session 10). The window bounds that: the last [`LeanConfig::shared_decodes`] decoded
//! objects stay shared; an older one goes back to its stored bytes (which the lazy object
//! keeps), and a handler that reaches it later decodes it again (hot cache first).
//!
//! [`LeanConfig::shared_decodes`]: super::LeanConfig::shared_decodes
//!
//! # How
//!
//! A lazy object's decoded form lives in a [`Slot`] of its own (behind an `Arc`); the window
//! is a FIFO of weak references to the slots that decoded, most recent last. Registering a
//! decode past the window's size releases the oldest one's typed form (if its lazy object is
//! still alive and nothing re-decoded it meanwhile). The FIFO's mutex is held for a push and a
//! pop; released objects are dropped after every lock is let go (freeing a pod takes ~10 µs).

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use super::codec::DecodeError;

/// A lazy object's decoded form: empty, or the result of its decode (kept until the window
/// releases it; a failure is kept for good: it is small and would fail again).
pub(crate) struct Slot<K> {
    state: Mutex<Option<Result<Arc<K>, DecodeError>>>,
    /// A reader took it to decode ([`LazyObject::claim_decode`](super::LazyObject::claim_decode)).
    claimed: AtomicBool,
    /// How many times the window released it (its next decode is a re-decode).
    generation: AtomicU64,
}

impl<K> Slot<K> {
    /// An empty slot, or one holding `typed`.
    pub(crate) fn new(typed: Option<Result<Arc<K>, DecodeError>>) -> Arc<Self> {
        Arc::new(Slot {
            state: Mutex::new(typed),
            claimed: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        })
    }

    /// The slot's state, locked (a decode that panicked leaves it empty: nothing to repair).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<Result<Arc<K>, DecodeError>>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The decode's result, if there is one.
    pub(crate) fn get(&self) -> Option<Result<Arc<K>, DecodeError>> {
        self.lock().clone()
    }

    /// True when its typed form is at hand.
    pub(crate) fn is_decoded(&self) -> bool {
        matches!(*self.lock(), Some(Ok(_)))
    }

    /// True for the first claimer while nothing is decoded.
    pub(crate) fn claim(&self) -> bool {
        self.lock().is_none() && !self.claimed.swap(true, Ordering::AcqRel)
    }

    /// True once the window released it at least once.
    pub(crate) fn was_released(&self) -> bool {
        self.generation.load(Ordering::Relaxed) > 0
    }

    /// Takes the typed form out (a failed decode stays), so that the object's next reader
    /// decodes again; returns it, to be dropped by the caller outside every lock.
    fn release(&self) -> Option<Arc<K>> {
        let mut state = self.lock();
        let typed = match state.take() {
            Some(Ok(typed)) => Some(typed),
            other => {
                *state = other;
                None
            }
        };
        if typed.is_some() {
            self.generation.fetch_add(1, Ordering::Relaxed);
            self.claimed.store(false, Ordering::Release);
        }
        typed
    }
}

/// The FIFO of recently decoded slots (see the module docs).
pub(crate) struct Window<K> {
    recent: Mutex<VecDeque<Weak<Slot<K>>>>,
    capacity: usize,
    released: AtomicU64,
}

impl<K> Window<K> {
    /// A window keeping the last `capacity` decodes shared (0: none is kept once every reader
    /// that holds it has it; `usize::MAX`: no bound, every decode stays with its object).
    pub(crate) fn new(capacity: usize) -> Self {
        Window {
            recent: Mutex::new(VecDeque::with_capacity(capacity.min(1 << 16))),
            capacity,
            released: AtomicU64::new(0),
        }
    }

    /// Registers `slot`, which just got its typed form; releases what falls out of the
    /// window. Call with no slot locked.
    pub(crate) fn register(&self, slot: &Arc<Slot<K>>) {
        if self.capacity == usize::MAX {
            return;
        }
        let out = {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            recent.push_back(Arc::downgrade(slot));
            if recent.len() > self.capacity {
                recent.pop_front()
            } else {
                None
            }
        };
        // Dropped here, after both locks: the typed form (unless a handler holds it still),
        // and the slot itself if its lazy object went meanwhile.
        if let Some(slot) = out.and_then(|w| w.upgrade())
            && slot.release().is_some()
        {
            self.released.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Typed forms released so far.
    pub(crate) fn released(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(v: u32) -> Arc<Slot<u32>> {
        Slot::new(Some(Ok(Arc::new(v))))
    }

    /// I7: only the last `capacity` decodes keep their typed form; older ones go back to empty
    /// (claimable again) and are counted.
    #[test]
    fn i7_window_keeps_the_last_decodes_and_releases_older_ones() {
        let window = Window::new(2);
        let slots: Vec<_> = (0..5).map(decoded).collect();
        for s in &slots {
            window.register(s);
        }
        let kept: Vec<bool> = slots.iter().map(|s| s.is_decoded()).collect();
        assert_eq!(kept, [false, false, false, true, true]);
        assert_eq!(window.released(), 3);
        assert!(slots[0].was_released() && !slots[4].was_released());
        assert!(slots[0].claim(), "a released slot is claimable again");
        assert!(!slots[0].claim(), "once");
    }

    /// A typed form a reader still holds survives its release (only the slot lets go), and a
    /// slot whose object is gone costs the window nothing.
    #[test]
    fn i7_window_release_leaves_readers_their_copy() {
        let window = Window::new(1);
        let a = decoded(1);
        let held = a.get().and_then(Result::ok).expect("decoded");
        window.register(&a);
        let gone = decoded(2);
        window.register(&gone);
        drop(gone);
        window.register(&decoded(3));
        assert!(!a.is_decoded());
        assert_eq!(*held, 1);
        assert_eq!(window.released(), 1, "the dropped slot was not counted");
    }

    /// A failed decode is never released (it is small, and would fail again).
    #[test]
    fn i7_window_keeps_failures() {
        let window = Window::new(0);
        let bad = Slot::<u32>::new(Some(Err(DecodeError::new("bad"))));
        window.register(&bad);
        assert!(matches!(bad.get(), Some(Err(_))));
        assert_eq!(window.released(), 0);
    }

    /// No bound: nothing is released.
    #[test]
    fn i7_unbounded_window_releases_nothing() {
        let window = Window::new(usize::MAX);
        let slots: Vec<_> = (0..100).map(decoded).collect();
        slots.iter().for_each(|s| window.register(s));
        assert!(slots.iter().all(|s| s.is_decoded()));
    }
}
