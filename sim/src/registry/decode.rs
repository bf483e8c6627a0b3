//! Schema decoding of request bodies as kube-apiserver decodes them into the kind's Go struct
//! (`k8s.io/apimachinery/pkg/runtime/serializer/json/json.go` `Serializer.Decode` over
//! `sigs.k8s.io/json` `UnmarshalStrict`): unknown fields and duplicate fields are found (and
//! reported by `fieldValidation`), wrongly typed values refused, and unknown fields dropped
//! from what is stored, as a decode into Go types drops them.
//!
//! The schema is the kind's k8s-openapi struct: the body is deserialized into it through
//! `serde_ignored` (whose callback names every field the struct ignores: the unknown ones) and
//! `serde_path_to_error` (the path of a type error). Duplicates are found while the body is
//! parsed into a `serde_json::Value`, which keeps only the last value of a key (as Go does).
//! Custom kinds have no schema in the sim: their bodies are kept whole.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::apimachinery::errors::{ApiError, FieldError, go_quote};
use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::util::Query;

/// `metav1.FieldValidation*`: what the server does with unknown and duplicate fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// Dropped silently (the non-strict decoder).
    Ignore,
    /// Dropped, each one reported in a `Warning` header (the default of a 1.27+ server).
    Warn,
    /// The request fails.
    Strict,
}

impl FieldValidation {
    /// From the (already validated) `fieldValidation` query parameter: unset or empty is `Warn`
    /// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go` `fieldValidation`).
    pub(crate) fn from_query(q: &Query) -> Self {
        match q.get("fieldValidation").unwrap_or("") {
            "Ignore" => Self::Ignore,
            "Strict" => Self::Strict,
            _ => Self::Warn,
        }
    }

    fn strict_checks(self) -> bool {
        self != Self::Ignore
    }
}

/// One step of a path into a JSON document.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Seg {
    /// An object key (a struct field or a map key).
    Key(String),
    /// A list index.
    Index(usize),
}

/// A path as `sigs.k8s.io/json` prints it in strict errors (`appendStrictFieldStackKey`,
/// `appendStrictFieldStackIndex`): keys joined with `.`, indices as `[i]`.
pub(crate) fn path_string(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => {
                s.push('[');
                s.push_str(&i.to_string());
                s.push(']');
            }
        }
    }
    s
}

/// A strict decoding error (`sigs.k8s.io/json` `strictError`): `unknown field "a.b"` or
/// `duplicate field "a.b"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StrictError {
    /// `unknown field` or `duplicate field`.
    kind: &'static str,
    /// The printed path.
    path: String,
}

impl fmt::Display for StrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `strconv.Quote` of the path.
        write!(f, "{} {}", self.kind, go_quote(&self.path))
    }
}

/// `runtime.NewStrictDecodingError(errs).Error()`.
fn strict_decoding_error(errs: &[StrictError]) -> String {
    let all: Vec<String> = errs.iter().map(ToString::to_string).collect();
    format!("strict decoding error: {}", all.join(", "))
}

/// `saveStrictError`: identical errors once, at most 100.
fn push_strict(errs: &mut Vec<StrictError>, e: StrictError) {
    if errs.len() < 100 && !errs.contains(&e) {
        errs.push(e);
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing with duplicate detection.

struct DupCtx<'a> {
    path: Vec<Seg>,
    /// Duplicates with the index of the key occurrence that repeats.
    dups: Vec<(Vec<Seg>, usize)>,
    /// Key occurrences seen so far (document order).
    seq: usize,
    /// Paths whose first occurrence is wanted (to order unknown fields among duplicates).
    locate: Option<&'a HashSet<Vec<Seg>>>,
    found: HashMap<Vec<Seg>, usize>,
    /// Inside a value Go decodes through its own `UnmarshalJSON` (`FieldsV1`): no checks.
    raw_depth: usize,
}

struct DupSeed<'a, 'b>(&'b mut DupCtx<'a>);

impl<'de> DeserializeSeed<'de> for DupSeed<'_, '_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DupSeed<'_, '_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let ctx = self.0;
        let mut out = Vec::new();
        loop {
            ctx.path.push(Seg::Index(out.len()));
            let next = seq.next_element_seed(DupSeed(ctx));
            ctx.path.pop();
            match next? {
                Some(v) => out.push(v),
                None => break,
            }
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let ctx = self.0;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let seq = ctx.seq;
            ctx.seq += 1;
            ctx.path.push(Seg::Key(key.clone()));
            if ctx.raw_depth == 0 && out.contains_key(&key) {
                ctx.dups.push((ctx.path.clone(), seq));
            }
            if let Some(set) = ctx.locate
                && set.contains(&ctx.path)
            {
                ctx.found.entry(ctx.path.clone()).or_insert(seq);
            }
            let raw = key == "fieldsV1";
            ctx.raw_depth += usize::from(raw);
            let v = map.next_value_seed(DupSeed(ctx));
            ctx.raw_depth -= usize::from(raw);
            ctx.path.pop();
            out.insert(key, v?);
        }
        Ok(Value::Object(out))
    }
}

