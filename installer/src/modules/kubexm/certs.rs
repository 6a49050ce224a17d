//! Module `kubexm-certs`: every certificate, key and kubeconfig of a kubexm cluster, made (or
//! reused) on the control host under `WORK/pki/<cluster>/kubernetes` and uploaded to the nodes.
//!
//! | file on the node (`/etc/kubernetes/…`) | subject / content | nodes |
//! |---|---|---|
//! | `pki/ca.crt` | CA `kubernetes` (during a `rotate-ca --ca kubernetes`, the trust bundle of the old and new CAs) | all |
//! | `pki/ca-signer.crt`, `pki/ca.key` | the CA that signs, alone, and its key (the controller-manager signs CSRs with them) | masters |
//! | `pki/apiserver.crt`/`.key` | `kube-apiserver`, serverAuth, SANs below | masters |
//! | `pki/apiserver-kubelet-client.crt`/`.key` | `kube-apiserver-kubelet-client`, O=`kubeadm:cluster-admins`, clientAuth | masters |
//! | `pki/front-proxy-ca.crt` | CA `front-proxy-ca` (separate) | masters |
//! | `pki/front-proxy-client.crt`/`.key` | `front-proxy-client`, clientAuth | masters |
//! | `pki/sa.key`/`sa.pub` | service-account token key pair (ECDSA P-256) | masters |
//! | `pki/etcd/ca.crt`, `pki/apiserver-etcd-client.crt`/`.key` | the user's files (etcd.type external) | masters |
//! | `admin.conf` | `kubernetes-admin`, O=`kubeadm:cluster-admins`, server: the endpoint | masters |
//! | `super-admin.conf` | `kubernetes-super-admin`, O=`system:masters`, server: the node's own API server | masters |
//! | `controller-manager.conf`, `scheduler.conf` | `system:kube-controller-manager` / `system:kube-scheduler`, server: the node's own API server | masters |
//! | `pki/kubelet.crt`/`.key` | `system:node:<name>`, O=`system:nodes`, serverAuth+clientAuth, SANs: name and addresses | all |
//! | `kubelet.conf` | the kubelet certificate, server: a master's own API server; a worker's local API proxy (internal haproxy/nginx) or the endpoint | all |
//! | `kube-proxy.conf` | `system:kube-proxy`, server: as `kubelet.conf` | all |
//!
//! API server SANs: `kubernetes`, `kubernetes.default`, `kubernetes.default.svc`,
//! `kubernetes.default.svc.<dnsDomain>`, the first address of each service CIDR, every master's
//! name and internal (and SSH, when different) address, the VIP, `loadBalancer.domain`,
//! `apiserverCertExtraSans`, `127.0.0.1` and `localhost`. Keys are mode 0600.

use crate::script;
use kubexm_manifests::resolve::Role;
use std::collections::BTreeMap;

use std::sync::Arc;

use kubexm_manifests::model::EtcdType;

use super::kubeconfig::Kubeconfig;
use super::{KubexmCluster, Layout, CLUSTER_ADMINS, SERVICES};
use crate::context::InstallContext;
use crate::pipeline::ops::{CreateDir, Op, RenderTemplate, RunCommand, UploadFile};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::pki::{Ca, CertSpec, IssuedCert, KeyDir, PkiError, San, Usage};
use crate::runner::{shell, UploadSource};

/// The certificates module.
pub struct KubexmCertsModule(pub Arc<InstallContext>);

impl Module for KubexmCertsModule {
    fn name(&self) -> &str {
        "kubexm-certs"
    }
    fn skip(&self) -> Option<String> {
        super::skip_reason(&self.0)
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let k = KubexmCluster::new(&self.0)?;
        let files = certificates(&k, &self.0.key_dir().join("kubernetes"))?;
        Ok(vec![Task::new("kubernetes-certificates", k.node_names())
            .step(KubernetesCertificates {
                layout: k.layout.clone(),
                files,
                restart: true,
            })])
    }
}

/// A file KubeXM writes on a node.
#[derive(Debug, Clone)]
pub enum NodeFile {
    /// A certificate or key.
    Upload(UploadFile),
    /// A kubeconfig.
    Template(RenderTemplate),
}

