//! The kubexm part of the `delete` pipeline (first after the preflight, so the runtime is still
//! there), on every master and worker:
//!
//! 1. The Kubernetes services whose units KubeXM wrote are stopped and disabled.
//! 2. Every pod sandbox left in the runtime is removed (`crictl rmp -a -f`), so deleting the
//!    runtime afterwards leaves no containers behind.
//! 3. `kube-proxy --cleanup` removes its iptables/IPVS rules, then the pod network's traces
//!    go ([`crate::modules::network::traces::remove_pod_network_traces`]: CNI files and
//!    state, pod network namespaces, interfaces, the remaining chains).
//! 4. kubelet's mounts under `/var/lib/kubelet` are unmounted and its state and the pod logs
//!    (`/var/log/pods`, `/var/log/containers`) removed.
//! 5. What the install wrote is removed: the binaries, units, `/etc/kubernetes/pki`, the
//!    kubeconfigs and component configurations, the manifests KubeXM applied
//!    (`/etc/kubernetes/kubexm`: NodeLocal DNSCache, addons), the staged bundle
//!    files; `/etc/kubernetes` (and `manifests/`, `addons/`) only when that leaves them empty.

use crate::runner::shell::Script;
use crate::script;
use std::sync::Arc;

use super::{skip_reason, KubexmCluster, Layout, SERVICES};
use crate::context::InstallContext;
use crate::modules::delete::{written_by_kubexm, Ops};
use crate::modules::runtime::{ARTIFACTS, BIN_DIR};
use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::{Module, StepError, Task};
use crate::runner::shell;

/// Binaries KubeXM installs for the kubexm path.
pub const BINARIES: [&str; 6] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "kube-proxy",
];

/// Files directly under `/etc/kubernetes` KubeXM writes.
pub const CONF_FILES: [&str; 11] = [
    "admin.conf",
    "super-admin.conf",
    "controller-manager.conf",
    "scheduler.conf",
    "kubelet.conf",
    "kube-proxy.conf",
    "kube-scheduler.yaml",
    "kubelet-config.yaml",
    "kube-proxy.yaml",
    super::node::RESOLV_LINK,
    "addons/kubexm-rbac.yaml",
];

/// The kubexm delete module.
pub struct KubexmDeleteModule(pub Arc<InstallContext>);

/// The kubexm delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> KubexmDeleteModule {
    KubexmDeleteModule(ctx.clone())
}

impl Module for KubexmDeleteModule {
    fn name(&self) -> &str {
        "delete-kubexm"
    }
    fn skip(&self) -> Option<String> {
        skip_reason(&self.0)
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let k = KubexmCluster::new(&self.0)?;
        Ok(vec![Task::new("delete-kubernetes", k.node_names()).step(
            Ops {
                name: "remove-kubernetes",
                ops: remove_ops(&k.layout, &k.cri().endpoint()),
            },
        )])
    }
}

