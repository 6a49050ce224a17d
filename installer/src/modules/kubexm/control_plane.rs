//! Module `kubexm-control-plane`: kube-apiserver, kube-controller-manager and kube-scheduler as
//! systemd services on the masters (plus kubectl), every master's API server ready, then the
//! cluster RBAC applied from the first master.
//!
//! * kube-apiserver: etcd per `etcd.type` (the KubeXM etcd members with the etcd module's
//!   `node-<name>` client certificate, or the external endpoints with the user's files);
//!   `--bind-address` is the node's address when a KubeXM load balancer on the same node holds
//!   the API port ([`crate::modules::loadbalancer::api_server_must_bind_node_address`]), else
//!   `0.0.0.0`; authorization `Node,RBAC`, `NodeRestriction`, front-proxy (aggregation) flags,
//!   service-account issuer `https://kubernetes.default.svc.<dnsDomain>`, kubelets verified
//!   against the cluster CA.
//! * kube-controller-manager: signs CSRs with the cluster CA, allocates node pod CIDRs from
//!   `network.podCidr`, one service account per controller, leader election.
//! * kube-scheduler: a `KubeSchedulerConfiguration` file with leader election.
//!
//! `kubernetes.featureGates` go to every component; `apiserverArgs`, `controllerManagerArgs`
//! and `schedulerArgs` replace or add flags.

use crate::modules::k8s::APISERVER_PORT;
use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::EtcdType;

use super::certs::etcd_client_paths;
use super::flags::Flags;
use super::{service_ops, Binaries, KubexmCluster, CLUSTER_ADMINS};
use crate::modules::etcd::EtcdLayout;
use crate::modules::loadbalancer::api_server_must_bind_node_address;
use crate::modules::security;
use crate::pipeline::ops::{Op, RenderTemplate, RunCommand, WaitFor};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};

/// The control-plane module.
pub struct KubexmControlPlaneModule(pub Arc<crate::context::InstallContext>);

impl Module for KubexmControlPlaneModule {
    fn name(&self) -> &str {
        "kubexm-control-plane"
    }
    fn skip(&self) -> Option<String> {
        super::skip_reason(&self.0)
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let k = Arc::new(KubexmCluster::new(&self.0)?);
        let masters = self.0.with_role(Role::Master);
        let first = self.0.first_master()?.name.clone();
        Ok(vec![
            Task::new("control-plane-binaries", masters.clone()).step(binaries(&self.0, &k)),
            // One master at a time, each answering again before the next changes: a changed
            // flag (`kubexm-install apply`) never restarts every API server at once.
            Task::new("install-control-plane", masters)
                .serial()
                .step(ApiServer { k: k.clone() })
                .step(ControllerManager { k: k.clone() })
                .step(Scheduler { k: k.clone() })
                .step(WaitControlPlane { k: k.clone() }),
            Task::new("cluster-rbac", [first.clone()]).step(ClusterRbac { k: k.clone() }),
            // The same admin kubeconfig on the control host as the kubeadm path gives.
            Task::new("fetch-admin-kubeconfig", [first]).step(
                crate::modules::kubeadm::init::FetchAdminKubeconfig {
                    src: k.layout.conf("admin.conf"),
                    dest: crate::modules::k8s::admin_kubeconfig_path(&self.0),
                },
            ),
        ])
    }
}

/// The control-plane services, each a binary of the same name.
pub const SERVICES: [&str; 3] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The masters' binaries from the bundle: the control-plane services and kubectl.
pub fn binaries(ctx: &Arc<crate::context::InstallContext>, k: &KubexmCluster) -> Binaries {
    let mut components = SERVICES.to_vec();
    components.push("kubectl");
    Binaries {
        ctx: ctx.clone(),
        layout: k.layout.clone(),
        components,
    }
}

/// A component's systemd unit rendered from `kubexm/service.tera`.
pub fn unit(
    k: &KubexmCluster,
    unit: &str,
    description: &str,
    after: &[&str],
    flags: &Flags,
) -> Result<RenderTemplate, StepError> {
    let mut c = k.context();
    c.insert("unit", unit);
    c.insert("description", description);
    c.insert("binary", &k.layout.bin(unit));
    c.insert("flags", &flags.words());
    let mut after: Vec<&str> = after.to_vec();
    after.push("network-online.target");
    c.insert("after", &after);
    c.insert("wants", &after);
    RenderTemplate::new("kubexm/service.tera", &c, k.layout.unit(unit), 0o644)
}

