//! The join credentials in what kubeadm prints.
//!
//! Formats read (learned from kubeadm's sources; the samples in the tests follow them byte for
//! byte):
//!
//! * `kubeadm init` ends with the join commands: the control-plane one indented by two spaces,
//!   the worker one not, each continued over lines ending in ` \` whose continuation starts
//!   with a tab (kubeadm v1.21+) or four spaces (v1.14–v1.20):
//!   `kubeadm join HOST:PORT --token T \` / `<tab>--discovery-token-ca-cert-hash sha256:H \` /
//!   `<tab>--control-plane --certificate-key K`. The control-plane command is only printed when
//!   a control-plane endpoint is set; `--certificate-key` only with `--upload-certs`.
//! * `kubeadm token create --print-join-command [--certificate-key K]` prints the same command
//!   on one line.
//! * `kubeadm init phase upload-certs --upload-certs` prints `[upload-certs] Using certificate
//!   key:` and the key on the next line.
//!
//! When the text holds several commands (an init output followed by fresh ones), the last one
//! wins. Errors never quote the text: it holds the token.

use crate::pipeline::Facts;

/// What a node needs to join: the discovery endpoint, the bootstrap token, the CA public key
/// pins, and (for control-plane nodes) the key of the uploaded certificates.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinCredentials {
    /// `HOST:PORT` the join command names.
    pub endpoint: String,
    /// Bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`.
    pub token: String,
    /// `sha256:<64 hex>` pins of the cluster CA's public key.
    pub ca_cert_hashes: Vec<String>,
    /// 64 hex digits; `None` when no certificates were uploaded.
    pub certificate_key: Option<String>,
}

impl std::fmt::Debug for JoinCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinCredentials")
            .field("endpoint", &self.endpoint)
            .field("token_id", &self.token_id())
            .field("ca_cert_hashes", &self.ca_cert_hashes)
            .field(
                "certificate_key",
                &self.certificate_key.as_ref().map(|_| "***"),
            )
            .finish()
    }
}

/// Why no credentials could be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinParseError {
    /// No `kubeadm join` command at all.
    #[error("no `kubeadm join` command in kubeadm's output")]
    NoJoinCommand,
    /// kubeadm was told not to print the token.
    #[error("kubeadm withheld the token (--skip-token-print): run it without that flag")]
    TokenWithheld,
    /// A part of the command is missing or malformed (names the flag, never the value).
    #[error("the `kubeadm join` command has {0}")]
    Malformed(&'static str),
}

/// Fact keys the credentials are stored under.
pub mod keys {
    /// `HOST:PORT`.
    pub const ENDPOINT: &str = "kubeadm.join.endpoint";
    /// The bootstrap token (secret).
    pub const TOKEN: &str = "kubeadm.join.token";
    /// Comma-separated CA pins.
    pub const CA_CERT_HASHES: &str = "kubeadm.join.ca-cert-hashes";
    /// The certificate key (secret).
    pub const CERTIFICATE_KEY: &str = "kubeadm.join.certificate-key";
}

impl JoinCredentials {
    /// The public half of the token (`abcdef` of `abcdef.0123456789abcdef`).
    pub fn token_id(&self) -> &str {
        self.token.split('.').next().unwrap_or("")
    }

    /// As facts.
    pub fn to_facts(&self) -> Vec<(String, String)> {
        let mut v = vec![
            (keys::ENDPOINT.to_string(), self.endpoint.clone()),
            (keys::TOKEN.to_string(), self.token.clone()),
            (
                keys::CA_CERT_HASHES.to_string(),
                self.ca_cert_hashes.join(","),
            ),
        ];
        if let Some(k) = &self.certificate_key {
            v.push((keys::CERTIFICATE_KEY.to_string(), k.clone()));
        }
        v
    }

    /// Read back from facts (`None` when not learned).
    pub fn from_facts(facts: &Facts) -> Option<Self> {
        Some(Self {
            endpoint: facts.get(keys::ENDPOINT)?,
            token: facts.get(keys::TOKEN)?,
            ca_cert_hashes: facts
                .get(keys::CA_CERT_HASHES)?
                .split(',')
                .map(str::to_string)
                .collect(),
            certificate_key: facts.get(keys::CERTIFICATE_KEY),
        })
    }
}

/// The [`crate::pipeline::ops::FactParser`] of the join credentials.
pub fn learn(output: &str) -> Result<Vec<(String, String)>, String> {
    parse(output)
        .map(|c| c.to_facts())
        .map_err(|e| e.to_string())
}

