//! Module 1: node preparation. SELinux, swap, firewall, hostname, /etc/hosts, resolvers, time,
//! kernel settings and OS packages on every node; each step idempotent and reverted on failure.

use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::ospackages::PackageSet;
use kubexm_manifests::resolve::Role;
use std::sync::Arc;

use serde::Serialize;

use crate::context::{InstallContext, NODE_MARKER};
use crate::pipeline::ops::{
    ManagedBlock, Op, Package, PackageSource, RenderTemplate, RunCommand, UploadFile,
};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::shell;

/// Undoes [`DisableSelinux`]: the saved config back, enforcing again.
pub const UNDO_SELINUX: &str = "if [ -e /etc/selinux/config.kubexm-orig ]; then mv -f /etc/selinux/config.kubexm-orig /etc/selinux/config; setenforce 1 || true; fi";
/// Undoes [`DisableSwap`]: fstab from its backup, swap on again.
pub const UNDO_SWAP: &str = "if [ -e /etc/fstab.kubexm-orig ]; then mv -f /etc/fstab.kubexm-orig /etc/fstab; swapon -a || true; fi";
/// Undoes [`DisableFirewall`]: the units it stopped are enabled and started again.
pub const UNDO_FIREWALL: &str = "if [ -e /etc/kubexm/firewall.orig ]; then for u in $(cat /etc/kubexm/firewall.orig); do systemctl enable --now $u || true; done; rm -f /etc/kubexm/firewall.orig; fi";
/// Undoes [`SetHostname`]: the saved hostname back.
pub const UNDO_HOSTNAME: &str = "if [ -e /etc/kubexm/hostname.orig ]; then h=$(cat /etc/kubexm/hostname.orig); hostnamectl set-hostname \"$h\" 2>/dev/null || { echo \"$h\" > /etc/hostname; hostname \"$h\"; }; rm -f /etc/kubexm/hostname.orig; fi";
/// Undoes [`ExtraResolvers`]: the systemd-resolved drop-in and the resolv.conf block removed.
pub const UNDO_RESOLVERS: &str = "rm -f /etc/systemd/resolved.conf.d/kubexm.conf\nif [ -f /etc/resolv.conf ] && [ ! -L /etc/resolv.conf ]; then awk '/^# BEGIN KubeXM Managed Block$/{skip=1;next} /^# END KubeXM Managed Block$/{skip=0;next} !skip' /etc/resolv.conf > /etc/resolv.conf.kubexm-part && cat /etc/resolv.conf.kubexm-part > /etc/resolv.conf; rm -f /etc/resolv.conf.kubexm-part; fi";
/// The systemd-resolved drop-in [`ExtraResolvers`] writes.
pub const RESOLVED_DROPIN: &str = "/etc/systemd/resolved.conf.d/kubexm.conf";
/// sysctl settings file.
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/99-kubexm.conf";
/// Kernel modules loaded at boot.
pub const MODULES_FILE: &str = "/etc/modules-load.d/kubexm.conf";

/// Node preparation.
pub struct NodePrepModule(pub Arc<InstallContext>);

impl Module for NodePrepModule {
    fn name(&self) -> &str {
        "node-prep"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let spec = &ctx.cluster.file.spec;
        let cluster = ctx.cluster.cluster_name().to_string();
        Ok(vec![Task::new("prepare-nodes", ctx.all())
            .step(InstallDependencies {
                proxy: kubexm_manifests::ospackages::kube_proxy(ctx.cluster.proxy_mode()),
                debs: spec.system.debs.clone(),
                rpms: spec.system.rpms.clone(),
                source: super::osrepo::package_source(ctx),
                etcd_disk: etcd_disk_fio(ctx),
            })
            .step(DisableSelinux)
            .step(DisableSwap)
            .step(DisableFirewall)
            .step(SetHostname)
            .step(HostsBlock::new(ctx)?)
            .step(ExtraResolvers {
                nameservers: spec
                    .extra
                    .resolves
                    .iter()
                    .map(|r| r.address.clone())
                    .collect(),
            })
            .step(TimeSync::new(ctx))
            .step(KernelSettings {
                cluster: cluster.clone(),
                ipv6: spec.network.pod_cidr.contains(':')
                    || spec.network.service_cidr.contains(':'),
            })
            .step(MarkNode { cluster })])
    }
}

