//! The informer benchmark's workload, twin of `../shared/bench/serve.py`: the same `n` pods and
//! `m` watch events (same objects, resourceVersions, pagination, watch behaviour and
//! discovery), served from bytes rendered before the port opens, in JSON and, when the client's
//! `Accept` asks for it, in kube's protobuf (the sim's encoder). The `kinformer-bench-serve`
//! binary runs it; BENCHMARKS.md ("The twin server") says how to point a client at it.

mod pyrandom;
mod serve;
mod workload;

pub use serve::{ServeOptions, Server};
pub use workload::Workload;

use serde_json::Value;

/// What can go wrong generating, serving or reading back the workload.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An object could not be rendered (a bug: every bench pod field is in the schema).
    #[error("rendering the workload: {0}")]
    Render(String),
    /// A protobuf answer did not decode.
    #[error("decoding protobuf: {0}")]
    Decode(String),
}

/// Decodes a protobuf `PodList` answer (`k8s\0` + `runtime.Unknown`) with the sim's decoder:
/// the list's metadata and its items, each with `apiVersion` and `kind` (which protobuf list
/// items do not carry). For checking the twin's answers against JSON ones.
pub fn decode_protobuf_list(body: &[u8]) -> Result<(Value, Vec<Value>), BenchError> {
    crate::server::protobuf::decode_list(body).map_err(|e| BenchError::Decode(e.error.to_string()))
}

/// Decodes a protobuf watch body (`application/vnd.kubernetes.protobuf;stream=watch`: frames
/// of a 4-byte big-endian length and a `metav1.WatchEvent`) into (type, object) pairs.
pub fn decode_protobuf_watch(mut body: &[u8]) -> Result<Vec<(String, Value)>, BenchError> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let Some((len, rest)) = body.split_first_chunk::<4>() else {
            return Err(BenchError::Decode("a truncated frame length".into()));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if rest.len() < len {
            return Err(BenchError::Decode("a truncated frame".into()));
        }
        let (ev, rest) = rest.split_at(len);
        out.push(
            crate::server::protobuf::decode_watch_event(ev)
                .map_err(|e| BenchError::Decode(e.error.to_string()))?,
        );
        body = rest;
    }
    Ok(out)
}
