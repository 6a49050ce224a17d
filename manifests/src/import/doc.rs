//! A foreign YAML document read field by field: every field the importer reads or sets aside is
//! marked, so whatever is left at the end is reported instead of silently dropped.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::Value;

use super::report::Unmapped;

/// One step of a field path: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Seg {
    /// Object key.
    Key(String),
    /// Array index.
    Index(usize),
}

/// A field path such as `spec.hosts[0].name` or `spec.registry.auths["a.b"].password`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct FieldPath(Vec<Seg>);

impl FieldPath {
    /// Parses a dotted path of plain keys (`spec.kubernetes.version`).
    pub(crate) fn parse(dotted: &str) -> Self {
        Self(
            dotted
                .split('.')
                .filter(|s| !s.is_empty())
                .map(|s| Seg::Key(s.to_owned()))
                .collect(),
        )
    }

    /// This path plus a key (which may contain dots).
    pub(crate) fn key(&self, key: &str) -> Self {
        let mut segs = self.0.clone();
        segs.push(Seg::Key(key.to_owned()));
        Self(segs)
    }

    /// This path plus a dotted tail of plain keys.
    pub(crate) fn join(&self, dotted: &str) -> Self {
        let mut segs = self.0.clone();
        segs.extend(FieldPath::parse(dotted).0);
        Self(segs)
    }

    /// This path plus an array index.
    pub(crate) fn index(&self, i: usize) -> Self {
        let mut segs = self.0.clone();
        segs.push(Seg::Index(i));
        Self(segs)
    }

    fn starts_with(&self, prefix: &FieldPath) -> bool {
        self.0.starts_with(&prefix.0)
    }

    /// The last key, if the path ends with one.
    fn last_key(&self) -> Option<&str> {
        self.0.iter().rev().find_map(|s| match s {
            Seg::Key(k) => Some(k.as_str()),
            Seg::Index(_) => None,
        })
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Index(n) => write!(f, "[{n}]")?,
                Seg::Key(k) if is_plain_key(k) => {
                    if i > 0 {
                        f.write_char('.')?;
                    }
                    f.write_str(k)?;
                }
                Seg::Key(k) => write!(f, "[{}]", serde_json::Value::String(k.clone()))?,
            }
        }
        Ok(())
    }
}

fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Keys whose values are secrets: never shown in a report.
fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password") || k.contains("private_key_content") || k == "privatekey"
}

/// The document and what has been read of it.
pub(crate) struct Doc {
    root: Value,
    used: BTreeSet<FieldPath>,
    /// Non-empty values handed to the importer.
    read: BTreeSet<FieldPath>,
    /// Fields listed as not mapped.
    rejected: BTreeSet<FieldPath>,
    unmapped: Vec<Unmapped>,
}

impl Doc {
    pub(crate) fn new(root: Value) -> Self {
        Self {
            root,
            used: BTreeSet::new(),
            read: BTreeSet::new(),
            rejected: BTreeSet::new(),
            unmapped: Vec::new(),
        }
    }

    fn lookup(&self, path: &FieldPath) -> Option<&Value> {
        let mut node = &self.root;
        for seg in &path.0 {
            node = match (seg, node) {
                (Seg::Key(k), Value::Object(map)) => map.get(k)?,
                (Seg::Index(i), Value::Array(items)) => items.get(*i)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// The value at `path` when it is present and not empty; marks it read.
    pub(crate) fn get(&mut self, path: &FieldPath) -> Option<Value> {
        let value = self.lookup(path)?.clone();
        self.used.insert(path.clone());
        if is_empty(&value) {
            return None;
        }
        self.read.insert(path.clone());
        Some(value)
    }

    /// Whether `path` holds a non-empty value (does not mark it).
    pub(crate) fn has(&self, path: &FieldPath) -> bool {
        self.lookup(path).is_some_and(|v| !is_empty(v))
    }

    /// A string (numbers and booleans are written out, as YAML readers do for string fields).
    /// Anything else is reported as not mapped.
    pub(crate) fn string(&mut self, path: &FieldPath) -> Option<String> {
        match self.get(path)? {
            Value::String(s) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            other => {
                self.push(path, &other, "expected a single value here; not read");
                None
            }
        }
    }

    /// A boolean (`true`/`false`, also as strings).
    pub(crate) fn boolean(&mut self, path: &FieldPath) -> Option<bool> {
        match self.get(path)? {
            Value::Bool(b) => Some(b),
            Value::String(s) if s == "true" || s == "false" => Some(s == "true"),
            other => {
                self.push(path, &other, "expected true or false; not read");
                None
            }
        }
    }

    /// A non-negative integer (also as a string).
    pub(crate) fn integer(&mut self, path: &FieldPath) -> Option<u64> {
        match self.get(path)? {
            Value::Number(n) if n.as_u64().is_some() => n.as_u64(),
            Value::String(s) if s.trim().parse::<u64>().is_ok() => s.trim().parse().ok(),
            other => {
                self.push(path, &other, "expected a whole number; not read");
                None
            }
        }
    }

    /// A list of strings; other items are reported.
    pub(crate) fn strings(&mut self, path: &FieldPath) -> Vec<String> {
        match self.get(path) {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) if !s.trim().is_empty() => out.push(s.trim().to_owned()),
                        Value::Number(n) => out.push(n.to_string()),
                        Value::Null => {}
                        Value::String(_) => {}
                        other => self.push(&path.index(i), other, "expected a string; not read"),
                    }
                }
                out
            }
            Some(Value::String(s)) => vec![s.trim().to_owned()],
            Some(other) => {
                self.push(path, &other, "expected a list; not read");
                Vec::new()
            }
        }
    }

    /// Keys of the object at `path` (marks the object itself read only through its fields).
    pub(crate) fn keys(&self, path: &FieldPath) -> Vec<String> {
        match self.lookup(path) {
            Some(Value::Object(map)) => map.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Number of items of the array at `path`.
    pub(crate) fn len(&self, path: &FieldPath) -> usize {
        match self.lookup(path) {
            Some(Value::Array(items)) => items.len(),
            _ => 0,
        }
    }

    /// Records that the field at `path` (and everything under it) does not map, and why. An
    /// absent or empty field records nothing: it sets nothing that could be lost.
    pub(crate) fn unmapped(&mut self, path: &FieldPath, reason: impl Into<String>) {
        let Some(value) = self.lookup(path).cloned() else {
            return;
        };
        self.used.insert(path.clone());
        if !is_empty(&value) {
            self.push(path, &value, reason);
        }
    }

    /// Records a field that was read but could not be used, with the value read.
    pub(crate) fn reject(&mut self, path: &FieldPath, value: &Value, reason: impl Into<String>) {
        self.used.insert(path.clone());
        self.push(path, value, reason);
    }

    fn push(&mut self, path: &FieldPath, value: &Value, reason: impl Into<String>) {
        self.rejected.insert(path.clone());
        self.unmapped.push(Unmapped {
            field: path.to_string(),
            value: show(path, value),
            reason: reason.into(),
        });
    }

    /// Everything not mapped: the fields set aside with a reason, then every field never read
    /// (reported at the top-most unread level).
    pub(crate) fn finish(mut self, unknown_reason: &str) -> (Vec<Unmapped>, usize) {
        let mut left = Vec::new();
        self.leftovers(&FieldPath::default(), &self.root, &mut left);
        for (path, value) in left {
            self.push(&path, &value, unknown_reason);
        }
        let mapped = self.read.difference(&self.rejected).count();
        (self.unmapped, mapped)
    }

    fn touched(&self, path: &FieldPath) -> bool {
        self.used.iter().any(|u| u.starts_with(path))
    }

    fn leftovers(&self, path: &FieldPath, value: &Value, out: &mut Vec<(FieldPath, Value)>) {
        if self.used.contains(path) || is_empty(value) {
            return;
        }
        if !self.touched(path) {
            out.push((path.clone(), value.clone()));
            return;
        }
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    self.leftovers(&path.key(k), v, out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    self.leftovers(&path.index(i), v, out);
                }
            }
            _ => out.push((path.clone(), value.clone())),
        }
    }
}