impl NodeFile {
    fn bytes(content: &str, dest: String, mode: u32) -> Self {
        NodeFile::Upload(UploadFile::bytes(content.as_bytes().to_vec(), dest, mode))
    }

    /// Where it goes.
    pub fn dest(&self) -> &str {
        match self {
            NodeFile::Upload(u) => &u.dest,
            NodeFile::Template(t) => &t.file.dest,
        }
    }

    /// Its mode.
    pub fn mode(&self) -> u32 {
        match self {
            NodeFile::Upload(u) => u.mode,
            NodeFile::Template(t) => t.file.mode,
        }
    }

    /// Its content.
    pub fn content(&self) -> &[u8] {
        let upload = match self {
            NodeFile::Upload(u) => u,
            NodeFile::Template(t) => &t.file,
        };
        match &upload.source {
            UploadSource::Bytes(b) => b,
            UploadSource::File(_) => &[],
        }
    }

    /// The generic step that writes it.
    pub fn op(&self) -> Op {
        match self {
            NodeFile::Upload(u) => Op::Upload(u.clone()),
            NodeFile::Template(t) => Op::Template(t.clone()),
        }
    }
}

/// The API server certificate's subject and SANs.
pub fn apiserver_spec(k: &KubexmCluster) -> Result<CertSpec, StepError> {
    let spec = k.spec();
    let lb = &k.ctx.cluster.file.spec.load_balancer;
    let domain = &spec.dns_domain;
    let mut sans: Vec<San> = [
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        format!("kubernetes.default.svc.{domain}"),
    ]
    .iter()
    .map(|s| San::parse(s))
    .collect();
    for cidr in k.ctx.cluster.file.spec.network.service_cidr.split(',') {
        sans.push(San::Ip(super::nth_address(
            cidr.trim(),
            1,
            "spec.network.serviceCidr",
        )?));
    }
    for m in k.masters() {
        sans.extend([
            San::parse(&m.name),
            San::parse(&m.internal_address),
            San::parse(&m.address),
        ]);
    }
    sans.push(San::parse(&lb.domain));
    sans.extend(lb.vip.iter().map(|v| San::parse(v)));
    sans.extend(spec.apiserver_cert_extra_sans.iter().map(|s| San::parse(s)));
    sans.extend([San::parse("127.0.0.1"), San::parse("localhost")]);
    Ok(CertSpec::new("kube-apiserver", Usage::Server).sans(sans))
}

/// `node`'s kubelet certificate: client and serving.
pub fn kubelet_spec(node: &Node) -> CertSpec {
    CertSpec::new(format!("system:node:{}", node.name), Usage::Peer)
        .organization("system:nodes")
        .sans([
            San::parse(&node.name),
            San::parse(&node.internal_address),
            San::parse(&node.address),
        ])
}

