//! Registry credentials: `spec.registry.auths` from cluster.yaml first, then the user's docker
//! `config.json` (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`). Never logged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use kubexm_manifests::model::RegistryAuth as ClusterAuth;
use kubexm_manifests::secret::Secret;
use oci_client::secrets::RegistryAuth;

/// Credentials per registry host.
#[derive(Default)]
pub struct Credentials {
    by_host: BTreeMap<String, (String, Secret)>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("hosts", &self.by_host.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A docker config.json that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("docker config `{path}`: {detail}")]
pub struct DockerConfigError {
    /// File.
    pub path: PathBuf,
    /// What is wrong.
    pub detail: String,
}

impl Credentials {
    /// From cluster.yaml auths and, when present, a docker config.json.
    pub fn load(
        auths: &BTreeMap<String, ClusterAuth>,
        docker_config: Option<&Path>,
    ) -> Result<Self, DockerConfigError> {
        let mut c = Credentials::default();
        if let Some(path) = docker_config
            .map(Path::to_owned)
            .or_else(default_docker_config)
        {
            if path.is_file() {
                c.read_docker_config(&path)?;
            }
        }
        for (host, auth) in auths {
            if let (Some(user), Some(pass)) = (&auth.username, &auth.password) {
                c.by_host
                    .insert(normalise(host), (user.clone(), pass.clone()));
            }
        }
        Ok(c)
    }

    fn read_docker_config(&mut self, path: &Path) -> Result<(), DockerConfigError> {
        let err = |detail: String| DockerConfigError {
            path: path.to_owned(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let doc: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| err(format!("not JSON: {e}")))?;
        let Some(auths) = doc.get("auths").and_then(|a| a.as_object()) else {
            return Ok(());
        };
        for (host, entry) in auths {
            let Some(encoded) = entry.get("auth").and_then(|a| a.as_str()) else {
                continue;
            };
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|_| err(format!("auths.{host}.auth is not base64")))?;
            let decoded = String::from_utf8(decoded)
                .map_err(|_| err(format!("auths.{host}.auth is not UTF-8")))?;
            let (user, pass) = decoded
                .split_once(':')
                .ok_or_else(|| err(format!("auths.{host}.auth is not user:password")))?;
            self.by_host
                .insert(normalise(host), (user.to_owned(), Secret::new(pass)));
        }
        Ok(())
    }

    /// The auth to use for `registry` (anonymous when none is known).
    pub fn for_registry(&self, registry: &str) -> RegistryAuth {
        match self.by_host.get(&normalise(registry)) {
            Some((u, p)) => RegistryAuth::Basic(u.clone(), p.expose().to_owned()),
            None => RegistryAuth::Anonymous,
        }
    }
}

fn default_docker_config() -> Option<PathBuf> {
    std::env::var_os("DOCKER_CONFIG")
        .map(|d| PathBuf::from(d).join("config.json"))
        .or_else(|| dirs::home_dir().map(|h| h.join(".docker/config.json")))
}

/// `https://index.docker.io/v1/` and `docker.io` mean the same registry.
fn normalise(host: &str) -> String {
    let h = host
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let h = h.split('/').next().unwrap_or(h);
    match h {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_and_cluster_auths() {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = dir.path().join("config.json");
        let enc = base64::engine::general_purpose::STANDARD.encode("alice:pw1");
        std::fs::write(&cfg, format!(r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{enc}"}},"reg:5000":{{"auth":"{enc}"}}}}}}"#)).expect("write");
        let mut auths = BTreeMap::new();
        auths.insert(
            "reg:5000".to_owned(),
            ClusterAuth {
                username: Some("bob".into()),
                password: Some(Secret::new("pw2")),
                ..ClusterAuth::default()
            },
        );
        let c = Credentials::load(&auths, Some(&cfg)).expect("loads");
        assert!(
            matches!(c.for_registry("docker.io"), RegistryAuth::Basic(u, p) if u == "alice" && p == "pw1")
        );
        assert!(
            matches!(c.for_registry("reg:5000"), RegistryAuth::Basic(u, p) if u == "bob" && p == "pw2")
        );
        assert!(matches!(c.for_registry("quay.io"), RegistryAuth::Anonymous));
        assert!(!format!("{c:?}").contains("pw"));
        std::fs::write(&cfg, r#"{"auths":{"x":{"auth":"!!"}}}"#).expect("write");
        let e = Credentials::load(&BTreeMap::new(), Some(&cfg)).expect_err("bad base64");
        assert!(e.to_string().contains("auths.x.auth is not base64"), "{e}");
    }
}
