//! `rotate-ca --ca kubernetes` on the kubexm path: one phase of the cluster CA's dual-CA
//! transition (see [`crate::rotation`] for the phases).
//!
//! The cluster CA signs every Kubernetes leaf KubeXM makes (API server serving and kubelet
//! client certificates, every kubeconfig's user, each kubelet's certificate) and is trusted by
//! every component (`ca.crt`: the API servers' `--client-ca-file` and
//! `--kubelet-certificate-authority`, the controller-manager's `--root-ca-file`, the kubelets'
//! `clientCAFile`, the CA data of every kubeconfig). The certificates module writes `ca.crt` as
//! the phase's trust bundle and the signing CA alone in `ca-signer.crt` (the controller-manager's
//! `--cluster-signing-cert-file` takes exactly one certificate), so each phase is the install's
//! files as the phase leaves the CA ([`crate::pki::KeyDir::with_rotation`]):
//! * `trust-both`: `ca.crt` and the kubeconfigs' CA data hold the old and the new CA;
//! * `reissue`: every leaf signed by the new CA (still trusting both);
//! * `drop-old`: the new CA alone.
//!
//! Each phase uploads the files and restarts the Kubernetes services on the masters one at a
//! time (kube-vip's container too, which reads `admin.conf` when it starts), each healthy before
//! the next, then on the workers one at a time, as `certs renew` does; restarts are guarded by
//! markers holding the rotation's id and the phase. Then, on the first master:
//! * after `trust-both`: the wait until every service-account token Secret and every
//!   `kube-root-ca.crt` ConfigMap holds the bundle (the controller-manager writes what its
//!   `--root-ca-file` holds), then the kube-system Deployments and DaemonSets restarted (their
//!   pods read the CA once, when they start) and the rollouts of those that were available
//!   awaited; pods of other
//!   namespaces are named for the operator, who restarts those that talk to the API server
//!   before `reissue` (from then on the API servers serve a certificate of the new CA);
//! * after `drop-old`: `extension-apiserver-authentication`'s `client-ca-file` set to the new CA
//!   alone (each API server only ever adds CAs to it, as for the front-proxy CA), and the
//!   wait until the token Secrets and ConfigMaps hold the new CA alone.
//!
//! The service-account signing key is not a CA and does not change: tokens stay valid.

use crate::script;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::KubernetesType;

use crate::modules::certs::renew::{
    fetch_admin, kubexm_rolling_tasks, Marker, RestartServices, RENEWED,
};
use crate::modules::certs::rotate::{
    cluster_kubectl, AggregationTrust, Rotate, RotatedCa, CLIENT_CA,
};
use crate::modules::kubexm::certs::{certificates, KubernetesCertificates};
use crate::modules::kubexm::KubexmCluster;
use crate::pipeline::ops::{Check, Op, RunCommand, WaitFor};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::rotation::Phase;

/// At most this many pods outside kube-system are named after `trust-both`.
const NAMED_PODS: usize = 20;

/// One phase of the cluster CA's rotation (see the module's documentation).
pub struct RotateKubernetesModule(pub Rotate);

