//! What a node printed for the certificate inventory ([`super::gather_script`]), read into typed
//! certificates. The text came from a host: it is bounded, every path is checked against the
//! places the script looks in, only `CERTIFICATE` PEM blocks and kubeconfig `*-data` fields are
//! read (the script never sends private keys), and errors never quote the text.

use base64::Engine;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use kubexm_manifests::display::escape;

/// Most bytes one node's answer may have.
pub const MAX_ANSWER: usize = 8 * 1024 * 1024;
/// Most certificates read from one node.
pub const MAX_CERTS: usize = 2000;
/// Most bytes of one PEM block or base64 field.
pub const MAX_BLOCK: usize = 64 * 1024;
/// Longest path accepted.
const MAX_PATH: usize = 512;

/// One certificate found on a node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Found {
    /// The file (for a kubeconfig: the kubeconfig).
    pub path: String,
    /// `certificate` (a PEM file), `kubeconfig client` or `kubeconfig CA`.
    pub source: Source,
    /// Subject (RFC 4514, escaped for printing).
    pub subject: String,
    /// The subject's first common name (escaped; empty when none).
    pub common_name: String,
    /// Issuer (RFC 4514, escaped).
    pub issuer: String,
    /// Not after, Unix seconds.
    pub not_after: i64,
    /// Not before, Unix seconds.
    pub not_before: i64,
    /// A CA (basicConstraints CA:TRUE).
    pub is_ca: bool,
    /// DNS names and IP addresses of the subjectAltName extension (escaped).
    pub sans: Vec<String>,
    /// Serial number (hex).
    pub serial: String,
}

/// Where a certificate was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// A PEM file.
    Certificate,
    /// A kubeconfig's `client-certificate-data`.
    KubeconfigClient,
    /// A kubeconfig's `certificate-authority-data`.
    KubeconfigCa,
}

impl Source {
    /// As printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Certificate => "certificate",
            Self::KubeconfigClient => "kubeconfig client",
            Self::KubeconfigCa => "kubeconfig CA",
        }
    }
}

/// What one node's answer held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// The certificates, in the node's order.
    pub found: Vec<Found>,
    /// What could not be read, per file (path escaped, reason).
    pub problems: Vec<(String, String)>,
}

/// The answer could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// More than [`MAX_ANSWER`] bytes.
    #[error("the node's answer is larger than {MAX_ANSWER} bytes")]
    TooLarge,
    /// No end marker: the listing was cut short.
    #[error("the node's answer has no end marker (the listing was cut short)")]
    Truncated,
}

/// Whether `path` is a place the gather script looks in: absolute, no `..`, no control
/// characters, under one of `roots` (each `/…/`).
pub fn plausible_path(path: &str, roots: &[String]) -> bool {
    path.len() <= MAX_PATH
        && path.starts_with('/')
        && !path.split('/').any(|c| c == "..")
        && !path.chars().any(char::is_control)
        && roots.iter().any(|r| path.starts_with(r.as_str()))
}

enum Section {
    None,
    File(String),
    Kubeconfig(String),
}

