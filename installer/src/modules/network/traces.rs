//! What pods and the pod network leave on a node after the kubelet and the runtime stopped,
//! removed by both `delete` paths (kubeadm's `reset` and the kubexm path's cleanup leave them,
//! as kubeadm itself says): CNI configurations and state, the network plugins' own binaries in
//! `/opt/cni/bin` (the runtime delete then removes the directory), pod network namespaces
//! (`/run/netns/cni-*`: their veth pairs go with them), the plugins' and kube-proxy's
//! interfaces, IPVS services, the iptables rules and chains of kube-proxy, the CNI plugins
//! (`CNI-*` of bridge/portmap masquerading) and NodeLocal DNSCache, and the pod logs.
//!
//! kube-ovn leaves Open vSwitch's and OVN's databases and sockets (`/etc/origin/*`,
//! `/run/openvswitch`, `/run/ovn`, their logs), the `ovn0` port and the tunnel devices
//! (`genev_sys_6081`, `vxlan_sys_4789`, `stt_sys_7471`) and its `OVN-*` chains; the kernel
//! datapath (`ovs-system`, `br-int`) is removed where `ovs-dpctl` is installed, else it goes
//! with the next reboot (nothing on the node uses it once kube-ovn is gone). hybridnet leaves
//! its daemon's socket, the host ends of its pods' veths (`hybr*`), its VXLAN devices
//! (`<interface>.vxlan4`/`.vxlan6`) and its `HYBRIDNET-*` chains (its felix's are `cali-*`).

use crate::runner::shell::{self, Script};
use crate::script;
use kubexm_manifests::model::Plugin;

use crate::pipeline::ops::{Op, RunCommand};

/// CNI plugin binaries the network plugins install into `/opt/cni/bin`.
const CNI_PLUGIN_BINARIES: &str =
    "flannel calico calico-ipam cilium-cni install multus kube-ovn hybridnet";
/// Interfaces Kubernetes networking creates on nodes.
const INTERFACES: &str = "cni0 flannel.1 flannel-v6.1 vxlan.calico vxlan-v6.calico cilium_host cilium_net cilium_vxlan kube-ipvs0 nodelocaldns ovn0 genev_sys_6081 vxlan_sys_4789 stt_sys_7471";
/// Interfaces named by a plugin per pod or per host interface (`ip -o link` names matching
/// this extended regex): hybridnet's veth host ends and VXLAN devices.
const INTERFACE_PATTERN: &str = "^hybr[0-9a-f]+$|\\.vxlan[46]$";
/// iptables rules and chains of kube-proxy, the CNI plugins and NodeLocal DNSCache.
pub const IPTABLES_PATTERN: &str =
    "KUBE-|FLANNEL|cali-|CILIUM|CNI-|OVN-|HYBRIDNET-|169\\.254\\.25\\.10";
/// CNI state directories and the pod logs.
/// (multus keeps its kubeconfig in `net.d/multus.d`; kube-ovn's Open vSwitch and OVN keep
/// their databases under `/etc/origin`, sockets under `/run`; hybridnet's daemon its socket.)
const STATE: &str = "/var/lib/cni /run/flannel /var/run/calico /var/lib/calico /var/run/cilium /etc/cni/net.d/multus.d /etc/origin/ovn /etc/origin/openvswitch /etc/origin/ovs_ipsec_keys /run/openvswitch /run/ovn /var/log/kube-ovn /var/log/ovn /var/log/openvswitch /opt/ovs-config /run/cni/hybridnet.sock /var/log/pods /var/log/containers";
/// CNI configurations of the network plugins KubeXM installs.
const CONFIGS: &str = "/etc/cni/net.d/*flannel* /etc/cni/net.d/*calico* /etc/cni/net.d/*cilium* /etc/cni/net.d/calico-kubeconfig /etc/cni/net.d/00-multus.conf /etc/cni/net.d/00-multus.conflist /etc/cni/net.d/*kube-ovn* /etc/cni/net.d/*hybridnet*";

