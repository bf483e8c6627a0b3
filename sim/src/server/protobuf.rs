//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) of the built-in kinds that
//! kubectl's generators send (`kubectl create configmap|secret|deployment|namespace|
//! serviceaccount|service`), decoded into the JSON the same request would have carried.
//!
//! The envelope is kube's: the magic `k8s\0`, then a `runtime.Unknown` message (`typeMeta`,
//! `raw`) whose `raw` is the object (`staging/src/k8s.io/apimachinery/pkg/runtime/serializer/
//! protobuf/protobuf.go`, `Serializer.Decode`). The object is read with a schema of the messages
//! on those kinds' paths (field numbers of `k8s.io/api` and `k8s.io/apimachinery`'s
//! `generated.proto`) and written as kube's JSON encoding of the same Go value would be:
//! scalars at their zero value are left out (Go's `omitempty`) unless the Go field is a pointer
//! (proto2 presence) or has no `omitempty` (`restartCount`), embedded messages are kept
//! (`"resources": {}`), a zero `metav1.Time` is `null`, `IntOrString` is a number or a string,
//! `Quantity` a string, `bytes` base64, and an inlined Go struct (`VolumeSource` in `Volume`)
//! has its fields at its parent's level. The schema of core/v1 Pod and every message it reaches
//! is generated from k8s.io/api's `types.go` (`core_v1`); the others are written by hand.
//! Responses are encoded with the same schema (GET, LIST, WATCH of the kinds `encodes` names,
//! and the bench twin server's pods, `crate::bench`).
//!
//! The wire primitives (keys and varints) come from `prost`. A field the schema does not know,
//! or a message it does not decode, is refused when it carries a value (never silently dropped);
//! a field at its zero value carries nothing and is skipped, as kube's own decoder would make it
//! the zero value anyway.

use base64::Engine as _;
use prost::encoding::{WireType, decode_key, decode_varint};
use serde_json::{Map, Value};

/// The magic prefix of kube's protobuf encoding.
pub(crate) const PREFIX: &[u8] = b"k8s\0";

/// Why a protobuf body could not be turned into JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProtobufError {
    /// The body is empty.
    #[error("empty data")]
    Empty,
    /// The body does not start with `k8s\0`.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NotProtobuf,
    /// The body is the prefix alone.
    #[error("empty body")]
    EmptyBody,
    /// The wire data is malformed.
    #[error("proto: {0}")]
    Wire(String),
    /// A value kube's decoder would refuse (a bad time, IntOrString type, embedded JSON).
    #[error("{0}")]
    Value(String),
    /// The envelope names no kind or no version.
    #[error("Object 'Kind' is missing in '{0}'")]
    MissingKind(String),
    /// The kind is not one this server decodes from protobuf.
    #[error("kind {0} is not decoded from protobuf by kinformer-sim")]
    UnsupportedKind(String),
    /// A field with a value that the schema does not decode.
    #[error("field {field} ({number}) of {message} is not decoded from protobuf by kinformer-sim")]
    UnsupportedField {
        /// Message name.
        message: &'static str,
        /// Field name (or `?` when unknown).
        field: &'static str,
        /// Field number.
        number: u32,
    },
}

