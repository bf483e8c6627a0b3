//! Defaulting of the built-in kinds, as kube-apiserver applies it to every object it decodes
//! (creates, updates, and the result of a patch): the `SetDefaults_*` functions of
//! `pkg/apis/core/v1/defaults.go` and `pkg/apis/apps/v1/defaults.go` and the declarative
//! `+default` markers of the types (container port protocol), plus what the create strategies
//! add (`pkg/registry/core/pod/strategy.go` `PrepareForCreate`: the pod's `qosClass`;
//! `pkg/registry/core/namespace/strategy.go` `PrepareForCreate`: the `kubernetes` finalizer).
//!
//! Without them a client sees objects no cluster returns (a Deployment without `strategy`, a
//! container without `imagePullPolicy`, `kubectl describe` printing `Port: 80/`), and a
//! controller that compares what it wants with what it reads sees no difference in the sim
//! where a cluster shows one at every sync. Not covered: what admission adds (service account,
//! its token volume, priority, default tolerations). The service registry's allocations
//! (cluster IPs, node ports, IP families) are here too, as `on_create` and `keep_allocated`.

use serde_json::{Map, Value, json};

use crate::apimachinery::schema::ResourceDef;

/// Applies the kind's defaults to a decoded object (`create` also gets `on_create`).
pub(crate) fn apply(def: &ResourceDef, obj: &mut Value) {
    if !def.builtin {
        return;
    }
    let Some(o) = obj.as_object_mut() else { return };
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => {
            if let Some(spec) = child(o, "spec") {
                pod(spec);
                pod_spec(spec);
            }
            if let Some(status) = o.get_mut("status").and_then(Value::as_object_mut) {
                pod_ips(status);
            }
        }
        ("apps", "Deployment") => {
            if let Some(spec) = child(o, "spec") {
                deployment(spec);
                template(spec);
            }
        }
        ("apps", "ReplicaSet") => {
            if let Some(spec) = child(o, "spec") {
                default(spec, "replicas", json!(1));
                template(spec);
            }
        }
        ("", "Secret") => default_str(o, "type", "Opaque"),
        ("", "Service") => {
            if let Some(spec) = child(o, "spec") {
                service(spec);
            }
        }
        ("", "Namespace") => {
            // SetDefaults_Namespace: the immutable name label (also re-set on every update).
            let name = o
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if !name.is_empty()
                && let Some(meta) = child(o, "metadata")
                && let Some(labels) = child(meta, "labels")
            {
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
        _ => {}
    }
}

/// The v1 to internal conversion of a pod's status (`pkg/apis/core/v1/conversion.go`
/// `Convert_v1_PodStatus_To_core_PodStatus`) and back: a `podIP` (`hostIP`) without `podIPs`
/// (`hostIPs`) becomes their one item, and the lists' first item fills an empty single field,
/// so every stored pod carries both.
fn pod_ips(status: &mut Map<String, Value>) {
    for (one, many) in [("podIP", "podIPs"), ("hostIP", "hostIPs")] {
        let single = status
            .get(one)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let first = status
            .get(many)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(|x| x.get("ip"))
            .and_then(Value::as_str)
            .map(str::to_string);
        match (single, first) {
            (Some(ip), None) => {
                status.insert(many.into(), json!([{ "ip": ip }]));
            }
            (None, Some(ip)) => {
                status.insert(one.into(), json!(ip));
            }
            _ => {}
        }
    }
}

/// What the create strategies add beyond defaulting.
pub(crate) fn on_create(def: &ResourceDef, obj: &mut Value) {
    if !def.builtin || !def.group.is_empty() {
        return;
    }
    match def.kind.as_str() {
        "Pod" => {
            let qos = qos_class(obj.get("spec"));
            if let Some(status) = obj.as_object_mut().and_then(|o| child(o, "status")) {
                // Seeded objects (`Sim::create_object`) keep a class they carry.
                status.entry("qosClass").or_insert_with(|| json!(qos));
            }
        }
        "Service" => {
            if let Some(spec) = obj.as_object_mut().and_then(|o| child(o, "spec")) {
                allocate(spec);
            }
        }
        "Namespace" => {
            if let Some(spec) = obj.as_object_mut().and_then(|o| child(o, "spec")) {
                let finalizers = spec.entry("finalizers").or_insert_with(|| json!([]));
                if !finalizers.is_array() {
                    *finalizers = json!([]);
                }
                if let Some(f) = finalizers.as_array_mut()
                    && !f.iter().any(|x| x == "kubernetes")
                {
                    f.push(json!("kubernetes"));
                }
            }
        }
        _ => {}
    }
}

/// The object under `key`, created (or replacing a null) when missing.
fn child<'a>(o: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    let v = o.entry(key).or_insert_with(|| json!({}));
    if v.is_null() {
        *v = json!({});
    }
    v.as_object_mut()
}

