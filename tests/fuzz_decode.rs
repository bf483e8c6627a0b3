//! Fuzzing of the watch-event decoding path (issue 9): arbitrary and mutated watch lines are
//! decoded exactly as kube decodes a watch stream's lines (`serde_json::from_str::<WatchEvent<K>>`,
//! falling back to a `Status`; EOF-truncated lines skipped), for a typed `Pod` and a
//! `DynamicObject`, translated the way the reflector translates kube's events (a mirror of
//! `reflector_io::convert`, which is crate-private: wrong-shaped objects dropped, decode and
//! status errors become the machine's `WatchEvent::Error`), and fed to a watching
//! `ReflectorMachine`. Nothing may panic; every undecodable line is a typed `kube::Error`; an
//! ERROR event or a malformed line makes the machine back off (S1) with a retry time.
//!
//! The lean cache mode's path (docs/semantics.md I7) is fuzzed the same way: each line's
//! object is kept as JSON text (kube's `WatchEvent<RawJson>`, mirrored here with a
//! `serde_json::Value` rendered back to text), encoded by a [`LeanState`] instead of decoded
//! (its metadata parsed, `managedFields` cut out when configured, compressed), checked for its
//! kind on that metadata (R5) and fed to a machine of lazy objects. Nothing may panic; a line
//! that kube decodes into a valid Pod must come out of the lean path as the same event with the
//! same name, namespace and resourceVersion, and decode back into the same Pod. `LeanState::
//! encode` is also fuzzed on arbitrary bytes.
//!
//! CI runs a few hundred cases per target in seconds; for a long run:
//!
//! ```text
//! KINFORMER_FUZZ_CASES=200000 cargo test -p kinformer-actors --test fuzz_decode
//! ```
//!
//! The LIST decoder's fuzz targets are unit tests in `actors/src/listwatch/list_decode.rs`
//! (`list_decode::fuzz_tests`), the machines' in `src/fuzz_tests.rs`.

