//! Module 0: preflight. Read-only checks on every node, in parallel; a failed check stops the
//! install before anything changed, with what is wrong and what to do.

mod etcd_disk;
mod harbor;
mod host;
mod kata;
mod network;
mod policy;

pub use etcd_disk::{CheckEtcdDisk, EtcdDiskModule, EtcdDiskRules, MeasureEtcdDisk};
pub use harbor::{CheckHarborHost, GatherHarborFacts, HarborRules};
pub use host::{CheckHostRequirements, GatherHostFacts, HostRules};
pub use kata::{kata_nodes, CheckKvm, GatherKvmFacts};
pub use network::{
    CheckNodeNetwork, CheckVipFree, GatherNetFacts, NetRules, ProbeVip, VipRule, WantedAddress,
};

use kubexm_manifests::resolve::Role;
use std::sync::Arc;

use kubexm_manifests::model::ProxyMode;

use crate::context::{InstallContext, NODE_MARKER};
use crate::pipeline::ops::{Check, Op};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

/// Preflight checks.
pub struct PreflightModule(pub Arc<InstallContext>);

impl Module for PreflightModule {
    fn name(&self) -> &str {
        "preflight"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let limits = ctx.cluster.file.spec.system.preflight.clone();
        let cluster = ctx.cluster.cluster_name().to_string();
        let net = Arc::new(NetRules::of(ctx));
        let mut tasks = vec![
            // Facts first: the kernel, cgroup hierarchy, interfaces and addresses of every
            // node, then the decision.
            Task::new("gather-host-facts", ctx.all())
                .step(GatherHostFacts)
                .step(GatherNetFacts),
            Task::new("check-host-requirements", ctx.all())
                .step(CheckHostRequirements(ctx.clone()))
                .step(CheckNodeNetwork(net.clone())),
        ];
        // The VIP, probed from its first holder once every node's addresses are known.
        if let Some(rule) = &net.vip {
            if let Some(first) = rule.holders.first() {
                tasks.push(Task::new("probe-vip", [first.clone()]).step(ProbeVip(rule.clone())));
                tasks.push(Task::new("check-vip", [first.clone()]).step(CheckVipFree(net.clone())));
            }
        }
        // Harbor's host: what docker, compose and the installer (from the bundle) cannot bring.
        if let Some(rules) = HarborRules::of(ctx) {
            let rules = Arc::new(rules);
            tasks.push(
                Task::new("check-harbor-host", [rules.host.clone()])
                    .step(GatherHarborFacts(rules.clone()))
                    .step(CheckHarborHost(rules)),
            );
        }
        // Kata's QEMU needs /dev/kvm wherever kata-deploy runs.
        let kata = kata_nodes(ctx);
        if !kata.is_empty() {
            tasks.push(
                Task::new("check-kata-kvm", kata)
                    .step(GatherKvmFacts)
                    .step(CheckKvm),
            );
        }
        tasks.push(
            Task::new("check-nodes", ctx.all())
                .step(CheckAccess)
                .step(CheckOs)
                .step(CheckResources {
                    min_cpus: limits.min_cpus,
                    master_mib: limits.min_master_memory_mib,
                    worker_mib: limits.min_worker_memory_mib,
                })
                .step(CheckKernel {
                    modules: limits.kernel_modules.clone().unwrap_or_else(|| {
                        let mut m = vec!["br_netfilter".to_string(), "overlay".to_string()];
                        match ctx.cluster.proxy_mode() {
                            ProxyMode::Ipvs => m.push("ip_vs".to_string()),
                            ProxyMode::Nftables => m.push("nf_tables".to_string()),
                            ProxyMode::Iptables => {}
                        }
                        m
                    }),
                })
                .step(CheckHostname)
                .step(CheckClock {
                    max_skew: limits.max_clock_skew_seconds,
                })
                .step(CheckRemnants {
                    cluster: cluster.clone(),
                })
                .step(CheckPorts { cluster })
                .step(CheckResolvConf)
                .step(CheckHostSettings),
        );
        Ok(tasks)
    }
}

macro_rules! check_step {
    ($ty:ident, $name:literal) => {
        impl Step for $ty {
            fn name(&self) -> &str {
                $name
            }
            fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
                Ok(vec![Op::Check(self.check(node))])
            }
            fn policy(&self) -> Policy {
                policy::check_policy()
            }
        }
    };
}

/// SSH works and sudo gives root.
pub struct CheckAccess;
check_step!(CheckAccess, "check-access");

impl CheckAccess {
    fn check(&self, _: &Node) -> Check {
        Check::new(
            "access",
            "u=$(id -u)\nif [ \"$u\" != 0 ]; then echo \"commands run as uid $u, not root: give the SSH user sudo rights (or log in as root)\" >&2; exit 1; fi",
        )
    }
}

/// The operating system is in the support matrix.
pub struct CheckOs;
check_step!(CheckOs, "check-os");

