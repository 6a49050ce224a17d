//! `SHA256SUMS`: one `<hex>  <path>\n` line per file, sorted by path, as `sha256sum` writes it.

use std::collections::BTreeMap;

use kubexm_manifests::display::Untrusted;
use thiserror::Error;

use crate::hash::is_sha256_hex;
use crate::path::{self, PathProblem};

/// Path → lowercase hex sha256, sorted by path (byte order).
pub(crate) type Sums = BTreeMap<String, String>;

/// Why `SHA256SUMS` could not be parsed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SumsError {
    /// The file is not UTF-8.
    #[error("`SHA256SUMS` is not UTF-8")]
    NotUtf8,
    /// The last line has no newline.
    #[error("`SHA256SUMS` does not end with a newline")]
    NoFinalNewline,
    /// A line is not `<64 lowercase hex>  <path>`.
    #[error("`SHA256SUMS` line {line}: {reason}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A listed path is unsafe.
    #[error("`SHA256SUMS` line {line}: path `{}` {problem}", Untrusted(.path))]
    UnsafePath {
        /// 1-based line number.
        line: usize,
        /// The path.
        path: String,
        /// Why it is unsafe.
        problem: PathProblem,
    },
    /// A path is listed twice.
    #[error("`SHA256SUMS` line {line}: path `{}` is listed twice", Untrusted(.path))]
    Duplicate {
        /// 1-based line number.
        line: usize,
        /// The path.
        path: String,
    },
    /// `SHA256SUMS` lists itself.
    #[error("`SHA256SUMS` line {line}: lists itself")]
    ListsItself {
        /// 1-based line number.
        line: usize,
    },
}

/// Renders the file.
pub(crate) fn render(sums: &Sums) -> Vec<u8> {
    let mut out = String::with_capacity(sums.len() * 128);
    for (path, hex) in sums {
        out.push_str(hex);
        out.push_str("  ");
        out.push_str(path);
        out.push('\n');
    }
    out.into_bytes()
}

/// Parses the file strictly: the format [`render`] writes, nothing else.
pub(crate) fn parse(bytes: &[u8]) -> Result<Sums, SumsError> {
    let text = std::str::from_utf8(bytes).map_err(|_| SumsError::NotUtf8)?;
    let Some(body) = text.strip_suffix('\n') else {
        return if text.is_empty() {
            Ok(Sums::new())
        } else {
            Err(SumsError::NoFinalNewline)
        };
    };
    let mut sums = Sums::new();
    for (i, entry) in body.split('\n').enumerate() {
        let line = i + 1;
        let Some((hex, path)) = entry.split_once("  ") else {
            return Err(SumsError::Malformed {
                line,
                reason: "expected `<sha256>  <path>`",
            });
        };
        if !is_sha256_hex(hex) {
            return Err(SumsError::Malformed {
                line,
                reason: "checksum is not 64 lowercase hex digits",
            });
        }
        path::check(path).map_err(|problem| SumsError::UnsafePath {
            line,
            path: path.to_owned(),
            problem,
        })?;
        if path == crate::manifest::SUMS_PATH {
            return Err(SumsError::ListsItself { line });
        }
        if sums.insert(path.to_owned(), hex.to_owned()).is_some() {
            return Err(SumsError::Duplicate {
                line,
                path: path.to_owned(),
            });
        }
    }
    Ok(sums)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn round_trips() {
        let mut sums = Sums::new();
        sums.insert("b/c".into(), H.into());
        sums.insert("a".into(), H.into());
        let text = render(&sums);
        assert_eq!(text, format!("{H}  a\n{H}  b/c\n").into_bytes());
        assert_eq!(parse(&text).expect("parse"), sums);
        assert!(parse(b"").expect("empty").is_empty());
    }

    #[test]
    fn rejects_malformed() {
        let bad: &[(&str, &str)] = &[
            ("no newline", "NoFinalNewline"),
            ("\n", "Malformed"),
            ("abc  a\n", "Malformed"),
            (&format!("{H} a\n"), "Malformed"),
            (&format!("{}  a\n", H.to_uppercase()), "Malformed"),
            (&format!("{H}  ../a\n"), "UnsafePath"),
            (&format!("{H}  /a\n"), "UnsafePath"),
            (&format!("{H}  a\n{H}  a\n"), "Duplicate"),
            (&format!("{H}  SHA256SUMS\n"), "ListsItself"),
        ];
        for (text, variant) in bad {
            let err = parse(text.as_bytes()).expect_err(text);
            assert!(format!("{err:?}").starts_with(variant), "{text:?}: {err:?}");
        }
        assert!(matches!(parse(&[0xff, b'\n']), Err(SumsError::NotUtf8)));
    }
}