use std::{
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kinformer::lean::{EncodeError, LazyObject, LeanConfig, LeanState, RawObject};
use kinformer::{
    TraceId,
    reflector::{
        FifoCommand, INITIAL_EVENTS_END, ListPage, Phase, ReflectorConfig, ReflectorEvent,
        ReflectorMachine, Request, Versioned, WatchEvent,
    },
};
use kinformer_actors::{Translated, translate};
use kube::{
    api::{DynamicObject, WatchEvent as KubeWatchEvent},
    core::Status,
};
use proptest::prelude::*;
use serde::de::{DeserializeOwned, Error as _};
use serde_json::Value;

fn cases(default: u32) -> u32 {
    std::env::var("KINFORMER_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// One line of a watch stream, decoded as kube-client 5 does (`Client::request_events`):
/// `None` for a line kube skips (an EOF-truncated last line).
fn kube_line<K: DeserializeOwned>(line: &[u8]) -> Option<Result<KubeWatchEvent<K>, kube::Error>> {
    // LinesCodec yields UTF-8 lines; anything else is a read error.
    let Ok(line) = std::str::from_utf8(line) else {
        return Some(Err(kube::Error::ReadEvents(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))));
    };
    match serde_json::from_str::<KubeWatchEvent<K>>(line) {
        Ok(ev) => Some(Ok(ev)),
        Err(e) if e.is_eof() => None,
        Err(e) => match serde_json::from_str::<Status>(line) {
            Ok(status) => Some(Err(kube::Error::Api(status.boxed()))),
            Err(_) => Some(Err(kube::Error::SerdeError(e))),
        },
    }
}

/// The reflector's own translation of kube's events (`translate`, which the actor's `convert`
/// wraps with its counters and warnings), with an admission that keeps every object.
fn convert<K>(ev: Result<KubeWatchEvent<K>, kube::Error>) -> Option<WatchEvent<(Arc<K>, TraceId)>> {
    match translate(ev, |o, _| Some((Arc::new(o), TraceId(1)))) {
        Translated::Event(e) => Some(e),
        Translated::Failed(e, _) => Some(WatchEvent::Error(e)),
        Translated::Skipped(_) | Translated::Dropped => None,
    }
}

/// A machine with a watch open (after a LIST at RV 10), as the reflector has it when it reads
/// watch lines.
fn watching<T: Versioned>(t0: Instant, watch_list: bool) -> ReflectorMachine<T> {
    let config = ReflectorConfig {
        watch_list,
        ..ReflectorConfig::default()
    };
    let mut m = ReflectorMachine::new(config, Default::default(), 3);
    match m.poll_request(t0) {
        Some(Request::List(_)) => {
            m.handle_list_page(
                t0,
                ListPage {
                    items: Vec::new(),
                    resource_version: "10".into(),
                    continue_token: None,
                },
            );
            while m.poll_output().is_some() {}
            assert!(matches!(m.poll_request(t0), Some(Request::Watch(_))));
        }
        Some(Request::Watch(_)) => {}
        None => panic!("a fresh machine asks for a request"),
    }
    m.handle_watch_opened(t0);
    m
}

/// Decodes `lines` as kube would, feeds them to a watching machine in one group and checks the
/// machine's answer.
fn feed<K>(lines: &[Vec<u8>], watch_list: bool) -> Result<(), TestCaseError>
where
    K: DeserializeOwned + kube::Resource,
{
    let mut events = Vec::new();
    for line in lines {
        if let Some(ev) = kube_line::<K>(line) {
            if let Err(e) = &ev {
                prop_assert!(
                    matches!(
                        e,
                        kube::Error::SerdeError(_)
                            | kube::Error::Api(_)
                            | kube::Error::ReadEvents(_)
                    ),
                    "untyped error {e:?}"
                );
            }
            if let Some(ev) = convert(ev) {
                events.push(ev);
            }
        }
    }
    run_machine::<(Arc<K>, TraceId)>(events, watch_list)
}

/// Feeds translated `events` to a watching machine in one group and checks its answer: no
/// empty command; a failure backs off (S1) with a timed retry and no request before it (R8);
/// an ERROR ends the watch; an open watch has an idle deadline.
fn run_machine<T: Versioned>(
    events: Vec<WatchEvent<T>>,
    watch_list: bool,
) -> Result<(), TestCaseError> {
    let t0 = Instant::now();
    let mut m = watching::<T>(t0, watch_list);
    let has_error = events.iter().any(|e| matches!(e, WatchEvent::Error(_)));
    let now = t0 + Duration::from_millis(5);
    m.handle_watch_events(now, events);
    while let Some(out) = m.poll_output() {
        if let FifoCommand::Events { events, .. } = out {
            prop_assert!(!events.is_empty(), "no empty Events command");
        }
    }
    let mut failed_at = None;
    while let Some(ev) = m.poll_event() {
        if let ReflectorEvent::Failed { retry_at, .. } = ev {
            failed_at = Some(retry_at);
        }
    }
    if let Some(retry_at) = failed_at {
        prop_assert!(!m.is_watching(), "a failed watch is abandoned");
        prop_assert!(
            matches!(m.phase(), Phase::BackingOff { .. }),
            "S1: backing off"
        );
        prop_assert_eq!(m.poll_timeout(), Some(retry_at), "S1: the retry is timed");
        prop_assert!(
            m.poll_request(now).is_none(),
            "R8: no request before the retry"
        );
        prop_assert!(
            m.poll_request(retry_at).is_some(),
            "a request once the backoff ends"
        );
    } else if !watch_list {
        prop_assert!(!has_error || !m.is_watching(), "an ERROR ends the watch");
    }
    if m.is_watching() {
        prop_assert!(m.poll_timeout().is_some(), "a watch has an idle deadline");
    }
    Ok(())
}

/// Valid watch lines of every type (pods; a dynamic object decodes them too).
fn valid_lines() -> Vec<String> {
    let pod = |rv: u32, name: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string(),
                "uid": "u", "labels": {"a": "b"}, "annotations": {"x": "y\u{e9}"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        })
    };
    let ev =
        |t: &str, o: serde_json::Value| serde_json::json!({"type": t, "object": o}).to_string();
    vec![
        ev("ADDED", pod(11, "a")),
        ev("MODIFIED", pod(12, "a")),
        ev("DELETED", pod(13, "a")),
        ev(
            "BOOKMARK",
            serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"resourceVersion": "14", "annotations": {INITIAL_EVENTS_END: "true"}}}),
        ),
        ev(
            "BOOKMARK",
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"resourceVersion": "15"}}),
        ),
        ev(
            "ERROR",
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "too old resource version", "reason": "Expired", "code": 410}),
        ),
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "slow down", "reason": "TooManyRequests", "code": 429,
            "details": {"retryAfterSeconds": 3}})
        .to_string(),
        ev(
            "ADDED",
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "resourceVersion": "16"}, "data": {"k": "v"}}),
        ),
        ev(
            "MODIFIED",
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "m", "namespace": "ns", "resourceVersion": "17",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": "rs", "uid": "r", "controller": true}],
                    "managedFields": [{"manager": "kubectl", "operation": "Apply",
                        "apiVersion": "v1", "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:labels": {}}}}]},
                "spec": {"containers": [{"name": "c", "image": "i"}]}
            }),
        ),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Structural(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let structural = prop::sample::select(b"{}[]\",:0-9.eE+ntfl\\u ".to_vec());
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), structural).prop_map(|(i, b)| Mutation::Structural(i, b)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1usize..24).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(mut bytes: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        let len = bytes.len();
        if len == 0 {
            break;
        }
        match m {
            Mutation::Flip(i, b) => bytes[i % len] ^= b | 1,
            Mutation::Structural(i, b) => bytes[i % len] = *b,
            Mutation::Insert(i, b) => {
                let at = i % (len + 1);
                bytes.splice(at..at, b.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let at = i % len;
                bytes.drain(at..(at + n).min(len));
            }
            Mutation::Truncate(i) => bytes.truncate(i % len),
        }
    }
    bytes
}

