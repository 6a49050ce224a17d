//! Module: the optional plugins the seed (KubeKey v3) deploys after the network — Kata
//! Containers (`spec.kubernetes.kata.enabled`) and Node Feature Discovery
//! (`spec.kubernetes.nodeFeatureDiscovery.enabled`) — from the first master.
//!
//! Both are KubeXM's own manifests (`templates/plugins/`), written for one upstream release each
//! ([`KATA_DEPLOY_VERSION`], [`NFD_VERSION`]): upstream's files are quick-start manifests at
//! moving tags (`kata-deploy:stable`, `latest`) or kustomize trees, not single release assets to
//! bundle. Their images are the catalog's `kata-deploy` and `node-feature-discovery` groups,
//! bundled and pulled from the private registry.
//!
//! * **Kata Containers**: the runtime module writes containerd's `kata` handler
//!   (`io.containerd.kata.v2`, see [`crate::modules::runtime`]); here kata-deploy's DaemonSet puts
//!   Kata's artifacts on every node and labels it `katacontainers.io/kata-runtime=true`, and the
//!   RuntimeClass `kata` sends pods to those nodes. Kata needs hardware virtualization on the
//!   nodes (`/dev/kvm`), which preflight checks on every node kata-deploy runs on
//!   ([`crate::modules::preflight::kata_nodes`]).
//!   kata-deploy 3.2.0's script also writes its own `kata-qemu` handler into
//!   `/etc/containerd/config.toml` (keeping the file it found as `config.toml.bak`) and
//!   restarts containerd; the next KubeXM run puts KubeXM's file back, whose `kata` handler is
//!   the one the RuntimeClass uses. `delete` removes what kata-deploy left on the nodes
//!   ([`KataDeleteModule`]): the cluster is torn down without kata-deploy's own cleanup hook.
//! * **Node Feature Discovery**: its namespace, the NodeFeatureRule CRD, the master
//!   (Deployment) and the workers (DaemonSet on every node), which label nodes with their
//!   features.

use crate::script;
use std::sync::Arc;

use kubexm_manifests::resolve::{KATA_DEPLOY_VERSION, NFD_VERSION};

use super::apply::ApplyManifest;
use super::delete::Ops;
use super::images::node_image;
use crate::context::InstallContext;
use crate::modules::k8s::image_named;
use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::{Module, StepError, Task};

/// The Kata manifest's file name on the first master.
pub const KATA_MANIFEST: &str = "kata.yaml";
/// The Node Feature Discovery manifest's file name on the first master.
pub const NFD_MANIFEST: &str = "node-feature-discovery.yaml";

/// The rendered Kata Containers manifest.
pub fn render_kata(ctx: &InstallContext) -> Result<String, StepError> {
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert("version", KATA_DEPLOY_VERSION);
    c.insert(
        "image",
        &node_image(ctx, &image_named(ctx, "kata-deploy")?)?,
    );
    crate::templates::render("plugins/kata.yaml.tera", &c)
}

/// The rendered Node Feature Discovery manifest.
pub fn render_nfd(ctx: &InstallContext) -> Result<String, StepError> {
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert("version", NFD_VERSION);
    c.insert(
        "image",
        &node_image(ctx, &image_named(ctx, "node-feature-discovery")?)?,
    );
    crate::templates::render("plugins/node-feature-discovery.yaml.tera", &c)
}

/// The plugins module.
pub struct PluginsModule(pub Arc<InstallContext>);

impl Module for PluginsModule {
    fn name(&self) -> &str {
        "plugins"
    }

    fn skip(&self) -> Option<String> {
        let k = &self.0.cluster.file.spec.kubernetes;
        (!k.kata.enabled && !k.node_feature_discovery.enabled).then(|| {
            "neither kubernetes.kata nor kubernetes.nodeFeatureDiscovery is enabled".to_string()
        })
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let k = &ctx.cluster.file.spec.kubernetes;
        let first = ctx.first_master()?.name.clone();
        let mut tasks = Vec::new();
        if k.kata.enabled {
            tasks.push(
                Task::new("kata", [first.clone()]).step(ApplyManifest::rendered(
                    "kata",
                    KATA_MANIFEST,
                    render_kata(ctx)?.into_bytes(),
                )),
            );
        }
        if k.node_feature_discovery.enabled {
            tasks.push(
                Task::new("node-feature-discovery", [first]).step(ApplyManifest::rendered(
                    "node-feature-discovery",
                    NFD_MANIFEST,
                    render_nfd(ctx)?.into_bytes(),
                )),
            );
        }
        Ok(tasks)
    }
}

/// Kata's artifacts kata-deploy puts on a node (`/opt/kata`).
pub const KATA_DIR: &str = "/opt/kata";
/// The shims kata-deploy writes into `/usr/local/bin` (the default shim, one per hypervisor,
/// and the `.bak` it keeps of a shim it found there, its own from an earlier start).
pub const KATA_SHIMS: &str =
    "/usr/local/bin/containerd-shim-kata-v2 /usr/local/bin/containerd-shim-kata-*-v2 /usr/local/bin/containerd-shim-kata-*-v2.bak";
/// kata-deploy's copy of the containerd configuration it found (KubeXM's, removed only when
/// its first line says so).
pub const CONTAINERD_BACKUP: &str = "/etc/containerd/config.toml.bak";

/// Kata's part of the `delete` pipeline, before the runtime's (containerd's configuration
/// directory is removed once empty), on every master and worker: `/opt/kata`, kata-deploy's
/// shims in `/usr/local/bin` (a `.bak` only when it is a Kata shim), and its `config.toml.bak`
/// when that copy is KubeXM's file. The `kata` handler block goes with containerd's
/// `config.toml`, which the runtime's delete removes. Skipped unless Kata is enabled.
pub struct KataDeleteModule(pub Arc<InstallContext>);

/// The Kata delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> KataDeleteModule {
    KataDeleteModule(ctx.clone())
}

impl Module for KataDeleteModule {
    fn name(&self) -> &str {
        "delete-kata"
    }

    fn skip(&self) -> Option<String> {
        (!self.0.cluster.file.spec.kubernetes.kata.enabled)
            .then(|| "kubernetes.kata is not enabled".to_string())
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        // What kata-deploy left here, one path a line; a `.bak` shim only when it runs Kata,
        // containerd's backup only when it is KubeXM's file.
        let owned = script!(
            "kata_owned() {{\n  \
             [ -e {KATA_DIR} ] && echo {KATA_DIR}\n  \
             for f in {KATA_SHIMS}; do\n    \
             [ -e \"$f\" ] || [ -L \"$f\" ] || continue\n    \
             case $f in *.bak) grep -qs /opt/kata/ \"$f\" || continue;; esac\n    \
             echo \"$f\"\n  \
             done\n  \
             head -n 1 {CONTAINERD_BACKUP} 2>/dev/null | grep -q '^# Written by KubeXM' && echo {CONTAINERD_BACKUP}\n  \
             true\n\
             }}"
        );
        Ok(vec![Task::new(
            "delete-kata",
            crate::modules::runtime::runtime_hosts(&self.0),
        )
        .step(Ops {
            name: "remove-kata",
            ops: vec![Op::Run(
                RunCommand::new(script!(
                    "{owned}\nkata_owned | while read -r f; do rm -rf -- \"$f\"; done",
                    owned = owned
                ))
                .unless(script!("{owned}\n[ -z \"$(kata_owned)\" ]", owned = owned)),
            )],
        })])
    }
}
