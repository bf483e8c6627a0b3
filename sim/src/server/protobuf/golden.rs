//! The sim's protobuf answers, byte for byte: digests of what it serves (objects, lists, watch
//! frames, ERROR Status frames, bookmarks; the bench twin's are checked in `crate::bench`), taken from the
//! sim's own encoder before it moved onto `kinformer::protobuf`'s (commit ad2074a compared the
//! two encoders' bytes directly). A change of one byte in any answer changes a digest.

use serde_json::{Value, json};

/// FNV-1a, 64 bits: stable across Rust versions (unlike `DefaultHasher`).
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A pod that sets most of `PodSpec` and `PodStatus`: every volume source kubelet users set,
/// probes of each handler, affinity of each kind, security contexts, resources, statuses of
/// each container state, zero `metav1.Time` values (`null`), `IntOrString` of both kinds.
pub(super) fn kitchen_sink_pod() -> Value {
    serde_json::from_str(
        r#"{"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sink", "namespace": "ns", "uid": "0f1e", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2025-01-02T03:04:05Z",
            "deletionTimestamp": "2025-01-02T03:05:05Z", "deletionGracePeriodSeconds": 30,
            "labels": {"app": "a", "tier": "b"}, "annotations": {"x": "y"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": "u1", "controller": true, "blockOwnerDeletion": true}],
            "finalizers": ["f/one"], "generateName": "sink-",
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                "time": "2025-01-02T03:04:06Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:phase": {}}}, "subresource": "status"}]},
        "spec": {
            "volumes": [
                {"name": "cm", "configMap": {"name": "c", "items": [{"key": "k", "path": "p", "mode": 256}],
                    "defaultMode": 420, "optional": true}},
                {"name": "sec", "secret": {"secretName": "s", "defaultMode": 384}},
                {"name": "ed", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {"name": "hp", "hostPath": {"path": "/var", "type": "Directory"}},
                {"name": "pvc", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}},
                {"name": "proj", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}},
                {"name": "dapi", "downwardAPI": {"items": [{"path": "cpu",
                    "resourceFieldRef": {"containerName": "app", "resource": "limits.cpu", "divisor": "1m"}}]}},
                {"name": "csi", "csi": {"driver": "d", "readOnly": true, "volumeAttributes": {"a": "b"}}},
                {"name": "eph", "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": {"l": "v"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                        "resources": {"requests": {"storage": "5Gi"}}}}}},
                {"name": "nfs", "nfs": {"server": "srv", "path": "/x"}}],
            "initContainers": [{"name": "init", "image": "busybox", "command": ["sh", "-c"],
                "args": ["true"], "restartPolicy": "Always"}],
            "containers": [{"name": "app", "image": "img:1", "imagePullPolicy": "IfNotPresent",
                "workingDir": "/w", "stdin": true, "tty": false,
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP", "hostPort": 80, "hostIP": "0.0.0.0"}],
                "env": [{"name": "A", "value": "1"},
                    {"name": "B", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
                    {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": false}}},
                    {"name": "D", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
                    {"name": "E", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}}],
                "envFrom": [{"prefix": "P_", "configMapRef": {"name": "c"}}, {"secretRef": {"name": "s", "optional": true}}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "250m", "memory": "64Mi"},
                    "claims": [{"name": "gpu", "request": "r"}]},
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                "volumeMounts": [{"name": "cm", "mountPath": "/etc/c", "readOnly": true, "subPath": "x",
                    "mountPropagation": "HostToContainer", "recursiveReadOnly": "Disabled"}],
                "volumeDevices": [{"name": "blk", "devicePath": "/dev/b"}],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP",
                    "httpHeaders": [{"name": "H", "value": "v"}]}, "initialDelaySeconds": 5,
                    "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3,
                    "terminationGracePeriodSeconds": 7},
                "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
                "startupProbe": {"exec": {"command": ["cat", "/ok"]}},
                "lifecycle": {"preStop": {"sleep": {"seconds": 3}}, "postStart": {"httpGet": {"port": "http"}},
                    "stopSignal": "SIGTERM"},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "securityContext": {"privileged": false, "runAsUser": 1000, "runAsNonRoot": true,
                    "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                    "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"}, "procMount": "Default",
                    "seLinuxOptions": {"level": "s0:c1"}}}],
            "ephemeralContainers": [{"name": "dbg", "image": "busybox", "targetContainerName": "app"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "activeDeadlineSeconds": 600,
            "dnsPolicy": "ClusterFirst", "nodeSelector": {"kubernetes.io/os": "linux"},
            "serviceAccountName": "sa", "serviceAccount": "sa", "automountServiceAccountToken": false,
            "nodeName": "node-1", "hostNetwork": true, "hostPID": false, "hostIPC": false,
            "shareProcessNamespace": true,
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                "supplementalGroups": [4000, 5000], "fsGroupChangePolicy": "OnRootMismatch",
                "sysctls": [{"name": "net.core.somaxconn", "value": "1024"}],
                "windowsOptions": {"gmsaCredentialSpecName": "g", "hostProcess": false}},
            "imagePullSecrets": [{"name": "regcred"}], "hostname": "h", "subdomain": "sd",
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
                     "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n0"]}]}]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference":
                        {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}}]},
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector":
                    {"matchLabels": {"app": "db"}}, "topologyKey": "zone", "namespaces": ["x"]}]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50,
                    "podAffinityTerm": {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                        "values": ["a"]}]}, "topologyKey": "kubernetes.io/hostname",
                        "matchLabelKeys": ["pod-template-hash"]}}]}},
            "schedulerName": "default-scheduler",
            "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
                {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "hostAliases": [{"ip": "10.0.0.9", "hostnames": ["foo", "bar"]}],
            "priorityClassName": "high", "priority": 1000,
            "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": ["s.local"], "options": [{"name": "ndots", "value": "2"}]},
            "readinessGates": [{"conditionType": "example.com/ready"}], "runtimeClassName": "rc",
            "enableServiceLinks": false, "preemptionPolicy": "PreemptLowerPriority",
            "overhead": {"cpu": "10m"},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "a"}}, "minDomains": 2,
                "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Ignore", "matchLabelKeys": ["h"]}],
            "setHostnameAsFQDN": false, "os": {"name": "linux"}, "hostUsers": true,
            "schedulingGates": [{"name": "g"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
            "resources": {"limits": {"cpu": "1"}}},
        "status": {"phase": "Running", "message": "m", "reason": "r", "nominatedNodeName": "nn",
            "observedGeneration": 3,
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                "lastTransitionTime": "2025-01-02T03:04:10Z", "observedGeneration": 3},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                 "lastTransitionTime": "2025-01-02T03:04:05Z", "reason": "r", "message": "m"}],
            "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}], "podIP": "10.1.0.5",
            "podIPs": [{"ip": "10.1.0.5"}, {"ip": "fd00::5"}], "startTime": "2025-01-02T03:04:05Z",
            "qosClass": "Burstable", "resize": "InProgress",
            "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0,
                "reason": "Completed", "startedAt": "2025-01-02T03:04:06Z", "finishedAt": "2025-01-02T03:04:07Z",
                "containerID": "containerd://i", "signal": 0}}, "lastState": {}, "ready": true,
                "restartCount": 0, "image": "busybox", "imageID": "sha256:1", "containerID": "containerd://i",
                "started": false}],
            "containerStatuses": [{"name": "app", "state": {"running": {"startedAt": "2025-01-02T03:04:08Z"}},
                "lastState": {"terminated": {"exitCode": 137, "signal": 9, "reason": "OOMKilled",
                    "message": "oom", "startedAt": null, "finishedAt": "2025-01-02T03:04:07Z"}},
                "ready": true, "restartCount": 2, "image": "img:1", "imageID": "sha256:2",
                "containerID": "containerd://a", "started": true,
                "allocatedResources": {"cpu": "250m"},
                "resources": {"requests": {"cpu": "250m"}},
                "volumeMounts": [{"name": "cm", "mountPath": "/etc/c", "readOnly": true}],
                "user": {"linux": {"uid": 1000, "gid": 3000, "supplementalGroups": [3000, 4000]}},
                "stopSignal": "SIGTERM"}],
            "ephemeralContainerStatuses": [{"name": "dbg", "state": {"waiting": {"reason": "ContainerCreating"}},
                "lastState": {}, "ready": false, "restartCount": 0, "image": "busybox", "imageID": ""}]}}"#,
    )
    .expect("the fixture is JSON")
}

