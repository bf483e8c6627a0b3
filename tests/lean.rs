//! The lean cache mode end to end (docs/semantics.md I7), over HTTP against the simulated API
//! server: a lean informer syncs, follows adds, updates and deletes, hands its handlers the
//! right old and new objects, and its lister returns the same objects as a typed informer's;
//! key sinks, lazy handlers, lazy recipients and lazy lister reads never decode; typed handlers
//! decode each event's objects once between them; `strip_managed_fields` cuts out only the
//! managed fields; objects of the wrong kind are dropped (R5). What the lean mode does with
//! malformed input is in `tests/bad_input.rs` (docs/bad-input.md).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
};

use crate::common::*;
use actix::{Actor, Context, Handler};
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{
    CacheMode, InformerConfig, KeyMapper, LazyObject, LeanConfig, ListenerConfig, NAMESPACE_INDEX,
    Notification, Notify, ObjectKey, OverflowPolicy, SharedIndexInformer, handler_fn,
    namespace_index_func,
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    core::{Expression, Selector},
};

/// What a handler saw, checked as it goes: every `Update`'s old object must be the last
/// object this handler was given for that key (client-go: old is what the cache held).
#[derive(Clone, Default)]
struct OldNewView {
    last: Arc<Mutex<BTreeMap<String, Arc<Pod>>>>,
    anomalies: Arc<Mutex<Vec<String>>>,
    updates: Arc<Mutex<u64>>,
    /// Objects handed over: one per Add and Delete, two per Update (old and new).
    objects: Arc<Mutex<u64>>,
    adds: Arc<Mutex<u64>>,
}

impl OldNewView {
    fn apply(&self, n: &Notification<Pod>) {
        *self.objects.lock().unwrap() += if matches!(n, Notification::Update { .. }) {
            2
        } else {
            1
        };
        let key = format!(
            "{}/{}",
            n.object().namespace().unwrap_or_default(),
            n.object().name_any()
        );
        let mut last = self.last.lock().unwrap();
        let bad = |m: String| self.anomalies.lock().unwrap().push(m);
        match n {
            Notification::Add { obj, .. } => {
                *self.adds.lock().unwrap() += 1;
                last.insert(key, Arc::clone(obj));
            }
            Notification::Update { old, new } => {
                *self.updates.lock().unwrap() += 1;
                match last.get(&key) {
                    Some(prev) if **prev == **old => {}
                    Some(prev) => bad(format!(
                        "{key}: old rv {:?}, last seen rv {:?}",
                        old.resource_version(),
                        prev.resource_version()
                    )),
                    None => bad(format!("{key}: update of an unknown key")),
                }
                last.insert(key, Arc::clone(new));
            }
            Notification::Delete { .. } => {
                if last.remove(&key).is_none() {
                    bad(format!("{key}: delete of an unknown key"));
                }
            }
        }
    }

    fn rvs(&self) -> BTreeMap<String, String> {
        self.last
            .lock()
            .unwrap()
            .iter()
            .map(|(k, p)| (k.clone(), p.resource_version().unwrap_or_default()))
            .collect()
    }
}

async fn informer(
    sim: &kinformer_sim::Sim,
    config: InformerConfig,
    view: &OldNewView,
) -> SharedIndexInformer<Pod> {
    let informer = SharedIndexInformer::<Pod>::with_config(sim.client(), None, config);
    informer
        .add_indexers([(NAMESPACE_INDEX.to_string(), namespace_index_func())].into())
        .await
        .expect("indexers");
    let v = view.clone();
    informer
        .add_event_handler(handler_fn(move |n: &Notification<Pod>| v.apply(n)))
        .await
        .expect("handler");
    start_synced(&informer).await;
    informer
}

