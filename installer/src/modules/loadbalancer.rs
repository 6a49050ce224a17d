//! Module: the external load balancer in front of the API servers (`loadBalancer.mode:
//! external`), on the `loadbalancer` role nodes.
//!
//! * `kubexm-kh`: keepalived + haproxy; `kubexm-kn`: keepalived + nginx (stream proxy).
//! * The proxy binds `VIP:port` on **every** load-balancer node (`net.ipv4.ip_nonlocal_bind=1`
//!   from `/etc/sysctl.d/98-kubexm-lb.conf`), so a backup node serves as soon as keepalived moves
//!   the VIP to it. Backends: every master's internal address on 6443, health-checked.
//! * keepalived: one VRRP instance on `loadBalancer.interface`; `virtual_router_id` is derived
//!   from the cluster name (FNV-1a, 1..=255, stable across runs); every node is `state BACKUP`
//!   with priorities descending in node order (first node 150, then 140, …), preemption on, so
//!   the VIP settles on the first healthy node. Peers are unicast (the other load-balancer
//!   nodes' internal addresses): no multicast needed. A track script drops a node whose proxy
//!   is not active. No VRRP authentication (RFC 3768 removed it; PASS would only be obscurity).
//! * Health endpoint on every node: `http://127.0.0.1:8081/healthz` (haproxy: `monitor-uri`,
//!   plus `/stats`; nginx: a fixed 200).
//!
//! **Load-balancer nodes that are also masters**: the proxy holds `VIP:port` (6443 by default)
//! while the API server listens on 6443 too, so the API server must bind the node's own address
//! (`--bind-address=<internal address>`, the kubeadm `localAPIEndpoint.advertiseAddress`), not
//! `0.0.0.0` — otherwise one of the two cannot bind. [`api_server_must_bind_node_address`] tells
//! the Kubernetes module when that applies.

use crate::modules::k8s::APISERVER_PORT;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::sync::Arc;

use serde::Serialize;

use crate::context::InstallContext;
use crate::pipeline::ops::{
    Check, Op, Package, PackageSource, RenderTemplate, RunCommand, Systemd, SystemdAction, WaitFor,
};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use kubexm_manifests::model::{ExternalLbType, LbMode};

/// Port of the local health endpoint on load-balancer nodes.
pub const HEALTH_PORT: u16 = 8081;
/// The sysctl drop-in letting the proxy bind the VIP on backup nodes.
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/98-kubexm-lb.conf";
/// System user nginx workers run as (created when missing: Debian and RHEL differ).
pub const NGINX_USER: &str = "kubexm-lb";

/// The external load balancer.
pub struct LoadBalancerModule(pub Arc<InstallContext>);

/// `virtual_router_id` for a cluster: FNV-1a of its name mapped to 1..=255 (stable).
pub fn virtual_router_id(cluster: &str) -> u8 {
    let mut h: u32 = 0x811c_9dc5;
    for b in cluster.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    u8::try_from(h % 255).unwrap_or(0) + 1
}

/// Whether the API server on `node` must bind the node's own address instead of `0.0.0.0`:
/// the node is a load-balancer node of a KubeXM-managed external load balancer listening on the
/// API server's port.
pub fn api_server_must_bind_node_address(ctx: &InstallContext, node: &Node) -> bool {
    let lb = &ctx.cluster.file.spec.load_balancer;
    lb.mode == LbMode::External
        && lb.external.kind != ExternalLbType::External
        && lb.port == APISERVER_PORT
        && node.has_role(Role::Loadbalancer)
        && node.has_role(Role::Master)
}

/// Every master's API server (internal address, port 6443): the backends of any load balancer
/// in front of them.
pub fn api_backends(ctx: &InstallContext) -> Result<Vec<Backend>, StepError> {
    let backends: Vec<Backend> = ctx
        .with_role(Role::Master)
        .iter()
        .filter_map(|m| ctx.node(m))
        .map(|n| Backend {
            name: n.name.clone(),
            address: n.internal_address.clone(),
            port: APISERVER_PORT,
        })
        .collect();
    if backends.is_empty() {
        return Err(StepError::Invalid(
            "no host has the master role: the load balancer has no backends".to_string(),
        ));
    }
    Ok(backends)
}

/// Which proxy runs beside keepalived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    /// haproxy (`kubexm-kh`).
    Haproxy,
    /// nginx stream proxy (`kubexm-kn`).
    Nginx,
}

impl Proxy {
    fn unit(self) -> &'static str {
        match self {
            Proxy::Haproxy => "haproxy",
            Proxy::Nginx => "nginx",
        }
    }

    /// The proxy's configuration file (owned by its OS package; KubeXM writes it).
    fn conf(self) -> &'static str {
        match self {
            Proxy::Haproxy => "/etc/haproxy/haproxy.cfg",
            Proxy::Nginx => "/etc/nginx/nginx.conf",
        }
    }
}