/// The objects of the kinds the sim serves as protobuf.
pub(super) fn corpus() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("v1", "Pod", kitchen_sink_pod()),
        (
            "v1",
            "Pod",
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "resourceVersion": "7",
                "creationTimestamp": null},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {}}],
                "securityContext": {}, "priority": 0},
            "status": {}}),
        ),
        (
            "v1",
            "ConfigMap",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default", "uid": "u", "resourceVersion": "9",
                "creationTimestamp": "2025-01-01T00:00:00Z", "labels": {"a": "b"}},
            "data": {"k": "v", "empty": ""}, "binaryData": {"b": "AAE="}, "immutable": false}),
        ),
        (
            "v1",
            "Secret",
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "default"}, "type": "Opaque",
            "data": {"password": "c2VjcmV0"}, "immutable": true}),
        ),
        (
            "v1",
            "Namespace",
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ns", "labels": {"kubernetes.io/metadata.name": "ns"}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        ),
        (
            "v1",
            "ServiceAccount",
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "sa", "namespace": "default"},
            "secrets": [{"name": "t", "namespace": "default"}],
            "imagePullSecrets": [{"name": "r"}], "automountServiceAccountToken": false}),
        ),
        (
            "v1",
            "Status",
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "too old resource version: 1 (5)",
            "reason": "Expired", "code": 410,
            "details": {"name": "x", "kind": "pods", "causes": [{"reason": "r", "field": "f"}],
                "retryAfterSeconds": 1}}),
        ),
    ]
}

