//! The Reflector actor (DESIGN.md R1–R7, B4): LIST then WATCH through kube, into the DeltaFifo.
//!
//! The reflector runs on its own arbiter (thread), so decoding JSON — the most expensive step
//! of the pipeline — happens off the thread that applies deltas. It hands the FIFO one message
//! per LIST (`Replace`) and one per group of watch events that were already decoded together
//! (`Events`), and awaits each answer: when the FIFO is over capacity the answer waits, the
//! reflector stops polling the watch, and the socket pushes back on the server (B4). No buffer
//! of raw events grows anywhere.
//!
//! A failure (list, watch, decode) ends the actor with a typed [`ReflectorError`] sent to its
//! [`Supervisor`](crate::supervisor::Supervisor), which starts a fresh reflector after backoff.
//! The resourceVersion bookkeeping lives in the shared status, so the fresh reflector resumes
//! the watch where the failed one stopped (S1).

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use actix::prelude::*;
use futures::StreamExt;
use kinformer::{TraceId, reflector::InitialList};
use kube::api::{ListParams, TypeMeta, VersionMatch, WatchEvent, WatchParams};
use rand::Rng;

use crate::{
    InformerObject,
    error::{ReflectorError, WatchWarning, api_status},
    fifo::DeltaFifo,
    lister_watcher::{ListerWatcher, WatchStream},
    messages::{Bookmark, Event, EventKind, Events, Replace, Stop},
    supervisor::{ReflectorFailed, ReflectorPhase, ReflectorStatus},
    trace::{self, Hop, TraceIds},
};

/// A transform applied to every object before it is cached (P2), on the reflector's thread.
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;
/// A check that an object is of the informer's type/GVK (R5); `Err` drops it with the message.
///
/// The second argument is the type of the list the object came in, for listed objects: list
/// items carry no `apiVersion`/`kind` of their own, so the list's (`ConfigMapList` →
/// `ConfigMap`) stands for them.
pub type Validate<K> = Arc<dyn Fn(&K, Option<&TypeMeta>) -> Result<(), String> + Send + Sync>;
/// Called with every reflector error and warning (client-go's `WatchErrorHandler`).
pub type WatchErrorHandler = Arc<dyn Fn(&dyn std::error::Error) + Send + Sync>;

/// The annotation on the BOOKMARK that ends a watch-list's initial events (R7).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Reflector options.
#[derive(Clone, Debug)]
pub struct ReflectorConfig {
    /// How the first LIST reads (R1). Default: from the watch cache (`resourceVersion=0`).
    pub initial_list: InitialList,
    /// Page size for LIST (`limit`) when listing at a resourceVersion other than `"0"` (a
    /// `resourceVersion=0` list is served whole from the watch cache, as in client-go). Default 500.
    pub page_size: Option<u32>,
    /// Use a watch-list (`sendInitialEvents=true`) instead of LIST (R7). Default false.
    pub watch_list: bool,
    /// Watches ask for a random `timeoutSeconds` in `[min, 2*min)` (R2), capped below kube's
    /// 295 s read timeout. Default 145 s.
    pub min_watch_timeout: Duration,
    /// A watch silent for its timeout plus this grace is dropped client-side (R4). Default 5 s.
    pub stall_grace: Duration,
    /// Most events put into one `Events` message (only events already decoded are batched).
    pub event_batch: usize,
    /// Label selector for list and watch.
    pub label_selector: Option<String>,
    /// Field selector for list and watch.
    pub field_selector: Option<String>,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        ReflectorConfig {
            initial_list: InitialList::FromCache,
            page_size: Some(500),
            watch_list: false,
            min_watch_timeout: Duration::from_secs(145),
            stall_grace: Duration::from_secs(5),
            event_batch: 256,
            label_selector: None,
            field_selector: None,
        }
    }
}