/// The op removing every trace (see the module); a no-op when none is left.
pub fn remove_pod_network_traces() -> Op {
    let cni: Vec<String> = CNI_PLUGIN_BINARIES
        .split_whitespace()
        .map(|b| format!("/opt/cni/bin/{b}"))
        .collect();
    let cni_gone = Script::join(cni.iter().map(|b| script!("[ ! -e {b} ]", b = b)), " && ");
    // Interface names (without `@peer`) matching INTERFACE_PATTERN.
    let by_pattern = script!(
        "ip -o link show 2>/dev/null | awk -F': ' '{{print $2}}' | sed 's/@.*//' | grep -E '{INTERFACE_PATTERN}'"
    );
    Op::Run(
        RunCommand::new(script!(
            "rm -f -- {cni} {CONFIGS}\nrm -rf -- {STATE}\nrmdir /etc/cni/net.d /etc/cni /etc/origin /run/cni 2>/dev/null || true\nif command -v ovs-dpctl >/dev/null 2>&1; then ovs-dpctl del-dp ovs-system 2>/dev/null || true; fi\nfor i in $({by_pattern}); do ip link delete \"$i\" 2>/dev/null || true; done\nfor n in /run/netns/cni-*; do [ -e \"$n\" ] || continue; ip netns delete \"${{n##*/}}\" 2>/dev/null || {{ umount -l \"$n\" 2>/dev/null; rm -f \"$n\"; }}; done\nfor i in {INTERFACES}; do ip link delete \"$i\" 2>/dev/null || true; done\nif command -v ipvsadm >/dev/null 2>&1; then ipvsadm --clear 2>/dev/null || true; fi\nfor t in iptables ip6tables; do\n  command -v $t-save >/dev/null 2>&1 || continue\n  if $t-save 2>/dev/null | grep -qE '{IPTABLES_PATTERN}'; then $t-save | grep -vE '{IPTABLES_PATTERN}' | $t-restore; fi\ndone",
            cni = shell::words(&cni),
            by_pattern = by_pattern
        ))
        .unless(script!(
            "{cni_gone} && for f in {CONFIGS} {STATE} /run/netns/cni-*; do [ ! -e \"$f\" ] || exit 1; done && for i in {INTERFACES}; do ! ip link show \"$i\" >/dev/null 2>&1 || exit 1; done && ! {by_pattern} >/dev/null && for t in iptables ip6tables; do ! $t-save 2>/dev/null | grep -qE '{IPTABLES_PATTERN}' || exit 1; done", cni_gone = cni_gone, by_pattern = by_pattern
        )),
    )
}

/// What one plugin leaves on a node: a subset of the lists above, removed when `apply` replaces
/// the plugin with another (kube-proxy's and NodeLocal DNSCache's traces, the pods' network
/// namespaces, the runtime's CNI binaries and `/var/lib/cni` stay: the pods are recreated under
/// the new plugin afterwards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginTraces {
    /// Binaries in `/opt/cni/bin`.
    pub binaries: &'static [&'static str],
    /// CNI configurations (globs under `/etc/cni/net.d`).
    pub configs: &'static [&'static str],
    /// State files and directories.
    pub state: &'static [&'static str],
    /// Interfaces by name.
    pub interfaces: &'static [&'static str],
    /// Interfaces by `ip -o link` name (extended regex), if any.
    pub interface_pattern: Option<&'static str>,
    /// iptables rules and chains (extended regex), if any.
    pub iptables: Option<&'static str>,
    /// Open vSwitch's kernel datapath (kube-ovn).
    pub ovs_datapath: bool,
}

