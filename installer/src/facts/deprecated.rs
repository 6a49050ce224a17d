//! Deprecated APIs in use, from the API server's `apiserver_requested_deprecated_apis` metric
//! (v1.19+): every deprecated group/version/resource a client asked for since the API server
//! started, with the release that removes it. An upgrade to that release or later would break
//! those clients, so `upgrade` refuses it ([`blocking`]); later removals are warnings.
//!
//! The metric text comes from the cluster: each line is parsed into checked values (label
//! values limited to the characters API names use), anything else is dropped, and the input,
//! the line length and the number of entries are bounded.

use std::collections::BTreeSet;
use std::fmt;

/// The metric's name.
pub const METRIC: &str = "apiserver_requested_deprecated_apis";
/// At most this many bytes of metrics text are read.
pub const MAX_TEXT: usize = 8 << 20;
/// At most this many distinct deprecated APIs are kept.
pub const MAX_ENTRIES: usize = 512;
/// A longer line is not a line of this metric.
const MAX_LINE: usize = 2048;
/// A longer label value is refused.
const MAX_VALUE: usize = 128;

/// A `major.minor` release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Release {
    /// `1.22` (digits only, each part at most 4 digits).
    pub fn parse(s: &str) -> Option<Self> {
        let (a, b) = s.split_once('.')?;
        let num = |p: &str| {
            (!p.is_empty() && p.len() <= 4 && p.bytes().all(|c| c.is_ascii_digit()))
                .then(|| p.parse().ok())
                .flatten()
        };
        Some(Self {
            major: num(a)?,
            minor: num(b)?,
        })
    }
}

/// One deprecated API a client used.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeprecatedApi {
    /// The API group (empty for the core group).
    pub group: String,
    /// Its version (`v1beta1`).
    pub version: String,
    /// The resource (`ingresses`).
    pub resource: String,
    /// The subresource, if any.
    pub subresource: String,
    /// The release that removes it (`None`: deprecated, no removal planned).
    pub removed: Option<Release>,
}

impl fmt::Display for DeprecatedApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.version)?;
        } else {
            write!(f, "{}/{}", self.group, self.version)?;
        }
        write!(f, " {}", self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        match self.removed {
            Some(r) => write!(f, " (removed in {r})"),
            None => write!(f, " (deprecated)"),
        }
    }
}

/// A label value as API names spell them, else `None`.
fn plain(v: &str) -> Option<String> {
    (v.len() <= MAX_VALUE
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')))
    .then(|| v.to_string())
}

/// The labels of `{a="x",b="y"}` (the braces' content); `None` when malformed.
fn labels(s: &str) -> Option<Vec<(&str, &str)>> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"")?;
        let end = after.find('"')?;
        let value = &after[..end];
        if value.contains('\\') {
            return None;
        }
        out.push((name.trim(), value));
        rest = after[end + 1..].trim_start_matches(',');
        if out.len() > 16 {
            return None;
        }
    }
    Some(out)
}

/// One line of the metric, or `None` (another metric, a comment, a zero count, a value that
/// is not plain).
fn line(l: &str) -> Option<DeprecatedApi> {
    if l.len() > MAX_LINE {
        return None;
    }
    let rest = l.strip_prefix(METRIC)?.strip_prefix('{')?;
    let (inner, value) = rest.split_once('}')?;
    let count: f64 = value.split_whitespace().next()?.parse().ok()?;
    if count.is_nan() || count <= 0.0 {
        return None;
    }
    let mut api = DeprecatedApi {
        group: String::new(),
        version: String::new(),
        resource: String::new(),
        subresource: String::new(),
        removed: None,
    };
    for (k, v) in labels(inner)? {
        match k {
            "group" => api.group = plain(v)?,
            "version" => api.version = plain(v)?,
            "resource" => api.resource = plain(v)?,
            "subresource" => api.subresource = plain(v)?,
            "removed_release" if v.is_empty() => api.removed = None,
            "removed_release" => api.removed = Some(Release::parse(v)?),
            _ => {}
        }
    }
    (!api.version.is_empty() && !api.resource.is_empty()).then_some(api)
}

/// Every deprecated API `text` (the API server's `/metrics`) reports as requested, each once,
/// sorted; at most [`MAX_ENTRIES`], from the first [`MAX_TEXT`] bytes.
pub fn parse(text: &str) -> Vec<DeprecatedApi> {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut seen = BTreeSet::new();
    for l in text[..end].lines() {
        if let Some(api) = line(l) {
            seen.insert(api);
            if seen.len() >= MAX_ENTRIES {
                break;
            }
        }
    }
    seen.into_iter().collect()
}