/// The files every master and worker gets, by node name.
pub fn certificates(
    k: &KubexmCluster,
    keys: &KeyDir,
) -> Result<BTreeMap<String, Vec<NodeFile>>, StepError> {
    let pki = |source: PkiError| StepError::Pki {
        what: "Kubernetes certificates",
        source,
    };
    let l = &k.layout;
    let ca = keys.ca("kubernetes", "kubernetes").map_err(pki)?;
    let front_proxy_ca = keys.ca("front-proxy", "front-proxy-ca").map_err(pki)?;
    let sa = keys.key_pair("sa").map_err(pki)?;
    let issue = |ca: &Ca, stem: &str, spec: CertSpec| keys.leaf(ca, stem, &spec).map_err(pki);
    let client = |cn: &str| CertSpec::new(cn, Usage::Client);

    let apiserver = issue(&ca, "apiserver", apiserver_spec(k)?)?;
    let kubelet_client = issue(
        &ca,
        "apiserver-kubelet-client",
        client("kube-apiserver-kubelet-client").organization(CLUSTER_ADMINS),
    )?;
    let front_proxy = issue(
        &front_proxy_ca,
        "front-proxy-client",
        client("front-proxy-client"),
    )?;
    let users: Vec<(&str, &str, &str, IssuedCert)> = vec![
        (
            "admin.conf",
            "kubernetes-admin",
            "cluster administrator",
            issue(
                &ca,
                "admin",
                client("kubernetes-admin").organization(CLUSTER_ADMINS),
            )?,
        ),
        (
            "super-admin.conf",
            "kubernetes-super-admin",
            "break-glass administrator in system:masters",
            issue(
                &ca,
                "super-admin",
                client("kubernetes-super-admin").organization("system:masters"),
            )?,
        ),
        (
            "controller-manager.conf",
            "system:kube-controller-manager",
            "kube-controller-manager",
            issue(
                &ca,
                "controller-manager",
                client("system:kube-controller-manager"),
            )?,
        ),
        (
            "scheduler.conf",
            "system:kube-scheduler",
            "kube-scheduler",
            issue(&ca, "scheduler", client("system:kube-scheduler"))?,
        ),
    ];
    let proxy = issue(&ca, "kube-proxy", client("system:kube-proxy"))?;
    let etcd = external_etcd_files(k)?;

    let endpoint = k.endpoint.url();
    let kubeconfig = |server: String, user: &str, cert: &IssuedCert, purpose: &str, file: &str| {
        Kubeconfig {
            cluster: &k.name,
            server,
            ca_pem: ca.trust_pem(),
            user,
            client: cert,
            purpose,
        }
        .render(l.conf(file))
        .map(NodeFile::Template)
    };
    let pair = |files: &mut Vec<NodeFile>, stem: &str, c: &IssuedCert| {
        files.push(NodeFile::bytes(
            &c.cert_pem,
            l.pki(&format!("{stem}.crt")),
            0o644,
        ));
        files.push(NodeFile::bytes(
            &c.key_pem,
            l.pki(&format!("{stem}.key")),
            0o600,
        ));
    };

    let mut out = BTreeMap::new();
    for name in k.node_names() {
        let Some(node) = k.ctx.node(&name) else {
            continue;
        };
        // The trust bundle: during a `rotate-ca --ca kubernetes`, the old and new CAs.
        let mut files = vec![NodeFile::bytes(ca.trust_pem(), l.pki("ca.crt"), 0o644)];
        if node.has_role(Role::Master) {
            files.push(NodeFile::bytes(
                ca.cert_pem(),
                l.pki("ca-signer.crt"),
                0o644,
            ));
            files.push(NodeFile::bytes(&ca.key_pem(), l.pki("ca.key"), 0o600));
            pair(&mut files, "apiserver", &apiserver);
            pair(&mut files, "apiserver-kubelet-client", &kubelet_client);
            // The trust bundle: during a `rotate-ca --ca front-proxy`, the old and new CAs.
            files.push(NodeFile::bytes(
                front_proxy_ca.trust_pem(),
                l.pki("front-proxy-ca.crt"),
                0o644,
            ));
            pair(&mut files, "front-proxy-client", &front_proxy);
            files.push(NodeFile::bytes(&sa.private_pem, l.pki("sa.key"), 0o600));
            files.push(NodeFile::bytes(&sa.public_pem, l.pki("sa.pub"), 0o644));
            for (content, dest, mode) in &etcd {
                files.push(NodeFile::bytes(content, dest.clone(), *mode));
            }
            for (file, user, purpose, cert) in &users {
                let server = if *file == "admin.conf" {
                    endpoint.clone()
                } else {
                    k.local_api(node)
                };
                files.push(kubeconfig(server, user, cert, purpose, file)?);
            }
        }
        let kubelet = issue(&ca, &format!("kubelet-{name}"), kubelet_spec(node))?;
        pair(&mut files, "kubelet", &kubelet);
        // A master's kubelet and kube-proxy talk to its own API server, so no master depends on
        // another (or on the endpoint's name, which resolves to the first master without a
        // VIP). Behind an internal haproxy/nginx a worker's go through the local API proxy on
        // 127.0.0.1 (see `internal_lb`); other workers use the endpoint.
        let node_api = if node.has_role(Role::Master) {
            k.local_api(node)
        } else if k.local_proxy().is_some() {
            crate::modules::k8s::LOCAL_API.to_string()
        } else {
            endpoint.clone()
        };
        files.push(kubeconfig(
            node_api.clone(),
            &format!("system:node:{name}"),
            &kubelet,
            "kubelet",
            "kubelet.conf",
        )?);
        files.push(kubeconfig(
            node_api,
            "system:kube-proxy",
            &proxy,
            "kube-proxy",
            "kube-proxy.conf",
        )?);
        out.insert(name, files);
    }
    Ok(out)
}

