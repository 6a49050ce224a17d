//! `rotate-ca --ca kubernetes` on the kubeadm path: one phase of the cluster CA's dual-CA
//! transition (see [`crate::rotation`] for the phases, [`super::rotate_kubernetes`] for the
//! kubexm path).
//!
//! kubeadm made the CA on the first master, so `new` copies it (certificate and key) to
//! `WORK/pki/<cluster>/kubeadm/` ([`FetchKubeadmCa`]), where the control host makes the new one.
//! Every later phase then writes, as the phase leaves the CA
//! ([`crate::pki::KeyDir::with_rotation`]):
//! * on every node, `pki/ca.crt` with the signing CA first and the rest of the trust bundle after
//!   it (kubeadm's `certs renew` and the kubelet-certificate signing on the masters sign with the
//!   first certificate and `ca.key`); the API servers' `--client-ca-file`, the
//!   controller-manager's `--root-ca-file` and the kubelets' `clientCAFile` read it;
//! * on the masters, `pki/ca-signer.crt`, the signing CA alone: v1.20's CSR signer refuses a
//!   file of two certificates, so while a rotation is under way (trust-both and reissue finished)
//!   kubeadm's configuration points `--cluster-signing-cert-file` at it, applied by the
//!   reconfiguration ([`Reconfigure`], which also uploads the configuration for later joins);
//!   `drop-old` points it back at `ca.crt`;
//! * the `certificate-authority-data` of every kubeconfig kubeadm wrote (`admin.conf`,
//!   `controller-manager.conf`, `scheduler.conf`, `super-admin.conf`, `kubelet.conf`) and of
//!   `kube-public/cluster-info`, which joins verify: the trust bundle ([`KubeconfigCaData`],
//!   [`ClusterInfoCa`]).
//!
//! `reissue` signs every leaf with the new CA: `ca.key` on the masters becomes the new key (SEC1:
//! `kubeadm join --control-plane` copies CA keys and reads EC keys in SEC1 only), kubeadm renews
//! its certificates and kubeconfigs ([`KubeadmCaLeaves`]; their CA data is set to the bundle again
//! after), each master's kubelet client certificate is signed there ([`KubeletClient`]), each
//! worker's through a request its key never leaves ([`RequestClient`], [`SignClients`],
//! [`InstallClient`]), and every kubelet asks for a new serving certificate, approved with the
//! install's checks.
//!
//! Masters go one at a time (control plane and kubelet restarted, `/readyz`), then workers one at
//! a time (kubelet restarted, healthy); restarts of kube-vip and the renewals are guarded by
//! markers holding the rotation's id. The first master then does what the kubexm path does: after
//! `trust-both` the service-account wait, the kube-system restarts and the pods named; after
//! `drop-old` the `client-ca-file` of `extension-apiserver-authentication`; after each phase the
//! stale `kubeadm-certs` Secret dropped and `admin.conf` fetched.

use crate::modules::k8s::{ec_key_in_sec1, STATE_DIR};
use crate::runner::shell::Script;
use crate::script;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use kubexm_manifests::model::{InternalLbType, KubernetesType, LbMode};
use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::modules::backup::restore::{RestartNodeAgents, StartControlPlane, StopControlPlane};
use crate::modules::certs::renew::{fetch_admin, KubeletClient, KubeletHealthy, Marker};
use crate::modules::certs::renew_kubelet::{
    serving_renewal_tasks, serving_set_aside, InstallClient, RequestClient, SignClients,
};
use crate::modules::certs::rotate::{
    cluster_kubectl, stale_kubeadm_certs, AggregationTrust, FetchKubeadmCa, Rotate, RotatedCa,
    CLIENT_CA, KUBEADM_CA_DIR,
};
use crate::modules::certs::rotate_kubernetes::{
    NamePodsToRestart, RestartKubeVip, RestartSystemWorkloads, ServiceAccountCa,
};
use crate::modules::k8s::ADMIN_CONF;
use crate::modules::k8s::{CA_SIGNER, KUBEADM_PKI};
use crate::modules::kubeadm::binaries::KUBEADM;
use crate::modules::kubeadm::config::{KubeadmInputs, KubeadmSettings};
use crate::modules::kubeadm::reconfigure::Reconfigure;
use crate::pipeline::ops::{CreateDir, Op, RunCommand, UploadFile};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::pki::Ca;
use crate::rotation::Phase;
use crate::runner::shell;

