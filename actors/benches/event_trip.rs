//! One watch event's trip through the actors (Reflector → DeltaFifo → Indexer →
//! ProcessorListener → handler) with a no-op handler: events/s, and what a mailbox hop costs.
//!
//! No HTTP and no JSON: the informer's `ListerWatcher` hands the reflector prebuilt `Pod`s (a
//! LIST of 1,000 pods, then a WATCH fed from a channel), so what is timed is the actors' own
//! work per event: batching (R3, F6), the FIFO's per-key deltas (F1), the cache write and
//! index update (I1), the notification fan-out and the listener's buffer (P1, B3), and the
//! mailbox hops between them. Each iteration sends `EVENTS` MODIFIED events over the 1,000
//! keys and waits until the handler has seen the last one (a marker pod updated last; under
//! the default policy, Coalesce, updates a busy handler has not read yet may be merged, so the
//! handler's count is printed next to the events sent).
//!
//! - `event_trip/batch_1`: every hop carries one event (`ReflectorConfig::event_batch` and
//!   `FifoConfig::batch_size` = 1), so each event pays every mailbox hop alone;
//! - `event_trip/batch_64`: up to 64 events per message (the defaults are 256);
//! - `mailbox/do_send`: a bare actix round trip for comparison, a no-op actor receiving
//!   `EVENTS` messages one at a time (`item_1`) or 64 to a message (`item_64`).
//!
//! The difference between the per-event times at batch 1 and batch 64, divided by the hops
//! (reflector → FIFO → indexer → listener), is the per-message mailbox overhead on the
//! informer's path. Run: `cargo bench -p kinformer-actors --bench event_trip`.

use std::{
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use actix::{Actor, Context, Handler, Message};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures::{
    FutureExt, StreamExt,
    channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded},
    future::BoxFuture,
};
use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::ListMeta};
use kinformer_actors::{
    InformerConfig, ListerWatcher, Notification, SharedIndexInformer, handler_fn,
    lister_watcher::WatchStream,
};
use kube::api::{ListParams, ObjectList, TypeMeta, WatchEvent, WatchParams};

/// Events per iteration.
const EVENTS: u64 = 4_096;
/// Keys the events are spread over (the LIST's pods).
const KEYS: u64 = 1_000;
/// The pod updated last in each iteration; the handler watches for it.
const MARKER: &str = "marker";

fn pod(name: &str, rv: u64) -> Pod {
    let mut p = Pod::default();
    p.metadata.namespace = Some("demo".into());
    p.metadata.name = Some(name.to_string());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.metadata.resource_version = Some(rv.to_string());
    p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    p
}

type Item = Result<WatchEvent<Pod>, kube::Error>;

/// A LIST of `KEYS` pods and the marker at resourceVersion 1, then one WATCH fed by the bench.
struct Feed {
    rx: Mutex<Option<UnboundedReceiver<Item>>>,
}

impl ListerWatcher<Pod> for Feed {
    fn list(&self, _: ListParams) -> BoxFuture<'static, Result<ObjectList<Pod>, kube::Error>> {
        let mut items: Vec<Pod> = (0..KEYS).map(|i| pod(&format!("pod-{i}"), 1)).collect();
        items.push(pod(MARKER, 1));
        let list = ObjectList {
            types: TypeMeta::list::<Pod>(),
            metadata: ListMeta {
                resource_version: Some("1".into()),
                ..ListMeta::default()
            },
            items,
        };
        async move { Ok(list) }.boxed()
    }

    fn watch(
        &self,
        _: WatchParams,
        _: String,
    ) -> BoxFuture<'static, Result<WatchStream<Pod>, kube::Error>> {
        let rx = self.rx.lock().ok().and_then(|mut r| r.take());
        async move {
            match rx {
                Some(rx) => Ok(rx.boxed()),
                // Only one watch is fed; a second one (never expected) stays silent.
                None => Ok(futures::stream::pending().boxed()),
            }
        }
        .boxed()
    }

    fn resource_name(&self) -> String {
        "pods".into()
    }
}

/// The marker's resourceVersion the handler has reached, and how many notifications it saw.
struct Seen {
    marker_rv: Mutex<u64>,
    changed: Condvar,
    notifications: AtomicU64,
}

/// One running informer with a no-op handler and the sender feeding its watch.
struct Rig {
    tx: UnboundedSender<Item>,
    seen: Arc<Seen>,
    next_rv: u64,
    _informer: SharedIndexInformer<Pod>,
}