fn missing(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

/// A string field Go sees as unset: absent, null or "".
fn unset_str(v: Option<&Value>) -> bool {
    missing(v) || v.and_then(Value::as_str) == Some("")
}

/// A pointer or struct field: set when absent or null.
fn default(o: &mut Map<String, Value>, key: &str, value: Value) {
    if missing(o.get(key)) {
        o.insert(key.into(), value);
    }
}

/// A string field: Go compares with "", so an empty string is defaulted too.
fn default_str(o: &mut Map<String, Value>, key: &str, value: &str) {
    if unset_str(o.get(key)) {
        o.insert(key.into(), json!(value));
    }
}

/// A non-pointer number: 0 is defaulted too.
fn default_num(o: &mut Map<String, Value>, key: &str, value: i64) {
    if missing(o.get(key)) || o.get(key).and_then(Value::as_i64) == Some(0) {
        o.insert(key.into(), json!(value));
    }
}

fn each(o: &mut Map<String, Value>, key: &str, f: impl Fn(&mut Map<String, Value>)) {
    if let Some(list) = o.get_mut(key).and_then(Value::as_array_mut) {
        for item in list.iter_mut().filter_map(Value::as_object_mut) {
            f(item);
        }
    }
}

/// `SetDefaults_Deployment`.
fn deployment(spec: &mut Map<String, Value>) {
    default(spec, "replicas", json!(1));
    if let Some(strategy) = child(spec, "strategy") {
        default_str(strategy, "type", "RollingUpdate");
        if strategy.get("type") == Some(&json!("RollingUpdate"))
            && let Some(ru) = child(strategy, "rollingUpdate")
        {
            default(ru, "maxUnavailable", json!("25%"));
            default(ru, "maxSurge", json!("25%"));
        }
    }
    default(spec, "revisionHistoryLimit", json!(10));
    default(spec, "progressDeadlineSeconds", json!(600));
}

/// A pod template's spec (`SetDefaults_PodSpec` and the containers'; not `SetDefaults_Pod`).
fn template(spec: &mut Map<String, Value>) {
    if let Some(t) = child(spec, "template")
        && let Some(ps) = child(t, "spec")
    {
        pod_spec(ps);
    }
}

/// `SetDefaults_PodSpec`, the containers', volumes' and probes'.
fn pod_spec(spec: &mut Map<String, Value>) {
    default_str(spec, "dnsPolicy", "ClusterFirst");
    default_str(spec, "restartPolicy", "Always");
    default(spec, "securityContext", json!({}));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default_str(spec, "schedulerName", "default-scheduler");
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        each(spec, key, container);
    }
    each(spec, "volumes", |v| {
        // SetDefaults_Volume: a volume without a source is an emptyDir.
        if v.keys().all(|k| k == "name") {
            v.insert("emptyDir".into(), json!({}));
        }
        for source in ["configMap", "secret", "downwardAPI", "projected"] {
            if let Some(s) = v.get_mut(source).and_then(Value::as_object_mut) {
                // 0644, as SetDefaults_*VolumeSource.
                default(s, "defaultMode", json!(420));
            }
        }
    });
}

/// `SetDefaults_Pod`: enableServiceLinks, and requests default to limits.
fn pod(spec: &mut Map<String, Value>) {
    default(spec, "enableServiceLinks", json!(true));
    for key in ["containers", "initContainers"] {
        each(spec, key, |c| {
            let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) else {
                return;
            };
            let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() else {
                return;
            };
            if let Some(requests) = child(res, "requests") {
                for (k, v) in limits {
                    requests.entry(k).or_insert(v);
                }
            }
        });
    }
}

/// `SetDefaults_Container`, ports (`+default="TCP"`), probes (`SetDefaults_Probe`,
/// `SetDefaults_HTTPGetAction`); `resources` is a struct, always encoded.
fn container(c: &mut Map<String, Value>) {
    if unset_str(c.get("imagePullPolicy")) {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let policy = if image_tag(image) == "latest" {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    default_str(c, "terminationMessagePath", "/dev/termination-log");
    default_str(c, "terminationMessagePolicy", "File");
    default(c, "resources", json!({}));
    each(c, "ports", |p| default_str(p, "protocol", "TCP"));
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            default_num(p, "timeoutSeconds", 1);
            default_num(p, "periodSeconds", 10);
            default_num(p, "successThreshold", 1);
            default_num(p, "failureThreshold", 3);
            if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                default_str(h, "path", "/");
                default_str(h, "scheme", "HTTP");
            }
        }
    }
}

/// The tag `parsers.ParseImageName` finds: the one after the last `:` of the name (not of a
/// registry port), `latest` when there is neither a tag nor a digest.
fn image_tag(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag,
        None if digest.is_some() => "",
        None => "latest",
    }
}

