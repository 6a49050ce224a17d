//! `certs renew` for the private registry's TLS (`registry.type: registry | harbor`): the
//! server certificate re-issued on the control host from the kept registry CA (the renewal's
//! key directory re-issues what is due, [`crate::pki::Reissue`]) and deployed by the registry
//! module's own deploy task, which restarts the registry (docker-registry) or re-runs Harbor's
//! installer (its certificate is part of the installation's stamp) only when the files changed.
//! The nodes trust the CA, which does not change, so nothing else moves. Then the registry must
//! serve the renewed certificate.

use std::time::Duration;

use kubexm_manifests::model::RegistryType;
use kubexm_manifests::resolve::Role;

use super::renew::Renew;
use crate::modules::registry::RegistryModule;
use crate::pipeline::ops::{Op, WaitFor};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::shell;

/// The registry's (or Harbor's) server certificate renewed.
pub struct RenewRegistryModule(pub Renew);

impl Module for RenewRegistryModule {
    fn name(&self) -> &str {
        "renew-registry-tls"
    }
    fn skip(&self) -> Option<String> {
        match self.0.ctx.cluster.file.spec.registry.kind {
            RegistryType::Registry | RegistryType::Harbor => (!self.0.registry).then(|| {
                format!(
                    "the registry's certificate has {} days left or more",
                    self.0.under_days
                )
            }),
            RegistryType::None | RegistryType::External => {
                Some("KubeXM runs no registry here (registry.type none or external)".into())
            }
        }
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let r = &self.0;
        let deploy = RegistryModule(r.ctx.clone())
            .tasks()?
            .into_iter()
            .find(|t| t.name.starts_with("deploy-"))
            .ok_or_else(|| {
                StepError::Invalid(
                    "the registry module has no deploy task for this registry".into(),
                )
            })?;
        let host = r.ctx.with_role(Role::Registry);
        let endpoint = r.ctx.registry_endpoint().ok_or_else(|| {
            StepError::Invalid("spec.registry: no registry endpoint (set privateRegistry)".into())
        })?;
        let (name, port) = match endpoint.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_string(), p.to_string()),
            _ => (endpoint.clone(), "443".to_string()),
        };
        let cert_file = match r.ctx.cluster.file.spec.registry.kind {
            RegistryType::Harbor => {
                format!("{}/server.crt", crate::modules::registry::harbor::TLS_DIR)
            }
            _ => format!("{}/tls/server.crt", crate::modules::registry::CONFIG_DIR),
        };
        Ok(vec![
            deploy,
            Task::new("registry-serves-renewed-certificate", host).step(ServesRenewed {
                name,
                port,
                cert_file,
            }),
        ])
    }
}

/// The registry on this host serves (for its name) the certificate in `cert_file`, and it is
/// valid: the renewed one, not the one it had when it started.
pub struct ServesRenewed {
    /// The registry's name (SNI).
    pub name: String,
    /// Its port.
    pub port: String,
    /// The certificate file it was given.
    pub cert_file: String,
}

impl Step for ServesRenewed {
    fn name(&self) -> &str {
        "registry-serves-renewed-certificate"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let f = shell::quote(&self.cert_file);
        Ok(vec![Op::Wait(WaitFor {
            what: format!("the registry serving its renewed certificate for {}", self.name),
            check: format!(
                "openssl x509 -in {f} -noout -checkend 0 >/dev/null && [ \"$(echo | timeout 10 openssl s_client -connect 127.0.0.1:{} -servername {} 2>/dev/null | openssl x509 -noout -fingerprint -sha256)\" = \"$(openssl x509 -in {f} -noout -fingerprint -sha256)\" ]",
                shell::quote(&self.port),
                shell::quote(&self.name),
            ),
            timeout: Duration::from_secs(300),
            interval: Duration::from_secs(3),
        })])
    }
}