#[actix::test]
async fn i7_lean_informer_follows_the_server_like_a_typed_one() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 15).await;
    create_pods(&client, "b", 10).await;
    // A hot cache smaller than the store: most updates decode their old object.
    let lean_config = fast_config().cache(CacheMode::Lean(LeanConfig::default().hot_objects(4)));
    let (lean_view, typed_view) = (OldNewView::default(), OldNewView::default());
    let lean = informer(&sim, lean_config, &lean_view).await;
    let typed = informer(&sim, fast_config(), &typed_view).await;
    assert_eq!(
        lean.lister().len(),
        25,
        "F5: synced means the whole list is cached"
    );

    // Deterministic churn: updates, deletes, creates.
    churn_pods(&client, 11, 120, 15).await;
    let truth = server_pods(&client).await;
    eventually("lean cache equals server", || cache_pods(&lean) == truth).await;
    eventually("typed cache equals server", || cache_pods(&typed) == truth).await;
    eventually("lean handler view equals server", || {
        lean_view.rvs() == truth
    })
    .await;
    assert!(
        lean_view.anomalies.lock().unwrap().is_empty(),
        "{:?}",
        lean_view.anomalies.lock().unwrap()
    );
    assert!(
        *lean_view.updates.lock().unwrap() > 50,
        "the churn was seen"
    );

    // Every read of the lean lister returns what the server and the typed lister hold.
    let (l, t) = (lean.lister(), typed.lister());
    let api: Api<Pod> = Api::all(client.clone());
    for server in api.list(&ListParams::default()).await.expect("list").items {
        let (ns, name) = (server.namespace().unwrap_or_default(), server.name_any());
        let got = l.get(&ns, &name).expect("cached");
        assert_eq!(
            *got, server,
            "{ns}/{name}: lean lister equals the server's object"
        );
        assert_eq!(got, t.get(&ns, &name).expect("typed cached"));
    }
    for ns in ["a", "b"] {
        let mut lean_names: Vec<String> = l
            .by_index(NAMESPACE_INDEX, ns)
            .expect("index")
            .iter()
            .map(|p| p.name_any())
            .collect();
        let mut typed_names: Vec<String> = t
            .by_index(NAMESPACE_INDEX, ns)
            .expect("index")
            .iter()
            .map(|p| p.name_any())
            .collect();
        lean_names.sort();
        typed_names.sort();
        assert_eq!(lean_names, typed_names);
        assert_eq!(l.namespaced(ns).list().len(), typed_names.len());
    }
    // The cache is lean: every object stored as bytes, and reads decoded some.
    let stats = l.lean_stats().expect("lean mode");
    assert_eq!(stats.objects as usize, truth.len());
    assert!(stats.decodes > 0 && stats.bytes > 0, "{stats:?}");
    assert_eq!(stats.decode_failures + stats.encode_failures, 0);
    assert!(t.lean_stats().is_none(), "the default is typed");
    lean.shutdown().await;
    typed.shutdown().await;
}

