//! Module `coredns` (kubexm path): CoreDNS as the cluster DNS, applied with kubectl from the
//! first master — service `kube-system/kube-dns` at the tenth address of the service CIDR,
//! zone `kubernetes.dnsDomain`, the image from the private registry, two replicas spread over
//! nodes, upstream resolvers from the node's (see kubelet's `resolvConf`). Its pods become
//! ready once the CNI (`network` module) is up; this module does not wait for them.

use std::sync::Arc;

use super::control_plane::apply;
use super::KubexmCluster;
use crate::context::InstallContext;
use crate::pipeline::ops::{CreateDir, Op, RenderTemplate};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};

/// The CoreDNS module.
pub struct CoreDnsModule(pub Arc<InstallContext>);

impl Module for CoreDnsModule {
    fn name(&self) -> &str {
        "coredns"
    }
    fn skip(&self) -> Option<String> {
        super::skip_reason(&self.0)
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let k = Arc::new(KubexmCluster::new(&self.0)?);
        let first = self.0.first_master()?.name.clone();
        let step = CoreDns::new(k)?;
        Ok(vec![Task::new("coredns", [first]).step(step)])
    }
}

/// The CoreDNS manifest, written to `/etc/kubernetes/addons/coredns.yaml` and applied.
pub struct CoreDns {
    k: Arc<KubexmCluster>,
    file: RenderTemplate,
}

impl CoreDns {
    /// Renders the manifest.
    pub fn new(k: Arc<KubexmCluster>) -> Result<Self, StepError> {
        let reference = crate::modules::runtime::bundled_image(&k.ctx, "coredns")?;
        let version = reference.rsplit(':').next().unwrap_or("").to_string();
        let mut c = k.context();
        c.insert("image", &k.ctx.pull_reference(&reference)?);
        c.insert("coredns_version", &version);
        c.insert("cluster_dns", &k.dns_ip.to_string());
        c.insert("cluster_domain", &k.spec().dns_domain);
        c.insert("replicas", &2);
        // Tolerate the control-plane taints of the version (`master` before v1.25).
        let taints: Vec<&str> = k
            .version
            .control_plane_taints()
            .iter()
            .map(|t| t.key)
            .collect();
        c.insert("control_plane_taints", &taints);
        let file = RenderTemplate::new(
            "kubexm/coredns.yaml.tera",
            &c,
            format!("{}/coredns.yaml", k.layout.addons_dir()),
            0o644,
        )?;
        Ok(Self { k, file })
    }

    /// The rendered manifest.
    pub fn file(&self) -> &RenderTemplate {
        &self.file
    }
}

impl Step for CoreDns {
    fn name(&self) -> &str {
        "coredns"
    }
    fn ops(&self, master: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let kubectl = self.k.kubectl(master);
        let dest = self.file.file.dest.clone();
        Ok(vec![
            Op::Mkdir(CreateDir {
                path: self.k.layout.addons_dir(),
                mode: 0o755,
            }),
            Op::Template(self.file.clone()),
            apply(
                &kubectl,
                &dest,
                crate::script!(
                    "{kubectl} -n kube-system get deployment/coredns service/kube-dns >/dev/null",
                    kubectl = kubectl
                ),
            ),
        ])
    }
}
