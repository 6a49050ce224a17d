//! RPM versions: `[epoch:]version-release`, ordered by rpm's `rpmvercmp` (alphanumeric segments,
//! digits as numbers and newer than letters, `~` older than anything, `^` newer than the end).

use std::cmp::Ordering;
use std::fmt;

/// Epoch, version and release of a package or a dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evr {
    /// Epoch (0 when absent).
    pub epoch: u64,
    /// Version.
    pub version: String,
    /// Release; `None` in a dependency that does not name one (then any release matches).
    pub release: Option<String>,
}

impl Evr {
    /// Compares as rpm does; a missing release on either side is not compared.
    pub fn compare(&self, other: &Evr) -> Ordering {
        self.epoch
            .cmp(&other.epoch)
            .then_with(|| rpmvercmp(&self.version, &other.version))
            .then_with(|| match (&self.release, &other.release) {
                (Some(a), Some(b)) => rpmvercmp(a, b),
                _ => Ordering::Equal,
            })
    }
}

impl fmt::Display for Evr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.epoch > 0 {
            write!(f, "{}:", self.epoch)?;
        }
        f.write_str(&self.version)?;
        if let Some(r) = &self.release {
            write!(f, "-{r}")?;
        }
        Ok(())
    }
}

/// rpm's `rpmvercmp`.
pub fn rpmvercmp(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    let sep = |c: u8| !c.is_ascii_alphanumeric() && c != b'~' && c != b'^';
    loop {
        while i < a.len() && sep(a[i]) {
            i += 1;
        }
        while j < b.len() && sep(b[j]) {
            j += 1;
        }
        // `~` sorts before everything, also the end.
        let (at, bt) = (a.get(i) == Some(&b'~'), b.get(j) == Some(&b'~'));
        if at || bt {
            if !(at && bt) {
                return if at {
                    Ordering::Less
                } else {
                    Ordering::Greater
                };
            }
            i += 1;
            j += 1;
            continue;
        }
        // `^` sorts after the end but before anything else.
        let (ac, bc) = (a.get(i) == Some(&b'^'), b.get(j) == Some(&b'^'));
        if ac || bc {
            if i >= a.len() {
                return Ordering::Less;
            }
            if j >= b.len() {
                return Ordering::Greater;
            }
            if !(ac && bc) {
                return if ac {
                    Ordering::Less
                } else {
                    Ordering::Greater
                };
            }
            i += 1;
            j += 1;
            continue;
        }
        if i >= a.len() || j >= b.len() {
            break;
        }
        let numeric = a[i].is_ascii_digit();
        let take = |s: &[u8], mut k: usize| {
            let start = k;
            while k < s.len()
                && if numeric {
                    s[k].is_ascii_digit()
                } else {
                    s[k].is_ascii_alphabetic()
                }
            {
                k += 1;
            }
            (start, k)
        };
        let (sa, ea) = take(a, i);
        let (sb, eb) = take(b, j);
        if sb == eb {
            // Different segment types: numeric is newer.
            return if numeric {
                Ordering::Greater
            } else {
                Ordering::Less
            };
        }
        let (mut x, mut y) = (&a[sa..ea], &b[sb..eb]);
        if numeric {
            while x.first() == Some(&b'0') {
                x = &x[1..];
            }
            while y.first() == Some(&b'0') {
                y = &y[1..];
            }
            let c = x.len().cmp(&y.len());
            if c != Ordering::Equal {
                return c;
            }
        }
        let c = x.cmp(y);
        if c != Ordering::Equal {
            return c;
        }
        i = ea;
        j = eb;
    }
    match (i >= a.len(), j >= b.len()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        _ => Ordering::Greater,
    }
}

#[cfg(test)]
mod tests {
    use super::rpmvercmp;
    use std::cmp::Ordering::{Equal, Greater, Less};

    #[test]
    fn rpm_ordering() {
        // Each checked with rpm 4.18: rpm --eval "%{lua: print(rpm.vercmp(A, B))}".
        for (a, b, want) in [
            ("1.0", "1.0", Equal),
            ("1.0", "2.0", Less),
            ("2.0.1", "2.0.1a", Less),
            ("5.5p1", "5.5p10", Less),
            ("10xyz", "10.1xyz", Less),
            ("xyz10", "xyz10.1", Less),
            ("1.0aa", "1.0a", Greater),
            ("10", "9", Greater),
            ("1.0~rc1", "1.0", Less),
            ("1.0~rc1", "1.0~rc2", Less),
            ("1.0^", "1.0", Greater),
            ("1.0^git1", "1.0.1", Less),
            ("1.0^git1", "1.0^git2", Less),
            ("a", "1", Less),
            ("01", "1", Equal),
            ("2a", "2.0", Less),
        ] {
            assert_eq!(rpmvercmp(a, b), want, "{a} vs {b}");
        }
    }
}