/// A field type.
#[derive(Clone, Copy)]
enum T {
    Str,
    Bool,
    I32,
    I64,
    Msg(&'static Msg),
    /// `metav1.Time` (`seconds`, `nanos`).
    Time,
    /// `intstr.IntOrString` (`type`, `intVal`, `strVal`).
    IntOrString,
    /// `map<string, string>`.
    MapStr,
    /// `map<string, bytes>`.
    MapBytes,
    /// `map<string, Quantity>`.
    MapQuantity,
    /// `resource.Quantity` (`string`).
    Quantity,
    /// An embedded Go struct inlined in JSON (`VolumeSource` in `Volume`, `ProbeHandler` in
    /// `Probe`): its own message on the wire, its fields at the parent's level in JSON.
    Inline(&'static Msg),
    /// `metav1.FieldsV1` (`Raw`: embedded JSON).
    FieldsV1,
    /// A message this schema does not decode: accepted only empty.
    Opaque,
}

/// A field: number, JSON name, type, repeated, and whether a zero value is kept (a Go pointer).
#[derive(Clone, Copy)]
struct F(u32, &'static str, T, Rep);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Rep {
    /// A value field: its zero is omitted.
    One,
    /// A pointer field: present means set, zero included.
    Ptr,
    /// A repeated field.
    Many,
    /// A value field without `omitempty` (`restartCount`, `ready`): its zero is kept.
    Req,
}

use Rep::{Many, One, Ptr, Req};

mod core_v1;
use core_v1::{LOCAL_OBJECT_REFERENCE, POD, POD_SPEC};

/// A message: name and fields.
struct Msg {
    name: &'static str,
    fields: &'static [F],
}

impl Msg {
    fn field(&self, n: u32) -> Option<&F> {
        self.fields.iter().find(|f| f.0 == n)
    }

    /// Whether `name` is a JSON field of this message, its inlined messages' included.
    fn has_json(&self, name: &str) -> bool {
        self.fields.iter().any(|f| match f.2 {
            T::Inline(m) => m.has_json(name),
            _ => f.1 == name,
        })
    }
}

// meta/v1 (k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto)
static OWNER_REFERENCE: Msg = Msg {
    name: "OwnerReference",
    fields: &[
        F(1, "kind", T::Str, One),
        F(3, "name", T::Str, One),
        F(4, "uid", T::Str, One),
        F(5, "apiVersion", T::Str, One),
        F(6, "controller", T::Bool, Ptr),
        F(7, "blockOwnerDeletion", T::Bool, Ptr),
    ],
};
static MANAGED_FIELDS_ENTRY: Msg = Msg {
    name: "ManagedFieldsEntry",
    fields: &[
        F(1, "manager", T::Str, One),
        F(2, "operation", T::Str, One),
        F(3, "apiVersion", T::Str, One),
        F(4, "time", T::Time, Ptr),
        F(6, "fieldsType", T::Str, One),
        F(7, "fieldsV1", T::FieldsV1, Ptr),
        F(8, "subresource", T::Str, One),
    ],
};
static OBJECT_META: Msg = Msg {
    name: "ObjectMeta",
    fields: &[
        F(1, "name", T::Str, One),
        F(2, "generateName", T::Str, One),
        F(3, "namespace", T::Str, One),
        F(4, "selfLink", T::Str, One),
        F(5, "uid", T::Str, One),
        F(6, "resourceVersion", T::Str, One),
        F(7, "generation", T::I64, One),
        F(8, "creationTimestamp", T::Time, One),
        F(9, "deletionTimestamp", T::Time, Ptr),
        F(10, "deletionGracePeriodSeconds", T::I64, Ptr),
        F(11, "labels", T::MapStr, One),
        F(12, "annotations", T::MapStr, One),
        F(13, "ownerReferences", T::Msg(&OWNER_REFERENCE), Many),
        F(14, "finalizers", T::Str, Many),
        F(17, "managedFields", T::Msg(&MANAGED_FIELDS_ENTRY), Many),
    ],
};
static LABEL_SELECTOR_REQUIREMENT: Msg = Msg {
    name: "LabelSelectorRequirement",
    fields: &[
        F(1, "key", T::Str, One),
        F(2, "operator", T::Str, One),
        F(3, "values", T::Str, Many),
    ],
};
static LABEL_SELECTOR: Msg = Msg {
    name: "LabelSelector",
    fields: &[
        F(1, "matchLabels", T::MapStr, One),
        F(
            2,
            "matchExpressions",
            T::Msg(&LABEL_SELECTOR_REQUIREMENT),
            Many,
        ),
    ],
};

// core/v1 (k8s.io/api/core/v1/generated.proto)
static CONFIG_MAP: Msg = Msg {
    name: "ConfigMap",
    fields: &[
        F(1, "metadata", T::Msg(&OBJECT_META), One),
        F(2, "data", T::MapStr, One),
        F(3, "binaryData", T::MapBytes, One),
        F(4, "immutable", T::Bool, Ptr),
    ],
};
static SECRET: Msg = Msg {
    name: "Secret",
    fields: &[
        F(1, "metadata", T::Msg(&OBJECT_META), One),
        F(2, "data", T::MapBytes, One),
        F(3, "type", T::Str, One),
        F(4, "stringData", T::MapStr, One),
        F(5, "immutable", T::Bool, Ptr),
    ],
};
static NAMESPACE_SPEC: Msg = Msg {
    name: "NamespaceSpec",
    fields: &[F(1, "finalizers", T::Str, Many)],
};
static NAMESPACE_STATUS: Msg = Msg {
    name: "NamespaceStatus",
    fields: &[
        F(1, "phase", T::Str, One),
        F(2, "conditions", T::Opaque, Many),
    ],
};
static NAMESPACE: Msg = Msg {
    name: "Namespace",
    fields: &[
        F(1, "metadata", T::Msg(&OBJECT_META), One),
        F(2, "spec", T::Msg(&NAMESPACE_SPEC), One),
        F(3, "status", T::Msg(&NAMESPACE_STATUS), One),
    ],
};
static OBJECT_REFERENCE: Msg = Msg {
    name: "ObjectReference",
    fields: &[
        F(1, "kind", T::Str, One),
        F(2, "namespace", T::Str, One),
        F(3, "name", T::Str, One),
        F(4, "uid", T::Str, One),
        F(5, "apiVersion", T::Str, One),
        F(6, "resourceVersion", T::Str, One),
        F(7, "fieldPath", T::Str, One),
    ],
};
static SERVICE_ACCOUNT: Msg = Msg {
    name: "ServiceAccount",
    fields: &[
        F(1, "metadata", T::Msg(&OBJECT_META), One),
        F(2, "secrets", T::Msg(&OBJECT_REFERENCE), Many),
        F(3, "imagePullSecrets", T::Msg(&LOCAL_OBJECT_REFERENCE), Many),
        F(4, "automountServiceAccountToken", T::Bool, Ptr),
    ],
};
static SERVICE_PORT: Msg = Msg {
    name: "ServicePort",
    fields: &[
        F(1, "name", T::Str, One),
        F(2, "protocol", T::Str, One),
        F(3, "port", T::I32, One),
        F(4, "targetPort", T::IntOrString, One),
        F(5, "nodePort", T::I32, One),
        F(6, "appProtocol", T::Str, Ptr),
    ],
};
static SERVICE_SPEC: Msg = Msg {
    name: "ServiceSpec",
    fields: &[
        F(1, "ports", T::Msg(&SERVICE_PORT), Many),
        F(2, "selector", T::MapStr, One),
        F(3, "clusterIP", T::Str, One),
        F(4, "type", T::Str, One),
        F(5, "externalIPs", T::Str, Many),
        F(7, "sessionAffinity", T::Str, One),
        F(8, "loadBalancerIP", T::Str, One),
        F(9, "loadBalancerSourceRanges", T::Str, Many),
        F(10, "externalName", T::Str, One),
        F(11, "externalTrafficPolicy", T::Str, One),
        F(12, "healthCheckNodePort", T::I32, One),
        F(13, "publishNotReadyAddresses", T::Bool, One),
        F(14, "sessionAffinityConfig", T::Opaque, Ptr),
        F(17, "ipFamilyPolicy", T::Str, Ptr),
        F(18, "clusterIPs", T::Str, Many),
        F(19, "ipFamilies", T::Str, Many),
        F(20, "allocateLoadBalancerNodePorts", T::Bool, Ptr),
        F(21, "loadBalancerClass", T::Str, Ptr),
        F(22, "internalTrafficPolicy", T::Str, Ptr),
        F(23, "trafficDistribution", T::Str, Ptr),
    ],
};
static LOAD_BALANCER_STATUS: Msg = Msg {
    name: "LoadBalancerStatus",
    fields: &[F(1, "ingress", T::Opaque, Many)],
};
static SERVICE_STATUS: Msg = Msg {
    name: "ServiceStatus",
    fields: &[
        F(1, "loadBalancer", T::Msg(&LOAD_BALANCER_STATUS), One),
        F(2, "conditions", T::Opaque, Many),
    ],
};
static SERVICE: Msg = Msg {
    name: "Service",
    fields: &[
        F(1, "metadata", T::Msg(&OBJECT_META), One),
        F(2, "spec", T::Msg(&SERVICE_SPEC), One),
        F(3, "status", T::Msg(&SERVICE_STATUS), One),
    ],
};
static POD_TEMPLATE_SPEC: Msg = Msg {
    name: "PodTemplateSpec",
    fields: &[
        F(1, "metadata", T::Msg(&OBJECT_META), One),
        F(2, "spec", T::Msg(&POD_SPEC), One),
    ],
};

// apps/v1 (k8s.io/api/apps/v1/generated.proto)
static ROLLING_UPDATE_DEPLOYMENT: Msg = Msg {
    name: "RollingUpdateDeployment",
    fields: &[
        F(1, "maxUnavailable", T::IntOrString, Ptr),
        F(2, "maxSurge", T::IntOrString, Ptr),
    ],
};
static DEPLOYMENT_STRATEGY: Msg = Msg {
    name: "DeploymentStrategy",
    fields: &[
        F(1, "type", T::Str, One),
        F(2, "rollingUpdate", T::Msg(&ROLLING_UPDATE_DEPLOYMENT), Ptr),
    ],
};
static DEPLOYMENT_SPEC: Msg = Msg {
    name: "DeploymentSpec",
    fields: &[
        F(1, "replicas", T::I32, Ptr),
        F(2, "selector", T::Msg(&LABEL_SELECTOR), Ptr),
        F(3, "template", T::Msg(&POD_TEMPLATE_SPEC), One),
        F(4, "strategy", T::Msg(&DEPLOYMENT_STRATEGY), One),
        F(5, "minReadySeconds", T::I32, One),
        F(6, "revisionHistoryLimit", T::I32, Ptr),
        F(7, "paused", T::Bool, One),
        F(9, "progressDeadlineSeconds", T::I32, Ptr),
    ],
};
static DEPLOYMENT_STATUS: Msg = Msg {
    name: "DeploymentStatus",
    fields: &[
        F(1, "observedGeneration", T::I64, One),
        F(2, "replicas", T::I32, One),
        F(3, "updatedReplicas", T::I32, One),
        F(4, "availableReplicas", T::I32, One),
        F(5, "unavailableReplicas", T::I32, One),
        F(6, "conditions", T::Opaque, Many),
        F(7, "readyReplicas", T::I32, One),
        F(8, "collisionCount", T::I32, Ptr),
        F(9, "terminatingReplicas", T::I32, Ptr),
    ],
};
static DEPLOYMENT: Msg = Msg {
    name: "Deployment",
    fields: &[
        F(1, "metadata", T::Msg(&OBJECT_META), One),
        F(2, "spec", T::Msg(&DEPLOYMENT_SPEC), One),
        F(3, "status", T::Msg(&DEPLOYMENT_STATUS), One),
    ],
};
static REPLICA_SET_SPEC: Msg = Msg {
    name: "ReplicaSetSpec",
    fields: &[
        F(1, "replicas", T::I32, Ptr),
        F(2, "selector", T::Msg(&LABEL_SELECTOR), Ptr),
        F(3, "template", T::Msg(&POD_TEMPLATE_SPEC), One),
        F(4, "minReadySeconds", T::I32, One),
    ],
};
static REPLICA_SET_STATUS: Msg = Msg {
    name: "ReplicaSetStatus",
    fields: &[
        F(1, "replicas", T::I32, One),
        F(2, "fullyLabeledReplicas", T::I32, One),
        F(3, "observedGeneration", T::I64, One),
        F(4, "readyReplicas", T::I32, One),
        F(5, "availableReplicas", T::I32, One),
        F(6, "conditions", T::Opaque, Many),
        F(7, "terminatingReplicas", T::I32, Ptr),
    ],
};
static REPLICA_SET: Msg = Msg {
    name: "ReplicaSet",
    fields: &[
        F(1, "metadata", T::Msg(&OBJECT_META), One),
        F(2, "spec", T::Msg(&REPLICA_SET_SPEC), One),
        F(3, "status", T::Msg(&REPLICA_SET_STATUS), One),
    ],
};

/// The kinds decoded from protobuf, by (apiVersion, kind).
fn schema_of(api_version: &str, kind: &str) -> Option<&'static Msg> {
    Some(match (api_version, kind) {
        ("v1", "ConfigMap") => &CONFIG_MAP,
        ("v1", "Secret") => &SECRET,
        ("v1", "Namespace") => &NAMESPACE,
        ("v1", "ServiceAccount") => &SERVICE_ACCOUNT,
        ("v1", "Service") => &SERVICE,
        ("v1", "Pod") => &POD,
        ("apps/v1", "Deployment") => &DEPLOYMENT,
        ("apps/v1", "ReplicaSet") => &REPLICA_SET,
        _ => return None,
    })
}

/// Whether objects of (apiVersion, kind) can be sent as protobuf.
pub(crate) fn decodes(api_version: &str, kind: &str) -> bool {
    schema_of(api_version, kind).is_some()
}

/// Whether the content type (parameters ignored) is kube's protobuf.
pub(crate) fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().map(str::trim) == Some("application/vnd.kubernetes.protobuf")
}