/// OS packages Kubernetes nodes need (skipped when installed): node preparation, the runtime
/// dependencies and kube-proxy's tools ([`kubexm_manifests::ospackages`], the list the bundle's
/// repositories are built from) and `system.debs`/`system.rpms`.
pub struct InstallDependencies {
    /// What kube-proxy's mode needs ([`kubexm_manifests::ospackages::kube_proxy`]).
    proxy: PackageSet,
    debs: Vec<String>,
    rpms: Vec<String>,
    source: PackageSource,
    /// The role whose nodes get fio for preflight's etcd disk check, when the bundle carries
    /// it ([`etcd_disk_fio`]).
    etcd_disk: Option<Role>,
}

/// The role whose nodes install fio ([`kubexm_manifests::ospackages::ETCD_DISK_CHECK`]) for
/// the etcd disk check: only when the check runs and the bundle carries OS packages (otherwise
/// the check uses the node's own fio, or warns without one).
pub fn etcd_disk_fio(ctx: &InstallContext) -> Option<Role> {
    match super::osrepo::package_source(ctx) {
        PackageSource::Only { .. } => {
            kubexm_manifests::ospackages::etcd_disk_check_role(&ctx.cluster)
        }
        PackageSource::Node => None,
    }
}

impl Step for InstallDependencies {
    fn name(&self) -> &str {
        "install-dependencies"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        use kubexm_manifests::ospackages::{ETCD_DISK_CHECK, NODE_PREP, RUNTIME_DEPS};
        use kubexm_manifests::osrelease::Family;
        let fio = self.etcd_disk.is_some_and(|r| node.has_role(r));
        let names = |family: Family, extra: &[String]| {
            let mut v: Vec<String> = Vec::new();
            let fio: &[&str] = if fio {
                ETCD_DISK_CHECK.names(family)
            } else {
                &[]
            };
            for n in NODE_PREP
                .names(family)
                .iter()
                .chain(RUNTIME_DEPS.names(family))
                .chain(self.proxy.names(family))
                .chain(fio)
                .map(|s| (*s).to_string())
                .chain(extra.iter().cloned())
            {
                if !v.contains(&n) {
                    v.push(n);
                }
            }
            v
        };
        Ok(vec![Op::Package(Package {
            debs: names(Family::Deb, &self.debs),
            rpms: names(Family::Rpm, &self.rpms),
            source: self.source.clone(),
        })])
    }
}

/// SELinux permissive now and after reboot.
pub struct DisableSelinux;

impl Step for DisableSelinux {
    fn name(&self) -> &str {
        "disable-selinux"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(
                "setenforce 0\n[ -e /etc/selinux/config.kubexm-orig ] || cp -a /etc/selinux/config /etc/selinux/config.kubexm-orig\nsed -i 's/^SELINUX=enforcing/SELINUX=permissive/' /etc/selinux/config",
            )
            .unless("! command -v getenforce >/dev/null 2>&1 || [ \"$(getenforce)\" != Enforcing ]")
            .undo(UNDO_SELINUX),
        )])
    }
}

/// Swap off now, and its fstab lines commented out (fstab backed up).
pub struct DisableSwap;

impl Step for DisableSwap {
    fn name(&self) -> &str {
        "disable-swap"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(
                "swapoff -a\nif grep -Eq '^[^#].*[[:space:]]swap[[:space:]]' /etc/fstab; then\n  [ -e /etc/fstab.kubexm-orig ] || cp -a /etc/fstab /etc/fstab.kubexm-orig\n  sed -Ei 's/^([^#].*[[:space:]]swap[[:space:]].*)$/# KubeXM: \\1/' /etc/fstab\nfi",
            )
            .unless("[ \"$(tail -n +2 /proc/swaps | wc -l)\" -eq 0 ] && ! grep -Eq '^[^#].*[[:space:]]swap[[:space:]]' /etc/fstab")
            .undo(UNDO_SWAP),
        )])
    }
}

