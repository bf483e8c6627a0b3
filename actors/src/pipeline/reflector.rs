//! The Reflector actor: the driver of the core's [`ReflectorMachine`] (docs/semantics.md R1–R8).
//!
//! Every protocol decision (what to LIST or WATCH next, when, what the FIFO gets, how long to
//! back off) is the machine's. The actor only performs the I/O: it sends the machine's requests
//! through kube ([`ListerWatcher`]), decodes and admits objects (R5 check, transform, trace id)
//! as they arrive — LIST items included, so peak memory is that of the transformed objects —
//! feeds the results in, and forwards the machine's outputs to the DeltaFifo, awaiting each
//! answer (B4: while the FIFO is full the watch is not read and the socket pushes back).
//!
//! When the machine reports a failure it is backing off from, the actor ends and hands the
//! machine back to its [`Supervisor`](crate::pipeline::supervisor::Supervisor), which starts a fresh
//! reflector with it once the backoff is over (S1).

use std::{panic::AssertUnwindSafe, sync::Arc, time::Instant};

use actix::prelude::*;
use futures::{FutureExt, StreamExt, stream::BoxStream};
use kinformer::{
    reflector::{ListPage, ReflectorEvent, ReflectorMachine, Request},
    shard::ShardSelector,
};
use kube::api::{WatchEvent as KubeWatchEvent, WatchParams};

use crate::{
    error::{ReflectorError, WatchWarning},
    listwatch::lister_watcher::{Item, Listed, list_params, watch_params},
    object::InformerObject,
    pipeline::messages::ReflectorFailed,
    pipeline::reflector_io::{
        ReflectorContext, ShardGate, admit_listed, classify, convert, failure_error,
    },
    telemetry::health::{ReflectorPhase, ShardFiltering},
};

pub use crate::pipeline::reflector_io::{Transform, Validate, WatchErrorHandler};

/// The machine a reflector drives: its items are admitted objects with their trace ids.
pub(crate) type Machine<K> = ReflectorMachine<Item<K>>;

/// An open watch's events, decoded (typed mode) or encoded (lean mode) in the server's order.
type Events<K> = BoxStream<'static, Result<KubeWatchEvent<Listed<K>>, kube::Error>>;

/// Opens the machine's WATCH (of its shard, K1): the typed stream (decoded on the pool by the
/// lister-watcher), or, in the lean mode (I7), the lean one (encoded on the pool by the
/// lister-watcher: JSON, or protobuf messages when it asks for protobuf).
async fn open_watch<K: InformerObject>(
    cx: &ReflectorContext<K>,
    params: WatchParams,
    rv: String,
    shard: Option<ShardSelector>,
) -> Result<Events<K>, kube::Error> {
    match cx.lean() {
        None => cx.lw.watch_listed(params, rv, shard.as_ref()).await,
        Some(state) => {
            cx.lw
                .watch_lean(params, rv, shard.as_ref(), Arc::clone(state))
                .await
        }
    }
}

/// The reflector actor. Start it through a [`Supervisor`](crate::pipeline::supervisor::Supervisor).
pub(crate) struct Reflector<K: InformerObject> {
    cx: Arc<ReflectorContext<K>>,
    machine: Option<Machine<K>>,
    supervisor: Recipient<ReflectorFailed<K>>,
}

impl<K: InformerObject> Reflector<K> {
    pub(crate) fn new(
        cx: Arc<ReflectorContext<K>>,
        machine: Machine<K>,
        supervisor: Recipient<ReflectorFailed<K>>,
    ) -> Self {
        Reflector {
            cx,
            machine: Some(machine),
            supervisor,
        }
    }
}