/// A group of lines: valid ones (by index) possibly mutated, or arbitrary bytes.
fn lines() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let n = valid_lines().len();
    let line = prop_oneof![
        3 => (0..n, prop::collection::vec(mutation(), 0..4))
            .prop_map(|(i, muts)| mutate(valid_lines()[i].clone().into_bytes(), &muts)),
        1 => prop::collection::vec(any::<u8>(), 0..96),
    ];
    prop::collection::vec(line, 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), ..ProptestConfig::default() })]

    #[test]
    fn fuzz_watch_lines_typed_pod(lines in lines(), watch_list in any::<bool>()) {
        feed::<Pod>(&lines, watch_list)?;
    }

    #[test]
    fn fuzz_watch_lines_dynamic_object(lines in lines(), watch_list in any::<bool>()) {
        feed::<DynamicObject>(&lines, watch_list)?;
    }

    #[test]
    fn fuzz_watch_lines_lean_pod(
        lines in lines(),
        watch_list in any::<bool>(),
        strip in any::<bool>(),
    ) {
        feed_lean(&lines, watch_list, strip)?;
    }

    #[test]
    fn fuzz_lean_encode_arbitrary_bytes(
        bytes in prop_oneof![
            3 => (0..valid_objects().len(), prop::collection::vec(mutation(), 0..4))
                .prop_map(|(i, muts)| mutate(valid_objects()[i].clone().into_bytes(), &muts)),
            1 => prop::collection::vec(any::<u8>(), 0..96),
        ],
        strip in any::<bool>(),
    ) {
        check_encode(&bytes, strip)?;
    }
}

// ---------------------------------------------------------------------------------------------
// The lean path (I7).

