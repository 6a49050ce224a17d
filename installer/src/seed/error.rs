//! What the seed's files share: the registry to seed and why seeding failed. A leaf: it
//! imports nothing from its siblings, so `mod.rs`, `client.rs` and `harbor.rs` all use it
//! without an import circle. Re-exported as `crate::seed::{RegistryTarget, SeedError}`.

use std::path::PathBuf;
use std::time::Duration;

use kubexm_manifests::display::{Untrusted, UntrustedMax};
use kubexm_manifests::secret::Secret;

/// The registry to seed.
#[derive(Debug, Clone)]
pub struct RegistryTarget {
    /// `host[:port]`.
    pub host: String,
    /// Plain HTTP instead of HTTPS.
    pub plain_http: bool,
    /// Extra CA (PEM) to trust.
    pub ca_pem: Option<Vec<u8>>,
    /// User name.
    pub username: Option<String>,
    /// Password (never logged).
    pub password: Option<Secret>,
}

/// Why seeding failed.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// Bad setup (certificate, header).
    #[error("{0}")]
    Setup(String),
    /// A layout file could not be read.
    #[error("cannot read `{}` from the unpacked bundle", UntrustedMax(.path.to_string_lossy(), 1000))]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The layout does not hold what bundle.json promises.
    #[error("the bundle's image layout is inconsistent: {}", UntrustedMax(.0, 2000))]
    Layout(String),
    /// Credentials missing or refused.
    #[error("registry {registry} refused access: {}", UntrustedMax(.detail, 1000))]
    Unauthorized {
        /// Registry.
        registry: String,
        /// Detail.
        detail: String,
    },
    /// Credentials would go to a token service on another origin than the registry's.
    #[error(
        "registry {registry}: refusing to send the credentials to token service `{}`: it is not on the registry's own origin (the scheme, host and port given), and KubeXM sends the registry's credentials nowhere else\nhint: name the registry by the address that also serves its tokens (Harbor serves them itself), or configure the registry's token service on its own address",
        Untrusted(.realm)
    )]
    Realm {
        /// Registry.
        registry: String,
        /// The realm of the Bearer challenge.
        realm: String,
    },
    /// A URL the registry sent (an upload `Location`) leaves the origin the operator named:
    /// nothing is sent there, with or without credentials.
    #[error(
        "registry {registry}: refusing to follow `{}`: it is not on the registry's own origin (the scheme, host and port given), and requests there would carry the credentials; check the registry's external URL setting",
        UntrustedMax(.url, 500)
    )]
    Origin {
        /// Registry.
        registry: String,
        /// The URL, as sent.
        url: String,
    },
    /// Unexpected status.
    #[error("registry {registry}: {what} in {} answered {status}: {}", Untrusted(.repo), Untrusted(.body))]
    Registry {
        /// Registry.
        registry: String,
        /// Repository.
        repo: String,
        /// Operation.
        what: String,
        /// Status.
        status: u16,
        /// Response body (shortened).
        body: String,
    },
    /// Protocol violation.
    #[error("registry {registry}: {}", UntrustedMax(.detail, 1000))]
    Protocol {
        /// Registry.
        registry: String,
        /// Detail.
        detail: String,
    },
    /// Retries or time exhausted.
    #[error(
        "registry {registry}: {} in repository {}: giving up after {attempts} tries in {:.1}s: {last}",
        Untrusted(.object),
        Untrusted(.repo),
        .elapsed.as_secs_f64()
    )]
    Exhausted {
        /// Registry.
        registry: String,
        /// Repository.
        repo: String,
        /// The blob or manifest (`blob sha256:…`).
        object: String,
        /// Tries made.
        attempts: u32,
        /// Time spent on them.
        elapsed: Duration,
        /// Last error (already escaped).
        last: String,
        /// The HTTP status of the last answer, when the last try got one.
        last_status: Option<reqwest::StatusCode>,
    },
    /// Harbor API error.
    #[error("Harbor at {registry}: {}", UntrustedMax(.detail, 1000))]
    Harbor {
        /// Registry.
        registry: String,
        /// Detail.
        detail: String,
    },
}