/// Everything a reflector needs; shared by every reflector its supervisor starts.
pub struct ReflectorContext<K: InformerObject> {
    pub(crate) resource: String,
    pub(crate) kind: Arc<str>,
    pub(crate) lw: Arc<dyn ListerWatcher<K>>,
    pub(crate) fifo: Addr<DeltaFifo<K>>,
    pub(crate) status: Arc<ReflectorStatus>,
    pub(crate) config: ReflectorConfig,
    pub(crate) trace_ids: TraceIds,
    pub(crate) transform: Option<Transform<K>>,
    pub(crate) validate: Option<Validate<K>>,
    pub(crate) on_error: Option<WatchErrorHandler>,
}

impl<K: InformerObject> ReflectorContext<K> {
    /// R5: false (and reported) when the object is not of the informer's type/GVK.
    fn accept(&self, obj: &K, list_type: Option<&TypeMeta>) -> bool {
        let Some(Err(detail)) = self.validate.as_ref().map(|v| v(obj, list_type)) else {
            return true;
        };
        self.warn(WatchWarning::UnexpectedObject {
            resource: self.resource.clone(),
            detail,
        });
        self.status.dropped_objects.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Validates, transforms and wraps one decoded watch object; `None` when dropped (R5).
    fn admit(
        &self,
        obj: K,
        what: &'static str,
        list_type: Option<&TypeMeta>,
    ) -> Option<(Arc<K>, TraceId)> {
        if !self.accept(&obj, list_type) {
            return None;
        }
        let obj = match &self.transform {
            Some(t) => t(obj),
            None => obj,
        };
        Some(self.traced(Arc::new(obj), what))
    }

    fn traced(&self, obj: Arc<K>, what: &'static str) -> (Arc<K>, TraceId) {
        let id = self.trace_ids.next();
        trace::hop(Hop::Reflector, id, &self.kind, None, &*obj, what);
        (obj, id)
    }

    /// [`admit`](Self::admit) for a listed object, already in an `Arc`.
    fn admit_shared(
        &self,
        obj: Arc<K>,
        what: &'static str,
        list_type: Option<&TypeMeta>,
    ) -> Option<(Arc<K>, TraceId)> {
        if !self.accept(&obj, list_type) {
            return None;
        }
        let obj = match &self.transform {
            // The list item's Arc is unique here, so this moves rather than clones.
            Some(t) => Arc::new(t(Arc::unwrap_or_clone(obj))),
            None => obj,
        };
        Some(self.traced(obj, what))
    }

    fn warn(&self, w: WatchWarning) {
        tracing::warn!(resource = %self.resource, "{w}");
        if let Some(h) = &self.on_error {
            h(&w);
        }
    }

    fn report(&self, e: &ReflectorError) {
        if let Some(h) = &self.on_error {
            h(e);
        }
    }
}

/// How a watch ended without failing.
enum WatchEnd {
    /// Closed by the server (timeout) or the connection: re-watch from the last RV (R4).
    Closed,
    /// 410: relist (R3).
    Expired,
    /// Silent past timeout + grace: dropped client-side, re-watch (R4).
    Stalled,
}

/// The reflector actor. Start it through a [`Supervisor`](crate::supervisor::Supervisor).
pub struct Reflector<K: InformerObject> {
    cx: Arc<ReflectorContext<K>>,
    supervisor: Recipient<ReflectorFailed>,
}

impl<K: InformerObject> Reflector<K> {
    pub(crate) fn new(
        cx: Arc<ReflectorContext<K>>,
        supervisor: Recipient<ReflectorFailed>,
    ) -> Self {
        Reflector { cx, supervisor }
    }
}

impl<K: InformerObject> Actor for Reflector<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let cx = Arc::clone(&self.cx);
        ctx.spawn(
            async move { list_and_watch(cx).await }
                .into_actor(self)
                .map(|res, act, ctx| {
                    if let Err(e) = res {
                        act.cx.report(&e);
                        act.supervisor.do_send(ReflectorFailed(e));
                    }
                    ctx.stop();
                }),
        );
    }
}

