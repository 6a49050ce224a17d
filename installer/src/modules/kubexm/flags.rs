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

    /// `--name=value` words for an `ExecStart=` line, quoted and escaped for systemd.
    pub fn unit_words(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|(k, v)| systemd_word(&format!("--{k}={v}")))
            .collect()
    }
}

/// One word of a systemd command line: `%` and `$` escaped (specifiers, variables); quoted when
/// it has whitespace, quotes or backslashes.
pub fn systemd_word(word: &str) -> String {
    let escaped = word.replace('%', "%%").replace('$', "$$");
    if escaped
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';'))
    {
        format!("\"{}\"", escaped.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        escaped
    }
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
        assert!(Flags::new()
            .feature_gates(&BTreeMap::new())
            .unit_words()
            .is_empty());
    }
}