/// The traces of `plugin` (multus: its own, not its delegate's); `None` for `none`, whose CNI
/// KubeXM did not install.
pub fn plugin_traces(plugin: Plugin) -> Option<PluginTraces> {
    let t = match plugin {
        Plugin::Flannel => PluginTraces {
            binaries: &["flannel"],
            configs: &["/etc/cni/net.d/*flannel*"],
            state: &["/run/flannel"],
            interfaces: &["cni0", "flannel.1", "flannel-v6.1"],
            interface_pattern: None,
            iptables: Some("FLANNEL"),
            ovs_datapath: false,
        },
        Plugin::Calico => PluginTraces {
            binaries: &["calico", "calico-ipam", "install"],
            configs: &[
                "/etc/cni/net.d/*calico*",
                "/etc/cni/net.d/calico-kubeconfig",
            ],
            state: &["/var/run/calico", "/var/lib/calico"],
            interfaces: &["vxlan.calico", "vxlan-v6.calico"],
            interface_pattern: None,
            iptables: Some("cali-"),
            ovs_datapath: false,
        },
        Plugin::Cilium => PluginTraces {
            binaries: &["cilium-cni"],
            configs: &["/etc/cni/net.d/*cilium*"],
            state: &["/var/run/cilium"],
            interfaces: &["cilium_host", "cilium_net", "cilium_vxlan"],
            interface_pattern: None,
            iptables: Some("CILIUM"),
            ovs_datapath: false,
        },
        Plugin::KubeOvn => PluginTraces {
            binaries: &["kube-ovn"],
            configs: &["/etc/cni/net.d/*kube-ovn*"],
            state: &[
                "/etc/origin/ovn",
                "/etc/origin/openvswitch",
                "/etc/origin/ovs_ipsec_keys",
                "/run/openvswitch",
                "/run/ovn",
                "/var/log/kube-ovn",
                "/var/log/ovn",
                "/var/log/openvswitch",
                "/opt/ovs-config",
            ],
            interfaces: &["ovn0", "genev_sys_6081", "vxlan_sys_4789", "stt_sys_7471"],
            interface_pattern: None,
            iptables: Some("OVN-"),
            ovs_datapath: true,
        },
        Plugin::Hybridnet => PluginTraces {
            binaries: &["hybridnet"],
            configs: &["/etc/cni/net.d/*hybridnet*"],
            state: &["/run/cni/hybridnet.sock"],
            interfaces: &[],
            interface_pattern: Some(INTERFACE_PATTERN),
            iptables: Some("HYBRIDNET-"),
            ovs_datapath: false,
        },
        Plugin::Multus => PluginTraces {
            binaries: &["multus"],
            configs: &[
                "/etc/cni/net.d/00-multus.conf",
                "/etc/cni/net.d/00-multus.conflist",
            ],
            state: &["/etc/cni/net.d/multus.d"],
            interfaces: &[],
            interface_pattern: None,
            iptables: None,
            ovs_datapath: false,
        },
        Plugin::None => return None,
    };
    Some(t)
}

impl PluginTraces {
    /// Its files under `root` (`""` on a node): binaries, configurations, state.
    fn files(&self, root: &str) -> Vec<String> {
        self.binaries
            .iter()
            .map(|b| format!("{root}/opt/cni/bin/{b}"))
            .chain(
                self.configs
                    .iter()
                    .chain(self.state)
                    .map(|f| format!("{root}{f}")),
            )
            .collect()
    }

    /// The shell command removing its files under `root`.
    fn remove_files(&self, root: &str) -> Script {
        script!("rm -rf -- {}", shell::globs(&self.files(root).join(" ")))
    }

    /// The shell check that none of its files is left under `root`.
    fn files_gone(&self, root: &str) -> Script {
        script!(
            "for f in {}; do [ ! -e \"$f\" ] || exit 1; done",
            shell::globs(&self.files(root).join(" "))
        )
    }

    /// `ip -o link` names matching its pattern.
    fn by_pattern(&self) -> Option<Script> {
        self.interface_pattern.map(|p| {
            script!(
                "ip -o link show 2>/dev/null | awk -F': ' '{{print $2}}' | sed 's/@.*//' | grep -E '{p}'",
                p = shell::in_single_quotes(p)
            )
        })
    }

