//! The user's actor: [`PodSummary`] receives a [`Notify<Pod>`] per change (registered with
//! `SharedIndexInformer::add_recipient`), keeps a live summary (pods per phase and per
//! namespace) and fans each change out to its subscribers (the `/events` streams) as
//! server-sent events.
//!
//! It runs on the arbiter it was started on (the application's main one); the informer's
//! listener awaits its mailbox for each notification, so a slow summary slows that listener,
//! never the other handlers (B3). Subscribers are bounded channels: one that does not keep up
//! is dropped (its stream ends; a browser's `EventSource` reconnects and gets a fresh summary),
//! so a stuck client never holds the actor.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use actix::{Actor, AsyncContext, Context, Handler, Message};
use bytes::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{Notification, Notify, ObjectKey};
use kube::ResourceExt;
use serde::Serialize;
use tokio::sync::mpsc;

/// Frames a subscriber may have waiting before it is dropped as too slow.
pub const SUBSCRIBER_BUFFER: usize = 256;
/// How often an idle stream gets a comment line (keeps proxies from closing it, finds closed
/// clients).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Shown for a pod without `status.phase` (or `spec.nodeName`): not a value Kubernetes uses.
pub const NONE: &str = "(none)";

/// A pod's phase, or [`NONE`].
pub fn phase_of(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| NONE.to_string())
}

/// A pod's node, or [`NONE`] while unscheduled.
pub fn node_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_else(|| NONE.to_string())
}

/// The live summary: what `/api/summary` answers and each SSE event carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, actix::MessageResponse)]
pub struct SummaryView {
    /// Pods known to the actor.
    pub pods: u64,
    /// Pods per phase.
    pub by_phase: BTreeMap<String, u64>,
    /// Pods per namespace.
    pub by_namespace: BTreeMap<String, u64>,
    /// Notifications handled since the start.
    pub notifications: u64,
}

/// One change, as an SSE `change` event describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    /// `add`, `update` or `delete`.
    pub op: &'static str,
    /// `namespace/name`.
    pub key: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Its phase (the last known one for a delete).
    pub phase: String,
    /// Its node.
    pub node: String,
    /// Its resourceVersion.
    pub resource_version: String,
}

#[derive(Serialize)]
struct ChangeEvent<'a> {
    change: &'a Change,
    summary: &'a SummaryView,
}

struct Row {
    namespace: String,
    phase: String,
}

/// The actor. Start it with [`PodSummary::new`]`.start()` and register
/// `addr.recipient()` on a Pod informer.
#[derive(Default)]
pub struct PodSummary {
    rows: HashMap<ObjectKey, Row>,
    view: SummaryView,
    subscribers: Vec<mpsc::Sender<Bytes>>,
    closed: bool,
}

impl PodSummary {
    /// An empty summary with no subscriber.
    pub fn new() -> Self {
        Self::default()
    }

    fn count(map: &mut BTreeMap<String, u64>, key: &str, up: bool) {
        if up {
            *map.entry(key.to_string()).or_default() += 1;
        } else if let Some(n) = map.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(key);
            }
        }
    }

    fn forget(&mut self, key: &ObjectKey) {
        if let Some(old) = self.rows.remove(key) {
            Self::count(&mut self.view.by_phase, &old.phase, false);
            Self::count(&mut self.view.by_namespace, &old.namespace, false);
        }
    }

    /// Applies one notification; returns the change to fan out.
    fn apply(&mut self, n: &Notify<Pod>) -> Change {
        self.view.notifications += 1;
        let (op, pod) = match &n.event {
            Notification::Add { obj, .. } => ("add", obj),
            Notification::Update { new, .. } => ("update", new),
            Notification::Delete { obj } => ("delete", obj.object()),
        };
        let namespace = pod.namespace().unwrap_or_default();
        let phase = phase_of(pod);
        self.forget(&n.key);
        if op != "delete" {
            Self::count(&mut self.view.by_phase, &phase, true);
            Self::count(&mut self.view.by_namespace, &namespace, true);
            self.rows.insert(
                n.key.clone(),
                Row {
                    namespace: namespace.clone(),
                    phase: phase.clone(),
                },
            );
        }
        self.view.pods = self.rows.len() as u64;
        Change {
            op,
            key: n.key.to_string(),
            name: pod.name_any(),
            namespace,
            phase,
            node: node_of(pod),
            resource_version: pod.resource_version().unwrap_or_default(),
        }
    }

    /// Sends `frame` to every subscriber; drops those gone or too slow.
    fn broadcast(&mut self, frame: Bytes) {
        self.subscribers
            .retain(|tx| match tx.try_send(frame.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::warn!("an /events subscriber fell behind: dropped (it may reconnect)");
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
    }
}

/// One server-sent event: `event: NAME`, one `data:` line of JSON, a blank line.
pub fn sse_frame(event: &str, data: &impl Serialize) -> Bytes {
    // Serialising these plain structs cannot fail; an empty object stands in if it ever did.
    let json = serde_json::to_string(data).unwrap_or_else(|_| "{}".to_string());
    Bytes::from(format!("event: {event}\ndata: {json}\n\n"))
}

impl Actor for PodSummary {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(KEEP_ALIVE, |this, _| {
            this.broadcast(Bytes::from_static(b": keep-alive\n\n"))
        });
    }
}

