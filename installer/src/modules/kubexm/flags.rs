//! Command-line flags of a Kubernetes component as they go into its systemd unit.

use std::collections::BTreeMap;

/// A component's flags by name (without `--`), sorted. The user's extra arguments
/// (`kubernetes.apiserverArgs` and friends) replace a KubeXM default of the same name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags(BTreeMap<String, String>);

impl Flags {
    /// No flags.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `--name=value`.
    #[must_use]
    pub fn with(mut self, name: &str, value: impl ToString) -> Self {
        self.0.insert(name.to_string(), value.to_string());
        self
    }

    /// Sets `--feature-gates=A=true,B=false` when there are any.
    #[must_use]
    pub fn feature_gates(self, gates: &BTreeMap<String, bool>) -> Self {
        if gates.is_empty() {
            return self;
        }
        let v = gates
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        self.with("feature-gates", v)
    }

    /// The user's arguments over the defaults (leading dashes in names are ignored).
    #[must_use]
    pub fn user(mut self, args: &BTreeMap<String, String>) -> Self {
        for (k, v) in args {
            self.0
                .insert(k.trim_start_matches('-').to_string(), v.clone());
        }
        self
    }

    /// A flag's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// `--name=value` words as they are, for a template's `unit_word` filter.
    pub fn words(&self) -> Vec<String> {
        self.0.iter().map(|(k, v)| format!("--{k}={v}")).collect()
    }

    /// `--name=value` words for an `ExecStart=` line, quoted and escaped for systemd.
    pub fn unit_words(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|(k, v)| systemd_word(&format!("--{k}={v}")))
            .collect()
    }
}

/// One word of a systemd command line (`ExecStart=`): `%` and `$` escaped (specifiers,
/// variables); quoted when it is empty or has whitespace, control characters, quotes, `;` or
/// backslashes, with C escapes inside the quotes (systemd unescapes them), so that no value ends
/// the line or splits the word.
pub fn systemd_word(word: &str) -> String {
    quote_unit_word(&word.replace('%', "%%").replace('$', "$$"))
}

/// One assignment of `Environment=` (`NAME=value`): like [`systemd_word`], but `$` kept as it
/// is (`Environment=` expands no variables).
pub fn systemd_env(assignment: &str) -> String {
    quote_unit_word(&assignment.replace('%', "%%"))
}

fn quote_unit_word(escaped: &str) -> String {
    if !escaped.is_empty()
        && !escaped
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\' | ';'))
    {
        return escaped.to_owned();
    }
    let mut out = String::with_capacity(escaped.len() + 2);
    out.push('"');
    for c in escaped.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() && c.is_ascii() => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)))
            }
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_args_replace_defaults_and_words_are_escaped() {
        let user: BTreeMap<String, String> = [
            ("v".to_string(), "2".to_string()),
            ("--bind-address".to_string(), "10.0.0.1".to_string()),
            (
                "audit-log-path".to_string(),
                "/var/log/a b%.log".to_string(),
            ),
        ]
        .into();
        let f = Flags::new()
            .with("bind-address", "0.0.0.0")
            .with("secure-port", 6443)
            .feature_gates(&[("B".to_string(), false), ("A".to_string(), true)].into())
            .user(&user);
        assert_eq!(f.get("bind-address"), Some("10.0.0.1"));
        assert_eq!(
            f.unit_words(),
            [
                "\"--audit-log-path=/var/log/a b%%.log\"",
                "--bind-address=10.0.0.1",
                "--feature-gates=A=true,B=false",
                "--secure-port=6443",
                "--v=2",
            ]
        );
        assert_eq!(systemd_word("a\"b$c"), "\"a\\\"b$$c\"");
        // A newline stays inside the word (issue 34 item 5): systemd reads `\n` back.
        assert_eq!(
            systemd_word("--audit-log-path=/x\nExecStartPre=/bin/sh"),
            "\"--audit-log-path=/x\\nExecStartPre=/bin/sh\""
        );
        assert_eq!(systemd_word("a\u{1b}[1m\u{85}"), "\"a\\x1b[1m\\u0085\"");
        assert_eq!(systemd_word(""), "\"\"");
        assert_eq!(systemd_env("PATH=$x %h"), "\"PATH=$x %%h\"");
        assert_eq!(
            systemd_env("ETCD_UNSUPPORTED_ARCH=arm64"),
            "ETCD_UNSUPPORTED_ARCH=arm64"
        );
        assert!(Flags::new()
            .feature_gates(&BTreeMap::new())
            .unit_words()
            .is_empty());
    }
}
