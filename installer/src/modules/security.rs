//! Security enhancement (`kubernetes.securityEnhancement: true`, or `kubexm-install install
//! --security-enhancement`), on both Kubernetes paths; nothing here is planned when it is off.
//!
//! * **Audit logging**: KubeXM's policy ([`AUDIT_POLICY`], `templates/security/audit-policy.yaml.tera`,
//!   `audit.k8s.io/v1`: `Metadata` for every request, so no request or response body is ever
//!   logged — in particular none of Secrets, ConfigMaps and TokenReviews; health probes and
//!   leases not logged) and the API server flags of [`audit_flags`]: JSON events in
//!   [`AUDIT_LOG`], rotated at 100 MB, 10 files kept for 30 days. On the kubexm path the
//!   policy is one of kube-apiserver's files (a change restarts it); on the kubeadm path it is
//!   written on every master before `kubeadm init`/`join`, and the static pod mounts the policy
//!   and log directories (`apiServer.extraVolumes`).
//! * **The kubelet's anonymous access off**: `authentication.anonymous.enabled: false`, webhook
//!   authentication and authorization, no read-only port. The kubexm path always sets these; the
//!   kubeadm path writes them explicitly (kubeadm's defaults are the same but for the read-only
//!   port).
//! * **File modes and ownership** ([`HardenFiles`], after the Kubernetes modules): private keys
//!   0600, certificates 0644, kubeconfigs and component configurations 0600, static pod
//!   manifests 0600, the etcd data and certificate directories 0700 — everything owned by
//!   `root:root`, as kubeadm and the CIS benchmark expect (KubeXM's etcd runs as root, so its data
//!   directory is root's). It checks before acting, records the modes it found once, and its
//!   undo puts them back.
//!
//! **Kept on, on purpose**: the API server's `--anonymous-auth`. The kubelet probes the static
//! pod's `/livez` and `/readyz` anonymously, and KubeXM's own readiness checks do too; with it off
//! the kubelet restarts the API server forever. What anonymous requests may do is left to the
//! built-in RBAC: `system:public-info-viewer` lets `system:unauthenticated` read `/healthz`,
//! `/livez`, `/readyz` and `/version` only (discovery and everything else need a user since
//! v1.14), and the audit log records who asked.

use crate::script;
use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, KubernetesType};
use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::modules::etcd::EtcdLayout;
use crate::pipeline::ops::{CreateDir, Op, RenderTemplate, RunCommand};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::shell::{self, Script};

/// The audit policy's directory on the masters.
pub const AUDIT_POLICY_DIR: &str = "/etc/kubernetes/audit";
/// The audit policy.
pub const AUDIT_POLICY: &str = "/etc/kubernetes/audit/policy.yaml";
/// The audit log's directory on the masters.
pub const AUDIT_LOG_DIR: &str = "/var/log/kubernetes/audit";
/// The audit log (JSON lines).
pub const AUDIT_LOG: &str = "/var/log/kubernetes/audit/audit.log";
/// Days an audit log file is kept.
pub const AUDIT_LOG_MAX_AGE_DAYS: u32 = 30;
/// Rotated audit log files kept.
pub const AUDIT_LOG_MAX_BACKUPS: u32 = 10;
/// Size in MB at which the audit log is rotated.
pub const AUDIT_LOG_MAX_SIZE_MB: u32 = 100;
/// Where [`HardenFiles`] records the modes it found, for its undo.
pub const MODES_BEFORE: &str = "/var/lib/kubexm/security/modes-before-hardening";

/// Whether the cluster asks for the security enhancement.
pub fn enabled(ctx: &InstallContext) -> bool {
    ctx.cluster.file.spec.kubernetes.security_enhancement
}

/// The API server's audit flags (names without `--`), sorted by name.
pub fn audit_flags() -> Vec<(&'static str, String)> {
    vec![
        ("audit-log-maxage", AUDIT_LOG_MAX_AGE_DAYS.to_string()),
        ("audit-log-maxbackup", AUDIT_LOG_MAX_BACKUPS.to_string()),
        ("audit-log-maxsize", AUDIT_LOG_MAX_SIZE_MB.to_string()),
        ("audit-log-path", AUDIT_LOG.to_string()),
        ("audit-policy-file", AUDIT_POLICY.to_string()),
    ]
}

/// The audit policy file (root only).
pub fn audit_policy(ctx: &InstallContext) -> Result<RenderTemplate, StepError> {
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert("log_path", AUDIT_LOG);
    RenderTemplate::new("security/audit-policy.yaml.tera", &c, AUDIT_POLICY, 0o600)
}

