//! What one node says about itself, for `kubexm-install status`: the versions of the binaries
//! KubeXM installs, the state of the units it enables, and the expiry of the certificates it
//! (or kubeadm) wrote. One script over the node's connection ([`node_script`]), read back by
//! [`parse_node`]; the certificates are the inventory of `certs check` ([`crate::certs`]: only
//! certificate blocks leave the node, never a key).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::runner::{Exec, Runner};

/// Binaries whose version is asked (`NAME ARGS…`), in the order shown.
const VERSIONS: [(&str, &str); 7] = [
    ("kubelet", "kubelet --version"),
    ("kubeadm", "kubeadm version -o short"),
    ("etcd", "etcd --version"),
    ("containerd", "containerd --version"),
    ("docker", "dockerd --version"),
    ("crio", "crio --version"),
    ("isulad", "isulad --version"),
];

/// Container runtimes among [`VERSIONS`].
const RUNTIMES: [&str; 4] = ["containerd", "docker", "crio", "isulad"];

/// Units whose state is reported when they are enabled on the node.
const UNITS: [&str; 16] = [
    "kubelet",
    "containerd",
    "docker",
    "cri-docker",
    "crio",
    "isulad",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "haproxy",
    "keepalived",
    "nginx",
    "registry",
    "chrony",
];

/// A unit KubeXM may enable, as systemd reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitState {
    /// The unit (without `.service`).
    pub unit: String,
    /// `systemctl is-active`: `active`, `failed`, `inactive`, `activating`…
    pub active: String,
}

impl UnitState {
    /// Enabled but neither running nor starting.
    pub fn down(&self) -> bool {
        !matches!(self.active.as_str(), "active" | "activating" | "reloading")
    }
}

/// One certificate found on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertExpiry {
    /// The file.
    pub path: String,
    /// Subject common name (empty when none).
    pub subject: String,
    /// End of validity (RFC 3339, UTC).
    pub not_after: String,
    /// Seconds since the epoch (sorting; negative before 1970).
    #[serde(skip)]
    pub not_after_unix: i64,
    /// Whole days left (negative once expired).
    pub days_left: i64,
}

/// What one node said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeFacts {
    /// `binary → version` for each binary found (e.g. `kubelet → v1.20.2`).
    pub versions: std::collections::BTreeMap<String, String>,
    /// The container runtimes found (`containerd`, `docker`, `crio`, `isulad`).
    pub runtimes: Vec<String>,
    /// Units KubeXM may enable that are enabled here.
    pub units: Vec<UnitState>,
    /// Certificates, soonest expiry first.
    pub certificates: Vec<CertExpiry>,
    /// What could not be read.
    pub notes: Vec<String>,
}

/// The script that prints a node's facts (`key=value` lines, then PEM lines after `cert=PATH`).
pub fn node_script() -> String {
    let mut s =
        String::from("v() { command -v \"$1\" >/dev/null 2>&1 && \"$@\" 2>&1 | head -n 1; }\n");
    for (name, cmd) in VERSIONS {
        s.push_str(&format!("echo \"version={name} $(v {cmd})\"\n"));
    }
    s.push_str(&format!(
        "for u in {}; do if systemctl is-enabled --quiet \"$u\" 2>/dev/null; then echo \"unit=$u $(systemctl is-active \"$u\" 2>/dev/null)\"; fi; done\n",
        UNITS.join(" ")
    ));
    s.push_str("echo end=\n");
    s.push_str(&crate::certs::Places::default().gather_script());
    s
}

/// The first word of `text` that looks like a version (`v1.20.2`, `3.4.23`, `1.6.20`).
fn version_in(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == ',')
        .map(|w| w.trim_start_matches("Version:"))
        .find(|w| {
            let w = w.strip_prefix('v').unwrap_or(w);
            let mut parts = w.split('.');
            parts
                .next()
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                && parts
                    .next()
                    .is_some_and(|p| p.bytes().next().is_some_and(|b| b.is_ascii_digit()))
        })
        .map(|w| {
            w.chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '~'))
                .take(64)
                .collect()
        })
}

/// A printable unit state: systemd's words only.
fn state_word(s: &str) -> String {
    let w: String = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(32)
        .collect();
    if w.is_empty() {
        "unknown".into()
    } else {
        w
    }
}

