//! Kubeconfigs with the CA, client certificate and key embedded (base64), one user and one
//! context named `<user>@<cluster>`.

use base64::Engine as _;

use crate::pipeline::ops::RenderTemplate;
use crate::pipeline::StepError;
use crate::pki::IssuedCert;

/// The template every kubeconfig is rendered from.
pub const TEMPLATE: &str = "kubexm/kubeconfig.tera";

/// What a kubeconfig says.
#[derive(Debug, Clone)]
pub struct Kubeconfig<'a> {
    /// Cluster name (also the cluster entry's name).
    pub cluster: &'a str,
    /// API server URL.
    pub server: String,
    /// The cluster CA, PEM.
    pub ca_pem: &'a str,
    /// User name in the file (the certificate's CN).
    pub user: &'a str,
    /// The client certificate and key.
    pub client: &'a IssuedCert,
    /// Who uses it, for the header comment.
    pub purpose: &'a str,
}

impl Kubeconfig<'_> {
    /// The kubeconfig as a file written to `dest` (mode 0600: it holds a private key).
    pub fn render(&self, dest: impl Into<String>) -> Result<RenderTemplate, StepError> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        let mut c = tera::Context::new();
        c.insert("cluster", self.cluster);
        c.insert("server", &self.server);
        c.insert("user", self.user);
        c.insert("purpose", self.purpose);
        c.insert("ca_data", &b64(self.ca_pem));
        c.insert("cert_data", &b64(&self.client.cert_pem));
        c.insert("key_data", &b64(&self.client.key_pem));
        RenderTemplate::new(TEMPLATE, &c, dest, 0o600)
    }
}