    /// The op removing these traces on a node; a no-op when none is left.
    pub fn remove(&self) -> Op {
        let mut run = vec![self.remove_files("")];
        let mut check = vec![self.files_gone("")];
        if self.ovs_datapath {
            run.push(Script::new("if command -v ovs-dpctl >/dev/null 2>&1; then ovs-dpctl del-dp ovs-system 2>/dev/null || true; fi"));
        }
        if let Some(list) = self.by_pattern() {
            run.push(script!(
                "for i in $({list}); do ip link delete \"$i\" 2>/dev/null || true; done",
                list = list
            ));
            check.push(script!("! {list} >/dev/null", list = list));
        }
        if !self.interfaces.is_empty() {
            let names = shell::words(self.interfaces);
            run.push(script!(
                "for i in {names}; do ip link delete \"$i\" 2>/dev/null || true; done",
                names = names
            ));
            check.push(script!(
                "for i in {names}; do ! ip link show \"$i\" >/dev/null 2>&1 || exit 1; done",
                names = names
            ));
        }
        if let Some(p) = self.iptables {
            let p = shell::in_single_quotes(p);
            run.push(script!(
                "for t in iptables ip6tables; do\n  command -v $t-save >/dev/null 2>&1 || continue\n  if $t-save 2>/dev/null | grep -qE '{p}'; then $t-save | grep -vE '{p}' | $t-restore; fi\ndone",
                p = p
            ));
            check.push(script!(
                "for t in iptables ip6tables; do ! $t-save 2>/dev/null | grep -qE '{p}' || exit 1; done",
                p = p
            ));
        }
        Op::Run(RunCommand::new(Script::join(run, "\n")).unless(Script::join(check, " && ")))
    }
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
        std::fs::remove_dir(net.join("multus.d")).expect("rmdir");
        assert!(gone(root.path()), "nothing left again");
    }

    #[test]
    fn kube_ovn_and_hybridnet_leftovers_are_each_seen() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        for (what, path, dir) in [
            ("kube-ovn's CNI binary", "opt/cni/bin/kube-ovn", false),
            ("hybridnet's CNI binary", "opt/cni/bin/hybridnet", false),
            (
                "kube-ovn's configuration",
                "etc/cni/net.d/01-kube-ovn.conflist",
                false,
            ),
            (
                "hybridnet's configuration",
                "etc/cni/net.d/06-hybridnet.conflist",
                false,
            ),
            ("OVN's database", "etc/origin/ovn", true),
            ("Open vSwitch's database", "etc/origin/openvswitch", true),
            ("Open vSwitch's sockets", "run/openvswitch", true),
            ("OVN's sockets", "run/ovn", true),
            ("kube-ovn's logs", "var/log/kube-ovn", true),
            ("hybridnet's socket", "run/cni/hybridnet.sock", false),
        ] {
            let p = r.join(path);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            if dir {
                std::fs::create_dir_all(&p).expect("mkdir");
            } else {
                std::fs::write(&p, "").expect("write");
            }
            assert!(!gone(r), "{what} is still there");
            if dir {
                std::fs::remove_dir(&p).expect("rmdir");
            } else {
                std::fs::remove_file(&p).expect("rm");
            }
            assert!(gone(r), "{what} removed: nothing left");
        }
    }

    #[test]
    fn plugin_interfaces_and_chains_are_matched_by_their_patterns() {
        let matches = |pattern: &str, name: &str| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s\\n' \"$1\" | grep -qE '{pattern}'"))
                .arg("sh")
                .arg(name)
                .status()
                .expect("sh")
                .success()
        };
        for name in ["hybr0a1b2c3d4e5", "eth0.vxlan4", "bond0.vxlan6"] {
            assert!(matches(INTERFACE_PATTERN, name), "{name}");
        }
        for name in [
            "eth0",
            "vxlan.calico",
            "cali12345",
            "hybridnet",
            "eth0.vxlan",
        ] {
            assert!(!matches(INTERFACE_PATTERN, name), "{name}");
        }
        for rule in [
            "-A POSTROUTING -m comment --comment \"kube-ovn postrouting rules\" -j OVN-POSTROUTING",
            ":HYBRIDNET-POSTROUTING - [0:0]",
        ] {
            assert!(matches(IPTABLES_PATTERN, rule), "{rule}");
        }
        for name in ["ovn0", "genev_sys_6081", "vxlan_sys_4789"] {
            assert!(INTERFACES.split(' ').any(|i| i == name), "{name}");
        }
    }

    const PLUGINS: [Plugin; 6] = [
        Plugin::Flannel,
        Plugin::Calico,
        Plugin::Cilium,
        Plugin::KubeOvn,
        Plugin::Hybridnet,
        Plugin::Multus,
    ];

    /// `delete` removes at least what a plugin change removes: every plugin's traces are in
    /// the lists of [`remove_pod_network_traces`].
    #[test]
    fn every_plugins_traces_are_among_what_delete_removes() {
        assert!(plugin_traces(Plugin::None).is_none());
        for p in PLUGINS {
            let t = plugin_traces(p).expect("traces");
            for b in t.binaries {
                assert!(CNI_PLUGIN_BINARIES.split(' ').any(|x| x == *b), "{p:?} {b}");
            }
            for f in t.configs {
                assert!(CONFIGS.split(' ').any(|x| x == *f), "{p:?} {f}");
            }
            for f in t.state {
                assert!(STATE.split(' ').any(|x| x == *f), "{p:?} {f}");
            }
            for i in t.interfaces {
                assert!(INTERFACES.split(' ').any(|x| x == *i), "{p:?} {i}");
            }
            if let Some(i) = t.iptables {
                assert!(IPTABLES_PATTERN.split('|').any(|x| x == i), "{p:?} {i}");
            }
            if let Some(i) = t.interface_pattern {
                assert_eq!(i, INTERFACE_PATTERN, "{p:?}");
            }
        }
    }

    /// A plugin change removes the old plugin's files and nothing of the other plugins', of
    /// kube-proxy's or of the runtime's (run on a directory standing for `/`).
    #[test]
    fn a_plugin_change_removes_the_old_plugins_files_only() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path().to_str().expect("utf-8");
        let files = [
            "opt/cni/bin/flannel",
            "opt/cni/bin/bridge",
            "opt/cni/bin/calico",
            "etc/cni/net.d/10-flannel.conflist",
            "etc/cni/net.d/10-calico.conflist",
            "var/lib/cni/networks/cbr0/last_reserved_ip.0",
            "run/flannel/subnet.env",
        ];
        for f in files {
            let p = root.path().join(f);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, "x").expect("write");
        }
        let sh = |cmd: &str| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .status()
                .expect("sh")
                .success()
        };
        let flannel = plugin_traces(Plugin::Flannel).expect("flannel");
        assert!(!sh(&flannel.files_gone(r)), "flannel's files are there");
        assert!(sh(&flannel.remove_files(r)));
        assert!(sh(&flannel.files_gone(r)), "flannel's files removed");
        for (f, kept) in [
            ("opt/cni/bin/flannel", false),
            ("etc/cni/net.d/10-flannel.conflist", false),
            ("run/flannel/subnet.env", false),
            ("opt/cni/bin/bridge", true),
            ("opt/cni/bin/calico", true),
            ("etc/cni/net.d/10-calico.conflist", true),
            ("var/lib/cni/networks/cbr0/last_reserved_ip.0", true),
        ] {
            assert_eq!(root.path().join(f).exists(), kept, "{f}");
        }
        // Nothing to remove: the op's command is a no-op with its files gone.
        assert!(sh(&flannel.remove_files(r)));
        let Op::Run(op) = flannel.remove() else {
            panic!("not a command");
        };
        let check = op.unless.expect("unless");
        assert!(
            check.contains("flannel.1") && check.contains("FLANNEL"),
            "{check}"
        );
        assert!(!op.command.contains("KUBE-") && !op.command.contains("kube-ipvs0"));
    }
}