/// The new cluster CA key as uploaded (PKCS#8), converted from there to `ca.key`.
const CA_KEY_PKCS8: &str = "/etc/kubernetes/kubexm/ca.key.pk8";
/// The kubeconfigs kubeadm writes on a master, `kubelet.conf` last (also on workers).
const MASTER_KUBECONFIGS: [&str; 5] = [
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/controller-manager.conf",
    "/etc/kubernetes/scheduler.conf",
    "/etc/kubernetes/super-admin.conf",
    KUBELET_CONF,
];
const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";

/// Whether kubeadm's controller-manager signs with [`CA_SIGNER`]: while a rotation of the
/// cluster CA has `ca.crt` hold two CAs (the phase run, or the last one finished, is
/// `trust-both` or `reissue`).
pub fn separate_signer(ctx: &InstallContext) -> Result<bool, StepError> {
    let phase = ctx
        .key_dir()
        .join(KUBEADM_CA_DIR)
        .rotation_phase(RotatedCa::Kubernetes.name())
        .map_err(|source| StepError::Pki {
            what: "the cluster CA's rotation state",
            source,
        })?;
    Ok(matches!(phase, Some(Phase::TrustBoth | Phase::Reissue)))
}

/// The kubeadm settings' inputs that come from the cluster CA's rotation state (read here, by
/// the caller, not while the kubeadm module plans).
pub fn kubeadm_inputs(ctx: &InstallContext) -> Result<KubeadmInputs, StepError> {
    Ok(KubeadmInputs {
        separate_signer: separate_signer(ctx)?,
    })
}

/// Why masters may not join now, if so: while [`separate_signer`] holds, the masters'
/// controller-manager reads [`CA_SIGNER`], which `kubeadm join --control-plane` does not copy, so
/// a new master's controller-manager could not start. Workers may join (`cluster-info` trusts the
/// bundle).
pub fn master_join_refused(ctx: &InstallContext) -> Result<Option<String>, StepError> {
    if ctx.cluster.file.spec.kubernetes.kind != KubernetesType::Kubeadm || !separate_signer(ctx)? {
        return Ok(None);
    }
    Ok(Some(
        "a rotation of the cluster CA is under way (`ca.crt` holds two CAs and the controller-manager signs with ca-signer.crt, which a joining master does not get): finish it with `kubexm-install rotate-ca --ca kubernetes --yes` first, then add the master".to_string(),
    ))
}

/// One phase of the cluster CA's rotation on the kubeadm path (see the module's documentation).
pub struct RotateKubeadmCaModule(pub Rotate);