/// Logical lines: a line ending in `\` continues on the next one (its leading blanks dropped).
fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for raw in text.lines() {
        let (part, continued) = match raw.trim_end().strip_suffix('\\') {
            Some(p) => (p, true),
            None => (raw, false),
        };
        let piece = if cur.is_some() {
            part.trim_start()
        } else {
            part
        };
        let line = match cur.take() {
            Some(mut c) => {
                c.push(' ');
                c.push_str(piece);
                c
            }
            None => piece.to_string(),
        };
        if continued {
            cur = Some(line);
        } else {
            out.push(line);
        }
    }
    out.extend(cur);
    out
}

#[derive(Default)]
struct Command {
    endpoint: Option<String>,
    token: Option<String>,
    hashes: Vec<String>,
    key: Option<String>,
}

fn parse_command(line: &str) -> Result<Command, JoinParseError> {
    let mut words = line.split_whitespace().skip(2).peekable();
    let mut c = Command::default();
    while let Some(w) = words.next() {
        let (flag, inline) = match w.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (w, None),
        };
        let mut value = |name: &'static str| -> Result<String, JoinParseError> {
            inline
                .clone()
                .or_else(|| words.next().map(str::to_string))
                .ok_or(JoinParseError::Malformed(name))
        };
        match flag {
            "--token" => c.token = Some(value("no value after --token")?),
            "--discovery-token-ca-cert-hash" => c
                .hashes
                .push(value("no value after --discovery-token-ca-cert-hash")?),
            "--certificate-key" => c.key = Some(value("no value after --certificate-key")?),
            "--control-plane" | "--experimental-control-plane" => {}
            f if !f.starts_with('-') && c.endpoint.is_none() => c.endpoint = Some(f.to_string()),
            _ => {}
        }
    }
    Ok(c)
}

fn is_token(t: &str) -> bool {
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    matches!(t.split_once('.'), Some((id, secret)) if ok(id, 6) && ok(secret, 16))
}

/// `HOST:PORT` as kubeadm prints it: a DNS-1123 name, an IPv4 address or a bracketed IPv6
/// address, and a port of 1 to 65535 in decimal digits. The endpoint is rendered into the join
/// configuration of every node, so nothing else (control characters, quotes, YAML syntax) passes.
fn is_endpoint(endpoint: &str) -> bool {
    let Some((host, port)) = endpoint.rsplit_once(':') else {
        return false;
    };
    let port_ok = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            host.parse::<std::net::Ipv4Addr>().is_ok()
                || kubexm_manifests::name::is_dns_subdomain(host)
        }
    };
    port_ok && host_ok
}

fn is_hex64(s: &str) -> bool {
    kubexm_manifests::catalog::is_sha256_hex(s)
}

/// Reads the credentials from kubeadm's output (see the module documentation).
pub fn parse(output: &str) -> Result<JoinCredentials, JoinParseError> {
    let lines = logical_lines(output);
    let mut last: Option<Command> = None;
    let mut key: Option<String> = None;
    let mut key_follows = false;
    for line in &lines {
        let t = line.trim();
        if key_follows && !t.is_empty() {
            key = Some(t.to_string());
            key_follows = false;
            continue;
        }
        if t.ends_with("Using certificate key:") {
            key_follows = true;
            continue;
        }
        if t.starts_with("kubeadm join ") {
            let c = parse_command(t)?;
            if let Some(k) = &c.key {
                key = Some(k.clone());
            }
            last = Some(c);
        }
    }
    let c = last.ok_or(JoinParseError::NoJoinCommand)?;
    let token = c.token.ok_or(JoinParseError::Malformed("no --token"))?;
    if token.contains("withheld") || token.starts_with('<') {
        return Err(JoinParseError::TokenWithheld);
    }
    if !is_token(&token) {
        return Err(JoinParseError::Malformed(
            "a --token that is not of the form [a-z0-9]{6}.[a-z0-9]{16}",
        ));
    }
    let endpoint = c
        .endpoint
        .filter(|e| is_endpoint(e))
        .ok_or(JoinParseError::Malformed(
            "no HOST:PORT endpoint (a DNS name, an IPv4 address or a [IPv6] address, and a port)",
        ))?;
    if c.hashes.is_empty() {
        return Err(JoinParseError::Malformed(
            "no --discovery-token-ca-cert-hash",
        ));
    }
    if !c
        .hashes
        .iter()
        .all(|h| h.strip_prefix("sha256:").is_some_and(is_hex64))
    {
        return Err(JoinParseError::Malformed(
            "a --discovery-token-ca-cert-hash that is not sha256:<64 hex digits>",
        ));
    }
    if key.as_deref().is_some_and(|k| !is_hex64(k)) {
        return Err(JoinParseError::Malformed(
            "a certificate key that is not 64 hex digits",
        ));
    }
    Ok(JoinCredentials {
        endpoint,
        token,
        ca_cert_hashes: c.hashes,
        certificate_key: key,
    })
}
