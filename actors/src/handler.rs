//! Ways to receive notifications (`docs/semantics.md` P*): a [`ResourceEventHandler`] (trait or
//! closures, run on the handler's own thread), a user's actor (a `Recipient` of
//! [`Notify`](crate::Notify)), or a key sink such as a workqueue ([`EnqueueKeys`]).
//!
//! Every handler kind exists over the typed object `K` and over [`LazyObject<K>`]: a lazy
//! handler gets the object with its metadata at hand and decodes it only if it calls
//! [`LazyObject::object`] (the lean cache mode, I7, then never decodes for it).

use std::sync::Arc;

use kinformer::{DeltaObject, ObjectKey, TraceId, lean::LazyObject, notification::Notification};

/// client-go's `ResourceEventHandler`: called in order, one notification at a time, on a thread
/// of its own (a slow or blocking handler holds up nobody else; see the overflow policies).
///
/// A panic in a method is caught: that notification is skipped, counted and logged, and the
/// handler keeps receiving (P7). A panic on an initial-list notification (`on_add` with
/// `is_in_initial_list`) means this registration's
/// [`has_synced`](crate::HandlerRegistration::has_synced) never becomes true (P5, as client-go
/// since kubernetes#129024): the handler missed part of the state it was meant to start from.
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer::DeltaObject;
/// use kinformer_actors::ResourceEventHandler;
///
/// struct Counter(usize);
/// impl ResourceEventHandler<Pod> for Counter {
///     fn on_add(&mut self, _pod: &Arc<Pod>, _initial: bool) { self.0 += 1; }
///     fn on_update(&mut self, _old: &Arc<Pod>, _new: &Arc<Pod>) {}
///     fn on_delete(&mut self, _pod: &DeltaObject<Pod>) { self.0 -= 1; }
/// }
/// ```
pub trait ResourceEventHandler<K>: Send + 'static {
    /// An object appeared; `is_in_initial_list` for the first list and a late handler's replay.
    fn on_add(&mut self, obj: &Arc<K>, is_in_initial_list: bool);
    /// An object changed, or was re-delivered by a resync (then `old` and `new` are the same).
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>);
    /// An object was deleted; a `DeletedFinalStateUnknown` tombstone if only a relist saw it.
    fn on_delete(&mut self, obj: &DeltaObject<K>);
}

/// Dispatches a notification to the matching method.
pub(crate) fn dispatch<K: 'static>(h: &mut dyn ResourceEventHandler<K>, n: &Notification<K>) {
    match n {
        Notification::Add {
            obj,
            is_in_initial_list,
        } => h.on_add(obj, *is_in_initial_list),
        Notification::Update { old, new } => h.on_update(old, new),
        Notification::Delete { obj } => h.on_delete(obj),
    }
}

/// A handler from one closure over the whole [`Notification`].
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer::notification::Notification;
/// use kinformer_actors::handler_fn;
/// let h = handler_fn(|n: &Notification<Pod>| println!("{n:?}"));
/// # let _ = h;
/// ```
pub fn handler_fn<K, F>(f: F) -> FnHandler<F>
where
    F: FnMut(&Notification<K>) + Send + 'static,
{
    FnHandler(f)
}

/// See [`handler_fn`].
pub struct FnHandler<F>(F);

impl<K, F> ResourceEventHandler<K> for FnHandler<F>
where
    F: FnMut(&Notification<K>) + Send + 'static,
    K: 'static,
{
    fn on_add(&mut self, obj: &Arc<K>, is_in_initial_list: bool) {
        (self.0)(&Notification::Add {
            obj: Arc::clone(obj),
            is_in_initial_list,
        })
    }
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        (self.0)(&Notification::Update {
            old: Arc::clone(old),
            new: Arc::clone(new),
        })
    }
    fn on_delete(&mut self, obj: &DeltaObject<K>) {
        (self.0)(&Notification::Delete { obj: obj.clone() })
    }
}