impl Module for LoadBalancerModule {
    fn name(&self) -> &str {
        "loadbalancer"
    }

    fn skip(&self) -> Option<String> {
        let lb = &self.0.cluster.file.spec.load_balancer;
        match (lb.mode, lb.external.kind) {
            (LbMode::None, _) => Some(
                "loadBalancer.mode is none: the first master's address is the API endpoint"
                    .to_string(),
            ),
            (LbMode::Internal, _) => Some(
                "loadBalancer.mode is internal: the per-node proxy or kube-vip is deployed with Kubernetes, not on loadbalancer hosts"
                    .to_string(),
            ),
            (LbMode::External, ExternalLbType::External) => Some(
                "loadBalancer.external.type is external: the load balancer is not managed by KubeXM"
                    .to_string(),
            ),
            (LbMode::External, _) if self.0.with_role(Role::Loadbalancer).is_empty() => Some(
                "no host has the loadbalancer role: add hosts to roleGroups.loadbalancer"
                    .to_string(),
            ),
            _ => None,
        }
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let lb = &ctx.cluster.file.spec.load_balancer;
        let proxy = match lb.external.kind {
            ExternalLbType::KubexmKn => Proxy::Nginx,
            _ => Proxy::Haproxy,
        };
        let vip = lb.vip.clone().ok_or_else(|| {
            StepError::Invalid(
                "loadBalancer.vip is required for an external load balancer managed by KubeXM"
                    .to_string(),
            )
        })?;
        let interface = lb.interface.clone().ok_or_else(|| {
            StepError::Invalid(
                "loadBalancer.interface is required: the network interface keepalived puts the VIP on"
                    .to_string(),
            )
        })?;
        let cluster = ctx.cluster.cluster_name().to_string();
        let hosts = ctx.with_role(Role::Loadbalancer);
        let backends = api_backends(ctx)?;
        let lb_nodes: Vec<(String, String)> = hosts
            .iter()
            .filter_map(|h| ctx.node(h))
            .map(|n| (n.name.clone(), n.internal_address.clone()))
            .collect();
        let common = LbCommon {
            cluster,
            vip: vip.clone(),
            port: lb.port,
            proxy,
        };
        let first = hosts.first().cloned().unwrap_or_default();
        Ok(vec![
            Task::new("install-loadbalancer", hosts.clone())
                .step(KeepUnitStates { proxy })
                .step(LbPackages {
                    proxy,
                    source: super::osrepo::package_source(ctx),
                })
                .step(LbSysctl {
                    common: common.clone(),
                })
                .step(ProxyConfig {
                    common: common.clone(),
                    backends,
                })
                .step(KeepalivedConfig {
                    common,
                    interface: interface.clone(),
                    lb_nodes,
                }),
            Task::new("wait-vip", [first]).step(WaitVip { vip, interface }),
        ])
    }
}

#[derive(Debug, Clone)]
struct LbCommon {
    cluster: String,
    vip: String,
    port: u16,
    proxy: Proxy,
}

/// One API server behind the load balancer.
#[derive(Debug, Clone, Serialize)]
pub struct Backend {
    /// Node name.
    pub name: String,
    /// Internal address.
    pub address: String,
    /// Port.
    pub port: u16,
}

/// Whether keepalived and the proxy were enabled before their packages are installed (a package
/// install may enable them), so the delete leaves them as they were.
pub struct KeepUnitStates {
    proxy: Proxy,
}

impl Step for KeepUnitStates {
    fn name(&self) -> &str {
        "keep-lb-unit-states"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![
            super::delete::keep_unit_state(self.proxy.conf(), self.proxy.unit()),
            super::delete::keep_unit_state("/etc/keepalived/keepalived.conf", "keepalived"),
        ])
    }
}

/// keepalived and the proxy from the OS packages (skipped when installed;
/// [`kubexm_manifests::ospackages`], the list the bundle's repositories are built from).
pub struct LbPackages {
    proxy: Proxy,
    source: PackageSource,
}

impl Step for LbPackages {
    fn name(&self) -> &str {
        "install-lb-packages"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let set = match self.proxy {
            Proxy::Haproxy => kubexm_manifests::ospackages::LB_HAPROXY,
            Proxy::Nginx => kubexm_manifests::ospackages::LB_NGINX,
        };
        let v = |s: &[&str]| s.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        Ok(vec![Op::Package(Package {
            debs: v(set.debs),
            rpms: v(set.rpms),
            source: self.source.clone(),
        })])
    }
}

