//! Shard selectors (KEP-5866, `ShardedListAndWatch`): the `shardSelector` parameter of LIST
//! and WATCH, which keeps the objects whose FNV-1a 64 hash of `metadata.uid` or
//! `metadata.namespace` falls in one of a few hex ranges.
//!
//! A port of `k8s.io/apimachinery/pkg/sharding` (`ShardRangeRequirement`, the selector's
//! `Matches`, `String` and `HexLess`, `HashField`, `ResolveFieldValue`) and of
//! `k8s.io/apiserver/pkg/sharding/parser.go` (`Parse`). The Go parser hands the expression to
//! cel-go's parser and walks the AST; here a small parser of CEL's expression grammar builds
//! the same AST (calls with or without a receiver, identifiers, selections, literals, lists,
//! maps, messages, the operators), so that every expression CEL parses is walked as the Go
//! code walks it, with the same error texts. What differs: the texts of CEL *syntax* errors
//! (ANTLR's `mismatched input ...`) are not reproduced; they start with
//! `CEL parse error: Syntax error:` as the real ones do.

use super::errors::go_quote;

/// `object.metadata.uid`: the field path of the UID.
pub(crate) const KEY_UID: &str = "object.metadata.uid";
/// `object.metadata.namespace`: the field path of the namespace ("" for cluster-scoped).
pub(crate) const KEY_NAMESPACE: &str = "object.metadata.namespace";
/// 2^64, the one 17-digit bound the parser accepts (the exclusive end of the hash space).
const TWO_TO_64: &str = "0x10000000000000000";
/// cel-go's default `maxRecursionDepth`; it also keeps hostile input off the stack.
const MAX_DEPTH: usize = 250;

/// Why a `shardSelector` does not parse (`sharding.Parse`'s errors, texts as in Go).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ShardSelectorError {
    /// Blank after trimming.
    #[error("empty shard selector is not allowed; omit the parameter for unfiltered lists")]
    Empty,
    /// CEL does not parse it.
    #[error("CEL parse error: {0}")]
    Cel(String),
    /// A call other than `shardRange` and `||`.
    #[error("unsupported function {}; only shardRange() and || are allowed", go_quote(.0))]
    UnsupportedFunction(String),
    /// Neither a call nor `||` at the top (cel-go's `ast.ExprKind`, printed as its number).
    #[error("unexpected expression kind {0}; expected shardRange() call or || operator")]
    UnexpectedKind(u8),
    /// `shardRange` with other than three arguments.
    #[error("shardRange() requires exactly 3 arguments, got {0}")]
    ArgCount(usize),
    /// The first argument is not a chain of selections.
    #[error(
        "shardRange() first argument: expected field path (e.g. object.metadata.uid), got expression kind {0}"
    )]
    FieldPathKind(u8),
    /// A field path other than the UID and the namespace.
    #[error(
        "unsupported field path {}; supported: object.metadata.uid, object.metadata.namespace",
        go_quote(.0)
    )]
    UnsupportedFieldPath(String),
    /// A bound that is not a literal.
    #[error("{name} must be a string literal (e.g. '0xff'), got expression kind {kind}")]
    NotLiteral {
        /// `hexStart` or `hexEnd`.
        name: &'static str,
        /// cel-go's `ast.ExprKind` number.
        kind: u8,
    },
    /// A bound that is a literal of another type (Go's `%T` of its value).
    #[error("{name} must be a string literal, got {go_type}")]
    NotString {
        /// `hexStart` or `hexEnd`.
        name: &'static str,
        /// `int64`, `uint64`, `float64`, `bool`, `[]uint8`, `structpb.NullValue`.
        go_type: &'static str,
    },
    /// A bound without `0x`.
    #[error("{name} must have '0x' prefix, got {}", go_quote(.value))]
    MissingPrefix {
        /// `hexStart` or `hexEnd`.
        name: &'static str,
        /// The literal.
        value: String,
    },
    /// `'0x'` alone.
    #[error("{name}: hex value is required after '0x'")]
    EmptyHex {
        /// `hexStart` or `hexEnd`.
        name: &'static str,
    },
    /// More than 17 digits (counted in bytes, as Go's `len`).
    #[error("{name}: hex value too long ({len} chars, max 17): {}", go_quote(.hex))]
    TooLong {
        /// `hexStart` or `hexEnd`.
        name: &'static str,
        /// Length of the digits in bytes.
        len: usize,
        /// The digits.
        hex: String,
    },
    /// A character other than `0-9a-f`.
    #[error("{name}: invalid hex character {} in {}", go_quote(&.c.to_string()), go_quote(.value))]
    InvalidChar {
        /// `hexStart` or `hexEnd`.
        name: &'static str,
        /// The first bad character.
        c: char,
        /// The literal.
        value: String,
    },
    /// 17 digits other than 2^64.
    #[error("{name}: 17-digit hex value must be '0x10000000000000000' (2^64), got {}", go_quote(.value))]
    Bad17 {
        /// `hexStart` or `hexEnd`.
        name: &'static str,
        /// The literal.
        value: String,
    },
    /// Fewer than 16 digits, with the padded form as a hint.
    #[error(
        "{name} must be a 0x-prefixed 16-digit hex value, got {} (did you mean {}?)",
        go_quote(.value),
        go_quote(.padded)
    )]
    Not16 {
        /// `hexStart` or `hexEnd`.
        name: &'static str,
        /// The literal.
        value: String,
        /// The literal padded to 16 digits.
        padded: String,
    },
    /// An empty or reversed range.
    #[error("shard range start {start} must be less than end {end}")]
    StartNotLess {
        /// The start.
        start: String,
        /// The end.
        end: String,
    },
    /// Ranges over different fields.
    #[error(
        "all shard ranges must use the same field, got {} and {}",
        go_quote(.first),
        go_quote(.other)
    )]
    MixedKeys {
        /// The first range's field.
        first: String,
        /// The first field that differs.
        other: String,
    },
}