/// firewalld / ufw stopped and disabled.
pub struct DisableFirewall;

impl Step for DisableFirewall {
    fn name(&self) -> &str {
        "disable-firewall"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(
                "mkdir -p /etc/kubexm\nfor u in firewalld ufw; do\n  if systemctl is-active -q $u; then echo $u >> /etc/kubexm/firewall.orig; systemctl disable --now $u; fi\ndone",
            )
            .unless("! systemctl is-active -q firewalld 2>/dev/null && ! systemctl is-active -q ufw 2>/dev/null")
            .undo(UNDO_FIREWALL),
        )])
    }
}

/// The hostname from cluster.yaml (the old one kept for the revert).
pub struct SetHostname;

impl Step for SetHostname {
    fn name(&self) -> &str {
        "set-hostname"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let n = shell::quoted(&node.name);
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "mkdir -p /etc/kubexm\n[ -e /etc/kubexm/hostname.orig ] || hostname > /etc/kubexm/hostname.orig\nhostnamectl set-hostname {n} 2>/dev/null || {{ echo {n} > /etc/hostname; hostname {n}; }}", n = n
            ))
            .unless(script!("[ \"$(hostname)\" = {n} ] && [ \"$(cat /etc/hostname 2>/dev/null)\" = {n} ]", n = n))
            .undo(UNDO_HOSTNAME),
        )])
    }
}

#[derive(Serialize)]
struct HostLine {
    address: String,
    names: Vec<String>,
}

/// The `# BEGIN KubeXM Managed Block` in /etc/hosts: every cluster host, the private registry,
/// the API server's load-balancer name and `extra.hosts`.
pub struct HostsBlock {
    lines: Vec<String>,
}

impl HostsBlock {
    fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let spec = &ctx.cluster.file.spec;
        let domain = &spec.kubernetes.dns_domain;
        let mut hosts: Vec<HostLine> = ctx
            .nodes
            .iter()
            .map(|n| HostLine {
                address: n.internal_address.clone(),
                names: vec![format!("{}.{domain}", n.name), n.name.clone()],
            })
            .collect();
        if let (Some(reg), Some(first)) = (
            spec.registry.private_registry.as_deref(),
            ctx.with_role(Role::Registry)
                .first()
                .and_then(|r| ctx.node(r)),
        ) {
            let host = reg.split(':').next().unwrap_or(reg);
            if host.parse::<std::net::IpAddr>().is_err() {
                hosts.push(HostLine {
                    address: first.internal_address.clone(),
                    names: vec![host.to_string()],
                });
            }
        }
        if let Ok(endpoint) = ctx.control_plane_endpoint() {
            hosts.push(HostLine {
                address: endpoint.address,
                names: vec![endpoint.domain],
            });
        }
        for e in &spec.extra.hosts {
            hosts.push(HostLine {
                address: e.address.clone(),
                names: vec![e.domain.clone()],
            });
        }
        let mut context = tera::Context::new();
        context.insert("hosts", &hosts);
        let text = crate::templates::render("hosts/managed-block.tera", &context)?;
        Ok(Self {
            lines: text.lines().map(str::to_string).collect(),
        })
    }
}

impl Step for HostsBlock {
    fn name(&self) -> &str {
        "hosts-block"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Block(ManagedBlock::new(
            "/etc/hosts",
            self.lines.clone(),
        ))])
    }
}

/// `extra.resolves`: nameservers in a managed block of /etc/resolv.conf, or a systemd-resolved
/// drop-in when resolved owns resolv.conf.
pub struct ExtraResolvers {
    nameservers: Vec<String>,
}

