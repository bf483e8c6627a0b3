//! Label selection over any source of labels (docs/semantics.md I3, I7): a kube [`Selector`]
//! evaluated against a lookup function, so a lean store matches the labels it keeps parsed
//! without decoding objects or building kube's `BTreeMap` for each of them; and
//! [`parse_label_selector`], the query-string form (`app=web,tier in (a,b),!canary`) read into
//! kube's [`Selector`], as kube-apiserver reads a `labelSelector` parameter.

use kube_core::{Expression, Selector};

/// A [`Selector`] prepared for matching many objects: its expressions, taken out once.
///
/// Matches exactly as kube's `SelectorExt::matches` (every expression must hold; `In`/`=`
/// need the key, `NotIn`/`!=` hold without it).
///
/// ```
/// use kube_core::{Expression, Selector};
/// use kinformer::selector::LabelMatcher;
///
/// let sel: Selector = Expression::Equal("app".into(), "web".into()).into();
/// let m = LabelMatcher::new(&sel);
/// assert!(m.matches(|k| (k == "app").then_some("web")));
/// assert!(!m.matches(|_| None));
/// ```
#[derive(Clone, Debug, Default)]
pub struct LabelMatcher {
    expressions: Vec<Expression>,
}

impl LabelMatcher {
    /// Prepares `selector`.
    pub fn new(selector: &Selector) -> Self {
        LabelMatcher {
            expressions: selector.clone().into_iter().collect(),
        }
    }

    /// True when the selector has no expression (it matches everything).
    pub fn selects_all(&self) -> bool {
        self.expressions.is_empty()
    }

    /// True when every expression holds for the labels `get` looks up.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.expressions.iter().all(|e| match e {
            Expression::In(key, values) => get(key).is_some_and(|v| values.contains(v)),
            Expression::NotIn(key, values) => get(key).is_none_or(|v| !values.contains(v)),
            Expression::Exists(key) => get(key).is_some(),
            Expression::DoesNotExist(key) => get(key).is_none(),
            Expression::Equal(key, value) => get(key) == Some(value.as_str()),
            Expression::NotEqual(key, value) => get(key) != Some(value.as_str()),
        })
    }
}

/// Which relation a [`Requirement`] states (apimachinery's `selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `k in (a,b)`: the key is set to one of the values.
    In,
    /// `k notin (a,b)`: the key is unset or set to none of the values.
    NotIn,
    /// `k=v`.
    Equals,
    /// `k==v` (the same as `=`).
    DoubleEquals,
    /// `k!=v`: the key is unset or set to another value.
    NotEquals,
    /// `k`: the key is set.
    Exists,
    /// `!k`: the key is unset.
    DoesNotExist,
    /// `k>1`: the key is set to an integer greater than the value.
    GreaterThan,
    /// `k<1`: the key is set to an integer less than the value.
    LessThan,
}

impl Operator {
    /// Go's spelling (`in`, `notin`, `=`, `==`, `!=`, `exists`, `!`, `gt`, `lt`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

/// One requirement of a label selector (apimachinery's `labels.Requirement`): a key, an
/// operator and its values, sorted and without repeats (none for `Exists`/`DoesNotExist`, one
/// for `=`, `==`, `!=`, `>` and `<`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
    /// The value of `>`/`<`, parsed once (validated by the parser, so always there for them).
    bound: i64,
}

