//! Every file KubeXM writes on a host, as tera templates from the repository's `templates/`
//! directory, embedded at build time.

use crate::pipeline::StepError;

macro_rules! embed {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../templates/", $name)))),*]
    };
}

/// (name, source) of every embedded template; a unit test keeps it equal to `templates/`.
pub const TEMPLATES: &[(&str, &str)] = embed![
    "addons/values.yaml.tera",
    "backup/kubexm-job.service.tera",
    "backup/kubexm-job.timer.tera",
    "chrony/managed-block.tera",
    "cni/calico-values.yaml.tera",
    "cni/cilium-values.yaml.tera",
    "cni/hybridnet-values.yaml.tera",
    "cni/kube-ovn-values.yaml.tera",
    "cni/multus.yaml.tera",
    "containerd/config-v2.toml.tera",
    "containerd/config-v3.toml.tera",
    "containerd/containerd.service.tera",
    "containerd/hosts.toml.tera",
    "containerd/mirror.toml.tera",
    "crictl/crictl.yaml.tera",
    "crio/crio.conf.tera",
    "crio/crio.service.tera",
    "crio/policy.json.tera",
    "crio/registries.conf.tera",
    "dns/nodelocaldns.yaml.tera",
    "docker/cri-docker.service.tera",
    "docker/cri-docker.socket.tera",
    "docker/daemon.json.tera",
    "docker/docker.service.tera",
    "docker/docker.socket.tera",
    "etcd/etcd.conf.yml.tera",
    "etcd/etcd.service.tera",
    "harbor/harbor.yml.tera",
    "hosts/managed-block.tera",
    "internal-lb/haproxy-pod.yaml.tera",
    "internal-lb/haproxy.cfg.tera",
    "internal-lb/kube-vip.yaml.tera",
    "internal-lb/nginx-pod.yaml.tera",
    "internal-lb/nginx.conf.tera",
    "isulad/daemon.json.tera",
    "isulad/isulad.service.tera",
    "isulad/ld.so.conf.tera",
    "kubeadm/10-kubeadm.conf.tera",
    "kubeadm/init-config.yaml.tera",
    "kubeadm/join-config.yaml.tera",
    "kubeadm/kube-apiserver-patch.yaml.tera",
    "kubeadm/kubelet.service.tera",
    "kubexm/cluster-rbac.yaml.tera",
    "kubexm/coredns.yaml.tera",
    "kubexm/kube-proxy.yaml.tera",
    "kubexm/kube-scheduler.yaml.tera",
    "kubexm/kubeconfig.tera",
    "kubexm/kubelet-config.yaml.tera",
    "kubexm/service.tera",
    "lb/haproxy.cfg.tera",
    "lb/keepalived.conf.tera",
    "lb/nginx.conf.tera",
    "lb/sysctl.conf.tera",
    "os/modules-load.conf.tera",
    "os/sysctl.conf.tera",
    "plugins/kata.yaml.tera",
    "plugins/node-feature-discovery.yaml.tera",
    "registry/config.yml.tera",
    "registry/registry.service.tera",
    "security/audit-policy.yaml.tera",
    "storage/exports-block.tera",
    "storage/local-volume.yaml.tera",
    "storage/nfs-provisioner.yaml.tera",
    "verify/probe.yaml.tera",
];

/// Renders one embedded template.
pub fn render(name: &str, context: &tera::Context) -> Result<String, StepError> {
    let Some((_, source)) = TEMPLATES.iter().find(|(n, _)| *n == name) else {
        return Err(StepError::Template {
            name: name.to_string(),
            message: "no such template is embedded".to_string(),
        });
    };
    let mut tera = engine();
    tera.add_raw_template(name, source)
        .and_then(|()| tera.render(name, context))
        .map_err(|e| StepError::Template {
            name: name.to_string(),
            message: error_chain(&e),
        })
}

/// Tera as KubeXM uses it: no escaping (these are config files, not HTML) and a `json` filter
/// (`{{ x | json }}`: the value as JSON, also a valid YAML scalar) for JSON configs and quoting.
fn engine() -> tera::Tera {
    let mut tera = tera::Tera::default();
    tera.autoescape_on(Vec::<&str>::new());
    tera.register_filter(
        "json",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| {
            serde_json::to_string(&v).unwrap_or_default()
        },
    );
    tera
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_file_is_embedded_and_parses() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");
        let mut on_disk = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("templates dir") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "tera") {
                    let rel = p.strip_prefix(&dir).expect("prefix");
                    on_disk.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = TEMPLATES.iter().map(|(n, _)| n.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "templates/ and TEMPLATES differ");
        for (name, source) in TEMPLATES {
            let mut t = engine();
            t.add_raw_template(name, source)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn unknown_template_is_named() {
        let err = render("nope.tera", &tera::Context::new()).expect_err("unknown");
        assert!(err.to_string().contains("nope.tera"), "{err}");
    }
}