/// The lean cache's state read without decoding: key → resourceVersion, from the lazy lister.
fn lazy_cache_pods(informer: &SharedIndexInformer<Pod>) -> BTreeMap<String, String> {
    informer
        .lister()
        .lazy()
        .list()
        .iter()
        .map(|p| {
            (
                p.key().expect("key").to_string(),
                p.resource_version().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// What a lazy reader (handler, recipient, key mapper) saw, from the metadata only: one line per
/// notification (`ADD key rv`, `UPDATE key old-rv new-rv`, `DELETE key rv`), the state it
/// implies (key → rv), and how many objects it was handed already decoded (none may be, when
/// nothing typed reads the informer).
#[derive(Clone, Default)]
struct LazyLog {
    lines: Arc<Mutex<Vec<String>>>,
    state: Arc<Mutex<BTreeMap<String, String>>>,
    decoded: Arc<Mutex<u64>>,
    anomalies: Arc<Mutex<Vec<String>>>,
}

impl LazyLog {
    fn apply(&self, n: &Notification<LazyObject<Pod>>) {
        let rv = |o: &LazyObject<Pod>| o.resource_version().unwrap_or_default().to_string();
        let obj = n.object();
        let key = obj.key().expect("key").to_string();
        let decoded = match n {
            Notification::Update { old, new } => old.is_decoded() || new.is_decoded(),
            _ => obj.is_decoded(),
        };
        if decoded {
            *self.decoded.lock().unwrap() += 1;
        }
        let mut state = self.state.lock().unwrap();
        let bad = |m: String| self.anomalies.lock().unwrap().push(m);
        let line = match n {
            Notification::Add { obj, .. } => {
                if state.insert(key.clone(), rv(obj)).is_some() {
                    bad(format!("duplicate add {key}"));
                }
                format!("ADD {key} {}", rv(obj))
            }
            Notification::Update { old, new } => {
                if state.get(&key) != Some(&rv(old)) {
                    bad(format!(
                        "{key}: update's old rv {} is not the last seen {:?}",
                        rv(old),
                        state.get(&key)
                    ));
                }
                state.insert(key.clone(), rv(new));
                format!("UPDATE {key} {} {}", rv(old), rv(new))
            }
            Notification::Delete { obj } => {
                if state.remove(&key).is_none() {
                    bad(format!("delete of unknown {key}"));
                }
                format!("DELETE {key} {}", rv(obj.object()))
            }
        };
        self.lines.lock().unwrap().push(line);
    }

    fn state(&self) -> BTreeMap<String, String> {
        self.state.lock().unwrap().clone()
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn decoded(&self) -> u64 {
        *self.decoded.lock().unwrap()
    }

    fn anomalies(&self) -> Vec<String> {
        self.anomalies.lock().unwrap().clone()
    }
}

fn unbounded(name: &str) -> ListenerConfig {
    ListenerConfig::default()
        .policy(OverflowPolicy::Unbounded)
        .name(name)
}

fn label_selector(label: &str, value: &str) -> Selector {
    Expression::Equal(label.into(), value.into()).into()
}

fn lean_decodes(informer: &SharedIndexInformer<Pod>) -> u64 {
    informer.lean_stats().expect("lean mode").decodes
}

/// An informer read only by key sinks (one with a mapper reading labels) and a lazy handler
/// syncs and follows churn without decoding a single object; every read of the lazy lister
/// (point, list, namespace index, label selector, namespaced) returns the server's objects,
/// still without a decode. One typed read at the end decodes exactly one object: the counter
/// the test relies on works.
#[actix::test]
async fn i7_key_sinks_and_lazy_readers_never_decode() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 15).await;
    create_pods(&client, "b", 6).await;
    let api_b: Api<Pod> = Api::namespaced(client.clone(), "b");
    for i in 0..4 {
        let mut p = pod("b", &format!("db-{i}"));
        p.metadata.labels = Some(BTreeMap::from([("app".to_string(), "db".to_string())]));
        api_b
            .create(&PostParams::default(), &p)
            .await
            .expect("create");
    }
    let informer = SharedIndexInformer::<Pod>::with_config(
        client.clone(),
        None,
        fast_config().cache(CacheMode::lean()),
    );
    informer
        .add_indexers([(NAMESPACE_INDEX.to_string(), namespace_index_func())].into())
        .await
        .expect("indexers");
    let keys: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let k = Arc::clone(&keys);
    informer
        .add_key_sink(
            move |key: ObjectKey| {
                k.lock().unwrap().insert(key.to_string());
            },
            None,
            unbounded("keys"),
        )
        .await
        .expect("key sink");
    // A mapper that reads labels: the app's key, from the metadata.
    let apps: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let a = Arc::clone(&apps);
    let by_app: KeyMapper<Pod> = Arc::new(|key, n: &Notification<LazyObject<Pod>>| {
        let app = n.object().labels().get("app").unwrap_or("none").to_string();
        vec![ObjectKey::new(key.namespace(), &app)]
    });
    informer
        .add_key_sink(
            move |key: ObjectKey| {
                a.lock().unwrap().insert(key.to_string());
            },
            Some(by_app),
            unbounded("apps"),
        )
        .await
        .expect("mapped key sink");
    let log = LazyLog::default();
    let l = log.clone();
    informer
        .add_lazy_event_handler(
            handler_fn(move |n: &Notification<LazyObject<Pod>>| l.apply(n)),
            unbounded("lazy"),
        )
        .await
        .expect("lazy handler");
    start_synced(&informer).await;
    assert_eq!(informer.lister().len(), 25);
    assert_eq!(lean_decodes(&informer), 0, "synced without a decode");

    churn_pods(&client, 5, 150, 15).await;
    let truth = server_pods(&client).await;
    eventually("the lazy lister follows the server", || {
        lazy_cache_pods(&informer) == truth
    })
    .await;
    eventually("the lazy handler follows the server", || {
        log.state() == truth
    })
    .await;
    eventually("the key sink had every key", || {
        *keys.lock().unwrap()
            == log
                .lines()
                .iter()
                .map(|l| l.split(' ').nth(1).unwrap().to_string())
                .collect()
    })
    .await;
    assert!(
        log.lines().len() > 100,
        "the churn was seen: {}",
        log.lines().len()
    );
    assert!(log.anomalies().is_empty(), "{:?}", log.anomalies());
    assert_eq!(
        log.decoded(),
        0,
        "no object reached the lazy handler decoded"
    );
    assert_eq!(
        *apps.lock().unwrap(),
        BTreeSet::from(["a/web".to_string(), "b/db".to_string(), "b/web".to_string()]),
        "the mapper read the labels"
    );
    assert_eq!(
        lean_decodes(&informer),
        0,
        "followed the churn without a decode"
    );

    // Every lazy read: the server's objects, by value (the stored JSON decoded here, by the
    // test, outside the informer's counters), and no decode.
    let lazy = informer.lister().lazy();
    let api: Api<Pod> = Api::all(client.clone());
    let server = api.list(&ListParams::default()).await.expect("list").items;
    for s in &server {
        let (ns, name) = (s.namespace().unwrap_or_default(), s.name_any());
        let got = lazy.get(&ns, &name).expect("cached");
        assert_eq!(
            got.resource_version(),
            s.metadata.resource_version.as_deref()
        );
        assert_eq!(got.uid(), s.metadata.uid.as_deref());
        assert_eq!(got.labels().to_map(), s.labels().clone());
        let json = got.to_json().expect("stored JSON");
        let from_cache: Pod = serde_json::from_slice(&json).expect("a pod");
        assert_eq!(
            &from_cache, s,
            "{ns}/{name}: the stored object is the server's"
        );
        assert!(!got.is_decoded());
    }
    assert_eq!(lazy.list().len(), server.len());
    let in_ns = |ns: &str| {
        server
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(ns))
            .count()
    };
    for ns in ["a", "b"] {
        let by_ns = lazy.by_index(NAMESPACE_INDEX, ns).expect("index");
        assert_eq!(by_ns.len(), in_ns(ns), "namespace index of {ns}");
        assert!(by_ns.iter().all(|p| p.namespace() == Some(ns)));
        assert_eq!(lazy.namespaced(ns).list().len(), in_ns(ns));
    }
    let dbs = lazy.list_selected(&label_selector("app", "db"));
    let mut db_names: Vec<&str> = dbs.iter().filter_map(|p| p.name()).collect();
    db_names.sort();
    assert_eq!(db_names, ["db-0", "db-1", "db-2", "db-3"]);
    assert_eq!(
        lazy.namespaced("a")
            .list_selected(&label_selector("app", "db"))
            .len(),
        0
    );
    assert_eq!(
        lazy.namespaced("b")
            .list_selected(&label_selector("app", "web"))
            .len(),
        in_ns("b") - 4
    );
    let stats = informer.lean_stats().expect("lean");
    assert_eq!(
        (
            stats.decodes,
            stats.hits,
            stats.decode_failures,
            stats.encode_failures
        ),
        (0, 0, 0, 0),
        "lazy reads never decode: {stats:?}"
    );
    assert_eq!(stats.objects as usize, server.len());

    // One typed point read decodes one object (the counter works).
    let s = &server[0];
    let typed = informer
        .lister()
        .get(&s.namespace().unwrap_or_default(), &s.name_any())
        .expect("typed read");
    assert_eq!(&*typed, s);
    assert_eq!(lean_decodes(&informer), 1, "one typed read, one decode");
    informer.shutdown().await;
}

/// Three typed handlers on one lean informer (hot cache off, so nothing is found decoded
/// already): each event's objects are decoded once between them, not once per handler. The
/// decodes are at most the objects one handler was handed (one per Add and Delete, two per
/// Update), and at least one per Add and Update (each new version is decoded once); every
/// Update's old object is the version the handler saw before.
#[actix::test]
async fn i7_typed_handlers_decode_each_event_once_between_them() {
    const HANDLERS: usize = 3;
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 12).await;
    create_pods(&client, "b", 4).await;
    let informer = SharedIndexInformer::<Pod>::with_config(
        client.clone(),
        None,
        fast_config().cache(CacheMode::Lean(LeanConfig::default().hot_objects(0))),
    );
    let views: Vec<OldNewView> = (0..HANDLERS).map(|_| OldNewView::default()).collect();
    for (i, view) in views.iter().enumerate() {
        let v = view.clone();
        informer
            .add_event_handler_with(
                handler_fn(move |n: &Notification<Pod>| v.apply(n)),
                unbounded(&format!("typed-{i}")),
            )
            .await
            .expect("handler");
    }
    start_synced(&informer).await;
    churn_pods(&client, 7, 100, 12).await;
    let truth = server_pods(&client).await;
    for v in &views {
        eventually("every handler follows the server", || v.rvs() == truth).await;
    }
    let objects = *views[0].objects.lock().unwrap();
    let updates = *views[0].updates.lock().unwrap();
    for v in &views {
        assert_eq!(
            *v.objects.lock().unwrap(),
            objects,
            "every handler saw the same"
        );
        assert!(
            v.anomalies.lock().unwrap().is_empty(),
            "{:?}",
            v.anomalies.lock().unwrap()
        );
    }
    assert!(updates > 40, "the churn was seen: {updates} updates");
    let adds = *views[0].adds.lock().unwrap();
    let decodes = lean_decodes(&informer);
    assert!(
        decodes <= objects,
        "each object decoded at most once between {HANDLERS} handlers: {decodes} decodes for {objects} objects handed over"
    );
    assert!(
        decodes < HANDLERS as u64 * objects,
        "{decodes} decodes, {HANDLERS} handlers, {objects} objects"
    );
    assert!(
        decodes >= adds + updates,
        "every new version was decoded: {decodes} decodes, {adds} adds, {updates} updates"
    );
    let stats = informer.lean_stats().expect("lean");
    assert_eq!(stats.hits, 0, "no hot cache: {stats:?}");
    assert_eq!(stats.decode_failures + stats.encode_failures, 0);
    informer.shutdown().await;
}

/// A gate a handler waits at until the test opens it.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    fn wait(&self) {
        let (open, cv) = &*self.0;
        let mut o = open.lock().unwrap();
        while !*o {
            o = cv.wait(o).unwrap();
        }
    }

    fn open(&self) {
        let (open, cv) = &*self.0;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }
}