impl Requirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The relation.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted, without repeats.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether the labels `get` looks up satisfy the requirement, as `Requirement.Matches`:
    /// `!=` and `notin` hold without the key; `>`/`<` need the key set to an integer.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                get(&self.key).is_some_and(has)
            }
            Operator::NotIn | Operator::NotEquals => get(&self.key).is_none_or(|v| !has(v)),
            Operator::Exists => get(&self.key).is_some(),
            Operator::DoesNotExist => get(&self.key).is_none(),
            Operator::GreaterThan | Operator::LessThan => get(&self.key)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| {
                    if self.operator == Operator::GreaterThan {
                        v > self.bound
                    } else {
                        v < self.bound
                    }
                }),
        }
    }

    /// kube's [`Expression`] for it; `None` for `>`/`<`, which kube cannot say.
    fn into_expression(self) -> Option<Expression> {
        let Requirement {
            key,
            operator,
            mut values,
            ..
        } = self;
        let one = |values: &mut Vec<String>| values.pop().unwrap_or_default();
        Some(match operator {
            Operator::In => Expression::In(key, values.into_iter().collect()),
            Operator::NotIn => Expression::NotIn(key, values.into_iter().collect()),
            Operator::Equals | Operator::DoubleEquals => Expression::Equal(key, one(&mut values)),
            Operator::NotEquals => Expression::NotEqual(key, one(&mut values)),
            Operator::Exists => Expression::Exists(key),
            Operator::DoesNotExist => Expression::DoesNotExist(key),
            Operator::GreaterThan | Operator::LessThan => return None,
        })
    }
}

/// What the label-selector grammar expected where it found something else; each prints the
/// rest of apimachinery's message after `found '…'`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// A requirement after a `,`.
    IdentifierAfterComma,
    /// A `,` or the end after a requirement.
    CommaOrEnd,
    /// A requirement or the end at the start.
    RequirementOrEnd,
    /// A key (after `!`, or at a requirement's start), or a value after `=`, `!=`, `>`, `<`.
    Identifier,
    /// An operator after a key.
    Operator,
    /// `(` after `in`/`notin`.
    OpenParen,
    /// The first value of a set, a `,` or `)`.
    ValueSetStart,
    /// `,` or `)` after a value of a set.
    CommaOrClose,
    /// A value or `,` inside a set.
    CommaOrIdentifier,
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Expected::IdentifierAfterComma => ", expected: identifier after ','",
            Expected::CommaOrEnd => ", expected: ',' or 'end of string'",
            Expected::RequirementOrEnd => ", expected: !, identifier, or 'end of string'",
            Expected::Identifier => ", expected: identifier",
            Expected::Operator => ", expected: in, notin, =, ==, !=, gt, lt",
            // Go's text has no comma here.
            Expected::OpenParen => " expected: '('",
            Expected::ValueSetStart => ", expected: ',', ')' or identifier",
            Expected::CommaOrClose => ", expected: ',' or ')'",
            Expected::CommaOrIdentifier => ", expected: ',', or identifier",
        })
    }
}

/// An invalid value found while parsing a selector (apimachinery's `field.Invalid`): prints as
/// `field: Invalid value: "value": detail`, the field `<nil>` for a key, `values[i][key]` for a
/// value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path as Go prints it.
    pub field: String,
    /// The value refused.
    pub value: String,
    /// Why (the validation messages, joined with `; `).
    pub detail: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: Invalid value: ", self.field)?;
        go_quote(f, &self.value)?;
        write!(f, ": {}", self.detail)
    }
}

/// Writes `s` as Go's `%q` does: escapes for `"`, `\`, control characters and spaces other than
/// U+0020; other characters as they are.
fn go_quote(f: &mut std::fmt::Formatter<'_>, s: &str) -> std::fmt::Result {
    use std::fmt::Write as _;
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\u{7}' => f.write_str("\\a")?,
            '\u{8}' => f.write_str("\\b")?,
            '\u{c}' => f.write_str("\\f")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            '\u{b}' => f.write_str("\\v")?,
            c if (c as u32) < 0x20 || c == '\u{7f}' => write!(f, "\\x{:02x}", c as u32)?,
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                if (c as u32) < 0x10000 {
                    write!(f, "\\u{:04x}", c as u32)?
                } else {
                    write!(f, "\\U{:08x}", c as u32)?
                }
            }
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

