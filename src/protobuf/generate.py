#!/usr/bin/env python3
"""Generates `schema_gen.rs`: the protobuf schema of Kubernetes' built-in kinds.

Read from the Go types of k8s.io/api and k8s.io/apimachinery (not from `generated.proto`):
each field's struct tag carries the protobuf field number and wire type (`protobuf:"..."`),
the JSON name and `omitempty` (`json:"..."`), and the Go type says whether the field is a
pointer. The last two are what the JSON of the same object would leave out (Go's
`omitempty`: a non-pointer zero scalar), which `generated.proto` does not say.

Usage (the two repositories as git directories, e.g. from `git clone --bare`):

    python3 src/protobuf/generate.py API_GIT APIMACHINERY_GIT > src/protobuf/schema_gen.rs
    rustfmt --edition 2024 src/protobuf/schema_gen.rs
"""
import re
import subprocess
import sys

API_GROUPS = [
    # (Go package dir in k8s.io/api, apiVersion, Rust prefix)
    ("core/v1", "v1", "CORE_V1"),
    ("apps/v1", "apps/v1", "APPS_V1"),
    ("batch/v1", "batch/v1", "BATCH_V1"),
    ("coordination/v1", "coordination.k8s.io/v1", "COORDINATION_V1"),
    ("rbac/v1", "rbac.authorization.k8s.io/v1", "RBAC_V1"),
    ("networking/v1", "networking.k8s.io/v1", "NETWORKING_V1"),
    ("discovery/v1", "discovery.k8s.io/v1", "DISCOVERY_V1"),
]
META = ("pkg/apis/meta/v1", "meta/v1", "META_V1")

# Go types with their own JSON form (apimachinery's custom marshallers).
SPECIAL = {
    "metav1.Time": "Time",
    "metav1.MicroTime": "MicroTime",
    "metav1.Duration": "Duration",
    "metav1.FieldsV1": "FieldsV1",
    "intstr.IntOrString": "IntOrString",
    "resource.Quantity": "Quantity",
    "runtime.RawExtension": "RawExtension",
    "types.UID": "String",
}
SCALARS = {
    "string": "String",
    "bool": "Bool",
    "int32": "Int32",
    "int64": "Int64",
    "int": "Int64",
    "uint32": "Uint32",
    "uint64": "Uint64",
    "float64": "Float64",
    "float32": "Float32",
    "[]byte": "Bytes",
}


def git(repo, *args):
    return subprocess.run(["git", "--git-dir", repo, *args], check=True,
                          capture_output=True, text=True).stdout


def go_files(repo, pkg):
    names = git(repo, "ls-tree", "--name-only", f"HEAD:{pkg}").split()
    for n in names:
        if n.endswith(".go") and not n.endswith("_test.go") and not n.startswith("zz_") \
                and n != "generated.pb.go":
            yield git(repo, "show", f"HEAD:{pkg}/{n}")


FIELD = re.compile(r'^\t(\w+)?\s*([\w.\[\]*]+)\s+`(.*)`\s*$')
EMBED = re.compile(r'^\t([*\w.]+)\s+`(.*)`\s*$')


def parse_pkg(repo, pkg):
    """Structs (name -> fields) and named types (name -> Go type) of one package."""
    structs, named = {}, {}
    for src in go_files(repo, pkg):
        cur = None
        for line in src.splitlines():
            if cur is None:
                m = re.match(r'^type (\w+) struct \{\s*$', line)
                if m:
                    cur = m.group(1)
                    structs[cur] = []
                    continue
                m = re.match(r'^type (\w+) =? ?([\w.\[\]*]+)\s*(//.*)?$', line)
                if m:
                    named[m.group(1)] = m.group(2)
                continue
            if line.startswith("}"):
                cur = None
                continue
            if line.lstrip().startswith("//"):
                continue
            m = EMBED.match(line)
            if m:
                gname, gtype, tags = None, m.group(1), m.group(2)
            else:
                m = FIELD.match(line)
                if not m:
                    continue
                gname, gtype, tags = m.group(1), m.group(2), m.group(3)
            pb = re.search(r'protobuf:"([^"]*)"', tags)
            js = re.search(r'json:"([^"]*)"', tags)
            if not pb or not js:
                continue
            parts = pb.group(1).split(",")
            wire, number = parts[0], int(parts[1])
            opts = js.group(1).split(",")
            jname = opts[0]
            inline = gname is None and (jname == "" or "inline" in opts[1:])
            if gname is None and not inline and jname == "":
                inline = True
            structs[cur].append(dict(
                number=number, wire=wire, json=jname, gotype=gtype,
                omitempty="omitempty" in opts[1:] or "omitzero" in opts[1:],
                inline=inline, repeated=parts[2] == "rep"))
    return structs, named


