//! Module: etcd for `etcd.type: kubexm` — a TLS etcd cluster as a systemd service on the `etcd`
//! role nodes, with certificates made on the control host by [`crate::pki`].
//!
//! Tasks:
//! 1. `etcd-certificates` (etcd members and masters): CA, per-member server+client (`member-*`)
//!    and peer (`peer-*`) certificates, an `admin-*` client certificate for etcdctl on members,
//!    and a `node-*` client certificate (CN `kube-apiserver-etcd-client`) on masters, uploaded
//!    to [`CERT_DIR`]. The CA key never leaves the control host.
//! 2. `install-etcd` (members, in parallel): binaries from the bundle's release tarball, data
//!    directory, `/etc/etcd/etcd.conf.yml`, the unit, then `systemctl start --no-block` — a
//!    member of a new cluster only reports ready once a quorum has joined, so every member is
//!    started before anything waits for one.
//! 3. `etcd-health` (first member): waits until `etcdctl endpoint health --cluster` passes.
//!
//! Changed certificates or configuration restart a running member (non-blocking).
//!
//! Revert (a failed install): the unit is disabled and stopped, and uploaded/rendered files are
//! restored from their `.kubexm-orig` backups or removed. The data directory is removed only when
//! this run created it and it is still empty: data etcd wrote is never deleted by a rollback.
//! [`delete_module`] is the explicit removal, data included.

use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::EtcdType;
use serde::Serialize;

use crate::context::InstallContext;
use crate::modules::task_id::TaskId;
use crate::pipeline::ops::{
    CopyFile, CreateDir, ExtractTarball, Op, RenderTemplate, RunCommand, Systemd, SystemdAction,
    UploadFile, WaitFor,
};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::pki::{CertSpec, KeyDir, PkiError, San, Usage};
use crate::runner::{shell, UploadSource};

/// The task making (on the control host) and uploading every member's etcd certificates.
pub const ETCD_CERTIFICATES: TaskId = TaskId::new("etcd-certificates");

/// Certificates on the nodes.
pub const CERT_DIR: &str = "/etc/ssl/etcd/ssl";
/// The configuration file.
pub const CONFIG: &str = "/etc/etcd/etcd.conf.yml";
/// The unit name.
pub const UNIT: &str = "etcd";
/// The unit file.
pub const UNIT_FILE: &str = "/etc/systemd/system/etcd.service";
/// Where the binaries go.
pub const BIN_DIR: &str = "/usr/local/bin";
/// Data directory unless `etcd.dataDir` names one.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/etcd";
/// Where bundle archives are uploaded.
pub const ARTIFACTS_DIR: &str = "/var/lib/kubexm/artifacts/etcd";
/// Where archives are extracted.
pub const EXTRACT_DIR: &str = "/var/lib/kubexm/extract";
/// Client port.
pub const CLIENT_PORT: u16 = 2379;
/// Peer port.
pub const PEER_PORT: u16 = 2380;
/// Plain-HTTP metrics/health port (loopback only).
pub const METRICS_PORT: u16 = 2381;

/// An etcd member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    /// etcd member name (the node name).
    pub name: String,
    /// Address it listens on and advertises (the node's internal address).
    pub address: String,
}

/// Where and how etcd runs: everything the templates and commands are made from.
#[derive(Debug, Clone)]
pub struct EtcdLayout {
    /// Cluster name (the initial-cluster token is derived from it).
    pub cluster: String,
    /// Members in cluster.yaml order.
    pub members: Vec<Member>,
    /// Data directory.
    pub data_dir: String,
    /// Certificate directory on the nodes.
    pub cert_dir: String,
    /// Binary directory.
    pub bin_dir: String,
    /// Configuration file.
    pub config: String,
    /// Client port.
    pub client_port: u16,
    /// Peer port.
    pub peer_port: u16,
    /// Metrics port.
    pub metrics_port: u16,
    /// Members joining a running cluster (`etcd add-member`, `add-node`): their configuration
    /// says `initial-cluster-state: existing` (the others `new`).
    pub joining: std::collections::BTreeSet<String>,
    /// The etcd version installed (`v3.5.24`), when known: what its configuration file may hold.
    pub version: Option<String>,
}

/// `https://ADDR:PORT`, bracketing IPv6 addresses.
fn url(scheme: &str, address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("{scheme}://[{address}]:{port}")
    } else {
        format!("{scheme}://{address}:{port}")
    }
}