impl Module for RotateKubernetesModule {
    fn name(&self) -> &str {
        "rotate-kubernetes-ca"
    }
    fn skip(&self) -> Option<String> {
        let r = &self.0;
        if r.ca != RotatedCa::Kubernetes {
            return Some(format!("this rotation is of the {} CA", r.ca.name()));
        }
        if r.ctx.cluster.file.spec.kubernetes.kind != KubernetesType::Kubexm {
            return Some("kubernetes.type is kubeadm: see module rotate-kubeadm-cluster-ca".into());
        }
        (r.phase == Phase::New).then(|| {
            "the new cluster CA is made on the control host; nothing changes on the nodes".into()
        })
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let r = &self.0;
        let ctx = &r.ctx;
        let k = Arc::new(KubexmCluster::new(ctx)?);
        let keys = ctx
            .key_dir()
            .join(RotatedCa::Kubernetes.key_subdir(KubernetesType::Kubexm));
        let ca = keys
            .ca(
                RotatedCa::Kubernetes.name(),
                RotatedCa::Kubernetes.common_name(),
            )
            .map_err(|source| StepError::Pki {
                what: "cluster CA",
                source,
            })?;
        let upload = Arc::new(KubernetesCertificates {
            layout: k.layout.clone(),
            files: certificates(&k, &keys)?,
            restart: false,
        });
        let restart = Arc::new(RestartServices {
            marker: self.0.phase_marker("services"),
        });
        let first = ctx.first_master()?.name.clone();
        let kube_vip: Option<Arc<dyn Step>> = k.kube_vip().then(|| {
            Arc::new(RestartKubeVip {
                marker: self.0.phase_marker("kube-vip"),
            }) as Arc<dyn Step>
        });
        let mut tasks = kubexm_rolling_tasks(
            ctx,
            &k,
            (
                format!("kubernetes-ca-{}-masters", r.phase),
                format!("kubernetes-ca-{}-workers", r.phase),
            ),
            upload,
            restart,
            kube_vip,
        );
        let trust = ca.trust_pem().to_string();
        match r.phase {
            Phase::TrustBoth => tasks.push(
                Task::new("service-accounts-trust-both", [first])
                    .step(ServiceAccountCa {
                        pem: trust,
                        kubexm: Some(k.clone()),
                    })
                    .step(RestartSystemWorkloads {
                        marker: self.0.phase_marker("kube-system"),
                        kubexm: Some(k.clone()),
                    })
                    .step(NamePodsToRestart {
                        kubexm: Some(k.clone()),
                    }),
            ),
            Phase::DropOld => tasks.push(
                Task::new("client-ca-new-alone", [first])
                    .step(AggregationTrust {
                        key: CLIENT_CA,
                        pem: trust.clone(),
                        kubexm: Some(k.clone()),
                    })
                    .step(ServiceAccountCa {
                        pem: trust,
                        kubexm: Some(k.clone()),
                    }),
            ),
            Phase::New | Phase::Reissue => {}
        }
        tasks.push(fetch_admin(ctx, k.layout.conf("admin.conf"))?);
        Ok(tasks)
    }
}

/// kube-vip's container stopped once per phase (the kubelet starts it again): it reads
/// `admin.conf` (CA data and client certificate) only when it starts.
pub struct RestartKubeVip {
    /// The phase's marker.
    pub marker: Marker,
}

impl Step for RestartKubeVip {
    fn name(&self) -> &str {
        "restart-kube-vip"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![
            Op::Run(
                RunCommand::new(script!(
                    "crictl ps -q --name kube-vip | xargs -r crictl stop >/dev/null\n{}",
                    self.marker.record()
                ))
                .unless(self.marker.done())
                .timeout(Duration::from_secs(120)),
            ),
            Op::Wait(WaitFor {
                what: format!("kube-vip running again on {}", node.name),
                check: "crictl ps -q --name kube-vip --state running | grep -q .".into(),
                timeout: Duration::from_secs(180),
                interval: Duration::from_secs(2),
            }),
        ])
    }
}

/// The wait until every service-account token Secret and every active namespace's
/// `kube-root-ca.crt` ConfigMap hold `pem` (the controller-manager copies its `--root-ca-file`
/// into them; the ConfigMaps exist where its root-ca-cert-publisher runs, a beta feature in
/// v1.20). No token Secret at all is a failure, not a pass.
pub struct ServiceAccountCa {
    /// The trust bundle `ca.crt` now holds.
    pub pem: String,
    /// kubexm path: the cluster (its kubectl); kubeadm path: `None`.
    pub kubexm: Option<Arc<KubexmCluster>>,
}

impl ServiceAccountCa {
    /// The check, run on a master.
    pub fn check(&self, node: &Node) -> String {
        let k = cluster_kubectl(self.kubexm.as_ref(), node);
        let sum = kubexm_bundles::hash::sha256_hex(self.pem.as_bytes());
        format!(
            "want={sum}\nsecrets=$({k} get secrets -A --field-selector type=kubernetes.io/service-account-token -o jsonpath='{{range .items[*]}}{{.data.ca\\.crt}}{{\"\\n\"}}{{end}}') || exit 1\n[ -n \"$secrets\" ] || exit 1\nprintf '%s\\n' \"$secrets\" | while read -r d; do [ \"$(printf %s \"$d\" | base64 -d | sha256sum | cut -d' ' -f1)\" = \"$want\" ] || exit 1; done || exit 1\nns=$({k} get namespaces --field-selector status.phase=Active -o jsonpath='{{.items[*].metadata.name}}') || exit 1\n[ -n \"$ns\" ] || exit 1\nfor n in $ns; do if {k} -n \"$n\" get configmap kube-root-ca.crt -o name >/dev/null 2>&1; then [ \"$({k} -n \"$n\" get configmap kube-root-ca.crt -o jsonpath='{{.data.ca\\.crt}}' | sha256sum | cut -d' ' -f1)\" = \"$want\" ] || exit 1; fi; done"
        )
    }
}

