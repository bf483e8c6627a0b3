//! A stand-in for the kubelet's part in pod deletion. The API server only marks a scheduled pod
//! for deletion (`deletionTimestamp`, `deletionGracePeriodSeconds`); the kubelet on its node
//! stops the containers and then deletes the pod with grace period 0 and a UID precondition
//! (kubelet's `pkg/kubelet/status/status_manager.go` `syncPod`, which calls `Delete` with
//! `metav1.NewDeleteOptions(0)` and `Preconditions.UID`). The sim runs no kubelet, so this task
//! does that last delete after the pod's grace period, capped at
//! [`crate::SimConfig::pod_termination`] so that tests stay fast.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::apimachinery::options::DeleteOptions;
use crate::apimachinery::schema::ResourceDef;
use crate::registry::generic as ops;
use crate::storage::object::Key;
use crate::storage::store::Store;

/// A pod the kubelet stand-in is to delete.
#[derive(Debug)]
pub(crate) struct Termination {
    pub def: Arc<ResourceDef>,
    pub key: Key,
    pub uid: String,
    /// The grace period stored on the pod, in seconds.
    pub grace: i64,
}

struct Due {
    at: Instant,
    seq: u64,
    t: Termination,
}

impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Starts the stand-in on the current tokio runtime: terminating pods are deleted after
/// `min(grace, cap)`. It ends when the store is dropped.
pub(crate) fn start(store: &Arc<Store>, cap: Duration) {
    let (tx, rx) = mpsc::unbounded_channel();
    if store.set_kubelet(tx) {
        tokio::spawn(run(Arc::downgrade(store), rx, cap));
    }
}

async fn run(store: Weak<Store>, mut rx: mpsc::UnboundedReceiver<Termination>, cap: Duration) {
    let mut queue: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let mut seq = 0u64;
    loop {
        let next = queue.peek().map(|Reverse(d)| d.at);
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(t) => {
                    let grace = Duration::from_secs(u64::try_from(t.grace).unwrap_or(0));
                    seq += 1;
                    queue.push(Reverse(Due { at: Instant::now() + grace.min(cap), seq, t }));
                }
                None => return,
            },
            () = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                let Some(Reverse(due)) = queue.pop() else { continue };
                let Some(store) = store.upgrade() else { return };
                let t = due.t;
                let opts = DeleteOptions {
                    uid: Some(t.uid.clone()),
                    grace_period_seconds: Some(0),
                    ..DeleteOptions::default()
                };
                let ns = (!t.key.0.is_empty()).then_some(t.key.0.as_str());
                // NotFound (deleted meanwhile, or an earlier, shorter schedule already ran) and
                // Conflict (the name now holds another pod) are the kubelet's expected races.
                if let Err(e) = ops::delete(&store, &t.def, ns, &t.key.1, &opts)
                    && e.code != 404
                    && e.code != 409
                {
                    tracing::warn!(pod = %t.key.1, error = %e.message, "kubelet stand-in could not delete a pod");
                }
            }
        }
    }
}
