//! The certificate inventory (`kubexm-install certs check`): every certificate KubeXM or kubeadm
//! made, on every node and on the control host, with its expiry.
//!
//! Where it looks, on each node (one script over the run's SSH connection, [`gather_script`]):
//!
//! | place | what |
//! |---|---|
//! | `/etc/kubernetes/pki/*.crt`, `pki/etcd/*.crt` | Kubernetes PKI (CAs, API server, kubelet client, front-proxy, stacked etcd) |
//! | `/etc/kubernetes/*.conf` | kubeconfigs: admin, super-admin, controller-manager, scheduler, kubelet, kube-proxy (`client-certificate-data`, `certificate-authority-data`) |
//! | `/var/lib/kubelet/pki/*.crt`, `kubelet-client-current.pem`, `kubelet-server-current.pem` | the kubelet's client (rotated) and serving certificates |
//! | `/etc/ssl/etcd/ssl/*.pem` (not `*-key.pem`) | KubeXM's etcd (`etcd.type: kubexm`) |
//! | `/etc/kubexm-registry/tls/*.crt`, `/etc/kubexm-harbor/tls/*.crt`, `/etc/kubexm/registry-ca.crt` | the registry's or Harbor's TLS, the registry CA the nodes trust |
//!
//! and on the control host, the CAs and leaves KubeXM keeps under `WORK/pki/<cluster>/`.
//!
//! Private keys never leave a node: the script sends only the `CERTIFICATE` PEM blocks of each
//! file and the `*-data` certificate fields of kubeconfigs. What a node sends is read as hostile
//! ([`parse`]).

pub mod parse;
pub mod renew;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::runner::{Exec, Runner};
pub use parse::{Answer, Found, Source};

/// How long one node may take to list its certificates.
pub const GATHER_TIMEOUT: Duration = Duration::from_secs(60);
/// Files larger than this are not read (no certificate file is).
pub const MAX_FILE: u64 = 256 * 1024;
/// Days under which a certificate is reported as expiring soon.
pub const WARN_DAYS: i64 = 90;

/// The places the inventory looks in on a node, under `root` (`/` on a real node; tests point
/// it at a directory).
#[derive(Debug, Clone)]
pub struct Places {
    /// Prefix of every place (`/` or `/tmp/x/`), ending with `/`.
    pub root: String,
}

impl Default for Places {
    fn default() -> Self {
        Self {
            root: "/".to_string(),
        }
    }
}

/// The globs (relative to the root) of PEM certificate files.
const CERT_GLOBS: &[&str] = &[
    "etc/kubernetes/pki/*.crt",
    "etc/kubernetes/pki/etcd/*.crt",
    "var/lib/kubelet/pki/*.crt",
    "var/lib/kubelet/pki/kubelet-client-current.pem",
    "var/lib/kubelet/pki/kubelet-server-current.pem",
    "etc/ssl/etcd/ssl/*.pem",
    "etc/kubexm-registry/tls/*.crt",
    "etc/kubexm-harbor/tls/*.crt",
    "etc/kubexm/registry-ca.crt",
];
/// The globs of kubeconfigs.
const KUBECONFIG_GLOBS: &[&str] = &["etc/kubernetes/*.conf"];
/// The directories every listed path is under (for [`parse::plausible_path`]).
const ROOTS: &[&str] = &[
    "etc/kubernetes/",
    "var/lib/kubelet/pki/",
    "etc/ssl/etcd/ssl/",
    "etc/kubexm-registry/tls/",
    "etc/kubexm-harbor/tls/",
    "etc/kubexm/",
];

impl Places {
    /// The directories the listed paths may be in.
    pub fn roots(&self) -> Vec<String> {
        ROOTS.iter().map(|r| format!("{}{r}", self.root)).collect()
    }

