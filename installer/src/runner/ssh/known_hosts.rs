//! OpenSSH `known_hosts` files: checking a server's host key and recording a new one.
//!
//! Supported: `host[,host...] key-type base64 [comment]` lines, `[host]:port` for ports other
//! than 22, `*`/`?` wildcards and `!` negation, hashed names (`|1|salt|hash`, what Debian's
//! `HashKnownHosts yes` writes) and the `@revoked` marker. `@cert-authority` lines are ignored
//! (host certificates are not accepted). Lines that do not parse are skipped.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use russh::keys::ssh_key::PublicKey;
use russh::keys::{Algorithm, HashAlg};

/// What the file says about a host's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A line records exactly this key.
    Known,
    /// No line names the host.
    Unknown,
    /// The host is recorded with another key (of this or another type).
    Changed {
        /// 1-based line number of the first recorded key.
        line: usize,
        /// Its key type, e.g. `ssh-ed25519`.
        recorded: String,
    },
    /// This key is marked `@revoked`.
    Revoked {
        /// 1-based line number.
        line: usize,
    },
}

/// One usable line.
struct Entry {
    line: usize,
    revoked: bool,
    hosts: String,
    key: PublicKey,
}

/// The name a host is recorded under: `host`, or `[host]:port` for other ports.
pub(crate) fn host_pattern(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

fn parse(text: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let mut first = fields.next().unwrap_or("");
        let mut revoked = false;
        if first.starts_with('@') {
            match first {
                "@revoked" => revoked = true,
                // `@cert-authority` and unknown markers: not a plain host key.
                _ => continue,
            }
            first = fields.next().unwrap_or("");
        }
        let (Some(kind), Some(b64)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Ok(key) = PublicKey::from_openssh(&format!("{kind} {b64}")) else {
            tracing::debug!(
                line = idx + 1,
                "skipping a known_hosts line whose key does not parse"
            );
            continue;
        };
        entries.push(Entry {
            line: idx + 1,
            revoked,
            hosts: first.to_string(),
            key,
        });
    }
    entries
}

/// Whether `name` matches one comma-separated host list (negations win).
fn matches_hosts(list: &str, name: &str) -> bool {
    let mut matched = false;
    for pattern in list.split(',') {
        if let Some(hashed) = pattern.strip_prefix("|1|") {
            if matches_hashed(hashed, name) {
                matched = true;
            }
        } else if let Some(negated) = pattern.strip_prefix('!') {
            if wildcard(negated.as_bytes(), name.as_bytes()) {
                return false;
            }
        } else if wildcard(pattern.as_bytes(), name.as_bytes()) {
            matched = true;
        }
    }
    matched
}

/// `|1|base64(salt)|base64(hmac_sha1(salt, name))`.
fn matches_hashed(rest: &str, name: &str) -> bool {
    let Some((salt, hash)) = rest.split_once('|') else {
        return false;
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let (Ok(salt), Ok(hash)) = (b64.decode(salt), b64.decode(hash)) else {
        return false;
    };
    let Ok(mut mac) = hmac::Hmac::<sha1::Sha1>::new_from_slice(&salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(&hash).is_ok()
}

/// OpenSSH pattern matching: `*` any run, `?` one character, case-insensitive.
///
/// Iterative, backtracking only to the last `*`: O(pattern × name) whatever the file holds (a
/// recursive matcher takes exponential time on patterns such as `*a*a*a*a*b`).
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(b'?') => {
                p += 1;
                n += 1;
            }
            Some(c) if c.eq_ignore_ascii_case(&name[n]) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

fn read(path: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
}

/// Checks `key` for `host`:`port` against the file at `path` (a missing file knows no host).
pub(crate) fn check(
    path: &Path,
    host: &str,
    port: u16,
    key: &PublicKey,
) -> std::io::Result<Verdict> {
    Ok(check_text(&read(path)?, host, port, key))
}

/// [`check`] on the text of a known_hosts file.
pub fn check_text(text: &str, host: &str, port: u16, key: &PublicKey) -> Verdict {
    let name = host_pattern(host, port);
    let entries = parse(text);
    let mine: Vec<&Entry> = entries
        .iter()
        .filter(|e| matches_hosts(&e.hosts, &name))
        .collect();
    if let Some(e) = mine
        .iter()
        .find(|e| e.revoked && e.key.key_data() == key.key_data())
    {
        return Verdict::Revoked { line: e.line };
    }
    if mine
        .iter()
        .any(|e| !e.revoked && e.key.key_data() == key.key_data())
    {
        return Verdict::Known;
    }
    let recorded = mine
        .iter()
        .filter(|e| !e.revoked)
        .min_by_key(|e| (e.key.algorithm() != key.algorithm(), e.line));
    match recorded {
        Some(e) => Verdict::Changed {
            line: e.line,
            recorded: e.key.algorithm().as_str().to_string(),
        },
        None => Verdict::Unknown,
    }
}

/// The host-key algorithms to offer for a recorded host (so the server presents the key we
/// know, as OpenSSH does); empty when the host is not recorded.
pub(crate) fn recorded_algorithms(path: &Path, host: &str, port: u16) -> Vec<Algorithm> {
    let name = host_pattern(host, port);
    let Ok(text) = read(path) else {
        return Vec::new();
    };
    let mut algorithms = Vec::new();
    for entry in parse(&text) {
        if entry.revoked || !matches_hosts(&entry.hosts, &name) {
            continue;
        }
        let offered = match entry.key.algorithm() {
            Algorithm::Rsa { .. } => vec![
                Algorithm::Rsa {
                    hash: Some(HashAlg::Sha512),
                },
                Algorithm::Rsa {
                    hash: Some(HashAlg::Sha256),
                },
                Algorithm::Rsa { hash: None },
            ],
            other => vec![other],
        };
        for algorithm in offered {
            if !algorithms.contains(&algorithm) {
                algorithms.push(algorithm);
            }
        }
    }
    algorithms
}

/// Serialises appends from concurrent connections of this process.
static LEARN_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Appends `host key-type base64` to the file: the whole file is rewritten to a temporary name
/// beside it (mode 0600), synced and renamed over it, so a crash never leaves a torn file.
pub(crate) fn learn(path: &Path, host: &str, port: u16, key: &PublicKey) -> std::io::Result<()> {
    let _guard = LEARN_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut text = read(path)?;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let mut key = key.clone();
    key.set_comment("");
    let encoded = key
        .to_openssh()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    text.push_str(&host_pattern(host, port));
    text.push(' ');
    text.push_str(encoded.trim());
    text.push('\n');

    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "known_hosts".to_string());
    let tmp = dir.join(format!(".{file_name}.kubexm-{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ";
    const ED2: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA6rWI3G1sz07DnfFlrouTcysQlj2P+jpNSOEWD9OJ3X";

    fn key(s: &str) -> PublicKey {
        PublicKey::from_openssh(s).expect("test key")
    }

    #[test]
    fn wildcards_and_negation() {
        assert!(matches_hosts("a.example,b.example", "b.example"));
        assert!(matches_hosts("*.example", "node1.example"));
        assert!(matches_hosts("node?", "node1"));
        assert!(!matches_hosts("*.example,!bad.example", "bad.example"));
        assert!(matches_hosts("[10.0.0.1]:2222", "[10.0.0.1]:2222"));
        assert!(!matches_hosts("10.0.0.1", "[10.0.0.1]:2222"));
        assert!(matches_hosts("*", ""));
        assert!(matches_hosts("a*b*c", "aXXbYYc"));
        assert!(!matches_hosts("a*b*c", "aXXbYY"));
        assert!(matches_hosts("N*?E", "node1e"));
    }

    #[test]
    fn wildcards_take_polynomial_time() {
        // A recursive matcher needs about 2^30 steps here.
        let pattern = format!("{}b", "*a".repeat(30));
        let name = "a".repeat(200);
        let started = std::time::Instant::now();
        assert!(!wildcard(pattern.as_bytes(), name.as_bytes()));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn hashed_names_match() {
        // `ssh-keygen -H` of "192.168.1.10" with this salt.
        let salt = [7u8; 20];
        let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(&salt).expect("hmac");
        mac.update(b"192.168.1.10");
        let hash = mac.finalize().into_bytes();
        let b64 = base64::engine::general_purpose::STANDARD;
        let entry = format!("{}|{}", b64.encode(salt), b64.encode(hash));
        assert!(matches_hashed(&entry, "192.168.1.10"));
        assert!(!matches_hashed(&entry, "192.168.1.11"));
    }

    #[test]
    fn verdicts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("known_hosts");
        assert_eq!(
            check(&path, "h", 22, &key(ED)).expect("check"),
            Verdict::Unknown
        );
        std::fs::write(
            &path,
            format!("# comment\n\ngarbage line\n[h]:2222 {ED}\nh {ED2}\n@revoked * {ED2}\n"),
        )
        .expect("write");
        assert_eq!(
            check(&path, "h", 2222, &key(ED)).expect("check"),
            Verdict::Known
        );
        assert_eq!(
            check(&path, "h", 2222, &key(ED2)).expect("check"),
            Verdict::Revoked { line: 6 }
        );
        assert_eq!(
            check(&path, "h", 22, &key(ED)).expect("check"),
            Verdict::Changed {
                line: 5,
                recorded: "ssh-ed25519".into()
            }
        );
        assert_eq!(
            recorded_algorithms(&path, "h", 2222),
            vec![Algorithm::Ed25519]
        );
        assert!(recorded_algorithms(&path, "other", 22).is_empty());
    }

    #[test]
    fn learn_appends_atomically_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("known_hosts");
        learn(&path, "10.1.1.1", 22, &key(ED)).expect("learn");
        learn(&path, "10.1.1.2", 2022, &key(ED2)).expect("learn");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, format!("10.1.1.1 {ED}\n[10.1.1.2]:2022 {ED2}\n"));
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            check(&path, "10.1.1.2", 2022, &key(ED2)).expect("check"),
            Verdict::Known
        );
    }
}
