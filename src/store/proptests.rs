//! Property tests of the store against a model (a `BTreeMap` of key → object): random
//! sequences of add/update/delete/replace/add_indexers (alone or inside batches); after every
//! step the indices must equal a recomputation from scratch and every read must agree with the
//! model (I2–I6). The same sequences run against lean stores (I7), with hot caches from none to
//! a few objects, written through the typed API or as the pipeline writes them (objects encoded
//! from their JSON, stored as lazy objects): a lean store must answer every read as the typed
//! one does, with equal objects, its lazy reads must agree without decoding anything, and a
//! snapshot pinned before a write must still read the old contents.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use k8s_openapi::api::core::v1::Pod;
use kube_core::{Expression, Selector};
use proptest::prelude::*;

use super::tests::{label_index, pod};
use super::*;
use crate::key::default_key_func;

const NAMESPACES: [&str; 3] = ["a", "b", ""];
const INDEX_NAMES: [&str; 4] = [NAMESPACE_INDEX, "app", "tier", "users"];
const USERS: [&str; 4] = ["ernie", "bert", "elmo", "oscar"];

#[derive(Debug, Clone)]
struct Spec {
    ns: usize,
    /// None: an object without a name (the key function rejects it).
    name: Option<usize>,
    app: Option<usize>,
    tier: Option<usize>,
    /// May repeat values: index functions may return duplicates.
    users: Vec<usize>,
}

impl Spec {
    fn build(&self) -> Arc<Pod> {
        let mut labels = Vec::new();
        let app = self.app.map(|a| format!("app{a}"));
        let tier = self.tier.map(|t| format!("tier{t}"));
        if let Some(app) = &app {
            labels.push(("app", app.as_str()));
        }
        if let Some(tier) = &tier {
            labels.push(("tier", tier.as_str()));
        }
        let name = self.name.map(|n| format!("p{n}")).unwrap_or_default();
        let mut p = pod(NAMESPACES[self.ns], &name, &labels);
        if self.name.is_none() {
            p.metadata.name = None;
        }
        if !self.users.is_empty() {
            let users: Vec<&str> = self.users.iter().map(|u| USERS[*u]).collect();
            p.metadata.annotations = Some([("users".to_string(), users.join(","))].into());
        }
        Arc::new(p)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(Spec),
    Update(Spec),
    Delete(Spec),
    DeleteKey(usize, usize),
    Replace(Vec<Spec>),
    AddIndexer(usize),
    Batch(Vec<Op>),
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0..NAMESPACES.len(),
        prop::option::weighted(0.95, 0..6usize),
        prop::option::of(0..3usize),
        prop::option::of(0..2usize),
        prop::collection::vec(0..USERS.len(), 0..4),
    )
        .prop_map(|(ns, name, app, tier, users)| Spec {
            ns,
            name,
            app,
            tier,
            users,
        })
}

fn single_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => spec().prop_map(Op::Add),
        4 => spec().prop_map(Op::Update),
        2 => spec().prop_map(Op::Delete),
        1 => (0..NAMESPACES.len(), 0..6usize).prop_map(|(n, p)| Op::DeleteKey(n, p)),
        1 => prop::collection::vec(spec(), 0..10).prop_map(Op::Replace),
        1 => (0..INDEX_NAMES.len()).prop_map(Op::AddIndexer),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => single_op(),
        1 => prop::collection::vec(single_op(), 0..8).prop_map(Op::Batch),
    ]
}

fn index_func_named(name: &str) -> IndexFunc<Pod> {
    match name {
        NAMESPACE_INDEX => namespace_index_func(),
        "app" => label_index("app"),
        // A metadata index function: lean stores compute it without decoding.
        "tier" => meta_index_func(|p: &LazyObject<Pod>| {
            p.labels()
                .get("tier")
                .map(String::from)
                .into_iter()
                .collect()
        }),
        _ => index_func(|p: &Pod| {
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("users"))
                .map(|u| u.split(',').map(str::to_string).collect())
                .unwrap_or_default()
        }),
    }
}

fn key_of(ns: usize, name: usize) -> String {
    ObjectKey::new(Some(NAMESPACES[ns]), &format!("p{name}")).to_string()
}

