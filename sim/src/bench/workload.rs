//! The workload of `serve.py` (`../shared/bench/serve.py`): the same pods, drawn from the same
//! seed in the same order (CPython's generator, [`super::pyrandom`]), the same watch events and
//! resourceVersions, rendered once as JSON and as kube's protobuf (`kinformer::protobuf`'s
//! encoder, the sim's).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use super::BenchError;
use super::pyrandom::PyRandom;
use crate::apimachinery::util::format_rfc3339;
use kinformer::protobuf;

/// 2025-01-01T00:00:00Z: every timestamp is an offset from it.
const BASE_EPOCH: i64 = 1_735_689_600;
/// The etcd revision just before the first pod was created.
pub(crate) const RV_BASE: u64 = 4_000_000;
const NS_COUNT: u64 = 100;
const APP_COUNT: u64 = 500;
const NODE_COUNT: u64 = 1000;
const TIERS: [&str; 3] = ["frontend", "backend", "cache"];
const HASH_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn ts(sec: i64) -> String {
    format_rfc3339(BASE_EPOCH + sec)
}

fn rand_str(rng: &mut PyRandom, n: usize) -> String {
    (0..n)
        .map(|_| char::from(rng.choice(HASH_ALPHABET)))
        .collect()
}

/// `str(uuid.UUID(int=rng.getrandbits(128), version=4))`.
fn rand_uid(rng: &mut PyRandom) -> String {
    let w = rng.getrandbits_words(128);
    let mut x = w
        .iter()
        .rev()
        .fold(0_u128, |a, x| (a << 32) | u128::from(*x));
    x &= !(0xc000_u128 << 48);
    x |= 0x8000_u128 << 48;
    x &= !(0xf000_u128 << 64);
    x |= 4_u128 << 76;
    let h = format!("{x:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// `"%064x" % rng.getrandbits(256)`.
fn rand_hex256(rng: &mut PyRandom) -> String {
    let w = rng.getrandbits_words(256);
    w.iter().rev().map(|x| format!("{x:08x}")).collect()
}

/// Per-app constants shared by its pods (ReplicaSet uid, template hash).
struct Apps {
    hash: Vec<String>,
    rs_uid: Vec<String>,
}

/// What the generator drew for one pod; the rest follows from its index.
struct PodSeed {
    i: u64,
    created: i64,
    token: String,
    cid1: String,
    cid2: String,
    uid: String,
    /// The sentinel `bench/done`.
    done: bool,
}

impl PodSeed {
    /// `pod_template`'s draws, in its order: token, two container IDs, the uid.
    fn draw(rng: &mut PyRandom, i: u64, created: i64) -> Self {
        let token = format!("default-token-{}", rand_str(rng, 5));
        let cid1 = format!("containerd://{}", rand_hex256(rng));
        let cid2 = format!("containerd://{}", rand_hex256(rng));
        let uid = rand_uid(rng);
        Self {
            i,
            created,
            token,
            cid1,
            cid2,
            uid,
            done: false,
        }
    }

    fn namespace(&self) -> String {
        if self.done {
            "bench".into()
        } else {
            format!("ns-{}", self.i % NS_COUNT)
        }
    }
}

fn sha256_hex(s: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Pod `seed` at resourceVersion `rv`, revision annotation `rev`, Ready since `ready`: the
/// object `serve.py`'s `pod_template` writes (as a JSON value: key order aside, the same).
fn pod(apps: &Apps, seed: &PodSeed, rv: u64, rev: u64, ready: &str) -> Value {
    let i = seed.i;
    let a = (i % APP_COUNT) as usize;
    let ns = seed.namespace();
    let name = if seed.done {
        "done".to_string()
    } else {
        format!("pod-{i}")
    };
    let app = format!("app-{a}");
    let h = &apps.hash[a];
    let rs = format!("{app}-{h}");
    let node = format!("node-{}", i % NODE_COUNT);
    let image = format!("registry.local/{app}:v1.{}.{}", a % 7, a % 13);
    let sidecar = "registry.local/log-shipper:v2.4.1";
    let pod_ip = format!("10.{}.{}.{}", 64 + (i >> 16) % 64, (i >> 8) & 255, i & 255);
    let host_ip = format!(
        "172.20.{}.{}",
        (i % NODE_COUNT) >> 8,
        (i % NODE_COUNT) & 255
    );
    let created = seed.created;
    let (t_created, t_sched, t_start) = (ts(created), ts(created + 1), ts(created + 3));
    let env = |k: &str, v: &str| {
        json!([{"name": "APP_NAME", "value": app}, {"name": "LOG_LEVEL", "value": "info"},
            {"name": "GOMAXPROCS", "value": "2"}, {"name": "REGION", "value": "eu-west-1"},
            {"name": k, "value": v}])
    };
    let sa_mount = json!({"name": seed.token, "readOnly": true,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"});
    let cstatus = |cname: &str, img: &str, cid: &str| {
        let repo = img.split(':').next().unwrap_or(img);
        json!({"name": cname, "state": {"running": {"startedAt": t_start}}, "lastState": {},
            "ready": true, "restartCount": 0, "image": img,
            "imageID": format!("{repo}@sha256:{}", sha256_hex(img)),
            "containerID": cid, "started": true})
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "generateName": format!("{rs}-"), "namespace": ns, "uid": seed.uid,
            "resourceVersion": rv.to_string(), "creationTimestamp": t_created,
            "labels": {"app": app, "tier": TIERS[a % 3], "pod-template-hash": h},
            "annotations": {"kubectl.kubernetes.io/restartedAt": ts(created - 86_400),
                "bench.example.com/revision": rev.to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                "uid": apps.rs_uid[a], "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                "apiVersion": "v1", "time": t_created, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {}, "f:ownerReferences": {}},
                    "f:spec": {"f:containers": {}, "f:tolerations": {}, "f:volumes": {}}}}],
        },
        "spec": {
            "volumes": [
                {"name": "config", "configMap": {"name": format!("{app}-config"), "defaultMode": 420}},
                {"name": seed.token, "secret": {"secretName": seed.token, "defaultMode": 420}},
            ],
            "containers": [
                {"name": "app", "image": image,
                 "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                 "env": env("CONFIG_PATH", "/etc/app/config.yaml"),
                 "resources": {"limits": {"cpu": "1", "memory": "512Mi"},
                    "requests": {"cpu": "250m", "memory": "256Mi"}},
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}, sa_mount],
                 "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                    "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1,
                    "failureThreshold": 3},
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                    "timeoutSeconds": 1, "periodSeconds": 5, "successThreshold": 1,
                    "failureThreshold": 3},
                 "terminationMessagePath": "/dev/termination-log",
                 "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"},
                {"name": "log-shipper", "image": sidecar,
                 "ports": [{"name": "metrics", "containerPort": 2020, "protocol": "TCP"}],
                 "env": env("OUTPUT_PORT", "9880"),
                 "resources": {"limits": {"cpu": "200m", "memory": "128Mi"},
                    "requests": {"cpu": "50m", "memory": "64Mi"}},
                 "volumeMounts": [sa_mount],
                 "readinessProbe": {"tcpSocket": {"port": 2020}, "timeoutSeconds": 1,
                    "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
                 "terminationMessagePath": "/dev/termination-log",
                 "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"},
            ],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
            "serviceAccount": "default", "nodeName": node, "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "priority": 0, "enableServiceLinks": true,
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastProbeTime": null,
                    "lastTransitionTime": t_sched},
                {"type": "Ready", "status": "True", "lastProbeTime": null,
                    "lastTransitionTime": ready},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null,
                    "lastTransitionTime": t_start},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                    "lastTransitionTime": t_created},
            ],
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}], "startTime": t_sched,
            "containerStatuses": [cstatus("app", &image, &seed.cid1),
                cstatus("log-shipper", sidecar, &seed.cid2)],
            "qosClass": "Burstable",
        },
    })
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// A pod created (or the sentinel).
    Added,
    /// A pod's revision annotation and Ready time changed.
    Modified,
    /// A pod deleted (its last state, at the deletion's resourceVersion).
    Deleted,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One object to render: a pod's seed at a resourceVersion.
