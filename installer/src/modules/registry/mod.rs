//! The private registry, per `registry.type`:
//! * `registry`: the bundled distribution registry as a systemd service on the registry host,
//!   with TLS from a CA KubeXM makes (kept in the work dir) and optional htpasswd auth.
//! * `harbor`: docker, docker compose and Harbor's offline installer on the registry host, with
//!   `harbor.yml` rendered from `harborConfig` and TLS from the same kind of CA ([`harbor`]).
//! * `external`: only the seeding (and trust of a given CA).
//!
//! Every node trusts the CA (system store, and the directory its container runtime reads);
//! then the control host seeds the registry with every image of the bundle (for Harbor,
//! creating the projects first).

pub mod harbor;

use crate::script;
use kubexm_manifests::resolve::Role;
use std::sync::Arc;

use kubexm_manifests::model::{RegistryType, RuntimeType};
use kubexm_manifests::secret::Secret;
use sha2::{Digest, Sha256};

use crate::context::InstallContext;
use crate::modules::task_id::TaskId;
use crate::pipeline::ops::{
    CreateDir, ExtractTarball, Op, RenderTemplate, RunCommand, SeedImages, Systemd, SystemdAction,
    UploadFile, WaitFor,
};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::pki::{CertSpec, San, Usage};
use crate::run::CONTROL_HOST;
use crate::runner::{shell, UploadSource};
use crate::seed::{RegistryTarget, SeedOptions};

/// The task pushing the bundle's images into the registry (from the control host).
pub const SEED_REGISTRY: TaskId = TaskId::new("seed-registry");

/// Where the registry's configuration, TLS files and htpasswd live on the registry host.
pub const CONFIG_DIR: &str = "/etc/kubexm-registry";
/// Default data directory on the registry host.
pub const DATA_DIR: &str = "/var/lib/kubexm-registry";
/// The registry binary on the registry host.
pub const BINARY: &str = "/usr/local/bin/kubexm-registry";
/// The systemd unit.
pub const UNIT: &str = "kubexm-registry.service";
/// The CA as every node keeps it (the system store and containerd copy it from here).
pub const NODE_CA: &str = "/etc/kubexm/registry-ca.crt";

/// The private registry module.
pub struct RegistryModule(pub Arc<InstallContext>);

/// Everything the registry steps share, computed once on the control host.
struct RegistryPlan {
    cluster: String,
    endpoint: String,
    port: u16,
    host_node: Option<Node>,
    ca_pem: Option<String>,
    server: Option<crate::pki::IssuedCert>,
    htpasswd: Option<String>,
    username: Option<String>,
    password: Option<Secret>,
    plain_http: bool,
    data_dir: String,
    runtime: RuntimeType,
    kind: RegistryType,
}

fn port_of(endpoint: &str) -> Option<u16> {
    endpoint.rsplit_once(':').and_then(|(_, p)| p.parse().ok())
}

fn host_of(endpoint: &str) -> &str {
    endpoint.rsplit_once(':').map_or(endpoint, |(h, _)| h)
}

/// A bcrypt htpasswd line whose salt is derived from the cluster, user and password, so a re-run
/// writes the same bytes (and the upload is skipped) while a changed password changes it.
pub fn htpasswd_line(cluster: &str, user: &str, password: &str) -> Result<String, StepError> {
    let digest = Sha256::digest(format!("kubexm-htpasswd\0{cluster}\0{user}\0{password}"));
    let mut salt = [0u8; 16];
    salt.copy_from_slice(&digest[..16]);
    let hash = bcrypt::hash_with_salt(password, 10, salt)
        .map_err(|e| StepError::Invalid(format!("htpasswd for {user}: {e}")))?;
    Ok(format!(
        "{user}:{}\n",
        hash.format_for_version(bcrypt::Version::TwoY)
    ))
}

