//! The decoder against objects encoded from their JSON by the same schema tables (`encode_*`)
//! or by hand with prost's primitives (gogo-protobuf's zero values, unknown fields, bad
//! input), compared with serde_json's decode of the JSON.

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Pod, Secret},
};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

use super::encode::{put_len, put_varint};

fn encode(v: &Value, msg: &'static Message) -> Vec<u8> {
    encode_message(v, msg).expect("the fixture encodes")
}

fn envelope_of(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    envelope_raw(api_version, kind, raw)
}

/// An object's protobuf (enveloped) from its JSON.
fn object(v: &Value) -> Vec<u8> {
    encode_object(v).expect("the fixture encodes")
}

fn pod_json() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-1", "namespace": "prod", "uid": "u-1", "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2024-05-06T07:08:09Z",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"a": ""},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                  "uid": "rs-1", "controller": true, "blockOwnerDeletion": false}],
            "finalizers": ["x", "y"],
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                               "time": "2024-05-06T07:08:09Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]
        },
        "spec": {
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}},
                        {"name": "cfg", "configMap": {"name": "c", "defaultMode": 420}}],
            "containers": [{
                "name": "app", "image": "nginx:1",
                "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"},
                              "requests": {"cpu": "250m"}},
                "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 10,
                                   "successThreshold": 1, "failureThreshold": 3,
                                   "timeoutSeconds": 1},
                "livenessProbe": {"httpGet": {"path": "/", "port": 8080, "scheme": "HTTP"}},
                "env": [{"name": "A", "value": "1"}],
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent"
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "nodeName": "node-1",
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule",
                             "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "podIP": "10.0.0.1",
            "podIPs": [{"ip": "10.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True",
                            "lastTransitionTime": "2024-05-06T07:08:10Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
                                   "image": "nginx:1", "imageID": "", "started": true,
                                   "state": {"running": {"startedAt": "2024-05-06T07:08:10Z"}}}]
        }
    })
}

#[test]
fn a_pod_decodes_as_its_json_does() {
    let v = pod_json();
    let expected: Pod = serde_json::from_value(v.clone()).unwrap();
    let got: Pod = decode(&object(&v)).unwrap();
    assert_eq!(got, expected);
}

#[test]
fn go_zero_values_read_as_the_json_would_say_them() {
    // gogo-protobuf writes every non-pointer field; Go's JSON leaves the omitempty ones out.
    let mut meta = Vec::new();
    put_len(&mut meta, 1, b"a");
    put_len(&mut meta, 2, b""); // generateName "", omitempty: absent
    put_varint(&mut meta, 7, 0); // generation 0, omitempty: absent
    put_len(&mut meta, 8, b""); // creationTimestamp zero: null
    // deletionTimestamp as Go's zero instant written out (seconds of year 1): null too.
    let mut zero = Vec::new();
    put_varint(&mut zero, 1, (-62_135_596_800_i64) as u64);
    put_varint(&mut zero, 2, 0);
    put_len(&mut meta, 9, &zero);
    let mut spec = Vec::new();
    put_varint(&mut spec, 4, 0); // terminationGracePeriodSeconds *int64 = 0: kept
    put_varint(&mut spec, 11, 0); // hostNetwork false, omitempty: absent
    let mut pod = Vec::new();
    put_len(&mut pod, 1, &meta);
    put_len(&mut pod, 2, &spec);
    let got: Pod = decode(&envelope_of("v1", "Pod", &pod)).unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("a"));
    assert_eq!(got.metadata.generate_name, None);
    assert_eq!(got.metadata.generation, None);
    assert_eq!(got.metadata.creation_timestamp, None);
    assert_eq!(got.metadata.deletion_timestamp, None);
    let spec = got.spec.unwrap();
    assert_eq!(spec.termination_grace_period_seconds, Some(0));
    assert_eq!(spec.host_network, None);
}

#[test]
fn secrets_bytes_config_maps_and_deployments_decode_as_their_json() {
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "s", "namespace": "n"},
        "data": {"k": "aGVsbG8=", "empty": ""}, "immutable": false});
    let got: Secret = decode(&object(&secret)).unwrap();
    assert_eq!(got, serde_json::from_value::<Secret>(secret).unwrap());

    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "n", "resourceVersion": "7"},
        "data": {"a": "1", "b": ""}, "binaryData": {"bin": "AAEC"}});
    let got: ConfigMap = decode(&object(&cm)).unwrap();
    assert_eq!(got, serde_json::from_value::<ConfigMap>(cm).unwrap());

    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "d"},
                 "matchExpressions": [{"key": "t", "operator": "In", "values": ["a", "b"]}]},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
                 "template": {"metadata": {"labels": {"app": "d"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"observedGeneration": 1, "replicas": 1,
                   "conditions": [{"type": "Available", "status": "True",
                                   "lastUpdateTime": "2024-01-01T00:00:00Z",
                                   "lastTransitionTime": "2024-01-01T00:00:00Z",
                                   "reason": "r", "message": "m"}]}});
    let got: Deployment = decode(&object(&d)).unwrap();
    assert_eq!(got, serde_json::from_value::<Deployment>(d).unwrap());
    assert_eq!(got.spec.replicas, Some(0), "a pointer's zero is kept");
}

