//! Lean objects stored as protobuf (I7) against the same objects stored as JSON: the metadata,
//! the decoded object, `managedFields` stripping, the JSON handed out, and bad bytes.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{DecodeError, EncodeError, Encoding, LazyObject, LeanConfig, LeanState, MetaError};
use crate::protobuf::object_message;

fn state(strip: bool) -> Arc<LeanState<Pod>> {
    Arc::new(LeanState::new(
        LeanConfig::default()
            .hot_objects(0)
            .strip_managed_fields(strip),
    ))
}

/// A generated pod's metadata choices.
#[derive(Clone, Debug)]
struct Gen {
    name: String,
    namespace: Option<String>,
    labels: Vec<(String, String)>,
    owners: Vec<(String, Option<bool>, Option<bool>)>,
    deleting: bool,
    managed: bool,
    rv: u32,
    day: u8,
}

fn pods() -> impl Strategy<Value = Gen> {
    (
        "[a-z][a-z0-9-]{0,12}",
        proptest::option::of("[a-z]{1,8}"),
        proptest::collection::vec(("[a-z./]{1,10}", "[A-Za-z0-9_.-]{0,8}"), 0..5),
        proptest::collection::vec(
            (
                "[a-z]{1,8}",
                proptest::option::of(any::<bool>()),
                proptest::option::of(any::<bool>()),
            ),
            0..3,
        ),
        any::<bool>(),
        any::<bool>(),
        any::<u32>(),
        1u8..28,
    )
        .prop_map(
            |(name, namespace, labels, owners, deleting, managed, rv, day)| Gen {
                name,
                namespace,
                labels,
                owners,
                deleting,
                managed,
                rv,
                day,
            },
        )
}

/// The pod's JSON as a server writes it (`apiVersion` and `kind` when `typed`).
fn pod(g: &Gen, typed: bool) -> Value {
    let mut meta = json!({
        "name": g.name, "uid": format!("uid-{}", g.rv), "resourceVersion": g.rv.to_string(),
        "creationTimestamp": format!("2025-03-{:02}T01:02:03Z", g.day),
    });
    if let Some(ns) = &g.namespace {
        meta["namespace"] = json!(ns);
    }
    if !g.labels.is_empty() {
        meta["labels"] = g
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    if !g.owners.is_empty() {
        let owners: Vec<Value> = g
            .owners
            .iter()
            .map(|(n, c, b)| {
                let mut o = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": n,
                                   "uid": format!("{n}-uid")});
                if let Some(c) = c {
                    o["controller"] = json!(c);
                }
                if let Some(b) = b {
                    o["blockOwnerDeletion"] = json!(b);
                }
                o
            })
            .collect();
        meta["ownerReferences"] = json!(owners);
    }
    if g.deleting {
        meta["deletionTimestamp"] = json!(format!("2025-04-{:02}T00:00:00Z", g.day));
    }
    if g.managed {
        meta["managedFields"] = json!([{"manager": "kubelet", "operation": "Update",
            "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:phase": {}}}}]);
    }
    let mut v = json!({
        "metadata": meta,
        "spec": {"containers": [{"name": "app", "image": format!("img:{}", g.rv % 7),
                 "ports": [{"containerPort": 8080, "protocol": "TCP"}]}],
                 "nodeName": format!("node-{}", g.day)},
        "status": {"phase": "Running", "podIP": "10.0.0.1"}
    });
    if typed {
        v["apiVersion"] = json!("v1");
        v["kind"] = json!("Pod");
    }
    v
}

