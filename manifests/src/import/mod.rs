//! Import of KubeKey configurations into a KubeXM `cluster.yaml`.
//!
//! Two KubeKey formats are read:
//!
//! - KubeKey v1/v2/v3 `apiVersion: kubekey.kubesphere.io/v1alpha2`, `kind: Cluster` (one file:
//!   hosts, roleGroups, controlPlaneEndpoint, kubernetes, etcd, network, registry, addons, …);
//! - KubeKey v4 `apiVersion: kubekey.kubesphere.io/v1`, a `kind: Config` (cluster settings as a
//!   tree of variables) plus a `kind: Inventory` (hosts and groups).
//!
//! Every field is accounted for: it is mapped, or it is listed in the [`Report`] with the reason
//! it does not map (KubeXM has no such setting, the value cannot be expressed, …). Where the two
//! tools disagree on what a configuration means (KubeKey points every node at the first master
//! when no load balancer is set, KubeXM refuses a multi-master cluster without one), the
//! importer decides and says so in [`Report::decisions`]. The result is validated like any
//! `cluster.yaml` before it is returned.
//!
//! ```no_run
//! use kubexm_manifests::catalog::Catalog;
//! use kubexm_manifests::import::{import_kubekey, ImportOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let catalog = Catalog::builtin_with_override(None)?;
//! let text = std::fs::read_to_string("config-sample.yaml")?;
//! let opts = ImportOptions::new("cluster.yaml.secrets");
//! let imported = import_kubekey(&[("config-sample.yaml", text.as_str())], &opts, &catalog)?;
//! println!("{} fields not mapped", imported.report.unmapped.len());
//! # Ok(()) }
//! ```

mod common;
mod doc;
mod report;
mod v1alpha2;
mod v4;

use serde_json::Value;
use thiserror::Error;

use crate::catalog::Catalog;
use crate::display::Untrusted;
use crate::model::ClusterFile;
use crate::secret::Secret;
use crate::validate::{validate, Problem};
use crate::yaml::{self, YamlError};

pub use report::{Decision, Report, Unmapped};

/// `apiVersion` of KubeKey v1–v3 cluster files.
pub const KUBEKEY_V1ALPHA2: &str = "kubekey.kubesphere.io/v1alpha2";
/// `apiVersion` of KubeKey v4 Config and Inventory files.
pub const KUBEKEY_V1: &str = "kubekey.kubesphere.io/v1";

/// What kind of foreign document a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// KubeKey v1alpha2 `Cluster`.
    KubeKeyCluster,
    /// KubeKey v4 `Config`.
    KubeKeyConfig,
    /// KubeKey v4 `Inventory`.
    KubeKeyInventory,
}

impl Format {
    /// `apiVersion kind` as written in such files.
    pub fn describe(self) -> &'static str {
        match self {
            Format::KubeKeyCluster => "KubeKey v1alpha2 Cluster",
            Format::KubeKeyConfig => "KubeKey v4 Config",
            Format::KubeKeyInventory => "KubeKey v4 Inventory",
        }
    }
}

/// Recognises a KubeKey document by its `apiVersion` (and `kind`); `None` for anything else.
pub fn detect(text: &str) -> Option<Format> {
    let value: Value = serde_saphyr::from_str_with_options(text, yaml::options()).ok()?;
    let api = value.get("apiVersion")?.as_str()?;
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    match (api, kind) {
        (KUBEKEY_V1ALPHA2, "Cluster") => Some(Format::KubeKeyCluster),
        // `skills/kubekey/references/config.md` writes v1alpha2 for the v4 Config too.
        (KUBEKEY_V1 | KUBEKEY_V1ALPHA2, "Config") => Some(Format::KubeKeyConfig),
        (KUBEKEY_V1, "Inventory") => Some(Format::KubeKeyInventory),
        _ => None,
    }
}

/// Choices the KubeKey file cannot make for KubeXM.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportOptions {
    /// `metadata.name` of the result (default: the KubeKey `metadata.name`).
    pub name: Option<String>,
    /// Kubernetes version to install instead of the one KubeKey asks for (needed when KubeKey's
    /// is not in KubeXM's catalog).
    pub kubernetes_version: Option<String>,
    /// Network interface carrying the API VIP (kube-vip; KubeKey detects it on the node).
    pub vip_interface: Option<String>,
    /// Directory, relative to the written cluster.yaml, that receives host passwords and
    /// inline private keys (referenced with `passwordFile` and `privateKeyPath`).
    pub secrets_dir: String,
}