impl Module for RotateKubeadmCaModule {
    fn name(&self) -> &str {
        "rotate-kubeadm-cluster-ca"
    }
    fn skip(&self) -> Option<String> {
        let r = &self.0;
        if r.ca != RotatedCa::Kubernetes {
            return Some(format!("this rotation is of the {} CA", r.ca.name()));
        }
        (r.ctx.cluster.file.spec.kubernetes.kind != KubernetesType::Kubeadm)
            .then(|| "kubernetes.type is kubexm: see module rotate-kubernetes-ca".into())
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let r = &self.0;
        let ctx = &r.ctx;
        let keys = ctx.key_dir().join(KUBEADM_CA_DIR);
        let first = ctx.first_master()?.name.clone();
        if r.phase == Phase::New {
            return Ok(vec![Task::new("cluster-ca-to-control-host", [first]).step(
                FetchKubeadmCa {
                    dir: keys.path().to_path_buf(),
                    ca: RotatedCa::Kubernetes,
                },
            )]);
        }
        let ca = keys
            .ca(
                RotatedCa::Kubernetes.name(),
                RotatedCa::Kubernetes.common_name(),
            )
            .map_err(|source| StepError::Pki {
                what: "cluster CA",
                source,
            })?;
        let masters = ctx.with_role(Role::Master);
        let workers: Vec<String> = ctx
            .with_role(Role::Worker)
            .into_iter()
            .filter(|n| !masters.contains(n))
            .collect();
        let files = Arc::new(ClusterCaFiles::new(&ca, r.phase)?);
        let ca_data = |files: &[&str]| {
            Arc::new(KubeconfigCaData {
                files: files.iter().map(|f| f.to_string()).collect(),
                pem: ca.trust_pem().to_string(),
            })
        };
        let reissue = r.phase == Phase::Reissue;

        // Masters, one at a time.
        let mut on_masters = Task::new(format!("cluster-ca-{}-masters", r.phase), masters.clone())
            .serial()
            .step_arc(files.clone())
            .step_arc(ca_data(&MASTER_KUBECONFIGS));
        if reissue {
            on_masters = on_masters
                .step(KubeadmCaLeaves {
                    command: leaves_command(ctx),
                    marker: self.0.phase_marker("kubeadm"),
                })
                // kubeadm wrote the new CA alone into the kubeconfigs it renewed.
                .step_arc(ca_data(&MASTER_KUBECONFIGS))
                .step(KubeletClient {
                    under_days: 0,
                    all: true,
                    marker: self.0.phase_marker("kubelet-client"),
                });
        } else {
            // The controller-manager's signer file (see `separate_signer`).
            on_masters = on_masters.step(Reconfigure {
                settings: Arc::new(KubeadmSettings::new(ctx, kubeadm_inputs(ctx)?)?),
                first: first.clone(),
            });
        }
        on_masters = on_masters
            .step(StopControlPlane {
                kind: KubernetesType::Kubeadm,
            })
            .step(RestartNodeAgents)
            .step(StartControlPlane {
                kind: KubernetesType::Kubeadm,
                after: "the cluster CA phase",
            });
        let lb = &ctx.cluster.file.spec.load_balancer;
        if lb.mode == LbMode::Internal && lb.internal.kind == InternalLbType::KubeVip {
            on_masters = on_masters.step(RestartKubeVip {
                marker: self.0.phase_marker("kube-vip"),
            });
        }
        let mut tasks = vec![on_masters];

        // Workers, one at a time.
        if !workers.is_empty() {
            let mut on_workers =
                Task::new(format!("cluster-ca-{}-workers", r.phase), workers.clone())
                    .serial()
                    .step_arc(files)
                    .step_arc(ca_data(&[KUBELET_CONF]));
            if reissue {
                let marker = self.0.phase_marker("worker-kubelet-client");
                tasks.push(Task::new("kubelet-client-requests", workers.clone()).step(
                    RequestClient {
                        id: r.id.to_string(),
                        marker: marker.clone(),
                    },
                ));
                tasks.push(
                    Task::new("sign-kubelet-clients", [first.clone()]).step(SignClients {
                        workers: workers.clone(),
                    }),
                );
                on_workers = on_workers.step(InstallClient {
                    id: r.id.to_string(),
                    marker,
                });
            } else {
                on_workers = on_workers.step(RestartNodeAgents);
            }
            tasks.push(on_workers.step(KubeletHealthy));
        }

        // Every kubelet's serving certificate, from the new CA.
        if reissue {
            let mut kubelets = masters.clone();
            kubelets.extend(workers.iter().cloned());
            tasks.extend(serving_renewal_tasks(
                &first,
                &kubelets,
                ctx,
                self.0.phase_marker("kubelet-serving"),
                serving_set_aside(&r.id.to_string()),
            ));
        }

        // The cluster-wide objects, on the first master.
        let trust = ca.trust_pem().to_string();
        match r.phase {
            Phase::TrustBoth => tasks.push(
                Task::new("cluster-trust-both", [first.clone()])
                    .step(ClusterInfoCa { pem: trust.clone() })
                    .step(ServiceAccountCa {
                        pem: trust,
                        kubexm: None,
                    })
                    .step(RestartSystemWorkloads {
                        marker: self.0.phase_marker("kube-system"),
                        kubexm: None,
                    })
                    .step(NamePodsToRestart { kubexm: None }),
            ),
            Phase::DropOld => tasks.push(
                Task::new("cluster-new-ca-alone", [first.clone()])
                    .step(ClusterInfoCa { pem: trust.clone() })
                    .step(AggregationTrust {
                        key: CLIENT_CA,
                        pem: trust.clone(),
                        kubexm: None,
                    })
                    .step(ServiceAccountCa {
                        pem: trust,
                        kubexm: None,
                    }),
            ),
            Phase::New | Phase::Reissue => {}
        }
        tasks.push(stale_kubeadm_certs(ctx)?);
        tasks.push(fetch_admin(ctx, ADMIN_CONF.to_string())?);
        Ok(tasks)
    }
}