fn is_loopback(address: &str) -> bool {
    address
        .parse::<std::net::IpAddr>()
        .is_ok_and(|a| a.is_loopback())
}

impl EtcdLayout {
    /// The standard layout for `members`.
    pub fn new(cluster: impl Into<String>, members: Vec<Member>) -> Self {
        Self {
            cluster: cluster.into(),
            members,
            data_dir: DEFAULT_DATA_DIR.to_string(),
            cert_dir: CERT_DIR.to_string(),
            bin_dir: BIN_DIR.to_string(),
            config: CONFIG.to_string(),
            client_port: CLIENT_PORT,
            peer_port: PEER_PORT,
            metrics_port: METRICS_PORT,
            joining: std::collections::BTreeSet::new(),
            version: None,
        }
    }

    /// The layout of the cluster's `etcd` role nodes.
    pub fn from_context(ctx: &InstallContext) -> Self {
        let members = ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(Role::Etcd))
            .map(|n| Member {
                name: n.name.clone(),
                address: n.internal_address.clone(),
            })
            .collect();
        let mut l = Self::new(ctx.cluster.cluster_name(), members);
        if let Some(d) = &ctx.cluster.file.spec.etcd.data_dir {
            l.data_dir = d.clone();
        }
        l.version = ctx
            .nodes
            .iter()
            .find_map(|n| ctx.files_for("etcd", n).into_iter().next())
            .map(|(_, r)| r.version)
            .or_else(|| ctx.cluster.file.spec.etcd.version.clone());
        l
    }

    /// A member by name.
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Every member's client URL.
    pub fn client_endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| self.client_url(m)).collect()
    }

    /// `member`'s client URL.
    pub fn client_url(&self, member: &Member) -> String {
        url("https", &member.address, self.client_port)
    }

    /// `member`'s peer URL.
    pub fn peer_url(&self, member: &Member) -> String {
        url("https", &member.address, self.peer_port)
    }

    /// `name=https://addr:peer,...`.
    pub fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, url("https", &m.address, self.peer_port)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The template context of `member`'s etcd.conf.yml.
    pub fn config_context(&self, member: &str) -> Result<tera::Context, StepError> {
        let m = self.member(member).ok_or_else(|| {
            StepError::Invalid(format!("{member} is not an etcd member of this cluster"))
        })?;
        let mut listen = vec![url("https", &m.address, self.client_port)];
        // Local clients use 127.0.0.1 too; a member already on a loopback address (tests)
        // must not take 127.0.0.1's port from another member.
        if !is_loopback(&m.address) {
            listen.push(url("https", "127.0.0.1", self.client_port));
        }
        let metrics_host = if is_loopback(&m.address) {
            m.address.as_str()
        } else {
            "127.0.0.1"
        };
        let mut c = tera::Context::new();
        c.insert("cluster", &self.cluster);
        c.insert("name", &m.name);
        c.insert("data_dir", &self.data_dir);
        c.insert("cert_dir", &self.cert_dir);
        c.insert("listen_client_urls", &listen);
        c.insert(
            "advertise_client_url",
            &url("https", &m.address, self.client_port),
        );
        c.insert("peer_url", &url("https", &m.address, self.peer_port));
        c.insert("metrics_url", &url("http", metrics_host, self.metrics_port));
        c.insert("initial_cluster", &self.initial_cluster());
        c.insert("token", &format!("kubexm-{}-etcd", self.cluster));
        c.insert("has_enable_v2", &has_enable_v2(self.version.as_deref()));
        c.insert(
            "state",
            if self.joining.contains(&m.name) {
                "existing"
            } else {
                "new"
            },
        );
        Ok(c)
    }

    /// `member`'s etcd.conf.yml.
    pub fn render_config(&self, member: &str) -> Result<String, StepError> {
        crate::templates::render("etcd/etcd.conf.yml.tera", &self.config_context(member)?)
    }

    fn unit_context(&self, arch: &str) -> tera::Context {
        let mut env = Vec::new();
        // etcd 3.4 refuses to start on arm64 without this.
        if arch != "amd64" {
            env.push(format!("ETCD_UNSUPPORTED_ARCH={arch}"));
        }
        let mut c = tera::Context::new();
        c.insert("cluster", &self.cluster);
        c.insert("environment", &env);
        c.insert("bin_dir", &self.bin_dir);
        c.insert("config", &self.config);
        c
    }

    /// The systemd unit for a node of `arch`.
    pub fn render_unit(&self, arch: &str) -> Result<String, StepError> {
        crate::templates::render("etcd/etcd.service.tera", &self.unit_context(arch))
    }

    /// etcdctl (API v3, etcd 3.4 flags) with `member`'s admin certificate against every
    /// member; append a subcommand.
    pub fn etcdctl(&self, member: &str) -> Script {
        script!(
            "ETCDCTL_API=3 {bin}/etcdctl --endpoints={eps} --cacert={d}/ca.pem --cert={d}/admin-{m}.pem --key={d}/admin-{m}-key.pem",
            bin = self.bin_dir,
            eps = self.client_endpoints().join(","),
            d = self.cert_dir,
            m = member,
        )
    }

    /// The health check: every member of the cluster answers.
    pub fn health_command(&self, member: &str) -> String {
        format!(
            "{} --command-timeout=10s endpoint health --cluster",
            self.etcdctl(member)
        )
    }
}