/// The policy and log directories (root only).
pub fn audit_dirs() -> Vec<Op> {
    [AUDIT_POLICY_DIR, AUDIT_LOG_DIR]
        .into_iter()
        .map(|path| {
            Op::Mkdir(CreateDir {
                path: path.to_string(),
                mode: 0o700,
            })
        })
        .collect()
}

/// kubeadm path: the audit policy and log directory on a master before `kubeadm init`/`join`
/// (the static pod mounts both); nothing on other nodes.
pub struct AuditPolicy {
    /// The install context.
    pub ctx: Arc<InstallContext>,
}

impl Step for AuditPolicy {
    fn name(&self) -> &str {
        "audit-policy"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        if !node.has_role(Role::Master) {
            return Ok(Vec::new());
        }
        let mut ops = audit_dirs();
        ops.push(Op::Template(audit_policy(&self.ctx)?));
        Ok(ops)
    }
}

/// One hardening rule: files (or directories) under a path, their mode, owned by root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// A directory searched, or a single file or directory (`depth` 0).
    pub path: String,
    /// How deep below `path` (`find -maxdepth`).
    pub depth: u8,
    /// Directories rather than files.
    pub dirs: bool,
    /// A name pattern (`*.key`), or every entry.
    pub name: Option<&'static str>,
    /// The mode.
    pub mode: u32,
}

impl Rule {
    fn file(path: impl Into<String>, depth: u8, name: &'static str, mode: u32) -> Self {
        Self {
            path: path.into(),
            depth,
            dirs: false,
            name: Some(name),
            mode,
        }
    }

    fn dir(path: impl Into<String>, mode: u32) -> Self {
        Self {
            path: path.into(),
            depth: 0,
            dirs: true,
            name: None,
            mode,
        }
    }

    /// `find` over the rule's entries with `tests` appended.
    fn find(&self, tests: Script) -> Script {
        let name = self
            .name
            .map(|n| script!(" -name {n}", n = n))
            .unwrap_or_default();
        script!(
            "find {path} -maxdepth {depth} -type {kind}{name} {tests}",
            path = &self.path,
            depth = self.depth,
            kind = if self.dirs { "d" } else { "f" },
            name = name,
            tests = tests,
        )
    }

    /// Entries not as the rule wants them.
    fn offenders(&self) -> Script {
        self.find(script!(
            "\\( ! -perm {m} -o ! -user root -o ! -group root \\) -print",
            m = format!("{:o}", self.mode)
        ))
    }

    /// Sets modes and owners where they differ (nothing when the path is absent).
    fn fix(&self) -> Script {
        let m = format!("{:o}", self.mode);
        script!(
            "if [ -e {p} ]; then {chmod}; {chown}; fi",
            p = &self.path,
            chmod = self.find(script!("! -perm {m} -exec chmod {m} {{}} +", m = m)),
            chown = self.find(Script::new(
                "\\( ! -user root -o ! -group root \\) -exec chown root:root {} +"
            )),
        )
    }
}

/// The hardening rules for `node`.
pub fn rules(ctx: &InstallContext, node: &Node) -> Vec<Rule> {
    let kube = "/etc/kubernetes";
    let spec = &ctx.cluster.file.spec;
    let mut rules = Vec::new();
    let master = node.has_role(Role::Master);
    if master || node.has_role(Role::Worker) {
        rules.extend([
            Rule::file(format!("{kube}/pki"), 2, "*.key", 0o600),
            Rule::file(format!("{kube}/pki"), 2, "*.crt", 0o644),
            Rule::file(format!("{kube}/pki"), 1, "sa.pub", 0o644),
            // kubeconfigs and component configurations (kubeadm's and KubeXM's).
            Rule::file(kube, 1, "*.conf", 0o600),
            Rule::file(kube, 1, "*.yaml", 0o600),
            Rule::file("/var/lib/kubelet/config.yaml", 0, "config.yaml", 0o600),
            Rule::file("/var/lib/kubelet/pki", 1, "*.key", 0o600),
        ]);
    }
    if master {
        rules.push(Rule::file(format!("{kube}/manifests"), 1, "*.yaml", 0o600));
        rules.push(Rule::dir(AUDIT_POLICY_DIR, 0o700));
        rules.push(Rule::dir(AUDIT_LOG_DIR, 0o700));
        if spec.etcd.kind == EtcdType::Kubeadm && spec.kubernetes.kind == KubernetesType::Kubeadm {
            rules.push(Rule::dir(crate::modules::k8s::STACKED_ETCD_DATA, 0o700));
        }
    }
    if node.has_role(Role::Etcd) && spec.etcd.kind == EtcdType::Kubexm {
        let etcd = EtcdLayout::from_context(ctx);
        rules.extend([
            Rule::dir(etcd.data_dir.clone(), 0o700),
            Rule::dir(etcd.cert_dir.clone(), 0o700),
            Rule::file(etcd.cert_dir.clone(), 1, "*-key.pem", 0o600),
            // Certificates: `*.pem` but not the `*-key.pem` keys.
            Rule::file(etcd.cert_dir, 1, "*[!y].pem", 0o644),
        ]);
    }
    rules
}

