//! `plan --files`: the content each generic step writes, as an operator may read it — secrets
//! redacted, binaries and bundle files named but not shown.
//!
//! Redacted: every secret value the cluster description holds or points to (the journal's
//! list: host, registry and Harbor passwords), PEM private keys, and the values of keys that
//! hold credentials in the files KubeXM writes (`token`, `password`, `client-key-data`,
//! `certificateKey`, `harbor_admin_password`, …), and htpasswd hashes.

use super::super::ops::Written;

/// Keys whose values are credentials (compared without case, in `key: value` and `key = value`).
const SECRET_KEYS: &[&str] = &[
    "token",
    "password",
    "client-key-data",
    "certificatekey",
    "certificate-key",
    "harbor_admin_password",
    "secret",
    "auth",
    "identitytoken",
];

/// What `plan --files` shows of `written`.
pub fn shown(written: &Written<'_>, secrets: &[String]) -> String {
    let bytes = match written {
        Written::File(p) => {
            return format!(
                "(the control host's file {} as it is: not shown)",
                p.display()
            )
        }
        Written::Bytes(b) => b,
    };
    let Ok(text) = std::str::from_utf8(bytes) else {
        return format!("(binary, {} bytes: not shown)", bytes.len());
    };
    if text.contains('\0') {
        return format!("(binary, {} bytes: not shown)", bytes.len());
    }
    redact(text, secrets)
}

/// `text` with every secret replaced by `***`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = Vec::new();
    let mut in_key = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("-----BEGIN") && t.contains("PRIVATE KEY-----") {
            in_key = true;
            out.push(line.to_string());
            out.push("*** (private key)".to_string());
            continue;
        }
        if in_key {
            if t.starts_with("-----END") {
                in_key = false;
                out.push(line.to_string());
            }
            continue;
        }
        out.push(redact_line(line));
    }
    let mut s = out.join("\n");
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        s = s.replace(secret.as_str(), "***");
    }
    // Terminals get no control characters from a plan.
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                '?'
            } else {
                c
            }
        })
        .collect()
}

fn redact_line(line: &str) -> String {
    // htpasswd: `user:$2y$...`.
    if let Some((user, hash)) = line.split_once(':') {
        if hash.starts_with("$2") && !user.contains(' ') {
            return format!("{user}:***");
        }
    }
    for sep in [':', '='] {
        let Some((key, value)) = line.split_once(sep) else {
            continue;
        };
        let name = key
            .trim()
            .trim_start_matches("- ")
            .trim_matches(|c| c == '"' || c == '\'')
            .to_ascii_lowercase();
        if SECRET_KEYS.contains(&name.as_str()) && !value.trim().is_empty() {
            return format!("{key}{sep} \"***\"");
        }
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    #[test]
    fn secrets_are_redacted_and_the_rest_is_kept() {
        let text = "apiVersion: kubeadm.k8s.io/v1beta3\nbootstrapTokens:\n  - token: \"abcdef.0123456789abcdef\"\ncertificateKey: 0a1b\nusers:\n- name: admin\n  user:\n    client-key-data: LS0tLS1CRUdJTg==\nadmin:$2y$05$abcdefghijk\npassword = \"hunter2\"\nregistry: reg.local:5000\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\nhost pw is S3cr3t!\n";
        let r = redact(text, &["S3cr3t!".to_string()]);
        for secret in [
            "abcdef.0123456789abcdef",
            "0a1b",
            "LS0tLS1CRUdJTg",
            "$2y$05",
            "hunter2",
            "MHcCAQEE",
            "S3cr3t!",
        ] {
            assert!(!r.contains(secret), "{secret} in\n{r}");
        }
        for kept in [
            "apiVersion: kubeadm.k8s.io/v1beta3",
            "bootstrapTokens:",
            "registry: reg.local:5000",
            "-----BEGIN EC PRIVATE KEY-----",
            "host pw is ***",
        ] {
            assert!(r.contains(kept), "{kept} missing in\n{r}");
        }
        assert_eq!(
            shown(&Written::Bytes(Cow::Borrowed(&[0xff, 0, 1])), &[]),
            "(binary, 3 bytes: not shown)"
        );
        assert!(!redact("a\u{1b}[2Jb", &[]).contains('\u{1b}'));
    }
}