/// A file for a node's certificate directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFile {
    /// File name in the certificate directory.
    pub name: String,
    /// Content.
    pub content: Vec<u8>,
    /// Mode.
    pub mode: u32,
}

/// Makes (or reuses, from `pki`) the etcd CA and certificates, and returns the files each
/// node gets: members get the CA, `member-*`, `peer-*` and `admin-*`; masters get the CA and
/// `node-*` (the kube-apiserver's etcd client certificate).
pub fn certificates(
    layout: &EtcdLayout,
    masters: &[Node],
    pki: &KeyDir,
) -> Result<BTreeMap<String, Vec<CertFile>>, PkiError> {
    let ca = pki.ca("etcd", "etcd-ca")?;
    let mut out: BTreeMap<String, Vec<CertFile>> = BTreeMap::new();
    let ca_file = || CertFile {
        name: "ca.pem".to_string(),
        content: ca.trust_pem().as_bytes().to_vec(),
        mode: 0o644,
    };
    let mut push = |node: &str, stem: &str, spec: CertSpec| -> Result<(), PkiError> {
        let c = pki.leaf(&ca, stem, &spec)?;
        let files = out
            .entry(node.to_string())
            .or_insert_with(|| vec![ca_file()]);
        files.push(CertFile {
            name: format!("{stem}.pem"),
            content: c.cert_pem.into_bytes(),
            mode: 0o644,
        });
        files.push(CertFile {
            name: format!("{stem}-key.pem"),
            content: c.key_pem.into_bytes(),
            mode: 0o600,
        });
        Ok(())
    };
    for m in &layout.members {
        let sans = [
            San::parse(&m.name),
            San::parse(&m.address),
            San::parse("127.0.0.1"),
            San::parse("localhost"),
        ];
        push(
            &m.name,
            &format!("member-{}", m.name),
            CertSpec::new(format!("etcd-member-{}", m.name), Usage::Peer).sans(sans.clone()),
        )?;
        push(
            &m.name,
            &format!("peer-{}", m.name),
            CertSpec::new(format!("etcd-peer-{}", m.name), Usage::Peer).sans(sans),
        )?;
        push(
            &m.name,
            &format!("admin-{}", m.name),
            CertSpec::new(format!("etcd-admin-{}", m.name), Usage::Client),
        )?;
    }
    for n in masters {
        push(
            &n.name,
            &format!("node-{}", n.name),
            CertSpec::new("kube-apiserver-etcd-client", Usage::Client),
        )?;
    }
    Ok(out)
}

/// [`certificates`] for the context's etcd members and masters, from its key directory.
pub fn context_certificates(
    ctx: &InstallContext,
    layout: &EtcdLayout,
) -> Result<BTreeMap<String, Vec<CertFile>>, StepError> {
    let masters: Vec<Node> = ctx
        .nodes
        .iter()
        .filter(|n| n.has_role(Role::Master))
        .cloned()
        .collect();
    certificates(layout, &masters, &ctx.key_dir().join("etcd")).map_err(|source| StepError::Pki {
        what: "etcd certificates",
        source,
    })
}

/// Restarts a running etcd without waiting (a member of a quorum-less cluster would block).
fn restart_if_running() -> Script {
    script!("if systemctl is-active -q {UNIT}; then systemctl restart --no-block {UNIT}; fi")
}

/// The etcd module.
pub struct EtcdModule(pub Arc<InstallContext>);

