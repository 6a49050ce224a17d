//! YAML parsing with `file:line:column` errors (serde-saphyr, the maintained successor of the
//! archived serde_yaml).

use std::fmt;

use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::display::{Untrusted, UntrustedMax};

/// Characters of the parser's message shown (it may quote a value).
const MAX_MESSAGE_SHOWN: usize = 400;
/// Snippet lines shown.
const MAX_SNIPPET_LINES: usize = 12;

/// The snippet, each line escaped and cut, at most [`MAX_SNIPPET_LINES`] lines.
struct Snippet<'a>(&'a String);

impl fmt::Display for Snippet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, line) in self.0.lines().enumerate() {
            if i == MAX_SNIPPET_LINES {
                return f.write_str("…");
            }
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{}", Untrusted(line))?;
        }
        Ok(())
    }
}

/// A YAML document that does not parse or does not match the schema. Displayed escaped and cut
/// ([`Untrusted`]): the message and the snippet quote the document.
#[derive(Debug, Error)]
#[error("{}:{line}:{column}: {}\n{}", Untrusted(.origin), UntrustedMax(.message, MAX_MESSAGE_SHOWN), Snippet(.snippet))]
pub struct YamlError {
    /// File name (or a description of the source).
    pub origin: String,
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// The parser's message without position.
    pub message: String,
    /// The offending lines with a caret.
    pub snippet: String,
}

/// Parser options: comments are validated but not kept (nothing here reads them), so a file
/// with long commented-out blocks — KubeKey's samples have dozens of lines — is not refused by
/// the parser's limit on comments buffered while it looks ahead.
pub fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.emit_comments = false;
    options
}

/// Parses `text` (read from `origin`) into `T`.
pub fn from_str<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options::<T>(text, options()).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        let plain = e.without_snippet().to_string();
        let message = strip_position(&plain).to_owned();
        let rendered = e.to_string();
        let snippet = rendered
            .split_once('\n')
            .map(|(_, rest)| rest.replace("<input>", origin))
            .unwrap_or_default();
        YamlError {
            origin: origin.to_owned(),
            line,
            column,
            message,
            snippet,
        }
    })
}

/// serde-saphyr puts the position in its message (`error: line L column C: …` or
/// `… at line L, column C`); we print our own `file:line:column` in front instead.
fn strip_position(msg: &str) -> &str {
    let mut msg = msg.strip_prefix("error: ").unwrap_or(msg);
    if msg.starts_with("line ") {
        if let Some((_, rest)) = msg.split_once(": ") {
            msg = rest;
        }
    }
    if let Some(i) = msg.rfind(" at line ") {
        if msg[i + 9..]
            .chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == ' ' || c.is_ascii_alphabetic())
        {
            msg = &msg[..i];
        }
    }
    msg
}