/// `SetDefaults_Service` (without what the registry allocates).
fn service(spec: &mut Map<String, Value>) {
    default_str(spec, "sessionAffinity", "None");
    match spec.get("sessionAffinity").and_then(Value::as_str) {
        Some("None") => {
            spec.remove("sessionAffinityConfig");
        }
        Some("ClientIP") => {
            let timeout = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.get("clientIP"))
                .and_then(|c| c.get("timeoutSeconds"));
            if missing(timeout) {
                spec.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": 10800}}),
                );
            }
        }
        _ => {}
    }
    default_str(spec, "type", "ClusterIP");
    each(spec, "ports", |p| {
        default_str(p, "protocol", "TCP");
        let target = p.get("targetPort");
        if missing(target) || target == Some(&json!(0)) || target == Some(&json!("")) {
            let port = p.get("port").cloned().unwrap_or(json!(0));
            p.insert("targetPort".into(), port);
        }
    });
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    // service.ExternallyAccessible
    let externally =
        ty == "LoadBalancer" || ty == "NodePort" || (ty == "ClusterIP" && external_ips);
    if externally {
        default_str(spec, "externalTrafficPolicy", "Cluster");
    }
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP") {
        default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
}

/// Cluster IPs and node ports handed out so far (process-wide, so unique in every sim).
static ALLOCATED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn next_allocation() -> u32 {
    ALLOCATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What the service registry allocates on create (`pkg/registry/core/service/storage/alloc.go`):
/// a cluster IP from the service range (10.96.0.0/12 here) unless the service is headless
/// (`None`) or an ExternalName, the single-stack IPv4 family fields, and a node port
/// (30000-32767) for each port of a NodePort or LoadBalancer service that has none.
fn allocate(spec: &mut Map<String, Value>) {
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    if ty == "ExternalName" {
        return;
    }
    let ip = match spec.get("clusterIP").and_then(Value::as_str) {
        Some(ip) if !ip.is_empty() => ip.to_string(),
        _ => {
            // 10.96.0.10 onwards, wrapping inside the /12.
            let n = 10 + next_allocation() % ((1 << 20) - 12);
            format!("10.{}.{}.{}", 96 + (n >> 16), (n >> 8) & 0xff, n & 0xff)
        }
    };
    spec.insert("clusterIP".into(), json!(ip));
    default(spec, "clusterIPs", json!([ip]));
    default(spec, "ipFamilies", json!(["IPv4"]));
    default(spec, "ipFamilyPolicy", json!("SingleStack"));
    if ty == "NodePort" || ty == "LoadBalancer" {
        each(spec, "ports", |p| {
            if missing(p.get("nodePort")) || p.get("nodePort") == Some(&json!(0)) {
                p.insert("nodePort".into(), json!(30000 + next_allocation() % 2768));
            }
        });
    }
}

/// An update keeps what the registry allocated when the new object leaves it out
/// (`pkg/registry/core/service/storage/storage.go` `patchAllocatedValues`): the cluster IPs
/// and their families, and each port's node port (matched by port number).
pub(crate) fn keep_allocated(def: &ResourceDef, old: &Value, new: &mut Value) {
    if !(def.builtin && def.group.is_empty() && def.kind == "Service") {
        return;
    }
    let Some(old_spec) = old.get("spec").and_then(Value::as_object) else {
        return;
    };
    let Some(spec) = new.as_object_mut().and_then(|o| child(o, "spec")) else {
        return;
    };
    if unset_str(spec.get("clusterIP")) {
        for k in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if let Some(v) = old_spec.get(k)
                && (k == "clusterIP" || missing(spec.get(k)))
            {
                spec.insert(k.into(), v.clone());
            }
        }
    }
    let old_ports: Vec<(Value, Value)> = old_spec
        .get("ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter_map(|p| Some((p.get("port")?.clone(), p.get("nodePort")?.clone())))
                .collect()
        })
        .unwrap_or_default();
    each(spec, "ports", |p| {
        if missing(p.get("nodePort"))
            && let Some((_, np)) = old_ports
                .iter()
                .find(|(port, _)| Some(port) == p.get("port"))
        {
            p.insert("nodePort".into(), np.clone());
        }
    });
}