/// Why a label selector string was refused. Printed, it is the message kube-apiserver answers
/// (apimachinery's `labels.Parse`), except [`SelectorParseError::Unsupported`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorParseError {
    /// The text does not follow the grammar: `found '…', expected: …`, preceded by `unable to
    /// parse requirement: ` when inside a requirement.
    #[error("{}found '{found}'{expected}", if *in_requirement { "unable to parse requirement: " } else { "" })]
    Syntax {
        /// The token found (`''` at the end).
        found: String,
        /// What the grammar expected there.
        expected: Expected,
        /// Whether it was inside a requirement (after its first token).
        in_requirement: bool,
    },
    /// A key, a value or a `>`/`<` bound that Kubernetes refuses (key: `[prefix/]name`, name at
    /// most 63 of `[A-Za-z0-9_.-]` starting and ending alphanumeric, prefix a DNS-1123
    /// subdomain; value: empty or as a name; bound: an integer).
    #[error("unable to parse requirement: {}", FieldErrors(.0))]
    Invalid(Vec<FieldError>),
    /// `k>1` / `k<1`: valid in Kubernetes, but kube's [`Expression`] cannot say it (only
    /// [`parse_label_selector`] refuses it).
    #[error("the '{op}' operator (in {selector:?}) is not supported: kube's Selector has no Gt/Lt")]
    Unsupported {
        /// The selector as given.
        selector: String,
        /// `>` or `<`.
        op: char,
    },
}

/// Displays field errors as Go's aggregate does: one as it is, more in brackets.
struct FieldErrors<'a>(&'a [FieldError]);

impl std::fmt::Display for FieldErrors<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let [one] = self.0 {
            return write!(f, "{one}");
        }
        f.write_str("[")?;
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{e}")?;
        }
        f.write_str("]")
    }
}

/// The lexer's tokens (apimachinery's `Token`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    End,
    ClosePar,
    Comma,
    Not,
    DoubleEq,
    Eq,
    Gt,
    Ident,
    In,
    Lt,
    NotEq,
    NotIn,
    OpenPar,
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The whole text as tokens with their literals, ending with [`Tok::End`] (apimachinery's
/// `Lexer` and `Parser.scan`). Works on bytes as Go's does: only ASCII space, tab, CR and LF
/// separate, and a NUL byte reads as the end of the text where a token would start (Go's
/// `read` returns 0 for both); literals are cut at ASCII bytes, so always at UTF-8 boundaries.
fn lex(s: &str) -> Vec<(Tok, &str)> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(8);
    let mut pos = 0;
    // Go's `read` consumes a NUL in the middle of the text: one that ends a token is skipped.
    let skip_nul = |pos: usize| if b.get(pos) == Some(&0) { pos + 1 } else { pos };
    loop {
        while pos < b.len() && is_whitespace(b[pos]) {
            pos += 1;
        }
        if pos >= b.len() || b[pos] == 0 {
            out.push((Tok::End, ""));
            return out;
        }
        let start = pos;
        if is_special(b[pos]) {
            let two = match (b[pos], b.get(pos + 1)) {
                (b'=', Some(b'=')) => Some(Tok::DoubleEq),
                (b'!', Some(b'=')) => Some(Tok::NotEq),
                _ => None,
            };
            let tok = two.unwrap_or(match b[pos] {
                b')' => Tok::ClosePar,
                b',' => Tok::Comma,
                b'!' => Tok::Not,
                b'=' => Tok::Eq,
                b'>' => Tok::Gt,
                b'<' => Tok::Lt,
                _ => Tok::OpenPar,
            });
            pos += if two.is_some() { 2 } else { 1 };
            out.push((tok, &s[start..pos]));
            pos = skip_nul(pos);
        } else {
            while pos < b.len() && b[pos] != 0 && !is_special(b[pos]) && !is_whitespace(b[pos]) {
                pos += 1;
            }
            let lit = &s[start..pos];
            let tok = match lit {
                "in" => Tok::In,
                "notin" => Tok::NotIn,
                _ => Tok::Ident,
            };
            out.push((tok, lit));
            pos = skip_nul(pos);
        }
    }
}

/// The recursive-descent parser over the tokens (apimachinery's `Parser`).
struct Parser<'a> {
    items: Vec<(Tok, &'a str)>,
    position: usize,
}

/// Whether `in`/`notin` are operators here (after a key) or identifiers (anywhere else: `in` is
/// a valid key and value), apimachinery's `ParserContext`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