#[derive(Clone)]
struct Model {
    objects: BTreeMap<String, Arc<Pod>>,
    indices: BTreeSet<&'static str>,
    /// Lean stores hand out equal objects, typed stores the very same ones.
    lean: bool,
}

impl Model {
    fn same(&self, a: &Option<Arc<Pod>>, b: &Option<Arc<Pod>>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) if self.lean => a == b,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

/// How the store under test keeps objects.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Typed,
    /// Lean with a hot cache of `hot` objects; `raw`: adds and updates are written as the
    /// informer writes them (the object's JSON encoded, stored as a lazy object).
    Lean {
        hot: usize,
        raw: bool,
    },
}

fn store_in(mode: Mode, indexers: Indexers<Pod>) -> Store<Pod> {
    match mode {
        Mode::Typed => Store::new(default_key_func(), indexers),
        Mode::Lean { hot, .. } => {
            let config = LeanConfig::default().hot_objects(hot);
            Store::lean(default_key_func(), indexers, config)
        }
    }
}

fn mode() -> impl Strategy<Value = Mode> {
    (prop::sample::select(vec![0usize, 1, 20, 64]), any::<bool>())
        .prop_map(|(hot, raw)| Mode::Lean { hot, raw })
}

/// The lazy object the informer's pipeline would store for `obj`: its JSON, encoded by the
/// store's lean state (metadata parsed, compressed), never the typed object.
fn raw_object(store: &Store<Pod>, obj: &Pod) -> LazyObject<Pod> {
    let state = Arc::clone(store.lean_state().expect("a lean store"));
    let json = serde_json::to_vec(obj).expect("serialises");
    let raw = state.encode(&json).expect("encodes");
    LazyObject::from_raw(Arc::new(raw), state)
}

/// A lean store written through `Batch::put_object` with raw objects, as the Indexer does.
struct RawWriter<'a>(&'a mut Store<Pod>);

impl RawWriter<'_> {
    fn put(&mut self, obj: Arc<Pod>) -> Result<Option<Arc<Pod>>, StoreError> {
        let key = default_key_func::<Pod>()(&obj)?;
        let lazy = raw_object(self.0, &obj);
        let old = self.0.batch().put_object(key, &lazy)?;
        Ok(old.map(|o| o.object().expect("old decodes")))
    }
}

impl Writer for RawWriter<'_> {
    fn add(&mut self, obj: Arc<Pod>) -> Result<Option<Arc<Pod>>, StoreError> {
        self.put(obj)
    }
    fn update(&mut self, obj: Arc<Pod>) -> Result<Option<Arc<Pod>>, StoreError> {
        self.put(obj)
    }
    fn delete(&mut self, obj: &Pod) -> Result<Option<Arc<Pod>>, StoreError> {
        self.0.delete(obj)
    }
    fn delete_key(&mut self, key: &str) -> Option<Arc<Pod>> {
        self.0.delete_key(key)
    }
    fn replace(&mut self, objs: Vec<Arc<Pod>>) -> Result<ReplaceReport, StoreError> {
        self.0.replace(objs)
    }
}

/// The writes available both on `Store` and on `Batch`.
trait Writer {
    fn add(&mut self, obj: Arc<Pod>) -> Result<Option<Arc<Pod>>, StoreError>;
    fn update(&mut self, obj: Arc<Pod>) -> Result<Option<Arc<Pod>>, StoreError>;
    fn delete(&mut self, obj: &Pod) -> Result<Option<Arc<Pod>>, StoreError>;
    fn delete_key(&mut self, key: &str) -> Option<Arc<Pod>>;
    fn replace(&mut self, objs: Vec<Arc<Pod>>) -> Result<ReplaceReport, StoreError>;
}

