//! Names that become parts of paths, and the one helper that builds paths on the nodes.
//!
//! Every name from `cluster.yaml`, a catalog or a bundle that ends up in a path — addon,
//! host, cluster, namespace, component, chart — is checked at load time (DNS-1123 where
//! Kubernetes requires it, [`PathComponent`] rules otherwise), and paths on the nodes are built
//! only by [`RemotePath::join`], which accepts nothing but a [`PathComponent`]: no `..`, no
//! absolute part, no separator, no control character.

use std::fmt;

use thiserror::Error;

use crate::display::Untrusted;

/// Longest path component Linux file systems accept (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Why a name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NameError {
    /// Empty.
    #[error("is empty")]
    Empty,
    /// Longer than allowed.
    #[error("is {len} bytes long; at most {max} allowed")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// `.` or `..`.
    #[error("`{}` refers to a directory itself or its parent", Untrusted(.0))]
    DotName(String),
    /// Holds a `/` or `\`.
    #[error("`{}` contains a path separator", Untrusted(.0))]
    Separator(String),
    /// Holds NUL or another control character.
    #[error("`{}` contains a control character", Untrusted(.0))]
    Control(String),
    /// Not a DNS-1123 label (lowercase letters, digits and `-`, at most 63, starting and
    /// ending with a letter or digit).
    #[error("`{}` is not a DNS-1123 label (lowercase letters, digits and `-`, at most 63, starting and ending with a letter or digit)", Untrusted(.0))]
    NotDnsLabel(String),
    /// Not a DNS-1123 subdomain.
    #[error("`{}` is not a DNS-1123 subdomain (dot-separated lowercase labels, at most 253)", Untrusted(.0))]
    NotDnsSubdomain(String),
    /// A base path that is not absolute and normalized.
    #[error("`{}` is not an absolute, normalized path", Untrusted(.0))]
    Base(String),
}

/// One component of a path: not empty, at most [`NAME_MAX`] bytes, not `.` or `..`, without
/// `/`, `\`, NUL or any control character.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathComponent(String);