impl<K: InformerObject> Handler<Stop> for Reflector<K> {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        // Dropping the spawned future closes the watch connection.
        ctx.stop();
    }
}

/// The reflector's loop: list when needed, then watch, forever; returns only on failure.
async fn list_and_watch<K: InformerObject>(
    cx: Arc<ReflectorContext<K>>,
) -> Result<(), ReflectorError> {
    loop {
        if cx.status.with_state(|s| s.needs_list()) {
            if cx.config.watch_list {
                match watch(&cx, true).await? {
                    WatchEnd::Expired => expired(&cx),
                    WatchEnd::Closed | WatchEnd::Stalled => {}
                }
                continue;
            }
            list(&cx).await?;
        }
        match watch(&cx, false).await? {
            WatchEnd::Closed => {}
            WatchEnd::Stalled => {
                cx.status.stalls.fetch_add(1, Ordering::Relaxed);
                cx.warn(WatchWarning::Stalled {
                    resource: cx.resource.clone(),
                });
            }
            WatchEnd::Expired => expired(&cx),
        }
    }
}

fn expired<K: InformerObject>(cx: &ReflectorContext<K>) {
    cx.status.expired.fetch_add(1, Ordering::Relaxed);
    cx.status.with_state(|s| s.expired());
    cx.warn(WatchWarning::Expired {
        resource: cx.resource.clone(),
    });
}

fn is_gone(e: &kube::Error) -> bool {
    matches!(api_status(e), Some((410, _)))
}

/// LIST (paged when the server pages), then `Replace` into the FIFO (R1, R2).
async fn list<K: InformerObject>(cx: &ReflectorContext<K>) -> Result<(), ReflectorError> {
    cx.status.set_phase(ReflectorPhase::Listing);
    let mut paged = cx.config.page_size.is_some();
    // A 410 restarts the list; a server that keeps answering 410 is a failure, not a loop.
    let mut restarts_left = 3u32;
    'list: loop {
        let rv = cx
            .status
            .with_state(|s| s.relist_resource_version().to_string());
        let mut items: Vec<(Arc<K>, TraceId)> = Vec::new();
        let mut continue_token: Option<String> = None;
        let list_rv = loop {
            let mut lp = ListParams {
                label_selector: cx.config.label_selector.clone(),
                field_selector: cx.config.field_selector.clone(),
                ..ListParams::default()
            };
            // R1: resourceVersion=0 is served whole from the watch cache; kube drops RV "0"
            // when a limit is set (turning it into a consistent, paged read), so no limit then.
            if paged && rv != "0" {
                lp.limit = cx.config.page_size;
            }
            match &continue_token {
                Some(t) => lp.continue_token = Some(t.clone()),
                None if !rv.is_empty() => {
                    if rv != "0" {
                        lp.version_match = Some(VersionMatch::NotOlderThan);
                    }
                    lp.resource_version = Some(rv.clone());
                }
                None => {}
            }
            cx.status.lists.fetch_add(1, Ordering::Relaxed);
            match cx.lw.list_items(lp).await {
                Ok(page) => {
                    items.reserve(page.items.len());
                    let item_type = page.types.kind.strip_suffix("List").map(|k| TypeMeta {
                        api_version: page.types.api_version.clone(),
                        kind: k.to_string(),
                    });
                    for o in page.items {
                        if let Some(item) = cx.admit_shared(o, "listed", item_type.as_ref()) {
                            items.push(item);
                        }
                    }
                    match page.metadata.continue_ {
                        Some(c) if !c.is_empty() => continue_token = Some(c),
                        _ => break page.metadata.resource_version.unwrap_or_default(),
                    }
                }
                Err(e) if is_gone(&e) && restarts_left > 0 => {
                    restarts_left -= 1;
                    if continue_token.is_some() {
                        // R1: the continue token expired mid-list: start over, unpaged.
                        tracing::info!(resource = %cx.resource, "list continue token expired; restarting the list");
                        paged = false;
                        cx.status.with_state(|s| s.list_restarted());
                    } else {
                        // Our RV is older than the server keeps: list the latest state.
                        expired(cx);
                    }
                    continue 'list;
                }
                Err(source) => {
                    return Err(ReflectorError::List {
                        resource: cx.resource.clone(),
                        source,
                    });
                }
            }
        };
        let n = items.len();
        match cx
            .fifo
            .send(Replace {
                items,
                resource_version: list_rv.clone(),
            })
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return Err(ReflectorError::FifoStopped),
        }
        cx.status.with_state(|s| s.listed(&list_rv));
        tracing::debug!(resource = %cx.resource, objects = n, resource_version = %list_rv, "listed");
        return Ok(());
    }
}