/// `net.ipv4.ip_nonlocal_bind=1` now and at boot.
pub struct LbSysctl {
    common: LbCommon,
}

impl Step for LbSysctl {
    fn name(&self) -> &str {
        "lb-nonlocal-bind"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut context = tera::Context::new();
        context.insert("cluster", &self.common.cluster);
        context.insert("vip", &self.common.vip);
        Ok(vec![
            Op::Template(RenderTemplate::new(
                "lb/sysctl.conf.tera",
                &context,
                SYSCTL_FILE,
                0o644,
            )?),
            Op::Run(
                RunCommand::new(script!("sysctl -q -p {SYSCTL_FILE}"))
                    .unless("[ \"$(cat /proc/sys/net/ipv4/ip_nonlocal_bind)\" = 1 ]")
                    .undo("sysctl -q -w net.ipv4.ip_nonlocal_bind=0 || true"),
            ),
        ])
    }
}

/// haproxy.cfg or nginx.conf, checked by the tool itself, the service enabled and restarted
/// when the file changed, and the local health endpoint answering.
pub struct ProxyConfig {
    common: LbCommon,
    backends: Vec<Backend>,
}

impl ProxyConfig {
    /// The rendered configuration (template name, destination, text).
    pub fn render(&self) -> Result<RenderTemplate, StepError> {
        let mut context = tera::Context::new();
        context.insert("cluster", &self.common.cluster);
        context.insert("vip", &self.common.vip);
        context.insert("port", &self.common.port);
        context.insert("health_port", &HEALTH_PORT);
        context.insert("backends", &self.backends);
        context.insert("user", NGINX_USER);
        match self.common.proxy {
            Proxy::Haproxy => RenderTemplate::new(
                "lb/haproxy.cfg.tera",
                &context,
                Proxy::Haproxy.conf(),
                0o644,
            ),
            Proxy::Nginx => {
                RenderTemplate::new("lb/nginx.conf.tera", &context, Proxy::Nginx.conf(), 0o644)
            }
        }
    }
}

impl Step for ProxyConfig {
    fn name(&self) -> &str {
        match self.common.proxy {
            Proxy::Haproxy => "haproxy-config",
            Proxy::Nginx => "nginx-config",
        }
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let unit = self.common.proxy.unit();
        let file = self.render()?;
        let dest = file.file.dest.clone();
        let mut ops = Vec::new();
        let check = match self.common.proxy {
            Proxy::Haproxy => format!("haproxy -c -q -f {dest}"),
            Proxy::Nginx => {
                ops.push(Op::Run(
                    RunCommand::new(script!(
                        "useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin {NGINX_USER}"
                    ))
                    .unless(script!("id -u {NGINX_USER} >/dev/null 2>&1"))
                    .undo(script!("userdel {NGINX_USER} 2>/dev/null || true")),
                ));
                format!("nginx -q -t -c {dest}")
            }
        };
        ops.push(super::delete::keep_original(&dest, unit));
        ops.push(Op::Template(file));
        ops.push(Op::Check(Check::new(
            format!("{unit} configuration"),
            format!(
                "{check} >&2 || {{ echo '{dest} is rejected by {unit} (above)' >&2; exit 1; }}"
            ),
        )));
        ops.push(Op::Systemd(Systemd::new(SystemdAction::EnableNow(
            unit.to_string(),
        ))));
        // A reload, not a restart: a changed backend list (add-node, delete-node) reaches a
        // running proxy without dropping its connections.
        ops.push(Op::Systemd(Systemd::new(SystemdAction::ReloadWhenChanged(
            unit.to_string(),
        ))));
        ops.push(Op::Wait(WaitFor {
            what: format!("{unit} health endpoint"),
            check: format!("curl -fsS -o /dev/null http://127.0.0.1:{HEALTH_PORT}/healthz"),
            timeout: std::time::Duration::from_secs(30),
            interval: std::time::Duration::from_secs(1),
        }));
        Ok(ops)
    }
}

/// keepalived.conf for the node (priority by node order, unicast peers), checked with
/// `keepalived -t`, enabled and restarted when it changed.
pub struct KeepalivedConfig {
    common: LbCommon,
    interface: String,
    /// (name, internal address) of every load-balancer node, in order.
    lb_nodes: Vec<(String, String)>,
}