impl ImportOptions {
    /// Options with no overrides; secrets go to `secrets_dir`.
    pub fn new(secrets_dir: impl Into<String>) -> Self {
        Self {
            name: None,
            kubernetes_version: None,
            vip_interface: None,
            secrets_dir: secrets_dir.into(),
        }
    }
}

/// A secret the importer moved out of the cluster description into its own file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFile {
    /// Path relative to the written cluster.yaml (`cluster.yaml.secrets/node1.password`).
    pub path: String,
    /// Content (written with mode 0600).
    pub content: Secret,
}

/// The result of an import.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The cluster description (validated).
    pub cluster: ClusterFile,
    /// Files the description points at for host passwords and keys.
    pub secret_files: Vec<SecretFile>,
    /// What was mapped, what was not and why.
    pub report: Report,
}

impl Imported {
    /// The YAML to write: the report as comments, then the description. Registry passwords,
    /// which cluster.yaml only holds inline, are written out (the caller keeps the file private:
    /// see [`Imported::has_inline_secrets`]).
    ///
    /// # Errors
    ///
    /// Serialization failures (not expected for a validated description).
    pub fn render(&self, origin: &str) -> Result<String, ImportError> {
        let mut value =
            serde_json::to_value(&self.cluster).map_err(|e| ImportError::Render(e.to_string()))?;
        common::expose_inline_secrets(&self.cluster, &mut value);
        common::prune(&mut value);
        let body =
            serde_saphyr::to_string(&value).map_err(|e| ImportError::Render(e.to_string()))?;
        Ok(format!("{}{body}", self.report.as_comments(origin)))
    }

    /// Whether [`Imported::render`] writes passwords inline (registry and Harbor passwords).
    pub fn has_inline_secrets(&self) -> bool {
        common::has_inline_secrets(&self.cluster)
    }
}

/// Why an import failed. Nothing is written in any case.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ImportError {
    /// A file is not YAML.
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// A file is not a KubeKey document this importer reads.
    #[error("`{}` is not a KubeKey configuration (apiVersion `{}`, kind `{}`)", Untrusted(.file), Untrusted(.api_version), Untrusted(.kind))]
    NotKubeKey {
        /// File.
        file: String,
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
    },
    /// A file could not be read.
    #[error("cannot read `{}`", Untrusted(.file))]
    Read {
        /// File.
        file: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A file is larger than any KubeKey configuration.
    #[error("`{}` is {size} bytes or more; a KubeKey configuration is at most {MAX_KUBEKEY_FILE} bytes (as a cluster.yaml is)", Untrusted(.file))]
    TooLarge {
        /// File.
        file: String,
        /// Its size (at least).
        size: u64,
    },
    /// The files given do not make one configuration.
    #[error("{message}")]
    Inputs {
        /// What is wrong and what to pass.
        message: String,
    },
    /// A field KubeXM needs is absent or unusable, and no option supplies it.
    #[error("`{file}`: `{field}`: {message}\n    hint: {hint}")]
    Field {
        /// File.
        file: String,
        /// KubeKey field path.
        field: String,
        /// What is wrong.
        message: String,
        /// What to do.
        hint: String,
    },
    /// The mapped description breaks KubeXM's rules.
    #[error("the imported cluster description is not valid ({} problem{}, named by their cluster.yaml fields):\n{}\nhint: change the KubeKey file, or pass --kubernetes-version, --vip-interface or --name", .problems.len(), if .problems.len() == 1 { "" } else { "s" }, render_problems(.problems))]
    Invalid {
        /// Every problem, in cluster.yaml terms.
        problems: Vec<Problem>,
    },
    /// The description could not be written out.
    #[error("cannot render the cluster description: {0}")]
    Render(String),
}

fn render_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Largest KubeKey file imported: the same bound as `cluster.yaml`'s
/// ([`crate::load::MAX_CLUSTER_YAML`]), which describes the same cluster.
pub const MAX_KUBEKEY_FILE: u64 = crate::load::MAX_CLUSTER_YAML;

