//! What the Kubernetes version asks of each node's kernel and cgroup hierarchy, decided from
//! the facts preflight gathers ([`crate::facts::host`]) before anything changes.
//!
//! Upstream facts (pinned in `kubexm_manifests::kube_version`'s tests):
//! * kubeadm's `SystemVerification` (kubernetes/system-validators): kernel 3.10+ before v1.32,
//!   4.19+ from v1.32 — an error in v1.32–v1.33, a warning from v1.34 (kubernetes PR #131919);
//! * the kubelet's `failCgroupV1` defaults to true from v1.35: it exits on a cgroup v1 host
//!   ("kubelet is configured to not run on a host using cgroup v1"); cgroup v1 is in
//!   maintenance mode from v1.31 (KEP-4569);
//! * kube-proxy's nftables mode needs kernel 5.13+ (kube-proxy documentation, KEP-3866).

use std::sync::Arc;

use kubexm_manifests::kube_version::{KernelRequirement, NFTABLES_MIN_KERNEL};
use kubexm_manifests::model::ProxyMode;
use kubexm_manifests::version::KubeVersion;

use crate::context::InstallContext;
use crate::facts::host::{self, CgroupVersion, HostFacts};
use crate::pipeline::ops::{LearnFacts, Op, Require, Verdict};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};

/// The rules for one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRules {
    /// The Kubernetes version.
    pub version: KubeVersion,
    /// Its kernel floor.
    pub kernel: KernelRequirement,
    /// kube-proxy's mode.
    pub proxy_mode: ProxyMode,
    /// `spec.kubernetes.kubelet.failCgroupV1`.
    pub fail_cgroup_v1: Option<bool>,
}

impl HostRules {
    /// The rules `ctx`'s cluster sets.
    pub fn of(ctx: &InstallContext) -> Self {
        let version = ctx.cluster.version;
        Self {
            version,
            kernel: version.kubeadm_kernel_requirement(),
            proxy_mode: ctx.cluster.proxy_mode(),
            fail_cgroup_v1: ctx.cluster.file.spec.kubernetes.kubelet.fail_cgroup_v1,
        }
    }

    /// Whether the kubelet will refuse a cgroup v1 host.
    fn refuses_cgroup_v1(&self) -> bool {
        self.fail_cgroup_v1
            .unwrap_or_else(|| self.version.kubelet_fails_on_cgroup_v1())
    }

    /// The rules in one line (the plan).
    pub fn describe(&self) -> String {
        let mut parts = vec![format!(
            "kernel {}+ ({})",
            self.kernel.minimum,
            if self.kernel.fatal {
                "else refused"
            } else {
                "else a warning"
            }
        )];
        parts.push(if self.refuses_cgroup_v1() {
            "cgroup v2 (the kubelet refuses cgroup v1)".to_string()
        } else {
            "cgroup v1 or v2".to_string()
        });
        if self.proxy_mode == ProxyMode::Nftables {
            parts.push(format!(
                "kernel {NFTABLES_MIN_KERNEL}+ for kube-proxy's nftables mode"
            ));
        }
        format!("Kubernetes {}: {}", self.version, parts.join("; "))
    }

    /// The verdict for `node` with `facts`: every problem at once.
    pub fn judge(&self, node: &str, facts: &HostFacts) -> Verdict {
        let v = self.version;
        let has = facts.summary();
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        if facts.kernel < self.kernel.minimum {
            let msg = format!(
                "node {node} ({has}): kernel {} is older than {}, the oldest Kubernetes {v} supports (kubeadm SystemVerification)",
                facts.kernel, self.kernel.minimum
            );
            if self.kernel.fatal {
                errors.push(format!(
                    "{msg}; upgrade the node's kernel to {} or newer, or install an older Kubernetes (the README's OS matrix lists what each OS runs)",
                    self.kernel.minimum
                ));
            } else {
                warnings.push(format!(
                    "{msg}; kubeadm only warns from v1.34, upgrading the kernel is recommended"
                ));
            }
        }
        if self.proxy_mode == ProxyMode::Nftables && facts.kernel < NFTABLES_MIN_KERNEL {
            errors.push(format!(
                "node {node} ({has}): kube-proxy's nftables mode needs kernel {NFTABLES_MIN_KERNEL} or newer; set spec.kubernetes.proxyMode: iptables, or upgrade the kernel"
            ));
        }
        if facts.cgroup == CgroupVersion::V1 {
            if self.refuses_cgroup_v1() {
                errors.push(format!(
                    "node {node} ({has}): the kubelet of Kubernetes {v} refuses to run on a cgroup v1 host (failCgroupV1 is true{}); boot the node with the unified hierarchy (kernel argument systemd.unified_cgroup_hierarchy=1, then reboot), or keep cgroup v1 explicitly with spec.kubernetes.kubelet.failCgroupV1: false",
                    if self.fail_cgroup_v1.is_some() { "" } else { " by default from v1.35" }
                ));
            } else if v.kubelet_has_fail_cgroup_v1() {
                warnings.push(format!(
                    "node {node} ({has}): cgroup v1 is in maintenance mode from Kubernetes v1.31 and refused by default from v1.35; plan to boot it with the unified hierarchy"
                ));
            }
        }
        if errors.is_empty() {
            Ok(warnings)
        } else {
            Err(errors.join("\n"))
        }
    }
}

/// Learns the node's kernel, cgroup hierarchy and OS ([`crate::facts::host::PROBE`]).
pub struct GatherHostFacts;

