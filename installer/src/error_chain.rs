//! One way to turn an error and its causes into one line of text, for the places that keep an
//! error as text (the run journal, a node's failure in a task report, a step's message).
//!
//! Every error type of this crate says its own part only and returns its cause from
//! `source()`; `main.rs` prints the chain line by line, and [`chain`] joins it with `: ` where a
//! single line is needed. A `Display` that also printed `{source}` would show each cause twice
//! (`tests/it/errors.rs` checks a sample of every error type).

use std::error::Error;
use std::fmt;

/// An error followed by each of its causes: `a: b: c`.
pub fn chain(e: &(dyn Error + 'static)) -> String {
    Chain(e).to_string()
}

/// [`chain`] as a `Display` value, for `format!` and `tracing` without an intermediate string.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cur = self.0.source();
        while let Some(c) = cur {
            write!(f, ": {c}")?;
            cur = c.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading {path}")]
    struct Outer {
        path: String,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn each_cause_once_in_order() {
        let e = Outer {
            path: "/etc/x".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        };
        assert_eq!(chain(&e), "reading /etc/x: no such file");
    }
}