impl Step for ExtraResolvers {
    fn name(&self) -> &str {
        "extra-resolvers"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        if self.nameservers.is_empty() {
            return Ok(Vec::new());
        }
        let dns = self.nameservers.join(" ");
        let dropin = format!("[Resolve]\nDNS={dns}\n");
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "if [ -L /etc/resolv.conf ] && systemctl is-active -q systemd-resolved; then\n  mkdir -p /etc/systemd/resolved.conf.d\n  printf '%s' {d} > /etc/systemd/resolved.conf.d/kubexm.conf\n  systemctl restart systemd-resolved\nelse\n  {b}\nfi",
                d = &dropin,
                b = block_script(&self.nameservers),
            ))
            .unless(script!(
                "if [ -L /etc/resolv.conf ] && systemctl is-active -q systemd-resolved; then [ \"$(cat /etc/systemd/resolved.conf.d/kubexm.conf 2>/dev/null)\" = {d} ]; else awk '/^# BEGIN KubeXM Managed Block$/{{on=1;next}} /^# END KubeXM Managed Block$/{{on=0}} on' /etc/resolv.conf | grep -qxF {first}; fi",
                d = dropin.trim_end(),
                first = &format!("nameserver {}", self.nameservers[0]),
            ))
            .undo(UNDO_RESOLVERS),
        )])
    }
}

/// Nameservers first in resolv.conf, inside a managed block (written in place: resolv.conf may
/// be a bind mount).
fn block_script(nameservers: &[String]) -> Script {
    let mut block = String::from("# BEGIN KubeXM Managed Block\n");
    for n in nameservers {
        block.push_str(&format!("nameserver {n}\n"));
    }
    block.push_str("# END KubeXM Managed Block\n");
    script!(
        "rest=$(awk '/^# BEGIN KubeXM Managed Block$/{{skip=1;next}} /^# END KubeXM Managed Block$/{{skip=0;next}} !skip' /etc/resolv.conf)\n  printf '%s%s\\n' {} \"$rest\" > /etc/resolv.conf",
        shell::quoted(&block)
    )
}

/// chrony per `system.ntpServers` (a cluster host listed there serves the others) and the time
/// zone.
pub struct TimeSync {
    servers: Vec<String>,
    server_node: Option<String>,
    timezone: Option<String>,
    ctx_addresses: Vec<(String, String)>,
}

impl TimeSync {
    fn new(ctx: &InstallContext) -> Self {
        let system = &ctx.cluster.file.spec.system;
        let server_node = system
            .ntp_servers
            .iter()
            .find(|s| ctx.node(s).is_some())
            .cloned();
        Self {
            servers: system.ntp_servers.clone(),
            server_node,
            timezone: system.timezone.clone(),
            ctx_addresses: ctx
                .nodes
                .iter()
                .map(|n| (n.name.clone(), n.internal_address.clone()))
                .collect(),
        }
    }
}

impl Step for TimeSync {
    fn name(&self) -> &str {
        "time-sync"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = Vec::new();
        if let Some(tz) = &self.timezone {
            let z = shell::quoted(tz);
            let zone = shell::quoted(&format!("/usr/share/zoneinfo/{tz}"));
            let missing = shell::quoted(&format!("time zone {tz} is not in /usr/share/zoneinfo"));
            ops.push(Op::Run(
                RunCommand::new(script!(
                    "[ -e {zone} ] || {{ echo {missing} >&2; exit 1; }}\ntimedatectl set-timezone {z} 2>/dev/null || {{ ln -sf {zone} /etc/localtime; echo {z} > /etc/timezone; }}", zone = zone, missing = missing, z = z
                ))
                .unless(script!("[ \"$(readlink -f /etc/localtime)\" = {zone} ]", zone = zone)),
            ));
        }
        if self.servers.is_empty() {
            return Ok(ops);
        }
        let external: Vec<String> = self
            .servers
            .iter()
            .filter(|s| !self.ctx_addresses.iter().any(|(n, _)| n == *s))
            .cloned()
            .collect();
        let serve = self.server_node.as_deref() == Some(node.name.as_str());
        let upstream: Vec<String> = match (&self.server_node, serve) {
            (Some(server), false) => self
                .ctx_addresses
                .iter()
                .filter(|(n, _)| n == server)
                .map(|(_, a)| a.clone())
                .collect(),
            _ => external,
        };
        let mut context = tera::Context::new();
        context.insert("serve", &serve);
        context.insert("upstream", &upstream);
        let text = crate::templates::render("chrony/managed-block.tera", &context)?;
        let mut block = ManagedBlock::new(
            "/etc/chrony/chrony.conf",
            text.lines().map(str::to_string).collect(),
        );
        block.fallback = Some("/etc/chrony.conf".to_string());
        ops.push(Op::Block(block));
        ops.push(Op::Run(
            RunCommand::new("systemctl enable chrony 2>/dev/null || systemctl enable chronyd\nsystemctl restart chrony 2>/dev/null || systemctl restart chronyd")
                .when_changed()
                .verify("systemctl is-active -q chrony || systemctl is-active -q chronyd"),
        ));
        Ok(ops)
    }
}

