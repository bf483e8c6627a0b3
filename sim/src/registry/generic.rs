//! API semantics on top of the store: create/update/patch/delete with the rules kube-apiserver
//! applies (metadata ownership, generation, status subresource, finalizers, preconditions).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::apimachinery::errors::{ApiError, FieldError};
use crate::apimachinery::options::{DeleteOptions, PatchKind};
use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::sharding::{self, ShardSelector};
use crate::apimachinery::util::{new_uid, now_rfc3339, now_unix, random_suffix, string_list};
use crate::registry::decode::{self, FieldValidation, PatchedRepr};
use crate::registry::defaults;
use crate::registry::fieldmanager::{self, Request};
use crate::registry::strategy::{self, CreateStatus, DeletePlan};
use crate::registry::typed::Schema;
use crate::registry::validation;
use crate::storage::object::{Key, StoredObject, meta_mut, meta_str};
use crate::storage::store::{Outcome, Store, Write};

/// What the field manager records for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Manage<'a> {
    /// Nothing: a write of the test harness, which keeps the managed fields as they are.
    Keep,
    /// An `Update` by this manager (`managerOrUserAgent`).
    Update(&'a str),
    /// An apply, whose managed fields [`fieldmanager::apply`] already set.
    Applied,
}

/// The field manager's view of a write to `def` through `part`.
fn fm_request<'a>(def: &'a ResourceDef, part: Part, now: &'a str) -> Request<'a> {
    Request {
        schema: Schema {
            kind: &def.kind,
            builtin: def.builtin,
        },
        api_version: &def.api_version,
        has_status: def.status,
        subresource: match part {
            Part::Main => "",
            Part::Status => "status",
            Part::Scale => "scale",
        },
        now,
    }
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The object itself (status is ignored for kinds with a status subresource).
    Main,
    /// `/status`: only status changes.
    Status,
    /// `/scale`: only `spec.replicas` changes, through an autoscaling/v1 Scale.
    Scale,
}

fn kind_check(def: &ResourceDef, body: &mut Value) -> Result<(), ApiError> {
    let obj = body
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the body of the request must be a JSON object"))?;
    match obj.get("apiVersion") {
        None | Some(Value::Null) => {
            obj.insert("apiVersion".into(), json!(def.api_version));
        }
        Some(Value::String(v)) if *v == def.api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({})",
                v.as_str().unwrap_or("?"),
                def.api_version
            )));
        }
    }
    match obj.get("kind") {
        None | Some(Value::Null) => {
            obj.insert("kind".into(), json!(def.kind));
        }
        Some(Value::String(k)) if *k == def.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({}) does not match the expected kind ({})",
                k.as_str().unwrap_or("?"),
                def.kind
            )));
        }
    }
    match obj.get("metadata") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(ApiError::bad_request("metadata must be a JSON object")),
    }
}

fn check_namespace(def: &ResourceDef, ns: Option<&str>, body: &mut Value) -> Result<(), ApiError> {
    let meta = meta_mut(body)
        .ok_or_else(|| ApiError::bad_request("the body of the request must be a JSON object"))?;
    if def.namespaced {
        let ns = ns.unwrap_or("");
        match meta.get("namespace").and_then(Value::as_str) {
            Some(b) if !b.is_empty() && b != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                meta.insert("namespace".into(), json!(ns));
            }
        }
    } else {
        meta.remove("namespace");
    }
    Ok(())
}

/// Ensures namespace `ns` exists, creating it when `auto_create`.
/// The shard selector of a LIST, WATCH or DELETECOLLECTION, as `Store.ListPredicate` and
/// `Store.Watch` (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`) take
/// it: only under the `ShardedListAndWatch` gate (`gate`) and a non-empty parameter, parsed by
/// `sharding.Parse`; a bad one is `fmt.Errorf("invalid shard selector: %w")`, which the handler
/// answers as any error that is not a `Status` (500, no reason).
pub(crate) fn shard_selector(gate: bool, raw: &str) -> Result<Option<ShardSelector>, ApiError> {
    if !gate || raw.is_empty() {
        return Ok(None);
    }
    sharding::parse(raw)
        .map(Some)
        .map_err(|e| ApiError::not_a_status(format!("invalid shard selector: {e}")))
}

/// The `NamespaceLifecycle` admission plugin's refusal of a create in a terminating namespace
/// (`plugin/pkg/admission/namespace/lifecycle/admission.go` `Admit`): `admission.NewForbidden`
/// (`pods "x" is forbidden: ...`, the name as the request carries it) with the
/// `NamespaceTerminating` cause on `metadata.namespace`.
fn refuse_terminating(
    store: &Store,
    def: &ResourceDef,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    let Some(nsdef) = store.registry.namespaces().cloned() else {
        return Ok(());
    };
    match store.get(&nsdef, &(String::new(), ns.to_string())) {
        Some(n) if n.deleting => {
            let resource = if def.group.is_empty() {
                def.plural.clone()
            } else {
                format!("{}.{}", def.plural, def.group)
            };
            Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{resource} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated"
                ),
            )
            .with_details(json!({
                "name": name,
                "group": def.group,
                "kind": def.plural,
                "causes": [{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace",
                }],
            })))
        }
        _ => Ok(()),
    }
}