macro_rules! impl_writer {
    ($t:ty) => {
        impl Writer for $t {
            fn add(&mut self, obj: Arc<Pod>) -> Result<Option<Arc<Pod>>, StoreError> {
                <$t>::add(self, obj)
            }
            fn update(&mut self, obj: Arc<Pod>) -> Result<Option<Arc<Pod>>, StoreError> {
                <$t>::update(self, obj)
            }
            fn delete(&mut self, obj: &Pod) -> Result<Option<Arc<Pod>>, StoreError> {
                <$t>::delete(self, obj)
            }
            fn delete_key(&mut self, key: &str) -> Option<Arc<Pod>> {
                <$t>::delete_key(self, key)
            }
            fn replace(&mut self, objs: Vec<Arc<Pod>>) -> Result<ReplaceReport, StoreError> {
                <$t>::replace(self, objs)
            }
        }
    };
}
impl_writer!(Store<Pod>);
impl_writer!(Batch<'_, Pod>);

/// Applies one write to `w` and to the model, checking the write's own result.
fn apply(w: &mut impl Writer, model: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    match op {
        Op::Add(spec) | Op::Update(spec) => {
            let obj = spec.build();
            let got = if matches!(op, Op::Add(_)) {
                w.add(Arc::clone(&obj))
            } else {
                w.update(Arc::clone(&obj))
            };
            match spec.name {
                Some(n) => {
                    let prev = model.objects.insert(key_of(spec.ns, n), obj);
                    prop_assert!(model.same(&got.unwrap(), &prev));
                }
                None => prop_assert!(matches!(got, Err(StoreError::Key(_)))),
            }
        }
        Op::Delete(spec) => {
            let got = w.delete(&spec.build());
            match spec.name {
                Some(n) => {
                    let prev = model.objects.remove(&key_of(spec.ns, n));
                    prop_assert!(model.same(&got.unwrap(), &prev));
                }
                None => prop_assert!(matches!(got, Err(StoreError::Key(_)))),
            }
        }
        Op::DeleteKey(ns, n) => {
            let key = key_of(*ns, *n);
            let prev = model.objects.remove(&key);
            let got = w.delete_key(&key);
            prop_assert!(model.same(&got, &prev));
        }
        Op::Replace(specs) => {
            let objs: Vec<Arc<Pod>> = specs.iter().map(Spec::build).collect();
            model.objects.clear();
            let mut skipped = Vec::new();
            for (i, (spec, obj)) in specs.iter().zip(&objs).enumerate() {
                match spec.name {
                    Some(n) => {
                        model.objects.insert(key_of(spec.ns, n), Arc::clone(obj));
                    }
                    None => skipped.push(i),
                }
            }
            let report = w.replace(objs).unwrap();
            prop_assert_eq!(report.stored, model.objects.len());
            let got: Vec<usize> = report.skipped.iter().map(|s| s.position).collect();
            prop_assert_eq!(got, skipped);
        }
        Op::AddIndexer(_) | Op::Batch(_) => unreachable!("handled by the caller"),
    }
    Ok(())
}

fn sorted_strings<I: IntoIterator<Item = S>, S: ToString>(it: I) -> Vec<String> {
    let mut v: Vec<String> = it.into_iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// Every read of `snap` agrees with the model; every index equals a recomputation.
fn check(snap: &Snapshot<Pod>, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(snap.len(), model.objects.len());
    prop_assert_eq!(
        sorted_strings(snap.list_keys()),
        sorted_strings(model.objects.keys())
    );
    let listed = snap.list();
    prop_assert_eq!(listed.len(), model.objects.len());
    for o in listed {
        let key = ObjectKey::new(
            o.metadata.namespace.as_deref(),
            o.metadata.name.as_deref().unwrap_or(""),
        );
        prop_assert!(model.same(&Some(o), &model.objects.get(key.as_str()).cloned()));
    }
    for (key, obj) in &model.objects {
        prop_assert!(model.same(&snap.get_by_key(key), &Some(Arc::clone(obj))));
        let key = ObjectKey::parse(key).unwrap();
        let (ns, name) = key.split();
        prop_assert!(model.same(&snap.get(ns.unwrap_or(""), name), &Some(Arc::clone(obj))));
    }
    prop_assert_eq!(snap.index_names(), sorted_strings(model.indices.iter()));
    for name in INDEX_NAMES {
        if !model.indices.contains(name) {
            prop_assert_eq!(
                snap.index_keys(name, "x"),
                Err(StoreError::UnknownIndex(name.to_string()))
            );
            prop_assert!(snap.list_index_func_values(name).is_empty());
            continue;
        }
        // Recompute the index from scratch.
        let func = index_func_named(name);
        let mut expected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (key, obj) in &model.objects {
            for value in func.values_of(obj) {
                expected.entry(value).or_default().insert(key.clone());
            }
        }
        // Exactly these values: no stale value, no empty set left behind.
        prop_assert_eq!(
            sorted_strings(snap.list_index_func_values(name)),
            sorted_strings(expected.keys())
        );
        for (value, keys) in &expected {
            let got = snap.index_keys(name, value).unwrap();
            prop_assert_eq!(got.len(), keys.len(), "no duplicate keys");
            prop_assert_eq!(sorted_strings(got), sorted_strings(keys));
            let objs = snap.by_index(name, value).unwrap();
            prop_assert_eq!(objs.len(), keys.len());
            for o in objs {
                let key = ObjectKey::new(
                    o.metadata.namespace.as_deref(),
                    o.metadata.name.as_deref().unwrap_or(""),
                );
                prop_assert!(model.same(&Some(o), &model.objects.get(key.as_str()).cloned()));
            }
        }
        // Index(obj): union over the probe's values.
        for obj in model.objects.values() {
            let mut want = BTreeSet::new();
            for value in func.values_of(obj) {
                want.extend(expected.get(&value).into_iter().flatten().cloned());
            }
            let got = snap.index(name, obj).unwrap();
            prop_assert_eq!(got.len(), want.len());
        }
    }
    // Namespaced listers and selectors agree with filtering the model.
    for ns in ["a", "b"] {
        let want = model
            .objects
            .values()
            .filter(|o| o.metadata.namespace.as_deref() == Some(ns))
            .count();
        prop_assert_eq!(snap.namespaced(ns).list().len(), want);
    }
    let app0: Selector = Expression::Equal("app".into(), "app0".into()).into();
    let want = model
        .objects
        .values()
        .filter(|o| {
            o.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .is_some_and(|v| v == "app0")
        })
        .count();
    prop_assert_eq!(snap.list_selected(&app0).len(), want);
    check_lazy(snap, model)
}

/// The lazy view of `snap` agrees with the model (names, namespaces, labels, versions) and,
/// in a lean store, decodes nothing.
fn check_lazy(snap: &Snapshot<Pod>, model: &Model) -> Result<(), TestCaseError> {
    let lazy = snap.lazy();
    prop_assert_eq!(lazy.len(), model.objects.len());
    for (key, obj) in &model.objects {
        let got = lazy.get_by_key(key);
        prop_assert!(got.is_some(), "{}", key);
        let got = got.unwrap();
        prop_assert_eq!(got.name(), obj.metadata.name.as_deref());
        prop_assert_eq!(
            got.namespace(),
            obj.metadata.namespace.as_deref().filter(|n| !n.is_empty())
        );
        prop_assert_eq!(
            got.resource_version(),
            obj.metadata.resource_version.as_deref()
        );
        prop_assert_eq!(
            got.labels().to_map(),
            obj.metadata.labels.clone().unwrap_or_default()
        );
        prop_assert_eq!(got.key().ok().map(|k| k.to_string()), Some(key.clone()));
    }
    let app0: Selector = Expression::Equal("app".into(), "app0".into()).into();
    prop_assert_eq!(
        lazy.list_selected(&app0).len(),
        snap.list_selected(&app0).len()
    );
    for ns in ["a", "b"] {
        prop_assert_eq!(
            lazy.namespaced(ns).list().len(),
            snap.namespaced(ns).list().len()
        );
    }
    if model.lean {
        // The selector and namespace lists above that were typed did decode; measure only the
        // lazy reads: run them again and compare.
        let before = snap.lazy_decodes();
        let _ = lazy.list();
        let _ = lazy.list_selected(&app0);
        let _ = lazy.namespaced("a").list();
        for name in snap.index_names() {
            for v in snap.list_index_func_values(&name) {
                let _ = lazy.by_index(&name, &v);
            }
        }
        prop_assert_eq!(snap.lazy_decodes(), before, "lazy reads never decode");
    }
    Ok(())
}

impl Snapshot<Pod> {
    /// Decodes so far (0 for a typed store).
    fn lazy_decodes(&self) -> u64 {
        self.lean_stats().map_or(0, |s| s.decodes)
    }
}

fn run(mode: Mode, initial: Vec<usize>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut model = Model {
        objects: BTreeMap::new(),
        indices: initial.iter().map(|i| INDEX_NAMES[*i]).collect(),
        lean: matches!(mode, Mode::Lean { .. }),
    };
    let indexers: Indexers<Pod> = model
        .indices
        .iter()
        .map(|n| (n.to_string(), index_func_named(n)))
        .collect();
    let mut store = store_in(mode, indexers);
    let lister = store.lister();
    for op in &ops {
        // A version pinned before the op, with what it held.
        let (pinned, pinned_model) = (lister.snapshot(), model.clone());
        match op {
            Op::AddIndexer(i) => {
                let name = INDEX_NAMES[*i];
                let got = store.add_indexers([(name.to_string(), index_func_named(name))].into());
                if model.indices.insert(name) {
                    prop_assert_eq!(got, Ok(()));
                } else {
                    prop_assert_eq!(got, Err(StoreError::IndexExists(name.to_string())));
                }
            }
            Op::Batch(ops) => {
                let before = lister.snapshot();
                let version = before.version();
                let mut batch = store.batch();
                for op in ops {
                    if matches!(op, Op::AddIndexer(_) | Op::Batch(_)) {
                        continue;
                    }
                    apply(&mut batch, &mut model, op)?;
                    // Readers see nothing of an uncommitted batch.
                    prop_assert_eq!(lister.version(), version);
                }
                batch.commit();
            }
            op => match mode {
                Mode::Lean { raw: true, .. } => apply(&mut RawWriter(&mut store), &mut model, op)?,
                _ => apply(&mut store, &mut model, op)?,
            },
        }
        check(&lister.snapshot(), &model)?;
        check(&store.snapshot(), &model)?;
        prop_assert_eq!(store.len(), model.objects.len());
        check(&pinned, &pinned_model)?;
        if model.lean {
            let stats = lister.lean_stats().unwrap();
            prop_assert_eq!(stats.decode_failures, 0);
            prop_assert_eq!(stats.encode_failures, 0);
            // Everything is stored lean.
            prop_assert_eq!(stats.objects, model.objects.len() as u64, "{:?}", mode);
        } else {
            prop_assert!(lister.lean_stats().is_none());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// I2–I6: random op sequences against the model, checked after every step.
    #[test]
    fn i2_i6_store_matches_model_after_every_op(
        initial in prop::collection::btree_set(0..INDEX_NAMES.len(), 0..=INDEX_NAMES.len()),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        run(Mode::Typed, initial.into_iter().collect(), ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// I7: a lean store answers every read like the model (so like a typed store), whatever
    /// the hot cache's size and whether objects arrive typed or as the server's bytes; its
    /// lazy reads never decode, and pinned snapshots keep their version.
    #[test]
    fn i7_lean_store_matches_model_after_every_op(
        mode in mode(),
        initial in prop::collection::btree_set(0..INDEX_NAMES.len(), 0..=INDEX_NAMES.len()),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        run(mode, initial.into_iter().collect(), ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// I4: indexers added at any point (including all at the end) index what is there.
    #[test]
    fn i4_add_indexers_late_equals_indexing_from_the_start(
        specs in prop::collection::vec(spec(), 0..30),
        late_mode in prop_oneof![Just(Mode::Typed), mode()],
    ) {
        let mut early = Store::new(
            default_key_func(),
            INDEX_NAMES.iter().map(|n| (n.to_string(), index_func_named(n))).collect(),
        );
        let mut late = store_in(late_mode, Indexers::new());
        for s in &specs {
            let obj = s.build();
            let _ = early.add(Arc::clone(&obj));
            let _ = late.add(obj);
        }
        late.add_indexers(INDEX_NAMES.iter().map(|n| (n.to_string(), index_func_named(n))).collect())
            .unwrap();
        let (e, l) = (early.snapshot(), late.snapshot());
        for name in INDEX_NAMES {
            let values = sorted_strings(e.list_index_func_values(name));
            prop_assert_eq!(&values, &sorted_strings(l.list_index_func_values(name)));
            for v in &values {
                prop_assert_eq!(
                    sorted_strings(e.index_keys(name, v).unwrap()),
                    sorted_strings(l.index_keys(name, v).unwrap())
                );
            }
        }
    }
}