impl RegistryModule {
    fn plan(&self) -> Result<RegistryPlan, StepError> {
        let ctx = &self.0;
        let spec = &ctx.cluster.file.spec.registry;
        let endpoint = ctx.registry_endpoint().ok_or_else(|| {
            StepError::Invalid("spec.registry: no registry endpoint (set privateRegistry)".into())
        })?;
        let port = port_of(&endpoint).unwrap_or(443);
        let auth = spec.auths.get(&endpoint);
        let mut username = auth.and_then(|a| a.username.clone());
        let mut password = auth.and_then(|a| a.password.clone());
        if spec.kind == RegistryType::Harbor && username.is_none() {
            // Seeding (and project creation) as Harbor's admin.
            username = Some(harbor::ADMIN.to_string());
            password = spec.harbor_config.admin_password.clone();
        }
        let plain_http = auth.is_some_and(|a| a.plain_http);
        let host_node = ctx
            .with_role(Role::Registry)
            .first()
            .and_then(|n| ctx.node(n))
            .cloned();
        let cluster = ctx.cluster.cluster_name().to_string();
        let (mut ca_pem, mut server, mut htpasswd) = (None, None, None);
        if matches!(spec.kind, RegistryType::Registry | RegistryType::Harbor) {
            let node = host_node.as_ref().ok_or_else(|| {
                StepError::Invalid("spec.roleGroups.registry: name the registry host".into())
            })?;
            let dir = ctx.key_dir().join("registry");
            let pki = |source: crate::pki::PkiError| StepError::Pki {
                what: "the registry's certificates",
                source,
            };
            let ca = dir
                .ca("registry", &format!("kubexm-{cluster}-registry-ca"))
                .map_err(pki)?;
            let mut sans = vec![
                San::parse(host_of(&endpoint)),
                San::parse(&node.internal_address),
                San::parse(&node.address),
                San::Dns(node.name.clone()),
            ];
            sans.dedup();
            let cert = CertSpec::new(host_of(&endpoint), Usage::Server).sans(sans);
            server = Some(dir.leaf(&ca, "registry-server", &cert).map_err(pki)?);
            ca_pem = Some(ca.cert_pem().to_string());
            if let (Some(u), Some(p), RegistryType::Registry) = (&username, &password, spec.kind) {
                htpasswd = Some(htpasswd_line(&cluster, u, p.expose())?);
            }
        } else if let Some(f) = auth.and_then(|a| a.ca_file.as_ref()) {
            ca_pem = Some(std::fs::read_to_string(f).map_err(|e| {
                StepError::Invalid(format!(
                    "spec.registry.auths[\"{endpoint}\"].caFile: cannot read {f}: {e}"
                ))
            })?);
        }
        Ok(RegistryPlan {
            cluster,
            endpoint,
            port,
            host_node,
            ca_pem,
            server,
            htpasswd,
            username,
            password,
            plain_http,
            data_dir: spec.data_dir.clone().unwrap_or_else(|| {
                match spec.kind {
                    RegistryType::Harbor => harbor::DATA_DIR,
                    _ => DATA_DIR,
                }
                .to_string()
            }),
            runtime: ctx.cluster.file.spec.runtime.kind,
            kind: spec.kind,
        })
    }
}

impl Module for RegistryModule {
    fn name(&self) -> &str {
        "registry"
    }