pub(crate) fn ensure_namespace(store: &Store, ns: &str, auto_create: bool) -> Result<(), ApiError> {
    let Some(nsdef) = store.registry.namespaces().cloned() else {
        return Ok(());
    };
    let key: Key = (String::new(), ns.to_string());
    if let Some(existing) = store.get(&nsdef, &key) {
        if existing.deleting {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            ));
        }
        return Ok(());
    }
    if !auto_create {
        return Err(ApiError::not_found("", "namespaces", ns));
    }
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    match create(store, &nsdef, None, body, false, false, None) {
        Ok(_) => Ok(()),
        Err(e) if e.reason == "AlreadyExists" => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates an object (POST to a collection); `manager` records the create in the managed
/// fields (`create.go` `CreateResource`: `FieldManager.UpdateNoErrors` from an empty object).
pub(crate) fn create(
    store: &Store,
    def: &ResourceDef,
    ns: Option<&str>,
    body: Value,
    dry_run: bool,
    auto_namespaces: bool,
    manager: Option<&str>,
) -> Result<Arc<StoredObject>, ApiError> {
    create_inner(
        store,
        def,
        ns,
        body,
        dry_run,
        auto_namespaces,
        false,
        manager,
    )
}

/// Creates an object keeping the status it carries (for seeding objects in any state, even
/// one kube-apiserver's validation would refuse: a test may need what only a buggy or older
/// server would have stored).
pub(crate) fn create_keep_status(
    store: &Store,
    def: &ResourceDef,
    ns: Option<&str>,
    body: Value,
    auto_namespaces: bool,
) -> Result<Arc<StoredObject>, ApiError> {
    create_inner(store, def, ns, body, false, auto_namespaces, true, None)
}

#[allow(clippy::too_many_arguments)]
fn create_inner(
    store: &Store,
    def: &ResourceDef,
    ns: Option<&str>,
    mut body: Value,
    dry_run: bool,
    auto_namespaces: bool,
    keep_status: bool,
    manager: Option<&str>,
) -> Result<Arc<StoredObject>, ApiError> {
    kind_check(def, &mut body)?;
    check_namespace(def, ns, &mut body)?;
    defaults::apply(def, &mut body);
    if def.namespaced {
        refuse_terminating(
            store,
            def,
            ns.unwrap_or(""),
            meta_str(&body, "name").unwrap_or(""),
        )?;
        ensure_namespace(store, ns.unwrap_or(""), auto_namespaces)?;
    }
    let now = now_rfc3339();
    let meta = meta_mut(&mut body)
        .ok_or_else(|| ApiError::bad_request("the body must be a JSON object"))?;
    let mut name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut generated = false;
    if name.is_empty() {
        let gen_name = meta
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !gen_name.is_empty() {
            // `rest.BeforeCreate`: the name is generated before the validation.
            name = format!("{gen_name}{}", random_suffix());
            meta.insert("name".into(), json!(name));
            generated = true;
        }
    }
    drop_empty_collections(meta);
    meta.insert("uid".into(), json!(new_uid()));
    meta.insert("creationTimestamp".into(), json!(now));
    for k in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "resourceVersion",
    ] {
        meta.remove(k);
    }
    if def.tracks_generation {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if let Some(obj) = body.as_object_mut() {
        match if keep_status {
            CreateStatus::Keep
        } else {
            strategy::create_status(def)
        } {
            CreateStatus::Keep => {}
            CreateStatus::Remove => {
                obj.remove("status");
            }
            CreateStatus::Reset(v) => {
                obj.insert("status".into(), v);
            }
        }
    }
    defaults::on_create(def, &mut body);
    if generated {
        // `rest.BeforeCreate` canonicalizes after generating the name: the namespace strategy's
        // `Canonicalize` (`pkg/registry/core/namespace/strategy.go`) sets the
        // `kubernetes.io/metadata.name` label that defaulting could not set without a name.
        defaults::apply(def, &mut body);
    }
    // `rest.BeforeCreate`: the strategy's `Validate` (not for harness seeding).
    if !keep_status {
        validation::validate_create(def, &body)?;
    } else if meta_str(&body, "name").is_none_or(str::is_empty) {
        return Err(ApiError::bad_request("a seeded object needs a name"));
    }
    if let Some(m) = manager {
        fieldmanager::update(&fm_request(def, Part::Main, &now), None, &mut body, m);
    }
    let key: Key = (
        if def.namespaced {
            ns.unwrap_or("").to_string()
        } else {
            String::new()
        },
        name.clone(),
    );
    match store.write(def, &key, dry_run, |cur| {
        if cur.is_some() {
            Err(ApiError::already_exists(&def.group, &def.plural, &name))
        } else {
            Ok(Write::Put(body))
        }
    })? {
        Outcome::Created(o) | Outcome::Updated(o) => Ok(o),
        _ => Err(ApiError::internal("create did not store the object")),
    }
}

/// The uid a PUT's object carries is a precondition (`rest.DefaultUpdatedObjectInfo`
/// `Preconditions`), which etcd3's `GuaranteedUpdate` checks before anything else
/// (`storage.Preconditions.Check`: `NewInvalidObjError`), and `InterpretUpdateError` answers as
/// a 409 Conflict wrapping the `StorageError` text, with the etcd key.
fn uid_precondition(
    def: &ResourceDef,
    name: &str,
    sent: Option<&str>,
    cur: &StoredObject,
) -> Result<(), ApiError> {
    let Some(uid) = sent.filter(|u| !u.is_empty() && *u != cur.uid) else {
        return Ok(());
    };
    Err(ApiError::conflict(
        &def.group,
        &def.plural,
        name,
        &format!(
            "StorageError: invalid object, Code: 4, Key: {}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            etcd_key(def, &cur.namespace, name),
            cur.uid
        ),
    ))
}

/// The etcd key kube-apiserver stores an object under (`/registry` and the resource's
/// storage prefix: the resource, `<group>/<resource>` for custom kinds, `services/specs` and
/// `minions` for services and nodes), then the namespace and name.
fn etcd_key(def: &ResourceDef, ns: &str, name: &str) -> String {
    let prefix = match (def.builtin, def.group.as_str(), def.plural.as_str()) {
        (true, "", "services") => "services/specs".to_string(),
        (true, "", "nodes") => "minions".to_string(),
        (true, _, plural) => plural.to_string(),
        (false, group, plural) => format!("{group}/{plural}"),
    };
    if ns.is_empty() {
        format!("/registry/{prefix}/{name}")
    } else {
        format!("/registry/{prefix}/{ns}/{name}")
    }
}

fn stale_check(
    def: &ResourceDef,
    name: &str,
    requested: Option<&str>,
    cur: &StoredObject,
) -> Result<(), ApiError> {
    match requested {
        Some(rv) if !rv.is_empty() && rv != cur.rv.to_string() => {
            Err(ApiError::stale(&def.group, &def.plural, name))
        }
        _ => Ok(()),
    }
}

/// Drops the metadata maps and lists that are empty or null, as the real server's objects
/// never carry them: `ObjectMeta`'s `labels`, `annotations`, `finalizers`, `ownerReferences`
/// and `managedFields` are `omitempty`, so an empty one is not stored (e.g. after
/// `kubectl annotate x key-` removed the last annotation).
fn drop_empty_collections(meta: &mut Map<String, Value>) {
    for k in [
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
        "managedFields",
    ] {
        let empty = match meta.get(k) {
            Some(Value::Null) => true,
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            _ => false,
        };
        if empty {
            meta.remove(k);
        }
    }
}

/// Puts back the metadata an update cannot change (`rest.BeforeUpdate` keeps uid, creation
/// and deletion fields, generation, name and namespace; `selfLink` is never stored) and the
/// stored `managedFields` when the request sets none (the field manager's
/// `DecodeManagedFields` of a request that sets none).
fn keep_server_metadata(meta: &mut Map<String, Value>, old_meta: &Map<String, Value>) {
    keep_stored(
        meta,
        old_meta,
        &[
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
        ],
    );
    meta.remove("selfLink");
    if !meta.contains_key("managedFields")
        && let Some(m) = old_meta.get("managedFields")
    {
        meta.insert("managedFields".into(), m.clone());
    }
}

/// The metadata a `/status` write stores. A built-in kind's status write goes through the same
/// `rest.BeforeUpdate` as a main write, so it takes the request's metadata except what
/// `BeforeUpdate` keeps and what the kind's status strategy resets
/// ([`strategy::status_reset_metadata`]). A custom resource's status strategy copies the
/// stored object and keeps only the request's status and managed fields
/// (`staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/status_strategy.go`
/// `PrepareForUpdate`).
fn status_write_metadata(
    def: &ResourceDef,
    old_meta: &Map<String, Value>,
    new_meta: Option<Value>,
) -> Map<String, Value> {
    let mut new_meta = match new_meta {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    if !def.builtin {
        let mut meta = old_meta.clone();
        if let Some(m) = new_meta.remove("managedFields") {
            meta.insert("managedFields".into(), m);
        }
        return meta;
    }
    let mut meta = new_meta;
    keep_server_metadata(&mut meta, old_meta);
    keep_stored(&mut meta, old_meta, strategy::status_reset_metadata(def));
    meta
}

/// Puts the stored pod's `status.qosClass` into a status write that has none.
fn keep_qos_class(old: &Value, status: Option<&mut Value>) {
    let Some(qos) = old
        .get("status")
        .and_then(|s| s.get("qosClass"))
        .and_then(Value::as_str)
        .filter(|q| !q.is_empty())
    else {
        return;
    };
    if let Some(st) = status.and_then(Value::as_object_mut)
        && st
            .get("qosClass")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        st.insert("qosClass".into(), json!(qos));
    }
}

/// Sets each of `keys` in `meta` as it is in the stored `old_meta` (absent there, absent here).
fn keep_stored(meta: &mut Map<String, Value>, old_meta: &Map<String, Value>, keys: &[&str]) {
    for &k in keys {
        match old_meta.get(k) {
            Some(v) => meta.insert(k.into(), v.clone()),
            None => meta.remove(k),
        };
    }
}

/// Builds the object to store when `new` replaces `old` through `part`; `None` means "no change".
fn merge_update(
    def: &ResourceDef,
    old: &Value,
    mut new: Value,
    part: Part,
    manage: Manage<'_>,
    emptied: &mut Option<Value>,
) -> Result<Write, ApiError> {
    // The request's managed fields, for the field manager to judge (an empty list resets them).
    let request_managed = meta_mut(&mut new).and_then(|m| m.remove("managedFields"));
    let empty = Map::new();
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    // The uid the request carried: `rest.BeforeUpdate` keeps it when set, and the validation
    // refuses a different one.
    let sent_uid = new
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .and_then(Value::as_str)
        .map(str::to_string);
    match part {
        Part::Main => {
            // Every decoded object is defaulted (an update's body, a patch's result), before
            // the strategy compares it with the stored one.
            defaults::keep_allocated(def, old, &mut new);
            defaults::apply(def, &mut new);
            let meta = meta_mut(&mut new)
                .ok_or_else(|| ApiError::bad_request("the body must be a JSON object"))?;
            keep_server_metadata(meta, old_meta);
            if def.status
                && let Some(obj) = new.as_object_mut()
            {
                match old.get("status") {
                    Some(s) => obj.insert("status".into(), s.clone()),
                    None => obj.remove("status"),
                };
            }
            if strategy::bumps_generation(def, old, &new) {
                strategy::bump_generation(old, &mut new);
            }
        }
        Part::Status | Part::Scale => {
            if part == Part::Status {
                // A status write's body is decoded and defaulted like any other (e.g.
                // `SetDefaults_Namespace` puts the name label back if the request drops it).
                defaults::apply(def, &mut new);
            }
            // The parts the write takes from the request, moved out of it (`new` is replaced).
            let mut take = |k: &str| new.as_object_mut().and_then(|o| o.remove(k));
            let mut out = old.clone();
            if let Some(obj) = out.as_object_mut() {
                if part == Part::Status {
                    let mut status = take("status");
                    if def.builtin && def.group.is_empty() && def.kind == "Pod" {
                        // `podStatusStrategy.PrepareForUpdate`: the QoS class is immutable,
                        // "backfill it ... because the old kubelet dropped this field".
                        keep_qos_class(old, status.as_mut());
                    }
                    match status {
                        Some(s) => obj.insert("status".into(), s),
                        None => obj.remove("status"),
                    };
                    let meta = status_write_metadata(def, old_meta, take("metadata"));
                    obj.insert("metadata".into(), Value::Object(meta));
                } else if let Some(s) = take("spec") {
                    // Scale: `new` is the old object with spec.replicas changed.
                    obj.insert("spec".into(), s);
                }
            }
            // The scale subresource updates the object through the kind's own strategy
            // (`pkg/registry/apps/deployment/storage/storage.go` `scaleUpdatedObjectInfo`), so a
            // replicas change bumps the generation as a spec change does.
            if part == Part::Scale && strategy::bumps_generation(def, old, &out) {
                strategy::bump_generation(old, &mut out);
            }
            new = out;
        }
    }
    let now = now_rfc3339();
    let req = fm_request(def, part, &now);
    if let Some(meta) = meta_mut(&mut new) {
        match request_managed {
            Some(m) => {
                meta.insert("managedFields".into(), m);
            }
            // The harness keeps the stored ones (`keep_server_metadata` put them back).
            None if manage == Manage::Keep => {}
            None => {
                meta.remove("managedFields");
            }
        }
    }
    if let Manage::Update(m) = manage {
        if part == Part::Scale {
            fieldmanager::update_scale(&req, old, &mut new, m);
        } else {
            fieldmanager::update(&req, Some(old), &mut new, m);
        }
    }
    if let Some(meta) = meta_mut(&mut new) {
        drop_empty_collections(meta);
        meta.insert(
            "resourceVersion".into(),
            old_meta
                .get("resourceVersion")
                .cloned()
                .unwrap_or(Value::Null),
        );
    }
    // `rest.BeforeUpdate`: the strategy's `ValidateUpdate` (or `ValidateStatusUpdate`), on the
    // prepared object, before anything is written.
    validation::validate_update(def, &new, old, part == Part::Status, sent_uid.as_deref())?;
    if new == *old {
        return Ok(Write::Noop);
    }
    if strategy::deletes_during_update(old, &new) {
        // The update is not written: the store deletes the object as stored, and the DELETED
        // event carries that last stored state, finalizers included, at the deletion's
        // resourceVersion (`store.go` `Update` returns `errEmptiedFinalizers` before writing;
        // `staging/src/k8s.io/apiserver/pkg/storage/etcd3/watcher.go` `transform` sends the
        // previous value for a delete). The request is answered with the object it made
        // (`deleteWithoutFinalizers`: "clients are expecting an updated object if a PUT
        // succeeded ... so return the object in the request instead"), at the stored RV.
        *emptied = Some(new);
        return Ok(Write::Delete);
    }
    Ok(Write::Put(new))
}

/// The object an update or patch answers with: the written one, or for a write that emptied
/// the finalizers of a terminating object (and so deleted it) the object it made.
fn answer_of(
    def: &ResourceDef,
    outcome: Outcome,
    emptied: Option<Value>,
) -> Result<Arc<StoredObject>, ApiError> {
    match (outcome, emptied) {
        (Outcome::Deleted(stored), Some(made)) => {
            // The request's object carries the RV it was prepared at (the stored one).
            let rv = meta_str(&made, "resourceVersion")
                .and_then(|r| r.parse().ok())
                .unwrap_or(stored.rv);
            Ok(Arc::new(StoredObject::from_value(def, &made, rv)?))
        }
        (outcome, _) => result_of(outcome),
    }
}

fn result_of(outcome: Outcome) -> Result<Arc<StoredObject>, ApiError> {
    match outcome {
        Outcome::Created(o)
        | Outcome::Updated(o)
        | Outcome::Deleted(o)
        | Outcome::Unchanged(Some(o)) => Ok(o),
        Outcome::Unchanged(None) => Err(ApiError::internal("object vanished")),
    }
}

/// The autoscaling/v1 Scale view of an object with `spec.replicas`.
pub(crate) fn scale_of(def: &ResourceDef, obj: &Value) -> Value {
    let meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let pick = |k: &str| meta.get(k).cloned().unwrap_or(Value::Null);
    let selector = obj
        .get("spec")
        .and_then(|s| s.get("selector"))
        .and_then(|s| s.get("matchLabels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let mut m = Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if !pick(k).is_null() {
            m.insert(k.into(), pick(k));
        }
    }
    let _ = def;
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": m,
        "spec": {"replicas": obj.get("spec").and_then(|s| s.get("replicas")).cloned().unwrap_or(json!(1))},
        "status": {
            "replicas": obj.get("status").and_then(|s| s.get("replicas")).cloned().unwrap_or(json!(0)),
            "selector": selector,
        }
    })
}

