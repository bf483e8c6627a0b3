//! The actor API over HTTP against the sim (`docs/semantics.md` B3, B5, P7, S3, S4;
//! `docs/actix.md`): a user's actor registered with `add_recipient` under each overflow policy,
//! an actor restarted by actix's `Supervisor`, informers and listers used from inside an
//! actor without blocking its arbiter, and the pause after a handler panic.
//!
//! Slow actors are held at a gate the test opens: a deterministic "slow", never a sleep.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::common::*;
use actix::prelude::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer::notification::Notification;
use kinformer_actors::{ListenerConfig, Notify, OverflowPolicy, SharedIndexInformer, handler_fn};
use kinformer_sim::Verb;

const KEYS: usize = 10;
const ROUNDS: usize = 12;

async fn churn(client: &kube::Client) {
    for r in 0..ROUNDS {
        for k in 0..KEYS {
            touch_pod(client, "a", &format!("pod-{k}"), &r.to_string()).await;
        }
    }
}

/// Holds a handler inside its callback while closed.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<GateState>, std::sync::Condvar)>);

#[derive(Default)]
struct GateState {
    closed: bool,
    inside: bool,
}

impl Gate {
    fn set(&self, closed: bool) {
        let (st, cv) = &*self.0;
        st.lock().unwrap().closed = closed;
        cv.notify_all();
    }
    fn holding(&self) -> bool {
        self.0.0.lock().unwrap().inside
    }
    fn pass(&self) {
        let (st, cv) = &*self.0;
        let mut g = st.lock().unwrap();
        while g.closed {
            g.inside = true;
            g = cv.wait(g).unwrap();
        }
        g.inside = false;
    }
}

/// A user's actor that applies every notification to its view, after passing the gate (it
/// blocks its own arbiter's thread while held: its own arbiter, so nothing else waits).
struct Slow {
    gate: Gate,
    view: View,
    mailbox: usize,
}

impl Actor for Slow {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.mailbox);
    }
}

impl Handler<Notify<Pod>> for Slow {
    type Result = ();

    fn handle(&mut self, msg: Notify<Pod>, _: &mut Context<Self>) {
        self.gate.pass();
        self.view.apply(&msg.event);
    }
}

fn slow_actor(arbiter: &Arbiter, gate: &Gate, view: &View) -> Addr<Slow> {
    let (gate, view) = (gate.clone(), view.clone());
    Slow::start_in_arbiter(&arbiter.handle(), move |_| Slow {
        gate,
        view,
        mailbox: 1,
    })
}

#[actix::test]
async fn b5_a_block_recipient_holds_the_pipeline_back_with_one_notification_in_its_mailbox() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", KEYS).await;
    let mut config = fast_config();
    config.fifo.capacity = 4;
    config.fifo.batch_size = 2;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config);
    let (gate, view, arbiter) = (Gate::default(), View::default(), Arbiter::new());
    let actor = slow_actor(&arbiter, &gate, &view);
    let user = informer
        .add_recipient(
            actor.recipient(),
            ListenerConfig::default()
                .policy(OverflowPolicy::Block)
                .capacity(2)
                .name("slow-actor"),
        )
        .await
        .unwrap();
    let fast = Arc::new(AtomicU64::new(0));
    let f = Arc::clone(&fast);
    informer
        .add_event_handler_with(
            handler_fn(move |_: &Notification<Pod>| {
                f.fetch_add(1, Ordering::SeqCst);
            }),
            ListenerConfig::default().policy(OverflowPolicy::Unbounded),
        )
        .await
        .unwrap();
    start_synced(&informer).await;
    watching(&sim).await;
    eventually("the actor had the initial list", || {
        view.seen() == KEYS as u64
    })
    .await;
    gate.set(true);
    touch_pod(&client, "a", "pod-0", "held").await;
    eventually("the actor is held inside its handler", || gate.holding()).await;
    churn(&client).await;
    let total = (KEYS + 1 + KEYS * ROUNDS) as u64;
    eventually("backpressure reached the reflector (B4)", || {
        informer.fifo_status().writer_waits() >= 1
    })
    .await;
    let s = user.stats();
    // B5: the listener sent one notification and waits for its answer; everything else it
    // holds in its own bounded buffer, none piles up in the actor's mailbox.
    eventually(
        "one notification in flight to the actor, the rest buffered",
        || s.received() - s.delivered() - s.buffered() == 1,
    )
    .await;
    assert!(
        s.peak_buffered() <= 2 + 2,
        "Block: capacity plus at most one batch, was {}",
        s.peak_buffered()
    );
    assert!(
        fast.load(Ordering::SeqCst) < total,
        "Block slows the whole pipeline"
    );
    gate.set(false);
    let truth = server_pods(&client).await;
    eventually("the actor converges", || view.snapshot() == truth).await;
    assert_eq!(view.seen(), total, "Block loses nothing");
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    eventually("every notification answered", || {
        s.delivered() == s.received() && s.buffered() == 0
    })
    .await;
    assert_eq!((s.coalesced(), s.undeliverable()), (0, 0));
    informer.shutdown().await;
    arbiter.stop();
}