/// Two lean states shared by every case (one strips `managedFields`): after 256 objects their
/// dictionaries are trained on what the fuzzer sent, so later cases compress with one.
fn lean_state(strip: bool) -> &'static Arc<LeanState<Pod>> {
    static STATES: OnceLock<[Arc<LeanState<Pod>>; 2]> = OnceLock::new();
    let states = STATES.get_or_init(|| {
        [false, true].map(|s| {
            Arc::new(LeanState::new(
                LeanConfig::default().strip_managed_fields(s),
            ))
        })
    });
    &states[usize::from(strip)]
}

/// One watch line read the lean way: kube's decode with the object kept as JSON text (the
/// reflector's `RawJson`; here a `Value` rendered back), then the object encoded, not decoded
/// (`decode::encode_event`: metadata that does not parse is a serde data error, R5).
fn lean_line(
    state: &Arc<LeanState<Pod>>,
    line: &[u8],
) -> Option<Result<KubeWatchEvent<RawObject>, kube::Error>> {
    let encode = |v: Value| {
        let json = serde_json::to_vec(&v).expect("a Value renders");
        state
            .encode(&json)
            .map_err(|e: EncodeError| kube::Error::SerdeError(serde_json::Error::custom(e)))
    };
    Some(match kube_line::<Value>(line)? {
        Ok(KubeWatchEvent::Added(v)) => encode(v).map(KubeWatchEvent::Added),
        Ok(KubeWatchEvent::Modified(v)) => encode(v).map(KubeWatchEvent::Modified),
        Ok(KubeWatchEvent::Deleted(v)) => encode(v).map(KubeWatchEvent::Deleted),
        Ok(KubeWatchEvent::Bookmark(b)) => Ok(KubeWatchEvent::Bookmark(b)),
        Ok(KubeWatchEvent::Error(s)) => Ok(KubeWatchEvent::Error(s)),
        Err(e) => Err(e),
    })
}

/// The lean admission (`ReflectorContext::admit_lean` with no validator or transform): R5 on
/// the parsed `apiVersion`/`kind`, then a lazy object of the informer's state.
fn admit_lean(
    state: &Arc<LeanState<Pod>>,
    raw: RawObject,
) -> Option<(Arc<LazyObject<Pod>>, TraceId)> {
    let meta = raw.meta();
    if meta.api_version().is_some_and(|a| a != "v1") || meta.kind().is_some_and(|k| k != "Pod") {
        return None;
    }
    Some((
        Arc::new(LazyObject::from_raw(Arc::new(raw), Arc::clone(state))),
        TraceId(1),
    ))
}

type LeanItem = (Arc<LazyObject<Pod>>, TraceId);

/// The same line through kube's typed decode and through the lean path: a valid Pod event must
/// be the same event in both, with the same metadata, and the lean object must decode into
/// the same Pod (minus `managedFields` when they are stripped).
fn compare(
    typed: &Option<Result<KubeWatchEvent<Pod>, kube::Error>>,
    lean: &Translated<LeanItem>,
    strip: bool,
) -> Result<(), TestCaseError> {
    let (kind, pod) = match typed {
        Some(Ok(KubeWatchEvent::Added(p))) => ("added", p),
        Some(Ok(KubeWatchEvent::Modified(p))) => ("modified", p),
        Some(Ok(KubeWatchEvent::Deleted(p))) => ("deleted", p),
        _ => return Ok(()),
    };
    let obj = match (kind, lean) {
        ("added", Translated::Event(WatchEvent::Added((o, _))))
        | ("modified", Translated::Event(WatchEvent::Modified((o, _))))
        | ("deleted", Translated::Event(WatchEvent::Deleted((o, _)))) => o,
        (_, other) => {
            return Err(TestCaseError::fail(format!(
                "a valid pod {kind} event came out of the lean path as {}",
                describe(other)
            )));
        }
    };
    let m = &pod.metadata;
    prop_assert_eq!(obj.name(), m.name.as_deref().filter(|s| !s.is_empty()));
    prop_assert_eq!(
        obj.namespace(),
        m.namespace.as_deref().filter(|s| !s.is_empty())
    );
    prop_assert_eq!(
        obj.resource_version(),
        m.resource_version.as_deref().filter(|s| !s.is_empty())
    );
    let decoded = obj
        .object()
        .map_err(|e| TestCaseError::fail(format!("a valid pod does not decode back: {e}")))?;
    let mut want = pod.clone();
    if strip {
        want.metadata.managed_fields = None;
    }
    prop_assert_eq!(&*decoded, &want, "decoded back into the same pod");
    Ok(())
}