/// Applies a Scale (as sent by a client) to the object: returns the object with the new replicas.
fn apply_scale(
    def: &ResourceDef,
    name: &str,
    old: &Value,
    scale: &Value,
    cur: &StoredObject,
) -> Result<Value, ApiError> {
    stale_check(def, name, meta_str(scale, "resourceVersion"), cur)?;
    let replicas = scale
        .get("spec")
        .and_then(|s| s.get("replicas"))
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            ApiError::invalid(
                "Scale",
                "autoscaling",
                name,
                "spec.replicas",
                "",
                "must be an integer",
            )
        })?;
    if replicas < 0 {
        // `ValidateScale`: an int64 value, printed bare.
        return Err(ApiError::invalid_errors(
            "autoscaling",
            "Scale",
            name,
            &[FieldError::invalid_printed(
                "spec.replicas",
                replicas.to_string(),
                "must be greater than or equal to 0",
            )],
        ));
    }
    let mut new = old.clone();
    if let Some(obj) = new.as_object_mut() {
        let spec = obj.entry("spec").or_insert_with(|| json!({}));
        if let Some(spec) = spec.as_object_mut() {
            spec.insert("replicas".into(), json!(replicas));
        }
    }
    Ok(new)
}

fn check_name(name: &str, body: &mut Value) -> Result<(), ApiError> {
    let meta =
        meta_mut(body).ok_or_else(|| ApiError::bad_request("the body must be a JSON object"))?;
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() && n != name => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
        _ => {
            meta.insert("name".into(), json!(name));
            Ok(())
        }
    }
}

