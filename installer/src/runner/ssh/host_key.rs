//! The host-key check against `known_hosts`, and the russh callbacks that run it.

use std::sync::{Arc, Mutex};

use russh::client;
use russh::keys::{HashAlg, PublicKeyOrCertificate};

use super::known_hosts;
use super::options::SshOptions;

/// Outcome of the host-key check, kept so a refused connection can say why.
pub(super) struct HostKeyCheck {
    pub(super) opts: Arc<SshOptions>,
    pub(super) rejection: Mutex<Option<String>>,
}

impl HostKeyCheck {
    fn reject(&self, message: String) -> bool {
        tracing::error!(node = %self.opts.node, "{message}");
        if let Ok(mut slot) = self.rejection.lock() {
            *slot = Some(message);
        }
        false
    }

    pub(super) fn rejection(&self) -> Option<String> {
        self.rejection.lock().ok().and_then(|slot| slot.clone())
    }

    pub(super) fn verify(&self, presented: &PublicKeyOrCertificate) -> bool {
        let o = &self.opts;
        let file = o.known_hosts.display();
        let name = known_hosts::host_pattern(&o.host, o.port);
        let key = match presented {
            PublicKeyOrCertificate::PublicKey { key, .. } => key,
            PublicKeyOrCertificate::Certificate(_) => {
                return self.reject(format!(
                "{name} presented a host certificate; only plain host keys in {file} are supported"
            ))
            }
        };
        let what = format!(
            "{} {}",
            key.algorithm().as_str(),
            key.fingerprint(HashAlg::Sha256)
        );
        match known_hosts::check(&o.known_hosts, &o.host, o.port, key) {
            Err(e) => self.reject(format!("cannot read known_hosts file {file}: {e}")),
            Ok(known_hosts::Verdict::Known) => true,
            Ok(known_hosts::Verdict::Changed { line, recorded }) => self.reject(format!(
                "HOST KEY CHANGED for {name}: the server presents {what} but {file} line {line} \
                 records a different {recorded} key. Refusing to connect (this could be a \
                 man-in-the-middle attack). If the host was reinstalled, check the new key and \
                 replace line {line} of {file}"
            )),
            Ok(known_hosts::Verdict::Revoked { line }) => self.reject(format!(
                "the host key of {name} ({what}) is marked @revoked in {file} line {line}; refusing to connect"
            )),
            Ok(known_hosts::Verdict::Unknown) if o.accept_new_host_keys => {
                match known_hosts::learn(&o.known_hosts, &o.host, o.port, key) {
                    Ok(()) => {
                        tracing::warn!(node = %o.node, "new host key of {name} ({what}) recorded in {file}");
                        true
                    }
                    Err(e) => self.reject(format!(
                        "cannot record the new host key of {name} in {file}: {e}"
                    )),
                }
            }
            Ok(known_hosts::Verdict::Unknown) => self.reject(format!(
                "the host key of {name} ({what}) is not in {file}. Check the fingerprint and add it \
                 (e.g. `ssh-keyscan -p {port} {host} >> {file}`), or pass --accept-new-host-keys \
                 to record it on first connection",
                port = o.port,
                host = o.host
            )),
        }
    }
}

/// russh callbacks: only the host-key check.
pub(super) struct Client {
    pub(super) check: Arc<HostKeyCheck>,
}

impl client::Handler for Client {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server_public_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(self.check.verify(server_public_key))
    }
}
