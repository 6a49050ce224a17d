//! Kata Containers needs hardware virtualization (issue 19, prechecks;
//! `spec.kubernetes.kata.enabled`): every node kata-deploy will run on needs `/dev/kvm`, which
//! Kata's QEMU opens for every pod. kata-deploy's DaemonSet has no tolerations, so it runs on the
//! schedulable nodes: the nodes with the worker role (a master without it keeps the
//! control-plane taint). cluster.yaml has no per-node Kata selector, so the way out is to give
//! those nodes KVM, or to turn Kata off. Decided on the control host from the facts the nodes
//! report ([`crate::facts::kata`]); the CPU's `vmx`/`svm` flag tells the operator where to look.

use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::facts::kata::{self, CpuVirt, KvmFacts};
use crate::pipeline::ops::{LearnFacts, Op, Require, Verdict};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};

/// The nodes that will run Kata when `ctx`'s cluster enables it (empty otherwise).
pub fn kata_nodes(ctx: &InstallContext) -> Vec<String> {
    if ctx.cluster.file.spec.kubernetes.kata.enabled {
        ctx.with_role(Role::Worker)
    } else {
        Vec::new()
    }
}

/// The rule in one line (the plan).
pub fn describe() -> String {
    "Kata Containers (spec.kubernetes.kata.enabled) runs its pods in QEMU VMs: /dev/kvm present on every node with the worker role (where kata-deploy runs)".into()
}

/// The verdict for `node` with its `facts`.
pub fn judge(node: &str, f: KvmFacts) -> Verdict {
    if f.kvm {
        return Ok(Vec::new());
    }
    let why = match f.cpu {
        CpuVirt::Vmx => "the CPU has Intel VT-x (vmx in /proc/cpuinfo) but the kvm module is not loaded: load it (modprobe kvm_intel) and make it load at boot",
        CpuVirt::Svm => "the CPU has AMD-V (svm in /proc/cpuinfo) but the kvm module is not loaded: load it (modprobe kvm_amd) and make it load at boot",
        CpuVirt::None => "the CPU shows neither vmx nor svm in /proc/cpuinfo: turn virtualization on in the firmware (BIOS/UEFI), or on a virtual machine turn on nested virtualization in its hypervisor (on arm64, KVM needs a kernel booted at EL2)",
    };
    Err(format!(
        "node {node} has no /dev/kvm, and Kata Containers (spec.kubernetes.kata.enabled) runs every kata pod in a QEMU VM there: {why}; or turn Kata off (spec.kubernetes.kata.enabled: false). cluster.yaml has no per-node Kata selector: kata-deploy runs on every node with the worker role, so each of them needs KVM"
    ))
}

/// Learns whether the node has `/dev/kvm` ([`crate::facts::kata::PROBE`]).
pub struct GatherKvmFacts;

impl Step for GatherKvmFacts {
    fn name(&self) -> &str {
        "gather-kvm-facts"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "/dev/kvm and the CPU's virtualization flag".into(),
            script: kata::PROBE.into(),
            parse: kata::learn,
            facts: facts.clone(),
            prefix: kata::fact_prefix(&node.name),
            timeout: std::time::Duration::from_secs(30),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

/// Refuses a node without `/dev/kvm` when Kata is enabled.
pub struct CheckKvm;

impl Step for CheckKvm {
    fn name(&self) -> &str {
        "check-kvm"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Require(Require {
            what: "hardware virtualization for Kata".into(),
            rules: describe(),
            verdict: KvmFacts::from_facts(facts, &node.name).map(|f| judge(&node.name, f)),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_without_kvm_is_refused_naming_it_and_the_way_out() {
        let ok = KvmFacts {
            kvm: true,
            cpu: CpuVirt::None,
        };
        assert_eq!(judge("worker1", ok), Ok(vec![]));
        let e = judge(
            "worker2",
            KvmFacts {
                kvm: false,
                cpu: CpuVirt::Vmx,
            },
        )
        .expect_err("no kvm");
        assert!(e.starts_with("node worker2 has no /dev/kvm"), "{e}");
        assert!(e.contains("modprobe kvm_intel"), "{e}");
        assert!(e.contains("spec.kubernetes.kata.enabled: false"), "{e}");
        assert!(e.contains("no per-node Kata selector"), "{e}");
        let e = judge(
            "worker2",
            KvmFacts {
                kvm: false,
                cpu: CpuVirt::None,
            },
        )
        .expect_err("no kvm");
        assert!(e.contains("nested virtualization"), "{e}");
        assert!(judge(
            "w",
            KvmFacts {
                kvm: false,
                cpu: CpuVirt::Svm
            }
        )
        .expect_err("no kvm")
        .contains("modprobe kvm_amd"));
    }
}