#[test]
fn another_kind_is_refused_as_from_json() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let err = decode::<Secret>(&object(&cm)).unwrap_err();
    assert!(matches!(err, ProtobufError::Value(_)), "{err}");
    assert!(!err.is_malformed());
}

/// Every message reachable from a kind: its `index` finds each field by number, and nothing
/// else; every number is below 64 (the decoder's per-message set of given fields is a `u64`).
#[test]
fn every_message_index_finds_its_fields_and_numbers_fit_the_seen_set() {
    fn check(m: &'static Message, done: &mut Vec<&'static str>) {
        if done.contains(&m.name) {
            return;
        }
        done.push(m.name);
        for f in m.fields {
            assert!(f.number < 64, "{}.{} is {}", m.name, f.name, f.number);
            assert!(
                std::ptr::eq(m.field(f.number).unwrap(), f),
                "{}.{}",
                m.name,
                f.name
            );
            let mut k = f.kind;
            while let Kind::Map(v) = k {
                k = *v;
            }
            if let Kind::Message(sub) = k {
                check(sub, done);
            }
        }
        let known = m.fields.iter().map(|f| f.number).collect::<Vec<_>>();
        for n in 0..70 {
            assert_eq!(m.field(n).is_some(), known.contains(&n), "{} {n}", m.name);
        }
    }
    let mut done = Vec::new();
    for (_, _, m) in super::schema::KINDS {
        check(m, &mut done);
    }
    assert!(done.len() > 200, "{}", done.len());
}

/// Go writes a repeated field's occurrences together; one that comes again later (valid
/// protobuf) is read again in the general mode, and gives every element, in order.
#[test]
fn unknown_fields_are_skipped_and_repeated_fields_gathered_wherever_they_are() {
    let mut meta = Vec::new();
    put_len(&mut meta, 14, b"f1");
    put_len(&mut meta, 1, b"n");
    put_len(&mut meta, 999, b"from a newer server"); // unknown: skipped
    put_varint(&mut meta, 998, 5);
    put_len(&mut meta, 14, b"f2"); // finalizers again, later
    put_len(&mut meta, 11, b"\x0a\x01a\x12\x01b"); // labels a=b
    put_len(&mut meta, 14, b"f3"); // and again
    let mut cm = Vec::new();
    put_len(&mut cm, 1, &meta);
    put_len(&mut cm, 77, b"?");
    let got: ConfigMap = decode(&envelope_of("v1", "ConfigMap", &cm)).unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("n"));
    assert_eq!(
        got.metadata.finalizers,
        Some(vec!["f1".to_string(), "f2".to_string(), "f3".to_string()])
    );
    assert_eq!(got.metadata.labels.unwrap()["a"], "b");
}

#[test]
fn a_status_decodes_into_kubes_status() {
    let mut st = Vec::new();
    put_len(&mut st, 2, b"Failure");
    put_len(&mut st, 3, b"too old resource version: 1 (5)");
    put_len(&mut st, 4, b"Expired");
    put_varint(&mut st, 6, 410);
    let s: kube_core::Status = decode(&envelope_of("v1", "Status", &st)).unwrap();
    assert_eq!(s.code, 410);
    assert_eq!(s.reason, "Expired");
    assert!(s.is_failure());
}

#[test]
fn a_list_gives_its_metadata_and_item_positions() {
    let items = [
        json!({"metadata": {"name": "a", "namespace": "n"}, "data": {"k": "v"}}),
        json!({"metadata": {"name": "b", "namespace": "n"}}),
    ];
    let mut raw = Vec::new();
    let mut lm = Vec::new();
    put_len(&mut lm, 2, b"99");
    put_len(&mut lm, 3, b"next");
    put_len(&mut raw, 1, &lm);
    for i in &items {
        put_len(&mut raw, 2, &encode(i, &schema::CORE_V1_CONFIG_MAP));
    }
    let body = envelope_of("v1", "ConfigMapList", &raw);
    let l = list(&body).unwrap();
    assert_eq!((l.kind, l.item_kind), ("ConfigMapList", "ConfigMap"));
    let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta = l.metadata().unwrap();
    assert_eq!(meta.resource_version.as_deref(), Some("99"));
    assert_eq!(meta.continue_.as_deref(), Some("next"));
    let got: Vec<ConfigMap> = l
        .items
        .iter()
        .map(|r| decode_message(&body[r.clone()], l.item_schema, Some(("v1", "ConfigMap"))))
        .collect::<Result<_, _>>()
        .unwrap();
    let want: Vec<ConfigMap> = items
        .iter()
        .map(|i| serde_json::from_value(i.clone()).unwrap())
        .collect();
    assert_eq!(got, want);
    // A list of a kind without schema, and a non-list.
    assert!(matches!(
        list(&envelope_of("example.com/v1", "WidgetList", &raw)),
        Err(ProtobufError::UnknownKind { .. })
    ));
    assert!(list(&envelope_of("v1", "ConfigMap", &raw)).is_err());
}