impl Rig {
    fn start(rt: &tokio::runtime::Runtime, batch: usize) -> Rig {
        let (tx, rx) = unbounded();
        let mut config = InformerConfig::default();
        config.reflector.event_batch = batch;
        config.fifo.batch_size = batch;
        let informer = SharedIndexInformer::new(
            Feed {
                rx: Mutex::new(Some(rx)),
            },
            config,
        );
        let seen = Arc::new(Seen {
            marker_rv: Mutex::new(0),
            changed: Condvar::new(),
            notifications: AtomicU64::new(0),
        });
        let s = Arc::clone(&seen);
        let handler = handler_fn(move |n: &Notification<Pod>| {
            s.notifications.fetch_add(1, Ordering::Relaxed);
            if let Notification::Update { new, .. } = n
                && new.metadata.name.as_deref() == Some(MARKER)
            {
                let rv = new
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if let Ok(mut m) = s.marker_rv.lock() {
                    *m = rv;
                    s.changed.notify_all();
                }
            }
        });
        rt.block_on(async {
            informer
                .add_event_handler(handler)
                .await
                .expect("handler added");
            informer.start().expect("informer starts");
            tokio::time::timeout(Duration::from_secs(30), informer.wait_for_sync())
                .await
                .expect("synced");
        });
        Rig {
            tx,
            seen,
            next_rv: 2,
            _informer: informer,
        }
    }

    /// `EVENTS` prebuilt events, the marker's update last; returns the marker's RV.
    fn events(&mut self) -> (Vec<Item>, u64) {
        let mut out = Vec::with_capacity(EVENTS as usize);
        for i in 0..EVENTS - 1 {
            out.push(Ok(WatchEvent::Modified(pod(
                &format!("pod-{}", i % KEYS),
                self.next_rv,
            ))));
            self.next_rv += 1;
        }
        let rv = self.next_rv;
        out.push(Ok(WatchEvent::Modified(pod(MARKER, rv))));
        self.next_rv += 1;
        (out, rv)
    }

    /// Sends the events and waits until the handler has seen the marker at `rv`.
    fn trip(&self, events: Vec<Item>, rv: u64) -> Duration {
        let start = Instant::now();
        for e in events {
            self.tx.unbounded_send(e).expect("watch open");
        }
        let deadline = start + Duration::from_secs(30);
        let mut m = self.seen.marker_rv.lock().expect("lock");
        while *m < rv {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the handler did not see the marker in 30 s"
            );
            m = self.seen.changed.wait_timeout(m, left).expect("lock").0;
        }
        start.elapsed()
    }
}

fn event_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("event_trip");
    group.throughput(Throughput::Elements(EVENTS));
    group.sample_size(20);
    for batch in [1usize, 64] {
        let mut rig = Rig::start(&rt, batch);
        let before = rig.seen.notifications.load(Ordering::Relaxed);
        let mut sent = 0u64;
        group.bench_function(BenchmarkId::new("batch", batch), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (events, rv) = rig.events();
                    total += rig.trip(events, rv);
                    sent += EVENTS;
                }
                total
            })
        });
        let got = rig.seen.notifications.load(Ordering::Relaxed) - before;
        eprintln!(
            "event_trip/batch/{batch}: {sent} events sent, the handler saw {got} notifications ({:.1}% merged by the listener's policy)",
            100.0 * (sent.saturating_sub(got)) as f64 / sent.max(1) as f64
        );
    }
    group.finish();
}

/// A message of `n` no-op items.
struct Items(#[allow(dead_code)] Vec<u64>);

impl Message for Items {
    type Result = ();
}

struct Sink;

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<Items> for Sink {
    type Result = ();
    fn handle(&mut self, msg: Items, _: &mut Self::Context) {
        std::hint::black_box(msg);
    }
}

fn mailbox(c: &mut Criterion) {
    let sys = actix::System::new();
    let addr = sys.block_on(async { Sink.start() });
    let mut group = c.benchmark_group("mailbox");
    group.throughput(Throughput::Elements(EVENTS));
    for per_msg in [1u64, 64] {
        group.bench_function(BenchmarkId::new("do_send_items_per_msg", per_msg), |b| {
            b.iter_custom(|iters| {
                sys.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        for _ in 0..EVENTS / per_msg - 1 {
                            addr.do_send(Items(vec![0; per_msg as usize]));
                        }
                        // The last one awaited: the mailbox is FIFO, so all the others are done.
                        addr.send(Items(vec![0; per_msg as usize]))
                            .await
                            .expect("actor alive");
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, event_trip, mailbox);
criterion_main!(benches);
