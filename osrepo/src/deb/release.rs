//! A suite's `Release` file (the text inside `InRelease`, once its signature is verified): which
//! suite it is, when it stops being valid, and the sha256 and size of every index it lists.

use thiserror::Error;

use super::control::{paragraphs, truncate, ControlError};

/// A `Release` file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReleaseError {
    /// Not a control file.
    #[error("malformed")]
    Control(#[source] ControlError),
    /// A field is missing or wrong.
    #[error("field `{field}`: {why}")]
    Field {
        /// Field name.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

/// One line of the `SHA256` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFile {
    /// Path relative to the suite directory, e.g. `main/binary-amd64/Packages.gz`.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256, lowercase hex.
    pub sha256: String,
}

/// The parts of a `Release` file KubeXM uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// `Suite` (e.g. `stable`, `bookworm-security`).
    pub suite: Option<String>,
    /// `Codename` (e.g. `bookworm`).
    pub codename: Option<String>,
    /// `Date`, seconds since the epoch.
    pub date: Option<i64>,
    /// `Valid-Until`, seconds since the epoch.
    pub valid_until: Option<i64>,
    /// `Architectures`.
    pub architectures: Vec<String>,
    /// `Components`.
    pub components: Vec<String>,
    /// `Acquire-By-Hash: yes`: indexes can be fetched as `by-hash/SHA256/<hex>`.
    pub acquire_by_hash: bool,
    /// The `SHA256` list.
    pub sha256: Vec<IndexFile>,
}

impl Release {
    /// Parses the text of a `Release` file.
    pub fn parse(text: &str) -> Result<Self, ReleaseError> {
        let paras = paragraphs(text).map_err(ReleaseError::Control)?;
        let Some(p) = paras.first() else {
            return Err(ReleaseError::Field {
                field: "SHA256",
                why: "the file is empty".into(),
            });
        };
        let words = |f: &str| -> Vec<String> {
            p.get(f)
                .map(|v| v.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let date = |field: &'static str| -> Result<Option<i64>, ReleaseError> {
            p.get(field)
                .map(|v| {
                    parse_rfc2822(v).ok_or_else(|| ReleaseError::Field {
                        field,
                        why: format!("`{}` is not an RFC 2822 date", truncate(v)),
                    })
                })
                .transpose()
        };
        let mut sha256 = Vec::new();
        let list = p.get("SHA256").ok_or_else(|| ReleaseError::Field {
            field: "SHA256",
            why: "missing: the index files cannot be verified".into(),
        })?;
        for line in list.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let bad = || ReleaseError::Field {
                field: "SHA256",
                why: format!("`{}` is not `<sha256> <size> <path>`", truncate(line)),
            };
            let mut it = line.split_whitespace();
            let (Some(hex), Some(size), Some(path), None) =
                (it.next(), it.next(), it.next(), it.next())
            else {
                return Err(bad());
            };
            if !crate::is_sha256_hex(hex) {
                return Err(bad());
            }
            let size = size.parse().map_err(|_| bad())?;
            sha256.push(IndexFile {
                path: path.to_owned(),
                size,
                sha256: hex.to_owned(),
            });
        }
        Ok(Self {
            suite: p.get("Suite").map(str::to_owned),
            codename: p.get("Codename").map(str::to_owned),
            date: date("Date")?,
            valid_until: date("Valid-Until")?,
            architectures: words("Architectures"),
            components: words("Components"),
            acquire_by_hash: p
                .get("Acquire-By-Hash")
                .is_some_and(|v| v.eq_ignore_ascii_case("yes")),
            sha256,
        })
    }