fn wire(e: impl std::fmt::Display) -> ProtobufError {
    ProtobufError::Wire(e.to_string())
}

/// One field read from the wire.
enum Val<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed(u64),
}

/// Reads the fields of one message, in order.
fn fields(mut buf: &[u8]) -> impl Iterator<Item = Result<(u32, Val<'_>), ProtobufError>> {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let r = (|| {
            let (n, wt) = decode_key(&mut buf).map_err(wire)?;
            let v = match wt {
                WireType::Varint => Val::Varint(decode_varint(&mut buf).map_err(wire)?),
                WireType::LengthDelimited => {
                    let len = usize::try_from(decode_varint(&mut buf).map_err(wire)?)
                        .map_err(|_| wire("length out of range"))?;
                    if len > buf.len() {
                        return Err(wire("unexpected EOF"));
                    }
                    let (b, rest) = buf.split_at(len);
                    buf = rest;
                    Val::Len(b)
                }
                WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
                    let w = if wt == WireType::SixtyFourBit { 8 } else { 4 };
                    if w > buf.len() {
                        return Err(wire("unexpected EOF"));
                    }
                    let (b, rest) = buf.split_at(w);
                    buf = rest;
                    Val::Fixed(b.iter().rev().fold(0, |a, x| (a << 8) | u64::from(*x)))
                }
                WireType::StartGroup | WireType::EndGroup => {
                    return Err(wire("groups are not used by kube's messages"));
                }
            };
            Ok((n, v))
        })();
        if r.is_err() {
            // Stop after the first error.
            buf = &[];
        }
        Some(r)
    })
}

fn is_zero(v: &Val<'_>) -> bool {
    match v {
        Val::Varint(x) | Val::Fixed(x) => *x == 0,
        Val::Len(b) => b.is_empty(),
    }
}