/// Opens a WATCH from the last RV (or a watch-list when `initial`) and consumes it (R2–R4, R7).
async fn watch<K: InformerObject>(
    cx: &ReflectorContext<K>,
    initial: bool,
) -> Result<WatchEnd, ReflectorError> {
    let min = cx.config.min_watch_timeout.as_secs().max(1);
    let timeout = rand::rng().random_range(min..min * 2).min(290);
    let wp = WatchParams {
        label_selector: cx.config.label_selector.clone(),
        field_selector: cx.config.field_selector.clone(),
        timeout: Some(timeout as u32),
        bookmarks: true,
        send_initial_events: initial,
    };
    let rv = if initial {
        // Watch-list: the server sends the state not older than this RV ("" = latest).
        cx.status.with_state(|s| {
            let rv = s.relist_resource_version();
            if rv == "0" {
                String::new()
            } else {
                rv.to_string()
            }
        })
    } else {
        cx.status
            .with_state(|s| s.watch_resource_version().to_string())
    };
    cx.status.watches.fetch_add(1, Ordering::Relaxed);
    let stream = match cx.lw.watch(wp, rv).await {
        Ok(s) => s,
        Err(e) if is_gone(&e) => return Ok(WatchEnd::Expired),
        Err(source) => {
            return Err(ReflectorError::Watch {
                resource: cx.resource.clone(),
                source,
            });
        }
    };
    cx.status.set_phase(if initial {
        ReflectorPhase::Listing
    } else {
        ReflectorPhase::Watching
    });
    let deadline =
        tokio::time::Instant::now() + Duration::from_secs(timeout) + cx.config.stall_grace;
    consume(cx, stream, deadline, initial.then(Vec::new)).await
}