/// (JSON-stored, protobuf-stored) lazy objects of one pod, each in its own store.
fn both(g: &Gen, typed: bool, strip: bool) -> (LazyObject<Pod>, LazyObject<Pod>) {
    let v = pod(g, typed);
    let (js, ps) = (state(strip), state(strip));
    let json = js
        .encode(&serde_json::to_vec(&v).expect("json"))
        .expect("encodes");
    let msg = object_message("v1", "Pod", &v).expect("a protobuf pod");
    let pb = ps
        .encode_protobuf(&msg, ("v1", "Pod"), typed)
        .expect("encodes");
    assert_eq!(json.encoding(), Encoding::Json);
    assert_eq!(pb.encoding(), Encoding::Protobuf);
    (
        LazyObject::from_raw(Arc::new(json), js),
        LazyObject::from_raw(Arc::new(pb), ps),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// I7: the protobuf path gives what the JSON path gives for the same object: metadata
    /// (labels, owners, timestamps, types), the decoded object, the JSON handed out, with and
    /// without `managedFields` stripping, as a watch event (`typed`) and as a list item.
    #[test]
    fn i7_protobuf_objects_equal_json_objects(g in pods(), typed in any::<bool>(),
                                               strip in any::<bool>()) {
        let (j, p) = both(&g, typed, strip);
        let (jr, pr) = (j.raw().expect("lean"), p.raw().expect("lean"));
        prop_assert_eq!(jr.meta(), pr.meta());
        prop_assert_eq!(j.labels().to_map(), p.labels().to_map());
        prop_assert_eq!(p.owner_references().len(), g.owners.len());
        prop_assert_eq!(p.is_deleting(), g.deleting);
        let (jo, po) = (j.object().expect("decodes"), p.object().expect("decodes"));
        prop_assert_eq!(&jo, &po);
        prop_assert_eq!(po.metadata.managed_fields.is_some(), g.managed && !strip);
        // The JSON handed out decodes to the same pod, with the same types.
        let jv: Value = serde_json::from_slice(&jr.json().expect("json")).expect("json");
        let pv: Value = serde_json::from_slice(&pr.json().expect("json")).expect("json");
        prop_assert_eq!(&jv["apiVersion"], &pv["apiVersion"]);
        prop_assert_eq!(&jv["kind"], &pv["kind"]);
        prop_assert_eq!(&serde_json::from_value::<Pod>(pv).expect("a pod"), &*jo);
        let pj: Pod = serde_json::from_slice(&p.to_json().expect("json")).expect("a pod");
        prop_assert_eq!(&pj, &*jo);
        if strip && g.managed {
            // Cut from the stored message: smaller than the message with them.
            let (_, whole) = both(&g, typed, false);
            prop_assert!(pr.json_len() < whole.raw().expect("lean").json_len());
        }
    }

    /// Bad input: any cut or flipped byte of a protobuf pod gives a typed error or an
    /// object, never a panic; encode errors are counted as JSON's are.
    #[test]
    fn i7_garbled_protobuf_is_a_typed_error(g in pods(), cut in any::<prop::sample::Index>(),
                                             flip in any::<prop::sample::Index>(),
                                             byte in any::<u8>()) {
        let msg = object_message("v1", "Pod", &pod(&g, true)).expect("a protobuf pod");
        let mut bad = msg[..cut.index(msg.len())].to_vec();
        if !bad.is_empty() {
            let i = flip.index(bad.len());
            bad[i] ^= byte;
        }
        let s = state(true);
        match s.encode_protobuf(&bad, ("v1", "Pod"), true) {
            Ok(raw) => {
                let lazy = LazyObject::from_raw(Arc::new(raw), Arc::clone(&s));
                let _ = lazy.object();
                let _ = lazy.to_json();
                let _ = lazy.raw().expect("lean").json();
            }
            Err(e) => {
                prop_assert!(matches!(e, EncodeError::Meta(MetaError::Protobuf(_))), "{e}");
                prop_assert_eq!(s.stats(&Default::default()).encode_failures, 1);
            }
        }
    }
}

/// Truncated metadata fails the encode (counted); a body that is broken past the metadata is
/// stored and fails its decode (counted, remembered), as bad JSON does in both places.
#[test]
fn i7_bad_protobuf_counts_as_bad_json_does() {
    let g = Gen {
        name: "p".into(),
        namespace: Some("n".into()),
        labels: vec![("a".into(), "1".into())],
        owners: vec![],
        deleting: false,
        managed: true,
        rv: 3,
        day: 2,
    };
    let msg = object_message("v1", "Pod", &pod(&g, true)).expect("a protobuf pod");
    let s = state(false);
    // Cut inside the metadata (field 1 comes first).
    let e = s
        .encode_protobuf(&msg[..10], ("v1", "Pod"), true)
        .expect_err("truncated metadata");
    assert!(
        matches!(e, EncodeError::Meta(MetaError::Protobuf(_))),
        "{e}"
    );
    // A kind without schema, or a list kind.
    for types in [("v1", "Nope"), ("v1", "PodList")] {
        assert!(matches!(
            s.encode_protobuf(&msg, types, true),
            Err(EncodeError::Meta(MetaError::Protobuf(_)))
        ));
    }
    // The JSON counterpart.
    assert!(s.encode(br#"{"metadata":[]}"#).is_err());
    assert_eq!(s.stats(&Default::default()).encode_failures, 4);
    // A second `spec` (field 2) of garbage after the metadata: the metadata parses, the body
    // does not decode.
    let mut broken = msg.clone();
    broken.extend_from_slice(&[2 << 3 | 2, 2, 0xff, 0xff]);
    let raw = s
        .encode_protobuf(&broken, ("v1", "Pod"), true)
        .expect("the metadata is whole");
    assert_eq!(raw.meta().name(), Some("p"));
    let lazy = LazyObject::from_raw(Arc::new(raw), Arc::clone(&s));
    let e: DecodeError = lazy.object().expect_err("a cut body");
    assert!(e.message().contains("protobuf"), "{e}");
    assert!(lazy.object().is_err(), "remembered");
    assert!(lazy.to_json().is_err());
    assert!(lazy.raw().expect("lean").json().is_err());
    let stats = s.stats(&Default::default());
    assert_eq!(stats.decode_failures, 2, "object() once, to_json once");
}