/// Replaces an object or one of its subresources (PUT), recording an `Update` by `manager`
/// (`update.go` `UpdateResource`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn update(
    store: &Store,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    part: Part,
    mut body: Value,
    dry_run: bool,
    manager: Option<&str>,
) -> Result<Arc<StoredObject>, ApiError> {
    let manage = manager.map_or(Manage::Keep, Manage::Update);
    if part == Part::Scale {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
    } else {
        kind_check(def, &mut body)?;
        check_namespace(def, ns, &mut body)?;
    }
    check_name(name, &mut body)?;
    let key = key_of(def, ns, name);
    let mut emptied = None;
    let outcome = store.write(def, &key, dry_run, |cur| {
        let cur = cur.ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
        let old = cur.to_value(def)?;
        if part == Part::Scale {
            let new = apply_scale(def, name, &old, &body, cur)?;
            return merge_update(def, &old, new, Part::Scale, manage, &mut emptied);
        }
        uid_precondition(def, name, meta_str(&body, "uid"), cur)?;
        stale_check(def, name, meta_str(&body, "resourceVersion"), cur)?;
        merge_update(def, &old, body, part, manage, &mut emptied)
    })?;
    answer_of(def, outcome, emptied)
}

/// Patches an object or one of its subresources, recording the write for `manager` (an apply's
/// field manager, or the `Update` manager of another patch). The flag says whether an apply
/// created the object (`patch.go` answers `201 Created` then). For the harness: unknown fields
/// are dropped silently, as under `fieldValidation=Ignore`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn patch(
    store: &Store,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    part: Part,
    kind: PatchKind,
    body: &[u8],
    dry_run: bool,
    auto_namespaces: bool,
    manager: Option<&str>,
    force: bool,
) -> Result<(Arc<StoredObject>, bool), ApiError> {
    let req = PatchRequest {
        kind,
        body,
        dry_run,
        auto_namespaces,
        manager,
        force,
        validation: FieldValidation::Ignore,
    };
    patch_checked(store, def, ns, name, part, &req).map(|(o, created, _)| (o, created))
}

