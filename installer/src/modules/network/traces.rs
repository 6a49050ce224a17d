//! What pods and the pod network leave on a node after the kubelet and the runtime stopped,
//! removed by both `delete` paths (kubeadm's `reset` and the kubexm path's cleanup leave them,
//! as kubeadm itself says): CNI configurations and state, the network plugins' own binaries in
//! `/opt/cni/bin` (the runtime delete then removes the directory), pod network namespaces
//! (`/run/netns/cni-*`: their veth pairs go with them), the plugins' and kube-proxy's
//! interfaces, IPVS services, the iptables rules and chains of kube-proxy, the CNI plugins
//! (`CNI-*` of bridge/portmap masquerading) and NodeLocal DNSCache, and the pod logs.

use crate::pipeline::ops::{Op, RunCommand};

/// CNI plugin binaries the network plugins install into `/opt/cni/bin`.
const CNI_PLUGIN_BINARIES: &str = "flannel calico calico-ipam cilium-cni install multus";
/// Interfaces Kubernetes networking creates on nodes.
const INTERFACES: &str = "cni0 flannel.1 flannel-v6.1 vxlan.calico vxlan-v6.calico cilium_host cilium_net cilium_vxlan kube-ipvs0 nodelocaldns";
/// iptables rules and chains of kube-proxy, the CNI plugins and NodeLocal DNSCache.
pub const IPTABLES_PATTERN: &str = "KUBE-|FLANNEL|cali-|CILIUM|CNI-|169\\.254\\.25\\.10";
/// CNI state directories and the pod logs.
/// (multus keeps its kubeconfig in `net.d/multus.d`.)
const STATE: &str = "/var/lib/cni /run/flannel /var/run/calico /var/lib/calico /var/run/cilium /etc/cni/net.d/multus.d /var/log/pods /var/log/containers";
/// CNI configurations of the network plugins KubeXM installs.
const CONFIGS: &str = "/etc/cni/net.d/*flannel* /etc/cni/net.d/*calico* /etc/cni/net.d/*cilium* /etc/cni/net.d/calico-kubeconfig /etc/cni/net.d/00-multus.conf /etc/cni/net.d/00-multus.conflist";

/// The op removing every trace (see the module); a no-op when none is left.
pub fn remove_pod_network_traces() -> Op {
    let cni: Vec<String> = CNI_PLUGIN_BINARIES
        .split_whitespace()
        .map(|b| format!("/opt/cni/bin/{b}"))
        .collect();
    let cni_gone = cni
        .iter()
        .map(|b| format!("[ ! -e {b} ]"))
        .collect::<Vec<_>>()
        .join(" && ");
    Op::Run(
        RunCommand::new(format!(
            "rm -f -- {cni} {CONFIGS}\nrm -rf -- {STATE}\nrmdir /etc/cni/net.d /etc/cni 2>/dev/null || true\nfor n in /run/netns/cni-*; do [ -e \"$n\" ] || continue; ip netns delete \"${{n##*/}}\" 2>/dev/null || {{ umount -l \"$n\" 2>/dev/null; rm -f \"$n\"; }}; done\nfor i in {INTERFACES}; do ip link delete \"$i\" 2>/dev/null || true; done\nif command -v ipvsadm >/dev/null 2>&1; then ipvsadm --clear 2>/dev/null || true; fi\nfor t in iptables ip6tables; do\n  command -v $t-save >/dev/null 2>&1 || continue\n  if $t-save 2>/dev/null | grep -qE '{IPTABLES_PATTERN}'; then $t-save | grep -vE '{IPTABLES_PATTERN}' | $t-restore; fi\ndone",
            cni = cni.join(" ")
        ))
        .unless(format!(
            "{cni_gone} && for f in {CONFIGS} {STATE} /run/netns/cni-*; do [ ! -e \"$f\" ] || exit 1; done && for i in {INTERFACES}; do ! ip link show \"$i\" >/dev/null 2>&1 || exit 1; done && for t in iptables ip6tables; do ! $t-save 2>/dev/null | grep -qE '{IPTABLES_PATTERN}' || exit 1; done"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The op's `unless` check, run in a shell with `/` moved to `root`.
    fn gone(root: &std::path::Path) -> bool {
        let Op::Run(r) = remove_pod_network_traces() else {
            panic!("not a command");
        };
        let check = r.unless.expect("unless");
        let check = check
            .replace("/etc/", &format!("{}/etc/", root.display()))
            .replace("/var/", &format!("{}/var/", root.display()))
            .replace("/run/", &format!("{}/run/", root.display()))
            .replace("/opt/", &format!("{}/opt/", root.display()));
        // No interfaces or iptables to look at here: only the files are checked.
        let files = check.split(" && for i in").next().expect("files part");
        std::process::Command::new("sh")
            .arg("-c")
            .arg(files)
            .status()
            .expect("sh")
            .success()
    }

    #[test]
    fn one_configuration_left_among_several_patterns_is_not_taken_for_none() {
        let root = tempfile::tempdir().expect("tempdir");
        assert!(gone(root.path()), "nothing there");
        let net = root.path().join("etc/cni/net.d");
        std::fs::create_dir_all(&net).expect("mkdir");
        std::fs::write(net.join("10-calico.conflist"), "{}").expect("write");
        assert!(!gone(root.path()), "calico's configuration is still there");
        std::fs::remove_file(net.join("10-calico.conflist")).expect("rm");
        std::fs::create_dir_all(net.join("multus.d")).expect("mkdir");
        assert!(!gone(root.path()), "multus's directory is still there");
    }
}
