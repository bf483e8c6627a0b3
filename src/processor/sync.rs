//! Per-registration `HasSynced` (P5): client-go's `synctrack.SingleFileTracker`, made sticky
//! and panic-aware.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// Counts one handler's initial-list notifications and answers its registration's
/// `HasSynced` (P5 in `docs/semantics.md`).
///
/// client-go's `synctrack.SingleFileTracker`: [`start`](Self::start) when an initial-list
/// notification (an Add with `is_in_initial_list`) is handed to the handler's listener,
/// [`finished`](Self::finished) when the handler returned from it. The registration has synced
/// once the informer has (its FIFO popped and processed the whole first list, or the handler
/// was added later and its replay was handed over) and no initial notification is outstanding.
///
/// Two differences from the Go type, both deliberate:
/// - A handler whose initial notification **panicked** never reports synced (client-go gets
///   this by never calling `Finished` after a panic; kubernetes#129024). Here
///   `finished(false)` records the failure explicitly, so the count stays exact.
/// - The answer is **sticky**: once true it stays true, whatever happens next.
///
/// [`cancelled`](Self::cancelled) accounts for an initial notification that will never reach
/// the handler because a later Delete cancelled it in a coalescing buffer (B3): the handler
/// never needed to see an object that is already gone.
///
/// Shared between the listener (which starts and cancels), the handler's thread (which
/// finishes) and the registration handle (which asks): all operations are lock-free.
#[derive(Debug, Default)]
pub struct SyncTracker {
    /// Initial-list notifications handed over and not yet handled or cancelled.
    pending: AtomicI64,
    /// True once a handler call for an initial notification failed (panicked).
    failed: AtomicBool,
    /// True once [`has_synced`](Self::has_synced) answered true (sticky).
    synced: AtomicBool,
}

impl SyncTracker {
    /// A tracker with nothing outstanding.
    pub fn new() -> Self {
        Self::default()
    }

    /// One initial-list notification was handed to the listener.
    pub fn start(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
    }

    /// The handler returned from one initial-list notification; `ok` is false when it panicked
    /// (or its recipient was gone), and then this registration never reports synced.
    pub fn finished(&self, ok: bool) {
        if !ok {
            self.failed.store(true, Ordering::Release);
        }
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    /// One initial-list notification was dropped before reaching the handler because a Delete
    /// of the same object cancelled it (B3 coalescing); it no longer holds up `HasSynced`.
    pub fn cancelled(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    /// Initial-list notifications not yet handled.
    pub fn pending(&self) -> i64 {
        self.pending.load(Ordering::Acquire)
    }

    /// True when an initial-list notification failed: this registration never syncs.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The registration's `HasSynced`, given whether the informer itself has synced
    /// (`upstream_synced`, evaluated by the caller *before* this call, as client-go does, so a
    /// stale count cannot pair with a fresh upstream answer). Sticky once true.
    pub fn has_synced(&self, upstream_synced: bool) -> bool {
        if self.synced.load(Ordering::Acquire) {
            return true;
        }
        if !upstream_synced || self.failed() || self.pending() > 0 {
            return false;
        }
        self.synced.store(true, Ordering::Release);
        true
    }
}