/// A PATCH request's options.
pub(crate) struct PatchRequest<'a> {
    /// The patch type.
    pub kind: PatchKind,
    /// The patch body.
    pub body: &'a [u8],
    /// `dryRun`.
    pub dry_run: bool,
    /// Whether a missing namespace is created (an apply that creates).
    pub auto_namespaces: bool,
    /// The field manager: an apply's, or the `Update` manager of another patch.
    pub manager: Option<&'a str>,
    /// An apply's `force`.
    pub force: bool,
    /// `fieldValidation`.
    pub validation: FieldValidation,
}

/// Patches an object or one of its subresources, decoding the patched object as
/// kube-apiserver's patchers do (see [`decode::check_patched`]): returns the object, whether
/// an apply created it, and the warnings of `fieldValidation=Warn`.
pub(crate) fn patch_checked(
    store: &Store,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    part: Part,
    req: &PatchRequest<'_>,
) -> Result<(Arc<StoredObject>, bool, Vec<String>), ApiError> {
    let PatchRequest {
        kind,
        body,
        dry_run,
        auto_namespaces,
        manager,
        force,
        validation: fv,
    } = *req;
    let patch_value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let json_patch: Option<json_patch::Patch> = if kind == PatchKind::Json {
        Some(
            serde_json::from_value(patch_value.clone())
                .map_err(|e| ApiError::bad_request(format!("error decoding JSON patch: {e}")))?,
        )
    } else {
        if !patch_value.is_object() {
            return Err(ApiError::bad_request("a merge patch must be a JSON object"));
        }
        None
    };
    if kind == PatchKind::Strategic && !def.builtin {
        // `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go` `PatchResource`: custom
        // resources have no Go struct to take patch strategies from.
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    // The strict errors of the body itself (`patch.go` `applyJSPatch`, `strategicPatchObject`,
    // `applyPatcher`), then those of the patched object.
    let mut warnings = Vec::new();
    let body_errs = if kind == PatchKind::Apply {
        warnings = decode::check_apply_body(def, body, fv)?;
        Vec::new()
    } else {
        decode::patch_body_errors(body, kind == PatchKind::Json, fv)?
    };
    let repr = || {
        if kind == PatchKind::Strategic {
            PatchedRepr::PatchMap(&patch_value)
        } else {
            PatchedRepr::PatchedJson
        }
    };
    let key = key_of(def, ns, name);
    if kind == PatchKind::Apply && part == Part::Main && store.get(def, &key).is_none() {
        // `patch.go` `applyPatcher.createNewObject`: the configuration applied to an empty
        // object, then created.
        let mut body = match manager {
            Some(m) => {
                let now = now_rfc3339();
                fieldmanager::apply(&fm_request(def, part, &now), None, &patch_value, m, force)?
                    .object
            }
            None => patch_value.clone(),
        };
        check_name(name, &mut body)?;
        match create(store, def, ns, body, dry_run, auto_namespaces, None) {
            Err(e) if e.reason == "AlreadyExists" => {}
            other => return other.map(|o| (o, true, warnings)),
        }
    }
    let manage = match (kind, manager) {
        (PatchKind::Apply, Some(_)) => Manage::Applied,
        (_, Some(m)) => Manage::Update(m),
        (_, None) => Manage::Keep,
    };
    let apply = |base: &mut Value| -> Result<(), ApiError> {
        match &json_patch {
            Some(p) => {
                json_patch::patch(base, p).map_err(|e| ApiError::new(422, "Invalid", e.to_string()))
            }
            None if kind == PatchKind::Strategic => {
                crate::registry::smp::apply(&def.kind, base, &patch_value)
                    .map_err(ApiError::bad_request)
            }
            None => {
                json_patch::merge(base, &patch_value);
                Ok(())
            }
        }
    };
    let mut emptied = None;
    let outcome = store.write(def, &key, dry_run, |cur| {
        let cur = cur.ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
        let old = cur.to_value(def)?;
        if part == Part::Scale {
            let mut scale = scale_of(def, &old);
            apply(&mut scale)?;
            if kind != PatchKind::Apply {
                warnings.extend(decode::check_patched(
                    def,
                    true,
                    &mut scale,
                    body_errs,
                    repr(),
                    fv,
                )?);
            }
            let new = apply_scale(def, name, &old, &scale, cur)?;
            return merge_update(def, &old, new, Part::Scale, manage, &mut emptied);
        }
        let new = match (kind, manager) {
            (PatchKind::Apply, Some(m)) => {
                let now = now_rfc3339();
                fieldmanager::apply(
                    &fm_request(def, part, &now),
                    Some(&old),
                    &patch_value,
                    m,
                    force,
                )?
                .object
            }
            _ => {
                let mut new = old.clone();
                apply(&mut new)?;
                if kind != PatchKind::Apply {
                    warnings.extend(decode::check_patched(
                        def,
                        false,
                        &mut new,
                        body_errs,
                        repr(),
                        fv,
                    )?);
                }
                new
            }
        };
        let mut new = new;
        if !new.is_object() {
            return Err(ApiError::new(
                422,
                "Invalid",
                "the patched object is not a JSON object",
            ));
        }
        stale_check(def, name, meta_str(&new, "resourceVersion"), cur)?;
        if meta_str(&new, "name") != Some(name) {
            return Err(ApiError::invalid(
                &def.kind,
                &def.group,
                name,
                "metadata.name",
                meta_str(&new, "name").unwrap_or(""),
                "field is immutable",
            ));
        }
        if def.namespaced && meta_str(&new, "namespace") != Some(cur.namespace.as_str()) {
            return Err(ApiError::invalid(
                &def.kind,
                &def.group,
                name,
                "metadata.namespace",
                meta_str(&new, "namespace").unwrap_or(""),
                "field is immutable",
            ));
        }
        kind_check(def, &mut new)?;
        merge_update(def, &old, new, part, manage, &mut emptied)
    })?;
    answer_of(def, outcome, emptied).map(|o| (o, false, warnings))
}

/// Deletes an object as kube-apiserver's generic store does (see `strategy::plan_delete`):
/// at once; or marked (`deletionTimestamp`, `deletionGracePeriodSeconds`) and kept while
/// finalizers hold it; or, for a pod, gracefully: marked, then deleted by the kubelet stand-in
/// after its grace period, or at once (a second write) when the period is 0.
pub(crate) fn delete(
    store: &Store,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Outcome, ApiError> {
    let key = key_of(def, ns, name);
    if is_namespaces(def) {
        // `pkg/registry/core/namespace/storage/storage.go` `REST.Delete`: the first delete only
        // starts the termination; the namespace controller empties it, removes the
        // `kubernetes` finalizer and deletes it again, which then goes the generic way.
        let outcome = store.write(def, &key, opts.is_dry_run(), |cur| {
            let cur = cur.ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
            check_delete_preconditions(def, name, opts, cur)?;
            let v = cur.to_value(def)?;
            if cur.deleting {
                // Terminating already: judged below.
                return Ok(Write::Noop);
            }
            Ok(Write::Put(start_termination(store, v, opts)))
        })?;
        // "prior to final deletion, we must ensure that finalizers is empty": until then a
        // delete is answered with the namespace as it is.
        let finalized = match &outcome {
            Outcome::Unchanged(Some(o)) => {
                o.deleting && namespace_finalizers(&o.to_value(def)?).is_empty()
            }
            _ => false,
        };
        if !finalized {
            return Ok(outcome);
        }
    }
    generic_delete(store, def, &key, name, opts)
}

/// Whether `def` is the core namespaces resource.
fn is_namespaces(def: &ResourceDef) -> bool {
    def.builtin && def.group.is_empty() && def.plural == "namespaces"
}

/// A namespace's `spec.finalizers`.
fn namespace_finalizers(v: &Value) -> Vec<String> {
    string_list(v.get("spec").and_then(|s| s.get("finalizers")))
}

/// The namespace's first delete (`storage.go` `REST.Delete`, its `GuaranteedUpdate`):
/// `deletionTimestamp` now, `status.phase: Terminating`, and the garbage collector's
/// finalizers as the options ask (`shouldHaveOrphanFinalizer`,
/// `shouldHaveDeleteDependentsFinalizer`). No grace period is written, and the generation
/// (namespaces keep none) does not move.
fn start_termination(store: &Store, mut v: Value, opts: &DeleteOptions) -> Value {
    if let Some(meta) = meta_mut(&mut v) {
        meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
    }
    if let Some(obj) = v.as_object_mut() {
        let status = obj.entry("status").or_insert_with(|| json!({}));
        if let Some(st) = status.as_object_mut() {
            st.insert("phase".into(), json!("Terminating"));
        }
    }
    if store.garbage_collection() {
        strategy::set_gc_finalizers(
            &mut v,
            opts.propagation_policy.as_deref(),
            opts.orphan_dependents,
        );
    }
    v
}

/// `rest.BeforeDelete` (`staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`) checks the
/// preconditions before the storage does, with its own messages and a GroupResource whose
/// resource is the kind (`Operation cannot be fulfilled on Pod "p"`).
fn check_delete_preconditions(
    def: &ResourceDef,
    name: &str,
    opts: &DeleteOptions,
    cur: &StoredObject,
) -> Result<(), ApiError> {
    if let Some(uid) = &opts.uid
        && *uid != cur.uid
    {
        return Err(ApiError::conflict(
            &def.group,
            &def.kind,
            name,
            &format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                cur.uid
            ),
        ));
    }
    if let Some(rv) = &opts.resource_version
        && *rv != cur.rv.to_string()
    {
        return Err(ApiError::conflict(
            &def.group,
            &def.kind,
            name,
            &format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                cur.rv
            ),
        ));
    }
    Ok(())
}