/// Reads a node's answer: `@@FILE PATH` then its `CERTIFICATE` PEM blocks, `@@KUBECONFIG PATH`
/// then `client-certificate-data B64` / `certificate-authority-data B64` lines, `@@TOOBIG PATH
/// SIZE`, and `@@END` last. `roots` are the directories the script looked in.
pub fn parse_answer(text: &str, roots: &[String]) -> Result<Answer, AnswerError> {
    if text.len() > MAX_ANSWER {
        return Err(AnswerError::TooLarge);
    }
    let mut answer = Answer::default();
    let mut section = Section::None;
    let mut pem: Option<String> = None;
    let mut ended = false;
    for line in text.lines() {
        if ended {
            break;
        }
        if let Some(rest) = line.strip_prefix("@@") {
            pem = None;
            let (tag, arg) = rest.split_once(' ').unwrap_or((rest, ""));
            section = Section::None;
            match tag {
                "END" => ended = true,
                "FILE" | "KUBECONFIG" | "TOOBIG" => {
                    let (path, size) = if tag == "TOOBIG" {
                        arg.rsplit_once(' ').unwrap_or((arg, ""))
                    } else {
                        (arg, "")
                    };
                    if !plausible_path(path, roots) {
                        answer.problems.push((
                            escape(&path.chars().take(80).collect::<String>()),
                            "not a path the inventory looks in: ignored".to_string(),
                        ));
                        continue;
                    }
                    match tag {
                        "FILE" => section = Section::File(path.to_string()),
                        "KUBECONFIG" => section = Section::Kubeconfig(path.to_string()),
                        _ => answer.problems.push((
                            path.to_string(),
                            format!(
                                "larger than the inventory reads ({} bytes): not a certificate file",
                                size.parse::<u64>().map_or_else(|_| "?".to_string(), |n| n.to_string())
                            ),
                        )),
                    }
                }
                _ => {}
            }
            continue;
        }
        if answer.found.len() >= MAX_CERTS {
            continue;
        }
        match &section {
            Section::None => {}
            Section::File(path) => {
                if line == "-----BEGIN CERTIFICATE-----" {
                    pem = Some(String::new());
                } else if line == "-----END CERTIFICATE-----" {
                    if let Some(body) = pem.take() {
                        let der = base64::engine::general_purpose::STANDARD.decode(body.as_bytes());
                        push(&mut answer, path, Source::Certificate, der.ok());
                    }
                } else if let Some(body) = pem.as_mut() {
                    if body.len() + line.len() > MAX_BLOCK {
                        pem = None;
                        answer
                            .problems
                            .push((path.clone(), "a PEM block larger than 64 KiB".to_string()));
                    } else {
                        body.push_str(line.trim_end());
                    }
                }
            }
            Section::Kubeconfig(path) => {
                let Some((key, value)) = line.split_once(' ') else {
                    continue;
                };
                let source = match key {
                    "client-certificate-data" => Source::KubeconfigClient,
                    "certificate-authority-data" => Source::KubeconfigCa,
                    _ => continue,
                };
                if value.len() > MAX_BLOCK {
                    answer
                        .problems
                        .push((path.clone(), format!("its {key} is larger than 64 KiB")));
                    continue;
                }
                let pem_text = base64::engine::general_purpose::STANDARD
                    .decode(value.trim().as_bytes())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok());
                let Some(pem_text) = pem_text else {
                    answer
                        .problems
                        .push((path.clone(), format!("its {key} is not base64 PEM")));
                    continue;
                };
                let mut any = false;
                for block in pem_blocks(&pem_text) {
                    any = true;
                    push(&mut answer, path, source, Some(block));
                }
                if !any {
                    answer
                        .problems
                        .push((path.clone(), format!("its {key} holds no certificate")));
                }
            }
        }
    }
    if !ended {
        return Err(AnswerError::Truncated);
    }
    Ok(answer)
}

/// The DER of every `CERTIFICATE` block of a PEM text (at most [`MAX_CERTS`]).
fn pem_blocks(text: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines() {
        let line = line.trim_end();
        if line == "-----BEGIN CERTIFICATE-----" {
            body = Some(String::new());
        } else if line == "-----END CERTIFICATE-----" {
            if let Some(b) = body.take() {
                if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b.as_bytes()) {
                    out.push(der);
                }
            }
        } else if let Some(b) = body.as_mut() {
            b.push_str(line);
        }
        if out.len() >= MAX_CERTS {
            break;
        }
    }
    out
}

fn push(answer: &mut Answer, path: &str, source: Source, der: Option<Vec<u8>>) {
    match der.as_deref().map(read_certificate) {
        Some(Ok(mut f)) => {
            f.path = path.to_string();
            f.source = source;
            answer.found.push(f);
        }
        Some(Err(why)) => answer.problems.push((path.to_string(), why)),
        None => answer.problems.push((
            path.to_string(),
            "a PEM block that is not base64".to_string(),
        )),
    }
}

/// One DER certificate read into a [`Found`] (path and source left empty).
pub fn read_certificate(der: &[u8]) -> Result<Found, String> {
    let (rest, cert) = X509Certificate::from_der(der)
        .map_err(|_| "a PEM block that is not an X.509 certificate".to_string())?;
    if !rest.is_empty() {
        return Err("a certificate followed by extra bytes".to_string());
    }
    let sans = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(d) => Some(escape(d)),
                    GeneralName::IPAddress(ip) => ip_text(ip),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let is_ca = cert
        .basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|b| b.value.ca);
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(escape)
        .unwrap_or_default();
    Ok(Found {
        path: String::new(),
        source: Source::Certificate,
        subject: escape(&cert.subject().to_string()),
        common_name,
        issuer: escape(&cert.issuer().to_string()),
        not_after: cert.validity().not_after.timestamp(),
        not_before: cert.validity().not_before.timestamp(),
        is_ca,
        sans,
        serial: cert.raw_serial_as_string().replace(':', ""),
    })
}