/// Reads a watch stream in groups of already-decoded events and forwards them to the FIFO.
async fn consume<K: InformerObject>(
    cx: &ReflectorContext<K>,
    stream: WatchStream<K>,
    deadline: tokio::time::Instant,
    mut initial: Option<Vec<(Arc<K>, TraceId)>>,
) -> Result<WatchEnd, ReflectorError> {
    let mut chunks = stream.ready_chunks(cx.config.event_batch.max(1));
    loop {
        let events = match tokio::time::timeout_at(deadline, chunks.next()).await {
            Err(_) => return Ok(WatchEnd::Stalled),
            Ok(None) => return Ok(WatchEnd::Closed),
            Ok(Some(events)) => events,
        };
        let mut batch: Vec<Event<K>> = Vec::with_capacity(events.len());
        let mut last_rv: Option<String> = None;
        let mut outcome: Option<Result<WatchEnd, ReflectorError>> = None;
        for ev in events {
            let (kind, obj) = match ev {
                Ok(WatchEvent::Added(o)) => (EventKind::Add, o),
                Ok(WatchEvent::Modified(o)) => (EventKind::Update, o),
                Ok(WatchEvent::Deleted(o)) => (EventKind::Delete, o),
                Ok(WatchEvent::Bookmark(b)) => {
                    let rv = b.metadata.resource_version;
                    let ends_initial = b
                        .metadata
                        .annotations
                        .get(INITIAL_EVENTS_END)
                        .is_some_and(|v| v == "true");
                    if ends_initial && let Some(items) = initial.take() {
                        // R7: the watch-list's initial state is complete: it is our list.
                        flush(cx, std::mem::take(&mut batch), last_rv.take()).await?;
                        cx.status.lists.fetch_add(1, Ordering::Relaxed);
                        replace(cx, items, &rv).await?;
                        cx.status.set_phase(ReflectorPhase::Watching);
                    } else {
                        last_rv = Some(rv);
                    }
                    continue;
                }
                Ok(WatchEvent::Error(s)) => {
                    outcome = Some(if s.code == 410 {
                        Ok(WatchEnd::Expired)
                    } else {
                        Err(ReflectorError::WatchErrorEvent {
                            resource: cx.resource.clone(),
                            code: s.code,
                            reason: s.reason.clone(),
                            message: s.message.clone(),
                        })
                    });
                    break;
                }
                Err(kube::Error::SerdeError(e))
                    if e.classify() == serde_json::error::Category::Data =>
                {
                    // Valid JSON, wrong shape or kind: not ours (R5). Dropped, reported, not cached.
                    cx.status.dropped_objects.fetch_add(1, Ordering::Relaxed);
                    cx.warn(WatchWarning::UnexpectedObject {
                        resource: cx.resource.clone(),
                        detail: e.to_string(),
                    });
                    continue;
                }
                Err(kube::Error::SerdeError(source)) => {
                    outcome = Some(Err(ReflectorError::Decode {
                        resource: cx.resource.clone(),
                        source,
                    }));
                    break;
                }
                Err(e) if is_gone(&e) => {
                    outcome = Some(Ok(WatchEnd::Expired));
                    break;
                }
                Err(source) => {
                    outcome = Some(Err(ReflectorError::Stream {
                        resource: cx.resource.clone(),
                        source,
                    }));
                    break;
                }
            };
            cx.status.events.fetch_add(1, Ordering::Relaxed);
            let rv = obj.meta().resource_version.clone();
            let what = match kind {
                EventKind::Add => "added",
                EventKind::Update => "modified",
                EventKind::Delete => "deleted",
            };
            let Some((obj, trace)) = cx.admit(obj, what, None) else {
                continue;
            };
            if let Some(items) = initial.as_mut()
                && kind == EventKind::Add
            {
                items.push((obj, trace));
            } else {
                batch.push(Event { kind, obj, trace });
            }
            if rv.is_some() {
                last_rv = rv;
            }
        }
        flush(cx, batch, last_rv).await?;
        if let Some(o) = outcome {
            return o;
        }
    }
}

async fn replace<K: InformerObject>(
    cx: &ReflectorContext<K>,
    items: Vec<(Arc<K>, TraceId)>,
    rv: &str,
) -> Result<(), ReflectorError> {
    match cx
        .fifo
        .send(Replace {
            items,
            resource_version: rv.to_string(),
        })
        .await
    {
        Ok(Ok(())) => {
            cx.status.with_state(|s| s.listed(rv));
            Ok(())
        }
        _ => Err(ReflectorError::FifoStopped),
    }
}

/// Hands decoded events to the FIFO, then moves the RV (only once the FIFO accepted them).
async fn flush<K: InformerObject>(
    cx: &ReflectorContext<K>,
    events: Vec<Event<K>>,
    rv: Option<String>,
) -> Result<(), ReflectorError> {
    let Some(rv) = rv else {
        return Ok(());
    };
    if events.is_empty() {
        // Only bookmarks: the RV moves, nothing else (R3).
        if cx
            .fifo
            .send(Bookmark {
                resource_version: rv.clone(),
            })
            .await
            .is_err()
        {
            return Err(ReflectorError::FifoStopped);
        }
    } else {
        match cx
            .fifo
            .send(Events {
                events,
                resource_version: rv.clone(),
            })
            .await
        {
            Ok(Ok(())) => {}
            _ => return Err(ReflectorError::FifoStopped),
        }
    }
    cx.status.with_state(|s| s.observed(&rv));
    Ok(())
}