    fn skip(&self) -> Option<String> {
        match self.0.cluster.file.spec.registry.kind {
            RegistryType::None => {
                Some("registry.type is none: nodes pull from the zone's registries".into())
            }
            RegistryType::Registry | RegistryType::Harbor | RegistryType::External => None,
        }
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let p = Arc::new(self.plan()?);
        let ctx = &self.0;
        let mut tasks = Vec::new();
        match (&p.host_node, &p.server, p.kind) {
            (Some(node), Some(_), RegistryType::Registry) => tasks.push(
                Task::new("deploy-registry", [node.name.clone()])
                    .step(InstallRegistryBinary { ctx: ctx.clone() })
                    .step(ConfigureRegistry { p: p.clone() }),
            ),
            (Some(node), Some(_), RegistryType::Harbor) => {
                tasks.push(harbor::deploy_task(ctx, &p, node)?)
            }
            _ => {}
        }
        if p.ca_pem.is_some() {
            tasks.push(
                Task::new("trust-registry", ctx.all()).step(TrustRegistryCa { p: p.clone() }),
            );
        }
        let bundle = ctx.bundle.as_ref();
        let spec = &ctx.cluster.file.spec.registry;
        // The control host reaches the registry host by its SSH address; the certificate names
        // it. Harbor's token service sends clients to its `hostname` (the endpoint), so Harbor
        // is seeded by that name: the control host must resolve it.
        let seed_host = match (&p.host_node, spec.kind) {
            (Some(n), RegistryType::Registry) => format!("{}:{}", n.address, p.port),
            _ => p.endpoint.clone(),
        };
        let harbor = spec.kind == RegistryType::Harbor;
        tasks.push(
            Task::new(SEED_REGISTRY, [CONTROL_HOST]).step(SeedRegistry {
                op: SeedImages {
                    dir: bundle.map(|b| b.dir.clone()),
                    manifest: bundle.map(|b| Arc::new(b.manifest.clone())),
                    images: bundle
                        .map_or_else(|| ctx.image_references().len(), |b| b.manifest.images.len()),
                    options: SeedOptions {
                        target: RegistryTarget {
                            host: seed_host,
                            plain_http: p.plain_http,
                            ca_pem: p.ca_pem.as_ref().map(|c| c.clone().into_bytes()),
                            username: p.username.clone(),
                            password: p.password.clone(),
                        },
                        project: ctx.registry_namespace(),
                        rewrite: spec.rewrite,
                        harbor: harbor.then_some(true),
                        harbor_projects: if harbor {
                            spec.harbor_config
                                .projects
                                .iter()
                                .map(|p| (p.name.clone(), p.public))
                                .collect()
                        } else {
                            Vec::new()
                        },
                        jobs: 8,
                        attempts: 4,
                        retry_delay: std::time::Duration::from_millis(500),
                        chunk_size: crate::seed::CHUNK,
                    },
                },
            }),
        );
        Ok(tasks)
    }
}

/// The bundled registry binary, uploaded, extracted and installed as [`BINARY`].
struct InstallRegistryBinary {
    ctx: Arc<InstallContext>,
}

impl Step for InstallRegistryBinary {
    fn name(&self) -> &str {
        "install-registry-binary"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let Some((path, rec)) = self.ctx.files_for("registry", node).into_iter().next() else {
            return Err(StepError::Invalid(if self.ctx.bundle.is_some() {
                format!(
                    "the bundle has no registry archive for {} ({}); rebuild it with registry.type registry",
                    node.name, node.arch
                )
            } else {
                format!(
                    "the catalog has no registry archive of the cluster's registry.version for {} ({}); plan with the bundle (--bundle FILE) or a catalog that lists it (--catalog FILE or KUBEXM_CATALOG)",
                    node.name, node.arch
                )
            }));
        };
        let file = rec
            .path
            .rsplit('/')
            .next()
            .unwrap_or("registry.tar.gz")
            .to_string();
        let artifact = format!("/var/lib/kubexm/artifacts/registry/{}/{file}", rec.version);
        let staging = format!("/var/lib/kubexm/extract/registry-{}", rec.version);
        // KubeKey's archive holds `registry`; accept `registry/registry` too.
        let src = script!(
            "s={staging}/registry; [ -d \"$s\" ] && s=$s/registry",
            staging = staging
        );
        Ok(vec![
            Op::Upload(UploadFile {
                source: UploadSource::File(path),
                sha256: rec.sha256.clone(),
                dest: artifact.clone(),
                mode: 0o644,
            }),
            Op::Extract(ExtractTarball {
                archive: artifact,
                sha256: rec.sha256.clone(),
                dest: staging,
            }),
            Op::Run(
                RunCommand::new(script!("{src}\ninstall -m 0755 \"$s\" {BINARY}", src = src))
                    .unless(script!("{src}\ncmp -s \"$s\" {BINARY}", src = src))
                    .undo(script!("rm -f {BINARY}")),
            ),
        ])
    }
}

/// TLS files, htpasswd, config and unit; the service enabled, restarted when its files changed,
/// and answering on `/v2/`.
struct ConfigureRegistry {
    p: Arc<RegistryPlan>,
}