/// Parses JSON, returning the value (the last of duplicate keys wins, as in Go) and the
/// duplicate keys with their positions among all key occurrences.
fn parse_dups(bytes: &[u8]) -> Result<(Value, DupCtx<'static>), serde_json::Error> {
    let mut ctx = DupCtx {
        path: Vec::new(),
        dups: Vec::new(),
        seq: 0,
        locate: None,
        found: HashMap::new(),
        raw_depth: 0,
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = DupSeed(&mut ctx).deserialize(&mut de)?;
    de.end()?;
    Ok((v, ctx))
}

fn locate_paths(bytes: &[u8], paths: &HashSet<Vec<Seg>>) -> HashMap<Vec<Seg>, usize> {
    let mut ctx = DupCtx {
        path: Vec::new(),
        dups: Vec::new(),
        seq: 0,
        locate: Some(paths),
        found: HashMap::new(),
        raw_depth: 0,
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let _ = DupSeed(&mut ctx).deserialize(&mut de);
    ctx.found
}

// ---------------------------------------------------------------------------------------------
// The schema pass.

/// A value of the wrong type for the schema: Go's `json.UnmarshalTypeError`.
#[derive(Debug, Clone)]
pub(crate) struct TypeError {
    path: Vec<Seg>,
    /// serde's description, `invalid type: string "x", expected i32`.
    detail: String,
}

impl TypeError {
    /// As Go's `UnmarshalTypeError.Error()` words it, approximated from serde's error:
    /// `json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type
    /// int32`. The struct is guessed from the path and the Go type from serde's expectation.
    fn go_message(&self, kind: &str) -> String {
        let fields: Vec<&str> = self
            .path
            .iter()
            .filter_map(|s| match s {
                Seg::Key(k) => Some(k.as_str()),
                Seg::Index(_) => None,
            })
            .collect();
        let Some(rest) = self.detail.strip_prefix("invalid type: ") else {
            // Not a type mismatch (a bad base64 string, a bad time, a bad enum): serde's text.
            return format!("json: {}", self.detail);
        };
        let (got, want) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let got = if got.starts_with("string") {
            "string".to_string()
        } else if got.starts_with("integer") {
            "number".to_string()
        } else if let Some(f) = got.strip_prefix("floating point `") {
            format!("number {}", f.trim_end_matches('`'))
        } else if got.starts_with("map") {
            "object".to_string()
        } else if got.starts_with("sequence") {
            "array".to_string()
        } else if got.starts_with("boolean") {
            "bool".to_string()
        } else {
            got.to_string()
        };
        let want = match want {
            "i32" => "int32".to_string(),
            "i64" => "int64".to_string(),
            "a string" => "string".to_string(),
            "a boolean" => "bool".to_string(),
            "f64" => "float64".to_string(),
            "a sequence" => "[]interface {}".to_string(),
            "a map" => "map[string]string".to_string(),
            other => format!("v1.{other}"),
        };
        let owner = go_struct_of(kind, &fields);
        format!(
            "json: cannot unmarshal {got} into Go struct field {owner}.{} of type {want}",
            fields.join(".")
        )
    }
}

/// The Go struct holding the last field of `fields` (a guess by the parent field's name).
fn go_struct_of(kind: &str, fields: &[&str]) -> String {
    let n = fields.len();
    if n < 2 {
        return kind.to_string();
    }
    let parent = fields[n - 2];
    let grand = if n >= 3 { fields[n - 3] } else { "" };
    match parent {
        "metadata" => "ObjectMeta",
        "spec" if grand == "template" => "PodSpec",
        "spec" if n == 2 => return format!("{kind}Spec"),
        "status" if n == 2 => return format!("{kind}Status"),
        "template" => "PodTemplateSpec",
        "containers" | "initContainers" => "Container",
        "ephemeralContainers" => "EphemeralContainer",
        "ports" if grand == "containers" || grand == "initContainers" => "ContainerPort",
        "ports" => "ServicePort",
        "env" => "EnvVar",
        "resources" => "ResourceRequirements",
        "selector" => "LabelSelector",
        "strategy" => "DeploymentStrategy",
        "volumes" => "Volume",
        "volumeMounts" => "VolumeMount",
        "tolerations" => "Toleration",
        "ownerReferences" => "OwnerReference",
        "involvedObject" => "ObjectReference",
        other => return other.to_string(),
    }
    .to_string()
}

fn segs_of_ignored(p: &serde_ignored::Path<'_>, out: &mut Vec<Seg>) {
    match p {
        serde_ignored::Path::Root => {}
        serde_ignored::Path::Seq { parent, index } => {
            segs_of_ignored(parent, out);
            out.push(Seg::Index(*index));
        }
        serde_ignored::Path::Map { parent, key } => {
            segs_of_ignored(parent, out);
            out.push(Seg::Key(key.clone()));
        }
        serde_ignored::Path::Some { parent }
        | serde_ignored::Path::NewtypeStruct { parent }
        | serde_ignored::Path::NewtypeVariant { parent } => segs_of_ignored(parent, out),
    }
}

/// Deserializes `bytes` into `T`, returning the paths of the fields `T` does not know (in
/// document order), or the first type error.
fn unknown_fields<T: DeserializeOwned>(bytes: &[u8]) -> Result<Vec<Vec<Seg>>, TypeError> {
    let mut unknown = Vec::new();
    let result = {
        let mut cb = |p: serde_ignored::Path<'_>| {
            let mut segs = Vec::new();
            segs_of_ignored(&p, &mut segs);
            unknown.push(segs);
        };
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let ig = serde_ignored::Deserializer::new(&mut de, &mut cb);
        serde_path_to_error::deserialize::<_, T>(ig).map(drop)
    };
    match result {
        Ok(()) => Ok(unknown),
        Err(e) => {
            let path = e
                .path()
                .iter()
                .filter_map(|s| match s {
                    serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                    serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
                    _ => None,
                })
                .collect();
            let msg = e.into_inner().to_string();
            let detail = match msg.rfind(" at line ") {
                Some(i) => msg[..i].to_string(),
                None => msg,
            };
            Err(TypeError { path, detail })
        }
    }
}

/// The schema check of a built-in kind's body (or an autoscaling/v1 Scale when `scale`):
/// `None` for a kind without a schema here (custom resources).
fn schema_check(
    def: &ResourceDef,
    scale: bool,
    bytes: &[u8],
) -> Option<Result<Vec<Vec<Seg>>, TypeError>> {
    use k8s_openapi::api::{apps, autoscaling, coordination, core};
    if scale {
        return Some(unknown_fields::<autoscaling::v1::Scale>(bytes));
    }
    if !def.builtin {
        return None;
    }
    Some(match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => unknown_fields::<core::v1::Pod>(bytes),
        ("", "ConfigMap") => unknown_fields::<core::v1::ConfigMap>(bytes),
        ("", "Secret") => unknown_fields::<core::v1::Secret>(bytes),
        ("", "Service") => unknown_fields::<core::v1::Service>(bytes),
        ("", "Namespace") => unknown_fields::<core::v1::Namespace>(bytes),
        ("", "Node") => unknown_fields::<core::v1::Node>(bytes),
        ("", "Event") => unknown_fields::<core::v1::Event>(bytes),
        ("", "ServiceAccount") => unknown_fields::<core::v1::ServiceAccount>(bytes),
        ("apps", "Deployment") => unknown_fields::<apps::v1::Deployment>(bytes),
        ("apps", "ReplicaSet") => unknown_fields::<apps::v1::ReplicaSet>(bytes),
        ("coordination.k8s.io", "Lease") => unknown_fields::<coordination::v1::Lease>(bytes),
        _ => return None,
    })
}