class Gen:
    def __init__(self, pkgs):
        # pkgs: prefix -> (structs, named, go alias names that refer to it)
        self.pkgs = pkgs
        self.used = {}  # (prefix, struct) -> rust ident
        self.order = []

    def ident(self, prefix, name):
        snake = re.sub(r'(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])', '_', name).upper()
        return f"{prefix}_{snake}"

    def resolve_pkg(self, prefix, qual):
        """The package a qualifier (`metav1`, `v1`, `corev1`) names from package `prefix`."""
        if qual in ("metav1",):
            return "META_V1"
        if qual in ("v1", "corev1") and prefix != "CORE_V1":
            return "CORE_V1" if prefix != "META_V1" else None
        return None

    def kind(self, prefix, gotype):
        """The Rust `Kind` expression of a Go type (no pointer, no slice)."""
        if gotype in SCALARS:
            return "Kind::" + SCALARS[gotype]
        qual, _, base = gotype.rpartition(".")
        if qual:
            key = gotype if qual != "v1" or prefix != "META_V1" else "metav1." + base
            if key in SPECIAL:
                return "Kind::" + SPECIAL[key]
            if prefix == "META_V1" or qual == "metav1":
                if "metav1." + base in SPECIAL:
                    return "Kind::" + SPECIAL["metav1." + base]
            target = self.resolve_pkg(prefix, qual)
            if target is None:
                # A package this schema does not cover (a new alpha API referenced from a
                # stable kind): the field is skipped when decoding, as an unknown one.
                print(f"warning: {gotype} in {prefix} not covered", file=sys.stderr)
                return "Kind::Unsupported"
            return self.kind(target, base)
        if prefix == "META_V1" and "metav1." + gotype in SPECIAL:
            return "Kind::" + SPECIAL["metav1." + gotype]
        structs, named = self.pkgs[prefix]
        if gotype in structs:
            return f"Kind::Message(&{self.message(prefix, gotype)})"
        if gotype in named:
            return self.typeref(prefix, named[gotype])[0]
        raise ValueError(f"unknown type {gotype} in {prefix}")

    def typeref(self, prefix, gotype):
        """(kind, repeated) of a Go field type, pointer stripped."""
        gotype = gotype.lstrip("*")
        if gotype == "[]byte":
            return "Kind::Bytes", False
        if gotype.startswith("[]"):
            return self.kind(prefix, gotype[2:].lstrip("*")), True
        m = re.match(r'^map\[([\w.]+)\](.+)$', gotype)
        if m:
            value, rep = self.typeref(prefix, m.group(2))
            if rep:
                raise ValueError(f"map of slices {gotype}")
            return f"Kind::Map(&{value})", False
        structs, named = self.pkgs[prefix]
        if "." not in gotype and gotype not in structs and gotype in named \
                and not gotype in SCALARS:
            return self.typeref(prefix, named[gotype])
        return self.kind(prefix, gotype), False

    def message(self, prefix, name):
        key = (prefix, name)
        if key in self.used:
            return self.used[key]
        ident = self.ident(prefix, name)
        self.used[key] = ident
        structs, _ = self.pkgs[prefix]
        fields = []
        for f in sorted(structs[name], key=lambda f: f["number"]):
            pointer = f["gotype"].startswith("*")
            kind, rep = self.typeref(prefix, f["gotype"])
            # The Go type decides: a few fields are tagged `rep` but are single values
            # (`AttachedVolume.name`), and gogo-protobuf marshals them by their Go type.
            # Likewise the wire type (`RollingUpdateStatefulSetStrategy.maxUnavailable` is
            # tagged `varint` but is an IntOrString message).
            fields.append(
                f'Field {{ number: {f["number"]}, name: "{f["json"]}", kind: {kind}, '
                f'repeated: {"true" if rep else "false"}, pointer: {"true" if pointer else "false"}, '
                f'omitempty: {"true" if f["omitempty"] else "false"}, '
                f'inline: {"true" if f["inline"] else "false"} }},')
        # `index[n]`: 1 + the position in `fields` of field number n, 0 when none (the
        # decoder's direct lookup by number).
        numbers = [int(re.search(r"number: (\d+)", x).group(1)) for x in fields]
        index = [0] * (max(numbers, default=0) + 1)
        for i, n in enumerate(numbers):
            index[n] = i + 1
        self.order.append(
            f'/// `{name}` ({prefix.lower().replace("_", "/")}).\n'
            f'pub static {ident}: Message = Message {{\n    name: "{name}",\n    fields: &[\n        '
            + "\n        ".join(fields) + "\n    ],\n"
            + f'    index: &[{", ".join(str(i) for i in index)}],\n}};\n')
        return ident


def main():
    api, apimachinery = sys.argv[1], sys.argv[2]
    pkgs = {"META_V1": parse_pkg(apimachinery, META[0])}
    for pkg, api_version, prefix in API_GROUPS:
        structs, named = parse_pkg(api, pkg)
        pkgs[prefix] = (structs, named)
    gen = Gen(pkgs)
    kinds = []
    for name in ("Status", "ListMeta", "ObjectMeta", "WatchEvent"):
        gen.message("META_V1", name)
    # An ERROR watch event's object, and an error response's body (apiVersion v1).
    kinds.append(("v1", "Status", "META_V1_STATUS"))
    for pkg, api_version, prefix in API_GROUPS:
        structs, _ = pkgs[prefix]
        src = "".join(go_files(api, pkg))
        for name in sorted(structs):
            fields = structs[name]
            # A kind: has metadata (ObjectMeta) and embeds TypeMeta; lists have ListMeta.
            if re.search(rf'type {name} struct \{{\s*\n(?:\s*//.*\n)*\s*metav1\.TypeMeta', src) \
                    and any(f["json"] == "metadata" for f in fields):
                ident = gen.message(prefix, name)
                kinds.append((api_version, name, ident))
    api_rev = git(api, "rev-parse", "HEAD").strip()
    am_rev = git(apimachinery, "rev-parse", "HEAD").strip()
    print("// @generated by src/protobuf/generate.py from the Go types of")
    print(f"// k8s.io/api {api_rev} and k8s.io/apimachinery {am_rev}. Do not edit.")
    print()
    print("use super::types::{Field, Kind, Message};")
    print()
    print("\n".join(gen.order))
    print("/// Every kind with a protobuf form here, by (apiVersion, kind), sorted.")
    print("pub static KINDS: &[(&str, &str, &Message)] = &[")
    for api_version, name, ident in sorted(kinds):
        print(f'    ("{api_version}", "{name}", &{ident}),')
    print("];")


if __name__ == "__main__":
    main()
