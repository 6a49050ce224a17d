//! How to reach and log in to one node.

use std::path::PathBuf;
use std::time::Duration;

use kubexm_manifests::secret::Secret;

/// How to reach and log in to one node.
#[derive(Debug, Clone)]
pub struct SshOptions {
    /// Node name (used in every error and log line).
    pub node: String,
    /// Address (IP or DNS name) as written in the `known_hosts` file.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Login user.
    pub user: String,
    /// Private key (OpenSSH format, ed25519 or RSA, not passphrase-protected).
    pub private_key: Option<PathBuf>,
    /// Login password, also given to `sudo` for a non-root user.
    pub password: Option<Secret>,
    /// The OpenSSH `known_hosts` file host keys are checked against.
    pub known_hosts: PathBuf,
    /// Record unknown host keys instead of refusing them (changed keys are always refused).
    pub accept_new_host_keys: bool,
    /// Limit for TCP connect, key exchange and authentication.
    pub connect_timeout: Duration,
    /// Keepalive interval; the connection is declared dead after 3 unanswered keepalives.
    pub keepalive_interval: Duration,
    /// Most channels open at once on the connection (sshd's `MaxSessions`, default 10).
    pub max_channels: usize,
}

impl SshOptions {
    /// Options with defaults: port 22, no key or password, unknown host keys refused, 15 s
    /// connect timeout, 15 s keepalive, 8 channels.
    pub fn new(
        node: impl Into<String>,
        host: impl Into<String>,
        user: impl Into<String>,
        known_hosts: impl Into<PathBuf>,
    ) -> Self {
        Self {
            node: node.into(),
            host: host.into(),
            port: 22,
            user: user.into(),
            private_key: None,
            password: None,
            known_hosts: known_hosts.into(),
            accept_new_host_keys: false,
            connect_timeout: Duration::from_secs(15),
            keepalive_interval: Duration::from_secs(15),
            max_channels: 8,
        }
    }
}
