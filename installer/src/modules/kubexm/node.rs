//! Module `kubexm-nodes`: kubelet and kube-proxy as systemd services on every master and worker,
//! then every node registered and labelled (from the first master).
//!
//! * kubelet: `/etc/kubernetes/kubelet-config.yaml` (cgroup driver systemd, the runtime's CRI
//!   socket, `clusterDNS` = the NodeLocal DNSCache address (`dns::NODELOCAL_DNS_IP`, which
//!   forwards to CoreDNS at the tenth service address), `clusterDomain`, `maxPods`, x509 client
//!   CA + webhook authentication and authorization, no anonymous access, no read-only port,
//!   static pods from `/etc/kubernetes/manifests`, its KubeXM certificate as serving
//!   certificate); masters that are not workers register with the control-plane `NoSchedule`
//!   taint. `resolvConf` is `/etc/kubernetes/kubelet-resolv.conf`, a link to systemd-resolved's
//!   upstream list when that runs (its 127.0.0.53 stub would loop CoreDNS), else to
//!   `/etc/resolv.conf`. Before v1.35 the pause image is passed with
//!   `--pod-infra-container-image` (so image garbage collection keeps it); v1.35 removed the
//!   flag (the runtime's sandbox image is pinned instead).
//! * kube-proxy: `/etc/kubernetes/kube-proxy.yaml` with `mode` from `kubernetes.proxyMode` and
//!   `clusterCIDR` = `network.podCidr`.
//!
//! Labels (applied with kubectl, since NodeRestriction forbids kubelets to set
//! `node-role.kubernetes.io/*`): `node-role.kubernetes.io/control-plane` on masters,
//! `node-role.kubernetes.io/worker` on workers, and each host's `labels`.

use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::modules::internal_lb::{KubeVip, LocalProxy};
use crate::modules::k8s::ADMIN_CONF;
use std::time::Duration;

use kubexm_manifests::kube_version::Taint as KubeTaint;
use kubexm_manifests::version::KubeVersion;

use super::control_plane::unit;
use super::flags::Flags;
use super::{service_ops, Binaries, KubexmCluster};
use crate::context::InstallContext;
use crate::modules::runtime::pause_reference;
use crate::pipeline::ops::{CreateDir, Op, RenderTemplate, RunCommand, WaitFor};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

/// The nodes module.
pub struct KubexmNodesModule(pub Arc<InstallContext>);

impl Module for KubexmNodesModule {
    fn name(&self) -> &str {
        "kubexm-nodes"
    }
    fn skip(&self) -> Option<String> {
        super::skip_reason(&self.0)
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let k = Arc::new(KubexmCluster::new(&self.0)?);
        let first = self.0.first_master()?.name.clone();
        let pause = if k.version.kubelet_has_pod_infra_image_flag() {
            Some(self.0.pull_reference(&pause_reference(&self.0)?)?)
        } else {
            None
        };
        let mut tasks = Vec::new();
        // kube-vip's static pod is in place before the masters' kubelets start: they reach the
        // API through the VIP it holds (a kubelet runs static pods without the API).
        if k.kube_vip() {
            tasks.push(
                Task::new("kube-vip", self.0.with_role(Role::Master))
                    .step(KubeVip::new(&self.0, ADMIN_CONF)?),
            );
        }
        tasks.push(
            Task::new("install-node-services", k.node_names())
                .step(Binaries {
                    ctx: self.0.clone(),
                    layout: k.layout.clone(),
                    components: vec!["kubelet", "kube-proxy"],
                })
                .step(Kubelet {
                    k: k.clone(),
                    pause,
                })
                .step(KubeProxy { k: k.clone() }),
        );
        // Workers that are not masters reach the API through a local proxy (their kubelet and
        // kube-proxy kubeconfigs point at it from the start); its static pod runs once the
        // kubelet is up.
        if let Some(kind) = k.local_proxy() {
            let workers: Vec<String> = self
                .0
                .nodes
                .iter()
                .filter(|n| n.has_role(Role::Worker) && !n.has_role(Role::Master))
                .map(|n| n.name.clone())
                .collect();
            if !workers.is_empty() {
                tasks.push(
                    Task::new("local-api-proxy", workers).step(LocalProxy::new(&self.0, kind)?),
                );
            }
        }
        tasks.push(Task::new("register-nodes", [first]).step(RegisterNodes { k }));
        Ok(tasks)
    }
}

/// The link kubelet's `resolvConf` points at.
pub const RESOLV_LINK: &str = "kubelet-resolv.conf";

/// kubelet's configuration, unit and `resolvConf` link on a node.
pub struct Kubelet {
    k: Arc<KubexmCluster>,
    /// The pause image as nodes pull it, for `--pod-infra-container-image` (before v1.35).
    pause: Option<String>,
}

impl Kubelet {
    /// The kubelet of `k`, with the pause image for `--pod-infra-container-image` (before v1.35).
    pub fn new(k: Arc<KubexmCluster>, pause: Option<String>) -> Self {
        Self { k, pause }
    }
}