/// Reads what [`node_script`] printed; `now` is the time days are counted from.
pub fn parse_node(out: &str, now: SystemTime) -> NodeFacts {
    let mut f = NodeFacts::default();
    let (facts, certs) = out.split_once("\nend=\n").unwrap_or((out, ""));
    for line in facts.lines() {
        if let Some(rest) = line.strip_prefix("version=") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            if let (Some((known, _)), Some(v)) =
                (VERSIONS.iter().find(|(n, _)| *n == name), version_in(text))
            {
                f.versions.insert((*known).to_string(), v);
                if RUNTIMES.contains(known) {
                    f.runtimes.push((*known).to_string());
                }
            }
        } else if let Some(rest) = line.strip_prefix("unit=") {
            let (unit, state) = rest.split_once(' ').unwrap_or((rest, ""));
            if let Some(known) = UNITS.iter().find(|u| **u == unit) {
                f.units.push(UnitState {
                    unit: (*known).to_string(),
                    active: state_word(state),
                });
            }
        }
    }
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    match crate::certs::parse::parse_answer(certs, &crate::certs::Places::default().roots()) {
        Ok(answer) => {
            f.certificates = answer
                .found
                .into_iter()
                .map(|c| CertExpiry {
                    not_after: crate::pipeline::journal::rfc3339(
                        UNIX_EPOCH
                            + std::time::Duration::from_secs(
                                u64::try_from(c.not_after).unwrap_or(0),
                            ),
                    ),
                    not_after_unix: c.not_after,
                    days_left: crate::certs::days_between(now, c.not_after),
                    path: c.path,
                    subject: c.common_name,
                })
                .collect();
            f.notes.extend(
                answer
                    .problems
                    .into_iter()
                    .map(|(p, why)| format!("{p}: {why}")),
            );
        }
        Err(e) => f.notes.push(format!("certificates: {e}")),
    }
    f.certificates.sort_by_key(|c| c.not_after_unix);
    f
}

/// Runs [`node_script`] on `runner` and reads it; an error is why the node could not answer.
pub async fn gather_node(runner: &dyn Runner) -> Result<NodeFacts, String> {
    let out = runner
        .exec(&Exec::root(node_script()).with_timeout(super::PROBE_TIMEOUT))
        .await
        .map_err(|e| e.to_string())?;
    if !out.stdout.contains("\nend=\n") {
        return Err(format!(
            "the facts script did not finish (exit {:?})",
            out.code
        ));
    }
    Ok(parse_node(&out.stdout, SystemTime::now()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pem(cn: &str, days: i64) -> String {
        let mut p = rcgen::CertificateParams::new(vec![cn.to_string()]).expect("params");
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let now = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).expect("time");
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(days);
        let key = rcgen::KeyPair::generate().expect("key");
        p.self_signed(&key).expect("sign").pem()
    }

    #[test]
    fn reads_versions_units_and_the_soonest_certificate_first() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let out = format!(
            "version=kubelet Kubernetes v1.20.2\nversion=kubeadm \nversion=etcd etcd Version: 3.4.23\nversion=containerd containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1\nunit=kubelet active\nunit=etcd failed\nunit=evil active\nend=\n@@FILE /etc/kubernetes/pki/apiserver.crt\n{}@@FILE /etc/ssl/etcd/ssl/ca.pem\n{}@@END\n",
            pem("kube-apiserver", 365),
            pem("etcd-ca", 30)
        );
        let f = parse_node(&out, now);
        assert_eq!(
            f.versions.get("kubelet").map(String::as_str),
            Some("v1.20.2")
        );
        assert_eq!(f.versions.get("etcd").map(String::as_str), Some("3.4.23"));
        assert_eq!(
            f.versions.get("containerd").map(String::as_str),
            Some("1.6.20~ds1")
        );
        assert!(
            !f.versions.contains_key("kubeadm"),
            "no version, not listed"
        );
        assert_eq!(f.runtimes, vec!["containerd".to_string()]);
        assert_eq!(f.units.len(), 2, "unknown units are dropped: {:?}", f.units);
        assert!(f.units.iter().any(|u| u.unit == "etcd" && u.down()));
        assert!(f.units.iter().any(|u| u.unit == "kubelet" && !u.down()));
        let certs: Vec<(&str, i64)> = f
            .certificates
            .iter()
            .map(|c| (c.subject.as_str(), c.days_left))
            .collect();
        assert_eq!(certs, vec![("etcd-ca", 30), ("kube-apiserver", 365)]);
        assert!(f.notes.is_empty(), "{:?}", f.notes);
    }

    #[test]
    fn a_damaged_certificate_is_a_note_not_a_failure() {
        let out = "unit=kubelet active\nend=\n@@FILE /etc/kubernetes/pki/ca.crt\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n@@END\n";
        let f = parse_node(out, UNIX_EPOCH);
        assert!(f.certificates.is_empty());
        assert_eq!(f.notes.len(), 1);
        assert!(
            f.notes[0].starts_with("/etc/kubernetes/pki/ca.crt: "),
            "{}",
            f.notes[0]
        );
    }

    #[test]
    fn the_script_never_sends_a_key() {
        let s = node_script();
        assert!(
            s.contains("sed -n '/^-----BEGIN CERTIFICATE-----$/,/^-----END CERTIFICATE-----$/p'")
        );
        assert!(s.contains("*-key.pem|*.key) continue"));
        assert!(!s.contains("PRIVATE KEY"));
    }
}