#[actix::test]
async fn b3_a_coalesce_recipient_merges_a_slow_actors_backlog_and_counts_what_it_merged() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", KEYS).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let (gate, view, arbiter) = (Gate::default(), View::default(), Arbiter::new());
    let actor = slow_actor(&arbiter, &gate, &view);
    let user = informer
        .add_recipient(
            actor.recipient(),
            ListenerConfig::default()
                .policy(OverflowPolicy::Coalesce)
                .capacity(2),
        )
        .await
        .unwrap();
    start_synced(&informer).await;
    watching(&sim).await;
    eventually("the actor had the initial list", || {
        view.seen() == KEYS as u64
    })
    .await;
    gate.set(true);
    touch_pod(&client, "a", "pod-0", "held").await;
    eventually("the actor is held inside its handler", || gate.holding()).await;
    churn(&client).await;
    let total = (KEYS + 1 + KEYS * ROUNDS) as u64;
    let s = user.stats();
    // Coalesce never holds the pipeline: every change reaches the listener while the actor is held.
    eventually("the listener accepted every change", || {
        s.received() == total
    })
    .await;
    assert!(
        s.buffered() <= KEYS as u64,
        "bounded by keys: {}",
        s.buffered()
    );
    assert!(s.coalesced() > 0, "the backlog was merged");
    gate.set(false);
    let truth = server_pods(&client).await;
    eventually("the actor converges to the server's state", || {
        view.snapshot() == truth
    })
    .await;
    eventually("every notification delivered or merged", || {
        s.buffered() == 0 && s.delivered() + s.coalesced() == s.received()
    })
    .await;
    assert!(view.seen() < total, "fewer, merged notifications");
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    informer.shutdown().await;
    arbiter.stop();
}

/// A supervised user actor: its async handler stops the actor on `restart-me` before answering,
/// so actix's `Supervisor` restarts it with that answer never given (the restart drops the
/// handler's future). The struct, and its view, survive the restart, as actix keeps it.
struct Restarting {
    view: View,
    restarts: Arc<AtomicU64>,
}

impl Actor for Restarting {
    type Context = Context<Self>;
}

impl Supervised for Restarting {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.restarts.fetch_add(1, Ordering::SeqCst);
    }
}

impl Handler<Notify<Pod>> for Restarting {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: Notify<Pod>, ctx: &mut Context<Self>) -> Self::Result {
        self.view.apply(&msg.event);
        if msg.key.name() == "restart-me" && matches!(msg.event, Notification::Add { .. }) {
            ctx.stop();
            // Never answers: only the restart ends it.
            return Box::pin(futures::future::pending::<()>().into_actor(self));
        }
        Box::pin(async {}.into_actor(self))
    }
}

#[actix::test]
async fn s4_an_actor_restarted_by_its_supervisor_keeps_receiving_without_gap_or_duplicate() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let (view, restarts, arbiter) = (View::default(), Arc::new(AtomicU64::new(0)), Arbiter::new());
    let (v, r) = (view.clone(), Arc::clone(&restarts));
    let actor = Supervisor::start_in_arbiter(&arbiter.handle(), move |_| Restarting {
        view: v,
        restarts: r,
    });
    let user = informer
        .add_recipient(actor.recipient(), ListenerConfig::default())
        .await
        .unwrap();
    // What a closure handler sees: what the actor must see, one for one.
    let reference = View::default();
    informer
        .add_event_handler_with(
            reference.handler(),
            ListenerConfig::default().policy(OverflowPolicy::Unbounded),
        )
        .await
        .unwrap();
    start_synced(&informer).await;
    // The actor counts before it answers; the listener is synced once the answer is back.
    eventually("the actor had the initial list", || {
        view.seen() == 3 && user.has_synced()
    })
    .await;
    let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), "a");
    api.create(&Default::default(), &pod("a", "restart-me"))
        .await
        .unwrap();
    eventually("actix restarted the actor", || {
        restarts.load(Ordering::SeqCst) == 1
    })
    .await;
    // After the restart: more changes of every kind, each one reaching the same address.
    api.create(&Default::default(), &pod("a", "after"))
        .await
        .unwrap();
    touch_pod(&client, "a", "restart-me", "1").await;
    touch_pod(&client, "a", "pod-0", "1").await;
    delete_pod(&client, "a", "pod-1").await;
    let truth = server_pods(&client).await;
    eventually("the restarted actor converges", || {
        view.snapshot() == truth && reference.snapshot() == truth
    })
    .await;
    // No gap (an update or delete of a key it never had) and no duplicate add.
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    eventually("each change once, as the closure handler saw it", || {
        view.seen() == reference.seen()
    })
    .await;
    assert!(view.seen() >= 3 + 1 + 4);
    let s = user.stats();
    eventually("every notification counted delivered", || {
        s.delivered() == s.received()
    })
    .await;
    assert!(!s.recipient_gone(), "a restarted actor is not gone (S4)");
    assert_eq!(s.undeliverable(), 0);
    assert_eq!(restarts.load(Ordering::SeqCst), 1);
    informer.shutdown().await;
    arbiter.stop();
}