/// sysctl settings and kernel modules, applied now and at boot.
pub struct KernelSettings {
    cluster: String,
    ipv6: bool,
}

/// Kernel modules loaded at boot.
pub const KERNEL_MODULES: &[&str] = &[
    "overlay",
    "br_netfilter",
    "ip_vs",
    "ip_vs_rr",
    "ip_vs_wrr",
    "ip_vs_sh",
    "nf_conntrack",
];

impl Step for KernelSettings {
    fn name(&self) -> &str {
        "kernel-settings"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut context = tera::Context::new();
        context.insert("cluster", &self.cluster);
        context.insert("ipv6", &self.ipv6);
        context.insert("modules", KERNEL_MODULES);
        Ok(vec![
            Op::Template(RenderTemplate::new("os/modules-load.conf.tera", &context, MODULES_FILE, 0o644)?),
            Op::Template(RenderTemplate::new("os/sysctl.conf.tera", &context, SYSCTL_FILE, 0o644)?),
            Op::Run(
                RunCommand::new(script!(
                    "for m in {}; do [ -d /sys/module/$m ] || modprobe $m 2>/dev/null || echo \"module $m could not be loaded\" >&2; done\n\
                     # Keys a container or this kernel does not allow are reported, not fatal; ip_forward is verified.\n\
                     sysctl -e -p /etc/sysctl.d/99-kubexm.conf >/dev/null 2>&1 || true",
                    shell::words(KERNEL_MODULES)
                ))
                .when_changed()
                .verify("[ \"$(cat /proc/sys/net/ipv4/ip_forward)\" = 1 ]"),
            ),
        ])
    }
}

/// `/etc/kubexm/cluster`: which cluster the node belongs to (preflight recognises its own).
pub struct MarkNode {
    cluster: String,
}

impl Step for MarkNode {
    fn name(&self) -> &str {
        "mark-node"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Upload(UploadFile::bytes(
            format!("name={}\n", self.cluster).into_bytes(),
            NODE_MARKER,
            0o644,
        ))])
    }
}

/// The node-preparation part of the `delete` pipeline: every change [`NodePrepModule`] made is
/// undone on every node, in reverse order, then `/etc/kubexm` and the staging directories
/// (`/var/lib/kubexm/{artifacts,extract}`; `/var/lib/kubexm` itself only when then empty, as it
/// is also the installer's default work directory) are removed.
///
/// Kept as they are: OS packages, the time zone, chrony's enablement (only KubeXM's block is
/// removed and chrony restarted when running), and the running kernel's sysctl values and loaded
/// modules (the files are removed; the values return to the defaults at the next boot).
pub struct NodePrepDeleteModule(pub Arc<InstallContext>);

/// The node-preparation delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> NodePrepDeleteModule {
    NodePrepDeleteModule(ctx.clone())
}

fn has_block(file: &str) -> Script {
    script!(
        "grep -qxF '{begin}' {file} 2>/dev/null",
        begin = shell::in_single_quotes(crate::pipeline::ops::BLOCK_BEGIN),
        file = file
    )
}