type AddFn<K> = Box<dyn FnMut(&Arc<K>, bool) + Send>;
type UpdateFn<K> = Box<dyn FnMut(&Arc<K>, &Arc<K>) + Send>;
type DeleteFn<K> = Box<dyn FnMut(&DeltaObject<K>) + Send>;

/// client-go's `ResourceEventHandlerFuncs`: any subset of three closures.
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer_actors::ResourceEventHandlerFuncs;
/// let h = ResourceEventHandlerFuncs::<Pod>::new()
///     .on_add(|pod, _initial| println!("added {:?}", pod.metadata.name))
///     .on_delete(|obj| println!("deleted {:?}", obj.object().metadata.name));
/// # let _ = h;
/// ```
pub struct ResourceEventHandlerFuncs<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for ResourceEventHandlerFuncs<K> {
    fn default() -> Self {
        ResourceEventHandlerFuncs {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> ResourceEventHandlerFuncs<K> {
    /// No closures yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the add closure.
    pub fn on_add(mut self, f: impl FnMut(&Arc<K>, bool) + Send + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }
    /// Sets the update closure.
    pub fn on_update(mut self, f: impl FnMut(&Arc<K>, &Arc<K>) + Send + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }
    /// Sets the delete closure.
    pub fn on_delete(mut self, f: impl FnMut(&DeltaObject<K>) + Send + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: 'static> ResourceEventHandler<K> for ResourceEventHandlerFuncs<K> {
    fn on_add(&mut self, obj: &Arc<K>, is_in_initial_list: bool) {
        if let Some(f) = &mut self.add {
            f(obj, is_in_initial_list)
        }
    }
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &mut self.update {
            f(old, new)
        }
    }
    fn on_delete(&mut self, obj: &DeltaObject<K>) {
        if let Some(f) = &mut self.delete {
            f(obj)
        }
    }
}

/// A non-blocking sink of object keys, e.g. a workqueue: the handler behind
/// [`SharedIndexInformer::add_key_sink`](crate::SharedIndexInformer::add_key_sink) calls it for
/// every notification. It runs inline on the listener (no thread), so it must not block.
pub trait EnqueueKeys: Send + Sync + 'static {
    /// Queues `key` for processing.
    fn enqueue(&self, key: ObjectKey);

    /// Queues `key` for the notification traced as `trace` (T5): a sink that keeps trace ids
    /// (a named [`AsyncWorkQueue`](crate::workqueue::AsyncWorkQueue)) hands them to the worker
    /// that takes the key. The key sink's handler calls this; by default it is
    /// [`enqueue`](Self::enqueue).
    fn enqueue_traced(&self, key: ObjectKey, trace: TraceId) {
        let _ = trace;
        self.enqueue(key)
    }
}

impl<F: Fn(ObjectKey) + Send + Sync + 'static> EnqueueKeys for F {
    fn enqueue(&self, key: ObjectKey) {
        self(key)
    }
}

/// Maps a notification to the keys to enqueue (e.g. a Pod event to its owner's key).
///
/// It is given the notification's [`LazyObject`]s: keys, labels and owner references are at
/// hand without decoding (`obj.owner_references()`, `obj.labels()`), so a key sink never
/// decodes in the lean cache mode (I7) unless its mapper calls `object()`.
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer_actors::{KeyMapper, ObjectKey};
///
/// // A Pod's event → its controller's key (e.g. the ReplicaSet), else the Pod's own.
/// let owner: KeyMapper<Pod> = Arc::new(|key, n| {
///     let pod = n.object();
///     match pod.controller_ref() {
///         Some(o) => vec![ObjectKey::new(pod.namespace(), o.name)],
///         None => vec![key.clone()],
///     }
/// });
/// # let _ = owner;
/// ```
pub type KeyMapper<K> =
    Arc<dyn Fn(&ObjectKey, &Notification<LazyObject<K>>) -> Vec<ObjectKey> + Send + Sync>;