/// The check of [`HardenFiles`]: exits 0 when no entry of `rules` differs.
pub fn check_script(rules: &[Rule]) -> Script {
    let finds = Script::join(
        rules.iter().map(|r| r.offenders().lit(" 2>/dev/null")),
        "; ",
    );
    script!("[ -z \"$({{ {}; }} | head -n 1)\" ]", finds)
}

/// The fix of [`HardenFiles`]: the modes and owners found recorded once in `saved`
/// ([`MODES_BEFORE`]), then every rule applied.
pub fn fix_script(rules: &[Rule], saved: &str) -> Script {
    let dir = saved.rsplit_once('/').map_or("/", |(d, _)| d);
    let saved = shell::quoted(saved);
    let record = Script::join(
        rules.iter().map(|r| {
            r.find(Script::new("-exec stat -c '%a %U:%G %n' {} +"))
                .lit(" 2>/dev/null")
        }),
        "; ",
    );
    let fixes = Script::join(rules.iter().map(Rule::fix), "\n");
    script!(
        "set -e\nif [ ! -e {saved} ]; then\n  mkdir -p -m 700 {dir}\n  {{ {record}; }} > {saved}.tmp || true\n  mv {saved}.tmp {saved}\nfi\n{fixes}",
        saved = saved,
        dir = dir,
        record = record,
        fixes = fixes,
    )
}

/// The undo of [`HardenFiles`]: the modes and owners recorded in `saved` put back.
pub fn restore_script(saved: &str) -> Script {
    let saved = shell::quoted(saved);
    script!(
        "if [ -e {saved} ]; then while read -r mode owner path; do chmod \"$mode\" -- \"$path\" && chown \"$owner\" -- \"$path\" || true; done < {saved}; rm -f {saved}; fi",
        saved = saved
    )
}

/// File modes and ownership of the Kubernetes and etcd files on a node ([`rules`]).
pub struct HardenFiles {
    /// The install context.
    pub ctx: Arc<InstallContext>,
}

impl Step for HardenFiles {
    fn name(&self) -> &str {
        "harden-file-modes"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let rules = rules(&self.ctx, node);
        if rules.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![Op::Run(
            RunCommand::new(fix_script(&rules, MODES_BEFORE))
                .unless(check_script(&rules))
                .undo(restore_script(MODES_BEFORE)),
        )])
    }
}

/// The module `security-enhancement`: [`HardenFiles`] on every Kubernetes and etcd node, once
/// the Kubernetes modules made their files. The audit policy and the kubelet settings belong to
/// the Kubernetes modules themselves.
pub struct SecurityModule(pub Arc<InstallContext>);

impl Module for SecurityModule {
    fn name(&self) -> &str {
        "security-enhancement"
    }
    fn skip(&self) -> Option<String> {
        (!enabled(&self.0)).then(|| "kubernetes.securityEnhancement is off".to_string())
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let hosts: Vec<String> = self
            .0
            .nodes
            .iter()
            .filter(|n| {
                n.has_role(Role::Master)
                    || n.has_role(Role::Worker)
                    || (n.has_role(Role::Etcd)
                        && self.0.cluster.file.spec.etcd.kind == EtcdType::Kubexm)
            })
            .map(|n| n.name.clone())
            .collect();
        Ok(vec![Task::new("harden-file-modes", hosts).step(
            HardenFiles {
                ctx: self.0.clone(),
            },
        )])
    }
}

/// What the security enhancement leaves on a node once the Kubernetes modules' own delete ran:
/// the audit policy and logs, the record of the modes found; the parent directories when that
/// leaves them empty (`/etc/kubernetes` too: the Kubernetes delete left it for this).
pub fn delete_ops() -> Vec<Op> {
    let dirs = [
        AUDIT_POLICY_DIR,
        AUDIT_LOG_DIR,
        MODES_BEFORE
            .rsplit_once('/')
            .map_or(MODES_BEFORE, |(d, _)| d),
    ];
    let parents = ["/var/log/kubernetes", "/etc/kubernetes"];
    vec![Op::Run(
        RunCommand::new(script!(
            "rm -rf -- {}\nfor d in {}; do rmdir -- \"$d\" 2>/dev/null || true; done",
            shell::words(dirs),
            shell::words(parents),
        ))
        .unless(Script::join(
            dirs.iter().map(|d| script!("[ ! -e {d} ]", d = d)),
            " && ",
        )),
    )]
}