impl Handler<Notify<Pod>> for PodSummary {
    type Result = ();

    fn handle(&mut self, n: Notify<Pod>, _: &mut Self::Context) {
        let change = self.apply(&n);
        if !self.subscribers.is_empty() {
            let frame = sse_frame(
                "change",
                &ChangeEvent {
                    change: &change,
                    summary: &self.view,
                },
            );
            self.broadcast(frame);
        }
    }
}

/// Asks for the current summary.
#[derive(Debug, Message)]
#[rtype(result = "SummaryView")]
pub struct GetSummary;

impl Handler<GetSummary> for PodSummary {
    type Result = SummaryView;

    fn handle(&mut self, _: GetSummary, _: &mut Self::Context) -> SummaryView {
        self.view.clone()
    }
}

/// The summary no longer takes subscribers (it is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the summary is shutting down")]
pub struct SummaryClosed;

/// Subscribes to the changes: the receiver gets a `summary` event at once, then a `change`
/// event (with the new summary) per notification, and keep-alive comments.
#[derive(Debug, Message)]
#[rtype(result = "Result<mpsc::Receiver<Bytes>, SummaryClosed>")]
pub struct Subscribe;

impl Handler<Subscribe> for PodSummary {
    type Result = Result<mpsc::Receiver<Bytes>, SummaryClosed>;

    fn handle(&mut self, _: Subscribe, _: &mut Self::Context) -> Self::Result {
        if self.closed {
            return Err(SummaryClosed);
        }
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        // The channel is new and empty: the first frame always fits.
        let _ = tx.try_send(sse_frame("summary", &self.view));
        self.subscribers.push(tx);
        Ok(rx)
    }
}

/// Shutdown's first step: ends every subscriber's stream (so the HTTP server's graceful stop
/// is not held by open `/events` connections) and refuses new ones. Answers how many were
/// ended.
#[derive(Debug, Message)]
#[rtype(result = "usize")]
pub struct CloseSubscribers;

impl Handler<CloseSubscribers> for PodSummary {
    type Result = usize;

    fn handle(&mut self, _: CloseSubscribers, _: &mut Self::Context) -> usize {
        self.closed = true;
        let n = self.subscribers.len();
        self.subscribers.clear();
        n
    }
}

/// Stops the actor (after its registration was removed).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopSummary;

impl Handler<StopSummary> for PodSummary {
    type Result = ();

    fn handle(&mut self, _: StopSummary, ctx: &mut Self::Context) {
        use actix::ActorContext as _;
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kinformer_actors::{DeltaObject, TraceId};

    use super::*;

    fn pod(ns: &str, name: &str, phase: Option<&str>) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        if let Some(ph) = phase {
            p.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(ph.into()),
                ..Default::default()
            });
        }
        Arc::new(p)
    }

    fn notify(event: Notification<Pod>) -> Notify<Pod> {
        let o = event.object();
        Notify {
            key: ObjectKey::new(o.namespace().as_deref(), &o.name_any()),
            event,
            trace: TraceId::default(),
        }
    }

    #[test]
    fn counts_follow_adds_updates_and_deletes() {
        let mut s = PodSummary::new();
        let a = pod("x", "a", None);
        s.apply(&notify(Notification::Add {
            obj: a.clone(),
            is_in_initial_list: true,
        }));
        s.apply(&notify(Notification::Add {
            obj: pod("y", "b", Some("Running")),
            is_in_initial_list: false,
        }));
        let a2 = pod("x", "a", Some("Running"));
        let c = s.apply(&notify(Notification::Update {
            old: a,
            new: a2.clone(),
        }));
        assert_eq!(
            (c.op, c.phase.as_str(), c.key.as_str()),
            ("update", "Running", "x/a")
        );
        assert_eq!(s.view.by_phase, BTreeMap::from([("Running".into(), 2)]));
        let c = s.apply(&notify(Notification::Delete {
            obj: DeltaObject::Object(a2),
        }));
        assert_eq!(c.op, "delete");
        assert_eq!(s.view.pods, 1);
        assert_eq!(s.view.by_namespace, BTreeMap::from([("y".into(), 1)]));
        assert_eq!(s.view.by_phase, BTreeMap::from([("Running".into(), 1)]));
        assert_eq!(s.view.notifications, 4);
        // A delete of a key never seen (a coalesced add+delete) changes no count.
        s.apply(&notify(Notification::Delete {
            obj: DeltaObject::Object(pod("z", "gone", None)),
        }));
        assert_eq!(s.view.pods, 1);
        assert!(!s.view.by_namespace.contains_key("z"));
    }

    #[test]
    fn sse_frames_are_one_data_line() {
        let f = sse_frame("summary", &SummaryView::default());
        let text = std::str::from_utf8(&f).expect("utf-8");
        assert!(text.starts_with("event: summary\ndata: {"), "{text}");
        assert!(text.ends_with("}\n\n"));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "event, data, blank: {lines:?}");
        assert_eq!(lines[2], "");
    }
}