/// Null, empty strings, lists and objects set nothing.
pub(crate) fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Longest value shown in a report.
const SHOW_MAX: usize = 72;

/// A short, single-line, secret-free rendering of a value for the report.
pub(crate) fn show(path: &FieldPath, value: &Value) -> String {
    if path.last_key().is_some_and(is_secret_key) {
        return "<redacted>".to_owned();
    }
    let text = serde_json::to_string(&redact(value)).unwrap_or_default();
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() > SHOW_MAX {
        let cut: String = clean.chars().take(SHOW_MAX - 1).collect();
        format!("{cut}…")
    } else {
        clean
    }
}

fn redact(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if is_secret_key(k) && !is_empty(v) {
                        Value::String("<redacted>".to_owned())
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_display_dotted_keys_in_brackets() {
        let p = FieldPath::parse("spec.registry.auths")
            .key("dockerhub.kubekey.local")
            .key("password");
        assert_eq!(
            p.to_string(),
            "spec.registry.auths[\"dockerhub.kubekey.local\"].password"
        );
        assert_eq!(
            FieldPath::parse("spec.hosts")
                .index(2)
                .key("name")
                .to_string(),
            "spec.hosts[2].name"
        );
    }

    #[test]
    fn unread_fields_are_reported_at_the_topmost_unread_level() {
        let mut doc = Doc::new(json!({
            "spec": {
                "a": 1,
                "b": {"c": 2, "d": {"e": 3}},
                "empty": "",
                "list": [{"x": 1}, {"y": 2}],
            }
        }));
        assert_eq!(doc.integer(&FieldPath::parse("spec.a")), Some(1));
        assert_eq!(doc.integer(&FieldPath::parse("spec.b.c")), Some(2));
        doc.get(&FieldPath::parse("spec.list").index(0).key("x"));
        let (left, mapped) = doc.finish("unknown");
        let left: Vec<String> = left.into_iter().map(|u| u.field).collect();
        assert_eq!(left, ["spec.b.d", "spec.list[1]"]);
        assert_eq!(mapped, 3);
    }

    #[test]
    fn secrets_never_show() {
        let p = FieldPath::parse("spec.hosts").index(0).key("password");
        assert_eq!(show(&p, &json!("hunter2")), "<redacted>");
        let nested = show(
            &FieldPath::parse("spec.registry.auths"),
            &json!({"r": {"username": "u", "password": "hunter2"}}),
        );
        assert!(!nested.contains("hunter2"), "{nested}");
        assert!(nested.contains("<redacted>"), "{nested}");
    }

    #[test]
    fn wrong_types_are_reported_not_fatal() {
        let mut doc = Doc::new(json!({"port": {"x": 1}, "flag": "yes"}));
        assert_eq!(doc.integer(&FieldPath::parse("port")), None);
        assert_eq!(doc.boolean(&FieldPath::parse("flag")), None);
        let (left, mapped) = doc.finish("unknown");
        assert_eq!((left.len(), mapped), (2, 0));
        assert!(left[0].reason.contains("whole number"));
    }
}