/// etcd client URLs of the API server.
pub fn etcd_servers(k: &KubexmCluster) -> Vec<String> {
    let e = &k.ctx.cluster.file.spec.etcd;
    match e.kind {
        EtcdType::External => e.endpoints.clone(),
        _ => EtcdLayout::from_context(&k.ctx).client_endpoints(),
    }
}

/// kube-apiserver's flags on `node`.
pub fn apiserver_flags(k: &KubexmCluster, node: &Node) -> Flags {
    let l = &k.layout;
    let spec = k.spec();
    let net = &k.ctx.cluster.file.spec.network;
    let (etcd_ca, etcd_cert, etcd_key) = etcd_client_paths(k, node);
    let bind = if api_server_must_bind_node_address(&k.ctx, node) {
        node.internal_address.as_str()
    } else {
        "0.0.0.0"
    };
    let flags = Flags::new()
        .with("advertise-address", &node.internal_address)
        .with("allow-privileged", true)
        .with("authorization-mode", "Node,RBAC")
        .with("bind-address", bind)
        .with("client-ca-file", l.pki("ca.crt"))
        .with("enable-admission-plugins", "NodeRestriction")
        .with("etcd-cafile", etcd_ca)
        .with("etcd-certfile", etcd_cert)
        .with("etcd-keyfile", etcd_key)
        .with("etcd-servers", etcd_servers(k).join(","))
        .with("kubelet-certificate-authority", l.pki("ca.crt"))
        .with(
            "kubelet-client-certificate",
            l.pki("apiserver-kubelet-client.crt"),
        )
        .with("kubelet-client-key", l.pki("apiserver-kubelet-client.key"))
        .with(
            "kubelet-preferred-address-types",
            "InternalIP,ExternalIP,Hostname",
        )
        .with("proxy-client-cert-file", l.pki("front-proxy-client.crt"))
        .with("proxy-client-key-file", l.pki("front-proxy-client.key"))
        .with("requestheader-allowed-names", "front-proxy-client")
        .with("requestheader-client-ca-file", l.pki("front-proxy-ca.crt"))
        .with("requestheader-extra-headers-prefix", "X-Remote-Extra-")
        .with("requestheader-group-headers", "X-Remote-Group")
        .with("requestheader-username-headers", "X-Remote-User")
        .with("secure-port", APISERVER_PORT)
        .with(
            "service-account-issuer",
            format!("https://kubernetes.default.svc.{}", spec.dns_domain),
        )
        .with("service-account-key-file", l.pki("sa.pub"))
        .with("service-account-signing-key-file", l.pki("sa.key"))
        .with(
            "service-cluster-ip-range",
            net.service_cidr.replace(' ', ""),
        )
        .with("tls-cert-file", l.pki("apiserver.crt"))
        .with("tls-private-key-file", l.pki("apiserver.key"));
    let audited = if security::enabled(&k.ctx) {
        security::audit_flags()
            .into_iter()
            .fold(flags, |f, (name, value)| f.with(name, value))
    } else {
        flags
    };
    audited
        .feature_gates(&spec.feature_gates)
        .user(&spec.apiserver_args)
}

/// Before v1.22 (kube-controller-manager) and v1.23 (kube-scheduler) the components also serve
/// plain HTTP on `--port` unless it is 0 (as kubeadm of those versions sets it).
fn no_insecure_port(f: Flags, serves_insecurely: bool) -> Flags {
    if serves_insecurely {
        f.with("port", 0)
    } else {
        f
    }
}

