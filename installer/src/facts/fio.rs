//! What preflight learns about each etcd member's data disk before etcd is installed: the
//! fdatasync latency, measured the way etcd's documentation recommends (fio, `--fdatasync=1`,
//! sequential writes of 2300 bytes, 22 MiB in all, the size and pattern of etcd's WAL) in a
//! temporary directory on the filesystem that holds (or will hold) the etcd data directory,
//! removed afterwards.
//!
//! fio's JSON comes from the node and is hostile: bounded in size, read into typed values (the
//! 99th percentile of the sync latency in nanoseconds, the number of syncs), the rest ignored;
//! paths and the version are kept only when plain, and no error quotes the text.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::parse::{json_err, ParseError};
use crate::pipeline::Facts;
use crate::runner::shell;

/// At most this much probe output is read (fio 3.33 prints about 7 KiB for the one job).
pub const MAX_OUTPUT: usize = 256 * 1024;
/// The longest path kept from the probe.
pub const MAX_PATH: usize = 1024;
/// fio's job name (the file it writes is `<name>.0.0` in the temporary directory).
pub const JOB_NAME: &str = "kubexm-etcd-fsync";
/// The longest fio may measure, seconds (`--runtime`: a very slow disk stops early, with
/// enough syncs measured to tell).
pub const FIO_RUNTIME_SECS: u32 = 120;
/// The limit of the whole probe, seconds.
pub const PROBE_TIMEOUT_SECS: u64 = 300;

/// The fio command: etcd's documented measure of a WAL disk (sequential 2300-byte writes, each
/// followed by fdatasync, 22 MiB).
pub fn fio_command(dir_var: &str) -> String {
    format!(
        "fio --name={JOB_NAME} --directory=\"{dir_var}\" --rw=write --ioengine=sync --fdatasync=1 --size=22m --bs=2300 --runtime={FIO_RUNTIME_SECS} --output-format=json"
    )
}

/// The probe for the etcd data directory `data_dir` (absolute). It measures in a new directory
/// under the data directory, or under its nearest existing parent when it does not exist yet
/// (the filesystem etcd will write to), and removes it. It prints `status=` and:
/// `has-data` (etcd already keeps data there: not measured under a running member), `absent`
/// (no fio), or `measured` followed by `dir=`, `mount=` and fio's JSON after `#fio-json`.
pub fn probe_script(data_dir: &str) -> String {
    let d = shell::quote(data_dir);
    format!(
        "if [ -d {d}/member ]; then echo status=has-data; exit 0; fi\n\
         if ! command -v fio >/dev/null 2>&1; then echo status=absent; exit 0; fi\n\
         p={d}\n\
         while [ ! -d \"$p\" ]; do p=$(dirname -- \"$p\"); done\n\
         t=$(mktemp -d \"${{p%/}}/.kubexm-fio.XXXXXX\") || {{ echo \"cannot create a directory in $p to measure the disk\" >&2; exit 1; }}\n\
         trap 'rm -rf -- \"$t\"' EXIT\n\
         trap 'rm -rf -- \"$t\"; exit 1' HUP INT TERM\n\
         echo status=measured\n\
         printf 'dir=%s\\n' \"$p\"\n\
         printf 'mount=%s\\n' \"$(df -P -- \"$p\" 2>/dev/null | awk 'NR==2 {{print $6}}')\"\n\
         echo '#fio-json'\n\
         timeout {PROBE_TIMEOUT_SECS} {}",
        fio_command("$t")
    )
}

/// A latency in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Nanos(pub u64);

impl fmt::Display for Nanos {
    /// `27.394 ms` (three decimals; `0.105 ms`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = (self.0 + 500) / 1000;
        write!(f, "{}.{:03} ms", us / 1000, us % 1000)
    }
}

/// What the probe found on one etcd member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsyncFacts {
    /// The latency was measured.
    Measured(Measured),
    /// fio is not installed.
    Absent,
    /// fio ran but reported no fdatasync latency percentiles (fio older than 3.5).
    Unsupported {
        /// `fio-3.1`, when plain.
        fio: Option<String>,
    },
    /// The data directory already holds etcd's data (`member/`): not measured.
    HasData,
}

/// A measurement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measured {
    /// The 99th percentile of the fdatasync latency.
    pub p99: Nanos,
    /// How many syncs were measured.
    pub syncs: u64,
    /// The directory measured in (the data directory or its nearest existing parent).
    pub dir: String,
    /// The mount point of its filesystem, when `df` said.
    pub mount: Option<String>,
    /// fio's version (`fio-3.33`), when plain.
    pub fio: Option<String>,
}

fn invalid(message: impl Into<String>) -> ParseError {
    ParseError::Invalid {
        what: "the etcd disk probe",
        message: message.into(),
    }
}