/// Removes the value at `path` (an unknown field) from `v`.
fn remove_path(v: &mut Value, path: &[Seg]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parents {
        let next = match (seg, cur) {
            (Seg::Key(k), Value::Object(m)) => m.get_mut(k),
            (Seg::Index(i), Value::Array(a)) => a.get_mut(*i),
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let (Seg::Key(k), Value::Object(m)) = (last, cur) {
        m.remove(k);
    }
}

/// What decoding found: the strict errors (in the order Go reports them) and the type error.
struct Findings {
    value: Value,
    strict: Vec<StrictError>,
    type_error: Option<TypeError>,
}

/// Decodes `bytes` as the kind (or Scale), finding unknown and (when `dups`) duplicate fields
/// and dropping the unknown ones from the value.
fn find(
    def: &ResourceDef,
    scale: bool,
    bytes: &[u8],
    dups: bool,
) -> Result<Findings, serde_json::Error> {
    let (mut value, ctx) = parse_dups(bytes)?;
    // A body that is not an object of this kind is refused by the registry's own checks
    // (`kind_check`), with kube-apiserver's words for those, before any field is looked at.
    let other_kind = |k: &str, want: &str| {
        value
            .get(k)
            .and_then(Value::as_str)
            .is_some_and(|v| v != want)
    };
    let foreign = !value.is_object()
        || (!scale
            && (other_kind("apiVersion", &def.api_version) || other_kind("kind", &def.kind)));
    let checked = if foreign {
        None
    } else {
        schema_check(def, scale, bytes)
    };
    let mut strict = Vec::new();
    let unknown = match checked {
        None => Vec::new(),
        Some(Err(e)) => {
            return Ok(Findings {
                value,
                strict,
                type_error: Some(e),
            });
        }
        Some(Ok(u)) => u,
    };
    for p in &unknown {
        remove_path(&mut value, p);
    }
    // Go reports neither duplicates inside an unknown field (skipped whole) nor duplicates
    // of one (only known fields are tracked).
    let dup_list: Vec<(Vec<Seg>, usize)> = if dups {
        ctx.dups
            .into_iter()
            .filter(|(p, _)| !unknown.iter().any(|u| p.starts_with(u)))
            .collect()
    } else {
        Vec::new()
    };
    let mut all: Vec<(usize, StrictError)> = Vec::new();
    let positions = if !dup_list.is_empty() && !unknown.is_empty() {
        let set: HashSet<Vec<Seg>> = unknown.iter().cloned().collect();
        locate_paths(bytes, &set)
    } else {
        HashMap::new()
    };
    for (i, p) in unknown.iter().enumerate() {
        let pos = positions.get(p).copied().unwrap_or(i);
        all.push((
            pos,
            StrictError {
                kind: "unknown field",
                path: path_string(p),
            },
        ));
    }
    for (p, pos) in dup_list {
        all.push((
            pos,
            StrictError {
                kind: "duplicate field",
                path: path_string(&p),
            },
        ));
    }
    if !positions.is_empty() {
        all.sort_by_key(|(pos, _)| *pos);
    }
    for (_, e) in all {
        push_strict(&mut strict, e);
    }
    Ok(Findings {
        value,
        strict,
        type_error: None,
    })
}

/// The body of a create or update (or a `/scale` PUT when `scale`) decoded as kube-apiserver's
/// `createHandler` / `UpdateResource` decode it
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go`, `update.go`): the strict
/// decoder unless `Ignore`; strict errors fail a `Strict` request and become warnings under
/// `Warn`; a type error always fails; failures are 400s worded by `transformDecodeError`
/// (`Deployment in version "v1" cannot be handled as a Deployment: ...`). Returns the value
/// (unknown fields dropped) and the warnings.
pub(crate) fn decode_body(
    def: &ResourceDef,
    scale: bool,
    bytes: &[u8],
    fv: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    let f = find(def, scale, bytes, fv.strict_checks()).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let (kind, version) = if scale {
        ("Scale", "v1")
    } else {
        (def.kind.as_str(), def.version.as_str())
    };
    let cannot = |why: String| {
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {why}"
        ))
    };
    if let Some(e) = f.type_error {
        return Err(cannot(e.go_message(kind)));
    }
    let mut warnings = Vec::new();
    if !f.strict.is_empty() {
        match fv {
            FieldValidation::Strict => return Err(cannot(strict_decoding_error(&f.strict))),
            FieldValidation::Warn => warnings = f.strict.iter().map(ToString::to_string).collect(),
            FieldValidation::Ignore => {}
        }
    }
    Ok((f.value, warnings))
}

/// The strict errors of a merge or strategic merge patch body itself
/// (`kjson.UnmarshalStrict(patchBytes, &map[string]any{})` in `patch.go`: only duplicates, a
/// map knows every key), or of a JSON patch (`[]jsonPatchOp`: unknown operation fields too,
/// each prefixed `json patch `). Empty under `Ignore`.
pub(crate) fn patch_body_errors(
    bytes: &[u8],
    json_patch: bool,
    fv: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    if !fv.strict_checks() {
        return Ok(Vec::new());
    }
    let (v, ctx) = parse_dups(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let mut errs = Vec::new();
    if json_patch {
        if let Value::Array(ops) = &v {
            for (i, op) in ops.iter().enumerate() {
                if let Value::Object(m) = op {
                    for k in m.keys() {
                        if !matches!(k.as_str(), "op" | "path" | "from" | "value") {
                            push_strict(
                                &mut errs,
                                StrictError {
                                    kind: "unknown field",
                                    path: path_string(&[Seg::Index(i), Seg::Key(k.clone())]),
                                },
                            );
                        }
                    }
                }
            }
        }
    }
    for (p, _) in ctx.dups {
        push_strict(
            &mut errs,
            StrictError {
                kind: "duplicate field",
                path: path_string(&p),
            },
        );
    }
    let prefix = if json_patch { "json patch " } else { "" };
    Ok(errs.iter().map(|e| format!("{prefix}{e}")).collect())
}

/// How the patched object is printed in a patch's 422 (`patch: Invalid value: ...`).
pub(crate) enum PatchedRepr<'a> {
    /// JSON and merge patches print the patched object's JSON (`string(patchedObjJS)`).
    PatchedJson,
    /// Strategic merge patches print the patch map (`fmt.Sprintf("%+v", patchMap)`).
    PatchMap(&'a Value),
}

/// Decodes a patched object as the patchers of `patch.go` do (`jsonPatcher` and `smpPatcher`
/// `applyPatchToCurrentObject`, `applyPatchToObject`): unknown fields are dropped from
/// `patched`; with the patch body's own strict errors `body_errs` they fail a `Strict` request
/// and are warnings under `Warn`; a type error always fails. The failures are
/// `errors.NewInvalid(schema.GroupKind{}, "", [field.Invalid("patch", <repr>, <error>)])`.
pub(crate) fn check_patched(
    def: &ResourceDef,
    scale: bool,
    patched: &mut Value,
    body_errs: Vec<String>,
    repr: PatchedRepr<'_>,
    fv: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    // The patched object is decoded from its JSON; its keys are sorted here, where Go's
    // encoder writes struct order, so unknown fields come in key order.
    let bytes = serde_json::to_vec(&*patched).unwrap_or_default();
    let invalid = |why: String| {
        let value = match &repr {
            PatchedRepr::PatchedJson => go_quote(&String::from_utf8_lossy(&bytes)),
            PatchedRepr::PatchMap(m) => go_quote(&go_print(m)),
        };
        ApiError::invalid_errors(
            "",
            "",
            "",
            &[FieldError::invalid_printed("patch", value, why)],
        )
    };
    let f = find(def, scale, &bytes, false).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let kind = if scale { "Scale" } else { def.kind.as_str() };
    if let Some(e) = f.type_error {
        return Err(invalid(e.go_message(kind)));
    }
    *patched = f.value;
    let mut all = body_errs;
    if fv.strict_checks() {
        all.extend(f.strict.iter().map(ToString::to_string));
    }
    if all.is_empty() {
        return Ok(Vec::new());
    }
    match fv {
        FieldValidation::Strict => Err(invalid(format!(
            "strict decoding error: {}",
            all.join(", ")
        ))),
        _ => Ok(all),
    }
}

/// The unknown fields of a server-side apply body: kube-apiserver's field manager converts
/// the applied object with the kind's schema (`structuredMergeManager.Apply`,
/// `typeConverter.ObjectToTyped`), which refuses fields the schema does not declare whatever
/// `fieldValidation` says, as a plain error (a 500 with no reason): `failed to create typed
/// patch object (ns/name; apps/v1, Kind=Deployment): .spec.replica: field not declared in
/// schema`. A wrongly typed value is refused the same way. Only duplicates follow
/// `fieldValidation` (`applyPatcher`: `error strict decoding patch: ...` or a warning).
pub(crate) fn check_apply_body(
    def: &ResourceDef,
    bytes: &[u8],
    fv: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let (v, ctx) = parse_dups(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let Some(checked) = schema_check(def, false, bytes) else {
        return Ok(Vec::new());
    };
    let gvknn = || {
        let meta = |k: &str| {
            v.get("metadata")
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let gv = if def.group.is_empty() {
            format!("/{}", def.version)
        } else {
            def.api_version.clone()
        };
        format!(
            "{}/{}; {gv}, Kind={}",
            meta("namespace"),
            meta("name"),
            def.kind
        )
    };
    let fail = |errs: Vec<String>| {
        let text = if errs.len() == 1 {
            errs.concat()
        } else {
            let mut m = vec!["errors:".to_string()];
            m.extend(errs.iter().map(|e| format!("  {e}")));
            m.join("\n")
        };
        ApiError::new(
            500,
            "",
            format!("failed to create typed patch object ({}): {text}", gvknn()),
        )
    };
    match checked {
        Err(e) => {
            return Err(fail(vec![format!(
                "{}: {}",
                smd_path(&v, &e.path),
                e.detail
            )]));
        }
        Ok(unknown) if !unknown.is_empty() => {
            return Err(fail(
                unknown
                    .iter()
                    .map(|p| format!("{}: field not declared in schema", smd_path(&v, p)))
                    .collect(),
            ));
        }
        Ok(_) => {}
    }
    if ctx.dups.is_empty() || !fv.strict_checks() {
        return Ok(Vec::new());
    }
    // `yaml.UnmarshalStrict` of the body: the YAML parser's duplicate key error, with the line.
    let lines: Vec<String> = ctx
        .dups
        .iter()
        .map(|(p, _)| {
            let key = match p.last() {
                Some(Seg::Key(k)) => k.as_str(),
                _ => "",
            };
            format!("line 1: key {} already set in map", go_quote(key))
        })
        .collect();
    let err = format!(
        "error converting YAML to JSON: yaml: unmarshal errors:\n  {}",
        lines.join("\n  ")
    );
    match fv {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "error strict decoding patch: {err}"
        ))),
        _ => Ok(lines),
    }
}

/// A path as structured-merge-diff prints it (`fieldpath.Path.String()`): `.a.b`, a list item
/// by its `name` when it has one (`[name="web"]`), else by index.
fn smd_path(root: &Value, path: &[Seg]) -> String {
    let mut s = String::new();
    let mut cur = Some(root);
    for seg in path {
        match seg {
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
                cur = cur.and_then(|c| c.get(k));
            }
            Seg::Index(i) => {
                let item = cur.and_then(|c| c.get(*i));
                match item.and_then(|it| it.get("name")).and_then(Value::as_str) {
                    Some(n) => s.push_str(&format!("[name={}]", go_quote(n))),
                    None => s.push_str(&format!("[{i}]")),
                }
                cur = item;
            }
        }
    }
    s
}