impl Module for EtcdModule {
    fn name(&self) -> &str {
        "etcd"
    }

    fn skip(&self) -> Option<String> {
        let spec = &self.0.cluster.file.spec.etcd;
        match spec.kind {
            EtcdType::Kubexm => None,
            EtcdType::Kubeadm => {
                Some("etcd.type is kubeadm: kubeadm runs etcd as static pods on the masters".into())
            }
            EtcdType::External => Some(format!(
                "etcd.type is external: the cluster uses {}",
                spec.endpoints.join(",")
            )),
        }
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        install_tasks(&self.0, None)
    }
}

/// The tasks of [`EtcdModule`]. `before_start` runs on each member after its binaries and
/// configuration are in place and before etcd first starts there: `restore --fresh` puts the
/// backup's data in the data directory then, so the new members start from it.
pub fn install_tasks(
    ctx: &Arc<InstallContext>,
    before_start: Option<Arc<dyn Step>>,
) -> Result<Vec<Task>, StepError> {
    let layout = Arc::new(EtcdLayout::from_context(ctx));
    let Some(first) = layout.members.first().map(|m| m.name.clone()) else {
        return Err(StepError::Invalid(
            "etcd.type is kubexm but no node has the etcd role".into(),
        ));
    };
    let files = context_certificates(ctx, &layout)?;
    let cert_hosts: Vec<String> = ctx
        .nodes
        .iter()
        .filter(|n| files.contains_key(&n.name))
        .map(|n| n.name.clone())
        .collect();
    let members: Vec<String> = layout.members.iter().map(|m| m.name.clone()).collect();
    let mut install = Task::new("install-etcd", members)
        .step(EtcdBinaries {
            ctx: ctx.clone(),
            layout: layout.clone(),
        })
        .step(EtcdConfig {
            layout: layout.clone(),
        });
    if let Some(step) = before_start {
        install = install.step_arc(step);
    }
    Ok(vec![
        Task::new(ETCD_CERTIFICATES, cert_hosts).step(EtcdCertificates {
            layout: layout.clone(),
            files,
            restart: true,
        }),
        install.step(StartEtcd),
        Task::new("etcd-health", [first]).step(EtcdHealth { layout }),
    ])
}

/// The certificate files of a node, uploaded to the certificate directory (0700).
pub struct EtcdCertificates {
    /// Where they go.
    pub layout: Arc<EtcdLayout>,
    /// Each node's files ([`certificates`]).
    pub files: BTreeMap<String, Vec<CertFile>>,
    /// Restart a running member when a file changed (`certs renew` restarts members itself,
    /// one at a time with `endpoint health`).
    pub restart: bool,
}

impl Step for EtcdCertificates {
    fn name(&self) -> &str {
        "etcd-certificates"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let files = self.files.get(&node.name).ok_or_else(|| {
            StepError::Invalid(format!("no etcd certificates were made for {}", node.name))
        })?;
        let mut ops = vec![Op::Mkdir(CreateDir {
            path: self.layout.cert_dir.clone(),
            mode: 0o700,
        })];
        for f in files {
            ops.push(Op::Upload(UploadFile::bytes(
                f.content.clone(),
                format!("{}/{}", self.layout.cert_dir, f.name),
                f.mode,
            )));
        }
        if self.restart && self.layout.member(&node.name).is_some() {
            ops.push(Op::Run(
                RunCommand::new(restart_if_running()).when_changed(),
            ));
        }
        Ok(ops)
    }
}

/// `etcd` and `etcdctl` from the bundle's release tarball into the binary directory.
pub struct EtcdBinaries {
    /// The bundle's files.
    pub ctx: Arc<InstallContext>,
    /// Where they go.
    pub layout: Arc<EtcdLayout>,
}

