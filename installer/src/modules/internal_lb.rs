//! The internal load balancer (`loadBalancer.mode: internal`): static pods the kubelet runs,
//! images from the private registry. The steps here only need the API server port and the
//! masters' addresses, so the binary path (`kubernetes.type: kubexm`) can use them as they are.
//!
//! * **kube-vip** (`internal.type: kube-vip`): a static pod on every master holding the VIP on
//!   `loadBalancer.interface` (ARP, leader election through a Lease in kube-system), so the API
//!   endpoint (`domain` → VIP) moves with the leader. On the first master it is written
//!   **before** `kubeadm init`, since init already talks to the endpoint; from Kubernetes v1.29
//!   kubeadm's `admin.conf` gets its rights only at the end of init, so kube-vip first uses
//!   `super-admin.conf` there and is switched to `admin.conf` right after init. The other
//!   masters get it after they joined (their `admin.conf` exists then).
//! * **haproxy / nginx** (`internal.type: haproxy|nginx`): a local proxy static pod on every
//!   worker that is not a master, listening on `127.0.0.1:6443` (the API server port, free on a
//!   worker) with every master as backend and a health endpoint on `127.0.0.1:8081/healthz`.
//!   It cannot come before the join: `kubeadm join` reads the cluster's configuration through
//!   the endpoint before it starts the kubelet, which alone can run the proxy. So workers join
//!   through the endpoint (its domain resolves to the first master), then get the proxy, then
//!   their kubelet is pointed at `https://127.0.0.1:6443`; kube-proxy's kubeconfig (one for the
//!   whole cluster) is pointed there too, which on a master is the local API server. The API
//!   server certificate carries `127.0.0.1` (see [`super::kubeadm::config`]).

use crate::modules::k8s::{APISERVER_PORT, LOCAL_API};
use crate::script;
use std::time::Duration;

use super::images::node_image;
use super::loadbalancer::{api_backends, Backend, HEALTH_PORT};
use crate::context::InstallContext;
use crate::modules::k8s::image_named;
use crate::pipeline::ops::{CreateDir, Op, RenderTemplate, RunCommand, WaitFor};
use crate::pipeline::{Facts, Node, Step, StepError};
use crate::runner::shell;
use kubexm_manifests::model::{InternalLbType, LbMode};

/// Static pod manifests directory.
pub const MANIFESTS: &str = "/etc/kubernetes/manifests";
/// kube-vip's static pod.
pub const KUBE_VIP_MANIFEST: &str = "/etc/kubernetes/manifests/kube-vip.yaml";
/// The local proxy's static pod.
pub const PROXY_MANIFEST: &str = "/etc/kubernetes/manifests/kube-lb.yaml";
/// The local proxy's configuration directory.
pub const PROXY_DIR: &str = "/etc/kubexm/kube-lb";

/// Whether every node reaches the API on `127.0.0.1:6443` (`loadBalancer.mode: internal` with
/// haproxy or nginx): a master's own API server, a worker's local proxy to every master.
pub fn local_api_on_every_node(ctx: &InstallContext) -> bool {
    let lb = &ctx.cluster.file.spec.load_balancer;
    lb.mode == LbMode::Internal && lb.internal.kind != InternalLbType::KubeVip
}

/// Where host-network clients on any node (the kubelet, kube-proxy, cilium's agent) reach the
/// API so that losing any one master does not cut them off: `127.0.0.1:6443` with the internal
/// haproxy/nginx ([`local_api_on_every_node`]; the control-plane endpoint's name resolves to the
/// first master there), else the control-plane endpoint (a VIP, held by keepalived or kube-vip,
/// or the first master when `loadBalancer.mode` is none).
pub fn api_for_host_network(ctx: &InstallContext) -> Result<(String, u16), StepError> {
    if local_api_on_every_node(ctx) {
        return Ok(("127.0.0.1".to_string(), APISERVER_PORT));
    }
    let e = ctx.control_plane_endpoint()?;
    Ok((e.domain, e.port))
}

/// Which local proxy runs on the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalProxyKind {
    /// haproxy.
    Haproxy,
    /// nginx (stream proxy).
    Nginx,
}

/// The local API proxy workers run: `loadBalancer.mode: internal` with type haproxy or nginx
/// (kube-vip holds a VIP on the masters instead; other modes run none).
pub fn local_proxy_kind(ctx: &InstallContext) -> Option<LocalProxyKind> {
    use kubexm_manifests::model::{InternalLbType, LbMode};
    let lb = &ctx.cluster.file.spec.load_balancer;
    if lb.mode != LbMode::Internal {
        return None;
    }
    match lb.internal.kind {
        InternalLbType::Haproxy => Some(LocalProxyKind::Haproxy),
        InternalLbType::Nginx => Some(LocalProxyKind::Nginx),
        InternalLbType::KubeVip => None,
    }
}