/// I7, the shared-decode window: a typed handler held back while the other follows the churn
/// buffers the events' objects, but only the last `shared_decodes` of them stay decoded (the
/// rest are released back to their bytes: its backlog holds bytes, not decoded pods). Once it
/// runs again it decodes what it reads for itself and ends with the server's objects, every
/// `Update`'s old object the one it was given last.
#[actix::test]
async fn i7_a_handler_far_behind_holds_bytes_and_decodes_for_itself() {
    const WINDOW: usize = 4;
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 12).await;
    let informer = SharedIndexInformer::<Pod>::with_config(
        client.clone(),
        None,
        fast_config().cache(CacheMode::Lean(
            LeanConfig::default().hot_objects(0).shared_decodes(WINDOW),
        )),
    );
    let (fast, slow) = (OldNewView::default(), OldNewView::default());
    let v = fast.clone();
    informer
        .add_event_handler_with(
            handler_fn(move |n: &Notification<Pod>| v.apply(n)),
            unbounded("fast"),
        )
        .await
        .expect("handler");
    let (v, gate) = (slow.clone(), Gate::default());
    let g = gate.clone();
    informer
        .add_event_handler_with(
            handler_fn(move |n: &Notification<Pod>| {
                if !matches!(
                    n,
                    Notification::Add {
                        is_in_initial_list: true,
                        ..
                    }
                ) {
                    g.wait();
                }
                v.apply(n)
            }),
            unbounded("slow"),
        )
        .await
        .expect("handler");
    start_synced(&informer).await;
    churn_pods(&client, 11, 100, 12).await;
    let truth = server_pods(&client).await;
    eventually("the fast handler follows the server", || {
        fast.rvs() == truth
    })
    .await;
    let held = informer.lean_stats().expect("lean");
    let handed = *fast.objects.lock().unwrap() - 12;
    // Every object the fast handler decoded after the slow one stopped is still held by the
    // slow one's backlog; all but the window's last ones (and the one the slow handler holds)
    // went back to bytes.
    assert!(
        held.released + WINDOW as u64 + 2 >= handed,
        "{handed} objects handed over since the slow handler stopped, {} released: {held:?}",
        held.released
    );
    gate.open();
    eventually("the slow handler follows the server", || {
        slow.rvs() == truth
    })
    .await;
    assert!(
        slow.anomalies.lock().unwrap().is_empty(),
        "{:?}",
        slow.anomalies.lock().unwrap()
    );
    assert_eq!(*slow.objects.lock().unwrap(), *fast.objects.lock().unwrap());
    let after = informer.lean_stats().expect("lean");
    assert!(
        after.redecodes > 0 && after.redecodes <= after.released,
        "the slow handler decoded what was released: {after:?}"
    );
    assert_eq!(after.decode_failures + after.encode_failures, 0);
    informer.shutdown().await;
}