    /// The script that lists the certificates (see the module documentation). Runs as root;
    /// prints only certificate blocks and kubeconfig certificate fields.
    pub fn gather_script(&self) -> String {
        let root = &self.root;
        let certs: Vec<String> = CERT_GLOBS.iter().map(|g| format!("{root}{g}")).collect();
        let confs: Vec<String> = KUBECONFIG_GLOBS
            .iter()
            .map(|g| format!("{root}{g}"))
            .collect();
        format!(
            "# kubexm certificate inventory: certificate blocks only, never keys\n\
size() {{ stat -L -c %s -- \"$1\" 2>/dev/null || echo 0; }}\n\
for f in {certs}; do\n\
  [ -f \"$f\" ] || continue\n\
  case \"$f\" in *-key.pem|*.key) continue ;; esac\n\
  s=$(size \"$f\")\n\
  if [ \"$s\" -gt {max} ]; then echo \"@@TOOBIG $f $s\"; continue; fi\n\
  echo \"@@FILE $f\"\n\
  sed -n '/^-----BEGIN CERTIFICATE-----$/,/^-----END CERTIFICATE-----$/p' -- \"$f\"\n\
done\n\
for f in {confs}; do\n\
  [ -f \"$f\" ] || continue\n\
  s=$(size \"$f\")\n\
  if [ \"$s\" -gt {max} ]; then echo \"@@TOOBIG $f $s\"; continue; fi\n\
  echo \"@@KUBECONFIG $f\"\n\
  sed -n 's/^ *\\(client-certificate-data\\|certificate-authority-data\\): *\\([A-Za-z0-9+\\/=]*\\) *$/\\1 \\2/p' -- \"$f\"\n\
done\n\
echo @@END",
            certs = certs.join(" "),
            confs = confs.join(" "),
            max = MAX_FILE,
        )
    }
}

/// One certificate of the inventory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Entry {
    /// The node (`control-host` for KubeXM's own copies).
    pub node: String,
    /// The certificate.
    #[serde(flatten)]
    pub cert: Found,
    /// Whole days left until it expires (negative: expired).
    pub days_left: i64,
}

/// The inventory of a cluster.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Inventory {
    /// Unix seconds when it was taken.
    pub taken_at: i64,
    /// Every certificate, soonest expiry first.
    pub certificates: Vec<Entry>,
    /// What could not be read: node, path, reason.
    pub problems: Vec<Problem>,
    /// Nodes that could not be asked, with why.
    pub unreachable: BTreeMap<String, String>,
}

/// A file or node that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The node.
    pub node: String,
    /// The file (empty for the whole node).
    pub path: String,
    /// Why.
    pub reason: String,
}

/// The node name KubeXM's own copies are listed under.
pub const CONTROL_HOST: &str = "control-host";

impl Inventory {
    /// Adds a node's answer (or the reason it gave none).
    pub fn add(&mut self, node: &str, answer: Result<Answer, String>) {
        match answer {
            Ok(a) => {
                for f in a.found {
                    let days_left = days_between(self.taken_at, f.not_after);
                    self.certificates.push(Entry {
                        node: node.to_string(),
                        cert: f,
                        days_left,
                    });
                }
                self.problems
                    .extend(a.problems.into_iter().map(|(path, reason)| Problem {
                        node: node.to_string(),
                        path,
                        reason,
                    }));
            }
            Err(why) => {
                self.unreachable.insert(node.to_string(), why);
            }
        }
    }

    /// Orders the certificates soonest expiry first (then node, path).
    pub fn sort(&mut self) {
        self.certificates.sort_by(|a, b| {
            (a.cert.not_after, &a.node, &a.cert.path).cmp(&(
                b.cert.not_after,
                &b.node,
                &b.cert.path,
            ))
        });
    }

    /// The certificates with fewer than `days` days left.
    pub fn under(&self, days: i64) -> impl Iterator<Item = &Entry> {
        self.certificates.iter().filter(move |e| e.days_left < days)
    }

    /// A table for a terminal.
    pub fn to_text(&self, warn_days: i64) -> String {
        let mut rows: Vec<[String; 6]> = vec![[
            "NODE".into(),
            "PATH".into(),
            "SUBJECT".into(),
            "ISSUER".into(),
            "EXPIRES (UTC)".into(),
            "DAYS LEFT".into(),
        ]];
        for e in &self.certificates {
            let path = match e.cert.source {
                Source::Certificate => e.cert.path.clone(),
                s => format!("{} ({})", e.cert.path, s.as_str()),
            };
            let mark = if e.cert.not_after <= self.taken_at {
                " EXPIRED"
            } else if e.days_left < warn_days {
                " WARNING"
            } else {
                ""
            };
            rows.push([
                e.node.clone(),
                path,
                short(&e.cert.subject, 48),
                short(&e.cert.issuer, 32),
                date(e.cert.not_after),
                format!("{}{mark}", e.days_left),
            ]);
        }
        let mut widths = [0usize; 6];
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r.iter()) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut s = String::new();
        for r in &rows {
            let line: Vec<String> = r
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            s.push_str(line.join("  ").trim_end());
            s.push('\n');
        }
        for p in &self.problems {
            s.push_str(&format!(
                "problem: {} {}: {}\n",
                p.node,
                if p.path.is_empty() { "-" } else { &p.path },
                p.reason
            ));
        }
        for (n, why) in &self.unreachable {
            s.push_str(&format!("unreachable: {n}: {why}\n"));
        }
        s
    }
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 3).collect();
        t.push_str("...");
        t
    }
}