impl<K: InformerObject> Actor for Reflector<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let Some(mut machine) = self.machine.take() else {
            return;
        };
        let cx = Arc::clone(&self.cx);
        let run = async move {
            let r = drive(&cx, &mut machine).await;
            (machine, r)
        };
        ctx.spawn(
            AssertUnwindSafe(run)
                .catch_unwind()
                .into_actor(self)
                .map(|res, act, ctx| {
                    let failed = match res {
                        Ok((machine, Ok((error, retry_at)))) => ReflectorFailed {
                            machine: Some(machine),
                            error,
                            retry_at: Some(retry_at),
                        },
                        Ok((machine, Err(error))) => ReflectorFailed {
                            machine: Some(machine),
                            error,
                            retry_at: None,
                        },
                        // A panic (a transform or validator): the machine is lost with the
                        // future; the supervisor starts over from a relist, after its backoff.
                        Err(_) => ReflectorFailed {
                            machine: None,
                            error: ReflectorError::Panicked {
                                resource: act.cx.resource.clone(),
                            },
                            retry_at: None,
                        },
                    };
                    act.cx.report(&failed.error);
                    act.supervisor.do_send(failed);
                    ctx.stop();
                }),
        );
    }
}

/// Runs the machine until it backs off (returns why and until when) or the FIFO is gone.
async fn drive<K: InformerObject>(
    cx: &Arc<ReflectorContext<K>>,
    m: &mut Machine<K>,
) -> Result<(ReflectorError, Instant), ReflectorError> {
    // A restarted reflector: the backoff the supervisor waited for is over.
    m.handle_timeout(Instant::now());
    let mut last_error: Option<ReflectorError> = None;
    let mut shard = cx.shard.clone();
    loop {
        sync_shard(cx, m, &mut shard);
        if let Some(until) = flush(cx, m, &mut last_error).await? {
            return Ok(until);
        }
        let now = Instant::now();
        match m.poll_request(now) {
            Some(Request::List(req)) => {
                let selector = req.shard_selector.clone();
                let params = list_params(req);
                let admit = admit_listed(cx);
                let timeout = m.config().request_timeout;
                note_request(cx);
                let list =
                    cx.lw
                        .list_items_sharded(params, selector.as_ref(), cx.codec.clone(), admit);
                let listed = within(timeout, list).await;
                // K2: a change while the LIST ran abandons it (its page is then ignored).
                sync_shard(cx, m, &mut shard);
                match listed {
                    Ok(mut list) => {
                        note_success(cx);
                        // Only for a LIST of the shard still wanted: an abandoned page (K2)
                        // says nothing about who filters and its drops are not the cache's.
                        if let Some(s) = &selector
                            && m.config().shard_selector.as_ref() == Some(s)
                        {
                            note_shard_list(cx, s, &mut list);
                        }
                        m.handle_list_page(
                            Instant::now(),
                            ListPage {
                                items: list.items,
                                resource_version: list
                                    .metadata
                                    .resource_version
                                    .unwrap_or_default(),
                                continue_token: list.metadata.continue_,
                            },
                        )
                    }
                    Err(source) => {
                        m.handle_list_error(Instant::now(), classify(&source));
                        last_error = Some(ReflectorError::List {
                            resource: cx.resource.clone(),
                            source,
                        });
                    }
                }
            }
            Some(Request::Watch(req)) => {
                let selector = req.shard_selector.clone();
                if selector.is_some() && req.send_initial_events {
                    // A watch-list has no list metadata to say whether the server filtered:
                    // the informer filters (K1).
                    cx.status.set_shard_filtering(Some(ShardFiltering::Client));
                }
                let (params, rv) = watch_params(req);
                let timeout = m.config().request_timeout;
                note_request(cx);
                let opened = within(timeout, open_watch(cx, params, rv, selector)).await;
                // K2: a change while the WATCH opened abandons it (the stream is dropped).
                sync_shard(cx, m, &mut shard);
                match opened {
                    Ok(stream) => {
                        note_success(cx);
                        m.handle_watch_opened(Instant::now());
                        // Publish the phase and counters now: a quiet watch must not look
                        // like the backoff it recovered from (S2, /healthz).
                        if let Some(until) = flush(cx, m, &mut last_error).await? {
                            return Ok(until);
                        }
                        if let Some(until) =
                            consume(cx, m, stream, &mut last_error, &mut shard).await?
                        {
                            return Ok(until);
                        }
                    }
                    Err(source) => {
                        m.handle_watch_error(Instant::now(), classify(&source));
                        last_error = Some(ReflectorError::Watch {
                            resource: cx.resource.clone(),
                            source,
                        });
                    }
                }
            }
            // K1: an empty shard asks nothing of the server; wait for the next shard. A handle
            // gone (shutdown) leaves nothing to wait for but the actor's stop.
            None if m.is_parked() => {
                // Parking hands the FIFO an empty Replace the first time (the informer syncs).
                if let Some(until) = flush(cx, m, &mut last_error).await? {
                    return Ok(until);
                }
                if shard.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => match m.poll_timeout() {
                Some(at) => {
                    tokio::time::sleep_until(at.into()).await;
                    m.handle_timeout(Instant::now());
                }
                // Not reachable: an idle machine always has a request or a timer. Guard the
                // loop anyway: report it as a failure the supervisor backs off from.
                None => return Err(ReflectorError::Stuck),
            },
        }
    }
}

/// Feeds the machine the shard the informer wants now, if it differs from the machine's (K2).
fn sync_shard<K: InformerObject>(
    cx: &ReflectorContext<K>,
    m: &mut Machine<K>,
    shard: &mut tokio::sync::watch::Receiver<Option<ShardSelector>>,
) {
    let want = shard.borrow_and_update().clone();
    if want != m.config().shard_selector {
        if want.is_none() {
            // No shard: nobody filters any more (health's `shard_filtering` is `None`).
            cx.status.set_shard_filtering(None);
        }
        m.handle_shard_change(Instant::now(), want);
    }
}

/// After a LIST of a shard (K1): who filters (the list's `shardInfo` says the server did), and
/// the objects the informer dropped. Items of a lister-watcher that could not filter while
/// decoding are filtered here.
fn note_shard_list<K: InformerObject>(
    cx: &ReflectorContext<K>,
    selector: &ShardSelector,
    list: &mut crate::listwatch::lister_watcher::DecodedList<
        crate::listwatch::lister_watcher::Item<K>,
    >,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let server = list.shard_info.is_some();
    cx.status.set_shard_filtering(Some(if server {
        ShardFiltering::Server
    } else {
        ShardFiltering::Client
    }));
    let mut filtered = list.shard_counts.filtered;
    // A lister-watcher that checked while decoding left nothing to drop: no second pass.
    if !server && !list.shard_counts.checked {
        let before = list.items.len();
        list.items
            .retain(|(o, _)| selector.matches(o.uid(), o.namespace()));
        filtered += (before - list.items.len()) as u64;
    }
    cx.status.shard_filtered.fetch_add(filtered, Relaxed);
    cx.status
        .shard_mismatches
        .fetch_add(list.shard_counts.mismatches, Relaxed);
}

/// `request` bounded by `timeout`: a server that never answers is a transport failure (R8).
async fn within<T>(
    timeout: std::time::Duration,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(timeout, request).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {timeout:?} (request_timeout)").into(),
        )),
    }
}