impl Step for ConfigureRegistry {
    fn name(&self) -> &str {
        "configure-registry"
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: std::time::Duration::from_secs(300),
            ..Policy::default()
        }
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let p = &self.p;
        let (Some(server), Some(ca)) = (&p.server, &p.ca_pem) else {
            return Ok(Vec::new());
        };
        let mut c = tera::Context::new();
        c.insert("cluster", &p.cluster);
        c.insert("data_dir", &p.data_dir);
        c.insert("config_dir", CONFIG_DIR);
        c.insert("port", &p.port);
        c.insert("htpasswd", &p.htpasswd.is_some());
        c.insert("binary", BINARY);
        let mut ops = vec![
            Op::Mkdir(CreateDir {
                path: CONFIG_DIR.into(),
                mode: 0o700,
            }),
            Op::Mkdir(CreateDir {
                path: format!("{CONFIG_DIR}/tls"),
                mode: 0o700,
            }),
            Op::Mkdir(CreateDir {
                path: p.data_dir.clone(),
                mode: 0o700,
            }),
            Op::Upload(UploadFile::bytes(
                ca.clone().into_bytes(),
                format!("{CONFIG_DIR}/tls/ca.crt"),
                0o644,
            )),
            Op::Upload(UploadFile::bytes(
                server.cert_pem.clone().into_bytes(),
                format!("{CONFIG_DIR}/tls/server.crt"),
                0o644,
            )),
            Op::Upload(UploadFile::bytes(
                server.key_pem.clone().into_bytes(),
                format!("{CONFIG_DIR}/tls/server.key"),
                0o600,
            )),
        ];
        if let Some(h) = &p.htpasswd {
            ops.push(Op::Upload(UploadFile::bytes(
                h.clone().into_bytes(),
                format!("{CONFIG_DIR}/htpasswd"),
                0o600,
            )));
        }
        ops.push(Op::Template(RenderTemplate::new(
            "registry/config.yml.tera",
            &c,
            format!("{CONFIG_DIR}/config.yml"),
            0o600,
        )?));
        ops.push(Op::Template(RenderTemplate::new(
            "registry/registry.service.tera",
            &c,
            format!("/etc/systemd/system/{UNIT}"),
            0o644,
        )?));
        ops.push(Op::Run(
            RunCommand::new("systemctl daemon-reload").when_changed(),
        ));
        ops.push(Op::Systemd(Systemd::new(SystemdAction::EnableNow(
            UNIT.into(),
        ))));
        ops.push(Op::Systemd(Systemd::new(SystemdAction::Restart {
            unit: UNIT.into(),
            always: false,
        })));
        ops.push(Op::Wait(WaitFor {
            what: format!("the registry answering on https://127.0.0.1:{}/v2/", p.port),
            check: format!(
                "code=$(curl -s -o /dev/null -w '%{{http_code}}' --cacert {CONFIG_DIR}/tls/ca.crt --resolve {h}:{port}:127.0.0.1 https://{h}:{port}/v2/); [ \"$code\" = 200 ] || [ \"$code\" = 401 ]",
                h = shell::quoted(host_of(&p.endpoint)),
                port = p.port
            ),
            timeout: std::time::Duration::from_secs(60),
            interval: std::time::Duration::from_millis(500),
        }));
        Ok(ops)
    }
}

/// Every node trusts the registry's CA: in the system store and for containerd.
struct TrustRegistryCa {
    p: Arc<RegistryPlan>,
}

impl Step for TrustRegistryCa {
    fn name(&self) -> &str {
        "trust-registry-ca"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let Some(ca) = &self.p.ca_pem else {
            return Ok(Vec::new());
        };
        let ep = &self.p.endpoint;
        Ok(vec![
            Op::Upload(UploadFile::bytes(ca.clone().into_bytes(), NODE_CA, 0o644)),
            Op::Upload(UploadFile::bytes(
                ca.clone().into_bytes(),
                super::runtime::registry_ca_path(self.p.runtime, ep),
                0o644,
            )),
            Op::Run(
                RunCommand::new(script!(
                    "if [ -d /usr/local/share/ca-certificates ] && command -v update-ca-certificates >/dev/null; then\n  cp {NODE_CA} /usr/local/share/ca-certificates/kubexm-registry-ca.crt && update-ca-certificates >/dev/null\nelif [ -d /etc/pki/ca-trust/source/anchors ]; then\n  cp {NODE_CA} /etc/pki/ca-trust/source/anchors/kubexm-registry-ca.crt && update-ca-trust extract\nfi"
                ))
                .when_changed()
                .undo("rm -f /usr/local/share/ca-certificates/kubexm-registry-ca.crt /etc/pki/ca-trust/source/anchors/kubexm-registry-ca.crt\n(command -v update-ca-certificates >/dev/null && update-ca-certificates --fresh >/dev/null) || (command -v update-ca-trust >/dev/null && update-ca-trust extract) || true"),
            ),
        ])
    }
}