impl Kubelet {
    /// kubelet's flags on `node`: the runtime's flags for the version ([`crate::modules::runtime::cri::Cri::kubelet_flags`]),
    /// the pause image before v1.35, and the control-plane taints as a flag before v1.23 (whose
    /// configuration file has no `registerWithTaints`).
    pub fn flags(&self, node: &Node) -> Flags {
        let l = &self.k.layout;
        let v = self.k.version;
        let mut f = Flags::new()
            .with("config", l.conf("kubelet-config.yaml"))
            .with("hostname-override", &node.name)
            .with("kubeconfig", l.conf("kubelet.conf"))
            .with("node-ip", crate::modules::dns::node_ip(&self.k.ctx, node));
        for (name, value) in self.k.cri().kubelet_flags(v) {
            f = f.with(name, value);
        }
        if let Some(p) = &self.pause {
            f = f.with("pod-infra-container-image", p);
        }
        let taints = register_taints(node, v);
        if !taints.is_empty() && !v.kubelet_config_has_register_with_taints() {
            let list: Vec<String> = taints.iter().map(ToString::to_string).collect();
            f = f.with("register-with-taints", list.join(","));
        }
        f.user(&self.k.spec().kubelet_args)
    }

    /// The rendered files for `node`: kubelet-config.yaml and the unit.
    pub fn files(&self, node: &Node) -> Result<Vec<RenderTemplate>, StepError> {
        let k = &self.k;
        let l = &k.layout;
        let spec = k.spec();
        let mut c = k.node_context(node);
        c.insert("client_ca", &l.pki("ca.crt"));
        c.insert(
            "runtime_endpoint",
            &k.cri().kubelet_config_endpoint(k.version),
        );
        // Pods ask the NodeLocal DNSCache on their node (the `nodelocaldns` module runs for
        // both paths), which forwards cluster names to CoreDNS at the tenth service address.
        c.insert("cluster_dns", &crate::modules::dns::local_ips(&k.ctx));
        c.insert("cluster_domain", &spec.dns_domain);
        c.insert("max_pods", &spec.max_pods);
        c.insert("fail_cgroup_v1", &spec.kubelet.fail_cgroup_v1);
        c.insert("static_pod_path", &l.manifests_dir());
        c.insert("resolv_conf", &l.conf(RESOLV_LINK));
        c.insert("tls_cert", &l.pki("kubelet.crt"));
        c.insert("tls_key", &l.pki("kubelet.key"));
        let taints: Vec<Taint> = if k.version.kubelet_config_has_register_with_taints() {
            register_taints(node, k.version)
                .iter()
                .map(|t| Taint {
                    key: t.key,
                    effect: t.effect,
                })
                .collect()
        } else {
            Vec::new()
        };
        c.insert("register_taints", &taints);
        Ok(vec![
            RenderTemplate::new(
                "kubexm/kubelet-config.yaml.tera",
                &c,
                l.conf("kubelet-config.yaml"),
                0o644,
            )?,
            unit(
                k,
                "kubelet",
                "Kubernetes node agent (KubeXM)",
                k.cri().kubelet_after(),
                &self.flags(node),
            )?,
        ])
    }
}

impl Step for Kubelet {
    fn name(&self) -> &str {
        "kubelet"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let l = &self.k.layout;
        let link = shell::quoted(&l.conf(RESOLV_LINK));
        let target = Script::new("t=/etc/resolv.conf\nif systemctl is-active -q systemd-resolved && [ -s /run/systemd/resolve/resolv.conf ]; then t=/run/systemd/resolve/resolv.conf; fi");
        let mut ops = vec![
            Op::Mkdir(CreateDir {
                path: l.manifests_dir(),
                mode: 0o755,
            }),
            Op::Run(
                RunCommand::new(script!(
                    "{target}\nln -sfn \"$t\" {link}",
                    target = target,
                    link = link
                ))
                .unless(script!(
                    "{target}\n[ \"$(readlink {link})\" = \"$t\" ]",
                    target = target,
                    link = link
                ))
                .undo(script!("rm -f {link}", link = link)),
            ),
        ];
        ops.extend(service_ops("kubelet", self.files(node)?));
        // A restarted kubelet serves again before the next step (or node) relies on it: its Node
        // stays Ready for a while whatever the kubelet does.
        ops.push(Op::Run(
            RunCommand::new(script!(
                "i=0; until curl -fsS -o /dev/null http://127.0.0.1:10248/healthz; do\n  i=$((i + 2)); [ $i -lt {s} ] || {{ echo 'the kubelet on {n} was not healthy within {s} s after its restart' >&2; journalctl -u kubelet -n 20 --no-pager >&2 || true; exit 1; }}\n  sleep 2\ndone",
                s = KUBELET_RESTART_TIMEOUT.as_secs(),
                n = shell::in_single_quotes(&node.name),
            ))
            .when_changed()
            .timeout(KUBELET_RESTART_TIMEOUT + std::time::Duration::from_secs(30)),
        ));
        Ok(ops)
    }
}