/// Where the API server finds its etcd client files: `(ca, cert, key)` on a master.
pub fn etcd_client_paths(k: &KubexmCluster, master: &Node) -> (String, String, String) {
    match k.ctx.cluster.file.spec.etcd.kind {
        EtcdType::External => (
            k.layout.pki("etcd/ca.crt"),
            k.layout.pki("apiserver-etcd-client.crt"),
            k.layout.pki("apiserver-etcd-client.key"),
        ),
        // The etcd module uploads `node-<name>` client certificates to every master.
        _ => {
            let d = super::super::etcd::CERT_DIR;
            (
                format!("{d}/ca.pem"),
                format!("{d}/node-{}.pem", master.name),
                format!("{d}/node-{}-key.pem", master.name),
            )
        }
    }
}

/// For etcd.type external: the user's CA, client certificate and key (read on the control host)
/// with their destinations and modes.
fn external_etcd_files(k: &KubexmCluster) -> Result<Vec<(String, String, u32)>, StepError> {
    let e = &k.ctx.cluster.file.spec.etcd;
    if e.kind != EtcdType::External {
        return Ok(Vec::new());
    }
    let read = |field: &str, path: &Option<String>| {
        let path = path.as_deref().ok_or_else(|| {
            StepError::Invalid(format!(
                "spec.etcd.{field} is required for etcd.type external"
            ))
        })?;
        std::fs::read_to_string(path).map_err(|err| {
            StepError::Invalid(format!(
                "spec.etcd.{field}: cannot read {path}: {err} (give the PEM file's path on the control host)"
            ))
        })
    };
    let m = k.masters();
    let Some(first) = m.first() else {
        return Ok(Vec::new());
    };
    let (ca, cert, key) = etcd_client_paths(k, first);
    Ok(vec![
        (read("caFile", &e.ca_file)?, ca, 0o644),
        (read("certFile", &e.cert_file)?, cert, 0o644),
        (read("keyFile", &e.key_file)?, key, 0o600),
    ])
}

/// The step uploading a node's files: directories, certificates, keys, kubeconfigs; running
/// Kubernetes services restarted when something changed.
pub struct KubernetesCertificates {
    /// Paths on the nodes.
    pub layout: Layout,
    /// Files per node name.
    pub files: BTreeMap<String, Vec<NodeFile>>,
    /// Restart the running Kubernetes services when a file changed (`certs renew` restarts
    /// them itself, one node at a time with health checks).
    pub restart: bool,
}

impl Step for KubernetesCertificates {
    fn name(&self) -> &str {
        "kubernetes-certificates"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let files = self.files.get(&node.name).ok_or_else(|| {
            StepError::Invalid(format!(
                "no Kubernetes certificates were made for {}",
                node.name
            ))
        })?;
        let l = &self.layout;
        let mut ops = vec![
            Op::Mkdir(CreateDir {
                path: l.kube_dir.clone(),
                mode: 0o755,
            }),
            Op::Mkdir(CreateDir {
                path: l.pki_dir(),
                mode: 0o700,
            }),
        ];
        let etcd_dir = l.pki("etcd");
        if files.iter().any(|f| f.dest().starts_with(&etcd_dir)) {
            ops.push(Op::Mkdir(CreateDir {
                path: etcd_dir,
                mode: 0o700,
            }));
        }
        ops.extend(files.iter().map(NodeFile::op));
        if !self.restart {
            return Ok(ops);
        }
        ops.push(Op::Run(
            RunCommand::new(script!(
                "for u in {}; do if systemctl is-active -q $u; then systemctl restart $u; fi; done",
                shell::words(SERVICES)
            ))
            .when_changed(),
        ));
        Ok(ops)
    }
}