fn varint(v: &Val<'_>, msg: &'static Msg, f: &F) -> Result<u64, ProtobufError> {
    match v {
        Val::Varint(x) => Ok(*x),
        _ => Err(wire(format!("wrong wire type for {}.{}", msg.name, f.1))),
    }
}

fn bytes<'a>(v: &Val<'a>, msg: &'static Msg, f: &F) -> Result<&'a [u8], ProtobufError> {
    match v {
        Val::Len(b) => Ok(b),
        _ => Err(wire(format!("wrong wire type for {}.{}", msg.name, f.1))),
    }
}

fn string(b: &[u8]) -> String {
    // Go strings may hold any bytes; kube's JSON encoder writes invalid UTF-8 as U+FFFD.
    String::from_utf8_lossy(b).into_owned()
}

/// `metav1.Time` as kube writes it in JSON: RFC 3339 in seconds, `null` when zero.
fn time(b: &[u8]) -> Result<Value, ProtobufError> {
    const GO_ZERO: i64 = -62_135_596_800; // time.Time{}.Unix()
    const YEAR_10000: i64 = 253_402_300_800;
    let (mut secs, mut nanos) = (0_i64, 0_i64);
    for r in fields(b) {
        match r? {
            (1, Val::Varint(x)) => secs = x as i64,
            (2, Val::Varint(x)) => nanos = i64::from(x as i32),
            (_, v) if is_zero(&v) => {}
            (n, _) => {
                return Err(ProtobufError::Value(format!(
                    "unexpected field {n} in a Time"
                )));
            }
        }
    }
    if b.is_empty() || (secs == GO_ZERO && nanos == 0) {
        return Ok(Value::Null);
    }
    if !(GO_ZERO..YEAR_10000).contains(&secs) {
        return Err(ProtobufError::Value(
            "Time.MarshalJSON: year outside of range [0,9999]".into(),
        ));
    }
    Ok(Value::String(crate::apimachinery::util::format_rfc3339(
        secs,
    )))
}

fn int_or_string(b: &[u8]) -> Result<Value, ProtobufError> {
    let (mut ty, mut int_val, mut str_val) = (0_i64, 0_i32, String::new());
    for r in fields(b) {
        match r? {
            (1, Val::Varint(x)) => ty = x as i64,
            (2, Val::Varint(x)) => int_val = x as i32,
            (3, Val::Len(s)) => str_val = string(s),
            (_, v) if is_zero(&v) => {}
            (n, _) => {
                return Err(ProtobufError::Value(format!(
                    "unexpected field {n} in an IntOrString"
                )));
            }
        }
    }
    match ty {
        0 => Ok(Value::from(int_val)),
        1 => Ok(Value::String(str_val)),
        _ => Err(ProtobufError::Value("impossible IntOrString.Type".into())),
    }
}

fn quantity(b: &[u8]) -> Result<Value, ProtobufError> {
    let mut s = String::new();
    for r in fields(b) {
        match r? {
            (1, Val::Len(x)) => s = string(x),
            (_, v) if is_zero(&v) => {}
            (n, _) => {
                return Err(ProtobufError::Value(format!(
                    "unexpected field {n} in a Quantity"
                )));
            }
        }
    }
    Ok(Value::String(s))
}

/// One map entry (`key` = 1, `value` = 2).
fn map_entry(b: &[u8], value: T) -> Result<(String, Value), ProtobufError> {
    let mut key = String::new();
    let mut val: Option<&[u8]> = None;
    for r in fields(b) {
        match r? {
            (1, Val::Len(k)) => key = string(k),
            (2, Val::Len(v)) => val = Some(v),
            (_, v) if is_zero(&v) => {}
            (n, _) => {
                return Err(ProtobufError::Value(format!(
                    "unexpected field {n} in a map entry"
                )));
            }
        }
    }
    let v = val.unwrap_or(&[]);
    let json = match value {
        T::MapBytes => Value::String(base64::engine::general_purpose::STANDARD.encode(v)),
        T::MapQuantity => quantity(v)?,
        _ => Value::String(string(v)),
    };
    Ok((key, json))
}

/// Decodes one message of `msg` into its JSON object.
fn message(b: &[u8], msg: &'static Msg) -> Result<Map<String, Value>, ProtobufError> {
    let mut out = Map::new();
    for r in fields(b) {
        let (n, v) = r?;
        let Some(f) = msg.field(n) else {
            if is_zero(&v) {
                continue;
            }
            return Err(ProtobufError::UnsupportedField {
                message: msg.name,
                field: "?",
                number: n,
            });
        };
        let F(_, name, ty, rep) = *f;
        let json = match ty {
            T::Str => Value::String(string(bytes(&v, msg, f)?)),
            T::Bool => Value::Bool(varint(&v, msg, f)? != 0),
            T::I32 => Value::from(varint(&v, msg, f)? as i32),
            T::I64 => Value::from(varint(&v, msg, f)? as i64),
            T::Msg(m) => Value::Object(message(bytes(&v, msg, f)?, m)?),
            T::Inline(m) => {
                out.extend(message(bytes(&v, msg, f)?, m)?);
                continue;
            }
            T::Quantity => quantity(bytes(&v, msg, f)?)?,
            T::Time => time(bytes(&v, msg, f)?)?,
            T::IntOrString => int_or_string(bytes(&v, msg, f)?)?,
            T::FieldsV1 => {
                let mut raw: &[u8] = &[];
                for r in fields(bytes(&v, msg, f)?) {
                    if let (1, Val::Len(x)) = r? {
                        raw = x;
                    }
                }
                if raw.is_empty() {
                    Value::Object(Map::new())
                } else {
                    serde_json::from_slice(raw)
                        .map_err(|e| ProtobufError::Value(format!("fieldsV1: {e}")))?
                }
            }
            T::MapStr | T::MapBytes | T::MapQuantity => {
                let (k, val) = map_entry(bytes(&v, msg, f)?, ty)?;
                if let Value::Object(m) =
                    out.entry(name).or_insert_with(|| Value::Object(Map::new()))
                {
                    m.insert(k, val);
                }
                continue;
            }
            T::Opaque => {
                if !bytes(&v, msg, f)?.is_empty() {
                    return Err(ProtobufError::UnsupportedField {
                        message: msg.name,
                        field: name,
                        number: n,
                    });
                }
                Value::Object(Map::new())
            }
        };
        match rep {
            Many => {
                if let Value::Array(a) = out.entry(name).or_insert_with(|| Value::Array(Vec::new()))
                {
                    a.push(json);
                }
            }
            Ptr | Req => {
                out.insert(name.to_string(), json);
            }
            One => {
                let zero = match &json {
                    Value::String(s) => s.is_empty(),
                    Value::Bool(b) => !b,
                    Value::Number(x) => x.as_i64() == Some(0),
                    _ => false,
                };
                if zero {
                    out.remove(name);
                } else {
                    out.insert(name.to_string(), json);
                }
            }
        }
    }
    Ok(out)
}