/// `strip_managed_fields(true)`: objects written with server-side apply carry `managedFields`
/// on the server; the lean cache (listed and watched objects alike) holds them without, and
/// everything else is the server's object.
#[actix::test]
async fn i7_strip_managed_fields_removes_them_and_nothing_else() {
    let sim = sim().await;
    let client = sim.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), "a");
    let apply = |name: &str, v: &str| {
        let mut p = pod("a", name);
        p.metadata.annotations = Some(BTreeMap::from([("v".to_string(), v.to_string())]));
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": p.metadata,
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        })
    };
    let ssa = PatchParams::apply("lean-test").force();
    for i in 0..3 {
        let name = format!("listed-{i}");
        api.patch(&name, &ssa, &Patch::Apply(apply(&name, "1")))
            .await
            .expect("apply");
    }
    let informer = SharedIndexInformer::<Pod>::with_config(
        client.clone(),
        None,
        fast_config().cache(CacheMode::Lean(
            LeanConfig::default().strip_managed_fields(true),
        )),
    );
    start_synced(&informer).await;
    watching(&sim).await;
    for i in 0..3 {
        let name = format!("watched-{i}");
        api.patch(&name, &ssa, &Patch::Apply(apply(&name, "1")))
            .await
            .expect("apply");
    }
    // An update through apply: a MODIFIED event with managedFields.
    api.patch("listed-0", &ssa, &Patch::Apply(apply("listed-0", "2")))
        .await
        .expect("apply");
    let truth = server_pods(&client).await;
    eventually("the cache follows the server", || {
        lazy_cache_pods(&informer) == truth
    })
    .await;
    let server = api.list(&ListParams::default()).await.expect("list").items;
    assert_eq!(server.len(), 6);
    for mut s in server {
        let name = s.name_any();
        assert!(
            s.metadata
                .managed_fields
                .as_ref()
                .is_some_and(|m| !m.is_empty()),
            "{name}: the server keeps managedFields"
        );
        let lazy = informer.lister().lazy().get("a", &name).expect("cached");
        let json = String::from_utf8(lazy.to_json().expect("json")).expect("utf-8");
        assert!(
            !json.contains("managedFields"),
            "{name}: stored without: {json}"
        );
        let got = informer.lister().get("a", &name).expect("cached");
        assert_eq!(got.metadata.managed_fields, None, "{name}");
        s.metadata.managed_fields = None;
        assert_eq!(
            *got, s,
            "{name}: everything but managedFields is the server's"
        );
    }
    let stats = informer.lean_stats().expect("lean");
    assert_eq!(
        stats.decode_failures + stats.encode_failures,
        0,
        "{stats:?}"
    );
    informer.shutdown().await;
}