fn syntax(found: &str, expected: Expected, in_requirement: bool) -> SelectorParseError {
    SelectorParseError::Syntax {
        found: found.to_string(),
        expected,
        in_requirement,
    }
}

/// A syntax error inside a requirement.
fn req_syntax(found: &str, expected: Expected) -> SelectorParseError {
    syntax(found, expected, true)
}

impl<'a> Parser<'a> {
    fn lookahead(&self, context: Context) -> (Tok, &'a str) {
        // The last item is always `End`, which nothing consumes and goes on after.
        let (tok, lit) = self.items[self.position.min(self.items.len() - 1)];
        match tok {
            Tok::In | Tok::NotIn if context == Context::Values => (Tok::Ident, lit),
            _ => (tok, lit),
        }
    }

    fn consume(&mut self, context: Context) -> (Tok, &'a str) {
        let item = self.lookahead(context);
        self.position += 1;
        item
    }

    /// `parse`: requirements separated by commas, up to the end.
    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorParseError> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Tok::Ident | Tok::Not => {
                    requirements.push(self.parse_requirement()?);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Tok::End => return Ok(requirements),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Tok::Ident && t2 != Tok::Not {
                                return Err(syntax(l2, Expected::IdentifierAfterComma, false));
                            }
                        }
                        _ => return Err(syntax(l, Expected::CommaOrEnd, false)),
                    }
                }
                Tok::End => return Ok(requirements),
                _ => return Err(syntax(lit, Expected::RequirementOrEnd, false)),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, SelectorParseError> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(op) = operator {
            return new_requirement(key, op, Vec::new());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, operator, values)
    }

    /// The key, and `Exists`/`DoesNotExist` when no operator follows (`None`: one does).
    fn parse_key_and_infer_operator(
        &mut self,
    ) -> Result<(&'a str, Option<Operator>), SelectorParseError> {
        let (mut tok, mut lit) = self.consume(Context::Values);
        let mut operator = None;
        if tok == Tok::Not {
            operator = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Tok::Ident {
            return Err(req_syntax(lit, Expected::Identifier));
        }
        let errs = crate::validation::is_qualified_name(lit);
        if !errs.is_empty() {
            return Err(SelectorParseError::Invalid(vec![FieldError {
                field: "<nil>".into(),
                value: lit.into(),
                detail: errs.join("; "),
            }]));
        }
        if matches!(self.lookahead(Context::Values).0, Tok::End | Tok::Comma) && operator.is_none()
        {
            operator = Some(Operator::Exists);
        }
        Ok((lit, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, SelectorParseError> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Eq => Operator::Equals,
            Tok::DoubleEq => Operator::DoubleEquals,
            Tok::Gt => Operator::GreaterThan,
            Tok::Lt => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEq => Operator::NotEquals,
            _ => return Err(req_syntax(lit, Expected::Operator)),
        })
    }

    /// `(a,b)`; `()` is the set holding the empty value, as in Go.
    fn parse_values(&mut self) -> Result<Vec<&'a str>, SelectorParseError> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Tok::OpenPar {
            return Err(req_syntax(lit, Expected::OpenParen));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Tok::Ident | Tok::Comma => {
                let mut set = self.parse_identifiers_list()?;
                // The list ends only before `)`, which this consumes.
                self.consume(Context::Values);
                // A set, as Go's `sets.String.List()`: sorted, without repeats.
                set.sort_unstable();
                set.dedup();
                Ok(set)
            }
            Tok::ClosePar => {
                self.consume(Context::Values);
                Ok(vec![""])
            }
            _ => Err(req_syntax(lit, Expected::ValueSetStart)),
        }
    }

    /// Comma-separated, possibly empty values up to (not including) `)`.
    fn parse_identifiers_list(&mut self) -> Result<Vec<&'a str>, SelectorParseError> {
        let mut set = Vec::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Tok::Ident => {
                    set.push(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Tok::Comma => continue,
                        Tok::ClosePar => return Ok(set),
                        _ => return Err(req_syntax(lit2, Expected::CommaOrClose)),
                    }
                }
                Tok::Comma => {
                    // `(,`, `,)` and `,,` hold the empty value.
                    if set.is_empty() {
                        set.push("");
                    }
                    match self.lookahead(Context::Values).0 {
                        Tok::ClosePar => {
                            set.push("");
                            return Ok(set);
                        }
                        Tok::Comma => {
                            set.push("");
                        }
                        _ => {}
                    }
                }
                _ => return Err(req_syntax(lit, Expected::CommaOrIdentifier)),
            }
        }
    }

    /// The value after `=`, `==`, `!=`, `>`, `<`: empty before `,` or the end.
    fn parse_exact_value(&mut self) -> Result<Vec<&'a str>, SelectorParseError> {
        if matches!(self.lookahead(Context::Values).0, Tok::End | Tok::Comma) {
            return Ok(vec![""]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Tok::Ident {
            return Ok(vec![lit]);
        }
        Err(req_syntax(lit, Expected::Identifier))
    }
}