/// The generic steps of the removal (see the module docs).
pub fn remove_ops(l: &Layout, runtime_endpoint: &str) -> Vec<Op> {
    let q = |v: &[String]| shell::words(v);
    let stop = Script::join(
        SERVICES.iter().rev().map(|u| {
            script!(
                "if {written}; then systemctl disable --now {u} 2>/dev/null || systemctl stop {u} 2>/dev/null || true; fi",
                written = written_by_kubexm(&l.unit(u)),
                u = u
            )
        }),
        "\n",
    );
    let stopped = Script::join(
        SERVICES.iter().map(|u| {
            script!(
                "{{ ! {written} || {{ ! systemctl is-enabled -q {u} 2>/dev/null && ! systemctl is-active -q {u}; }}; }}",
                written = written_by_kubexm(&l.unit(u)),
                u = u
            )
        }),
        " && ",
    );
    let crictl = script!("{BIN_DIR}/crictl --runtime-endpoint {}", runtime_endpoint);
    let socket = runtime_endpoint.trim_start_matches("unix://");
    let kube_proxy = l.bin("kube-proxy");
    let state = [
        l.kubelet_dir.clone(),
        "/var/log/pods".to_string(),
        "/var/log/containers".to_string(),
    ];
    let mut files: Vec<String> = BINARIES.iter().map(|b| l.bin(b)).collect();
    files.extend(SERVICES.iter().map(|u| l.unit(u)));
    files.extend(CONF_FILES.iter().map(|f| l.conf(f)));
    files.push(format!("{}/coredns.yaml", l.addons_dir()));
    // The internal load balancer's static pods (kube-vip on masters, the local API proxy on
    // workers); its configuration directory goes with /etc/kubexm in node preparation's delete.
    for manifest in ["kube-vip.yaml", "kube-lb.yaml"] {
        files.push(format!("{}/{manifest}", l.manifests_dir()));
    }
    let dirs = [l.addons_dir(), l.manifests_dir(), l.kube_dir.clone()];
    let staged: Vec<String> = BINARIES
        .iter()
        .map(|b| format!("{ARTIFACTS}/{b}"))
        .collect();
    let mut gone: Vec<Script> = files
        .iter()
        .chain(staged.iter())
        .map(|p| script!("[ ! -e {} ]", p))
        .collect();
    gone.push(script!("[ ! -e {} ]", l.pki_dir()));
    // KubeXM's own directory: the manifests and addons it applied (apply.rs).
    let own = crate::modules::apply::MANIFESTS_DIR
        .rsplit_once('/')
        .map_or(crate::modules::apply::MANIFESTS_DIR, |(d, _)| d);
    gone.push(script!("[ ! -e {} ]", own));
    vec![
        Op::Run(RunCommand::new(stop).unless(stopped)),
        Op::Run(
            RunCommand::new(script!("{crictl} rmp -a -f >/dev/null", crictl = crictl))
                .unless(script!(
                    "[ ! -x {BIN_DIR}/crictl ] || [ ! -S {socket} ] || [ -z \"$({crictl} pods -q 2>/dev/null)\" ]", socket = socket, crictl = crictl
                )),
        ),
        Op::Run(
            // Done when kube-proxy's own chains are gone (the kubelet's KUBE-*-CANARY,
            // KUBE-FIREWALL and KUBE-MARK-* stay for the pod network's cleanup below); the
            // check was once only "no binary", which a real --cleanup never satisfies.
            RunCommand::new(script!("{kube_proxy} --cleanup >/dev/null 2>&1 || true", kube_proxy = kube_proxy)).unless(
                script!(
                    "[ ! -x {kube_proxy} ] || ! iptables-save -t nat 2>/dev/null | grep -qE '^:KUBE-(SERVICES|NODEPORTS|SVC-|SEP-)'", kube_proxy = kube_proxy
                ),
            ),
        ),
        crate::modules::network::traces::remove_pod_network_traces(),
        Op::Run(
            RunCommand::new(script!(
                "awk -v d={k}/ 'index($2, d) == 1 {{ print $2 }}' /proc/mounts | sort -r | while read -r m; do umount -l \"$m\" || true; done\nrm -rf -- {state}",
                k = &l.kubelet_dir,
                state = q(&state),
            ))
            .unless(Script::join(
                state.iter().map(|p| script!("[ ! -e {} ]", p)),
                " && ",
            )),
        ),
        Op::Run(
            RunCommand::new(script!(
                "rm -f -- {files}\nrm -rf -- {pki} {own} {staged}\nfor d in {dirs}; do rmdir -- \"$d\" 2>/dev/null || true; done\nsystemctl daemon-reload",
                files = q(&files),
                pki = &l.pki_dir(),
                own = own,
                staged = q(&staged),
                dirs = q(&dirs),
            ))
            .unless(Script::join(gone, " && ")),
        ),
    ]
}
