//! kubeadm, kubelet and kubectl from the bundle, and the kubelet's systemd unit with kubeadm's
//! drop-in. The kubelet is enabled, not started: kubeadm starts it during init/join (before
//! that it has no configuration and would only restart in a loop).

use kubexm_manifests::resolve::Role;
use std::sync::Arc;

use crate::context::InstallContext;
use crate::modules::runtime::cri::Cri;
use crate::modules::runtime::{bundle_file, copy, upload, BIN_DIR};
use crate::pipeline::ops::{Op, RenderTemplate, RunCommand};
use crate::pipeline::{Facts, Node, Step, StepError};

/// kubeadm on every node.
pub const KUBEADM: &str = "/usr/local/bin/kubeadm";
/// The kubelet on every node.
pub const KUBELET: &str = "/usr/local/bin/kubelet";
/// The kubelet's unit.
pub const KUBELET_UNIT: &str = "/etc/systemd/system/kubelet.service";
/// kubeadm's drop-in for it.
pub const KUBELET_DROPIN: &str = "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf";

/// kubeadm and kubelet (and kubectl on masters) copied from the bundle into `/usr/local/bin`.
pub struct KubeBinaries {
    /// The install context.
    pub ctx: Arc<InstallContext>,
}

impl Step for KubeBinaries {
    fn name(&self) -> &str {
        "kubernetes-binaries"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut names = vec!["kubeadm", "kubelet"];
        if node.has_role(Role::Master) {
            names.push("kubectl");
        }
        let mut ops = Vec::new();
        for name in names {
            let (path, rec) = bundle_file(&self.ctx, name, node)?;
            let (op, staged) = upload(path, &rec, 0o755)?;
            ops.push(op);
            ops.push(copy(staged, format!("{BIN_DIR}/{name}")));
        }
        Ok(ops)
    }
}

/// The kubelet unit and drop-in, systemd reloaded when they changed, the unit enabled. The unit
/// starts after (and wants) the runtime's services ([`Cri::kubelet_after`]).
pub struct KubeletService {
    /// Cluster name (file headers).
    pub cluster: String,
    /// How the kubelet reaches the runtime.
    pub cri: Cri,
}

impl Step for KubeletService {
    fn name(&self) -> &str {
        "kubelet-service"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut c = tera::Context::new();
        c.insert("cluster", &self.cluster);
        c.insert("bin_dir", BIN_DIR);
        c.insert("dropin", KUBELET_DROPIN);
        c.insert("runtime_units", self.cri.kubelet_after());
        Ok(vec![
            Op::Template(RenderTemplate::new(
                "kubeadm/kubelet.service.tera",
                &c,
                KUBELET_UNIT,
                0o644,
            )?),
            Op::Template(RenderTemplate::new(
                "kubeadm/10-kubeadm.conf.tera",
                &c,
                KUBELET_DROPIN,
                0o644,
            )?),
            Op::Run(
                RunCommand::new("systemctl daemon-reload")
                    .when_changed()
                    .undo("systemctl daemon-reload"),
            ),
            Op::Run(
                RunCommand::new("systemctl enable kubelet")
                    .unless("systemctl is-enabled -q kubelet")
                    .undo("systemctl disable kubelet 2>/dev/null || true"),
            ),
        ])
    }
}