/// Reads a KubeKey file to import, at most [`MAX_KUBEKEY_FILE`] bytes (a larger file is refused
/// without being read whole).
///
/// # Errors
///
/// [`ImportError::Read`] or [`ImportError::TooLarge`].
pub fn read_input(path: &std::path::Path) -> Result<String, ImportError> {
    use std::io::Read;
    let file = path.display().to_string();
    let read_err = |source| ImportError::Read {
        file: file.clone(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(read_err)?
        .take(MAX_KUBEKEY_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_KUBEKEY_FILE {
        let size = std::fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
        return Err(ImportError::TooLarge { file, size });
    }
    String::from_utf8(bytes).map_err(|e| {
        read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {e}"),
        ))
    })
}

/// Imports KubeKey files: one v1alpha2 `Cluster`, or a v4 `Config` and `Inventory` (in any
/// order). Each input is `(file name, text)`.
///
/// # Errors
///
/// See [`ImportError`]: unreadable YAML, a file that is not KubeKey's, a value KubeXM needs that
/// neither the file nor `opts` gives, or a result that fails validation.
pub fn import_kubekey(
    inputs: &[(&str, &str)],
    opts: &ImportOptions,
    catalog: &Catalog,
) -> Result<Imported, ImportError> {
    let mut cluster = None;
    let mut config = None;
    let mut inventory = None;
    for (file, text) in inputs {
        if text.len() as u64 > MAX_KUBEKEY_FILE {
            return Err(ImportError::TooLarge {
                file: (*file).to_owned(),
                size: text.len() as u64,
            });
        }
        let value: Value = yaml::from_str(text, file)?;
        let api = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
        let slot = match detect(text) {
            Some(Format::KubeKeyCluster) => &mut cluster,
            Some(Format::KubeKeyConfig) => &mut config,
            Some(Format::KubeKeyInventory) => &mut inventory,
            None => {
                return Err(ImportError::NotKubeKey {
                    file: (*file).to_owned(),
                    api_version: api.to_owned(),
                    kind: kind.to_owned(),
                })
            }
        };
        if slot.is_some() {
            return Err(ImportError::Inputs {
                message: format!("`{file}` is a second {kind}; give one of each"),
            });
        }
        *slot = Some(((*file).to_owned(), value));
    }
    let imported = match (cluster, config, inventory) {
        (Some((file, value)), None, None) => v1alpha2::import(&file, value, opts, catalog)?,
        (None, Some((cfile, config)), Some((ifile, inventory))) => {
            v4::import((&cfile, config), (&ifile, inventory), opts, catalog)?
        }
        (Some(_), _, _) => {
            return Err(ImportError::Inputs {
                message: "a KubeKey v1alpha2 Cluster is imported on its own; the v4 Config and Inventory are another format".to_owned(),
            })
        }
        (None, Some(_), None) => {
            return Err(ImportError::Inputs {
                message: "a KubeKey v4 Config holds no hosts: pass its Inventory too (`--inventory inventory.yaml`)".to_owned(),
            })
        }
        (None, None, Some(_)) => {
            return Err(ImportError::Inputs {
                message: "a KubeKey v4 Inventory holds no cluster settings: pass the Config with -f (e.g. config-v1.33.1.yaml from `kk create config`)".to_owned(),
            })
        }
        (None, None, None) => {
            return Err(ImportError::Inputs {
                message: "no file to import".to_owned(),
            })
        }
    };
    let valid = validate(imported.cluster.clone(), catalog);
    match valid {
        Ok(_) => Ok(imported),
        Err(problems) => Err(ImportError::Invalid { problems }),
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    #[test]
    fn a_kubekey_file_is_bounded_like_cluster_yaml() {
        let dir = std::env::temp_dir().join(format!("kubexm-import-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let big = dir.join("config-sample.yaml");
        let mut text = String::from("apiVersion: kubekey.kubesphere.io/v1alpha2\nkind: Cluster\n");
        while text.len() as u64 <= MAX_KUBEKEY_FILE {
            text.push_str("# padding padding padding padding padding padding padding\n");
        }
        std::fs::write(&big, &text).expect("write");
        let err = read_input(&big).expect_err("too large");
        assert!(
            matches!(err, ImportError::TooLarge { size, .. } if size == text.len() as u64),
            "{err}"
        );
        assert!(err.to_string().contains("at most 1048576 bytes"), "{err}");
        let err = import_kubekey(
            &[("config-sample.yaml", text.as_str())],
            &ImportOptions::new("x.secrets"),
            &Catalog::builtin().expect("catalog"),
        )
        .expect_err("too large");
        assert!(matches!(err, ImportError::TooLarge { .. }), "{err}");
        let small = dir.join("small.yaml");
        std::fs::write(&small, "kind: Cluster\n").expect("write");
        assert_eq!(read_input(&small).expect("read"), "kind: Cluster\n");
        let _ = std::fs::remove_dir_all(&dir);

        let err = import_kubekey(
            &[("f.yaml", "apiVersion: \"\\e[2Jv1\"\nkind: \"\\rX\"\n")],
            &ImportOptions::new("x.secrets"),
            &Catalog::builtin().expect("catalog"),
        )
        .expect_err("not KubeKey");
        let shown = err.to_string();
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\r'),
            "{shown:?}"
        );
    }
}