/// A decoding failure, with the (apiVersion, kind) of the envelope when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeFailure {
    /// The envelope's (apiVersion, kind), when the envelope was read.
    pub gvk: Option<(String, String)>,
    /// What failed.
    pub error: ProtobufError,
}

impl From<ProtobufError> for DecodeFailure {
    fn from(error: ProtobufError) -> Self {
        Self { gvk: None, error }
    }
}

/// Decodes a `k8s\0`-prefixed `runtime.Unknown` into the object's JSON (with its `apiVersion`
/// and `kind`).
pub(crate) fn decode(body: &[u8]) -> Result<Value, DecodeFailure> {
    decode_as(body, false)
}

/// [`decode`], and a `Status` too when `status` (a watch's ERROR event).
fn decode_as(body: &[u8], status: bool) -> Result<Value, DecodeFailure> {
    let (api_version, kind, raw) = unwrap_envelope(body)?;
    let gvk = Some((api_version.clone(), kind.clone()));
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Status") if status => Some(&STATUS),
        (a, k) => schema_of(a, k),
    };
    let Some(msg) = schema else {
        return Err(DecodeFailure {
            gvk,
            error: ProtobufError::UnsupportedKind(format!("{api_version}/{kind}")),
        });
    };
    let fields = message(raw, msg).map_err(|error| DecodeFailure { gvk, error })?;
    let mut obj = Map::new();
    obj.insert("kind".into(), Value::String(kind));
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.extend(fields);
    Ok(Value::Object(obj))
}

/// Decodes a `<Kind>List` as [`encode_list`] writes it: the list's `metadata`, and its items
/// with the `apiVersion` and `kind` of the list's kind (protobuf list items carry none).
pub(crate) fn decode_list(body: &[u8]) -> Result<(Value, Vec<Value>), DecodeFailure> {
    let (api_version, list_kind, raw) = unwrap_envelope(body)?;
    let gvk = Some((api_version.clone(), list_kind.clone()));
    let fail = |error| DecodeFailure {
        gvk: gvk.clone(),
        error,
    };
    let kind = list_kind.strip_suffix("List").unwrap_or("");
    let msg = schema_of(&api_version, kind).ok_or_else(|| {
        fail(ProtobufError::UnsupportedKind(format!(
            "{api_version}/{list_kind}"
        )))
    })?;
    let (mut meta, mut items) = (Map::new(), Vec::new());
    for r in fields(raw) {
        match r.map_err(fail)? {
            (1, Val::Len(b)) => meta = message(b, &LIST_META).map_err(fail)?,
            (2, Val::Len(b)) => {
                let mut obj = Map::new();
                obj.insert("kind".into(), Value::String(kind.to_string()));
                obj.insert("apiVersion".into(), Value::String(api_version.clone()));
                obj.extend(message(b, msg).map_err(fail)?);
                items.push(Value::Object(obj));
            }
            (n, _) => return Err(fail(wire(format!("unexpected field {n} in a list")))),
        }
    }
    Ok((Value::Object(meta), items))
}

/// Decodes one watch frame's `metav1.WatchEvent` (the 4-byte length already taken off): its
/// type and object.
pub(crate) fn decode_watch_event(ev: &[u8]) -> Result<(String, Value), DecodeFailure> {
    let (mut etype, mut object) = (String::new(), None);
    for r in fields(ev) {
        match r? {
            (1, Val::Len(b)) => etype = string(b),
            (2, Val::Len(ext)) => {
                for r in fields(ext) {
                    if let (1, Val::Len(raw)) = r? {
                        object = Some(decode_as(raw, true)?);
                    }
                }
            }
            (n, _) => return Err(wire(format!("unexpected field {n} in a WatchEvent")).into()),
        }
    }
    let object = object.ok_or_else(|| wire("a WatchEvent without an object"))?;
    Ok((etype, object))
}

/// The envelope's (apiVersion, kind) and `raw`.
fn unwrap_envelope(body: &[u8]) -> Result<(String, String, &[u8]), DecodeFailure> {
    if body.is_empty() {
        return Err(ProtobufError::Empty.into());
    }
    let Some(data) = body.strip_prefix(PREFIX) else {
        return Err(ProtobufError::NotProtobuf.into());
    };
    if data.is_empty() {
        return Err(ProtobufError::EmptyBody.into());
    }
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for r in fields(data) {
        match r? {
            (1, Val::Len(tm)) => {
                for r in fields(tm) {
                    match r? {
                        (1, Val::Len(x)) => api_version = string(x),
                        (2, Val::Len(x)) => kind = string(x),
                        _ => {}
                    }
                }
            }
            (2, Val::Len(x)) => raw = x,
            // contentEncoding, contentType: kube sends them empty.
            (3 | 4, Val::Len(_)) => {}
            (n, _) => {
                return Err(wire(format!("unexpected field {n} in runtime.Unknown")).into());
            }
        }
    }
    if kind.is_empty() || api_version.is_empty() {
        return Err(ProtobufError::MissingKind(format!(
            "runtime.TypeMeta{{APIVersion:{api_version:?}, Kind:{kind:?}}}"
        ))
        .into());
    }
    Ok((api_version, kind, raw))
}

// Responses (`application/vnd.kubernetes.protobuf`): the same schema, the other way
// (`Serializer.Encode`: the `k8s\0` prefix and a `runtime.Unknown` whose `raw` is the
// object's message). Fields are written in field-number order, as gogo-protobuf's generated
// `Marshal` writes them; a field absent from the JSON is not written (Go writes the zero value
// of a non-pointer field, which decodes to the same object).

