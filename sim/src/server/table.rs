//! `meta.k8s.io/v1` Table output (what `kubectl get` asks for with `Accept: ...;as=Table`).

use serde_json::{Value, json};

use crate::apimachinery::schema::{ResourceDef, TableKind};
use crate::apimachinery::util::{human_age, now_unix, parse_rfc3339};

/// What Table rows embed (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub(crate) fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

fn col(name: &str, ty: &str, format: &str, priority: u32, description: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
}

/// Column definitions for a kind.
pub(crate) fn columns(def: &ResourceDef) -> Vec<Value> {
    let name = col(
        "Name",
        "string",
        "name",
        0,
        "Name must be unique within a namespace.",
    );
    let age = col(
        "Age",
        "string",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    );
    let s = |n: &str| col(n, "string", "", 0, "");
    let i = |n: &str| col(n, "integer", "", 0, "");
    // The priority-1 columns are what `-o wide` adds (printers.go AddHandlers).
    let wide = |n: &str| col(n, "string", "", 1, "");
    match def.table {
        TableKind::Generic => vec![name, age],
        TableKind::Pod => vec![
            name,
            s("Ready"),
            s("Status"),
            i("Restarts"),
            age,
            wide("IP"),
            wide("Node"),
        ],
        TableKind::Deployment => vec![
            name,
            s("Ready"),
            i("Up-to-date"),
            i("Available"),
            age,
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        TableKind::ReplicaSet => vec![
            name,
            i("Desired"),
            i("Current"),
            i("Ready"),
            age,
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        TableKind::Service => vec![
            name,
            s("Type"),
            s("Cluster-IP"),
            s("External-IP"),
            s("Port(s)"),
            age,
            wide("Selector"),
        ],
        TableKind::ConfigMap => vec![name, i("Data"), age],
        TableKind::Secret => vec![name, s("Type"), i("Data"), age],
        TableKind::Namespace => vec![name, s("Status"), age],
        TableKind::Node => vec![name, s("Status"), s("Roles"), age, s("Version")],
    }
}

fn int(v: &Value, path: &[&str]) -> i64 {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(n) => cur = n,
            None => return 0,
        }
    }
    cur.as_i64().unwrap_or(0)
}

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(n) => cur = n,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.to_string()
    }
}

/// The wide cells of a Deployment or ReplicaSet: its pod template's container names and
/// images, comma-joined (printers.go `layoutContainerCells`), and its selector.
fn workload_wide_cells(obj: &Value) -> [Value; 3] {
    let cs = obj
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    let join = |k: &str| {
        cs.map(|cs| {
            cs.iter()
                .map(|c| c.get(k).and_then(Value::as_str).unwrap_or(""))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
    };
    [
        json!(join("name")),
        json!(join("image")),
        json!(label_selector(
            obj.get("spec").and_then(|s| s.get("selector"))
        )),
    ]
}

/// A `metav1.LabelSelector` as `LabelSelectorAsSelector(...).String()` prints it: the
/// requirements sorted by key, `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`; `<none>` when
/// there is no selector and `` for an empty one.
fn label_selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| !s.is_null()) else {
        return "<none>".into();
    };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let mut values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            values.sort_unstable();
            let r = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.to_string(),
                "DoesNotExist" => format!("!{key}"),
                _ => continue,
            };
            reqs.push((key.to_string(), r));
        }
    }
    reqs.sort();
    reqs.into_iter()
        .map(|(_, r)| r)
        .collect::<Vec<_>>()
        .join(",")
}

/// A service's selector map as `labels.FormatLabels` prints it (`<none>` when empty).
fn map_selector(sel: Option<&Value>) -> String {
    let mut pairs: Vec<String> = sel
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        return "<none>".into();
    }
    pairs.sort();
    pairs.join(",")
}

