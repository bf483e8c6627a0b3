//! The pods of the lean-mode benches: the shared benchmark's workload (`bench/serve.py`'s
//! `pod_template`), generated here from a seed rather than read from a fixture.
//!
//! Each pod is rendered as `serve.py` renders it (compact JSON, the server's field order,
//! about 4.8 KB): `ns-<i % 100>/pod-<i>`, a random uid, labels app/tier/pod-template-hash from
//! 500 apps, a ReplicaSet owner with the app's uid, a managedFields entry, two containers with
//! the app's images, env, ports, probes, volumes named after a random token, `node-<i % 1000>`,
//! pod and host IPs, containerIDs of 64 random hex digits and timestamps. Only the random
//! draws differ from `serve.py`'s (this is `rand`'s seeded generator, not Python's), and the
//! `imageID` digests, random per image here where `serve.py` hashes the image name: the same
//! sizes and the same entropy, so the same compressed size (checked by
//! `cargo bench -p kinformer --bench lean_memory -- --real <LIST.json>`, see that bench).
//!
//! Pod `i` is the same whatever else is generated: its random fields come from a generator
//! seeded with the workload's seed and `i`.

use std::fmt::Write as _;

use rand::{Rng, SeedableRng, rngs::StdRng};

/// Namespaces: pod `i` is in `ns-<i % NAMESPACES>`.
pub const NAMESPACES: usize = 100;
/// Apps (label `app`, ReplicaSet, images): pod `i` belongs to `app-<i % APPS>`.
pub const APPS: usize = 500;
/// Nodes: pod `i` runs on `node-<i % NODES>`.
const NODES: usize = 1000;
/// The seed of every bench's workload.
pub const SEED: u64 = 20_250_101;
/// `serve.py`'s first resourceVersion (pod `i` of the list has `RV_BASE + 1 + i`).
const RV_BASE: u64 = 4_000_000;
/// 2025-01-01T00:00:00Z: timestamps are offsets from it, as in `serve.py`.
const BASE_EPOCH: i64 = 1_735_689_600;
const TIERS: [&str; 3] = ["frontend", "backend", "cache"];
const HASH_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const SIDECAR: &str = "registry.local/log-shipper:v2.4.1";