static LIST_META: Msg = Msg {
    name: "ListMeta",
    fields: &[
        F(1, "selfLink", T::Str, One),
        F(2, "resourceVersion", T::Str, One),
        F(3, "continue", T::Str, One),
        F(4, "remainingItemCount", T::I64, Ptr),
    ],
};
static STATUS_CAUSE: Msg = Msg {
    name: "StatusCause",
    fields: &[
        F(1, "reason", T::Str, One),
        F(2, "message", T::Str, One),
        F(3, "field", T::Str, One),
    ],
};
static STATUS_DETAILS: Msg = Msg {
    name: "StatusDetails",
    fields: &[
        F(1, "name", T::Str, One),
        F(2, "group", T::Str, One),
        F(3, "kind", T::Str, One),
        F(4, "causes", T::Msg(&STATUS_CAUSE), Many),
        F(5, "retryAfterSeconds", T::I32, One),
        F(6, "uid", T::Str, One),
    ],
};
static STATUS: Msg = Msg {
    name: "Status",
    fields: &[
        F(1, "metadata", T::Msg(&LIST_META), One),
        F(2, "status", T::Str, One),
        F(3, "message", T::Str, One),
        F(4, "reason", T::Str, One),
        F(5, "details", T::Msg(&STATUS_DETAILS), Ptr),
        F(6, "code", T::I32, One),
    ],
};

/// Why an object is answered as JSON rather than protobuf.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EncodeError {
    /// No protobuf schema for the kind here (custom kinds have none on kube-apiserver either).
    #[error("no protobuf encoding of {0}")]
    Kind(String),
    /// A field with a value this schema does not encode.
    #[error("field {0} is not encoded to protobuf by kinformer-sim")]
    Field(String),
}

fn put_key(out: &mut Vec<u8>, n: u32, wt: WireType) {
    prost::encoding::encode_key(n, wt, out);
}

fn put_len(out: &mut Vec<u8>, n: u32, b: &[u8]) {
    put_key(out, n, WireType::LengthDelimited);
    prost::encoding::encode_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

fn put_varint(out: &mut Vec<u8>, n: u32, v: u64) {
    put_key(out, n, WireType::Varint);
    prost::encoding::encode_varint(v, out);
}

fn bad(msg: &Msg, f: &F) -> EncodeError {
    EncodeError::Field(format!("{}.{}", msg.name, f.1))
}

/// One value of field `f` (an element, for a repeated field).
fn encode_one(out: &mut Vec<u8>, msg: &Msg, f: &F, v: &Value) -> Result<(), EncodeError> {
    let n = f.0;
    match f.2 {
        T::Str => put_len(out, n, v.as_str().ok_or_else(|| bad(msg, f))?.as_bytes()),
        T::Bool => put_varint(out, n, u64::from(v.as_bool().ok_or_else(|| bad(msg, f))?)),
        // Go's `encodeVarint(uint64(v))`: a negative int32 is sign-extended to 10 bytes.
        T::I32 | T::I64 => {
            put_varint(out, n, v.as_i64().ok_or_else(|| bad(msg, f))? as u64);
        }
        T::Msg(m) => {
            let o = v.as_object().ok_or_else(|| bad(msg, f))?;
            put_len(out, n, &encode_message(o, m)?);
        }
        T::Inline(_) => return Err(bad(msg, f)),
        T::Quantity => {
            let mut q = Vec::new();
            put_len(&mut q, 1, v.as_str().ok_or_else(|| bad(msg, f))?.as_bytes());
            put_len(out, n, &q);
        }
        T::Time => {
            let Some(s) = v.as_str() else {
                // A zero `metav1.Time` (`null`) is an empty message.
                put_len(out, n, &[]);
                return Ok(());
            };
            let secs = crate::apimachinery::util::parse_rfc3339(s).ok_or_else(|| bad(msg, f))?;
            let mut t = Vec::new();
            put_varint(&mut t, 1, secs as u64);
            put_varint(&mut t, 2, 0);
            put_len(out, n, &t);
        }
        T::IntOrString => {
            let mut t = Vec::new();
            match v {
                Value::Number(x) => {
                    put_varint(&mut t, 1, 0);
                    put_varint(&mut t, 2, x.as_i64().ok_or_else(|| bad(msg, f))? as u64);
                    put_len(&mut t, 3, b"");
                }
                Value::String(x) => {
                    put_varint(&mut t, 1, 1);
                    put_varint(&mut t, 2, 0);
                    put_len(&mut t, 3, x.as_bytes());
                }
                _ => return Err(bad(msg, f)),
            }
            put_len(out, n, &t);
        }
        T::MapStr | T::MapBytes | T::MapQuantity => {
            // gogo-protobuf writes map entries sorted by key (serde_json's map is sorted).
            for (k, x) in v.as_object().ok_or_else(|| bad(msg, f))? {
                let mut e = Vec::new();
                put_len(&mut e, 1, k.as_bytes());
                let s = x.as_str().ok_or_else(|| bad(msg, f))?;
                match f.2 {
                    T::MapBytes => {
                        let b = base64::engine::general_purpose::STANDARD
                            .decode(s)
                            .map_err(|_| bad(msg, f))?;
                        put_len(&mut e, 2, &b);
                    }
                    T::MapQuantity => {
                        let mut q = Vec::new();
                        put_len(&mut q, 1, s.as_bytes());
                        put_len(&mut e, 2, &q);
                    }
                    _ => put_len(&mut e, 2, s.as_bytes()),
                }
                put_len(out, n, &e);
            }
        }
        T::FieldsV1 => {
            let raw = serde_json::to_vec(v).map_err(|_| bad(msg, f))?;
            let mut t = Vec::new();
            put_len(&mut t, 1, &raw);
            put_len(out, n, &t);
        }
        T::Opaque => return Err(bad(msg, f)),
    }
    Ok(())
}

/// A message from its JSON object; every key must be a field of the schema.
fn encode_message(o: &Map<String, Value>, msg: &Msg) -> Result<Vec<u8>, EncodeError> {
    encode_message_except(o, msg, &[])
}

/// [`encode_message`], the keys `skip` (an object's `apiVersion` and `kind`) left out.
fn encode_message_except(
    o: &Map<String, Value>,
    msg: &Msg,
    skip: &[&str],
) -> Result<Vec<u8>, EncodeError> {
    if let Some(k) = o
        .keys()
        .find(|k| !skip.contains(&k.as_str()) && !msg.has_json(k))
    {
        return Err(EncodeError::Field(format!("{}.{k}", msg.name)));
    }
    let mut out = Vec::new();
    encode_fields(o, msg, &mut out)?;
    Ok(out)
}

/// The fields of `msg` found in `o` (keys already checked), in field-number order.
fn encode_fields(o: &Map<String, Value>, msg: &Msg, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    for f in msg.fields {
        if let T::Inline(m) = f.2 {
            // The embedded struct's fields are the object's own; Go writes the struct (not a
            // pointer) even when empty.
            let mut sub = Vec::new();
            encode_fields(o, m, &mut sub)?;
            put_len(out, f.0, &sub);
            continue;
        }
        let Some(v) = o.get(f.1) else { continue };
        if v.is_null() && !matches!(f.2, T::Time) {
            continue;
        }
        match (f.3, v) {
            (Many, Value::Array(items)) => {
                for item in items {
                    encode_one(out, msg, f, item)?;
                }
            }
            (Many, _) => return Err(bad(msg, f)),
            // An empty value of an opaque field carries nothing.
            _ if matches!(f.2, T::Opaque) && is_empty_json(v) => {}
            // A nil `*metav1.Time` is not written; a zero `metav1.Time` value is an empty
            // message (it decodes back to `null`).
            _ if matches!(f.2, T::Time) && v.is_null() && f.3 == Ptr => {}
            _ => encode_one(out, msg, f, v)?,
        }
    }
    Ok(())
}

fn is_empty_json(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// The `k8s\0` + `runtime.Unknown` envelope around an encoded message.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut tm = Vec::new();
    put_len(&mut tm, 1, api_version.as_bytes());
    put_len(&mut tm, 2, kind.as_bytes());
    let mut out = PREFIX.to_vec();
    put_len(&mut out, 1, &tm);
    put_len(&mut out, 2, raw);
    put_len(&mut out, 3, b"");
    put_len(&mut out, 4, b"");
    out
}

/// The message of `obj` (of kind `kind`, apiVersion `api_version`) without its type fields (and
/// without the envelope): what [`list_of_messages`] and [`watch_frame_of_message`] take.
pub(crate) fn object_message(
    api_version: &str,
    kind: &str,
    obj: &Value,
) -> Result<Vec<u8>, EncodeError> {
    let msg = match (api_version, kind) {
        ("v1", "Status") => &STATUS,
        _ => schema_of(api_version, kind)
            .ok_or_else(|| EncodeError::Kind(format!("{api_version}/{kind}")))?,
    };
    match obj.as_object() {
        Some(o) => encode_message_except(o, msg, &["apiVersion", "kind"]),
        None => encode_message(&Map::new(), msg),
    }
}

/// Whether objects of (apiVersion, kind) are answered as protobuf when the client prefers it:
/// the kinds whose every field the schema above encodes. kube-apiserver serves protobuf for
/// every built-in kind (not for custom kinds, whose serializer is JSON only); the sim's schema
/// covers the whole of Pod (generated, `core_v1`) but leaves parts of services, deployments and
/// replica sets opaque (conditions, load balancer ingress...), so those, like custom kinds, are
/// answered as JSON, the client's next choice.
pub(crate) fn encodes(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        (
            "v1",
            "ConfigMap" | "Secret" | "Namespace" | "ServiceAccount" | "Pod"
        )
    )
}