/// The cluster CA's files as a phase leaves them: `ca.crt` (signing CA first, then the rest of
/// the trust bundle) on every node; on the masters also [`CA_SIGNER`] and, once the new CA
/// signs, its key as `ca.key`.
pub struct ClusterCaFiles {
    ca_crt: UploadFile,
    signer: UploadFile,
    key: Option<UploadFile>,
}

impl ClusterCaFiles {
    /// The files of `phase` from `ca` (as [`crate::pki::KeyDir::ca`] sees it in that phase).
    pub fn new(ca: &Ca, phase: Phase) -> Result<Self, StepError> {
        Ok(Self {
            ca_crt: UploadFile::bytes(
                crate::rotation::signing_first(ca.cert_pem(), ca.trust_pem()).into_bytes(),
                format!("{KUBEADM_PKI}/ca.crt"),
                0o644,
            ),
            signer: UploadFile::bytes(ca.cert_pem().as_bytes().to_vec(), CA_SIGNER, 0o644),
            key: phase
                .signs_with_new()
                .then(|| UploadFile::bytes(ca.key_pem().into_bytes(), CA_KEY_PKCS8, 0o600)),
        })
    }
}

impl Step for ClusterCaFiles {
    fn name(&self) -> &str {
        "cluster-ca-files"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = vec![Op::Upload(self.ca_crt.clone())];
        if node.has_role(Role::Master) {
            ops.push(Op::Upload(self.signer.clone()));
            if let Some(key) = &self.key {
                ops.push(Op::Mkdir(CreateDir {
                    path: STATE_DIR.into(),
                    mode: 0o700,
                }));
                ops.push(Op::Upload(key.clone()));
                ops.push(ec_key_in_sec1(
                    CA_KEY_PKCS8,
                    &format!("{KUBEADM_PKI}/ca.key"),
                ));
            }
        }
        Ok(ops)
    }
}

/// The `certificate-authority-data` of each kubeconfig in `files` that exists set to `pem`.
pub struct KubeconfigCaData {
    /// The kubeconfigs.
    pub files: Vec<String>,
    /// The trust bundle.
    pub pem: String,
}

impl KubeconfigCaData {
    fn b64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.pem.as_bytes())
    }

    /// The command and its `unless` check.
    pub fn command(&self) -> RunCommand {
        let files = shell::words(&self.files);
        let b64 = self.b64();
        RunCommand::new(script!(
            "set -e\nfor f in {files}; do\n  [ -e \"$f\" ] || continue\n  grep -q '^ *certificate-authority-data:' \"$f\" || {{ echo \"$f: no certificate-authority-data to replace\" >&2; exit 1; }}\n  sed -i 's#^\\( *\\)certificate-authority-data:.*#\\1certificate-authority-data: {b64}#' \"$f\"\ndone", files = files, b64 = b64
        ))
        .unless(script!(
            "for f in {files}; do [ -e \"$f\" ] || continue; grep -qx ' *certificate-authority-data: {b64}' \"$f\" || exit 1; done", files = files, b64 = b64
        ))
    }
}

impl Step for KubeconfigCaData {
    fn name(&self) -> &str {
        "kubeconfig-ca-data"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(self.command())])
    }
}

/// `kube-public/cluster-info`'s kubeconfig trusting `pem`: `kubeadm join` reads the CA from it
/// (checked against the pinned hashes of the join command, any of which may match) and the
/// bootstrap kubeconfig it writes trusts that CA data. The controller-manager signs the changed
/// kubeconfig for the bootstrap tokens again.
pub struct ClusterInfoCa {
    /// The trust bundle.
    pub pem: String,
}