/// kube-controller-manager's flags.
pub fn controller_manager_flags(k: &KubexmCluster) -> Flags {
    let l = &k.layout;
    let spec = k.spec();
    let net = &k.ctx.cluster.file.spec.network;
    let kubeconfig = l.conf("controller-manager.conf");
    let f = no_insecure_port(
        Flags::new(),
        k.version.controller_manager_serves_insecurely(),
    );
    f.with("allocate-node-cidrs", true)
        .with("authentication-kubeconfig", &kubeconfig)
        .with("authorization-kubeconfig", &kubeconfig)
        .with("bind-address", "127.0.0.1")
        .with("client-ca-file", l.pki("ca.crt"))
        .with("cluster-cidr", net.pod_cidr.replace(' ', ""))
        .with("cluster-name", &k.name)
        // One certificate, the signing CA's (`ca.crt` is a bundle during a CA rotation).
        .with("cluster-signing-cert-file", l.pki("ca-signer.crt"))
        .with("cluster-signing-key-file", l.pki("ca.key"))
        .with("kubeconfig", &kubeconfig)
        .with("leader-elect", true)
        .with("requestheader-client-ca-file", l.pki("front-proxy-ca.crt"))
        .with("root-ca-file", l.pki("ca.crt"))
        .with("service-account-private-key-file", l.pki("sa.key"))
        .with(
            "service-cluster-ip-range",
            net.service_cidr.replace(' ', ""),
        )
        .with("use-service-account-credentials", true)
        .feature_gates(&spec.feature_gates)
        .user(&spec.controller_manager_args)
}

/// kube-scheduler's flags.
pub fn scheduler_flags(k: &KubexmCluster) -> Flags {
    let l = &k.layout;
    let spec = k.spec();
    let kubeconfig = l.conf("scheduler.conf");
    no_insecure_port(Flags::new(), k.version.scheduler_serves_insecurely())
        .with("authentication-kubeconfig", &kubeconfig)
        .with("authorization-kubeconfig", &kubeconfig)
        .with("bind-address", "127.0.0.1")
        .with("config", l.conf("kube-scheduler.yaml"))
        .feature_gates(&spec.feature_gates)
        .user(&spec.scheduler_args)
}

/// kube-apiserver's unit on a master.
pub struct ApiServer {
    /// The cluster.
    pub k: Arc<KubexmCluster>,
}

impl ApiServer {
    /// The rendered files for `node`.
    /// The rendered files for `node`: with the security enhancement, the audit policy first (a
    /// change restarts the API server).
    pub fn files(&self, node: &Node) -> Result<Vec<RenderTemplate>, StepError> {
        let mut files = Vec::new();
        if security::enabled(&self.k.ctx) {
            files.push(security::audit_policy(&self.k.ctx)?);
        }
        files.push(unit(
            &self.k,
            "kube-apiserver",
            "Kubernetes API server (KubeXM)",
            &[],
            &apiserver_flags(&self.k, node),
        )?);
        Ok(files)
    }
}

impl Step for ApiServer {
    fn name(&self) -> &str {
        "kube-apiserver"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = if security::enabled(&self.k.ctx) {
            security::audit_dirs()
        } else {
            Vec::new()
        };
        ops.extend(service_ops("kube-apiserver", self.files(node)?));
        Ok(ops)
    }
}

/// kube-controller-manager's unit on a master.
pub struct ControllerManager {
    k: Arc<KubexmCluster>,
}

impl ControllerManager {
    /// The controller manager of `k`.
    pub fn new(k: Arc<KubexmCluster>) -> Self {
        Self { k }
    }

    /// The rendered files.
    pub fn files(&self) -> Result<Vec<RenderTemplate>, StepError> {
        Ok(vec![unit(
            &self.k,
            "kube-controller-manager",
            "Kubernetes controller manager (KubeXM)",
            &["kube-apiserver.service"],
            &controller_manager_flags(&self.k),
        )?])
    }
}

impl Step for ControllerManager {
    fn name(&self) -> &str {
        "kube-controller-manager"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(service_ops("kube-controller-manager", self.files()?))
    }
}

/// kube-scheduler's configuration and unit on a master.
pub struct Scheduler {
    k: Arc<KubexmCluster>,
}

impl Scheduler {
    /// The scheduler of `k`.
    pub fn new(k: Arc<KubexmCluster>) -> Self {
        Self { k }
    }