/// The generic store's `Delete`.
fn generic_delete(
    store: &Store,
    def: &ResourceDef,
    key: &Key,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Outcome, ApiError> {
    // The uid when a grace-0 mark is to be followed by the removal.
    let mut then_delete: Option<String> = None;
    let gc = store.garbage_collection();
    let outcome = store.write(def, key, opts.is_dry_run(), |cur| {
        let cur = cur.ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
        check_delete_preconditions(def, name, opts, cur)?;
        let v = cur.to_value(def)?;
        // `updateForGracefulDeletionAndFinalizers`: the garbage collector's finalizers are set
        // as the options ask before the object is marked (a pod whose graceful deletion is
        // under way is left alone: `plan_delete` answers `Pending` for it).
        let mut planned = v.clone();
        if gc {
            strategy::set_gc_finalizers(
                &mut planned,
                opts.propagation_policy.as_deref(),
                opts.orphan_dependents,
            );
        }
        match strategy::plan_delete(def, &planned, opts.grace_period_seconds, now_unix()) {
            DeletePlan::Delete => Ok(Write::Delete),
            DeletePlan::Pending => Ok(Write::Noop),
            DeletePlan::Mark {
                mut object,
                then_delete: delete_now,
                ..
            } => {
                if delete_now {
                    then_delete = Some(cur.uid.clone());
                }
                if let Some(meta) = meta_mut(&mut object) {
                    // The store sets the new resourceVersion; compare without it.
                    meta.insert("resourceVersion".into(), json!(cur.rv.to_string()));
                }
                if object == v && !delete_now {
                    Ok(Write::Noop)
                } else {
                    Ok(Write::Put(object))
                }
            }
        }
    })?;
    if opts.is_dry_run() {
        return Ok(match (outcome, then_delete) {
            (Outcome::Updated(o), Some(_)) => Outcome::Deleted(o),
            (o, _) => o,
        });
    }
    if let Some(uid) = then_delete {
        // The second write of a graceful deletion with period 0: the DELETED event. Another
        // writer may have deleted it in between (the real store ignores NotFound here).
        let marked = outcome.clone();
        let second = store.write(def, key, false, |cur| match cur {
            Some(c) if c.uid == uid && !c.has_finalizers => Ok(Write::Delete),
            _ => Ok(Write::Noop),
        })?;
        return Ok(match (second, marked) {
            (Outcome::Deleted(o), _) | (_, Outcome::Updated(o)) => Outcome::Deleted(o),
            (other, _) => other,
        });
    }
    Ok(outcome)
}

/// Removes `finalizer` from a terminating namespace's `spec.finalizers`, as the namespace
/// controller's `finalizeNamespace` does through the `finalize` subresource
/// (`pkg/registry/core/namespace/strategy.go` `namespaceFinalizeStrategy`: only
/// `spec.finalizers` changes), if the namespace is still the one with `uid`.
pub(crate) fn finalize_namespace(
    store: &Store,
    name: &str,
    uid: &str,
    finalizer: &str,
) -> Result<Outcome, ApiError> {
    let def = store
        .registry
        .namespaces()
        .cloned()
        .ok_or_else(|| ApiError::internal("no namespaces resource"))?;
    let key: Key = (String::new(), name.to_string());
    store.write(&def, &key, false, |cur| {
        let cur = cur.ok_or_else(|| ApiError::not_found("", "namespaces", name))?;
        if cur.uid != uid {
            return Ok(Write::Noop);
        }
        let mut v = cur.to_value(&def)?;
        let left: Vec<String> = namespace_finalizers(&v)
            .into_iter()
            .filter(|f| f != finalizer)
            .collect();
        if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
            if left.is_empty() {
                spec.remove("finalizers");
            } else {
                spec.insert("finalizers".into(), json!(left));
            }
        }
        Ok(Write::Put(v))
    })
}