impl Step for EtcdBinaries {
    fn name(&self) -> &str {
        "etcd-binaries"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let files = self.ctx.files_for("etcd", node);
        let (source, file_name, sha256) = match (files.into_iter().next(), &self.ctx.bundle) {
            (Some((path, record)), _) => {
                let name = Path::new(&record.path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| record.path.clone());
                (UploadSource::File(path), name, record.sha256)
            }
            (None, Some(_)) => {
                return Err(StepError::Invalid(format!(
                    "the bundle has no etcd archive for {} ({}): build it for that architecture",
                    node.name, node.arch
                )))
            }
            // `plan -f` without a bundle: the upstream release name of the configured version.
            (None, None) => {
                let v = self
                    .ctx
                    .cluster
                    .file
                    .spec
                    .etcd
                    .version
                    .clone()
                    .unwrap_or_else(|| "VERSION".to_string());
                let name = format!("etcd-{v}-linux-{}.tar.gz", node.arch);
                (
                    UploadSource::File(PathBuf::from(format!(
                        "files/etcd/{v}/{}/{name}",
                        node.arch
                    ))),
                    name,
                    "from-bundle".to_string(),
                )
            }
        };
        let stem = file_name
            .strip_suffix(".tar.gz")
            .or_else(|| file_name.strip_suffix(".tgz"))
            .unwrap_or(&file_name)
            .to_string();
        let archive = format!("{ARTIFACTS_DIR}/{file_name}");
        let staging = format!("{EXTRACT_DIR}/{stem}");
        let mut ops = vec![
            Op::Upload(UploadFile {
                source,
                sha256: sha256.clone(),
                dest: archive.clone(),
                mode: 0o644,
            }),
            Op::Extract(ExtractTarball {
                archive,
                sha256,
                dest: staging.clone(),
            }),
        ];
        for bin in ["etcd", "etcdctl"] {
            ops.push(Op::Copy(CopyFile {
                src: format!("{staging}/{stem}/{bin}"),
                dest: format!("{}/{bin}", self.layout.bin_dir),
                mode: 0o755,
            }));
        }
        Ok(ops)
    }
}

/// Whether etcd `version` still reads `enable-v2` (the v2 API flag, removed in etcd v3.6: its
/// CHANGELOG-3.6 "Removed `--enable-v2`"); an unknown version gets it, as before.
pub fn has_enable_v2(version: Option<&str>) -> bool {
    let Some(v) = version else { return true };
    let mut parts = v.trim_start_matches('v').split('.');
    let (Some(Ok(major)), Some(Ok(minor))) = (
        parts.next().map(str::parse::<u32>),
        parts.next().map(str::parse::<u32>),
    ) else {
        return true;
    };
    (major, minor) < (3, 6)
}

/// Data directory, etcd.conf.yml and the unit; a running member is restarted when they change.
pub struct EtcdConfig {
    /// The members and paths.
    pub layout: Arc<EtcdLayout>,
}

impl Step for EtcdConfig {
    fn name(&self) -> &str {
        "etcd-config"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let l = &self.layout;
        Ok(vec![
            Op::Mkdir(CreateDir {
                path: l.data_dir.clone(),
                mode: 0o700,
            }),
            Op::Template(RenderTemplate::new(
                "etcd/etcd.conf.yml.tera",
                &l.config_context(&node.name)?,
                l.config.clone(),
                0o644,
            )?),
            Op::Template(RenderTemplate::new(
                "etcd/etcd.service.tera",
                &l.unit_context(&node.arch),
                UNIT_FILE,
                0o644,
            )?),
            Op::Run(
                RunCommand::new(script!("systemctl daemon-reload\n{}", restart_if_running()))
                    .when_changed(),
            ),
        ])
    }
}

/// `systemctl enable etcd && systemctl start --no-block etcd`: every member is started before
/// anyone waits (a new member becomes active only once a quorum has joined).
pub struct StartEtcd;

impl Step for StartEtcd {
    fn name(&self) -> &str {
        "start-etcd"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "systemctl enable {UNIT}\nsystemctl start --no-block {UNIT}"
            ))
            .unless(script!(
                "systemctl is-enabled -q {UNIT} && systemctl is-active -q {UNIT}"
            ))
            .verify(script!("systemctl is-enabled -q {UNIT}"))
            .undo(script!(
                "systemctl disable --now {UNIT} 2>/dev/null || true"
            )),
        )])
    }
}

/// Waits until every member reports healthy.
pub struct EtcdHealth {
    /// The members expected healthy.
    pub layout: Arc<EtcdLayout>,
}

impl Step for EtcdHealth {
    fn name(&self) -> &str {
        "etcd-cluster-health"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Wait(WaitFor {
            what: format!(
                "etcd cluster healthy ({} members)",
                self.layout.members.len()
            ),
            check: self.layout.health_command(&node.name),
            timeout: Duration::from_secs(240),
            interval: Duration::from_secs(3),
        })])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(300),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// The etcd part of a "delete cluster" pipeline: stops and disables etcd and removes its unit,