impl Module for NodePrepDeleteModule {
    fn name(&self) -> &str {
        "delete-node-prep"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        use super::delete::Ops;
        let mut chrony = ManagedBlock::new("/etc/chrony/chrony.conf", Vec::new());
        chrony.fallback = Some("/etc/chrony.conf".to_string());
        // trusted_shell: the revert script of a ManagedBlock op, which builds it with quote().
        let chrony_strip = Script::trusted_shell(
            crate::pipeline::ops::GenericStep::revert(&chrony).unwrap_or_default(),
        );
        let hosts = ManagedBlock::new("/etc/hosts", Vec::new());
        // trusted_shell: as above.
        let hosts_strip = Script::trusted_shell(
            crate::pipeline::ops::GenericStep::revert(&hosts).unwrap_or_default(),
        );
        let run = |cmd: Script, unless: Script| Op::Run(RunCommand::new(cmd).unless(unless));
        Ok(vec![Task::new("undo-node-prep", self.0.all())
            .step(Ops {
                name: "remove-kernel-settings",
                ops: vec![run(
                    script!("rm -f -- {SYSCTL_FILE} {MODULES_FILE}"),
                    script!("[ ! -e {SYSCTL_FILE} ] && [ ! -e {MODULES_FILE} ]"),
                )],
            })
            .step(Ops {
                name: "remove-time-sync-block",
                ops: vec![run(
                    script!("{chrony_strip}\nif systemctl is-active -q chrony 2>/dev/null; then systemctl restart chrony; elif systemctl is-active -q chronyd 2>/dev/null; then systemctl restart chronyd; fi", chrony_strip = chrony_strip),
                    script!("! {} && ! {}", has_block("/etc/chrony/chrony.conf"), has_block("/etc/chrony.conf")),
                )],
            })
            .step(Ops {
                name: "remove-extra-resolvers",
                ops: vec![run(
                    script!("d=0; [ -e {RESOLVED_DROPIN} ] && d=1\n{UNDO_RESOLVERS}\nif [ $d = 1 ] && systemctl is-active -q systemd-resolved; then systemctl restart systemd-resolved; fi"),
                    script!("[ ! -e {RESOLVED_DROPIN} ] && ! {}", has_block("/etc/resolv.conf")),
                )],
            })
            .step(Ops {
                name: "remove-hosts-block",
                ops: vec![run(hosts_strip, script!("! {}", has_block("/etc/hosts")))],
            })
            .step(Ops {
                name: "restore-hostname",
                ops: vec![run(Script::new(UNDO_HOSTNAME), Script::new("[ ! -e /etc/kubexm/hostname.orig ]"))],
            })
            .step(Ops {
                name: "restore-firewall",
                ops: vec![run(Script::new(UNDO_FIREWALL), Script::new("[ ! -e /etc/kubexm/firewall.orig ]"))],
            })
            .step(Ops {
                name: "restore-swap",
                ops: vec![run(Script::new(UNDO_SWAP), Script::new("[ ! -e /etc/fstab.kubexm-orig ]"))],
            })
            .step(Ops {
                name: "restore-selinux",
                ops: vec![run(Script::new(UNDO_SELINUX), Script::new("[ ! -e /etc/selinux/config.kubexm-orig ]"))],
            })
            .step(Ops {
                name: "remove-kubexm-dirs",
                ops: vec![run(
                    Script::new("rm -rf -- /etc/kubexm /var/lib/kubexm/artifacts /var/lib/kubexm/extract /var/lib/kubexm/restore /var/lib/kubexm/backup\nrmdir /var/lib/kubexm 2>/dev/null || true"),
                    Script::new("[ ! -e /etc/kubexm ] && [ ! -e /var/lib/kubexm/artifacts ] && [ ! -e /var/lib/kubexm/extract ] && [ ! -e /var/lib/kubexm/restore ] && [ ! -e /var/lib/kubexm/backup ]"),
                )],
            })])
    }
}
