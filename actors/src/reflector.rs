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
//! machine back to its [`Supervisor`](crate::supervisor::Supervisor), which starts a fresh
//! reflector with it once the backoff is over (S1).

use std::{
    panic::AssertUnwindSafe,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use actix::prelude::*;
use futures::{FutureExt, StreamExt};
use kinformer::{
    TraceId,
    reflector::{
        FailureCause, FifoCommand, ListPage, ReflectorEvent, ReflectorMachine, Request,
        RequestError, WatchEvent,
    },
};
use kube::api::{ListParams, TypeMeta, VersionMatch, WatchEvent as KubeWatchEvent, WatchParams};

use crate::{
    InformerObject,
    error::{ReflectorError, WatchWarning},
    health::{ReflectorPhase, ReflectorStatus},
    lister_watcher::{Admit, ListerWatcher, WatchStream},
    messages::{Bookmark, Event, Events, FifoRecipients, ReflectorFailed, Replace},
    trace::{self, Hop, TraceIds},
};

pub use kinformer::reflector::{INITIAL_EVENTS_END, ReflectorConfig};

/// The machine a reflector drives: its items are admitted objects with their trace ids.
pub(crate) type Machine<K> = ReflectorMachine<(Arc<K>, TraceId)>;

/// A transform applied to every object before it is cached (P2), as it is decoded.
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;
/// A check that an object is of the informer's type/GVK (R5); `Err` drops it with the message.
///
/// The second argument is the type of the list the object came in, for listed objects: list
/// items carry no `apiVersion`/`kind` of their own, so the list's (`ConfigMapList` →
/// `ConfigMap`) stands for them.
pub type Validate<K> = Arc<dyn Fn(&K, Option<&TypeMeta>) -> Result<(), String> + Send + Sync>;
/// Called with every reflector error and warning (client-go's `WatchErrorHandler`).
pub type WatchErrorHandler = Arc<dyn Fn(&dyn std::error::Error) + Send + Sync>;

/// Everything a reflector needs; shared by every reflector its supervisor starts.
pub(crate) struct ReflectorContext<K: InformerObject> {
    pub(crate) resource: String,
    pub(crate) kind: Arc<str>,
    pub(crate) lw: Arc<dyn ListerWatcher<K>>,
    pub(crate) fifo: FifoRecipients<K>,
    pub(crate) status: Arc<ReflectorStatus>,
    pub(crate) trace_ids: TraceIds,
    pub(crate) transform: Option<Transform<K>>,
    pub(crate) validate: Option<Validate<K>>,
    pub(crate) on_error: Option<WatchErrorHandler>,
}

impl<K: InformerObject> ReflectorContext<K> {
    /// Validates (R5), transforms (P2) and wraps one decoded object; `None` when dropped.
    pub(crate) fn admit(
        &self,
        obj: K,
        what: &'static str,
        list_type: Option<&TypeMeta>,
    ) -> Option<(Arc<K>, TraceId)> {
        if let Some(Err(detail)) = self.validate.as_ref().map(|v| v(&obj, list_type)) {
            self.status.dropped_objects.fetch_add(1, Ordering::Relaxed);
            self.warn(WatchWarning::UnexpectedObject {
                resource: self.resource.clone(),
                detail,
            });
            return None;
        }
        let obj = Arc::new(match &self.transform {
            Some(t) => t(obj),
            None => obj,
        });
        let id = self.trace_ids.next();
        trace::hop(Hop::Reflector, id, &self.kind, None, &*obj, what);
        Some((obj, id))
    }

    pub(crate) fn warn(&self, w: WatchWarning) {
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

/// The reflector actor. Start it through a [`Supervisor`](crate::supervisor::Supervisor).
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
    loop {
        if let Some(until) = flush(cx, m, &mut last_error).await? {
            return Ok(until);
        }
        let now = Instant::now();
        match m.poll_request(now) {
            Some(Request::List(req)) => {
                let params = list_params(req);
                let admit = admit_listed(cx);
                match cx.lw.list_items(params, admit).await {
                    Ok(list) => m.handle_list_page(
                        Instant::now(),
                        ListPage {
                            items: list.items,
                            resource_version: list.metadata.resource_version.unwrap_or_default(),
                            continue_token: list.metadata.continue_,
                        },
                    ),
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
                let rv = req.resource_version.clone();
                let params = WatchParams {
                    label_selector: req.label_selector,
                    field_selector: req.field_selector,
                    timeout: Some(req.timeout_seconds),
                    bookmarks: req.allow_bookmarks,
                    send_initial_events: req.send_initial_events,
                };
                match cx.lw.watch(params, rv).await {
                    Ok(stream) => {
                        m.handle_watch_opened(Instant::now());
                        if let Some(until) = consume(cx, m, stream, &mut last_error).await? {
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

/// Reads an open watch in groups of already-decoded events until the machine stops watching.
async fn consume<K: InformerObject>(
    cx: &ReflectorContext<K>,
    m: &mut Machine<K>,
    stream: WatchStream<K>,
    last_error: &mut Option<ReflectorError>,
) -> Result<Option<(ReflectorError, Instant)>, ReflectorError> {
    let mut chunks = stream.ready_chunks(m.config().event_batch.max(1));
    while m.is_watching() {
        let next = match m.poll_timeout() {
            Some(at) => tokio::time::timeout_at(at.into(), chunks.next()).await,
            None => Ok(chunks.next().await),
        };
        match next {
            Err(_) => m.handle_timeout(Instant::now()),
            Ok(None) => m.handle_watch_ended(Instant::now()),
            Ok(Some(raw)) => {
                let mut events = Vec::with_capacity(raw.len());
                for ev in raw {
                    if let Some(e) = convert(cx, ev, last_error) {
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
    let mut handed = false;
    while let Some(out) = m.poll_output() {
        handed = true;
        let accepted = match out {
            FifoCommand::Replace {
                items,
                resource_version,
            } => matches!(
                cx.fifo
                    .replace
                    .send(Replace {
                        items,
                        resource_version,
                    })
                    .await,
                Ok(Ok(()))
            ),
            FifoCommand::Events {
                events,
                resource_version,
            } => {
                let events = events
                    .into_iter()
                    .map(|(kind, (obj, trace))| Event { kind, obj, trace })
                    .collect();
                matches!(
                    cx.fifo
                        .events
                        .send(Events {
                            events,
                            resource_version,
                        })
                        .await,
                    Ok(Ok(()))
                )
            }
            FifoCommand::Bookmark { resource_version } => cx
                .fifo
                .bookmark
                .send(Bookmark { resource_version })
                .await
                .is_ok(),
        };
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
                let error = match cause {
                    FailureCause::VeryShortWatch => ReflectorError::VeryShortWatch {
                        resource: cx.resource.clone(),
                    },
                    FailureCause::Idle => {
                        cx.warn(WatchWarning::Stalled {
                            resource: cx.resource.clone(),
                        });
                        ReflectorError::Idle {
                            resource: cx.resource.clone(),
                            after: m.config().idle_timeout,
                        }
                    }
                    FailureCause::Expired => {
                        cx.warn(WatchWarning::Expired {
                            resource: cx.resource.clone(),
                        });
                        last_error.take().unwrap_or(ReflectorError::Expired {
                            resource: cx.resource.clone(),
                        })
                    }
                    FailureCause::List | FailureCause::Watch => {
                        last_error.take().unwrap_or(ReflectorError::Server {
                            resource: cx.resource.clone(),
                            message,
                        })
                    }
                };
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
    Ok(failed)
}

/// kube's watch event → the machine's, admitting objects (R5, P2, trace id).
fn convert<K: InformerObject>(
    cx: &ReflectorContext<K>,
    ev: Result<KubeWatchEvent<K>, kube::Error>,
    last_error: &mut Option<ReflectorError>,
) -> Option<WatchEvent<(Arc<K>, TraceId)>> {
    Some(match ev {
        Ok(KubeWatchEvent::Added(o)) => WatchEvent::Added(cx.admit(o, "added", None)?),
        Ok(KubeWatchEvent::Modified(o)) => WatchEvent::Modified(cx.admit(o, "modified", None)?),
        Ok(KubeWatchEvent::Deleted(o)) => WatchEvent::Deleted(cx.admit(o, "deleted", None)?),
        Ok(KubeWatchEvent::Bookmark(b)) => WatchEvent::Bookmark {
            initial_events_end: b
                .metadata
                .annotations
                .get(INITIAL_EVENTS_END)
                .is_some_and(|v| v == "true"),
            resource_version: b.metadata.resource_version,
        },
        Ok(KubeWatchEvent::Error(s)) => {
            let e = RequestError::from_status(s.code, None, s.message.clone());
            *last_error = Some(ReflectorError::WatchErrorEvent {
                resource: cx.resource.clone(),
                code: s.code,
                reason: s.reason,
                message: s.message,
            });
            WatchEvent::Error(e)
        }
        Err(kube::Error::SerdeError(e)) if e.classify() == serde_json::error::Category::Data => {
            // Valid JSON, wrong shape or kind: not ours (R5). Dropped, reported, not cached.
            cx.status.dropped_objects.fetch_add(1, Ordering::Relaxed);
            cx.warn(WatchWarning::UnexpectedObject {
                resource: cx.resource.clone(),
                detail: e.to_string(),
            });
            return None;
        }
        Err(source) => {
            let e = classify(&source);
            *last_error = Some(match source {
                kube::Error::SerdeError(source) => ReflectorError::Decode {
                    resource: cx.resource.clone(),
                    source,
                },
                source => ReflectorError::Stream {
                    resource: cx.resource.clone(),
                    source,
                },
            });
            WatchEvent::Error(e)
        }
    })
}

/// The per-item admission of a LIST, run as each item is decoded.
fn admit_listed<K: InformerObject>(cx: &Arc<ReflectorContext<K>>) -> Admit<K> {
    let cx = Arc::clone(cx);
    Box::new(move |obj, list_type| cx.admit(obj, "listed", list_type))
}

/// Classifies kube's error for the machine: HTTP status (with a 429's retry-after from the
/// Status details), decode, or transport.
pub(crate) fn classify(e: &kube::Error) -> RequestError {
    match e {
        kube::Error::Api(s) => {
            let retry_after = s
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s)));
            RequestError::from_status(s.code, retry_after, e.to_string())
        }
        kube::Error::SerdeError(_) => {
            RequestError::new(kinformer::reflector::ErrorKind::Decode, e.to_string())
        }
        _ => RequestError::new(kinformer::reflector::ErrorKind::Transport, e.to_string()),
    }
}

fn list_params(req: kinformer::reflector::ListRequest) -> ListParams {
    ListParams {
        label_selector: req.label_selector,
        field_selector: req.field_selector,
        limit: req.limit,
        continue_token: req.continue_token,
        resource_version: req.resource_version,
        version_match: req.version_match.map(|v| match v {
            kinformer::reflector::VersionMatch::NotOlderThan => VersionMatch::NotOlderThan,
        }),
        ..ListParams::default()
    }
}

impl<K: InformerObject> Handler<crate::messages::Stop> for Reflector<K> {
    type Result = ();

    fn handle(&mut self, _: crate::messages::Stop, ctx: &mut Context<Self>) {
        // Dropping the spawned future closes the watch connection.
        ctx.stop();
    }
}