fn describe<T>(t: &Translated<T>) -> &'static str {
    match t {
        Translated::Event(WatchEvent::Added(_)) => "added",
        Translated::Event(WatchEvent::Modified(_)) => "modified",
        Translated::Event(WatchEvent::Deleted(_)) => "deleted",
        Translated::Event(WatchEvent::Bookmark { .. }) => "a bookmark",
        Translated::Event(_) => "another event",
        Translated::Skipped(_) => "skipped",
        Translated::Dropped => "dropped",
        Translated::Failed(..) => "failed",
    }
}

/// The lean path of `lines`: every line read, encoded, admitted and translated as the lean
/// reflector does, compared with kube's typed decode of it, then fed to a machine of lazy
/// objects.
fn feed_lean(lines: &[Vec<u8>], watch_list: bool, strip: bool) -> Result<(), TestCaseError> {
    let state = lean_state(strip);
    let mut events = Vec::new();
    for line in lines {
        // None: a line cut short, which kube skips (decoding a Pod may fail on a field before
        // it reaches the cut; the object kept as text reaches it).
        let Some(ev) = lean_line(state, line) else {
            continue;
        };
        if let Err(e) = &ev {
            prop_assert!(
                matches!(
                    e,
                    kube::Error::SerdeError(_) | kube::Error::Api(_) | kube::Error::ReadEvents(_)
                ),
                "untyped error {e:?}"
            );
        }
        let translated = translate(ev, |raw, _| admit_lean(state, raw));
        compare(&kube_line::<Pod>(line), &translated, strip)?;
        match translated {
            Translated::Event(e) => events.push(e),
            Translated::Failed(e, _) => events.push(WatchEvent::Error(e)),
            Translated::Skipped(_) | Translated::Dropped => {}
        }
    }
    run_machine::<LeanItem>(events, watch_list)
}

/// Single objects (the `object` of the valid lines), the inputs of `LeanState::encode`.
fn valid_objects() -> Vec<String> {
    valid_lines()
        .iter()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            Some(v.get("object")?.to_string())
        })
        .collect()
}