    /// The entry for `path`.
    pub fn file(&self, path: &str) -> Option<&IndexFile> {
        self.sha256.iter().find(|f| f.path == path)
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// Parses `Sat, 11 Jul 2026 10:17:11 UTC` (also `+0000`, `GMT`, `Z`, and without the weekday).
pub fn parse_rfc2822(s: &str) -> Option<i64> {
    let s = s.trim();
    let s = match s.split_once(',') {
        Some((_, rest)) => rest.trim(),
        None => s,
    };
    let mut it = s.split_whitespace();
    let day: u8 = it.next()?.parse().ok()?;
    let month_name = it.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)?;
    let year: i32 = it.next()?.parse().ok()?;
    let mut hms = it.next()?.split(':');
    let (h, m, sec): (u8, u8, u8) = (
        hms.next()?.parse().ok()?,
        hms.next()?.parse().ok()?,
        hms.next().unwrap_or("0").parse().ok()?,
    );
    let offset = match it.next().unwrap_or("UTC") {
        "UTC" | "GMT" | "Z" | "UT" => 0,
        z if (z.starts_with('+') || z.starts_with('-')) && z.len() == 5 => {
            let n: i64 = z[1..].parse().ok()?;
            let secs = (n / 100) * 3600 + (n % 100) * 60;
            if z.starts_with('-') {
                -secs
            } else {
                secs
            }
        }
        _ => return None,
    };
    let month = time::Month::try_from(u8::try_from(month + 1).ok()?).ok()?;
    let date = time::Date::from_calendar_date(year, month, day).ok()?;
    let t = date.with_hms(h, m, sec).ok()?.assume_utc();
    Some(t.unix_timestamp() - offset)
}

/// Formats seconds since the epoch as `Sat, 11 Jul 2026 10:17:11 UTC` (the `Date` of a Release).
pub fn format_rfc2822(secs: i64) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} UTC",
        DAYS[usize::from(t.weekday().number_days_from_monday())],
        t.day(),
        MONTHS[usize::from(u8::from(t.month())) - 1],
        t.year(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::{format_rfc2822, parse_rfc2822, Release};

    const TEXT: &str = "Origin: Debian\nLabel: Debian-Security\nSuite: stable-security\nCodename: bookworm-security\nDate: Sat, 21 Nov 2026 00:53:03 UTC\nValid-Until: Sat, 28 Nov 2026 00:53:03 UTC\nAcquire-By-Hash: yes\nArchitectures: amd64 arm64 i386\nComponents: updates/main updates/contrib\nDescription: Debian 12 - Security Updates\nSHA256:\n 2f8b5e3a1c03a5c43b6e8d5e1f4b6a7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6   763339 main/binary-amd64/Packages\n 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef 12345 main/binary-amd64/Packages.gz\n";

    #[test]
    fn security_release() {
        let r = Release::parse(TEXT).expect("parses");
        assert_eq!(r.codename.as_deref(), Some("bookworm-security"));
        assert!(r.acquire_by_hash);
        assert_eq!(r.architectures, ["amd64", "arm64", "i386"]);
        assert_eq!(r.sha256.len(), 2);
        let f = r.file("main/binary-amd64/Packages.gz").expect("listed");
        assert_eq!(f.size, 12345);
        assert_eq!(
            r.valid_until.zip(r.date).map(|(u, d)| u - d),
            Some(7 * 86400)
        );
    }

    #[test]
    fn dates_round_trip() {
        let t = parse_rfc2822("Sat, 11 Jul 2026 10:17:11 UTC").expect("date");
        assert_eq!(format_rfc2822(t), "Sat, 11 Jul 2026 10:17:11 UTC");
        assert_eq!(parse_rfc2822("11 Jul 2026 12:17:11 +0200"), Some(t));
        assert_eq!(parse_rfc2822("Thu, 01 Jan 1970 00:00:00 UTC"), Some(0));
        assert_eq!(parse_rfc2822("yesterday"), None);
    }

    #[test]
    fn bad_sha256_lines_are_refused() {
        let e = Release::parse("SHA256:\n abc 12 main/Packages\n").expect_err("short hex");
        assert!(e.to_string().contains("SHA256"), "{e}");
        let e = Release::parse("Suite: x\n").expect_err("no list");
        assert!(e.to_string().contains("missing"), "{e}");
    }
}
