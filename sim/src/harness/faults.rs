//! The fault injector a test (or the control endpoint) holds: [`Faults`] arms the server's
//! fault injection points ([`crate::server::faults::FaultState`]) and reads their counters,
//! and compacts the storage's watch-cache window, from outside the server.

use std::sync::Arc;
use std::time::Duration;

use crate::server::counters::Verb;
use crate::server::faults::{
    Count, ExpireMode, FailRule, FaultCounters, FaultState, StreamFault, WatchFault,
};
use crate::storage::store::Store;

/// Injects faults into a running sim. Cheap to clone; all clones act on the same server.
#[derive(Clone)]
pub struct Faults {
    pub(crate) state: Arc<FaultState>,
    pub(crate) store: Arc<Store>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

impl Faults {
    /// Aborts every open watch stream now (the connection closes without the final chunk, as
    /// when a proxy or the network drops it). Counted per stream in `watches_dropped`.
    pub fn drop_watches(&self) {
        self.state.drop_watches();
    }

    /// Fails the next `n` list requests (any resource) with `code` (500, 429 with
    /// `Retry-After: 1`, 503, ...).
    pub fn fail_next_lists(&self, n: u32, code: u16) {
        self.fail_next(None, Verb::List, n, code, 1);
    }

    /// Fails the next `n` watch requests (any resource) with `code`, before the stream starts.
    pub fn fail_next_watches(&self, n: u32, code: u16) {
        self.fail_next(None, Verb::Watch, n, code, 1);
    }

    /// Fails the next `n` requests of `verb` on `resource` (any resource when `None`) with an
    /// HTTP `code`; a 429 or 503 carries `Retry-After: retry_after_secs`.
    pub fn fail_next(
        &self,
        resource: Option<&str>,
        verb: Verb,
        n: u32,
        code: u16,
        retry_after_secs: u64,
    ) {
        if n == 0 {
            return;
        }
        self.state.add_rule(FailRule::new(
            resource,
            vec![verb],
            Some(n),
            code,
            retry_after_secs,
        ));
    }

    /// Answers requests `429 TooManyRequests` with `Retry-After: retry_after_secs` and a
    /// `TooManyRequests` Status (details `retryAfterSeconds`), as kube-apiserver's priority and
    /// fairness does: requests of any of `verbs` (every verb when empty) on `resource` (any when
    /// `None`); the next `n` of them, or every one until [`Faults::clear`] when `n` is `None`.
    /// Counted in `throttled` (and in `lists_failed` / `watches_failed` / `others_failed`).
    pub fn throttle(
        &self,
        resource: Option<&str>,
        verbs: &[Verb],
        n: Option<u32>,
        retry_after_secs: u64,
    ) {
        if n == Some(0) {
            return;
        }
        self.state.add_rule(FailRule::new(
            resource,
            verbs.to_vec(),
            n,
            429,
            retry_after_secs,
        ));
    }

    /// While on, every watch request (any resource) is answered `200` with a stream that ends at
    /// once, without any event: a server (or proxy) that ends every watch immediately. Checked
    /// after request validation; injected failures ([`Faults::fail_next`],
    /// [`Faults::throttle`]) come first. Such watches never count as started or open.
    /// Counted in `watches_ended_at_once`. Replaces [`Faults::expire_every_watch`].
    pub fn end_watches_at_once(&self, on: bool) {
        self.state
            .set_watch_fault(on.then_some(WatchFault::EndAtOnce));
    }

    /// While `Some`, every watch request is answered with `410 Expired` (a watch RV that is
    /// always too old): an HTTP 410 response ([`ExpireMode::Http`]) or a 200 stream whose only
    /// event is an ERROR with a 410 Status ([`ExpireMode::ErrorEvent`]). Lists keep working.
    /// Counted in `watches_refused_expired`. `None` turns it off; replaces
    /// [`Faults::end_watches_at_once`].
    pub fn expire_every_watch(&self, mode: Option<ExpireMode>) {
        self.state.set_watch_fault(mode.map(WatchFault::Expire));
    }

    /// While on, a watch with `sendInitialEvents=true` (watch-list) is answered `422 Invalid`
    /// with the Status a server without the WatchList feature sends (a `FieldValueForbidden`
    /// cause on `sendInitialEvents`); other watches work, as on such a server (a watch from RV
    /// unset or `0` is not made a watch-list, so it gets no `k8s.io/initial-events-end`
    /// bookmark). Counted in `watch_lists_rejected`.
    pub fn reject_watch_list(&self, on: bool) {
        self.state.set_reject_watch_list(on);
    }

    /// While on, `sendInitialEvents` and `resourceVersionMatch` of a watch are ignored, like a
    /// server that predates watch-list: the watch is served as if they were absent (a watch from
    /// RV unset or `0` starts with synthetic ADDED events for every object, as for any watch),
    /// and no BOOKMARK annotated `k8s.io/initial-events-end` is ever sent. Counted in
    /// `watch_lists_ignored`.
    pub fn ignore_watch_list(&self, on: bool) {
        self.state.set_ignore_watch_list(on);
    }

    /// Turns kube-apiserver's `ShardedListAndWatch` feature gate (KEP-5866) on or off (it
    /// starts as [`crate::SimConfig::sharded_list_and_watch`] says; [`Faults::clear`] leaves
    /// it). Off, the server is one without the gate: `shardSelector` is ignored entirely (no
    /// filtering, no `metadata.shardInfo`, no error for a bad selector). Requests already
    /// being served keep the gate they started with.
    pub fn sharded_list_and_watch(&self, on: bool) {
        self.state.set_sharded_list_and_watch(on);
    }

