//! Package relationship fields (`Depends`, `Pre-Depends`, `Provides`): comma-separated groups of
//! `|`-separated alternatives, each `name[:archqual] [(op version)] [[arch list]] [<profiles>]`
//! (deb-control(5), Debian Policy §7.1).

use std::fmt;

use thiserror::Error;

use super::version::{DebVersion, VersionError};

/// A relation that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("`{text}`: {why}")]
pub struct RelationError {
    /// The offending text.
    pub text: String,
    /// What is wrong.
    pub why: String,
}

impl From<VersionError> for RelationError {
    fn from(e: VersionError) -> Self {
        Self {
            text: e.text.clone(),
            why: e.to_string(),
        }
    }
}

/// A version comparison in a relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<<`
    Lt,
    /// `<=` (and the obsolete `<`)
    Le,
    /// `=`
    Eq,
    /// `>=` (and the obsolete `>`)
    Ge,
    /// `>>`
    Gt,
}

impl Op {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "<<" => Op::Lt,
            "<=" | "<" => Op::Le,
            "=" => Op::Eq,
            ">=" | ">" => Op::Ge,
            ">>" => Op::Gt,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Op::Lt => "<<",
            Op::Le => "<=",
            Op::Eq => "=",
            Op::Ge => ">=",
            Op::Gt => ">>",
        }
    }

    /// Whether `have` satisfies `have OP want`.
    pub fn holds(self, have: &DebVersion, want: &DebVersion) -> bool {
        let c = have.cmp(want);
        match self {
            Op::Lt => c.is_lt(),
            Op::Le => c.is_le(),
            Op::Eq => c.is_eq(),
            Op::Ge => c.is_ge(),
            Op::Gt => c.is_gt(),
        }
    }
}

/// One alternative: a package name with an optional version constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// Package (or virtual package) name.
    pub name: String,
    /// `:any` / `:native` / `:<arch>` qualifier, when given.
    pub arch_qualifier: Option<String>,
    /// Version constraint.
    pub version: Option<(Op, DebVersion)>,
    /// Architecture restriction list (`[amd64 !i386]`), empty when absent.
    pub arches: Vec<String>,
}

impl Relation {
    /// Whether the relation applies on `arch` (its `[...]` list allows it).
    pub fn applies_on(&self, arch: &str) -> bool {
        if self.arches.is_empty() {
            return true;
        }
        let negated = self.arches.iter().all(|a| a.starts_with('!'));
        if negated {
            !self.arches.iter().any(|a| &a[1..] == arch)
        } else {
            self.arches.iter().any(|a| a == arch || a == "any")
        }
    }

    /// Whether a package or provided version `have` satisfies the version constraint.
    pub fn version_ok(&self, have: Option<&DebVersion>) -> bool {
        match (&self.version, have) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some((op, want)), Some(have)) => op.holds(have, want),
        }
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(q) = &self.arch_qualifier {
            write!(f, ":{q}")?;
        }
        if let Some((op, v)) = &self.version {
            write!(f, " ({} {v})", op.as_str())?;
        }
        Ok(())
    }
}

/// Alternatives: any one satisfies the group.
pub type Group = Vec<Relation>;

/// Shows a group as it is written (`a (>= 1) | b`).
pub fn group_text(group: &[Relation]) -> String {
    group
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" | ")
}

fn valid_name(name: &str) -> bool {
    // Policy §5.6.1: lowercase letters, digits, `+`, `-`, `.`; at least two characters,
    // starting with an alphanumeric character.
    name.len() >= 2
        && name.len() <= 128
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
}

/// Whether `name` is a valid Debian package name.
pub fn is_package_name(name: &str) -> bool {
    valid_name(name)
}

/// Parses one alternative.
pub fn parse_relation(text: &str) -> Result<Relation, RelationError> {
    let err = |why: String| RelationError {
        text: text.trim().to_owned(),
        why,
    };
    let mut rest = text.trim();
    // Build profiles `<...>` (outside the parentheses) only matter for source packages.
    let mut depth = 0i32;
    if let Some((i, _)) = rest.char_indices().find(|&(_, c)| {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        c == '<' && depth == 0
    }) {
        rest = rest[..i].trim_end();
    }
    let mut arches = Vec::new();
    if let Some(i) = rest.find('[') {
        let Some(j) = rest[i..].find(']') else {
            return Err(err("`[` without `]`".into()));
        };
        arches = rest[i + 1..i + j]
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        rest = rest[..i].trim_end();
    }
    let mut version = None;
    if let Some(i) = rest.find('(') {
        let Some(j) = rest.rfind(')') else {
            return Err(err("`(` without `)`".into()));
        };
        if j < i {
            return Err(err("`)` before `(`".into()));
        }
        let inner = rest[i + 1..j].trim();
        let split = inner
            .find(|c: char| !"<>=".contains(c))
            .ok_or_else(|| err("no version after the operator".into()))?;
        let (op_text, v_text) = inner.split_at(split);
        let op = Op::parse(op_text.trim())
            .ok_or_else(|| err(format!("unknown operator `{}`", op_text.trim())))?;
        version = Some((op, DebVersion::parse(v_text.trim())?));
        rest = rest[..i].trim_end();
    }
    let (name, qual) = match rest.split_once(':') {
        Some((n, q)) => (n, Some(q.to_owned())),
        None => (rest, None),
    };
    if !valid_name(name) {
        return Err(err(format!("`{name}` is not a package name")));
    }
    Ok(Relation {
        name: name.to_owned(),
        arch_qualifier: qual,
        version,
        arches,
    })
}

/// Parses a `Depends`-style field into groups of alternatives.
pub fn parse_groups(text: &str) -> Result<Vec<Group>, RelationError> {
    text.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|g| g.split('|').map(parse_relation).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{group_text, parse_groups, parse_relation, Op};

    #[test]
    fn depends_lines_from_bookworm() {
        let g = parse_groups(
            "libc6 (>= 2.34), libssl3 (>= 3.0.0),\n debconf (>= 0.5) | debconf-2.0, adduser, python3:any, perl:native",
        )
        .expect("parses");
        assert_eq!(g.len(), 6);
        assert_eq!(g[0][0].name, "libc6");
        assert_eq!(g[0][0].version.as_ref().map(|v| v.0), Some(Op::Ge));
        assert_eq!(group_text(&g[2]), "debconf (>= 0.5) | debconf-2.0");
        assert_eq!(g[4][0].arch_qualifier.as_deref(), Some("any"));
        assert_eq!(g[5][0].name, "perl");
    }

    #[test]
    fn arch_lists_profiles_and_obsolete_operators() {
        let r = parse_relation("libfoo (<< 2) [amd64 arm64] <!nocheck>").expect("parses");
        assert_eq!(r.version.as_ref().map(|v| v.0), Some(Op::Lt));
        assert!(r.applies_on("amd64") && !r.applies_on("i386"));
        let r = parse_relation("libbar [!i386]").expect("parses");
        assert!(r.applies_on("amd64") && !r.applies_on("i386"));
        let r = parse_relation("old (> 1.0)").expect("parses");
        assert_eq!(r.version.as_ref().map(|v| v.0), Some(Op::Ge));
    }

    #[test]
    fn bad_relations_say_why() {
        for (bad, why) in [
            ("Foo", "not a package name"),
            ("a (>= 1.0", "without `)`"),
            ("abc (~ 1.0)", "unknown operator"),
            ("abc (>= )", "no version"),
        ] {
            let e = parse_relation(bad).expect_err(bad);
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }
}