/// One `shardRange(KEY, 'START', 'END')`: objects whose hash is in `[start, end)`
/// (`sharding.ShardRangeRequirement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardRangeRequirement {
    /// [`KEY_UID`] or [`KEY_NAMESPACE`].
    pub key: String,
    /// Inclusive lower bound, `0x` and 16 lowercase hex digits.
    pub start: String,
    /// Exclusive upper bound, `0x` and 16 lowercase hex digits, or `0x10000000000000000`.
    pub end: String,
}

/// A parsed shard selector: at least one range, all over the same field (only [`parse`]
/// builds one, which is what guarantees both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardSelector {
    requirements: Vec<ShardRangeRequirement>,
}

impl ShardSelector {
    /// The ranges, in the order written.
    #[cfg(test)]
    pub(crate) fn requirements(&self) -> &[ShardRangeRequirement] {
        &self.requirements
    }

    /// `Matches`: whether the hash of the object's field (its UID, or its namespace, "" for a
    /// cluster-scoped object) is in one of the ranges.
    pub(crate) fn matches(&self, uid: &str, namespace: &str) -> bool {
        let Some(first) = self.requirements.first() else {
            return true;
        };
        let value = if first.key == KEY_NAMESPACE {
            namespace
        } else {
            uid
        };
        let hash = format!("0x{}", hash_field(value));
        self.requirements
            .iter()
            .any(|r| !hex_less(&hash, &r.start) && hex_less(&hash, &r.end))
    }
}

/// `String()`: the canonical form kube-apiserver echoes in `metadata.shardInfo.selector`,
/// `shardRange(KEY, 'START', 'END')` joined by ` || `.
impl std::fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            write!(f, "shardRange({}, '{}', '{}')", r.key, r.start, r.end)?;
        }
        Ok(())
    }
}

/// `HashField`: FNV-1a 64 of the value (the informer's `kinformer::shard::fnv1a64`), as 16
/// lowercase hex digits.
pub(crate) fn hash_field(value: &str) -> String {
    format!("{:016x}", kinformer::shard::fnv1a64(value))
}

/// `HexLess`: numeric order of normalized `0x` hex strings (a longer one is larger).
pub(crate) fn hex_less(a: &str, b: &str) -> bool {
    if a.len() != b.len() {
        return a.len() < b.len();
    }
    a < b
}

/// `sharding.Parse`.
pub(crate) fn parse(expr: &str) -> Result<ShardSelector, ShardSelectorError> {
    // Go's strings.TrimSpace trims Unicode white space, as Rust's trim does.
    let expr = expr.trim();
    if expr.is_empty() {
        return Err(ShardSelectorError::Empty);
    }
    let ast = cel::parse(expr).map_err(ShardSelectorError::Cel)?;
    let requirements = walk(&ast)?;
    if let Some(first) = requirements.first()
        && let Some(other) = requirements.iter().find(|r| r.key != first.key)
    {
        return Err(ShardSelectorError::MixedKeys {
            first: first.key.clone(),
            other: other.key.clone(),
        });
    }
    Ok(ShardSelector { requirements })
}

/// `walkExpr`: a `shardRange` call, or `||` of such.
fn walk(e: &cel::Expr) -> Result<Vec<ShardRangeRequirement>, ShardSelectorError> {
    let cel::Expr::Call { function, args, .. } = e else {
        return Err(ShardSelectorError::UnexpectedKind(e.kind()));
    };
    match function.as_str() {
        // The parser builds `_||_` with exactly two arguments, so Go's arity check never fires.
        "_||_" => {
            let mut out = Vec::new();
            for a in args {
                out.extend(walk(a)?);
            }
            Ok(out)
        }
        "shardRange" => Ok(vec![shard_range(args)?]),
        other => Err(ShardSelectorError::UnsupportedFunction(other.to_string())),
    }
}