impl Step for GatherHostFacts {
    fn name(&self) -> &str {
        "gather-host-facts"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "kernel, cgroup and OS".into(),
            script: host::PROBE.into(),
            parse: host::learn,
            facts: facts.clone(),
            prefix: host::fact_prefix(&node.name),
            timeout: std::time::Duration::from_secs(60),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

/// Decides from the gathered facts whether the node can run the cluster's Kubernetes version.
pub struct CheckHostRequirements(pub Arc<InstallContext>);

impl Step for CheckHostRequirements {
    fn name(&self) -> &str {
        "check-host-requirements"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let rules = HostRules::of(&self.0);
        Ok(vec![Op::Require(Require {
            what: "host requirements".into(),
            rules: rules.describe(),
            verdict: HostFacts::from_facts(facts, &node.name).map(|h| rules.judge(&node.name, &h)),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(version: &str, proxy_mode: ProxyMode, fail_cgroup_v1: Option<bool>) -> HostRules {
        let version: KubeVersion = version.parse().expect("version");
        HostRules {
            version,
            kernel: version.kubeadm_kernel_requirement(),
            proxy_mode,
            fail_cgroup_v1,
        }
    }

    fn host(probe: &str) -> HostFacts {
        host::parse(probe).expect("probe")
    }

    const EL8: &str = "kernel=4.18.0-553.el8_10.x86_64\ncgroupfs=tmpfs\nos=rocky 8.10\n";
    const CENTOS7: &str = "kernel=3.10.0-1160.el7.x86_64\ncgroupfs=tmpfs\nos=centos 7\n";
    const DEBIAN12: &str = "kernel=6.1.0-26-amd64\ncgroupfs=cgroup2fs\nos=debian 12\n";
    const DEBIAN11: &str = "kernel=5.10.0-32-amd64\ncgroupfs=cgroup2fs\nos=debian 11\n";

    /// kubeadm v1.32–v1.33 refuse kernels older than 4.19 (SystemVerification), v1.34+ warn.
    #[test]
    fn kernel_floor_per_version() {
        let ipvs = ProxyMode::Ipvs;
        assert_eq!(rules("v1.31.13", ipvs, None).judge("n", &host(EL8)), Ok(vec![
            "node n (kernel 4.18.0-553.el8_10.x86_64, cgroup v1, rocky 8.10): cgroup v1 is in maintenance mode from Kubernetes v1.31 and refused by default from v1.35; plan to boot it with the unified hierarchy".to_string()
        ]));
        let e = rules("v1.32.0", ipvs, None)
            .judge("node3", &host(EL8))
            .expect_err("4.18 on 1.32");
        assert!(
            e.contains("node node3") && e.contains("kernel 4.18 is older than 4.19"),
            "{e}"
        );
        assert!(e.contains("upgrade the node's kernel to 4.19"), "{e}");
        let w = rules("v1.34.0", ipvs, None)
            .judge("n", &host(EL8))
            .expect("warning only");
        assert!(w.iter().any(|w| w.contains("older than 4.19")), "{w:?}");
        let e = rules("v1.20.2", ipvs, None).judge("n", &host(CENTOS7));
        assert_eq!(e, Ok(vec![]), "CentOS 7 runs v1.20");
        assert!(rules("v1.33.0", ipvs, None)
            .judge("n", &host(CENTOS7))
            .is_err());
        assert_eq!(
            rules("v1.36.0", ipvs, None).judge("n", &host(DEBIAN12)),
            Ok(vec![])
        );
    }

    /// failCgroupV1 defaults to true from v1.35; an explicit false keeps cgroup v1 hosts.
    #[test]
    fn cgroup_v1_on_1_35() {
        let el9_v1 = host("kernel=5.14.0-503.el9.x86_64\ncgroupfs=tmpfs\nos=rocky 9.5\n");
        let r = rules("v1.35.0", ProxyMode::Iptables, None);
        let e = r.judge("node2", &el9_v1).expect_err("cgroup v1 on 1.35");
        assert!(
            e.contains("node node2 (kernel 5.14.0-503.el9.x86_64, cgroup v1, rocky 9.5)"),
            "{e}"
        );
        assert!(e.contains("systemd.unified_cgroup_hierarchy=1"), "{e}");
        assert!(e.contains("failCgroupV1: false"), "{e}");
        assert!(r
            .describe()
            .contains("cgroup v2 (the kubelet refuses cgroup v1)"));
        let allowed = rules("v1.35.0", ProxyMode::Iptables, Some(false));
        assert!(allowed.judge("node2", &el9_v1).is_ok());
        assert!(allowed.describe().contains("cgroup v1 or v2"));
        // Asked explicitly on v1.34: the kubelet refuses there too.
        assert!(rules("v1.34.0", ProxyMode::Iptables, Some(true))
            .judge("n", &el9_v1)
            .is_err());
    }

    /// kube-proxy's nftables mode needs kernel 5.13+.
    #[test]
    fn nftables_kernel() {
        let r = rules("v1.33.0", ProxyMode::Nftables, None);
        let e = r.judge("n", &host(DEBIAN11)).expect_err("5.10 < 5.13");
        assert!(e.contains("nftables mode needs kernel 5.13"), "{e}");
        assert_eq!(r.judge("n", &host(DEBIAN12)), Ok(vec![]));
        assert!(r
            .describe()
            .contains("kernel 5.13+ for kube-proxy's nftables mode"));
    }
}