/// `NewRequirement`'s checks of what the grammar accepted: `>`/`<` bounds are integers, values
/// are label values (the key was checked by the parser); every error found, in Go's order.
fn new_requirement(
    key: &str,
    operator: Operator,
    values: Vec<&str>,
) -> Result<Requirement, SelectorParseError> {
    let mut errors: Vec<FieldError> = Vec::new();
    let mut bound = 0;
    if matches!(operator, Operator::GreaterThan | Operator::LessThan) {
        for (i, v) in values.iter().enumerate() {
            match v.parse::<i64>() {
                Ok(n) => bound = n,
                Err(_) => errors.push(FieldError {
                    field: format!("values[{i}]"),
                    value: (*v).into(),
                    detail: "for 'Gt', 'Lt' operators, the value must be an integer".into(),
                }),
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let errs = crate::validation::is_valid_label_value(v);
        if !errs.is_empty() {
            errors.push(FieldError {
                field: format!("values[{i}][{key}]"),
                value: (*v).into(),
                detail: errs.join("; "),
            });
        }
    }
    // Every error names its own field, so none repeats (Go's aggregate drops repeats).
    if !errors.is_empty() {
        return Err(SelectorParseError::Invalid(errors));
    }
    Ok(Requirement {
        key: key.to_string(),
        operator,
        values: values.into_iter().map(str::to_string).collect(),
        bound,
    })
}

/// Parses a label selector as kube-apiserver reads a `labelSelector` parameter (apimachinery's
/// `labels.Parse` / `ParseToRequirements`), into its requirements sorted by key. Requirements
/// are joined by `,`: `k=v` (or `k==v`), `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists),
/// `!k` (does not exist), `k>1`, `k<1`; spaces, tabs and line ends around tokens are ignored;
/// the empty string selects everything; `k in ()` holds the empty value; `in` and `notin` are
/// operators only after a key. Keys and values are validated as Kubernetes does, and every
/// error prints as kube-apiserver's message.
///
/// ```
/// use kinformer::selector::{Operator, parse_requirements};
///
/// let reqs = parse_requirements("tier in (b,a), n>1, app").unwrap();
/// let keys: Vec<_> = reqs.iter().map(|r| (r.key(), r.operator())).collect();
/// assert_eq!(keys, [("app", Operator::Exists), ("n", Operator::GreaterThan), ("tier", Operator::In)]);
/// assert!(reqs[1].matches(|k| (k == "n").then_some("2")));
/// assert_eq!(
///     parse_requirements("app in (web").unwrap_err().to_string(),
///     "unable to parse requirement: found '', expected: ',' or ')'",
/// );
/// ```
///
/// # Errors
/// [`SelectorParseError::Syntax`] or [`SelectorParseError::Invalid`] when Kubernetes would
/// refuse the text.
pub fn parse_requirements(s: &str) -> Result<Vec<Requirement>, SelectorParseError> {
    // The common "select everything" without the lexer's allocation.
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let mut parser = Parser {
        items: lex(s),
        position: 0,
    };
    let mut requirements = parser.parse()?;
    // As Go, for a deterministic order (a stable sort: one Go's unstable sort may give).
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(requirements)
}

/// Parses a label selector (see [`parse_requirements`]: the same grammar, checks and error
/// texts) into kube's [`Selector`], for [`LabelMatcher`] and listers. `k>1` and `k<1` are
/// refused ([`SelectorParseError::Unsupported`]): kube's [`Expression`] has no such operator.
/// What kube's `Selector` prints (`Display`) parses back to it (up to the order of its
/// expressions, which this sorts by key).
///
/// ```
/// use kinformer::selector::{LabelMatcher, parse_label_selector};
///
/// let sel = parse_label_selector("app=web, tier in (front,back), !canary").unwrap();
/// let m = LabelMatcher::new(&sel);
/// assert!(m.matches(|k| match k { "app" => Some("web"), "tier" => Some("front"), _ => None }));
/// assert!(!m.matches(|k| match k { "app" => Some("web"), "canary" => Some("1"), _ => None }));
/// assert!(parse_label_selector("app in (web").is_err());
/// ```
///
/// # Errors
/// [`SelectorParseError`] when the text is not a selector Kubernetes would accept, or uses
/// `>`/`<`.
pub fn parse_label_selector(s: &str) -> Result<Selector, SelectorParseError> {
    let mut expressions = Vec::new();
    for r in parse_requirements(s)? {
        let op = r.operator;
        match r.into_expression() {
            Some(e) => expressions.push(e),
            None => {
                return Err(SelectorParseError::Unsupported {
                    selector: s.to_string(),
                    op: if op == Operator::GreaterThan {
                        '>'
                    } else {
                        '<'
                    },
                });
            }
        }
    }
    Ok(expressions.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use kube_core::SelectorExt;
    use proptest::prelude::*;

    use super::*;

    fn expression() -> impl Strategy<Value = Expression> {
        let key = prop::sample::select(vec!["a", "b", "c"]).prop_map(String::from);
        let value = prop::sample::select(vec!["1", "2", "3"]).prop_map(String::from);
        let values = prop::collection::btree_set(value.clone(), 0..3);
        prop_oneof![
            (key.clone(), values.clone()).prop_map(|(k, v)| Expression::In(k, v)),
            (key.clone(), values).prop_map(|(k, v)| Expression::NotIn(k, v)),
            key.clone().prop_map(Expression::Exists),
            key.clone().prop_map(Expression::DoesNotExist),
            (key.clone(), value.clone()).prop_map(|(k, v)| Expression::Equal(k, v)),
            (key, value).prop_map(|(k, v)| Expression::NotEqual(k, v)),
        ]
    }

    proptest! {
        /// I3: the matcher agrees with kube's own `SelectorExt::matches` on any labels.
        #[test]
        fn i3_label_matcher_agrees_with_kube(
            exprs in prop::collection::vec(expression(), 0..4),
            labels in prop::collection::btree_map(
                prop::sample::select(vec!["a", "b", "c"]).prop_map(String::from),
                prop::sample::select(vec!["1", "2", "3"]).prop_map(String::from),
                0..3,
            ),
        ) {
            let sel: Selector = exprs.into_iter().collect();
            let ours = LabelMatcher::new(&sel).matches(|k| labels.get(k).map(String::as_str));
            let theirs = sel.matches(&labels);
            prop_assert_eq!(ours, theirs);
        }
    }

    fn key_strategy() -> impl Strategy<Value = String> + Clone {
        prop::sample::select(vec!["a", "app", "x.y_z-1", "example.com/tier", "k8s.io/n"])
            .prop_map(String::from)
    }

    fn value_strategy() -> impl Strategy<Value = String> + Clone {
        prop::sample::select(vec!["", "1", "web", "a.b-c_d"]).prop_map(String::from)
    }

    fn parsable_expression() -> impl Strategy<Value = Expression> {
        let values = prop::collection::btree_set(value_strategy(), 1..3);
        prop_oneof![
            (key_strategy(), values.clone()).prop_map(|(k, v)| Expression::In(k, v)),
            (key_strategy(), values).prop_map(|(k, v)| Expression::NotIn(k, v)),
            key_strategy().prop_map(Expression::Exists),
            key_strategy().prop_map(Expression::DoesNotExist),
            (key_strategy(), value_strategy()).prop_map(|(k, v)| Expression::Equal(k, v)),
            (key_strategy(), value_strategy()).prop_map(|(k, v)| Expression::NotEqual(k, v)),
        ]
    }

    proptest! {
        /// What kube's `Selector` prints parses back to the same selector (sorted by key).
        #[test]
        fn parse_reads_back_what_kube_prints(
            exprs in prop::collection::vec(parsable_expression(), 0..4),
        ) {
            let sel: Selector = exprs.clone().into_iter().collect();
            let mut sorted = exprs;
            sorted.sort_by(|a, b| expression_key(a).cmp(expression_key(b)));
            prop_assert_eq!(parse_label_selector(&sel.to_string()), Ok(sorted.into_iter().collect()));
        }

        /// No text panics the parser.
        #[test]
        fn parse_never_panics(text in "[a-z =!(),<>\\t\\x00in-]{0,24}") {
            let _ = parse_requirements(&text);
        }
    }

    fn expression_key(e: &Expression) -> &str {
        match e {
            Expression::In(k, _)
            | Expression::NotIn(k, _)
            | Expression::Exists(k)
            | Expression::DoesNotExist(k)
            | Expression::Equal(k, _)
            | Expression::NotEqual(k, _) => k,
        }
    }

    #[test]
    fn parse_label_selector_forms() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let cases: Vec<(&str, Vec<Expression>)> = vec![
            ("", vec![]),
            ("  \t\r\n", vec![]),
            (
                "app=web",
                vec![Expression::Equal("app".into(), "web".into())],
            ),
            (
                "app == web",
                vec![Expression::Equal("app".into(), "web".into())],
            ),
            (
                "app!=web",
                vec![Expression::NotEqual("app".into(), "web".into())],
            ),
            ("app=", vec![Expression::Equal("app".into(), String::new())]),
            (
                "app==,b",
                vec![
                    Expression::Equal("app".into(), String::new()),
                    Expression::Exists("b".into()),
                ],
            ),
            (
                "tier in (b, a),env notin (prod)",
                vec![
                    Expression::NotIn("env".into(), set(&["prod"])),
                    Expression::In("tier".into(), set(&["a", "b"])),
                ],
            ),
            (
                "example.com/x, !canary",
                vec![
                    Expression::DoesNotExist("canary".into()),
                    Expression::Exists("example.com/x".into()),
                ],
            ),
            // `in` and `notin` are operators only after a key.
            (
                "in=notin",
                vec![Expression::Equal("in".into(), "notin".into())],
            ),
            (
                "a in (in,notin)",
                vec![Expression::In("a".into(), set(&["in", "notin"]))],
            ),
            // Empty values in a set, as Go reads them.
            ("a in ()", vec![Expression::In("a".into(), set(&[""]))]),
            ("a in (,)", vec![Expression::In("a".into(), set(&[""]))]),
            (
                "a in (x,,y)",
                vec![Expression::In("a".into(), set(&["", "x", "y"]))],
            ),
            (
                "a notin (x,)",
                vec![Expression::NotIn("a".into(), set(&["", "x"]))],
            ),
        ];
        for (text, want) in cases {
            let want: Selector = want.into_iter().collect();
            assert_eq!(parse_label_selector(text), Ok(want), "{text:?}");
        }
    }

    /// Every refusal prints kube-apiserver's text (apimachinery's `labels.Parse`).
    #[test]
    fn refusals_print_kubernetes_messages() {
        let name_part = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        let label_value = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
        let cases: Vec<(&str, String)> = vec![
            ("app in (a", "unable to parse requirement: found '', expected: ',' or ')'".into()),
            ("app in a", "unable to parse requirement: found 'a' expected: '('".into()),
            ("app in (", "unable to parse requirement: found '', expected: ',', ')' or identifier".into()),
            ("app in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier".into()),
            ("app in (a,=", "unable to parse requirement: found '=', expected: ',', or identifier".into()),
            ("app=web,", "found '', expected: identifier after ','".into()),
            (",app", "found ',', expected: !, identifier, or 'end of string'".into()),
            ("app web", "unable to parse requirement: found 'web', expected: in, notin, =, ==, !=, gt, lt".into()),
            ("env IN (a)", "unable to parse requirement: found 'IN', expected: in, notin, =, ==, !=, gt, lt".into()),
            ("!app=web", "found '=', expected: ',' or 'end of string'".into()),
            ("app=web x", "found 'x', expected: ',' or 'end of string'".into()),
            ("=web", "found '=', expected: !, identifier, or 'end of string'".into()),
            ("!", "unable to parse requirement: found '', expected: identifier".into()),
            ("app=(", "unable to parse requirement: found '(', expected: identifier".into()),
            ("test-label=====service1", "unable to parse requirement: found '==', expected: identifier".into()),
            ("-app=web", format!("unable to parse requirement: <nil>: Invalid value: \"-app\": {name_part}")),
            ("app:monolith", format!("unable to parse requirement: <nil>: Invalid value: \"app:monolith\": {name_part}")),
            ("a\"b", format!("unable to parse requirement: <nil>: Invalid value: \"a\\\"b\": {name_part}")),
            ("app=we$b", format!("unable to parse requirement: values[0][app]: Invalid value: \"we$b\": {label_value}")),
            ("app in (ok,-x,y-)", format!(
                "unable to parse requirement: [values[0][app]: Invalid value: \"-x\": {label_value}, values[2][app]: Invalid value: \"y-\": {label_value}]"
            )),
            ("environment>qa", "unable to parse requirement: values[0]: Invalid value: \"qa\": for 'Gt', 'Lt' operators, the value must be an integer".into()),
            ("n<-1", format!("unable to parse requirement: values[0][n]: Invalid value: \"-1\": {label_value}")),
        ];
        for (text, want) in cases {
            let got = parse_requirements(text).map_err(|e| e.to_string());
            assert_eq!(got, Err(want), "{text:?}");
        }
    }

    #[test]
    fn requirements_match_as_kubernetes() {
        let labels = |k: &str| match k {
            "app" => Some("web"),
            "n" => Some("5"),
            "word" => Some("five"),
            _ => None,
        };
        for (text, want) in [
            ("app", true),
            ("!app", false),
            ("missing!=x", true),
            ("missing notin (x)", true),
            ("missing in (x)", false),
            ("app in (db,web)", true),
            ("app notin (web)", false),
            ("n>4", true),
            ("n>5", false),
            ("n<6", true),
            ("missing<6", false),
            ("word>1", false),
            ("app=web,n>4", true),
        ] {
            let reqs = parse_requirements(text).unwrap();
            assert_eq!(reqs.iter().all(|r| r.matches(labels)), want, "{text:?}");
        }
    }

    #[test]
    fn parse_label_selector_refuses_gt_and_lt() {
        assert!(matches!(
            parse_label_selector("replicas>1"),
            Err(SelectorParseError::Unsupported { op: '>', .. })
        ));
        assert!(matches!(
            parse_label_selector("a,replicas<1"),
            Err(SelectorParseError::Unsupported { op: '<', .. })
        ));
    }

    /// A NUL byte reads as Go's lexer reads it: the end where a token would start, skipped
    /// where it ends one.
    #[test]
    fn nul_bytes_as_go() {
        assert_eq!(parse_requirements("\0app=x").map(|r| r.len()), Ok(0));
        assert_eq!(
            parse_requirements("app=\0x").map(|r| r[0].values().to_vec()),
            Ok(vec!["x".to_string()])
        );
    }

    #[test]
    fn i3_empty_selector_selects_all() {
        let m = LabelMatcher::new(&Selector::default());
        assert!(m.selects_all());
        assert!(m.matches(|_| None));
    }
}