/// The environment variable kube-vip reads the VIP's prefix length from: `vip_subnet` from
/// kube-vip v1.0 (its manifests and flag reference; `vip_cidr` is no longer read), `vip_cidr`
/// before. The version is the image tag's (`…/kube-vip:v1.0.3`); an unreadable tag gets the
/// current name.
pub fn kube_vip_subnet_env(image: &str) -> &'static str {
    let tag = image.rsplit_once(':').map_or("", |(_, t)| t);
    let major: Option<u32> = tag
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok());
    match major {
        Some(0) => "vip_cidr",
        _ => "vip_subnet",
    }
}

/// kube-vip's static pod with the given kubeconfig.
pub struct KubeVip {
    cluster: String,
    image: String,
    vip: String,
    interface: String,
    kubeconfig: &'static str,
    /// Only while the cluster is not initialised: the manifest is staged and copied into place
    /// only when `admin.conf` does not exist yet.
    before_init: bool,
}

/// Where the pre-init kube-vip manifest is staged (root only).
pub const KUBE_VIP_BOOTSTRAP: &str = "/etc/kubernetes/kubexm/kube-vip-bootstrap.yaml";

impl KubeVip {
    /// kube-vip for the cluster, using `kubeconfig` on the node.
    pub fn new(ctx: &InstallContext, kubeconfig: &'static str) -> Result<Self, StepError> {
        let lb = &ctx.cluster.file.spec.load_balancer;
        let vip = lb.vip.clone().ok_or_else(|| {
            StepError::Invalid("loadBalancer.vip is required for kube-vip".into())
        })?;
        let interface = lb.interface.clone().ok_or_else(|| {
            StepError::Invalid(
                "loadBalancer.interface is required: the interface kube-vip puts the VIP on".into(),
            )
        })?;
        Ok(Self {
            cluster: ctx.cluster.file.metadata.name.clone(),
            image: node_image(ctx, &image_named(ctx, "kube-vip")?)?,
            vip,
            interface,
            kubeconfig,
            before_init: false,
        })
    }

    /// kube-vip for the first master before `kubeadm init` (v1.29+: with `super-admin.conf`):
    /// put in place only while `/etc/kubernetes/admin.conf` does not exist, so a re-run does
    /// not swap the running kube-vip's kubeconfig back and forth (two restarts, a VIP gap).
    pub fn before_init(ctx: &InstallContext, kubeconfig: &'static str) -> Result<Self, StepError> {
        let mut k = Self::new(ctx, kubeconfig)?;
        k.before_init = true;
        Ok(k)
    }

    /// The rendered static pod.
    pub fn render(&self) -> Result<RenderTemplate, StepError> {
        let mut c = tera::Context::new();
        c.insert("cluster", &self.cluster);
        c.insert("image", &self.image);
        c.insert("vip", &self.vip);
        c.insert("cidr", if self.vip.contains(':') { "128" } else { "32" });
        c.insert("subnet_env", kube_vip_subnet_env(&self.image));
        c.insert("interface", &self.interface);
        c.insert("port", &APISERVER_PORT);
        c.insert("kubeconfig", self.kubeconfig);
        RenderTemplate::new(
            "internal-lb/kube-vip.yaml.tera",
            &c,
            KUBE_VIP_MANIFEST,
            0o600,
        )
    }
}

impl Step for KubeVip {
    fn name(&self) -> &str {
        "kube-vip"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = vec![Op::Mkdir(CreateDir {
            path: MANIFESTS.into(),
            mode: 0o755,
        })];
        if !self.before_init {
            ops.push(Op::Template(self.render()?));
            return Ok(ops);
        }
        let mut staged = self.render()?;
        staged.file.dest = KUBE_VIP_BOOTSTRAP.to_string();
        ops.push(Op::Mkdir(CreateDir {
            path: crate::modules::k8s::STATE_DIR.into(),
            mode: 0o700,
        }));
        ops.push(Op::Template(staged));
        let admin = crate::modules::k8s::ADMIN_CONF;
        ops.push(Op::Run(
            RunCommand::new(script!(
                "install -m 0600 {KUBE_VIP_BOOTSTRAP} {KUBE_VIP_MANIFEST}"
            ))
            .unless(script!(
                "[ -s {admin} ] || cmp -s {KUBE_VIP_BOOTSTRAP} {KUBE_VIP_MANIFEST}", admin = admin
            ))
            .undo(script!(
                "if cmp -s {KUBE_VIP_BOOTSTRAP} {KUBE_VIP_MANIFEST}; then rm -f {KUBE_VIP_MANIFEST}; fi"
            )),
        ));
        Ok(ops)
    }
}

/// The local proxy's configuration and static pod on a worker.
pub struct LocalProxy {
    kind: LocalProxyKind,
    cluster: String,
    image: String,
    backends: Vec<Backend>,
}

impl LocalProxy {
    /// The proxy for the cluster's masters.
    pub fn new(ctx: &InstallContext, kind: LocalProxyKind) -> Result<Self, StepError> {
        let name = match kind {
            LocalProxyKind::Haproxy => "haproxy",
            LocalProxyKind::Nginx => "nginx",
        };
        let backends = api_backends(ctx)?;
        Ok(Self {
            kind,
            cluster: ctx.cluster.file.metadata.name.clone(),
            image: node_image(ctx, &image_named(ctx, name)?)?,
            backends,
        })
    }