/// `LeanState::encode` on any bytes: never a panic; metadata that does not parse is a typed
/// `EncodeError::Meta`; what it stores reads back as the input (without `managedFields` when
/// stripped, and only they are gone).
fn check_encode(bytes: &[u8], strip: bool) -> Result<(), TestCaseError> {
    let state = lean_state(strip);
    let raw = match state.encode(bytes) {
        Ok(raw) => raw,
        Err(e) => {
            prop_assert!(matches!(e, EncodeError::Meta(_)), "untyped error {e:?}");
            return Ok(());
        }
    };
    let json = raw
        .json()
        .map_err(|e| TestCaseError::fail(format!("stored bytes do not read back: {e}")))?;
    prop_assert_eq!(raw.json_len(), json.len());
    if !strip {
        prop_assert_eq!(&*json, bytes, "stored as sent");
        return Ok(());
    }
    // Stripped: the same JSON without metadata.managedFields (compared as values, unless a
    // duplicated key makes "the same" ambiguous).
    let Ok(mut want) = serde_json::from_slice::<Value>(bytes) else {
        return Ok(());
    };
    let got: Value = serde_json::from_slice(&json)
        .map_err(|e| TestCaseError::fail(format!("valid JSON stripped into invalid JSON: {e}")))?;
    let text = String::from_utf8_lossy(bytes);
    if text.matches(r#""managedFields""#).count() <= 1 && text.matches(r#""metadata""#).count() <= 1
    {
        if let Some(m) = want.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        prop_assert_eq!(got, want, "only managedFields are cut out");
    }
    Ok(())
}

/// Fixed hostile lines kept as regression cases: an ERROR without a Status, a Status with a
/// huge Retry-After, an unknown event type, a deleted object without metadata, an RV that is
/// not a number, deep nesting, a BOM.
#[test]
fn fuzz_watch_lines_hostile_fixed_cases() {
    let deep = format!(
        r#"{{"type":"ADDED","object":{}1{}}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let fixed: Vec<&[u8]> = vec![
        br#"{"type":"ERROR","object":{}}"#,
        br#"{"type":"ERROR","object":null}"#,
        br#"{"kind":"Status","code":429,"details":{"retryAfterSeconds":2147483647}}"#,
        br#"{"type":"ERROR","object":{"kind":"Status","code":429,"details":{"retryAfterSeconds":2147483647}}}"#,
        br#"{"type":"RENAMED","object":{"metadata":{"name":"a"}}}"#,
        br#"{"type":"DELETED","object":{}}"#,
        br#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"-1"}}}"#,
        br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":""}}}"#,
        br#"{"type":"BOOKMARK","object":{"metadata":{}}}"#,
        b"\xEF\xBB\xBF{\"type\":\"ADDED\",\"object\":{}}",
        // An owner reference without apiVersion: a Pod to k8s-openapi (the missing string read
        // as empty), and so to the lean metadata parser.
        br#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"m","namespace":"ns","resourceVersion":"17","ownerReferences":[{"kind":"ReplicaSet","name":"rs","uid":"r"}]}}}"#,
        // managedFields to cut out, and metadata that does not parse for the lean mode.
        br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","managedFields":[{"manager":"m"}],"labels":{"a":"b"}}}}"#,
        br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","managedFields":null}}}"#,
        br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"a":1}}}}"#,
        br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":"x"}}"#,
        deep.as_bytes(),
        b"",
        b"\xff\xfe",
    ];
    for line in &fixed {
        for watch_list in [false, true] {
            feed::<Pod>(&[line.to_vec()], watch_list).unwrap_or_else(|e| panic!("{e}"));
            feed::<DynamicObject>(&[line.to_vec()], watch_list).unwrap_or_else(|e| panic!("{e}"));
            for strip in [false, true] {
                feed_lean(&[line.to_vec()], watch_list, strip).unwrap_or_else(|e| panic!("{e}"));
            }
        }
        for strip in [false, true] {
            check_encode(line, strip).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// The translation itself, line by line: an event is an input, an ERROR (or a malformed line)
/// fails the watch, an unknown type or a wrong shape is skipped (R3, R5).
#[test]
fn translate_classifies_each_kind_of_line() {
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}}"#;
    let line = |ty: &str| format!(r#"{{"type":"{ty}","object":{pod}}}"#);
    let kind = |l: &str| match kube_line::<Pod>(l.as_bytes())
        .map(|ev| translate(ev, |o: Pod, _| Some((Arc::new(o), TraceId(1)))))
    {
        Some(Translated::Event(WatchEvent::Added(_))) => "added",
        Some(Translated::Event(_)) => "other event",
        Some(Translated::Failed(..)) => "failed",
        Some(Translated::Skipped(_)) => "skipped",
        Some(Translated::Dropped) => "dropped",
        None => "none",
    };
    assert_eq!(kind(&line("ADDED")), "added");
    assert_eq!(kind(&line("BOGUS")), "skipped");
    let error = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old"}}"#;
    assert_eq!(kind(error), "failed");
    assert_eq!(
        kind(r#"{"type":"ADDED","object":{"metadata":"#),
        "none",
        "EOF-truncated"
    );
    assert_eq!(
        kind(r#"{"type":"ADDED","object":[1,2]}"#),
        "skipped",
        "wrong shape (R5)"
    );
    assert_eq!(kind("not json at all"), "failed");
}