impl KeepalivedConfig {
    /// The rendered keepalived.conf for `node`.
    pub fn render(&self, node: &Node) -> Result<RenderTemplate, StepError> {
        let index = self
            .lb_nodes
            .iter()
            .position(|(n, _)| *n == node.name)
            .ok_or_else(|| {
                StepError::Invalid(format!("{} is not a loadbalancer node", node.name))
            })?;
        let priority = 150usize.saturating_sub(10 * index).max(1);
        let peers: Vec<&str> = self
            .lb_nodes
            .iter()
            .filter(|(n, _)| *n != node.name)
            .map(|(_, a)| a.as_str())
            .collect();
        let mut context = tera::Context::new();
        context.insert("cluster", &self.common.cluster);
        context.insert("node", &node.name);
        context.insert("address", &node.internal_address);
        context.insert("vip", &self.common.vip);
        context.insert("interface", &self.interface);
        context.insert("router_id", &virtual_router_id(&self.common.cluster));
        context.insert("priority", &priority);
        context.insert("peers", &peers);
        context.insert("proxy", self.common.proxy.unit());
        RenderTemplate::new(
            "lb/keepalived.conf.tera",
            &context,
            "/etc/keepalived/keepalived.conf",
            0o644,
        )
    }
}

impl Step for KeepalivedConfig {
    fn name(&self) -> &str {
        "keepalived-config"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let file = self.render(node)?;
        let dest = file.file.dest.clone();
        Ok(vec![
            super::delete::keep_original(&dest, "keepalived"),
            Op::Template(file),
            Op::Check(Check::new(
                "keepalived configuration",
                format!(
                    "keepalived -t -f {} >&2 || {{ echo {} >&2; exit 1; }}",
                    crate::runner::shell::quoted(&dest),
                    crate::runner::shell::quoted(&format!(
                        "{dest} is rejected by keepalived (above)"
                    )),
                ),
            )),
            Op::Systemd(Systemd::new(SystemdAction::EnableNow(
                "keepalived".to_string(),
            ))),
            // keepalived re-reads its configuration on reload (SIGHUP) keeping the VIP where
            // it is while the instance is unchanged.
            Op::Systemd(Systemd::new(SystemdAction::ReloadWhenChanged(
                "keepalived".to_string(),
            ))),
        ])
    }
}

/// The first load-balancer node (highest priority) holds the VIP.
pub struct WaitVip {
    vip: String,
    interface: String,
}

impl Step for WaitVip {
    fn name(&self) -> &str {
        "wait-vip"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Wait(WaitFor {
            what: format!("VIP {} on {}", self.vip, self.interface),
            check: format!(
                "ip -o -4 addr show dev {} | grep -qF ' {}/'",
                self.interface, self.vip
            ),
            timeout: std::time::Duration::from_secs(60),
            interval: std::time::Duration::from_secs(1),
        })])
    }
}

/// The load-balancer part of the `delete` pipeline, on the `loadbalancer` nodes: keepalived
/// (first, so the VIP is released) and the proxy are stopped and disabled when their
/// configuration is KubeXM's, their original configurations put back (see
/// [`super::delete::restore_original`]: a unit enabled before the install is enabled again),
/// the sysctl drop-in removed (`ip_nonlocal_bind` set back to 0) and, for nginx, the
/// `kubexm-lb` user removed. The packages stay installed.
pub struct LoadBalancerDeleteModule(pub Arc<InstallContext>);

/// The load-balancer delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> LoadBalancerDeleteModule {
    LoadBalancerDeleteModule(ctx.clone())
}

impl Module for LoadBalancerDeleteModule {
    fn name(&self) -> &str {
        "delete-loadbalancer"
    }

    fn skip(&self) -> Option<String> {
        LoadBalancerModule(self.0.clone()).skip()
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        use super::delete::{restore_original, Ops};
        let lb = &self.0.cluster.file.spec.load_balancer;
        let proxy = match lb.external.kind {
            ExternalLbType::KubexmKn => Proxy::Nginx,
            _ => Proxy::Haproxy,
        };
        let conf = proxy.conf();
        let mut ops = vec![
            restore_original("/etc/keepalived/keepalived.conf", "keepalived"),
            restore_original(conf, proxy.unit()),
            Op::Run(
                RunCommand::new(script!(
                    "rm -f -- {SYSCTL_FILE}\nsysctl -q -w net.ipv4.ip_nonlocal_bind=0 || true"
                ))
                .unless(script!("[ ! -e {SYSCTL_FILE} ]")),
            ),
        ];
        if proxy == Proxy::Nginx {
            ops.push(Op::Run(
                RunCommand::new(script!("userdel {NGINX_USER}"))
                    .unless(script!("! id -u {NGINX_USER} >/dev/null 2>&1")),
            ));
        }
        Ok(vec![Task::new(
            "delete-loadbalancer",
            self.0.with_role(Role::Loadbalancer),
        )
        .step(Ops {
            name: "remove-loadbalancer",
            ops,
        })])
    }
}
