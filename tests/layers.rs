//! The folder layering of `actors/src` and `sim/src`, checked mechanically (issue 28, item 5).
//!
//! ARCHITECTURE.md orders the folders of both crates and says imports run downward only; each
//! folder's `mod.rs` repeats what it may import. Nothing enforced it, so an upward import (a
//! telemetry file naming the pipeline, a storage file naming the registry) would only be found
//! by a reader. This test reads every source file, finds each `crate::<folder>` path (in `use`
//! items, grouped `use crate::{a::X, b::Y}` trees and inline paths) and each `super::` chain
//! that climbs to the crate root, and fails naming the file, the line and the rule broken.
//!
//! What it does not see: names reached through the crate root's re-exports (`crate::Sim`),
//! which are the public API rather than a layer, and paths built by macros (`$crate::`).

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

/// One crate's layering: for each top-level module of `src/` (a folder or a base file), the
/// top-level modules it may name. A module may always name itself; `lib.rs` (and a binary's
/// `main.rs`) assembles the crate and may name anything.
struct Layers {
    /// The crate's `src/`.
    src: PathBuf,
    /// (module, modules it may import, the rule as ARCHITECTURE.md words it).
    rules: &'static [(&'static str, &'static [&'static str], &'static str)],
}

/// `actors/src`'s base files: `config`, `error`, `handler`, `object`, `runtime`.
const ACTORS_BASE: &[&str] = &["config", "error", "handler", "object", "runtime"];

fn actors() -> Layers {
    const BASE: &[&str] = ACTORS_BASE;
    // Each list: the folders ARCHITECTURE.md's rule names, then the base files.
    const INTEROP: &[&str] = &[
        "informer", "config", "error", "handler", "object", "runtime",
    ];
    const INFORMER: &[&str] = &[
        "pipeline",
        "listwatch",
        "telemetry",
        "config",
        "error",
        "handler",
        "object",
        "runtime",
    ];
    const CONTROLLER: &[&str] = &[
        "telemetry",
        "config",
        "error",
        "handler",
        "object",
        "runtime",
    ];
    const PIPELINE: &[&str] = &[
        "listwatch",
        "telemetry",
        "config",
        "error",
        "handler",
        "object",
        "runtime",
    ];
    Layers {
        src: Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        rules: &[
            ("interop", INTEROP, "interop → informer and the base files"),
            (
                "prebuilt",
                INTEROP,
                "prebuilt → informer and the base files",
            ),
            (
                "informer",
                INFORMER,
                "informer → pipeline, listwatch, telemetry and the base files",
            ),
            (
                "controller",
                CONTROLLER,
                "controller → telemetry and the base files",
            ),
            (
                "pipeline",
                PIPELINE,
                "pipeline → listwatch, telemetry and the base files",
            ),
            ("listwatch", BASE, "listwatch → base files only"),
            ("telemetry", BASE, "telemetry → base files only"),
            ("config", BASE, "the base files import no folder"),
            ("error", BASE, "the base files import no folder"),
            ("handler", BASE, "the base files import no folder"),
            ("object", BASE, "the base files import no folder"),
            ("runtime", BASE, "the base files import no folder"),
        ],
    }
}

fn sim() -> Layers {
    // harness → server → registry → storage → apimachinery; `config` (SimConfig) sits on
    // apimachinery and is read by every layer above it.
    Layers {
        src: Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/src"),
        rules: &[
            (
                "harness",
                &["server", "registry", "storage", "apimachinery", "config"],
                "harness → server, registry, storage, apimachinery",
            ),
            (
                "server",
                &["registry", "storage", "apimachinery", "config"],
                "server → registry, storage, apimachinery (never the harness)",
            ),
            (
                "registry",
                &["storage", "apimachinery", "config"],
                "registry → storage, apimachinery",
            ),
            ("storage", &["apimachinery"], "storage → apimachinery only"),
            (
                "apimachinery",
                &[],
                "apimachinery is the bottom layer: it imports nothing else of the crate",
            ),
            ("config", &["apimachinery"], "config → apimachinery only"),
            (
                "logging",
                &[],
                "logging (the binary's and the examples' log setup) imports nothing else of the crate",
            ),
            (
                "bench",
                &["server", "apimachinery"],
                "bench (the benchmark's twin server) → server, apimachinery",
            ),
            (
                "bin",
                &[],
                "binaries use the library by its name (`kinformer_sim::`), not `crate::`",
            ),
        ],
    }
}