/// Every encoding the sim answers with, for the corpus: (label, bytes).
pub(super) fn answers(
    object: impl Fn(&str, &str, &Value) -> Vec<u8>,
    list: impl Fn(&str, &str, &Value, &[Value]) -> Vec<u8>,
    frame: impl Fn(&str, &str, &str, &Value) -> Vec<u8>,
) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, (av, kind, v)) in corpus().into_iter().enumerate() {
        out.push((format!("{i} {kind} object"), object(av, kind, &v)));
        out.push((format!("{i} {kind} frame"), frame("MODIFIED", av, kind, &v)));
        if kind != "Status" {
            let meta = json!({"resourceVersion": "12", "continue": "tok",
                "remainingItemCount": 3});
            out.push((
                format!("{i} {kind} list"),
                list(av, kind, &meta, &[v.clone(), v.clone()]),
            ));
            out.push((
                format!("{i} {kind} empty list"),
                list(av, kind, &json!({"resourceVersion": "1"}), &[]),
            ));
        }
    }
    let bookmark = json!({"kind": "Pod", "apiVersion": "v1", "metadata":
        {"resourceVersion": "77", "annotations": {"k8s.io/initial-events-end": "true"}}});
    out.push(("bookmark".into(), frame("BOOKMARK", "v1", "Pod", &bookmark)));
    out
}

/// Digests of [`answers`] as the sim's encoder wrote them before the move (label, digest).
const GOLDEN: &[(&str, u64)] = &[
    ("0 Pod object", 0x135aaa69b8653d37),
    ("0 Pod frame", 0xd51c902f10cdc4f6),
    ("0 Pod list", 0x5ead306b2a00f8b9),
    ("0 Pod empty list", 0xcc471dfd21b133b1),
    ("1 Pod object", 0x3c319ed842286ac2),
    ("1 Pod frame", 0x4b7d5c568d16a488),
    ("1 Pod list", 0xad9288be69038092),
    ("1 Pod empty list", 0xcc471dfd21b133b1),
    ("2 ConfigMap object", 0x390da4df4914d61a),
    ("2 ConfigMap frame", 0x2b1ab59d07cfdd4f),
    ("2 ConfigMap list", 0x945ab0001b2b5242),
    ("2 ConfigMap empty list", 0x3b63f6c497a157cc),
    ("3 Secret object", 0xfb7ea52017232757),
    ("3 Secret frame", 0xf72149e9b9a1e27e),
    ("3 Secret list", 0x2be99dd8d73bea67),
    ("3 Secret empty list", 0xea8e8abb2a6bcecc),
    ("4 Namespace object", 0x27e5eef267cbe934),
    ("4 Namespace frame", 0xd7c2d3715d878995),
    ("4 Namespace list", 0xf1afbdc9fabdcecf),
    ("4 Namespace empty list", 0xf446904fab9c4459),
    ("5 ServiceAccount object", 0xea8c4e166c4baac8),
    ("5 ServiceAccount frame", 0xa0d9391fe2abb8d1),
    ("5 ServiceAccount list", 0xf577fc3a0392ebcd),
    ("5 ServiceAccount empty list", 0xea98178a5bcbc412),
    ("6 Status object", 0x8ee9baa536e8ceed),
    ("6 Status frame", 0x3660b8ced214eb5b),
    ("bookmark", 0x898a617dfff38778),
];

pub(super) fn digests(answers: &[(String, Vec<u8>)]) -> Vec<(String, u64)> {
    answers.iter().map(|(l, b)| (l.clone(), fnv(b))).collect()
}

/// What the sim serves now: the library's encoder, as the handlers and the twin call it.
fn library_answers() -> Vec<(String, Vec<u8>)> {
    use kinformer::protobuf as pb;
    answers(
        |av, k, v| pb::encode_object_as(av, k, v).expect("encodes"),
        |av, k, m, items| pb::encode_list(av, k, m, items).expect("encodes"),
        |t, av, k, v| {
            pb::watch_frame(t, &pb::encode_object_as(av, k, v).expect("encodes")).expect("frames")
        },
    )
}

#[test]
fn answers_are_byte_for_byte_those_of_the_sims_former_encoder() {
    let got = digests(&library_answers());
    let want: Vec<(String, u64)> = GOLDEN.iter().map(|(l, d)| (l.to_string(), *d)).collect();
    assert_eq!(got, want);
}