/// One object as kube's protobuf serializer writes it.
pub(crate) fn encode_object(
    api_version: &str,
    kind: &str,
    obj: &Value,
) -> Result<Vec<u8>, EncodeError> {
    Ok(envelope(
        api_version,
        kind,
        &object_message(api_version, kind, obj)?,
    ))
}

/// A list (`<Kind>List`: `metadata` 1, `items` 2) of objects of `kind`.
pub(crate) fn encode_list(
    api_version: &str,
    kind: &str,
    list_meta: &Value,
    items: &[Value],
) -> Result<Vec<u8>, EncodeError> {
    let msgs = items
        .iter()
        .map(|item| object_message(api_version, kind, item))
        .collect::<Result<Vec<_>, _>>()?;
    list_of_messages(api_version, kind, list_meta, msgs.iter().map(Vec::as_slice))
}

/// A list as [`encode_list`] writes it, from items already encoded by [`object_message`] (the
/// bench twin server renders its pods once and lists pages of them).
pub(crate) fn list_of_messages<'a>(
    api_version: &str,
    kind: &str,
    list_meta: &Value,
    items: impl Iterator<Item = &'a [u8]>,
) -> Result<Vec<u8>, EncodeError> {
    let mut raw = Vec::new();
    let meta = list_meta.as_object().cloned().unwrap_or_default();
    put_len(&mut raw, 1, &encode_message(&meta, &LIST_META)?);
    for item in items {
        put_len(&mut raw, 2, item);
    }
    Ok(envelope(api_version, &format!("{kind}List"), &raw))
}

/// One watch frame (`application/vnd.kubernetes.protobuf;stream=watch`): a 4-byte big-endian
/// length, then a `metav1.WatchEvent` (`type` 1, `object` 2: a `runtime.RawExtension` whose
/// `raw` is the object as `encode_object` writes it), written without an envelope
/// (`protobuf.NewRawSerializer` and `LengthDelimitedFramer`).
pub(crate) fn encode_watch_frame(
    etype: &str,
    api_version: &str,
    kind: &str,
    obj: &Value,
) -> Result<Vec<u8>, EncodeError> {
    watch_frame_of_message(
        etype,
        api_version,
        kind,
        &object_message(api_version, kind, obj)?,
    )
}

/// A watch frame as [`encode_watch_frame`] writes it, from an object already encoded by
/// [`object_message`].
pub(crate) fn watch_frame_of_message(
    etype: &str,
    api_version: &str,
    kind: &str,
    msg: &[u8],
) -> Result<Vec<u8>, EncodeError> {
    let object = envelope(api_version, kind, msg);
    let mut ext = Vec::new();
    put_len(&mut ext, 1, &object);
    let mut ev = Vec::new();
    put_len(&mut ev, 1, etype.as_bytes());
    put_len(&mut ev, 2, &ext);
    let len = u32::try_from(ev.len()).map_err(|_| EncodeError::Field("event too large".into()))?;
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(&ev);
    Ok(out)
}