/// `qos.GetPodQOS` (`pkg/apis/core/helper/qos/qos.go`), over the containers and init
/// containers' cpu and memory: BestEffort without any request or limit, Guaranteed when every
/// container limits both and requests (defaulted to the limits) equal them, else Burstable.
fn qos_class(spec: Option<&Value>) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.and_then(|s| s.get(*k)).and_then(Value::as_array))
        .flatten();
    for c in containers {
        let res = c.get("resources");
        let get = |kind: &str, r: &str| {
            res.and_then(|x| x.get(kind))
                .and_then(|x| x.get(r))
                .map(quantity)
                .filter(|q| *q != Some(0.0))
        };
        for r in ["cpu", "memory"] {
            let (req, lim) = (get("requests", r), get("limits", r));
            any |= req.is_some() || lim.is_some();
            // Requests default to limits (SetDefaults_Pod), so a missing request is the limit.
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(q), Some(l)) if q != l => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A resource quantity's value (`100m`, `1.5`, `128Mi`, `1G`, `1e3`), `None` when unparsable.
fn quantity(v: &Value) -> Option<f64> {
    if let Some(n) = v.as_f64() {
        return Some(n);
    }
    let s = v.as_str()?.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apimachinery::schema::Registry;

    fn def(plural: &str) -> std::sync::Arc<ResourceDef> {
        let reg = Registry::new(&[]).unwrap();
        reg.by_plural(plural).unwrap().clone()
    }

    fn defaulted(plural: &str, mut v: Value) -> Value {
        apply(&def(plural), &mut v);
        v
    }

    #[test]
    fn image_tags_like_parse_image_name() {
        assert_eq!(image_tag("nginx"), "latest");
        assert_eq!(image_tag("nginx:1.25"), "1.25");
        assert_eq!(image_tag("registry:5000/team/app"), "latest");
        assert_eq!(image_tag("registry:5000/team/app:v2"), "v2");
        assert_eq!(image_tag("app@sha256:abc"), "");
        assert_eq!(image_tag("app:latest"), "latest");
    }

    #[test]
    fn deployment_and_its_template() {
        let d = defaulted(
            "deployments",
            json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "img:1", "ports": [{"containerPort": 80}]}]}}}}),
        );
        let spec = &d["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(
            (
                &spec["revisionHistoryLimit"],
                &spec["progressDeadlineSeconds"]
            ),
            (&json!(10), &json!(600))
        );
        let ps = &spec["template"]["spec"];
        assert_eq!(ps["restartPolicy"], "Always");
        assert_eq!(ps["terminationGracePeriodSeconds"], 30);
        assert!(
            ps.get("enableServiceLinks").is_none(),
            "SetDefaults_Pod is for pods only"
        );
        let c = &ps["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(c["resources"], json!({}));
        // Idempotent, and a Recreate strategy gets no rollingUpdate.
        assert_eq!(defaulted("deployments", d.clone()), d);
        let r = defaulted(
            "deployments",
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
        );
        assert_eq!(r["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn pods_services_secrets_namespaces() {
        let p = defaulted(
            "pods",
            json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}}]}}),
        );
        assert_eq!(p["spec"]["enableServiceLinks"], true);
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "1"})
        );
        let s = defaulted(
            "services",
            json!({"spec": {"ports": [{"port": 80}], "sessionAffinityConfig": {}}}),
        );
        assert_eq!(
            s["spec"],
            json!({"ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}], "sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster"})
        );
        assert_eq!(defaulted("secrets", json!({}))["type"], "Opaque");
        let ns = defaulted("namespaces", json!({"metadata": {"name": "team"}}));
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "team"
        );
    }

    #[test]
    fn services_get_and_keep_their_allocations() {
        let def = def("services");
        let mut s = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        apply(&def, &mut s);
        on_create(&def, &mut s);
        let ip = s["spec"]["clusterIP"].as_str().unwrap().to_string();
        assert!(ip.starts_with("10."), "{s}");
        assert_eq!(s["spec"]["clusterIPs"], json!([ip]));
        assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
        let np = s["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
        assert!((30000..=32767).contains(&np));
        // A PUT of the original body keeps them.
        let mut put = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        keep_allocated(&def, &s, &mut put);
        assert_eq!(put["spec"]["clusterIP"], json!(ip));
        assert_eq!(put["spec"]["ports"][0]["nodePort"], json!(np));
        // Headless and ExternalName services get no IP.
        let mut h = json!({"spec": {"clusterIP": "None"}});
        on_create(&def, &mut h);
        assert_eq!(h["spec"]["clusterIPs"], json!(["None"]));
        let mut e = json!({"spec": {"type": "ExternalName", "externalName": "a.b"}});
        on_create(&def, &mut e);
        assert!(e["spec"].get("clusterIP").is_none());
    }

    #[test]
    fn qos_classes() {
        let c = |res: Value| json!({"containers": [{"name": "c", "resources": res}]});
        assert_eq!(qos_class(Some(&c(json!({})))), "BestEffort");
        assert_eq!(
            qos_class(Some(&c(
                json!({"limits": {"cpu": "500m", "memory": "1Gi"}})
            ))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(Some(&c(
                json!({"requests": {"cpu": "0.5", "memory": "1024Mi"}, "limits": {"cpu": "500m", "memory": "1Gi"}})
            ))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(Some(&c(json!({"requests": {"cpu": "100m"}})))),
            "Burstable"
        );
    }
}
