//! Debian package versions (`[epoch:]upstream[-revision]`) and dpkg's ordering of them
//! (deb-version(7): `~` sorts before everything, even the end of a part; letters before
//! other characters; digit runs compare as numbers).

use std::cmp::Ordering;
use std::fmt;

use thiserror::Error;

/// A version string that is not a Debian version.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("`{text}` is not a Debian version: {why}")]
pub struct VersionError {
    /// The text.
    pub text: String,
    /// What is wrong.
    pub why: &'static str,
}

/// A parsed Debian version. Equality and order are dpkg's (`1.0` = `0:1.0`).
#[derive(Debug, Clone)]
pub struct DebVersion {
    text: String,
    epoch: u32,
    upstream: (usize, usize),
    revision: (usize, usize),
}

impl DebVersion {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Self, VersionError> {
        let err = |why| VersionError {
            text: text.to_owned(),
            why,
        };
        if text.is_empty() {
            return Err(err("empty"));
        }
        if text.len() > 256 {
            return Err(err("longer than 256 characters"));
        }
        let (epoch, start) = match text.find(':') {
            Some(i) => {
                let e = &text[..i];
                if e.is_empty() || !e.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err("the epoch is not a number"));
                }
                (e.parse().map_err(|_| err("the epoch is too large"))?, i + 1)
            }
            None => (0, 0),
        };
        let rest = &text[start..];
        let (upstream, revision) = match rest.rfind('-') {
            Some(i) => ((start, start + i), (start + i + 1, text.len())),
            None => ((start, text.len()), (text.len(), text.len())),
        };
        let up = &text[upstream.0..upstream.1];
        if up.is_empty() {
            return Err(err("the upstream version is empty"));
        }
        if !up.as_bytes()[0].is_ascii_digit() {
            return Err(err("the upstream version must start with a digit"));
        }
        if !up
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".+~-:".contains(&b))
        {
            return Err(err(
                "the upstream version has a character outside [A-Za-z0-9.+~-:]",
            ));
        }
        let rev = &text[revision.0..revision.1];
        if rest.contains('-') && rev.is_empty() {
            return Err(err("the revision after `-` is empty"));
        }
        if !rev
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".+~".contains(&b))
        {
            return Err(err("the revision has a character outside [A-Za-z0-9.+~]"));
        }
        Ok(Self {
            text: text.to_owned(),
            epoch,
            upstream,
            revision,
        })
    }

    /// The version as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn upstream(&self) -> &str {
        &self.text[self.upstream.0..self.upstream.1]
    }

    fn revision(&self) -> &str {
        &self.text[self.revision.0..self.revision.1]
    }
}

impl fmt::Display for DebVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for DebVersion {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl PartialEq for DebVersion {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for DebVersion {}

impl PartialOrd for DebVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for DebVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        self.epoch
            .cmp(&other.epoch)
            .then_with(|| verrevcmp(self.upstream(), other.upstream()))
            .then_with(|| verrevcmp(self.revision(), other.revision()))
    }
}

/// dpkg's weight of one non-digit character: `~` lowest, then the end of the part, letters,
/// then everything else.
fn order(c: Option<u8>) -> i32 {
    match c {
        None => 0,
        Some(b'~') => -1,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => i32::from(c),
        Some(c) => i32::from(c) + 256,
    }
}

/// Compares two upstream versions or two revisions as dpkg's `verrevcmp` does.
fn verrevcmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        // The non-digit prefix, character by character.
        while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit()) {
            let ac = order(a.get(i).copied().filter(|c| !c.is_ascii_digit()));
            let bc = order(b.get(j).copied().filter(|c| !c.is_ascii_digit()));
            if ac != bc {
                return ac.cmp(&bc);
            }
            if i < a.len() && !a[i].is_ascii_digit() {
                i += 1;
            }
            if j < b.len() && !b[j].is_ascii_digit() {
                j += 1;
            }
        }
        // Then the digit run, as a number (leading zeros ignored; compared by length first).
        while i < a.len() && a[i] == b'0' {
            i += 1;
        }
        while j < b.len() && b[j] == b'0' {
            j += 1;
        }
        let si = i;
        let sj = j;
        while i < a.len() && a[i].is_ascii_digit() {
            i += 1;
        }
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        let (da, db) = (&a[si..i], &b[sj..j]);
        let c = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
        if c != Ordering::Equal {
            return c;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::DebVersion;
    use std::cmp::Ordering;

    fn v(s: &str) -> DebVersion {
        DebVersion::parse(s).expect("valid version")
    }

    #[test]
    fn dpkg_ordering() {
        // Pairs checked with `dpkg --compare-versions A lt B` on Debian 12.
        let ascending = [
            ("1.0~rc1", "1.0"),
            ("1.0", "1.0-1"),
            ("1.0-1", "1.0-1+deb12u1"),
            ("1.0-1~bpo12+1", "1.0-1"),
            ("2.36-9", "2.36-9+deb12u4"),
            ("1.9", "1.10"),
            ("1.0a", "1.0+"),
            ("1.0", "1.0a"),
            ("9:1.0", "10:0.1"),
            ("1:0.1", "2:0.0"),
            ("2.6.12-1+deb12u1", "2.6.12-1+deb12u2"),
            ("1.0~~", "1.0~"),
            ("0.9", "1:0.1"),
        ];
        for (a, b) in ascending {
            assert_eq!(v(a).cmp(&v(b)), Ordering::Less, "{a} < {b}");
            assert_eq!(v(b).cmp(&v(a)), Ordering::Greater, "{b} > {a}");
        }
        assert_eq!(v("1.0"), v("0:1.0"));
        assert_eq!(v("1.01"), v("1.1"));
        assert_eq!(v("1.0-0"), v("1.0-0"));
    }

    #[test]
    fn rejects_bad_versions() {
        for bad in ["", "a1.0", ":1.0", "x:1.0", "1.0-", "1 0", "1.0-a_b"] {
            let e = DebVersion::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("is not a Debian version"), "{e}");
        }
        // An upstream part may hold `-` and `:` when revision and epoch are present.
        assert_eq!(v("1:2.0-rc-1").as_str(), "1:2.0-rc-1");
    }
}