/// The APIs removed by `target` or earlier: an upgrade to `target` breaks their clients.
pub fn blocking(apis: &[DeprecatedApi], target: Release) -> Vec<&DeprecatedApi> {
    apis.iter()
        .filter(|a| a.removed.is_some_and(|r| r <= target))
        .collect()
}

/// The shell that prints the metric's lines from the API server (`kubectl` with its
/// kubeconfig), at most [`MAX_TEXT`] bytes; it fails when the API server does not answer (no
/// line is not the same as no answer).
pub fn script(kubectl: &str) -> String {
    format!(
        "m=$({kubectl} get --raw=/metrics) || exit 3
printf '%s\n' \"$m\" | grep '^{METRIC}{{' | head -c {MAX_TEXT}
exit 0"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# HELP apiserver_requested_deprecated_apis [STABLE] Gauge of deprecated APIs that have been requested, broken out by API group, version, resource, subresource, and removed_release.
# TYPE apiserver_requested_deprecated_apis gauge
apiserver_requested_deprecated_apis{group="extensions",removed_release="1.22",resource="ingresses",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="policy",removed_release="1.25",resource="podsecuritypolicies",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="",removed_release="",resource="componentstatuses",subresource="",version="v1"} 1
apiserver_requested_deprecated_apis{group="extensions",removed_release="1.22",resource="ingresses",subresource="",version="v1beta1"} 1
apiserver_request_total{code="200"} 5
"#;

    #[test]
    fn the_metric_gives_each_api_once_with_its_removal() {
        let apis = parse(SAMPLE);
        let text: Vec<String> = apis.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "v1 componentstatuses (deprecated)",
                "extensions/v1beta1 ingresses (removed in 1.22)",
                "policy/v1beta1 podsecuritypolicies (removed in 1.25)",
            ]
        );
        let r = |s| Release::parse(s).expect("release");
        assert!(blocking(&apis, r("1.21")).is_empty());
        assert_eq!(blocking(&apis, r("1.22")).len(), 1);
        assert_eq!(blocking(&apis, r("1.25")).len(), 2);
        assert_eq!(blocking(&apis, r("2.0")).len(), 2);
    }

    #[test]
    fn hostile_lines_are_dropped() {
        for bad in [
            "apiserver_requested_deprecated_apis{group=\"x$(reboot)\",removed_release=\"1.22\",resource=\"r\",version=\"v1\"} 1",
            "apiserver_requested_deprecated_apis{group=\"x\\\"y\",removed_release=\"1.22\",resource=\"r\",version=\"v1\"} 1",
            "apiserver_requested_deprecated_apis{group=\"x\",removed_release=\"1.22.3\",resource=\"r\",version=\"v1\"} 1",
            "apiserver_requested_deprecated_apis{group=\"x\",removed_release=\"99999.1\",resource=\"r\",version=\"v1\"} 1",
            "apiserver_requested_deprecated_apis{group=\"x\",resource=\"r\"} 1",
            "apiserver_requested_deprecated_apis{group=\"x\",removed_release=\"1.22\",resource=\"r\",version=\"v1\"} 0",
            "apiserver_requested_deprecated_apis{group=\"x\",removed_release=\"1.22\",resource=\"r\",version=\"v1\"} NaN",
            "apiserver_requested_deprecated_apis{group=\"x\",removed_release=\"1.22\",resource=\"r\",version=\"v1\" 1",
        ] {
            assert!(parse(bad).is_empty(), "{bad}");
        }
        let long = format!(
            "apiserver_requested_deprecated_apis{{group=\"{}\",removed_release=\"1.22\",resource=\"r\",version=\"v1\"}} 1",
            "a".repeat(MAX_VALUE + 1)
        );
        assert!(parse(&long).is_empty());
        let many: String = (0..MAX_ENTRIES + 10)
            .map(|i| format!("apiserver_requested_deprecated_apis{{group=\"g{i}\",removed_release=\"1.22\",resource=\"r\",version=\"v1\"}} 1\n"))
            .collect();
        assert_eq!(parse(&many).len(), MAX_ENTRIES);
        // Cut anywhere: never a panic.
        for i in 0..SAMPLE.len() {
            let _ = parse(&SAMPLE[..i]);
        }
    }
}