/// `parseShardRangeCall` (a receiver, `x.shardRange(...)`, is ignored, as in Go).
fn shard_range(args: &[cel::Expr]) -> Result<ShardRangeRequirement, ShardSelectorError> {
    let [path, start, end] = args else {
        return Err(ShardSelectorError::ArgCount(args.len()));
    };
    let key = field_path(path).map_err(ShardSelectorError::FieldPathKind)?;
    if key != KEY_UID && key != KEY_NAMESPACE {
        return Err(ShardSelectorError::UnsupportedFieldPath(key));
    }
    let start = hex_literal(start, "hexStart")?;
    let end = hex_literal(end, "hexEnd")?;
    if !hex_less(&start, &end) {
        return Err(ShardSelectorError::StartNotLess { start, end });
    }
    Ok(ShardRangeRequirement { key, start, end })
}

/// `extractFieldPath`: identifiers and selections joined by dots; else the node's kind.
fn field_path(e: &cel::Expr) -> Result<String, u8> {
    match e {
        cel::Expr::Ident(name) => Ok(name.clone()),
        cel::Expr::Select { operand, field } => Ok(format!("{}.{field}", field_path(operand)?)),
        other => Err(other.kind()),
    }
}

/// `extractHexLiteral`.
fn hex_literal(e: &cel::Expr, name: &'static str) -> Result<String, ShardSelectorError> {
    let cel::Expr::Literal(lit) = e else {
        return Err(ShardSelectorError::NotLiteral {
            name,
            kind: e.kind(),
        });
    };
    let s = match lit {
        cel::Literal::String(s) => s.clone(),
        other => {
            return Err(ShardSelectorError::NotString {
                name,
                go_type: other.go_type(),
            });
        }
    };
    let Some(hex) = s.strip_prefix("0x") else {
        return Err(ShardSelectorError::MissingPrefix { name, value: s });
    };
    if hex.is_empty() {
        return Err(ShardSelectorError::EmptyHex { name });
    }
    if hex.len() > 17 {
        return Err(ShardSelectorError::TooLong {
            name,
            len: hex.len(),
            hex: hex.to_string(),
        });
    }
    if let Some(c) = hex
        .chars()
        .find(|c| !c.is_ascii_digit() && !('a'..='f').contains(c))
    {
        return Err(ShardSelectorError::InvalidChar { name, c, value: s });
    }
    if hex.len() == 17 {
        if s != TWO_TO_64 {
            return Err(ShardSelectorError::Bad17 { name, value: s });
        }
    } else if hex.len() != 16 {
        let padded = format!("0x{}{hex}", "0".repeat(16 - hex.len()));
        return Err(ShardSelectorError::Not16 {
            name,
            value: s,
            padded,
        });
    }
    Ok(s)
}

/// The part of cel-go's parser the shard selector needs: CEL's expression grammar
/// (`CEL.g4`) into cel-go's AST shape, without macros (the Go code disables them).
mod cel {
    /// A literal's value, by type.
    #[derive(Debug, Clone, PartialEq)]
    pub(super) enum Literal {
        String(String),
        Int,
        Uint,
        Double,
        Bool,
        Null,
        Bytes,
    }