/// Seeds the registry from the control host.
struct SeedRegistry {
    op: SeedImages,
}

impl Step for SeedRegistry {
    fn name(&self) -> &str {
        "seed-images"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Seed(self.op.clone())])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: std::time::Duration::from_secs(3600),
            attempts: 2,
            retry_delay: std::time::Duration::from_secs(5),
        }
    }
}

/// The registry part of "delete cluster": on the registry host the service is stopped and
/// disabled and its binary, unit, configuration, TLS files and data are removed; on every node
/// the CA leaves the system store. Not reverted: deleting is the point.
pub struct RegistryDeleteModule(pub Arc<InstallContext>);

/// The registry delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> RegistryDeleteModule {
    RegistryDeleteModule(ctx.clone())
}

impl Module for RegistryDeleteModule {
    fn name(&self) -> &str {
        "delete-registry"
    }
    fn skip(&self) -> Option<String> {
        match self.0.cluster.file.spec.registry.kind {
            RegistryType::Registry | RegistryType::Harbor => None,
            other => Some(format!(
                "registry.type is {other:?}: KubeXM deployed no registry"
            )),
        }
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let spec = &self.0.cluster.file.spec.registry;
        let harbor = spec.kind == RegistryType::Harbor;
        let data_dir = spec
            .data_dir
            .clone()
            .unwrap_or_else(|| if harbor { harbor::DATA_DIR } else { DATA_DIR }.to_string());
        let mut tasks = Vec::new();
        if let Some(host) = self.0.with_role(Role::Registry).into_iter().next() {
            tasks.push(if harbor {
                harbor::delete_task(&self.0, host, data_dir)
            } else {
                Task::new("delete-registry", [host]).step(RemoveRegistry { data_dir })
            });
        }
        tasks.push(Task::new("untrust-registry-ca", self.0.all()).step(UntrustRegistryCa));
        Ok(tasks)
    }
}

/// Stops the registry and removes what the install put on its host.
struct RemoveRegistry {
    data_dir: String,
}

impl Step for RemoveRegistry {
    fn name(&self) -> &str {
        "remove-registry"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let d = shell::quoted(&self.data_dir);
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "systemctl disable --now {UNIT} 2>/dev/null || true\nrm -f /etc/systemd/system/{UNIT} {BINARY}\nsystemctl daemon-reload\nrm -rf {CONFIG_DIR} {d} /var/lib/kubexm/artifacts/registry /var/lib/kubexm/extract/registry-*", d = d
            ))
            .unless(script!(
                "[ ! -e /etc/systemd/system/{UNIT} ] && [ ! -e {BINARY} ] && [ ! -e {CONFIG_DIR} ] && [ ! -e {d} ]", d = d
            )),
        )])
    }
}

/// Removes the registry CA from the node's system store.
struct UntrustRegistryCa;

impl Step for UntrustRegistryCa {
    fn name(&self) -> &str {
        "untrust-registry-ca"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "rm -f {NODE_CA} /usr/local/share/ca-certificates/kubexm-registry-ca.crt /etc/pki/ca-trust/source/anchors/kubexm-registry-ca.crt\n(command -v update-ca-certificates >/dev/null && update-ca-certificates --fresh >/dev/null) || (command -v update-ca-trust >/dev/null && update-ca-trust extract) || true"
            ))
            .unless(script!(
                "[ ! -e {NODE_CA} ] && [ ! -e /usr/local/share/ca-certificates/kubexm-registry-ca.crt ] && [ ! -e /etc/pki/ca-trust/source/anchors/kubexm-registry-ca.crt ]"
            )),
        )])
    }
}
