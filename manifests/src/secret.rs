//! A string that never shows itself in `Debug`, `Display` or serialized output.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A secret value (password, token). Its `Debug` and `Serialize` forms are redacted so that
/// logs and `resolve -o json` can never leak it; read it with [`Secret::expose`].
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; call only where it is handed to its consumer.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(\"<redacted>\")")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn debug_and_serialize_are_redacted() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?}").contains("hunter2"));
        let json = serde_json::to_string(&s).expect("serialize");
        assert!(!json.contains("hunter2"), "{json}");
        assert_eq!(s.expose(), "hunter2");
    }
}