/// `serve.py`'s `ts`: seconds after [`BASE_EPOCH`] as RFC 3339 (UTC, whole seconds).
fn ts(sec: i64) -> String {
    let t = BASE_EPOCH + sec;
    let (days, rem) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn rand_str(rng: &mut StdRng, n: usize) -> String {
    (0..n)
        .map(|_| char::from(HASH_ALPHABET[rng.random_range(0..HASH_ALPHABET.len())]))
        .collect()
}

/// A version-4 UUID, as Python's `uuid.UUID(int=..., version=4)`.
fn rand_uid(rng: &mut StdRng) -> String {
    let mut b: [u8; 16] = rng.random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn rand_hex(rng: &mut StdRng, digits: usize) -> String {
    (0..digits)
        .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
        .collect()
}

/// What the pods of one app share: `serve.py`'s `Apps`, plus the image digests.
struct App {
    hash: String,
    rs_uid: String,
    image_digest: String,
}

/// The workload: the apps, from which any pod can be rendered.
pub struct Workload {
    seed: u64,
    apps: Vec<App>,
    sidecar_digest: String,
}

/// The fields of one pod that change between versions (a watch MODIFIED event of `serve.py`
/// changes these three).
#[derive(Clone, Copy, Debug)]
pub struct Version {
    /// `metadata.resourceVersion`.
    pub rv: u64,
    /// The `bench.example.com/revision` annotation.
    pub revision: u64,
    /// The Ready condition's `lastTransitionTime`, seconds after 2025-01-01.
    pub ready: i64,
}

impl Version {
    /// Pod `i` as the LIST returns it.
    pub fn listed(i: usize) -> Self {
        Version {
            rv: RV_BASE + 1 + i as u64,
            revision: 0,
            ready: i as i64 + 5,
        }
    }

    /// Pod `i` after one MODIFIED event (`serve.py`: the revision and the Ready time move).
    pub fn modified(i: usize) -> Self {
        Version {
            rv: RV_BASE + 1_000_000 + i as u64,
            revision: 1,
            ready: i as i64 + 100_000,
        }
    }
}

impl Workload {
    /// The workload of `seed`.
    pub fn new(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let apps = (0..APPS)
            .map(|_| App {
                hash: rand_str(&mut rng, 10),
                rs_uid: rand_uid(&mut rng),
                image_digest: rand_hex(&mut rng, 64),
            })
            .collect();
        let sidecar_digest = rand_hex(&mut rng, 64);
        Workload {
            seed,
            apps,
            sidecar_digest,
        }
    }

    /// The JSON of pods `0..n`, each at `version(i)` ([`Version::listed`],
    /// [`Version::modified`]).
    pub fn pods(&self, n: usize, version: fn(usize) -> Version) -> Vec<Vec<u8>> {
        (0..n).map(|i| self.pod(i, version(i))).collect()
    }

    /// Pod `i`'s JSON at version `v`: `serve.py`'s `pod_template(i, created=i)`.
    pub fn pod(&self, i: usize, v: Version) -> Vec<u8> {
        // The pod's own random fields, the same in every version.
        let mut rng = StdRng::seed_from_u64(self.seed ^ (i as u64).wrapping_mul(0x9E37_79B9));
        let uid = rand_uid(&mut rng);
        let token = format!("default-token-{}", rand_str(&mut rng, 5));
        let cid1 = format!("containerd://{}", rand_hex(&mut rng, 64));
        let cid2 = format!("containerd://{}", rand_hex(&mut rng, 64));

        let a = i % APPS;
        let app_of = &self.apps[a];
        let ns = format!("ns-{}", i % NAMESPACES);
        let app = format!("app-{a}");
        let h = &app_of.hash;
        let rs = format!("{app}-{h}");
        let node = format!("node-{}", i % NODES);
        let image = format!("registry.local/{app}:v1.{}.{}", a % 7, a % 13);
        let image_id = format!("registry.local/{app}@sha256:{}", app_of.image_digest);
        let sidecar_id = format!("registry.local/log-shipper@sha256:{}", self.sidecar_digest);
        let pod_ip = format!("10.{}.{}.{}", 64 + (i >> 16) % 64, (i >> 8) & 255, i & 255);
        let host_ip = format!("172.20.{}.{}", (i % NODES) >> 8, (i % NODES) & 255);
        let created = i as i64;
        let (t_created, t_sched, t_start) = (ts(created), ts(created + 1), ts(created + 3));
        let restarted = ts(created - 86_400);
        let ready = ts(v.ready);
        let tier = TIERS[a % 3];
        let rs_uid = &app_of.rs_uid;
        let (rv, rev) = (v.rv, v.revision);
        let env = |k: &str, val: &str| {
            format!(
                r#"[{{"name":"APP_NAME","value":"{app}"}},{{"name":"LOG_LEVEL","value":"info"}},{{"name":"GOMAXPROCS","value":"2"}},{{"name":"REGION","value":"eu-west-1"}},{{"name":"{k}","value":"{val}"}}]"#
            )
        };
        let env_app = env("CONFIG_PATH", "/etc/app/config.yaml");
        let env_sidecar = env("OUTPUT_PORT", "9880");
        let sa_mount = format!(
            r#"{{"name":"{token}","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}}"#
        );
        let cstatus = |name: &str, img: &str, img_id: &str, cid: &str| {
            format!(
                r#"{{"name":"{name}","state":{{"running":{{"startedAt":"{t_start}"}}}},"lastState":{{}},"ready":true,"restartCount":0,"image":"{img}","imageID":"{img_id}","containerID":"{cid}","started":true}}"#
            )
        };
        let status_app = cstatus("app", &image, &image_id, &cid1);
        let status_sidecar = cstatus("log-shipper", SIDECAR, &sidecar_id, &cid2);

        let mut s = String::with_capacity(5 * 1024);
        let _ = write!(
            s,
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"pod-{i}","generateName":"{rs}-","namespace":"{ns}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"{t_created}","labels":{{"app":"{app}","tier":"{tier}","pod-template-hash":"{h}"}},"annotations":{{"kubectl.kubernetes.io/restartedAt":"{restarted}","bench.example.com/revision":"{rev}"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"{rs}","uid":"{rs_uid}","controller":true,"blockOwnerDeletion":true}}],"managedFields":[{{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"{t_created}","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:labels":{{}},"f:ownerReferences":{{}}}},"f:spec":{{"f:containers":{{}},"f:tolerations":{{}},"f:volumes":{{}}}}}}}}]}},"#
        );
        let _ = write!(
            s,
            r#""spec":{{"volumes":[{{"name":"config","configMap":{{"name":"{app}-config","defaultMode":420}}}},{{"name":"{token}","secret":{{"secretName":"{token}","defaultMode":420}}}}],"containers":[{{"name":"app","image":"{image}","ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}}],"env":{env_app},"resources":{{"limits":{{"cpu":"1","memory":"512Mi"}},"requests":{{"cpu":"250m","memory":"256Mi"}}}},"volumeMounts":[{{"name":"config","mountPath":"/etc/app"}},{sa_mount}],"livenessProbe":{{"httpGet":{{"path":"/healthz","port":8080,"scheme":"HTTP"}},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}},"readinessProbe":{{"httpGet":{{"path":"/ready","port":8080,"scheme":"HTTP"}},"timeoutSeconds":1,"periodSeconds":5,"successThreshold":1,"failureThreshold":3}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}},{{"name":"log-shipper","image":"{SIDECAR}","ports":[{{"name":"metrics","containerPort":2020,"protocol":"TCP"}}],"env":{env_sidecar},"resources":{{"limits":{{"cpu":"200m","memory":"128Mi"}},"requests":{{"cpu":"50m","memory":"64Mi"}}}},"volumeMounts":[{sa_mount}],"readinessProbe":{{"tcpSocket":{{"port":2020}},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","serviceAccount":"default","nodeName":"{node}","securityContext":{{}},"schedulerName":"default-scheduler","tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}},{{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"priority":0,"enableServiceLinks":true}},"#
        );
        let _ = write!(
            s,
            r#""status":{{"phase":"Running","conditions":[{{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"{t_sched}"}},{{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"{ready}"}},{{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":"{t_start}"}},{{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"{t_created}"}}],"hostIP":"{host_ip}","hostIPs":[{{"ip":"{host_ip}"}}],"podIP":"{pod_ip}","podIPs":[{{"ip":"{pod_ip}"}}],"startTime":"{t_sched}","containerStatuses":[{status_app},{status_sidecar}],"qosClass":"Burstable"}}}}"#
        );
        s.into_bytes()
    }
}