/// The cells of one row.
pub(crate) fn cells(def: &ResourceDef, obj: &Value, now: i64) -> Vec<Value> {
    let name = json!(text(obj, &["metadata", "name"]));
    let age = match parse_rfc3339(text(obj, &["metadata", "creationTimestamp"])) {
        Some(t) => human_age(now - t),
        None => "<unknown>".into(),
    };
    let age = json!(age);
    let len = |p: &str| obj.get(p).and_then(Value::as_object).map_or(0, |m| m.len());
    match def.table {
        TableKind::Generic => vec![name, age],
        TableKind::Pod => {
            let containers = obj
                .get("spec")
                .and_then(|s| s.get("containers"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let statuses = obj
                .get("status")
                .and_then(|s| s.get("containerStatuses"))
                .and_then(Value::as_array);
            let ready = statuses.map_or(0, |s| {
                s.iter()
                    .filter(|c| c.get("ready") == Some(&json!(true)))
                    .count()
            });
            let restarts: i64 =
                statuses.map_or(0, |s| s.iter().map(|c| int(c, &["restartCount"])).sum());
            let mut status = text(obj, &["status", "phase"]).to_string();
            if obj
                .get("metadata")
                .and_then(|m| m.get("deletionTimestamp"))
                .is_some()
            {
                status = "Terminating".into();
            }
            vec![
                name,
                json!(format!("{ready}/{containers}")),
                json!(or_none(&status)),
                json!(restarts),
                age,
                json!(or_none(text(obj, &["status", "podIP"]))),
                json!(or_none(text(obj, &["spec", "nodeName"]))),
            ]
        }
        TableKind::Deployment => {
            let mut row = vec![
                name,
                json!(format!(
                    "{}/{}",
                    int(obj, &["status", "readyReplicas"]),
                    int(obj, &["spec", "replicas"])
                )),
                json!(int(obj, &["status", "updatedReplicas"])),
                json!(int(obj, &["status", "availableReplicas"])),
                age,
            ];
            row.extend(workload_wide_cells(obj));
            row
        }
        TableKind::ReplicaSet => {
            let mut row = vec![
                name,
                json!(int(obj, &["spec", "replicas"])),
                json!(int(obj, &["status", "replicas"])),
                json!(int(obj, &["status", "readyReplicas"])),
                age,
            ];
            row.extend(workload_wide_cells(obj));
            row
        }
        TableKind::Service => {
            let ports = obj
                .get("spec")
                .and_then(|s| s.get("ports"))
                .and_then(Value::as_array)
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            // printers.go makePortString: `port[:nodePort]/protocol`.
                            let proto = match text(p, &["protocol"]) {
                                "" => "TCP",
                                proto => proto,
                            };
                            match p.get("nodePort").and_then(Value::as_i64) {
                                Some(np) if np > 0 => {
                                    format!("{}:{np}/{proto}", int(p, &["port"]))
                                }
                                _ => format!("{}/{proto}", int(p, &["port"])),
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            let ty = text(obj, &["spec", "type"]);
            // printers.go getServiceExternalIP (without load-balancer ingress addresses).
            let external_ips: Vec<&str> = obj
                .get("spec")
                .and_then(|s| s.get("externalIPs"))
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let external = match ty {
                "ExternalName" => text(obj, &["spec", "externalName"]).to_string(),
                _ if !external_ips.is_empty() => external_ips.join(","),
                "LoadBalancer" => "<pending>".to_string(),
                _ => "<none>".to_string(),
            };
            vec![
                name,
                json!(if ty.is_empty() { "ClusterIP" } else { ty }),
                json!(or_none(text(obj, &["spec", "clusterIP"]))),
                json!(external),
                json!(or_none(&ports)),
                age,
                json!(map_selector(
                    obj.get("spec").and_then(|s| s.get("selector"))
                )),
            ]
        }
        TableKind::ConfigMap => vec![name, json!(len("data") + len("binaryData")), age],
        TableKind::Secret => vec![
            name,
            json!(or_none(text(obj, &["type"]))),
            json!(len("data")),
            age,
        ],
        TableKind::Namespace => vec![name, json!(or_none(text(obj, &["status", "phase"]))), age],
        TableKind::Node => {
            let ready = obj
                .get("status")
                .and_then(|s| s.get("conditions"))
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| text(c, &["type"]) == "Ready"))
                .map_or("Unknown", |c| {
                    if text(c, &["status"]) == "True" {
                        "Ready"
                    } else {
                        "NotReady"
                    }
                });
            vec![
                name,
                json!(ready),
                json!("<none>"),
                age,
                json!(or_none(text(
                    obj,
                    &["status", "nodeInfo", "kubeletVersion"]
                ))),
            ]
        }
    }
}

/// The PartialObjectMetadata form of an object.
pub(crate) fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A Table of `objs` (full objects).
pub(crate) fn table(
    def: &ResourceDef,
    objs: &[Value],
    rv: u64,
    cont: Option<&str>,
    include: IncludeObject,
) -> Value {
    let now = now_unix();
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(def, o, now)});
            let embedded = match include {
                IncludeObject::None => None,
                IncludeObject::Metadata => Some(partial_metadata(o)),
                IncludeObject::Object => Some(o.clone()),
            };
            if let (Some(e), Some(r)) = (embedded, row.as_object_mut()) {
                r.insert("object".into(), e);
            }
            row
        })
        .collect();
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let (Some(c), Some(m)) = (cont, meta.as_object_mut()) {
        m.insert("continue".into(), json!(c));
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns(def),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_print_like_kubernetes() {
        let sel = json!({"matchLabels": {"tier": "web", "app": "a"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                                 {"key": "gone", "operator": "DoesNotExist"}]});
        assert_eq!(
            label_selector(Some(&sel)),
            "app=a,env in (dev,prod),!gone,tier=web"
        );
        assert_eq!(label_selector(None), "<none>");
        assert_eq!(map_selector(Some(&json!({"b": "2", "a": "1"}))), "a=1,b=2");
        assert_eq!(map_selector(None), "<none>");
    }
}