impl Step for ServiceAccountCa {
    fn name(&self) -> &str {
        "service-account-ca"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Wait(WaitFor {
            what: "every service-account token Secret and kube-root-ca.crt ConfigMap holding the CA file the masters now have".into(),
            check: self.check(node),
            timeout: Duration::from_secs(300),
            interval: Duration::from_secs(5),
        })])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(420),
            ..Policy::default()
        }
    }
}

/// The kube-system Deployments and DaemonSets restarted once (their pods read the CA when they
/// start), then the rollouts of those that were available before awaited. A workload that was
/// not (a crash-looping add-on) is restarted too, but waiting for it would wait for nothing the
/// rotation can fix: its name is kept out of the list the wait reads ([`Self::waited`]).
pub struct RestartSystemWorkloads {
    /// The phase's marker (on the first master).
    pub marker: Marker,
    /// kubexm path: the cluster (its kubectl); kubeadm path: `None`.
    pub kubexm: Option<Arc<KubexmCluster>>,
}

impl RestartSystemWorkloads {
    /// The file on the first master listing the workloads whose rollouts are awaited.
    pub fn waited(&self) -> String {
        format!("{}.rollouts", self.marker.file)
    }
}

impl Step for RestartSystemWorkloads {
    fn name(&self) -> &str {
        "restart-kube-system-workloads"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = cluster_kubectl(self.kubexm.as_ref(), node);
        let list = crate::runner::shell::quoted(&self.waited());
        Ok(vec![
            Op::Run(
                RunCommand::new(script!(
                    "set -e
mkdir -p {RENEWED}
: >{list}.part
for w in $({k} -n kube-system get deployments,daemonsets -o name); do
  if {k} -n kube-system rollout status \"$w\" --timeout=1s >/dev/null 2>&1; then echo \"$w\" >>{list}.part; fi
  {k} -n kube-system rollout restart \"$w\" >/dev/null
done
mv -f {list}.part {list}
{record}",
                    k = k,
                    list = list,
                    record = self.marker.record()
                ))
                .unless(self.marker.done())
                .timeout(Duration::from_secs(180)),
            ),
            Op::Wait(WaitFor {
                what: "the kube-system Deployments and DaemonSets that were available rolled out again".into(),
                check: format!(
                    "[ -f {list} ] || exit 1
for w in $(cat {list}); do {k} -n kube-system rollout status \"$w\" --timeout=5s >/dev/null 2>&1 || exit 1; done"
                ),
                timeout: Duration::from_secs(600),
                interval: Duration::from_secs(5),
            }),
        ])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(840),
            ..Policy::default()
        }
    }
}

/// The pods outside kube-system, named as warnings: those that talk to the API server read the
/// CA when they started, and must be restarted before `reissue`.
pub struct NamePodsToRestart {
    /// kubexm path: the cluster (its kubectl); kubeadm path: `None`.
    pub kubexm: Option<Arc<KubexmCluster>>,
}

impl Step for NamePodsToRestart {
    fn name(&self) -> &str {
        "pods-to-restart"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = cluster_kubectl(self.kubexm.as_ref(), node);
        Ok(vec![Op::Check(Check::new(
            "pods started before the new CA was trusted",
            format!(
                "pods=$({k} get pods -A -o jsonpath='{{range .items[*]}}{{.metadata.namespace}}/{{.metadata.name}}{{\"\\n\"}}{{end}}') || exit 1\nother=$(printf '%s\\n' \"$pods\" | grep -v -e '^kube-system/' -e '^$' || true)\n[ -n \"$other\" ] || exit 0\nn=$(printf '%s\\n' \"$other\" | wc -l)\necho \"WARNING: $n pod(s) outside kube-system hold the old CA alone if they read it at start: restart those that talk to the API server (kubectl rollout restart) before phase reissue\"\nprintf '%s\\n' \"$other\" | head -n {NAMED_PODS} | sed 's/^/WARNING: pod /'"
            ),
        ))])
    }
}