#[test]
fn actors_imports_run_downward() {
    let violations = check(&actors());
    assert!(
        violations.is_empty(),
        "{}",
        report("actors/src", &violations)
    );
}

#[test]
fn sim_imports_run_downward() {
    let violations = check(&sim());
    assert!(violations.is_empty(), "{}", report("sim/src", &violations));
}

/// The checker catches what it is for, and ignores comments, strings and the crate root.
#[test]
fn checker_finds_upward_paths_and_only_those() {
    let rules = &actors().rules;
    let src = "\
//! [`crate::informer::SharedIndexInformer`] in a doc link is not an import.
use crate::{
    config::InformerConfig,
    informer::SharedIndexInformer,
};
use crate::object::InformerObject;
fn f() {
    let s = \"crate::controller::x // not code\";
    let c = '\"';
    let r = r#\"crate::informer \" also not code\"#;
    crate::controller::workqueue::AsyncWorkQueue::new(); // an inline path
    let _ = crate::Telemetry::new(); /* crate::informer in a block comment */
}
use super::super::pipeline::messages::Stop;
";
    let module = ["telemetry".to_string(), "x".to_string()];
    let found = violations_in(rules, Path::new("telemetry/x.rs"), &module, src);
    let lines: Vec<(usize, &str)> = found.iter().map(|v| (v.line, v.target.as_str())).collect();
    assert_eq!(
        lines,
        [(4, "informer"), (11, "controller"), (14, "pipeline")],
        "{found:#?}"
    );
}

#[derive(Debug)]
struct Violation {
    file: PathBuf,
    line: usize,
    from: String,
    target: String,
    rule: &'static str,
}

fn report(root: &str, violations: &[Violation]) -> String {
    let mut out = format!(
        "{} upward (or sideways) import(s) in {root}; ARCHITECTURE.md: imports run downward only\n",
        violations.len()
    );
    for v in violations {
        let _ = writeln!(
            out,
            "  {}:{}: `{}` names `crate::{}`; the rule is \"{}\"",
            v.file.display(),
            v.line,
            v.from,
            v.target,
            v.rule
        );
    }
    out
}

fn check(layers: &Layers) -> Vec<Violation> {
    let mut files = Vec::new();
    rust_files(&layers.src, &mut files);
    assert!(
        files.len() > 10,
        "found only {} files under {}",
        files.len(),
        layers.src.display()
    );
    let mut out = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&layers.src).expect("under src");
        let module = module_path(rel);
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        out.extend(violations_in(layers.rules, rel, &module, &text));
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
}

/// The module path of a file under `src/`: `pipeline/fifo.rs` is `[pipeline, fifo]`,
/// `pipeline/mod.rs` is `[pipeline]`, `lib.rs` is `[]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn violations_in(
    rules: &[(&'static str, &'static [&'static str], &'static str)],
    rel: &Path,
    module: &[String],
    text: &str,
) -> Vec<Violation> {
    // The crate root (lib.rs, main.rs) assembles everything.
    let Some(from) = module.first() else {
        return Vec::new();
    };
    let Some(&(_, _, rule)) = rules.iter().find(|(m, _, _)| m == from) else {
        panic!(
            "{}: top-level module `{from}` is in no layer: add it to the table in {} (and to ARCHITECTURE.md)",
            rel.display(),
            file!()
        );
    };
    let known = |m: &str| rules.iter().any(|(name, _, _)| *name == m);
    let below = below(rules, from);
    let code = strip_comments_and_strings(text);
    let mut out = Vec::new();
    for (offset, target) in crate_paths(&code, module) {
        if target == *from || !known(&target) || below.contains(&target.as_str()) {
            continue;
        }
        out.push(Violation {
            file: rel.to_path_buf(),
            line: code[..offset].matches('\n').count() + 1,
            from: from.clone(),
            target,
            rule,
        });
    }
    out
}

/// Every module below `from`: what it may import, what those may import, and so on. The
/// rules list direct imports; "downward" is anything reachable through them (interop may name
/// telemetry, which informer imports), never back up or sideways.
fn below(
    rules: &[(&'static str, &'static [&'static str], &'static str)],
    from: &str,
) -> Vec<&'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    let mut todo: Vec<&str> = vec![from];
    while let Some(m) = todo.pop() {
        for (name, allowed, _) in rules {
            if *name == m {
                for a in *allowed {
                    if !seen.contains(a) {
                        seen.push(a);
                        todo.push(a);
                    }
                }
            }
        }
    }
    seen
}