    /// The rendered files.
    pub fn files(&self) -> Result<Vec<RenderTemplate>, StepError> {
        let l = &self.k.layout;
        let mut c = self.k.context();
        c.insert("kubeconfig", &l.conf("scheduler.conf"));
        c.insert(
            "api_version",
            self.k.version.scheduler_config_api().api_version(),
        );
        Ok(vec![
            RenderTemplate::new(
                "kubexm/kube-scheduler.yaml.tera",
                &c,
                l.conf("kube-scheduler.yaml"),
                0o644,
            )?,
            unit(
                &self.k,
                "kube-scheduler",
                "Kubernetes scheduler (KubeXM)",
                &["kube-apiserver.service"],
                &scheduler_flags(&self.k),
            )?,
        ])
    }
}

impl Step for Scheduler {
    fn name(&self) -> &str {
        "kube-scheduler"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(service_ops("kube-scheduler", self.files()?))
    }
}

/// Every master's API server answers `/readyz` (with `super-admin.conf`, against the node
/// itself), and its controller-manager and scheduler answer `/healthz`.
pub struct WaitControlPlane {
    /// The cluster.
    pub k: Arc<KubexmCluster>,
}

impl Step for WaitControlPlane {
    fn name(&self) -> &str {
        "wait-control-plane"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let l = &self.k.layout;
        let wait = |what: String, check: String| {
            Op::Wait(WaitFor {
                what,
                check,
                timeout: Duration::from_secs(300),
                interval: Duration::from_secs(2),
            })
        };
        Ok(vec![
            wait(
                format!("kube-apiserver on {} ready", node.name),
                format!(
                    "{} --kubeconfig {} get --raw=/readyz >/dev/null",
                    l.bin("kubectl"),
                    l.conf("super-admin.conf")
                ),
            ),
            wait(
                "kube-controller-manager healthy".to_string(),
                "curl -fsSk -o /dev/null https://127.0.0.1:10257/healthz".to_string(),
            ),
            wait(
                "kube-scheduler healthy".to_string(),
                "curl -fsSk -o /dev/null https://127.0.0.1:10259/healthz".to_string(),
            ),
        ])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(960),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// `kubectl apply` of a manifest already on the node, skipped when `kubectl diff` finds nothing
/// to change; undone by deleting what it created.
pub fn apply(kubectl: &Script, file: &str, verify: Script) -> Op {
    Op::Run(
        RunCommand::new(script!(
            "{kubectl} apply -f {file}",
            kubectl = kubectl,
            file = file
        ))
        .unless(script!(
            "{kubectl} diff -f {file} >/dev/null 2>&1",
            kubectl = kubectl,
            file = file
        ))
        .verify(verify)
        .undo(script!(
            "{kubectl} delete --ignore-not-found -f {file} >/dev/null 2>&1 || true",
            kubectl = kubectl,
            file = file
        )),
    )
}

/// The ClusterRoleBinding making `kubeadm:cluster-admins` cluster-admin, applied with
/// `super-admin.conf` (nothing else can before it exists).
pub struct ClusterRbac {
    k: Arc<KubexmCluster>,
}

impl ClusterRbac {
    /// The rendered manifest.
    pub fn file(&self) -> Result<RenderTemplate, StepError> {
        let mut c = self.k.context();
        c.insert("admins", CLUSTER_ADMINS);
        RenderTemplate::new(
            "kubexm/cluster-rbac.yaml.tera",
            &c,
            format!("{}/kubexm-rbac.yaml", self.k.layout.addons_dir()),
            0o644,
        )
    }
}

impl Step for ClusterRbac {
    fn name(&self) -> &str {
        "cluster-rbac"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let l = &self.k.layout;
        let file = self.file()?;
        let dest = file.file.dest.clone();
        let kubectl = script!(
            "{} --kubeconfig {}",
            l.bin("kubectl"),
            l.conf("super-admin.conf")
        );
        Ok(vec![
            Op::Mkdir(crate::pipeline::ops::CreateDir {
                path: l.addons_dir(),
                mode: 0o755,
            }),
            Op::Template(file),
            apply(
                &kubectl,
                &dest,
                script!(
                    "{kubectl} get clusterrolebinding {CLUSTER_ADMINS} >/dev/null",
                    kubectl = kubectl
                ),
            ),
        ])
    }
}