struct Spec {
    seed: Arc<PodSeed>,
    rv: u64,
    rev: u64,
    ready: i64,
}

/// Objects rendered in one format, back to back, with their boundaries.
pub(crate) struct Rendered {
    /// JSON objects, or protobuf `Pod` messages (no envelope).
    pub(crate) items: Bytes,
    /// `n + 1` offsets into `items`.
    pub(crate) item_off: Vec<usize>,
    /// JSON event lines (`{"type":...,"object":...}\n`), or protobuf watch frames.
    pub(crate) events: Bytes,
    /// `m + 2` offsets into `events` (the sentinel included).
    pub(crate) ev_off: Vec<usize>,
}

impl Rendered {
    pub(crate) fn item(&self, k: usize) -> &[u8] {
        &self.items[self.item_off[k]..self.item_off[k + 1]]
    }
    pub(crate) fn event(&self, k: usize) -> Bytes {
        self.events.slice(self.ev_off[k]..self.ev_off[k + 1])
    }
}

/// The generated workload: `n` pods at `r0`, then `m` events and the sentinel.
pub struct Workload {
    /// Pods in the list.
    pub n: usize,
    /// Watch events (the sentinel not counted).
    pub m: usize,
    /// The list's resourceVersion.
    pub r0: u64,
    /// The sentinel's resourceVersion.
    pub last_rv: u64,
    /// ADDED events (the sentinel not counted).
    pub added: usize,
    /// DELETED events.
    pub deleted: usize,
    /// Objects a client holds at the end: `n + added - deleted + 1`.
    pub expected_objects: usize,
    pub(crate) item_ns: Vec<String>,
    pub(crate) item_rvs: Vec<u64>,
    pub(crate) ev_ns: Vec<String>,
    pub(crate) ev_rvs: Vec<u64>,
    pub(crate) json: Rendered,
    pub(crate) pb: Rendered,
}