fn ip_text(raw: &[u8]) -> Option<String> {
    match raw.len() {
        4 => {
            let b: [u8; 4] = raw.try_into().ok()?;
            Some(std::net::Ipv4Addr::from(b).to_string())
        }
        16 => {
            let b: [u8; 16] = raw.try_into().ok()?;
            Some(std::net::Ipv6Addr::from(b).to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> Vec<String> {
        vec!["/etc/kubernetes/".to_string()]
    }

    fn cert(cn: &str, days: i64) -> String {
        let mut p = rcgen::CertificateParams::new(vec![format!("{cn}.example"), "10.0.0.1".into()])
            .expect("params");
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(days);
        let key = rcgen::KeyPair::generate().expect("key");
        p.self_signed(&key).expect("cert").pem()
    }

    #[test]
    fn reads_files_and_kubeconfig_data() {
        let a = cert("kube-apiserver", 300);
        let b = cert("kubernetes-admin", 20);
        let b64 = base64::engine::general_purpose::STANDARD.encode(b.as_bytes());
        let text = format!(
            "@@FILE /etc/kubernetes/pki/apiserver.crt\n{a}@@KUBECONFIG /etc/kubernetes/admin.conf\nclient-certificate-data {b64}\n@@END\n"
        );
        let ans = parse_answer(&text, &roots()).expect("parses");
        assert_eq!(ans.found.len(), 2, "{ans:?}");
        assert_eq!(ans.found[0].subject, "CN=kube-apiserver");
        assert_eq!(ans.found[0].path, "/etc/kubernetes/pki/apiserver.crt");
        assert!(ans.found[0].sans.contains(&"10.0.0.1".to_string()));
        assert_eq!(ans.found[1].source, Source::KubeconfigClient);
        let left =
            (ans.found[1].not_after - time::OffsetDateTime::now_utc().unix_timestamp()) / 86400;
        assert!((19..=20).contains(&left), "{left}");
    }

    #[test]
    fn hostile_answers_are_bounded_and_never_quoted() {
        // No end marker: cut short.
        assert_eq!(
            parse_answer("@@FILE /etc/kubernetes/pki/a.crt\n", &roots()),
            Err(AnswerError::Truncated)
        );
        // Too large.
        let big = "x".repeat(MAX_ANSWER + 1);
        assert_eq!(parse_answer(&big, &roots()), Err(AnswerError::TooLarge));
        // A path outside the roots, a traversal, control characters: ignored, escaped.
        let text = "@@FILE /etc/shadow\n@@FILE /etc/kubernetes/../shadow\n@@FILE /etc/kubernetes/\u{1b}[2Jx.crt\n-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n@@END\n";
        let ans = parse_answer(text, &roots()).expect("parses");
        assert!(ans.found.is_empty());
        assert_eq!(ans.problems.len(), 3, "{:?}", ans.problems);
        assert!(ans.problems.iter().all(|(p, _)| !p.contains('\u{1b}')));
        // Garbage in a PEM block of a plausible file: a problem naming the file.
        let text = "@@FILE /etc/kubernetes/pki/x.crt\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n@@TOOBIG /etc/kubernetes/pki/huge.crt 99999999\n@@END\n";
        let ans = parse_answer(text, &roots()).expect("parses");
        assert_eq!(ans.problems[0].0, "/etc/kubernetes/pki/x.crt");
        assert!(ans.problems[0].1.contains("not an X.509"));
        assert!(ans.problems[1].1.contains("99999999 bytes"));
    }

    #[test]
    fn subjects_with_control_characters_are_escaped() {
        let pem = cert("evil\u{1b}]0;x\u{7}", 10);
        let text = format!("@@FILE /etc/kubernetes/pki/e.crt\n{pem}@@END\n");
        let ans = parse_answer(&text, &roots()).expect("parses");
        assert!(
            !ans.found[0].subject.contains('\u{1b}'),
            "{}",
            ans.found[0].subject
        );
    }
}