fn frame(event_type: &str, obj: &[u8]) -> Vec<u8> {
    let mut ext = Vec::new();
    put_len(&mut ext, 1, obj);
    let mut ev = Vec::new();
    put_len(&mut ev, 1, event_type.as_bytes());
    put_len(&mut ev, 2, &ext);
    let mut out = (ev.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&ev);
    out
}

#[test]
fn watch_frames_split_at_any_chunk_boundary() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let mut stream = frame("ADDED", &object(&cm));
    stream.extend(frame("DELETED", &object(&cm)));
    for chunk in [1, 2, 3, 7, 4096] {
        let mut r = FrameReader::default();
        let mut types = Vec::new();
        for c in stream.chunks(chunk) {
            r.push(c);
            while let Some(f) = r.next_frame().unwrap() {
                let ev = watch_event(&f).unwrap();
                let o: ConfigMap = decode(ev.object).unwrap();
                assert_eq!(o.metadata.name.as_deref(), Some("c"));
                types.push(ev.event_type.to_string());
            }
        }
        r.finish().unwrap();
        assert_eq!(types, ["ADDED", "DELETED"]);
    }
}

#[test]
fn bad_watch_streams_are_typed_errors() {
    let mut r = FrameReader::new(10);
    r.push(&100u32.to_be_bytes());
    assert_eq!(
        r.next_frame(),
        Err(ProtobufError::FrameTooLarge { len: 100, max: 10 })
    );
    let mut r = FrameReader::default();
    r.push(&[0, 0, 0, 5, 1, 2]);
    assert_eq!(r.next_frame(), Ok(None));
    assert_eq!(r.finish(), Err(ProtobufError::TruncatedFrame(6)));
    // Wrong magic on the object, JSON where protobuf was expected.
    assert_eq!(
        decode::<ConfigMap>(br#"{"kind":"ConfigMap"}"#).unwrap_err(),
        ProtobufError::BadMagic
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let good = object(&cm);
    for cut in 5..good.len() {
        // Truncated anywhere after the magic: an error or (cut between fields) fewer fields;
        // never a panic.
        let _ = decode::<ConfigMap>(&good[..cut]);
    }
    assert!(
        decode::<ConfigMap>(&good[..good.len() - 3])
            .unwrap_err()
            .is_malformed()
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut with_magic = PREFIX.to_vec();
        with_magic.extend_from_slice(&data);
        let _ = decode::<Pod>(&data);
        let _ = decode::<Pod>(&with_magic);
        let _ = decode_message::<Pod>(&data, &schema::CORE_V1_POD, None);
        let _ = decode_message::<Deployment>(&data, &schema::APPS_V1_DEPLOYMENT, None);
        let _ = decode_message::<kube_core::Status>(&data, &schema::META_V1_STATUS, None);
        let _ = list(&with_magic);
        let _ = watch_event(&data);
        let mut r = FrameReader::new(64);
        r.push(&data);
        while let Ok(Some(f)) = r.next_frame() {
            let _ = watch_event(&f);
        }
    }

    #[test]
    fn a_mutated_pod_never_panics(at in 0usize..10_000, byte in any::<u8>(), cut in 0usize..10_000) {
        let mut good = object(&pod_json());
        let n = good.len();
        good[at % n] = byte;
        let _ = decode::<Pod>(&good);
        let _ = decode::<Pod>(&good[..cut % n]);
    }
}

#[test]
fn the_encoder_refuses_what_the_schema_does_not_have_and_round_trips_durations() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dat": {}});
    assert!(matches!(encode_object(&cm), Err(ProtobufError::Encode(_))));
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget"});
    assert!(matches!(
        encode_object(&w),
        Err(ProtobufError::UnknownKind { .. })
    ));
    for ns in [
        0i64,
        1,
        1_500,
        2_000_000,
        90_000_000_000,
        3_600_000_000_000,
        -500_000_000,
    ] {
        let text = time::go_duration(ns);
        assert_eq!(encode::duration_ns(&text).unwrap(), ns, "{text}");
    }
}