/// [`delete_ops`] on every node, after the Kubernetes modules' delete.
pub struct SecurityDeleteModule(pub Arc<InstallContext>);

/// The step of [`SecurityDeleteModule`].
struct RemoveTraces;

impl Step for RemoveTraces {
    fn name(&self) -> &str {
        "remove-security-enhancement"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(delete_ops())
    }
}

impl Module for SecurityDeleteModule {
    fn name(&self) -> &str {
        "security-enhancement"
    }
    fn skip(&self) -> Option<String> {
        (!enabled(&self.0)).then(|| "kubernetes.securityEnhancement is off".to_string())
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let hosts: Vec<String> = self.0.nodes.iter().map(|n| n.name.clone()).collect();
        Ok(vec![
            Task::new("remove-security-enhancement", hosts).step(RemoveTraces)
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_flags_point_at_the_policy_and_log() {
        let f = audit_flags();
        let names: Vec<&str> = f.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert!(f.contains(&("audit-policy-file", AUDIT_POLICY.to_string())));
        assert!(f.contains(&("audit-log-path", AUDIT_LOG.to_string())));
        assert!(f.contains(&("audit-log-maxage", "30".to_string())));
        assert!(f.contains(&("audit-log-maxbackup", "10".to_string())));
        assert!(f.contains(&("audit-log-maxsize", "100".to_string())));
        assert!(AUDIT_LOG.starts_with(AUDIT_LOG_DIR));
        assert!(AUDIT_POLICY.starts_with(AUDIT_POLICY_DIR));
    }

    #[test]
    fn rule_scripts_quote_and_check_modes() {
        let r = Rule::file("/etc/kubernetes/pki", 2, "*.key", 0o600);
        assert_eq!(
            r.offenders(),
            "find /etc/kubernetes/pki -maxdepth 2 -type f -name '*.key' \\( ! -perm 600 -o ! -user root -o ! -group root \\) -print"
        );
        let fix = r.fix();
        assert!(
            fix.starts_with("if [ -e /etc/kubernetes/pki ]; then find"),
            "{fix}"
        );
        assert!(fix.contains("! -perm 600 -exec chmod 600 {} +"), "{fix}");
        assert!(fix.contains("-exec chown root:root {} +"), "{fix}");
        let check = check_script(&[r.clone(), Rule::dir("/var/lib/etcd", 0o700)]);
        assert!(
            check.starts_with("[ -z \"$({ find /etc/kubernetes/pki"),
            "{check}"
        );
        assert!(check.contains("find /var/lib/etcd -maxdepth 0 -type d \\( ! -perm 700"));
        let script = fix_script(&[r], MODES_BEFORE);
        assert!(
            script.contains("-exec stat -c '%a %U:%G %n' {} +"),
            "{script}"
        );
        assert!(restore_script(MODES_BEFORE).contains("chmod \"$mode\" -- \"$path\""));
    }

    fn sh(script: &str) -> bool {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The scripts run for real on a temporary tree (as root, the owner the rules want).
    #[test]
    fn hardening_fixes_checks_and_reverts_modes() {
        use std::os::unix::fs::PermissionsExt;
        if !sh("[ \"$(id -u)\" = 0 ]") {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().display().to_string();
        let pki = dir.path().join("pki");
        std::fs::create_dir_all(pki.join("etcd")).expect("mkdir");
        let key = pki.join("etcd/ca.key");
        let crt = pki.join("ca.crt");
        std::fs::write(&key, "k").expect("key");
        std::fs::write(&crt, "c").expect("crt");
        let set = |p: &std::path::Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
        };
        let mode =
            |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777;
        set(&key, 0o644);
        set(&crt, 0o666);
        let rules = [
            Rule::file(format!("{root}/pki"), 2, "*.key", 0o600),
            Rule::file(format!("{root}/pki"), 2, "*.crt", 0o644),
            Rule::dir(format!("{root}/absent"), 0o700),
        ];
        let saved = format!("{root}/state/modes");
        assert!(!sh(&check_script(&rules)), "offenders found");
        assert!(sh(&fix_script(&rules, &saved)), "fixed");
        assert_eq!((mode(&key), mode(&crt)), (0o600, 0o644));
        assert!(sh(&check_script(&rules)), "nothing left to do");
        // A second run changes nothing and keeps the first record.
        assert!(sh(&fix_script(&rules, &saved)));
        let record = std::fs::read_to_string(&saved).expect("record");
        assert!(
            record.contains(&format!("644 root:root {}", key.display())),
            "{record}"
        );
        assert!(sh(&restore_script(&saved)), "reverted");
        assert_eq!((mode(&key), mode(&crt)), (0o644, 0o666));
        assert!(!std::path::Path::new(&saved).exists());
    }
}