/// An absolute path of plain characters (`[A-Za-z0-9._+@:/-]`), at most [`MAX_PATH`] long.
fn plain_path(s: &str) -> Option<String> {
    let ok = s.starts_with('/')
        && s.len() <= MAX_PATH
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._+@:/-".contains(&b));
    ok.then(|| s.to_string())
}

/// fio's version string (`fio-3.33`), when plain.
fn plain_version(s: &str) -> Option<String> {
    let ok = s.starts_with("fio-")
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b));
    ok.then(|| s.to_string())
}

#[derive(Deserialize)]
struct FioJson {
    #[serde(rename = "fio version", default)]
    version: Option<String>,
    jobs: Vec<FioJob>,
}

#[derive(Deserialize)]
struct FioJob {
    #[serde(default)]
    error: i64,
    #[serde(default)]
    sync: Option<FioSync>,
}

#[derive(Deserialize)]
struct FioSync {
    #[serde(default)]
    lat_ns: Option<FioLatency>,
}

#[derive(Deserialize)]
struct FioLatency {
    #[serde(rename = "N", default)]
    n: u64,
    #[serde(default)]
    percentile: Option<BTreeMap<String, u64>>,
}

/// What fio's JSON says of the syncs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FioReport {
    /// The 99th percentile and the number of syncs; `None` when fio gave no sync percentiles
    /// (older than 3.5, or no sync measured).
    pub sync: Option<(Nanos, u64)>,
    /// fio's version, when plain.
    pub version: Option<String>,
}

/// Reads fio's `--output-format=json` (one job).
pub fn parse_fio_json(json: &str) -> Result<FioReport, ParseError> {
    if json.len() > MAX_OUTPUT {
        return Err(invalid(format!(
            "{} bytes of fio output, at most {MAX_OUTPUT} expected",
            json.len()
        )));
    }
    let out: FioJson = serde_json::from_str(json)
        .map_err(json_err("the etcd disk probe", "fio --output-format=json"))?;
    let version = out.version.as_deref().and_then(plain_version);
    let [job] = out.jobs.as_slice() else {
        return Err(invalid(format!(
            "fio reported {} jobs, one expected",
            out.jobs.len()
        )));
    };
    if job.error != 0 {
        return Err(invalid(format!(
            "fio's job failed with error {} (an errno: see `errno {}`)",
            job.error, job.error
        )));
    }
    let Some(lat) = job.sync.as_ref().and_then(|s| s.lat_ns.as_ref()) else {
        return Ok(FioReport {
            sync: None,
            version,
        });
    };
    let p99 = lat.percentile.as_ref().and_then(|p| {
        p.iter()
            .find(|(k, _)| k.parse::<f64>().is_ok_and(|v| (v - 99.0).abs() < 1e-9))
            .map(|(_, v)| *v)
    });
    Ok(FioReport {
        sync: p99.filter(|_| lat.n > 0).map(|p| (Nanos(p), lat.n)),
        version,
    })
}

/// Reads the probe's output.
pub fn parse(out: &str) -> Result<FsyncFacts, ParseError> {
    if out.len() > MAX_OUTPUT {
        return Err(invalid(format!(
            "{} bytes of output, at most {MAX_OUTPUT} expected",
            out.len()
        )));
    }
    let (head, json) = match out.split_once("\n#fio-json\n") {
        Some((h, j)) => (h, Some(j)),
        None => (out, None),
    };
    let mut status = None;
    let (mut dir, mut mount) = (None, None);
    for line in head.lines() {
        match line.trim().split_once('=') {
            Some(("status", v)) => status = Some(v.to_string()),
            Some(("dir", v)) => dir = plain_path(v),
            Some(("mount", v)) => mount = plain_path(v),
            _ => {}
        }
    }
    match (status.as_deref(), json) {
        (Some("absent"), _) => Ok(FsyncFacts::Absent),
        (Some("has-data"), _) => Ok(FsyncFacts::HasData),
        (Some("measured"), Some(json)) => {
            let dir = dir.ok_or_else(|| {
                invalid("no plain absolute path of the directory measured (`dir=`)")
            })?;
            let report = parse_fio_json(json)?;
            match report.sync {
                Some((p99, syncs)) => Ok(FsyncFacts::Measured(Measured {
                    p99,
                    syncs,
                    dir,
                    mount,
                    fio: report.version,
                })),
                None => Ok(FsyncFacts::Unsupported {
                    fio: report.version,
                }),
            }
        }
        (Some("measured"), None) => Err(invalid("fio's JSON is missing after `#fio-json`")),
        _ => Err(invalid("no `status=` of absent, has-data or measured")),
    }
}

/// The prefix of `node`'s fsync facts in the pipeline's [`Facts`].
pub fn fact_prefix(node: &str) -> String {
    format!("fsync/{node}/")
}