    impl Literal {
        /// Go's `%T` of cel-go's `ref.Val.Value()` for the literal.
        pub(super) fn go_type(&self) -> &'static str {
            match self {
                Literal::String(_) => "string",
                Literal::Int => "int64",
                Literal::Uint => "uint64",
                Literal::Double => "float64",
                Literal::Bool => "bool",
                Literal::Null => "structpb.NullValue",
                Literal::Bytes => "[]uint8",
            }
        }
    }

    /// An AST node (`ast.Expr`); lists, maps and messages keep no children because the walk
    /// only reports their kind.
    #[derive(Debug, Clone, PartialEq)]
    pub(super) enum Expr {
        Literal(Literal),
        Ident(String),
        Select {
            operand: Box<Expr>,
            field: String,
        },
        Call {
            function: String,
            target: Option<Box<Expr>>,
            args: Vec<Expr>,
        },
        List,
        Map,
        Struct,
    }

    impl Expr {
        /// cel-go's `ast.ExprKind` (an int without a `String` method, so `%v` prints it).
        pub(super) fn kind(&self) -> u8 {
            match self {
                Expr::Literal(_) => 1,
                Expr::Ident(_) => 2,
                Expr::Select { .. } => 3,
                Expr::Call { .. } => 4,
                Expr::List => 5,
                Expr::Map => 6,
                Expr::Struct => 7,
            }
        }

        fn call(function: &str, args: Vec<Expr>) -> Expr {
            Expr::Call {
                function: function.to_string(),
                target: None,
                args,
            }
        }
    }

    #[derive(Debug, Clone, PartialEq)]
    enum Tok {
        Ident(String),
        Lit(Literal),
        Op(&'static str),
        Eof,
    }

    /// cel-go's reserved identifiers (`parser.reservedIds`), refused as identifiers.
    const RESERVED: &[&str] = &[
        "as",
        "break",
        "const",
        "continue",
        "else",
        "false",
        "for",
        "function",
        "if",
        "import",
        "in",
        "let",
        "loop",
        "package",
        "namespace",
        "null",
        "return",
        "true",
        "var",
        "void",
        "while",
    ];

    const OPS: &[&str] = &[
        "||", "&&", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "*", "/", "%", "?", ":", ".",
        ",", "(", ")", "[", "]", "{", "}",
    ];

    fn syntax(why: impl std::fmt::Display) -> String {
        format!("Syntax error: {why}")
    }

    fn lex(src: &str) -> Result<Vec<Tok>, String> {
        let cs: Vec<char> = src.chars().collect();
        let mut i = 0;
        let mut out = Vec::new();
        while i < cs.len() {
            let c = cs[i];
            if matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{c}') {
                i += 1;
                continue;
            }
            if c == '/' && cs.get(i + 1) == Some(&'/') {
                while i < cs.len() && cs[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            // String and bytes literals, with the r/R (raw) and b/B prefixes.
            let mut j = i;
            let mut raw = false;
            let mut bytes = false;
            while j < cs.len() && j < i + 2 {
                match cs[j] {
                    'r' | 'R' if !raw => raw = true,
                    'b' | 'B' if !bytes => bytes = true,
                    _ => break,
                }
                j += 1;
            }
            if j < cs.len() && (cs[j] == '\'' || cs[j] == '"') {
                let (s, next) = string_lit(&cs, j, raw)?;
                out.push(Tok::Lit(if bytes {
                    Literal::Bytes
                } else {
                    Literal::String(s)
                }));
                i = next;
                continue;
            }
            if c.is_ascii_alphabetic() || c == '_' {
                let start = i;
                while i < cs.len() && (cs[i].is_ascii_alphanumeric() || cs[i] == '_') {
                    i += 1;
                }
                let word: String = cs[start..i].iter().collect();
                out.push(match word.as_str() {
                    "true" | "false" => Tok::Lit(Literal::Bool),
                    "null" => Tok::Lit(Literal::Null),
                    "in" => Tok::Op("in"),
                    _ => Tok::Ident(word),
                });
                continue;
            }
            if c.is_ascii_digit() || (c == '.' && cs.get(i + 1).is_some_and(char::is_ascii_digit)) {
                let (lit, next) = number(&cs, i)?;
                out.push(Tok::Lit(lit));
                i = next;
                continue;
            }
            let rest: String = cs[i..cs.len().min(i + 2)].iter().collect();
            let Some(op) = OPS.iter().find(|o| rest.starts_with(**o)) else {
                return Err(syntax(format!("token recognition error at: '{c}'")));
            };
            out.push(Tok::Op(op));
            i += op.chars().count();
        }
        out.push(Tok::Eof);
        Ok(out)
    }

    /// A quoted literal starting at `cs[q]` (single, double or triple quotes): its value and
    /// the index after it.
    fn string_lit(cs: &[char], q: usize, raw: bool) -> Result<(String, usize), String> {
        let quote = cs[q];
        let triple = cs.get(q + 1) == Some(&quote) && cs.get(q + 2) == Some(&quote);
        let mut i = q + if triple { 3 } else { 1 };
        let mut out = String::new();
        let unterminated = || syntax("token recognition error: unterminated string literal");
        loop {
            let Some(&c) = cs.get(i) else {
                return Err(unterminated());
            };
            if c == quote
                && (!triple || (cs.get(i + 1) == Some(&quote) && cs.get(i + 2) == Some(&quote)))
            {
                return Ok((out, i + if triple { 3 } else { 1 }));
            }
            if !triple && (c == '\n' || c == '\r') {
                return Err(unterminated());
            }
            if c == '\\' && !raw {
                let (ch, next) = escape(cs, i + 1)?;
                out.push(ch);
                i = next;
                continue;
            }
            if c == '\\' && raw {
                // A raw string keeps the backslash; an escaped quote does not end it.
                out.push(c);
                if let Some(&n) = cs.get(i + 1) {
                    out.push(n);
                    i += 2;
                    continue;
                }
            }
            out.push(c);
            i += 1;
        }
    }

    /// One escape after a backslash at `cs[i-1]` (`unescape` in cel-go's parser).
    fn escape(cs: &[char], i: usize) -> Result<(char, usize), String> {
        let bad = || syntax("invalid escape sequence in string literal");
        let c = *cs.get(i).ok_or_else(bad)?;
        let simple = match c {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '`' | '?' => Some(c),
            _ => None,
        };
        if let Some(s) = simple {
            return Ok((s, i + 1));
        }
        let (digits, radix, start) = match c {
            'x' | 'X' => (2, 16, i + 1),
            'u' => (4, 16, i + 1),
            'U' => (8, 16, i + 1),
            '0'..='3' => (3, 8, i),
            _ => return Err(bad()),
        };
        let s: String = cs
            .get(start..start + digits)
            .ok_or_else(bad)?
            .iter()
            .collect();
        let n = u32::from_str_radix(&s, radix).map_err(|_| bad())?;
        Ok((char::from_u32(n).ok_or_else(bad)?, start + digits))
    }

    /// A numeric literal at `cs[i]`: int (decimal or `0x`), uint (`u` suffix) or double.
    fn number(cs: &[char], mut i: usize) -> Result<(Literal, usize), String> {
        if cs[i] == '0' && matches!(cs.get(i + 1), Some('x' | 'X')) {
            i += 2;
            let d = i;
            while i < cs.len() && cs[i].is_ascii_hexdigit() {
                i += 1;
            }
            if i == d {
                return Err(syntax("token recognition error at: '0x'"));
            }
            if matches!(cs.get(i), Some('u' | 'U')) {
                return Ok((Literal::Uint, i + 1));
            }
            return Ok((Literal::Int, i));
        }
        let mut double = false;
        while i < cs.len() && cs[i].is_ascii_digit() {
            i += 1;
        }
        if cs.get(i) == Some(&'.') && cs.get(i + 1).is_some_and(char::is_ascii_digit) {
            double = true;
            i += 1;
            while i < cs.len() && cs[i].is_ascii_digit() {
                i += 1;
            }
        }
        if matches!(cs.get(i), Some('e' | 'E')) {
            let mut j = i + 1;
            if matches!(cs.get(j), Some('+' | '-')) {
                j += 1;
            }
            if cs.get(j).is_some_and(char::is_ascii_digit) {
                double = true;
                i = j;
                while i < cs.len() && cs[i].is_ascii_digit() {
                    i += 1;
                }
            }
        }
        if double {
            return Ok((Literal::Double, i));
        }
        if matches!(cs.get(i), Some('u' | 'U')) {
            return Ok((Literal::Uint, i + 1));
        }
        Ok((Literal::Int, i))
    }

    struct Parser {
        toks: Vec<Tok>,
        pos: usize,
        depth: usize,
    }

    /// Parses a CEL expression; the error is the message cel-go would report (approximated
    /// for syntax errors).
    pub(super) fn parse(src: &str) -> Result<Expr, String> {
        let mut p = Parser {
            toks: lex(src)?,
            pos: 0,
            depth: 0,
        };
        let e = p.expr()?;
        match p.peek() {
            Tok::Eof => Ok(e),
            t => Err(syntax(format!("extraneous input {}", describe(t)))),
        }
    }

    fn describe(t: &Tok) -> String {
        match t {
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Lit(_) => "literal".to_string(),
            Tok::Op(o) => format!("'{o}'"),
            Tok::Eof => "'<EOF>'".to_string(),
        }
    }

    impl Parser {
        fn peek(&self) -> &Tok {
            self.toks.get(self.pos).unwrap_or(&Tok::Eof)
        }

        fn next(&mut self) -> Tok {
            let t = self.peek().clone();
            if self.pos < self.toks.len() {
                self.pos += 1;
            }
            t
        }

        fn eat(&mut self, op: &str) -> bool {
            if matches!(self.peek(), Tok::Op(o) if *o == op) {
                self.pos += 1;
                true
            } else {
                false
            }
        }

        fn expect(&mut self, op: &str) -> Result<(), String> {
            if self.eat(op) {
                Ok(())
            } else {
                Err(syntax(format!(
                    "mismatched input {} expecting '{op}'",
                    describe(self.peek())
                )))
            }
        }

        fn enter(&mut self) -> Result<(), String> {
            self.depth += 1;
            if self.depth > super::MAX_DEPTH {
                return Err(format!(
                    "expression recursion limit exceeded: {}",
                    super::MAX_DEPTH
                ));
            }
            Ok(())
        }

        /// `expr: conditionalOr ('?' conditionalOr ':' expr)?`
        fn expr(&mut self) -> Result<Expr, String> {
            self.enter()?;
            let cond = self.binary(0)?;
            let e = if self.eat("?") {
                let a = self.binary(0)?;
                self.expect(":")?;
                let b = self.expr()?;
                Expr::call("_?_:_", vec![cond, a, b])
            } else {
                cond
            };
            self.depth -= 1;
            Ok(e)
        }

        /// The binary levels: `||`, `&&`, relations, `+ -`, `* / %`.
        fn binary(&mut self, level: usize) -> Result<Expr, String> {
            const LEVELS: &[&[(&str, &str)]] = &[
                &[("||", "_||_")],
                &[("&&", "_&&_")],
                &[
                    ("<=", "_<=_"),
                    (">=", "_>=_"),
                    ("<", "_<_"),
                    (">", "_>_"),
                    ("==", "_==_"),
                    ("!=", "_!=_"),
                    ("in", "@in"),
                ],
                &[("+", "_+_"), ("-", "_-_")],
                &[("*", "_*_"), ("/", "_/_"), ("%", "_%_")],
            ];
            let Some(ops) = LEVELS.get(level) else {
                return self.unary();
            };
            self.enter()?;
            let mut left = self.binary(level + 1)?;
            loop {
                let found = ops
                    .iter()
                    .find(|(tok, _)| matches!(self.peek(), Tok::Op(o) if o == tok));
                let Some((_, function)) = found else { break };
                self.pos += 1;
                let right = self.binary(level + 1)?;
                // cel-go balances chains of || and &&; the walk reads them left to right,
                // which a left-leaning tree keeps.
                left = Expr::call(function, vec![left, right]);
            }
            self.depth -= 1;
            Ok(left)
        }

        /// `unary: member | '!'+ member | '-'+ member` (a minus before a number is part of
        /// the literal).
        fn unary(&mut self) -> Result<Expr, String> {
            self.enter()?;
            let e = if self.eat("!") {
                let mut n = 1;
                while self.eat("!") {
                    n += 1;
                }
                let mut e = self.member()?;
                // cel-go drops pairs of negations.
                if n % 2 == 1 {
                    e = Expr::call("!_", vec![e]);
                }
                e
            } else if matches!(self.peek(), Tok::Op("-")) {
                self.pos += 1;
                if matches!(
                    self.peek(),
                    Tok::Lit(Literal::Int | Literal::Double | Literal::Uint)
                ) {
                    self.member()?
                } else {
                    let e = self.unary()?;
                    Expr::call("-_", vec![e])
                }
            } else {
                self.member()?
            };
            self.depth -= 1;
            Ok(e)
        }

        /// `member: primary ('.' IDENT ('(' args ')')? | '[' expr ']' | '{' fields '}')*`
        fn member(&mut self) -> Result<Expr, String> {
            let mut e = self.primary()?;
            loop {
                if self.eat(".") {
                    let Tok::Ident(field) = self.next() else {
                        return Err(syntax("no viable alternative at input '.'"));
                    };
                    if self.eat("(") {
                        let args = self.args(")")?;
                        e = Expr::Call {
                            function: field,
                            target: Some(Box::new(e)),
                            args,
                        };
                    } else {
                        e = Expr::Select {
                            operand: Box::new(e),
                            field,
                        };
                    }
                } else if self.eat("[") {
                    let i = self.expr()?;
                    self.expect("]")?;
                    e = Expr::call("_[_]", vec![e, i]);
                } else if matches!(self.peek(), Tok::Op("{"))
                    && matches!(e, Expr::Ident(_) | Expr::Select { .. })
                {
                    self.pos += 1;
                    self.entries("}")?;
                    e = Expr::Struct;
                } else {
                    return Ok(e);
                }
            }
        }

        fn primary(&mut self) -> Result<Expr, String> {
            match self.next() {
                Tok::Lit(l) => Ok(Expr::Literal(l)),
                Tok::Op(".") => {
                    let Tok::Ident(name) = self.next() else {
                        return Err(syntax("no viable alternative at input '.'"));
                    };
                    self.ident_or_call(format!(".{name}"), &name)
                }
                Tok::Ident(name) => self.ident_or_call(name.clone(), &name),
                Tok::Op("(") => {
                    let e = self.expr()?;
                    self.expect(")")?;
                    Ok(e)
                }
                Tok::Op("[") => {
                    self.args("]")?;
                    Ok(Expr::List)
                }
                Tok::Op("{") => {
                    self.entries("}")?;
                    Ok(Expr::Map)
                }
                t => Err(syntax(format!("mismatched input {}", describe(&t)))),
            }
        }

        /// An identifier, or a global call of it (`visitIdentOrGlobalCall`).
        fn ident_or_call(&mut self, qualified: String, bare: &str) -> Result<Expr, String> {
            if RESERVED.contains(&bare) {
                return Err(format!("reserved identifier: {bare}"));
            }
            if self.eat("(") {
                let args = self.args(")")?;
                return Ok(Expr::Call {
                    function: qualified,
                    target: None,
                    args,
                });
            }
            Ok(Expr::Ident(qualified))
        }

        /// Comma-separated expressions up to `close` (a trailing comma allowed).
        fn args(&mut self, close: &str) -> Result<Vec<Expr>, String> {
            let mut out = Vec::new();
            if self.eat(close) {
                return Ok(out);
            }
            loop {
                out.push(self.expr()?);
                if self.eat(close) {
                    return Ok(out);
                }
                self.expect(",")?;
                if self.eat(close) {
                    return Ok(out);
                }
            }
        }

        /// `key: value` pairs up to `close` (map entries and message fields).
        fn entries(&mut self, close: &str) -> Result<(), String> {
            if self.eat(close) {
                return Ok(());
            }
            loop {
                self.expr()?;
                self.expect(":")?;
                self.expr()?;
                if self.eat(close) {
                    return Ok(());
                }
                self.expect(",")?;
                if self.eat(close) {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, start: &str, end: &str) -> ShardRangeRequirement {
        ShardRangeRequirement {
            key: key.into(),
            start: start.into(),
            end: end.into(),
        }
    }

    /// `parser_test.go` `TestParse`, the accepted cases.
    #[test]
    fn parses_like_the_go_parser() {
        let cases: &[(&str, Vec<ShardRangeRequirement>)] = &[
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
                vec![req(KEY_UID, "0x0000000000000000", "0x8000000000000000")],
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')",
                vec![req(KEY_UID, "0x0000000000000000", TWO_TO_64)],
            ),
            (
                "shardRange(object.metadata.namespace, '0x00000000000000aa', '0x00000000000000ff')",
                vec![req(
                    KEY_NAMESPACE,
                    "0x00000000000000aa",
                    "0x00000000000000ff",
                )],
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
                vec![
                    req(KEY_UID, "0x0000000000000000", "0x8000000000000000"),
                    req(KEY_UID, "0x8000000000000000", TWO_TO_64),
                ],
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000005') || shardRange(object.metadata.uid, '0x0000000000000005', '0x000000000000000a') || shardRange(object.metadata.uid, '0x000000000000000a', '0x000000000000000f')",
                vec![
                    req(KEY_UID, "0x0000000000000000", "0x0000000000000005"),
                    req(KEY_UID, "0x0000000000000005", "0x000000000000000a"),
                    req(KEY_UID, "0x000000000000000a", "0x000000000000000f"),
                ],
            ),
            (
                "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')",
                vec![req(KEY_UID, "0x0000000000000000", "0x8000000000000000")],
            ),
            (
                "  shardRange( object.metadata.uid ,  '0x0000000000000000' ,  '0x8000000000000000' )  ",
                vec![req(KEY_UID, "0x0000000000000000", "0x8000000000000000")],
            ),
            // Beyond parser_test.go, what CEL also accepts: parentheses, double quotes,
            // escapes in the literal, a receiver (ignored by the walk), comments.
            (
                "(shardRange(object.metadata.uid, \"0x0000000000000000\", '0x4000000000000000')) || (shardRange(object.metadata.uid, '\\x30x4000000000000000', '0x8000000000000000') // c\n)",
                vec![
                    req(KEY_UID, "0x0000000000000000", "0x4000000000000000"),
                    req(KEY_UID, "0x4000000000000000", "0x8000000000000000"),
                ],
            ),
            (
                "x.shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
                vec![req(KEY_UID, "0x0000000000000000", "0x8000000000000000")],
            ),
        ];
        for (input, want) in cases {
            let sel = parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(sel.requirements(), &want[..], "{input}");
        }
    }

    /// `parser_test.go` `TestParse`, the refused cases, with the texts of the Go errors.
    #[test]
    fn refuses_like_the_go_parser() {
        let u = |s: &str, e: &str| format!("shardRange(object.metadata.uid, {s}, {e})");
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "empty shard selector is not allowed; omit the parameter for unfiltered lists"),
            ("   ".into(), "empty shard selector is not allowed; omit the parameter for unfiltered lists"),
            (u("'0000000000000000'", "'0x8000000000000000'"), "hexStart must have '0x' prefix, got \"0000000000000000\""),
            (u("'0x0000000000000000'", "'8000000000000000'"), "hexEnd must have '0x' prefix, got \"8000000000000000\""),
            (u("'0x'", "'0x8000000000000000'"), "hexStart: hex value is required after '0x'"),
            ("shardRange(object.metadata.name, '0x00', '0x80')".into(), "unsupported field path \"object.metadata.name\"; supported: object.metadata.uid, object.metadata.namespace"),
            ("shardRange(object.metadata.labels, '0x00', '0x80')".into(), "unsupported field path \"object.metadata.labels\"; supported: object.metadata.uid, object.metadata.namespace"),
            ("invalidFunc(object.metadata.uid, '0x00', '0x80')".into(), "unsupported function \"invalidFunc\"; only shardRange() and || are allowed"),
            (u("'0x000000000000000000'", "'0x80'"), "hexStart: hex value too long (18 chars, max 17): \"000000000000000000\""),
            (u("'0x0g'", "'0x80'"), "hexStart: invalid hex character \"g\" in \"0x0g\""),
            (u("'0x00000000000000AA'", "'0x80'"), "hexStart: invalid hex character \"A\" in \"0x00000000000000AA\""),
            ("shardRange(object.metadata.uid, '0x0', '0x8') && shardRange(object.metadata.uid, '0x8', '0xf')".into(), "unsupported function \"_&&_\"; only shardRange() and || are allowed"),
            (u("0", "8"), "hexStart must be a string literal, got int64"),
            (u("0x00", "0x80"), "hexStart must be a string literal, got int64"),
            (u("-1", "8u"), "hexStart must be a string literal, got int64"),
            (u("'0x0000000000000000'", "8u"), "hexEnd must be a string literal, got uint64"),
            (u("'0x0000000000000000'", "1.5"), "hexEnd must be a string literal, got float64"),
            (u("b'0x00'", "'0x80'"), "hexStart must be a string literal, got []uint8"),
            ("object.metadata.uid > '0x0'".into(), "unsupported function \"_>_\"; only shardRange() and || are allowed"),
            ("shardRange(object.metadata.uid, '0x0')".into(), "shardRange() requires exactly 3 arguments, got 2"),
            (u("hex(0)", "'0x8'"), "hexStart must be a string literal (e.g. '0xff'), got expression kind 4"),
            ("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')".into(), "all shard ranges must use the same field, got \"object.metadata.uid\" and \"object.metadata.namespace\""),
            (u("'0x0'", "'0x8000000000000000'"), "hexStart must be a 0x-prefixed 16-digit hex value, got \"0x0\" (did you mean \"0x0000000000000000\"?)"),
            (u("'0x0000000000000000'", "'0xff'"), "hexEnd must be a 0x-prefixed 16-digit hex value, got \"0xff\" (did you mean \"0x00000000000000ff\"?)"),
            (u("'0x8000000000000000'", "'0x8000000000000000'"), "shard range start 0x8000000000000000 must be less than end 0x8000000000000000"),
            (u("'0xffffffffffffffff'", "'0x0000000000000000'"), "shard range start 0xffffffffffffffff must be less than end 0x0000000000000000"),
            (u("'0x0000000000000000'", "'0x20000000000000000'"), "hexEnd: 17-digit hex value must be '0x10000000000000000' (2^64), got \"0x20000000000000000\""),
            ("object.metadata.uid".into(), "unexpected expression kind 3; expected shardRange() call or || operator"),
            ("'x'".into(), "unexpected expression kind 1; expected shardRange() call or || operator"),
            ("shardRange(metadata['uid'], '0x00', '0x80')".into(), "shardRange() first argument: expected field path (e.g. object.metadata.uid), got expression kind 4"),
            (u("[1]", "'0x80'"), "hexStart must be a string literal (e.g. '0xff'), got expression kind 5"),
            ("shardRange(.object.metadata.uid, '0x00', '0x80')".into(), "unsupported field path \".object.metadata.uid\"; supported: object.metadata.uid, object.metadata.namespace"),
        ];
        for (input, want) in &cases {
            let got = parse(input)
                .map(|s| s.to_string())
                .map_err(|e| e.to_string());
            assert_eq!(got, Err(want.to_string()), "{input}");
        }
    }

    #[test]
    fn syntax_errors_are_cel_parse_errors() {
        for input in [
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000'",
            "shardRange(object.metadata.uid, '0x0000000000000000, '0x8000000000000000')",
            "shardRange(object.metadata.uid '0x0000000000000000' '0x8000000000000000')",
            "|| shardRange()",
            "shardRange(object.metadata.namespace.in, '0x0', '0x1')",
            "namespace",
            "a #",
        ] {
            let e = parse(input).expect_err(input).to_string();
            assert!(e.starts_with("CEL parse error: "), "{input}: {e}");
        }
        let deep = format!("{}x{}", "(".repeat(400), ")".repeat(400));
        assert_eq!(
            parse(&deep).expect_err("deep").to_string(),
            "CEL parse error: expression recursion limit exceeded: 250"
        );
    }

    /// `TestParseRoundTrip`: `String()` gives back the canonical input, which parses again.
    #[test]
    fn round_trips() {
        for input in [
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')",
            "shardRange(object.metadata.namespace, '0x00000000000000aa', '0x00000000000000ff')",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
        ] {
            let s = parse(input).expect(input).to_string();
            assert_eq!(s, input);
            assert_eq!(parse(&s).expect("again").to_string(), s);
        }
        let loose = parse(
            "( shardRange(object.metadata.uid,\"0x0000000000000000\",'0x8000000000000000') )",
        )
        .expect("loose");
        assert_eq!(
            loose.to_string(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
    }

    /// `hash_test.go`: FNV-1a 64 of known values.
    #[test]
    fn hashes_with_fnv1a_64() {
        assert_eq!(hash_field(""), "cbf29ce484222325");
        assert_eq!(hash_field("a"), "af63dc4c8601ec8c");
        assert_eq!(hash_field("foobar"), "85944171f73967e8");
    }

    #[test]
    fn matches_by_hash_range() {
        // hash("") = 0xcbf29ce484222325, hash("a") = 0xaf63dc4c8601ec8c.
        let hi = parse(
            "shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')",
        )
        .expect("hi");
        assert!(hi.matches("a", ""), "cluster-scoped: the hash of \"\"");
        assert!(!hi.matches("", "a"));
        let uid =
            parse("shardRange(object.metadata.uid, '0xaf63dc4c8601ec8c', '0xaf63dc4c8601ec8d')")
                .expect("uid");
        assert!(uid.matches("a", "x"), "start is inclusive");
        let excl = parse("shardRange(object.metadata.uid, '0x0000000000000000', '0xaf63dc4c8601ec8c') || shardRange(object.metadata.uid, '0xf000000000000000', '0x10000000000000000')")
            .expect("excl");
        assert!(!excl.matches("a", "x"), "end is exclusive");
        assert!(hex_less("0xffffffffffffffff", TWO_TO_64));
        assert!(!hex_less(TWO_TO_64, "0xffffffffffffffff"));
    }
}