/// The source with comments and string/char literals blanked out (newlines kept, so byte
/// offsets still give line numbers).
fn strip_comments_and_strings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            // Block comments nest in Rust.
            let (mut depth, mut j) = (0usize, 0);
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if (rest[0] == b'r' || rest.starts_with(b"br"))
            && (i == 0 || !ident(b[i - 1]))
            && raw_string_len(rest).is_some()
        {
            let n = raw_string_len(rest).unwrap_or(1);
            blank(&mut out, &rest[..n]);
            i += n;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let n = (j + 1).min(rest.len());
            blank(&mut out, &rest[..n]);
            i += n;
        } else if rest[0] == b'\'' && rest.len() > 2 && (rest[1] == b'\\' || rest[2] == b'\'') {
            // A char literal ('"', '\''), not a lifetime.
            let mut j = if rest[1] == b'\\' { 3 } else { 2 };
            while j < rest.len() && rest[j] != b'\'' {
                j += 1;
            }
            let n = (j + 1).min(rest.len());
            blank(&mut out, &rest[..n]);
            i += n;
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The length of the raw string literal (`r"…"`, `r#"…"#`, `br"…"`) at the start of `s`.
fn raw_string_len(s: &[u8]) -> Option<usize> {
    let start = if s.starts_with(b"br") { 2 } else { 1 };
    let hashes = s[start..].iter().take_while(|&&c| c == b'#').count();
    if s.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = start + hashes + 1;
    let end = s[body..].windows(close.len()).position(|w| w == close)?;
    Some(body + end + close.len())
}

/// Each top-level module named by a path in `code`, with the byte offset of its name:
/// `crate::a::…`, every branch of `crate::{a::…, b::…}`, and `super::…` chains that climb out
/// of `module` to the crate root.
fn crate_paths(code: &str, module: &[String]) -> Vec<(usize, String)> {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !code.is_char_boundary(i)
            || (i > 0 && (ident(b[i - 1]) || b[i - 1] == b'$' || b[i - 1] == b':'))
        {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        // The text after `crate::`, or after a `super::` chain that climbs to the crate root
        // (`super::super::x` from `[pipeline, fifo]` is `crate::x`).
        let path = if let Some(r) = rest.strip_prefix("crate") {
            r.trim_start().strip_prefix("::")
        } else {
            let (mut r, mut ups) = (rest, 0);
            while let Some(n) = r
                .strip_prefix("super")
                .and_then(|n| n.trim_start().strip_prefix("::"))
            {
                ups += 1;
                r = n.trim_start();
            }
            (ups > 0 && ups >= module.len()).then_some(r)
        };
        let Some(path) = path else {
            i += 1;
            continue;
        };
        let path = path.trim_start();
        let at = code.len() - path.len();
        if let Some(group) = path.strip_prefix('{') {
            for (off, name) in group_heads(group) {
                out.push((at + 1 + off, name));
            }
        } else {
            let name: String = path
                .bytes()
                .take_while(|&c| ident(c))
                .map(char::from)
                .collect();
            if !name.is_empty() {
                out.push((at, name));
            }
        }
        i += 1;
    }
    out
}

/// The first identifier of each top-level item of a `use` group (after its `{`), with its
/// offset in `group`.
fn group_heads(group: &str) -> Vec<(usize, String)> {
    let b = group.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let (mut depth, mut i, mut expect_head) = (0usize, 0, true);
    while i < b.len() {
        match b[i] {
            b'{' => depth += 1,
            b'}' if depth == 0 => break,
            b'}' => depth -= 1,
            b',' if depth == 0 => expect_head = true,
            c if expect_head && ident(c) => {
                let len = b[i..].iter().take_while(|&&c| ident(c)).count();
                let name = &group[i..i + len];
                if name != "self" {
                    out.push((i, name.to_string()));
                }
                expect_head = false;
                i += len;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[test]
fn base_file_list_matches_architecture() {
    // The base files named in ARCHITECTURE.md are the files at the top of actors/src.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<String> = std::fs::read_dir(&src)
        .expect("actors/src")
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.is_file() && p.extension()? == "rs").then(|| {
                p.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
        })
        .filter(|s| s != "lib")
        .collect();
    files.sort();
    assert_eq!(
        files, ACTORS_BASE,
        "actors/src's base files changed: update the layer table"
    );
}