    /// While on, objects in list responses and watch events (ADDED, MODIFIED, DELETED) carry no
    /// `metadata.resourceVersion` (the field is removed from the JSON); the list's own
    /// `metadata.resourceVersion` and BOOKMARKs keep theirs. Stored objects are unchanged. Table
    /// output is not affected. Counted per object in `objects_without_resource_version`.
    pub fn strip_resource_versions(&self, on: bool) {
        self.state.set_strip_resource_versions(on);
    }

    /// Ends every open watch stream with an ERROR event carrying a `410 Expired` Status (as
    /// kube-apiserver does when a watcher falls out of the watch cache). Counted per stream.
    pub fn expire_watches(&self) {
        self.state.expire_watches();
    }

    /// Compacts: every resourceVersion older than the current one leaves the watch-cache window,
    /// so watches from it and continue tokens at it get 410. Returns the current RV.
    pub fn compact(&self) -> u64 {
        let rv = self.store.compact();
        self.state.bump(Count::Compactions);
        rv
    }

    /// The next event written by any watch stream (open now or opened later) is preceded by a
    /// malformed event; the stream then goes on normally. In a JSON stream it is a line that is
    /// not valid JSON; in a protobuf stream, a well-formed frame (a MODIFIED
    /// `metav1.WatchEvent` with an object of the watched kind) whose object's message is
    /// broken wire data, so the stream stays in step but the event does not decode.
    pub fn malformed_next_event(&self) {
        self.state.arm(StreamFault::Malformed, None);
    }

    /// Like [`Faults::malformed_next_event`], only on a watch of `resource` (plural).
    pub fn malformed_next_event_of(&self, resource: &str) {
        self.state.arm(StreamFault::Malformed, Some(resource));
    }

    /// The next event written by any watch stream is cut in half and the connection aborted
    /// (the event was not delivered, so a client resuming from its last RV gets it again).
    pub fn close_mid_object_next(&self) {
        self.state.arm(StreamFault::CloseMidObject, None);
    }

    /// Like [`Faults::close_mid_object_next`], only on a watch of `resource` (plural).
    pub fn close_mid_object_next_of(&self, resource: &str) {
        self.state.arm(StreamFault::CloseMidObject, Some(resource));
    }

    /// Delays every watch event by `per_event` (`None` restores full speed).
    pub fn slow_watches(&self, per_event: Option<Duration>) {
        self.state.set_slow(per_event);
    }

    /// Every watch stream (open or new) goes silent: no events, no bookmarks, and no clean end
    /// at `timeoutSeconds`, like a hung server or a half-open connection; `false` resumes them
    /// (nothing is lost). [`Faults::drop_watches`] still cuts them. For client-side
    /// silent-watch detection.
    pub fn stall_watches(&self, stalled: bool) {
        self.state.set_stalled(stalled);
    }

    /// Takes the server down, as a kube-apiserver that stops: every open connection (watch
    /// streams, idle keep-alive connections, requests in flight) is aborted, and until
    /// [`Faults::come_back`] every new connection is reset as soon as it is accepted (clients
    /// see a transport error). The stored objects stay, and [`crate::Sim`]'s direct methods
    /// ([`crate::Sim::create_object`], ...) keep working, so a test can change objects while
    /// the server is down. Counted in `outages` and `connections_refused`.
    pub fn go_down(&self) {
        self.state.set_down(true);
    }

    /// Brings the server back after [`Faults::go_down`], on the same address, with the same
    /// objects and a watch cache that starts afresh at the current resourceVersion, as a
    /// restarted kube-apiserver's does: a watch from an older resourceVersion gets `410
    /// Expired` (a `200` whose only event is an ERROR, as the cacher answers), so its client
    /// relists. Returns the resourceVersion the watch cache starts at.
    pub fn come_back(&self) -> u64 {
        // The new watch cache first, then the connections: no client can watch from an older
        // resourceVersion in between.
        let rv = self.store.compact();
        self.state.set_down(false);
        rv
    }

    /// Whether the server is down ([`Faults::go_down`]).
    pub fn is_down(&self) -> bool {
        self.state.is_down()
    }

    /// A kube-apiserver restart: [`Faults::go_down`], `down_for` later [`Faults::come_back`].
    /// Returns the resourceVersion the new watch cache starts at.
    pub async fn restart(&self, down_for: Duration) -> u64 {
        self.go_down();
        tokio::time::sleep(down_for).await;
        self.come_back()
    }

    /// Disarms every pending failure (throttling included) and stream fault, the slowdown, the
    /// stall and every switch (watch faults, watch-list faults, stripped resourceVersions);
    /// counters stay. An outage ([`Faults::go_down`]) is not a switch: it ends only with
    /// [`Faults::come_back`].
    pub fn clear(&self) {
        self.state.clear();
    }

    /// How many times each fault took effect so far.
    pub fn counters(&self) -> FaultCounters {
        self.state.counters()
    }

    /// The part of [`Faults::counters`] that took effect on requests answered in kube's
    /// protobuf (a LIST or WATCH of a kind served in it, from a client that prefers it): the
    /// failure, the stream fault or the stripped object reached a protobuf client in protobuf
    /// form. `compactions`, `outages` and `connections_refused` concern no one request and stay
    /// 0 here.
    pub fn protobuf_counters(&self) -> FaultCounters {
        self.state.protobuf_counters()
    }
}