/// An actor that creates its informer in `started`, waits for its sync without blocking its
/// arbiter, and answers from the lister meanwhile.
struct Owner {
    client: kube::Client,
    informer: Option<SharedIndexInformer<Pod>>,
    synced: bool,
}

impl Actor for Owner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let informer =
            SharedIndexInformer::<Pod>::with_config(self.client.clone(), Some("a"), fast_config());
        if let Err(e) = informer.start() {
            tracing::error!(error = %e, "informer did not start");
            ctx.stop();
            return;
        }
        let syncing = informer.clone();
        self.informer = Some(informer);
        ctx.spawn(
            async move { syncing.wait_for_sync().await }
                .into_actor(self)
                .map(|_, act, _| act.synced = true),
        );
    }
}

/// What the actor knows now: synced, and the lister's count.
#[derive(Message)]
#[rtype(result = "(bool, usize)")]
struct Ping;

impl Handler<Ping> for Owner {
    type Result = MessageResult<Ping>;

    fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> Self::Result {
        // Lister reads are lock-free snapshots: fine inside a handler.
        let n = self.informer.as_ref().map_or(0, |i| i.lister().len());
        MessageResult((self.synced, n))
    }
}

#[actix::test]
async fn an_actor_owning_an_informer_answers_while_it_syncs_and_reads_its_lister() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 5).await;
    // The first LIST is throttled (429, Retry-After 1 s): the sync takes at least that long.
    sim.faults()
        .throttle(Some("pods"), &[Verb::List], Some(1), 1);
    let arbiter = Arbiter::new();
    let c = client.clone();
    let owner = Owner::start_in_arbiter(&arbiter.handle(), move |_| Owner {
        client: c,
        informer: None,
        synced: false,
    });
    eventually("the informer asked for its list", || {
        sim.requests().count("pods", Verb::List) >= 1
    })
    .await;
    let (synced, _) = owner.send(Ping).await.unwrap();
    assert!(
        !synced,
        "answered while waiting for the sync (the throttled LIST is not retried for 1 s)"
    );
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (synced, n) = owner.send(Ping).await.unwrap();
        if synced {
            assert_eq!(n, 5, "the lister holds the list once synced");
            break;
        }
        assert!(Instant::now() < deadline, "never synced");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    create_pods_named(&client, "a", &["late"]).await;
    let deadline = Instant::now() + DEADLINE;
    while owner.send(Ping).await.unwrap().1 != 6 {
        assert!(
            Instant::now() < deadline,
            "the lister never saw the new pod"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    arbiter.stop();
}

async fn create_pods_named(client: &kube::Client, ns: &str, names: &[&str]) {
    let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
    for n in names {
        api.create(&Default::default(), &pod(ns, n)).await.unwrap();
    }
}

#[actix::test]
async fn p7_a_handler_pauses_after_a_panic_only_when_configured() {
    let sim = sim().await;
    let client = sim.client();
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    // Each handler panics on `boom` and records when it was called with what.
    type Calls = Arc<Mutex<Vec<(String, Instant)>>>;
    let handler = |calls: &Calls| {
        let calls = Arc::clone(calls);
        handler_fn(move |n: &Notification<Pod>| {
            let name = n.object().metadata.name.clone().unwrap_or_default();
            calls.lock().unwrap().push((name.clone(), Instant::now()));
            assert!(name != "boom", "the handler panics on boom");
        })
    };
    let names = |calls: &Calls| -> Vec<String> {
        calls
            .lock()
            .unwrap()
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    };
    let (at_once, short, long): (Calls, Calls, Calls) = Default::default();
    informer
        .add_event_handler_with(handler(&at_once), ListenerConfig::default())
        .await
        .unwrap();
    let pause = Duration::from_millis(300);
    informer
        .add_event_handler_with(
            handler(&short),
            ListenerConfig::default().panic_pause(pause),
        )
        .await
        .unwrap();
    let paused = informer
        .add_event_handler_with(
            handler(&long),
            ListenerConfig::default()
                .panic_pause(Duration::from_secs(3600))
                .name("paused"),
        )
        .await
        .unwrap();
    start_synced(&informer).await;
    create_pods_named(&client, "a", &["boom", "after"]).await;
    eventually("the default handler runs again at once", || {
        names(&at_once) == ["boom", "after"]
    })
    .await;
    eventually("the short pause ends", || {
        names(&short) == ["boom", "after"]
    })
    .await;
    let gap = {
        let c = short.lock().unwrap();
        c[1].1.duration_since(c[0].1)
    };
    assert!(gap >= pause, "the next call waited the pause: {gap:?}");
    // The hour-long pause: the panic is counted, the next notification waits, and shutdown
    // cuts the pause short instead of waiting for it.
    eventually("the paused handler's panic is counted", || {
        paused.stats().panics() == 1
    })
    .await;
    assert_eq!(names(&long), ["boom"], "still paused");
    let started = Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(10), informer.shutdown())
        .await
        .expect("shutdown returns");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(report.unfinished.is_empty(), "{report:?}");
    assert_eq!(
        names(&long),
        ["boom"],
        "nothing ran after the pause was cut"
    );
}