/// Whole days from `now` to `then` (rounded down; negative when `then` is past).
pub fn days_between(now: i64, then: i64) -> i64 {
    (then - now).div_euclid(86_400)
}

/// `YYYY-MM-DD HH:MM` of Unix seconds, UTC.
pub fn date(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix).map_or_else(
        |_| unix.to_string(),
        |t| {
            format!(
                "{:04}-{:02}-{:02} {:02}:{:02}",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute()
            )
        },
    )
}

/// Asks every node for its certificates (each over its runner, at most [`GATHER_TIMEOUT`]).
pub async fn gather(
    runners: &BTreeMap<String, Arc<dyn Runner>>,
    places: &Places,
    taken_at: i64,
) -> Inventory {
    let mut inv = Inventory {
        taken_at,
        ..Inventory::default()
    };
    let script = places.gather_script();
    let roots = places.roots();
    let asks = runners.iter().map(|(name, r)| {
        let exec = Exec::root(script.clone()).with_timeout(GATHER_TIMEOUT);
        let roots = &roots;
        async move {
            let answer = match r.exec(&exec).await {
                Ok(out) if out.success() => {
                    parse::parse_answer(&out.stdout, roots).map_err(|e| e.to_string())
                }
                Ok(out) => Err(format!(
                    "the listing exited with {}",
                    out.code.map_or("a signal".to_string(), |c| c.to_string())
                )),
                Err(e) => Err(e.to_string()),
            };
            (name.clone(), answer)
        }
    });
    for (name, answer) in futures_util::future::join_all(asks).await {
        inv.add(&name, answer);
    }
    inv
}

/// KubeXM's own copies under `pki_dir` (`WORK/pki/<cluster>`): every `*.crt` and `*.pem`
/// (not keys), listed under [`CONTROL_HOST`].
pub fn control_host(inv: &mut Inventory, pki_dir: &Path) {
    let mut files = Vec::new();
    collect(pki_dir, 0, &mut files);
    files.sort();
    let mut answer = Answer::default();
    for f in files {
        let path = f.display().to_string();
        let text = match std::fs::metadata(&f) {
            Ok(m) if m.len() > MAX_FILE => {
                answer
                    .problems
                    .push((path, "larger than the inventory reads".to_string()));
                continue;
            }
            Ok(_) => match std::fs::read_to_string(&f) {
                Ok(t) => t,
                Err(e) => {
                    answer.problems.push((path, e.to_string()));
                    continue;
                }
            },
            Err(e) => {
                answer.problems.push((path, e.to_string()));
                continue;
            }
        };
        let framed = format!("@@FILE {path}\n{text}\n@@END\n");
        match parse::parse_answer(&framed, &[format!("{}/", pki_dir.display())]) {
            Ok(a) => {
                answer.found.extend(a.found);
                answer.problems.extend(a.problems);
            }
            Err(e) => answer.problems.push((path, e.to_string())),
        }
    }
    inv.add(CONTROL_HOST, Ok(answer));
}

fn collect(dir: &Path, depth: usize, out: &mut Vec<std::path::PathBuf>) {
    if depth > 4 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            collect(&p, depth + 1, out);
        } else if t.is_file() {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let key = name.ends_with(".key") || name.ends_with("-key.pem");
            if !key && (name.ends_with(".crt") || name.ends_with(".pem")) {
                out.push(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_round_down_and_go_negative() {
        assert_eq!(days_between(0, 86_399), 0);
        assert_eq!(days_between(0, 86_400), 1);
        assert_eq!(days_between(86_400, 0), -1);
        assert_eq!(days_between(10, 9), -1);
        assert_eq!(date(0), "1970-01-01 00:00");
    }

    #[test]
    fn the_script_never_prints_keys() {
        let s = Places::default().gather_script();
        assert!(s.contains("*-key.pem|*.key) continue"));
        assert!(s.contains("/^-----BEGIN CERTIFICATE-----$/,/^-----END CERTIFICATE-----$/p"));
        assert!(!s.contains("client-key-data"));
        assert!(s.ends_with("echo @@END"));
    }
}