#[cfg(test)]
mod golden;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Encodes a length-delimited field.
    fn ld(n: u32, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        prost::encoding::encode_key(n, WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(b.len() as u64, &mut out);
        out.extend_from_slice(b);
        out
    }

    fn vi(n: u32, x: u64) -> Vec<u8> {
        let mut out = Vec::new();
        prost::encoding::encode_key(n, WireType::Varint, &mut out);
        prost::encoding::encode_varint(x, &mut out);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let tm = [ld(1, api_version.as_bytes()), ld(2, kind.as_bytes())].concat();
        [
            PREFIX.to_vec(),
            ld(1, &tm),
            ld(2, raw),
            ld(3, b""),
            ld(4, b""),
        ]
        .concat()
    }

    #[test]
    fn configmap_like_kubectl() {
        // ObjectMeta as gogo writes it: every value string, even empty; a zero Time.
        let zero_time = [vi(1, (-62_135_596_800_i64) as u64), vi(2, 0)].concat();
        let entry = [ld(1, b"a"), ld(2, b"b")].concat();
        let meta = [
            ld(1, b"cm"),
            ld(2, b""),
            ld(3, b""),
            vi(7, 0),
            ld(8, &zero_time),
            ld(11, &[ld(1, b"app"), ld(2, b"x")].concat()),
        ]
        .concat();
        let bin = [ld(1, b"k"), ld(2, &[0, 255])].concat();
        let cm = [ld(1, &meta), ld(2, &entry), ld(3, &bin)].concat();
        let v = decode(&envelope("v1", "ConfigMap", &cm)).unwrap();
        assert_eq!(
            v,
            json!({"kind": "ConfigMap", "apiVersion": "v1",
                "metadata": {"name": "cm", "creationTimestamp": null, "labels": {"app": "x"}},
                "data": {"a": "b"}, "binaryData": {"k": "AP8="}})
        );
    }

    #[test]
    fn special_types() {
        let port = [ld(4, &[vi(1, 1), ld(3, b"http")].concat()), vi(3, 80)].concat();
        let svc = [ld(2, &ld(1, &port))].concat();
        let v = decode(&envelope("v1", "Service", &svc)).unwrap();
        assert_eq!(
            v["spec"]["ports"][0],
            json!({"port": 80, "targetPort": "http"})
        );
        let ts = [vi(1, 1_700_000_000)].concat();
        let meta = ld(1, &ld(9, &ts));
        let v = decode(&envelope("v1", "Secret", &meta)).unwrap();
        assert_eq!(
            v["metadata"]["deletionTimestamp"],
            json!("2023-11-14T22:13:20Z")
        );
        // replicas is a pointer: 0 is kept.
        let d = ld(2, &vi(1, 0));
        let v = decode(&envelope("apps/v1", "Deployment", &d)).unwrap();
        assert_eq!(v["spec"], json!({"replicas": 0}));
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same_object() {
        let cm = json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "c", "namespace": "default", "uid": "u-1",
                "resourceVersion": "42", "creationTimestamp": "2025-01-02T03:04:05Z",
                "labels": {"a": "1", "b": "2"}, "finalizers": ["x/y"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o",
                    "uid": "u-0", "controller": true, "blockOwnerDeletion": false}],
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "time": "2025-01-02T03:04:05Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:k": {}}}}]},
            "data": {"k": "v"}, "binaryData": {"b": "AAE="}, "immutable": false});
        let b = encode_object("v1", "ConfigMap", &cm).unwrap();
        assert_eq!(decode(&b).unwrap(), cm);
        let dep = json!({"kind": "Deployment", "apiVersion": "apps/v1",
            "metadata": {"name": "d", "generation": 3},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
                "strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {"metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "i",
                        "resources": {"limits": {"cpu": "100m"}}}]}}}});
        let b = encode_object("apps/v1", "Deployment", &dep).unwrap();
        assert_eq!(decode(&b).unwrap(), dep);
        // Opaque parts are not encoded.
        let svc = json!({"metadata": {"name": "s"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(encode_object("v1", "Service", &svc).is_err());
        // Nor are fields the schema does not have.
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nope": 1}});
        assert!(encode_object("v1", "Pod", &pod).is_err());
    }

    #[test]
    fn pods_round_trip_with_inlined_structs_and_kept_zeros() {
        // Inlined structs (VolumeSource, ProbeHandler), a zero `metav1.Time` value (`null`), a
        // `restartCount` of 0 (no `omitempty`), a pointer at zero, empty messages.
        let pod = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "namespace": "n", "resourceVersion": "7"},
            "spec": {"volumes": [{"name": "c", "configMap": {"name": "cm", "defaultMode": 420}},
                    {"name": "e", "emptyDir": {"sizeLimit": "1Gi"}}],
                "containers": [{"name": "app", "image": "i",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "livenessProbe": {"httpGet": {"path": "/h", "port": 8080, "scheme": "HTTP"},
                        "periodSeconds": 10},
                    "readinessProbe": {"tcpSocket": {"port": "http"}, "timeoutSeconds": 1}}],
                "securityContext": {}, "priority": 0, "enableServiceLinks": false,
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": 300}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                    "lastTransitionTime": "2025-01-01T00:00:05Z"}],
                "hostIPs": [{"ip": "10.0.0.1"}],
                "containerStatuses": [{"name": "app", "state": {"running":
                    {"startedAt": "2025-01-01T00:00:03Z"}}, "lastState": {}, "ready": false,
                    "restartCount": 0, "image": "i", "imageID": "", "started": true}]}});
        let b = encode_object("v1", "Pod", &pod).unwrap();
        assert_eq!(decode(&b).unwrap(), pod);
    }

    #[test]
    fn refusals() {
        let err = |b: &[u8]| decode(b).unwrap_err().error;
        assert_eq!(err(b""), ProtobufError::Empty);
        assert_eq!(err(b"{}"), ProtobufError::NotProtobuf);
        assert_eq!(err(PREFIX), ProtobufError::EmptyBody);
        assert!(matches!(
            err(&envelope("coordination.k8s.io/v1", "Lease", b"")),
            ProtobufError::UnsupportedKind(_)
        ));
        // Load balancer ingress (not decoded) with content is refused, not dropped.
        let svc = ld(3, &ld(1, &ld(1, &ld(1, b"1.2.3.4"))));
        assert!(matches!(
            err(&envelope("v1", "Service", &svc)),
            ProtobufError::UnsupportedField {
                field: "ingress",
                ..
            }
        ));
        // An unknown field with a value is refused; at its zero value it is skipped.
        assert!(decode(&envelope("v1", "ConfigMap", &vi(99, 1))).is_err());
        assert!(decode(&envelope("v1", "ConfigMap", &vi(99, 0))).is_ok());
        // Truncated.
        let mut b = envelope("v1", "ConfigMap", &ld(1, &ld(1, b"abc")));
        b.truncate(b.len() - 6);
        assert!(decode(&b).is_err());
    }
}