impl Step for ClusterInfoCa {
    fn name(&self) -> &str {
        "cluster-info-ca"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = cluster_kubectl(None, node);
        let b64 = base64::engine::general_purpose::STANDARD.encode(self.pem.as_bytes());
        let cm = Script::new("-n kube-public get configmap cluster-info");
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "set -e\numask 077\ntmp=$(mktemp); trap 'rm -f \"$tmp\"' EXIT\n{k} {cm} -o yaml >\"$tmp\"\ngrep -q 'certificate-authority-data:' \"$tmp\" || {{ echo 'kube-public/cluster-info holds no certificate-authority-data' >&2; exit 1; }}\nsed -i 's#certificate-authority-data: .*#certificate-authority-data: {b64}#' \"$tmp\"\n{k} replace -f \"$tmp\" >/dev/null", k = k, cm = cm, b64 = b64
            ))
            .unless(script!(
                "{k} {cm} -o jsonpath='{{.data.kubeconfig}}' | grep -qx ' *certificate-authority-data: {b64}'", k = k, cm = cm, b64 = b64
            )),
        )])
    }
}

/// The cluster CA's leaves kubeadm made on a master renewed by kubeadm (from `ca.crt`'s first
/// certificate and `ca.key`, now the new CA's), each one present.
pub struct KubeadmCaLeaves {
    /// The command ([`leaves_command`]).
    pub command: Script,
    /// The phase's marker.
    pub marker: Marker,
}

/// kubeadm's names of what the cluster CA signs on a master, with their files
/// (`super-admin.conf` exists from v1.29, on the first master).
const CA_LEAVES: [(&str, &str); 6] = [
    ("apiserver", "/etc/kubernetes/pki/apiserver.crt"),
    (
        "apiserver-kubelet-client",
        "/etc/kubernetes/pki/apiserver-kubelet-client.crt",
    ),
    ("admin.conf", "/etc/kubernetes/admin.conf"),
    (
        "controller-manager.conf",
        "/etc/kubernetes/controller-manager.conf",
    ),
    ("scheduler.conf", "/etc/kubernetes/scheduler.conf"),
    ("super-admin.conf", "/etc/kubernetes/super-admin.conf"),
];

/// The renewal of [`CA_LEAVES`] (`kubeadm alpha certs renew` before v1.20).
pub fn leaves_command(ctx: &InstallContext) -> Script {
    let renew = if ctx.cluster.version.at_least(1, 20) {
        script!("{KUBEADM} certs renew")
    } else {
        script!("{KUBEADM} alpha certs renew")
    };
    Script::join(
        CA_LEAVES.iter().map(|(name, file)| {
            script!(
                "{{ [ ! -e {file} ] || {renew} {name}; }}",
                file = file,
                renew = renew,
                name = name
            )
        }),
        " && ",
    )
}

impl Step for KubeadmCaLeaves {
    fn name(&self) -> &str {
        "kubeadm-renew-cluster-ca-leaves"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "{} >/dev/null && {}",
                self.command,
                self.marker.record()
            ))
            .unless(self.marker.done())
            .timeout(Duration::from_secs(180)),
        )])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> bool {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .status()
            .expect("sh")
            .success()
    }

    #[test]
    fn kubeconfig_ca_data_is_replaced_in_each_present_file_and_then_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("admin.conf");
        let kubeconfig = |ca: &str| {
            format!("apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: https://lb.kubexm.internal:6443\n  name: lab\nusers:\n- name: admin\n  user:\n    client-certificate-data: Q0VSVA==\n")
        };
        std::fs::write(&conf, kubeconfig("T0xE")).expect("write");
        let step = KubeconfigCaData {
            files: vec![
                conf.display().to_string(),
                dir.path().join("absent.conf").display().to_string(),
            ],
            pem: "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n".into(),
        };
        let run = step.command();
        let unless = run.unless.clone().expect("unless");
        assert!(!sh(&unless), "the old CA data is not taken for the new");
        assert!(sh(&run.command), "the replacement runs");
        assert!(
            sh(&unless),
            "then the check holds (the absent file is skipped)"
        );
        let text = std::fs::read_to_string(&conf).expect("read");
        assert_eq!(text, kubeconfig(&step.b64()), "only the CA data changed");

        // A kubeconfig without CA data is an error, not a silent pass.
        std::fs::write(&conf, "apiVersion: v1\nclusters: []\n").expect("write");
        assert!(!sh(&unless));
        assert!(!sh(&run.command));
    }
}