/// A JSON value as Go's `%+v` prints the `map[string]interface{}` it decodes to: maps as
/// `map[k:v ...]` with sorted keys, lists as `[a b]`, strings bare, null as `<nil>`.
fn go_print(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_print).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_print(v)))
                .collect();
            format!("map[{}]", items.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apimachinery::schema::Registry;

    #[test]
    fn unknown_and_duplicate_fields_in_document_order() {
        let reg = Registry::new(&[]).unwrap();
        let def = reg.find("apps", "v1", "deployments").unwrap();
        let body = br#"{"spec":{"zz":1,"replicas":2,"replicas":3,"aa":{"x":1,"x":2},
            "template":{"spec":{"containers":[{"name":"a","imagez":"i"}]}}},
            "metadata":{"labels":{"a":"1","a":"2"}}}"#;
        let (v, w) = decode_body(def, false, body, FieldValidation::Warn).unwrap();
        assert_eq!(
            w,
            vec![
                r#"unknown field "spec.zz""#,
                r#"duplicate field "spec.replicas""#,
                r#"unknown field "spec.aa""#,
                r#"unknown field "spec.template.spec.containers[0].imagez""#,
                r#"duplicate field "metadata.labels.a""#,
            ]
        );
        assert_eq!(v["spec"]["replicas"], 3);
        assert!(v["spec"].get("zz").is_none());
        assert!(
            v["spec"]["template"]["spec"]["containers"][0]
                .get("imagez")
                .is_none()
        );
        let e = decode_body(
            def,
            false,
            br#"{"spec":{"replicas":"3"}}"#,
            FieldValidation::Ignore,
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
        );
    }
}