/// configuration, certificates, binaries, staging files and DATA (not reverted: deleting is the
/// point).
pub struct EtcdDeleteModule(pub Arc<InstallContext>);

/// The etcd delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> EtcdDeleteModule {
    EtcdDeleteModule(ctx.clone())
}

impl Module for EtcdDeleteModule {
    fn name(&self) -> &str {
        "delete-etcd"
    }
    fn skip(&self) -> Option<String> {
        EtcdModule(self.0.clone()).skip()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let layout = Arc::new(EtcdLayout::from_context(&self.0));
        let mut hosts = self.0.with_role(Role::Etcd);
        for m in self.0.with_role(Role::Master) {
            if !hosts.contains(&m) {
                hosts.push(m);
            }
        }
        Ok(vec![
            Task::new("delete-etcd", hosts).step(RemoveEtcd { layout })
        ])
    }
}

/// Stops etcd and removes everything the install put on the node, and makes systemd forget the
/// unit (`reset-failed`: a member stopped after losing quorum exits failed, and systemd would
/// list the removed unit as `failed` — found on real v1.20.2 nodes after delete).
pub struct RemoveEtcd {
    layout: Arc<EtcdLayout>,
}

impl Step for RemoveEtcd {
    fn name(&self) -> &str {
        "remove-etcd"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let l = &self.layout;
        let paths = [
            UNIT_FILE.to_string(),
            l.config.clone(),
            format!("{}/etcd", l.bin_dir),
            format!("{}/etcdctl", l.bin_dir),
        ];
        let dirs = [
            l.cert_dir.clone(),
            l.data_dir.clone(),
            // What `restore` leaves beside the data: its marker (the restore id).
            format!("{}.kubexm-restore", l.data_dir),
        ];
        let rm_files = shell::words(&paths);
        // ... and the data each restore replaced (`<data>.before-restore-<id>`).
        let rm_dirs = shell::words(&dirs).arg(script!("{d}.before-restore-*", d = &l.data_dir));
        let gone = Script::join(
            paths
                .iter()
                .chain(dirs.iter())
                .map(|p| script!("[ ! -e {p} ]", p = p)),
            " && ",
        );
        Ok(vec![
            Op::Systemd(Systemd::new(SystemdAction::DisableNow(UNIT.to_string()))),
            Op::Run(
                RunCommand::new(script!(
                    "rm -f -- {files}\nrm -rf -- {dirs} {ARTIFACTS_DIR} {EXTRACT_DIR}/etcd-*\nrmdir /etc/etcd {parent} 2>/dev/null || true\nsystemctl daemon-reload\nsystemctl reset-failed {UNIT} 2>/dev/null || true",
                    files = rm_files,
                    dirs = rm_dirs,
                    // The default certificate directory's parent (`/etc/ssl/etcd`) is KubeXM's too.
                    parent = if l.cert_dir == CERT_DIR {
                        Script::new("/etc/ssl/etcd")
                    } else {
                        Script::empty()
                    }
                ))
                .unless(script!(
                    "{} && ! ls -d {}.before-restore-* >/dev/null 2>&1",
                    gone,
                    l.data_dir
                )),
            ),
        ])
    }
}

#[cfg(test)]
mod version_tests {
    use super::has_enable_v2;

    /// etcd CHANGELOG-3.6: `--enable-v2` removed (3.5 still reads it).
    #[test]
    fn enable_v2_only_before_3_6() {
        assert!(has_enable_v2(Some("v3.4.23")));
        assert!(has_enable_v2(Some("3.5.24")));
        assert!(!has_enable_v2(Some("v3.6.5")));
        assert!(!has_enable_v2(Some("3.7.0")));
        assert!(has_enable_v2(None));
    }

    #[test]
    fn etcd_3_6_configuration_has_no_enable_v2() {
        let member = super::Member {
            name: "m1".into(),
            address: "10.0.0.1".into(),
        };
        let mut l = super::EtcdLayout::new("c", vec![member]);
        l.version = Some("v3.5.24".into());
        assert!(l
            .render_config("m1")
            .expect("3.5")
            .contains("enable-v2: false\n"));
        l.version = Some("v3.6.5".into());
        let text = l.render_config("m1").expect("3.6");
        assert!(!text.contains("enable-v2"), "{text}");
        assert!(text.contains("logger: \"zap\""));
    }
}