/// A user's actor receiving `Notify<LazyObject<Pod>>`.
struct Recorder {
    log: LazyLog,
    keys_match: Arc<Mutex<bool>>,
}

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl Handler<Notify<LazyObject<Pod>>> for Recorder {
    type Result = ();

    fn handle(&mut self, msg: Notify<LazyObject<Pod>>, _: &mut Context<Self>) {
        if msg.event.object().key().ok().as_ref() != Some(&msg.key) {
            *self.keys_match.lock().unwrap() = false;
        }
        self.log.apply(&msg.event);
    }
}

/// `add_lazy_recipient`: a user's actor gets every change as `Notify<LazyObject<Pod>>`, in the
/// order a lazy handler of the same informer gets them (the processor's order: per key, each
/// Update's old object is the previous version), with the right keys, and without decoding.
#[actix::test]
async fn i7_lazy_recipient_gets_every_notification_in_order() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 10).await;
    let informer = SharedIndexInformer::<Pod>::with_config(
        client.clone(),
        None,
        fast_config().cache(CacheMode::lean()),
    );
    let actor_log = LazyLog::default();
    let keys_match = Arc::new(Mutex::new(true));
    let (al, km) = (actor_log.clone(), Arc::clone(&keys_match));
    let actor = Recorder::create(move |_| Recorder {
        log: al,
        keys_match: km,
    });
    let registration = informer
        .add_lazy_recipient(actor.recipient(), unbounded("actor"))
        .await
        .expect("recipient");
    let handler_log = LazyLog::default();
    let hl = handler_log.clone();
    informer
        .add_lazy_event_handler(
            handler_fn(move |n: &Notification<LazyObject<Pod>>| hl.apply(n)),
            unbounded("lazy"),
        )
        .await
        .expect("handler");
    start_synced(&informer).await;
    churn_pods(&client, 3, 80, 10).await;
    let truth = server_pods(&client).await;
    eventually("the actor follows the server", || {
        actor_log.state() == truth
    })
    .await;
    eventually("the handler follows the server", || {
        handler_log.state() == truth
    })
    .await;
    let lines = actor_log.lines();
    assert!(lines.len() > 60, "the churn was seen: {}", lines.len());
    assert_eq!(
        lines,
        handler_log.lines(),
        "the same notifications in the same order"
    );
    assert!(
        actor_log.anomalies().is_empty(),
        "{:?}",
        actor_log.anomalies()
    );
    assert!(
        *keys_match.lock().unwrap(),
        "Notify::key is the object's key"
    );
    assert!(registration.has_synced());
    eventually("every notification counted as delivered", || {
        registration.stats().delivered() == lines.len() as u64
    })
    .await;
    assert_eq!(lean_decodes(&informer), 0, "lazy consumers never decode");
    informer.shutdown().await;
}