/// Operating systems KubeXM installs on (`ID:VERSION_ID` patterns of /etc/os-release).
pub const SUPPORTED_OS: &str = "Debian 11-13, Ubuntu 20.04/22.04/24.04, CentOS 7, RHEL/Rocky/AlmaLinux/Oracle Linux 8-9, openEuler 20.03-24.03, Kylin V10, Anolis 8";

impl CheckOs {
    fn check(&self, _: &Node) -> Check {
        Check::new(
            "operating system",
            format!(
                "if [ ! -r /etc/os-release ]; then echo '/etc/os-release is missing: cannot tell the operating system' >&2; exit 1; fi\n\
                 . /etc/os-release\n\
                 case \"$ID:$VERSION_ID\" in\n\
                 debian:11*|debian:12*|debian:13*|ubuntu:20.04|ubuntu:22.04|ubuntu:24.04|centos:7*|rhel:8*|rhel:9*|rocky:8*|rocky:9*|almalinux:8*|almalinux:9*|ol:8*|ol:9*|openEuler:2*|kylin:*|anolis:8*) ;;\n\
                 *) echo \"unsupported operating system: $ID $VERSION_ID (/etc/os-release); supported: {SUPPORTED_OS}\" >&2; exit 1;;\n\
                 esac"
            ),
        )
    }
}

/// CPUs and memory meet the limits for the node's roles.
pub struct CheckResources {
    min_cpus: u32,
    master_mib: u64,
    worker_mib: u64,
}
check_step!(CheckResources, "check-resources");

impl CheckResources {
    fn check(&self, node: &Node) -> Check {
        let (need, kind) = if node.has_role(Role::Master) {
            (self.master_mib, "a master")
        } else {
            (self.worker_mib, "a node")
        };
        Check::new(
            "resources",
            format!(
                "bad=0\ncpus=$(nproc)\nif [ \"$cpus\" -lt {cpus} ]; then echo \"$cpus CPU(s), {kind} needs at least {cpus} (spec.system.preflight.minCpus)\" >&2; bad=1; fi\n\
                 mem=$(awk '/^MemTotal:/ {{print int($2/1024)}}' /proc/meminfo)\n\
                 if [ \"$mem\" -lt {need} ]; then echo \"$mem MiB of memory, {kind} needs at least {need} MiB (spec.system.preflight.min{which}MemoryMiB)\" >&2; bad=1; fi\n\
                 exit $bad",
                cpus = self.min_cpus,
                which = if node.has_role(Role::Master) { "Master" } else { "Worker" },
            ),
        )
    }
}

/// The kernel modules Kubernetes needs (the kernel's version: [`CheckHostRequirements`]).
pub struct CheckKernel {
    modules: Vec<String>,
}
check_step!(CheckKernel, "check-kernel");

impl CheckKernel {
    fn check(&self, _: &Node) -> Check {
        let modules: Vec<String> = self.modules.iter().map(|m| shell::quote(m)).collect();
        Check::new(
            "kernel modules",
            format!("have() {{ [ -d /sys/module/$1 ] || grep -q \"^$1 \" /proc/modules 2>/dev/null || case $1 in overlay) grep -qw overlay /proc/filesystems;; br_netfilter) [ -d /proc/sys/net/bridge ];; ip_vs) [ -e /proc/net/ip_vs ];; nf_tables) [ -d /sys/module/nf_tables ];; *) false;; esac; }}\n\
             missing=''\nfor m in {}; do\n  have $m || modprobe $m 2>/dev/null || missing=\"$missing $m\"\ndone\n\
             if [ -n \"$missing\" ]; then echo \"kernel modules not available:$missing (modprobe failed); install the kernel's module package or load them (spec.system.preflight.kernelModules lists what is required)\" >&2; exit 1; fi",
            modules.join(" ")),
        )
    }
}

/// The node's hostname is a valid Kubernetes node name.
pub struct CheckHostname;
check_step!(CheckHostname, "check-hostname");

impl CheckHostname {
    fn check(&self, node: &Node) -> Check {
        Check::new(
            "hostname",
            format!(
                "h=$(hostname)\nif [ \"$h\" != {n} ]; then echo \"WARNING: hostname is $h; node preparation renames it to {n}\"; fi\n\
                 if ! getent ahostsv4 {n} >/dev/null 2>&1 && [ \"$h\" = {n} ]; then echo \"WARNING: {n} does not resolve yet; node preparation adds it to /etc/hosts\"; fi",
                n = shell::quote(&node.name)
            ),
        )
    }
}

/// The clock is close to the control host's, and a time service runs.
pub struct CheckClock {
    max_skew: u32,
}
check_step!(CheckClock, "check-clock");