/// The [`crate::pipeline::ops::FactParser`] of the probe (keys under [`fact_prefix`]).
pub fn learn(out: &str) -> Result<Vec<(String, String)>, String> {
    parse(out).map(|f| f.to_facts()).map_err(|e| e.to_string())
}

impl FsyncFacts {
    /// The facts as the pipeline stores them, relative to the node's [`fact_prefix`].
    pub fn to_facts(&self) -> Vec<(String, String)> {
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        match self {
            FsyncFacts::Absent => vec![kv("status", "absent")],
            FsyncFacts::HasData => vec![kv("status", "has-data")],
            FsyncFacts::Unsupported { fio } => {
                let mut v = vec![kv("status", "unsupported")];
                v.extend(fio.iter().map(|f| kv("fio", f)));
                v
            }
            FsyncFacts::Measured(m) => {
                let mut v = vec![
                    kv("status", "measured"),
                    kv("p99_ns", &m.p99.0.to_string()),
                    kv("syncs", &m.syncs.to_string()),
                    kv("dir", &m.dir),
                ];
                v.extend(m.mount.iter().map(|x| kv("mount", x)));
                v.extend(m.fio.iter().map(|x| kv("fio", x)));
                v
            }
        }
    }

    /// The facts learned for `node`; `None` when they were not gathered (or were tampered with).
    pub fn from_facts(facts: &Facts, node: &str) -> Option<Self> {
        let p = fact_prefix(node);
        let get = |k: &str| facts.get(&format!("{p}{k}"));
        let fio = get("fio").and_then(|v| plain_version(&v));
        match get("status")?.as_str() {
            "absent" => Some(FsyncFacts::Absent),
            "has-data" => Some(FsyncFacts::HasData),
            "unsupported" => Some(FsyncFacts::Unsupported { fio }),
            "measured" => Some(FsyncFacts::Measured(Measured {
                p99: Nanos(get("p99_ns")?.parse().ok()?),
                syncs: get("syncs")?.parse().ok()?,
                dir: plain_path(&get("dir")?)?,
                mount: get("mount").and_then(|m| plain_path(&m)),
                fio,
            })),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fio 3.33 (Debian 12) on this machine's /tmp, `fio --rw=write --ioengine=sync
    /// --fdatasync=1 --size=22m --bs=2300 --output-format=json`, a busy shared disk.
    const FIO_3_33: &str = include_str!("testdata/fio-3.33-fdatasync.json");

    fn measured(json: &str) -> String {
        format!("status=measured\ndir=/var/lib\nmount=/\n#fio-json\n{json}")
    }

    #[test]
    fn reads_the_p99_of_real_fio_output() {
        let r = parse_fio_json(FIO_3_33).expect("fio 3.33");
        assert_eq!(r.sync, Some((Nanos(27_394_048), 10_029)));
        assert_eq!(r.version.as_deref(), Some("fio-3.33"));
        let f = parse(&measured(FIO_3_33)).expect("probe");
        let FsyncFacts::Measured(m) = &f else {
            panic!("{f:?}")
        };
        assert_eq!(m.p99.to_string(), "27.394 ms");
        assert_eq!(m.dir, "/var/lib");
        assert_eq!(m.mount.as_deref(), Some("/"));
        // Round trip through the pipeline's facts.
        let facts = Facts::default();
        for (k, v) in f.to_facts() {
            facts.set(format!("{}{k}", fact_prefix("node1")), v);
        }
        assert_eq!(FsyncFacts::from_facts(&facts, "node1"), Some(f));
        assert_eq!(FsyncFacts::from_facts(&facts, "node2"), None);
        assert_eq!(parse("status=absent\n"), Ok(FsyncFacts::Absent));
        assert_eq!(parse("status=has-data\n"), Ok(FsyncFacts::HasData));
    }

    #[test]
    fn old_fio_without_sync_percentiles_is_unsupported_not_an_error() {
        // fio before 3.5 prints no `sync` section.
        let old = r#"{"fio version":"fio-3.1","jobs":[{"jobname":"x","error":0,"write":{}}]}"#;
        assert_eq!(
            parse(&measured(old)),
            Ok(FsyncFacts::Unsupported {
                fio: Some("fio-3.1".into())
            })
        );
        let no_syncs =
            r#"{"jobs":[{"error":0,"sync":{"lat_ns":{"N":0,"percentile":{"99.000000":5}}}}]}"#;
        assert_eq!(
            parse(&measured(no_syncs)),
            Ok(FsyncFacts::Unsupported { fio: None })
        );
    }

    #[test]
    fn hostile_output_is_bounded_typed_and_never_quoted() {
        assert!(parse(&"x".repeat(MAX_OUTPUT + 1)).is_err());
        assert!(parse("").is_err());
        assert!(parse("status=maybe\n").is_err());
        assert!(parse("status=measured\ndir=/var/lib\n").is_err(), "no JSON");
        let e = parse(&measured("\u{1b}[31m{"))
            .expect_err("not JSON")
            .to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
        // Values of the wrong type, negative latencies, several jobs, a failed job.
        for bad in [
            r#"{"jobs":[{"sync":{"lat_ns":{"N":1,"percentile":{"99.000000":"fast"}}}}]}"#,
            r#"{"jobs":[{"sync":{"lat_ns":{"N":1,"percentile":{"99.000000":-5}}}}]}"#,
            r#"{"jobs":[{"sync":{"lat_ns":{"N":1,"percentile":{"99.000000":1e400}}}}]}"#,
            r#"{"jobs":[{},{}]}"#,
            r#"{"jobs":[]}"#,
            r#"{"jobs":[{"error":28}]}"#,
            r#"{"jobs":{}}"#,
        ] {
            assert!(parse(&measured(bad)).is_err(), "{bad}");
        }
        // A directory or version that is not plain: the path is required, the version dropped.
        let json = r#"{"fio version":"fio-$(reboot)","jobs":[{"sync":{"lat_ns":{"N":3,"percentile":{"99.000000":7}}}}]}"#;
        assert!(parse(&format!("status=measured\ndir=../x\n#fio-json\n{json}")).is_err());
        let f = parse(&format!(
            "status=measured\ndir=/var/lib\nmount=/a b\n#fio-json\n{json}"
        ))
        .expect("plain dir");
        let FsyncFacts::Measured(m) = f else {
            panic!("{f:?}")
        };
        assert_eq!((m.fio, m.mount, m.p99), (None, None, Nanos(7)));
        // Facts that were tampered with are not read.
        let facts = Facts::default();
        facts.set("fsync/n/status", "measured");
        facts.set("fsync/n/p99_ns", "-1");
        facts.set("fsync/n/syncs", "3");
        facts.set("fsync/n/dir", "/var/lib");
        assert_eq!(FsyncFacts::from_facts(&facts, "n"), None);
    }

    /// The probe run against a stand-in fio that prints the real output: the statuses, the
    /// directory measured in (the nearest existing parent) and that it is removed.
    #[test]
    fn the_probe_measures_beside_the_data_directory_and_cleans_up() {
        use std::os::unix::fs::PermissionsExt as _;
        let t = tempfile::tempdir().expect("tempdir");
        let bin = t.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let fixture = t.path().join("fio.json");
        std::fs::write(&fixture, FIO_3_33).expect("fixture");
        let record = t.path().join("dirs");
        let fio = bin.join("fio");
        std::fs::write(
            &fio,
            format!(
                "#!/bin/sh\nfor a in \"$@\"; do case $a in --directory=*) d=${{a#--directory=}}; echo \"$d\" >> {rec}; [ -d \"$d\" ] || exit 9;; esac; done\ncat {fix}\n",
                rec = record.display(),
                fix = fixture.display()
            ),
        )
        .expect("shim");
        std::fs::set_permissions(&fio, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let run = |data_dir: &std::path::Path, path: &str| {
            let out = std::process::Command::new("/bin/sh")
                .args(["-c", &probe_script(&data_dir.display().to_string())])
                .env("PATH", path)
                .output()
                .expect("sh");
            assert!(out.status.success(), "{out:?}");
            parse(&String::from_utf8_lossy(&out.stdout)).expect("parsed")
        };
        let sys = std::env::var("PATH").unwrap_or_default();
        let with_fio = format!("{}:{sys}", bin.display());
        let var = t.path().join("var");
        std::fs::create_dir(&var).expect("var");
        let data = var.join("lib/etcd");
        // Not there yet: measured in its nearest existing parent, which is left as it was.
        let f = run(&data, &with_fio);
        let FsyncFacts::Measured(m) = &f else {
            panic!("{f:?}")
        };
        assert_eq!(m.dir, var.display().to_string());
        assert_eq!(m.p99, Nanos(27_394_048));
        let used = std::fs::read_to_string(&record).expect("recorded");
        assert!(
            used.trim()
                .starts_with(&format!("{}/.kubexm-fio.", var.display())),
            "{used}"
        );
        assert_eq!(
            std::fs::read_dir(&var).expect("var").count(),
            0,
            "the temporary directory is removed"
        );
        // Without fio (a PATH with nothing in it): absent. With etcd's data already there:
        // not measured.
        let empty = t.path().join("empty");
        std::fs::create_dir(&empty).expect("empty");
        assert_eq!(run(&data, &empty.display().to_string()), FsyncFacts::Absent);
        std::fs::create_dir_all(data.join("member")).expect("member");
        assert_eq!(run(&data, &with_fio), FsyncFacts::HasData);
    }
}