impl PathComponent {
    /// Checks `name`.
    ///
    /// # Errors
    ///
    /// [`NameError`] saying which rule it breaks.
    pub fn new(name: &str) -> Result<Self, NameError> {
        check_component(name)?;
        Ok(Self(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PathComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for PathComponent {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The [`PathComponent`] rules.
///
/// # Errors
///
/// [`NameError`] saying which rule `name` breaks.
pub fn check_component(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > NAME_MAX {
        return Err(NameError::TooLong {
            len: name.len(),
            max: NAME_MAX,
        });
    }
    if name == "." || name == ".." {
        return Err(NameError::DotName(name.to_owned()));
    }
    if name.contains(['/', '\\']) {
        return Err(NameError::Separator(name.to_owned()));
    }
    if name.chars().any(char::is_control) {
        return Err(NameError::Control(name.to_owned()));
    }
    Ok(())
}

/// The longest network interface name Linux accepts (`IFNAMSIZ` - 1).
pub const INTERFACE_NAME_MAX: usize = 15;

/// A network interface name KubeXM accepts (`spec.loadBalancer.interface`, and what nodes
/// report): 1 to 15 bytes, not `.` or `..`, of ASCII letters, digits, `.`, `_` and `-`. Linux
/// accepts more (anything but `/`, `:` and whitespace), but every name an installer meets
/// (`eth0`, `enp0s3`, `bond0.100`, `br-lan`, `vxlan.calico`) fits, and such a name is safe in a
/// shell command and a message.
pub fn is_interface_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= INTERFACE_NAME_MAX
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// RFC 1123 label: what Kubernetes requires of namespaces and most object names.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain whose last label is not all digits (so `10.0.0.300` is a bad IP, not a
/// name): what Kubernetes requires of node names.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(is_dns_label)
        && !s
            .rsplit('.')
            .next()
            .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
}

/// `name` as a [`PathComponent`] if it is a DNS-1123 label.
///
/// # Errors
///
/// [`NameError::NotDnsLabel`].
pub fn dns_label(name: &str) -> Result<PathComponent, NameError> {
    if is_dns_label(name) {
        PathComponent::new(name)
    } else {
        Err(NameError::NotDnsLabel(name.to_owned()))
    }
}

/// `name` as a [`PathComponent`] if it is a DNS-1123 subdomain.
///
/// # Errors
///
/// [`NameError::NotDnsSubdomain`].
pub fn dns_subdomain(name: &str) -> Result<PathComponent, NameError> {
    if is_dns_subdomain(name) {
        PathComponent::new(name)
    } else {
        Err(NameError::NotDnsSubdomain(name.to_owned()))
    }
}

/// An absolute path on a node, built from a fixed base and [`PathComponent`]s only.
///
/// ```
/// use kubexm_manifests::name::{PathComponent, RemotePath};
/// let addon = PathComponent::new("metrics-server")?;
/// let dir = RemotePath::base("/etc/kubexm/addons")?.join(&addon);
/// assert_eq!(dir.as_str(), "/etc/kubexm/addons/metrics-server");
/// assert!(PathComponent::new("../../../../etc/cron.d").is_err());
/// # Ok::<(), kubexm_manifests::name::NameError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RemotePath(String);

impl RemotePath {
    /// A base directory: absolute, no empty, `.` or `..` component, no trailing slash (except
    /// `/` itself), no control character or backslash.
    ///
    /// # Errors
    ///
    /// [`NameError::Base`].
    pub fn base(path: &str) -> Result<Self, NameError> {
        let bad = || NameError::Base(path.to_owned());
        let rest = path.strip_prefix('/').ok_or_else(bad)?;
        if rest.is_empty() {
            return Ok(Self(path.to_owned()));
        }
        for part in rest.split('/') {
            check_component(part).map_err(|_| bad())?;
        }
        Ok(Self(path.to_owned()))
    }

    /// `self/name`.
    #[must_use]
    pub fn join(&self, name: &PathComponent) -> Self {
        if self.0 == "/" {
            Self(format!("/{name}"))
        } else {
            Self(format!("{}/{name}", self.0))
        }
    }

    /// `self/name` for a name checked here.
    ///
    /// # Errors
    ///
    /// [`NameError`] when `name` is not a [`PathComponent`].
    pub fn join_str(&self, name: &str) -> Result<Self, NameError> {
        Ok(self.join(&PathComponent::new(name)?))
    }

    /// The path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RemotePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RemotePath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<RemotePath> for String {
    fn from(p: RemotePath) -> Self {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components() {
        for ok in ["a", "metrics-server", "a..b", ".hidden", "v1.33.1", "x y"] {
            assert!(PathComponent::new(ok).is_ok(), "{ok}");
        }
        type Is = fn(&NameError) -> bool;
        let cases: &[(&str, Is)] = &[
            ("", |e| matches!(e, NameError::Empty)),
            (".", |e| matches!(e, NameError::DotName(_))),
            ("..", |e| matches!(e, NameError::DotName(_))),
            ("../../../../etc/cron.d", |e| {
                matches!(e, NameError::Separator(_))
            }),
            ("/etc", |e| matches!(e, NameError::Separator(_))),
            ("a\\b", |e| matches!(e, NameError::Separator(_))),
            ("a\0b", |e| matches!(e, NameError::Control(_))),
            ("a\nb", |e| matches!(e, NameError::Control(_))),
        ];
        for (bad, is) in cases {
            let err = PathComponent::new(bad).expect_err(bad);
            assert!(is(&err), "{bad:?}: {err:?}");
        }
        assert!(matches!(
            PathComponent::new(&"a".repeat(256)),
            Err(NameError::TooLong { len: 256, .. })
        ));
    }

    #[test]
    fn dns_names() {
        assert!(dns_label("kube-system").is_ok());
        assert!(dns_label("..").is_err());
        assert!(dns_label("Upper").is_err());
        assert!(dns_subdomain("node1.example").is_ok());
        assert!(dns_subdomain("a..b").is_err());
        assert!(dns_subdomain("10.0.0.1").is_err());
    }

    #[test]
    fn remote_paths() {
        let base = RemotePath::base("/etc/kubexm").expect("base");
        let p = base.join_str("addons").expect("join");
        assert_eq!(p.as_str(), "/etc/kubexm/addons");
        assert_eq!(
            RemotePath::base("/")
                .expect("root")
                .join_str("x")
                .expect("x")
                .as_str(),
            "/x"
        );
        for bad in [
            "",
            "etc",
            "/etc/",
            "/etc//x",
            "/etc/../x",
            "/./etc",
            "/a\nb",
        ] {
            assert!(RemotePath::base(bad).is_err(), "{bad:?}");
        }
        for bad in ["..", "a/b", "/abs", ""] {
            assert!(base.join_str(bad).is_err(), "{bad:?}");
        }
    }
}