    /// The configuration and the static pod.
    pub fn render(&self) -> Result<Vec<RenderTemplate>, StepError> {
        let (config, pod, file) = match self.kind {
            LocalProxyKind::Haproxy => (
                "internal-lb/haproxy.cfg.tera",
                "internal-lb/haproxy-pod.yaml.tera",
                "haproxy.cfg",
            ),
            LocalProxyKind::Nginx => (
                "internal-lb/nginx.conf.tera",
                "internal-lb/nginx-pod.yaml.tera",
                "nginx.conf",
            ),
        };
        let mut c = tera::Context::new();
        c.insert("cluster", &self.cluster);
        c.insert("image", &self.image);
        c.insert("port", &APISERVER_PORT);
        c.insert("health_port", &HEALTH_PORT);
        c.insert("backends", &self.backends);
        c.insert("config", &format!("{PROXY_DIR}/{file}"));
        let config = RenderTemplate::new(config, &c, format!("{PROXY_DIR}/{file}"), 0o644)?;
        c.insert("config_sha256", &config.file.sha256);
        let pod = RenderTemplate::new(pod, &c, PROXY_MANIFEST, 0o600)?;
        Ok(vec![config, pod])
    }
}

impl Step for LocalProxy {
    fn name(&self) -> &str {
        "local-api-proxy"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = vec![
            Op::Mkdir(CreateDir {
                path: PROXY_DIR.into(),
                mode: 0o755,
            }),
            Op::Mkdir(CreateDir {
                path: MANIFESTS.into(),
                mode: 0o755,
            }),
        ];
        ops.extend(self.render()?.into_iter().map(Op::Template));
        ops.push(Op::Wait(WaitFor {
            what: "the local API proxy's health endpoint".into(),
            check: format!("curl -fsS -o /dev/null http://127.0.0.1:{HEALTH_PORT}/healthz"),
            timeout: Duration::from_secs(300),
            interval: Duration::from_secs(2),
        }));
        Ok(ops)
    }
}

/// The node's kubelet talks to the API on `127.0.0.1:6443` (its kubeconfig's server): through
/// the local proxy on a worker, to its own API server on a master (so no master's kubelet
/// depends on the first master, to which the endpoint's name resolves); restarted when that
/// changed.
pub struct KubeletViaLocalProxy;

impl Step for KubeletViaLocalProxy {
    fn name(&self) -> &str {
        "kubelet-via-local-proxy"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let conf = "/etc/kubernetes/kubelet.conf";
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "cp -a {conf} {conf}.kubexm-orig 2>/dev/null || true\nsed -i 's#^\\( *server: \\).*#\\1{LOCAL_API}#' {conf}\nsystemctl restart kubelet", conf = conf
            ))
            .unless(script!("grep -q '^ *server: {LOCAL_API}$' {conf}", conf = conf))
            .undo(script!(
                "if [ -e {conf}.kubexm-orig ]; then mv -f {conf}.kubexm-orig {conf}; systemctl restart kubelet; fi", conf = conf
            )),
        )])
    }
}

/// kube-proxy's kubeconfig (a ConfigMap for the whole cluster) names the local proxy (the
/// local API server on masters), then its pods restart. From the first master.
pub struct KubeProxyViaLocalProxy {
    /// The control-plane endpoint URL (what the revert puts back).
    pub endpoint: String,
}

impl Step for KubeProxyViaLocalProxy {
    fn name(&self) -> &str {
        "kube-proxy-via-local-proxy"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = crate::modules::k8s::kubectl();
        let get = script!("{k} -n kube-system get configmap kube-proxy -o yaml", k = k);
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "set -e\n{get} | sed 's#^\\( *server: \\).*#\\1{LOCAL_API}#' | {k} replace -f - >/dev/null\n{k} -n kube-system rollout restart daemonset kube-proxy >/dev/null", get = get, k = k
            ))
            .unless(script!(
                "{get} | grep -q {pattern}",
                get = get,
                pattern = format!("server: {LOCAL_API}$")
            ))
            .undo(script!(
                "{get} | sed 's#^\\( *server: \\).*#\\1{endpoint}#' | {k} replace -f - >/dev/null || true",
                get = get,
                endpoint = shell::in_single_quotes(&self.endpoint),
                k = k
            ))
            .timeout(Duration::from_secs(120)),
        )])
    }
}

#[cfg(test)]
mod tests {
    use super::kube_vip_subnet_env;

    /// kube-vip v1.0 reads the VIP's prefix length from `vip_subnet`, v0.x from `vip_cidr`.
    #[test]
    fn kube_vip_prefix_variable_per_version() {
        assert_eq!(
            kube_vip_subnet_env("reg.local/kube-vip/kube-vip:v0.7.2"),
            "vip_cidr"
        );
        assert_eq!(
            kube_vip_subnet_env("ghcr.io/kube-vip/kube-vip:v1.0.3"),
            "vip_subnet"
        );
        assert_eq!(
            kube_vip_subnet_env("reg.local:5000/kube-vip@sha256"),
            "vip_subnet"
        );
    }
}