/// How long a restarted kubelet may take to answer its `/healthz`.
pub const KUBELET_RESTART_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// kube-proxy's configuration and unit on a node.
pub struct KubeProxy {
    k: Arc<KubexmCluster>,
}

impl KubeProxy {
    /// kube-proxy of `k`.
    pub fn new(k: Arc<KubexmCluster>) -> Self {
        Self { k }
    }
}

impl KubeProxy {
    /// The rendered files for `node`: kube-proxy.yaml and the unit.
    pub fn files(&self, node: &Node) -> Result<Vec<RenderTemplate>, StepError> {
        let k = &self.k;
        let l = &k.layout;
        let spec = k.spec();
        let mut c = k.node_context(node);
        c.insert("kubeconfig", &l.conf("kube-proxy.conf"));
        c.insert(
            "conntrack_max_per_core",
            &spec.kube_proxy.conntrack_max_per_core,
        );
        c.insert(
            "cluster_cidr",
            &k.ctx.cluster.file.spec.network.pod_cidr.replace(' ', ""),
        );
        c.insert("mode", k.ctx.cluster.proxy_mode().as_str());
        let flags = Flags::new()
            .with("config", l.conf("kube-proxy.yaml"))
            .user(&spec.kube_proxy_args);
        Ok(vec![
            RenderTemplate::new(
                "kubexm/kube-proxy.yaml.tera",
                &c,
                l.conf("kube-proxy.yaml"),
                0o644,
            )?,
            unit(
                k,
                "kube-proxy",
                "Kubernetes network proxy (KubeXM)",
                &[],
                &flags,
            )?,
        ])
    }
}

impl Step for KubeProxy {
    fn name(&self) -> &str {
        "kube-proxy"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(service_ops("kube-proxy", self.files(node)?))
    }
}

/// A taint as the kubelet configuration template writes it.
#[derive(Debug, Clone, serde::Serialize)]
struct Taint {
    key: &'static str,
    effect: &'static str,
}

/// The taints a node registers with: the version's control-plane taints (as kubeadm of that
/// version sets them) on a master that is not also a worker; none otherwise.
pub fn register_taints(node: &Node, version: KubeVersion) -> &'static [KubeTaint] {
    if node.has_role(Role::Master) && !node.has_role(Role::Worker) {
        version.control_plane_taints()
    } else {
        &[]
    }
}

/// The labels KubeXM keeps on `node`: its role labels (a master gets the control-plane labels
/// kubeadm of the version sets: `master` and `control-plane` before v1.24, `control-plane`
/// from v1.24) and cluster.yaml's `labels`.
pub fn node_labels(ctx: &InstallContext, node: &Node) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    if node.has_role(Role::Master) {
        for l in ctx.cluster.version.control_plane_labels() {
            labels.insert((*l).to_string(), String::new());
        }
    }
    if node.has_role(Role::Worker) {
        labels.insert("node-role.kubernetes.io/worker".to_string(), String::new());
    }
    if let Some(h) = ctx
        .cluster
        .file
        .spec
        .hosts
        .iter()
        .find(|h| h.name == node.name)
    {
        labels.extend(h.labels.clone());
    }
    labels
}

/// Waits until every node has registered (not Ready: the CNI comes later), then labels them.
pub struct RegisterNodes {
    k: Arc<KubexmCluster>,
}

impl Step for RegisterNodes {
    fn name(&self) -> &str {
        "register-nodes"
    }
    fn ops(&self, master: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let kubectl = self.k.kubectl(master);
        let names = self.k.node_names();
        let mut ops = vec![Op::Wait(WaitFor {
            what: format!("nodes {} registered", names.join(",")),
            check: format!(
                "for n in {}; do {kubectl} get node \"$n\" -o name >/dev/null 2>&1 || {{ echo \"node $n has not registered\" >&2; exit 1; }}; done",
                names.join(" ")
            ),
            timeout: Duration::from_secs(300),
            interval: Duration::from_secs(3),
        })];
        for name in &names {
            let Some(node) = self.k.ctx.node(name) else {
                continue;
            };
            let labels = node_labels(&self.k.ctx, node);
            if labels.is_empty() {
                continue;
            }
            let set = shell::words(labels.iter().map(|(k, v)| format!("{k}={v}")));
            let selector: Vec<String> = labels
                .iter()
                .map(|(k, v)| {
                    if v.is_empty() {
                        k.clone()
                    } else {
                        format!("{k}={v}")
                    }
                })
                .collect();
            ops.push(Op::Run(
                RunCommand::new(script!(
                    "{kubectl} label node {name} --overwrite {set} >/dev/null",
                    kubectl = kubectl,
                    name = name,
                    set = set
                ))
                .unless(script!(
                    "{kubectl} get nodes -l {selector} -o name | grep -qxF node/{name}",
                    kubectl = kubectl,
                    selector = selector.join(","),
                    name = name
                ))
                .undo(script!(
                    "{kubectl} label node {name} {keys} >/dev/null 2>&1 || true",
                    kubectl = kubectl,
                    name = name,
                    keys = shell::words(labels.keys().map(|k| format!("{k}-")))
                )),
            ));
        }
        Ok(ops)
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(420),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}