/// The store key of `name` in `ns` for this resource.
pub(crate) fn key_of(def: &ResourceDef, ns: Option<&str>, name: &str) -> Key {
    (
        if def.namespaced {
            ns.unwrap_or("").to_string()
        } else {
            String::new()
        },
        name.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apimachinery::schema::Registry;

    fn store() -> Store {
        Store::new(Registry::new(&[]).unwrap(), 100)
    }

    #[test]
    fn create_update_generation_and_conflict() {
        let s = store();
        let def = s
            .registry
            .find("apps", "v1", "deployments")
            .unwrap()
            .clone();
        let d = json!({"metadata": {"name": "web"}, "spec": {"replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"replicas": 9}});
        let o = create(&s, &def, Some("default"), d, false, true, None).unwrap();
        let v = o.to_value(&def).unwrap();
        assert_eq!(v["metadata"]["generation"], 1);
        assert_eq!(v["status"], json!({}), "status is reset on create");
        assert_eq!(v["kind"], "Deployment");
        // Namespace was auto-created.
        let nsdef = s.registry.namespaces().unwrap().clone();
        assert!(s.get(&nsdef, &(String::new(), "default".into())).is_some());
        // Spec change bumps generation; status in the body is ignored.
        let mut v2 = v.clone();
        v2["spec"]["replicas"] = json!(3);
        v2["status"] = json!({"replicas": 5});
        let o2 = update(
            &s,
            &def,
            Some("default"),
            "web",
            Part::Main,
            v2.clone(),
            false,
            None,
        )
        .unwrap();
        let v3 = o2.to_value(&def).unwrap();
        assert_eq!(v3["metadata"]["generation"], 2);
        assert_eq!(v3["status"], json!({}));
        // Stale RV conflicts.
        let e = update(
            &s,
            &def,
            Some("default"),
            "web",
            Part::Main,
            v2,
            false,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code, 409);
        // No-op update keeps the RV.
        let o4 = update(
            &s,
            &def,
            Some("default"),
            "web",
            Part::Main,
            v3.clone(),
            false,
            None,
        )
        .unwrap();
        assert_eq!(o4.rv, o2.rv);
        // Status update touches only status.
        let mut st = v3.clone();
        st["status"] = json!({"replicas": 3});
        st["spec"]["replicas"] = json!(100);
        let o5 = update(
            &s,
            &def,
            Some("default"),
            "web",
            Part::Status,
            st,
            false,
            None,
        )
        .unwrap();
        let v5 = o5.to_value(&def).unwrap();
        assert_eq!(v5["status"]["replicas"], 3);
        assert_eq!(v5["spec"]["replicas"], 3);
        assert_eq!(v5["metadata"]["generation"], 2);
    }

    #[test]
    fn finalizers_hold_deletion() {
        let s = store();
        let def = s.registry.find("", "v1", "configmaps").unwrap().clone();
        let cm = json!({"metadata": {"name": "c", "finalizers": ["x/y"]}, "data": {"a": "1"}});
        create(&s, &def, Some("default"), cm, false, true, None).unwrap();
        let out = delete(&s, &def, Some("default"), "c", &DeleteOptions::default()).unwrap();
        assert!(matches!(out, Outcome::Updated(ref o) if o.deleting));
        let key = key_of(&def, Some("default"), "c");
        assert!(s.get(&def, &key).is_some());
        let body = br#"{"metadata":{"finalizers":null}}"#;
        patch(
            &s,
            &def,
            Some("default"),
            "c",
            Part::Main,
            PatchKind::Merge,
            body,
            false,
            true,
            None,
            false,
        )
        .unwrap();
        assert!(s.get(&def, &key).is_none());
    }

    #[test]
    fn bad_names_and_patches() {
        let s = store();
        let def = s.registry.find("", "v1", "pods").unwrap().clone();
        let e = create(
            &s,
            &def,
            Some("default"),
            json!({"metadata": {"name": "Bad_Name"}}),
            false,
            true,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
        create(
            &s,
            &def,
            Some("default"),
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            false,
            true,
            None,
        )
        .unwrap();
        let e = patch(
            &s,
            &def,
            Some("default"),
            "p",
            Part::Main,
            PatchKind::Json,
            br#"[{"op":"test","path":"/spec/x","value":1}]"#,
            false,
            true,
            None,
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
        let e = patch(
            &s,
            &def,
            Some("default"),
            "p",
            Part::Main,
            PatchKind::Merge,
            b"{not json",
            false,
            true,
            None,
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, 400);
        let o = patch(
            &s,
            &def,
            Some("default"),
            "p",
            Part::Main,
            PatchKind::Json,
            br#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#,
            false,
            true,
            None,
            false,
        )
        .unwrap();
        assert_eq!(o.0.labels.get("a").map(String::as_str), Some("b"));
    }
}
