//! What pods and the pod network leave on a node after the kubelet and the runtime stopped,
//! removed by both `delete` paths (kubeadm's `reset` and the kubexm path's cleanup leave them,
//! as kubeadm itself says): CNI configurations and state, the network plugins' own binaries in
//! `/opt/cni/bin` (the runtime delete then removes the directory), pod network namespaces
//! (`/run/netns/cni-*`: their veth pairs go with them), the plugins' and kube-proxy's
//! interfaces, IPVS services, the iptables rules and chains of kube-proxy, the CNI plugins
//! (`CNI-*` of bridge/portmap masquerading) and NodeLocal DNSCache, and the pod logs.

use crate::pipeline::ops::{Op, RunCommand};

/// CNI plugin binaries the network plugins install into `/opt/cni/bin`.
const CNI_PLUGIN_BINARIES: &str = "flannel calico calico-ipam cilium-cni install";
/// Interfaces Kubernetes networking creates on nodes.
const INTERFACES: &str = "cni0 flannel.1 flannel-v6.1 vxlan.calico vxlan-v6.calico cilium_host cilium_net cilium_vxlan kube-ipvs0 nodelocaldns";
/// iptables rules and chains of kube-proxy, the CNI plugins and NodeLocal DNSCache.
pub const IPTABLES_PATTERN: &str = "KUBE-|FLANNEL|cali-|CILIUM|CNI-|169\\.254\\.25\\.10";
/// CNI state directories and the pod logs.
const STATE: &str = "/var/lib/cni /run/flannel /var/run/calico /var/lib/calico /var/run/cilium /var/log/pods /var/log/containers";
/// CNI configurations of the network plugins KubeXM installs.
const CONFIGS: &str = "/etc/cni/net.d/*flannel* /etc/cni/net.d/*calico* /etc/cni/net.d/*cilium* /etc/cni/net.d/calico-kubeconfig";

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
            "rm -f -- {cni} {CONFIGS}\nrmdir /etc/cni/net.d /etc/cni 2>/dev/null || true\nrm -rf -- {STATE}\nfor n in /run/netns/cni-*; do [ -e \"$n\" ] || continue; ip netns delete \"${{n##*/}}\" 2>/dev/null || {{ umount -l \"$n\" 2>/dev/null; rm -f \"$n\"; }}; done\nfor i in {INTERFACES}; do ip link delete \"$i\" 2>/dev/null || true; done\nif command -v ipvsadm >/dev/null 2>&1; then ipvsadm --clear 2>/dev/null || true; fi\nfor t in iptables ip6tables; do\n  command -v $t-save >/dev/null 2>&1 || continue\n  if $t-save 2>/dev/null | grep -qE '{IPTABLES_PATTERN}'; then $t-save | grep -vE '{IPTABLES_PATTERN}' | $t-restore; fi\ndone",
            cni = cni.join(" ")
        ))
        .unless(format!(
            "{cni_gone} && ! ls {CONFIGS} >/dev/null 2>&1 && ! ls -d {STATE} /run/netns/cni-* >/dev/null 2>&1 && for i in {INTERFACES}; do ! ip link show \"$i\" >/dev/null 2>&1 || exit 1; done && for t in iptables ip6tables; do ! $t-save 2>/dev/null | grep -qE '{IPTABLES_PATTERN}' || exit 1; done"
        )),
    )
}