/// Reads an open watch in groups of already-decoded events until the machine stops watching.
async fn consume<K: InformerObject>(
    cx: &ReflectorContext<K>,
    m: &mut Machine<K>,
    stream: Events<K>,
    last_error: &mut Option<ReflectorError>,
    shard: &mut tokio::sync::watch::Receiver<Option<ShardSelector>>,
) -> Result<Option<(ReflectorError, Instant)>, ReflectorError> {
    let mut chunks = stream.ready_chunks(m.config().event_batch.max(1));
    // The informer's handle may be gone (shutdown): then no change can come.
    let mut shard_open = true;
    while m.is_watching() {
        let read = async {
            match m.poll_timeout() {
                Some(at) => tokio::time::timeout_at(at.into(), chunks.next()).await,
                None => Ok(chunks.next().await),
            }
        };
        let next = tokio::select! {
            biased;
            changed = shard.changed(), if shard_open => {
                shard_open = changed.is_ok();
                None
            }
            next = read => Some(next),
        };
        match next {
            // K2: the shard changed: the machine decides (it abandons this watch unless the
            // selector is the same again).
            None => sync_shard(cx, m, shard),
            Some(Err(_)) => m.handle_timeout(Instant::now()),
            Some(Ok(None)) => m.handle_watch_ended(Instant::now()),
            Some(Ok(Some(raw))) => {
                let gate = ShardGate {
                    selector: m.config().shard_selector.as_ref(),
                    client_filters: cx.status.shard_filtering() != Some(ShardFiltering::Server),
                };
                let mut events = Vec::with_capacity(raw.len());
                for ev in raw {
                    if let Some(e) = convert(cx, ev, last_error, gate) {
                        events.push(e);
                    }
                }
                m.handle_watch_events(Instant::now(), events);
            }
        }
        if let Some(until) = flush(cx, m, last_error).await? {
            return Ok(Some(until));
        }
    }
    Ok(None)
}