impl CheckClock {
    fn check(&self, _: &Node) -> Check {
        let mut c = Check::new(
            "clock",
            format!(
                "now=$(date +%s.%N)\nskew=$(awk -v a=\"$now\" -v b=\"$KUBEXM_CONTROL_TIME\" 'BEGIN {{d=a-b; if (d<0) d=-d; printf \"%.1f\", d}}')\n\
                 if awk -v s=\"$skew\" 'BEGIN {{exit !(s > {max})}}'; then echo \"clock differs from the control host by ${{skew}}s (at most {max}s allowed); set the time (chronyc makestep, or date -s) and re-run\" >&2; exit 1; fi\n\
                 active=''\nfor u in chrony chronyd ntp ntpd systemd-timesyncd; do systemctl is-active -q $u 2>/dev/null && active=$u; done\n\
                 [ -n \"$active\" ] || echo 'WARNING: no time service (chrony/ntpd) is active; node preparation configures chrony'",
                max = self.max_skew
            ),
        );
        c.control_time = true;
        c
    }
}

/// No Kubernetes or etcd from another installation is on the node.
pub struct CheckRemnants {
    cluster: String,
}
check_step!(CheckRemnants, "check-remnants");

fn ours(cluster: &str) -> String {
    format!(
        "if [ \"$(sed -n 's/^name=//p' {NODE_MARKER} 2>/dev/null)\" = {} ]; then exit 0; fi",
        shell::quote(cluster)
    )
}

impl CheckRemnants {
    fn check(&self, _: &Node) -> Check {
        Check::new(
            "existing installation",
            format!(
                "{}\nfound=''\nfor f in /etc/kubernetes/admin.conf /etc/kubernetes/kubelet.conf /etc/kubernetes/manifests/kube-apiserver.yaml /var/lib/etcd/member /var/lib/kubelet/config.yaml; do\n  [ -e \"$f\" ] && found=\"$found $f\"\ndone\n\
                 systemctl is-active -q kubelet 2>/dev/null && found=\"$found kubelet.service(active)\"\n\
                 if [ -n \"$found\" ]; then echo \"the node has a Kubernetes installation that KubeXM did not make:$found; remove it (kubeadm reset, or kubexm-install delete) before installing\" >&2; exit 1; fi",
                ours(&self.cluster)
            ),
        )
    }
}

/// The ports the node's roles need are free.
pub struct CheckPorts {
    cluster: String,
}

impl Step for CheckPorts {
    fn name(&self) -> &str {
        "check-ports"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        if Self::ports(node).is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![Op::Check(self.check(node))])
    }
    fn policy(&self) -> Policy {
        policy::check_policy()
    }
}

impl CheckPorts {
    /// Ports a node with these roles listens on.
    pub fn ports(node: &Node) -> Vec<u16> {
        let mut p = Vec::new();
        if node.has_role(Role::Master) {
            p.extend([6443, 10257, 10259]);
        }
        if node.has_role(Role::Etcd) {
            p.extend([2379, 2380]);
        }
        if node.has_role(Role::Master) || node.has_role(Role::Worker) {
            p.push(10250);
        }
        p.sort_unstable();
        p
    }

    fn check(&self, node: &Node) -> Check {
        let ports: Vec<String> = Self::ports(node).iter().map(u16::to_string).collect();
        Check::new(
            "ports",
            format!(
                "{}\nbad=0\nfor port in {}; do\n  l=$(ss -Hltnp \"( sport = :$port )\" 2>/dev/null | head -n 1)\n  if [ -n \"$l\" ]; then\n    who=$(printf '%s' \"$l\" | sed -n 's/.*users:((\"\\([^\"]*\\)\",pid=\\([0-9]*\\).*/\\1 (pid \\2)/p')\n    echo \"port $port is in use by ${{who:-another process}}; stop it or free the port\" >&2; bad=1\n  fi\ndone\nexit $bad",
                ours(&self.cluster),
                ports.join(" ")
            ),
        )
    }
}

/// /etc/resolv.conf exists (kubelet and CoreDNS read it).
pub struct CheckResolvConf;
check_step!(CheckResolvConf, "check-resolv-conf");

impl CheckResolvConf {
    fn check(&self, _: &Node) -> Check {
        Check::new(
            "resolv.conf",
            "if [ ! -s /etc/resolv.conf ]; then echo '/etc/resolv.conf is missing or empty; kubelet and CoreDNS need it: add at least one nameserver line (an internal resolver is fine)' >&2; exit 1; fi\n\
             grep -q '^nameserver' /etc/resolv.conf || echo 'WARNING: /etc/resolv.conf has no nameserver line; CoreDNS will not resolve names outside the cluster'",
        )
    }
}

/// SELinux, firewall and swap: warnings (node preparation changes them).
pub struct CheckHostSettings;
check_step!(CheckHostSettings, "check-host-settings");

impl CheckHostSettings {
    fn check(&self, _: &Node) -> Check {
        Check::new(
            "host settings",
            "if command -v getenforce >/dev/null 2>&1 && [ \"$(getenforce)\" = Enforcing ]; then echo 'WARNING: SELinux is enforcing; node preparation sets it to permissive'; fi\n\
             for u in firewalld ufw; do systemctl is-active -q $u 2>/dev/null && echo \"WARNING: firewall $u is active; node preparation stops it\"; done\n\
             if [ \"$(tail -n +2 /proc/swaps | wc -l)\" -gt 0 ]; then echo 'WARNING: swap is on; node preparation turns it off'; fi\n\
             exit 0",
        )
    }
}