/// One rendered object (the JSON object and the protobuf message).
type Pair = (Vec<u8>, Vec<u8>);

fn render_one(apps: &Apps, s: &Spec) -> Result<Pair, BenchError> {
    let v = pod(apps, &s.seed, s.rv, s.rev, &ts(s.ready));
    let json = serde_json::to_vec(&v).map_err(|e| BenchError::Render(e.to_string()))?;
    let pb =
        protobuf::object_message("v1", "Pod", &v).map_err(|e| BenchError::Render(e.to_string()))?;
    Ok((json, pb))
}

/// Renders every spec on `threads` threads, in order.
fn render_all(apps: &Apps, specs: &[Spec], threads: usize) -> Result<Vec<Pair>, BenchError> {
    let chunk = specs.len().div_ceil(threads.max(1)).max(1);
    let parts: Vec<Result<Vec<Pair>, BenchError>> = std::thread::scope(|sc| {
        let hs: Vec<_> = specs
            .chunks(chunk)
            .map(|c| sc.spawn(move || c.iter().map(|s| render_one(apps, s)).collect()))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Render("a render thread panicked".into())))
            })
            .collect()
    });
    let mut out = Vec::with_capacity(specs.len());
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

impl Workload {
    /// Generates `serve.py --pods n --events m --seed seed`'s workload and renders it.
    pub fn generate(n: usize, m: usize, seed: u64) -> Result<Self, BenchError> {
        let mut rng = PyRandom::new(seed);
        let hash = (0..APP_COUNT).map(|_| rand_str(&mut rng, 10)).collect();
        let rs_uid = (0..APP_COUNT).map(|_| rand_uid(&mut rng)).collect();
        let apps = Apps { hash, rs_uid };

        // Live pods: (seed, revision, Ready time), by index.
        let mut state: Vec<Option<(Arc<PodSeed>, u64, i64)>> = Vec::with_capacity(n + m);
        let mut items = Vec::with_capacity(n);
        let mut rv = RV_BASE;
        for i in 0..n {
            rv += 1;
            let s = Arc::new(PodSeed::draw(&mut rng, i as u64, i as i64));
            let ready = i as i64 + 5;
            state.push(Some((s.clone(), 0, ready)));
            items.push(Spec {
                seed: s,
                rv,
                rev: 0,
                ready,
            });
        }
        rv += 1;
        let r0 = rv;
        let mut live: Vec<usize> = (0..n).collect();
        let mut events: Vec<(EventType, Spec)> = Vec::with_capacity(m + 1);
        let (mut added, mut deleted) = (0, 0);
        for e in 0..m {
            // Gaps: other resources' writes. Python evaluates both operands of the product.
            let gap = rng.random() < 0.25;
            let k = rng.randint(1, 3);
            rv += 1 + if gap { k } else { 0 };
            let x = rng.random();
            let created = (n + e) as i64;
            let (etype, k) = if x < 0.05 && !live.is_empty() {
                let j = rng.randbelow(live.len() as u64) as usize;
                let k = live.swap_remove(j);
                deleted += 1;
                (EventType::Deleted, k)
            } else if x < 0.10 || live.is_empty() {
                let k = state.len();
                let s = Arc::new(PodSeed::draw(&mut rng, k as u64, created));
                state.push(Some((s, 0, created + 5)));
                live.push(k);
                added += 1;
                (EventType::Added, k)
            } else {
                let k = live[rng.randbelow(live.len() as u64) as usize];
                if let Some(st) = state[k].as_mut() {
                    st.1 = e as u64 + 1;
                    st.2 = created + 10;
                }
                (EventType::Modified, k)
            };
            let st = if etype == EventType::Deleted {
                state[k].take()
            } else {
                state[k].clone()
            };
            // Invariant: a live index always has its state.
            let (s, rev, ready) = st.ok_or_else(|| BenchError::Render("lost a pod".into()))?;
            events.push((
                etype,
                Spec {
                    seed: s,
                    rv,
                    rev,
                    ready,
                },
            ));
        }
        // The sentinel bench/done, always last.
        rv += 1;
        let mut s = PodSeed::draw(&mut rng, state.len() as u64, (n + m) as i64);
        s.done = true;
        events.push((
            EventType::Added,
            Spec {
                seed: Arc::new(s),
                rv,
                rev: 0,
                ready: (n + m) as i64,
            },
        ));
        let last_rv = rv;

        let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
        let item_ns = items.iter().map(|s| s.seed.namespace()).collect();
        let item_rvs = items.iter().map(|s| s.rv).collect();
        let ev_ns = events.iter().map(|(_, s)| s.seed.namespace()).collect();
        let ev_rvs = events.iter().map(|(_, s)| s.rv).collect();
        let items_r = render_all(&apps, &items, threads)?;
        drop(items);
        let types: Vec<EventType> = events.iter().map(|(t, _)| *t).collect();
        let specs: Vec<Spec> = events.into_iter().map(|(_, s)| s).collect();
        let events_r = render_all(&apps, &specs, threads)?;
        drop(specs);

        let (mut ji, mut pi) = (Vec::new(), Vec::new());
        let (mut ji_off, mut pi_off) = (vec![0], vec![0]);
        for (j, p) in &items_r {
            ji.extend_from_slice(j);
            ji_off.push(ji.len());
            pi.extend_from_slice(p);
            pi_off.push(pi.len());
        }
        drop(items_r);
        let (mut je, mut pe) = (Vec::new(), Vec::new());
        let (mut je_off, mut pe_off) = (vec![0], vec![0]);
        for (t, (j, p)) in types.iter().zip(&events_r) {
            je.extend_from_slice(br#"{"type":""#);
            je.extend_from_slice(t.as_str().as_bytes());
            je.extend_from_slice(br#"","object":"#);
            je.extend_from_slice(j);
            je.extend_from_slice(b"}\n");
            je_off.push(je.len());
            let frame = protobuf::watch_frame(t.as_str(), &protobuf::envelope_raw("v1", "Pod", p))
                .map_err(|e| BenchError::Render(e.to_string()))?;
            pe.extend_from_slice(&frame);
            pe_off.push(pe.len());
        }
        Ok(Self {
            n,
            m,
            r0,
            last_rv,
            added,
            deleted,
            expected_objects: n + added - deleted + 1,
            item_ns,
            item_rvs,
            ev_ns,
            ev_rvs,
            json: Rendered {
                items: Bytes::from(ji),
                item_off: ji_off,
                events: Bytes::from(je),
                ev_off: je_off,
            },
            pb: Rendered {
                items: Bytes::from(pi),
                item_off: pi_off,
                events: Bytes::from(pe),
                ev_off: pe_off,
            },
        })
    }

    /// Bytes of the JSON list items and events (as `serve.py` reports them).
    pub fn json_bytes(&self) -> (usize, usize) {
        (self.json.items.len(), self.json.events.len())
    }

    /// Bytes of the protobuf list items and watch frames.
    pub fn protobuf_bytes(&self) -> (usize, usize) {
        (self.pb.items.len(), self.pb.events.len())
    }
}

#[cfg(test)]
mod tests {
    /// FNV-1a, 64 bits: stable across Rust versions (unlike `DefaultHasher`).
    fn fnv(b: &[u8]) -> u64 {
        b.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
            (h ^ u64::from(*x)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// The twin's protobuf pods and watch frames are byte for byte what the sim's own encoder
    /// wrote before the sim moved onto `kinformer::protobuf`'s (digests taken then, at ad2074a).
    #[test]
    fn protobuf_bytes_are_those_of_the_sims_former_encoder() {
        let wl = super::Workload::generate(300, 600, 7).expect("the workload renders");
        assert_eq!(
            (fnv(&wl.pb.items), fnv(&wl.pb.events)),
            (0x437f_cd57_900d_f5ef, 0xfe3a_4d71_8137_c476)
        );
    }
}