/// Hands the machine's outputs to the FIFO (awaiting each answer, B4) and reports its events.
/// Returns the failure and retry time when the machine started backing off.
async fn flush<K: InformerObject>(
    cx: &ReflectorContext<K>,
    m: &mut Machine<K>,
    last_error: &mut Option<ReflectorError>,
) -> Result<Option<(ReflectorError, Instant)>, ReflectorError> {
    // Counters first: what is handed over may sync the informer before this task resumes, and
    // a scrape after sync must already count the LIST that fed it.
    cx.status.publish(m.counters());
    cx.status.set_stale_since(m.stale_since());
    let mut handed = false;
    while let Some(out) = m.poll_output() {
        handed = true;
        let accepted = cx.fifo.hand_over(out).await;
        if !accepted {
            return Err(ReflectorError::FifoStopped);
        }
    }
    if handed {
        m.handle_delivered(Instant::now());
        cx.status
            .set_resource_version(m.last_sync_resource_version());
    }
    let mut failed = None;
    while let Some(ev) = m.poll_event() {
        match ev {
            ReflectorEvent::Phase(p) => cx.status.set_phase(ReflectorPhase::from(p)),
            ReflectorEvent::Failed {
                cause,
                message,
                delay,
                retry_at,
            } => {
                tracing::warn!(resource = %cx.resource, cause = cause.as_str(), %message,
                    retry_in_ms = delay.as_millis() as u64, "reflector backing off");
                // R11: an outage failure (R9's kinds) tells the client's shared health.
                if m.backing_off_after_outage()
                    && let Some(s) = &cx.server
                {
                    s.failure(Instant::now());
                }
                let error = failure_error(cx, m.config(), cause, message, last_error);
                failed = Some((error, retry_at));
            }
            ReflectorEvent::WatchListFallback(reason) => cx.warn(WatchWarning::WatchListFallback {
                resource: cx.resource.clone(),
                reason: format!("{reason:?}"),
            }),
            ReflectorEvent::RetryAfterHonoured(d) => {
                tracing::info!(resource = %cx.resource, retry_after_ms = d.as_millis() as u64,
                    "server asked to retry later (429); honoured");
            }
        }
    }
    cx.status.publish(m.counters());
    // R10: after the events, so a failure that ends this reflector is already stale.
    cx.status.set_stale_since(m.stale_since());
    note_watching(cx, m);
    Ok(failed)
}

/// R11: a request is about to go out (counted against the budget while the server is down).
fn note_request<K: InformerObject>(cx: &ReflectorContext<K>) {
    if let Some(s) = &cx.server {
        s.request(Instant::now());
    }
}

/// R11: the server answered (a LIST page, a WATCH that opened).
fn note_success<K: InformerObject>(cx: &ReflectorContext<K>) {
    if let Some(s) = &cx.server {
        s.success(Instant::now());
    }
}

/// R11: whether this informer is watching again: a watch open with the cache known current
/// (R10), or parked on an empty shard (nothing to watch). The first time after a return, the
/// time since the return is this informer's "watching again" figure.
pub(crate) fn note_watching<K: InformerObject>(cx: &ReflectorContext<K>, m: &Machine<K>) {
    let Some(s) = &cx.server else { return };
    let watching = (m.is_watching() && m.stale_since().is_none()) || m.is_parked();
    let now = Instant::now();
    if let Some(after) = s.set_watching(watching, now) {
        cx.status.record_watching_again(after);
    }
}

impl<K: InformerObject> Handler<crate::pipeline::messages::Stop> for Reflector<K> {
    type Result = ();

    fn handle(&mut self, _: crate::pipeline::messages::Stop, ctx: &mut Context<Self>) {
        // Dropping the spawned future closes the watch connection.
        ctx.stop();
    }
}
