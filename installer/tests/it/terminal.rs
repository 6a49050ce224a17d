//! What an operator sees and what scripts can rely on, through the real binary: on a terminal
//! (a pseudo-terminal made by util-linux `script(1)`) log lines are text, never JSON, unless
//! `--log-format json` / `KUBEXM_LOG_FORMAT=json` asks; `-q` keeps only warnings; each class of
//! failure exits with its documented code; every `--help` carries examples; the completion
//! scripts parse in their shells and the man pages render with groff; `status` shows nodes it
//! cannot reach as unreachable and exits 7 (partial).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::cli::lab_bundle;
use crate::common::Edit as _;

const BIN: &str = env!("CARGO_BIN_EXE_kubexm-install");

/// Runs `kubexm-install ARGS` under a pseudo-terminal (`script -q -e -c`), with `envs` set;
/// returns the exit code and what the terminal showed (stdout and stderr, interleaved).
fn on_tty(args: &[&str], envs: &[(&str, &str)]) -> (i32, String) {
    let line = std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c", &line, "/dev/null"])
        .env_remove("KUBEXM_LOG_FORMAT")
        .env_remove("KUBEXM_LOG")
        .env_remove("KUBEXM_TRUSTED_KEYS")
        .stdin(std::process::Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("script(1) from util-linux runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Terminal output as lines: ANSI sequences removed, carriage returns as line ends, progress
/// bar frames (timing-dependent) dropped, `dir` shown as `DIR`, the bundle digest as
/// `<digest>` and its size as `size=<n>`.
fn screen(raw: &str, dir: &Path) -> Vec<String> {
    let mut plain = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        plain.push(if c == '\r' { '\n' } else { c });
    }
    let d = dir.display().to_string();
    plain
        .lines()
        .map(|l| l.trim_end().replace(&d, "DIR"))
        .filter(|l| !l.is_empty() && !is_bar_frame(l))
        .map(|l| {
            // The content digest: 64 hex characters.
            let mut out = String::new();
            let mut run = String::new();
            for ch in l.chars().chain(std::iter::once(' ')) {
                if ch.is_ascii_hexdigit() {
                    run.push(ch);
                } else {
                    out.push_str(if run.len() == 64 { "<digest>" } else { &run });
                    run.clear();
                    out.push(ch);
                }
            }
            match out.split_once(" size=") {
                Some((a, b)) => {
                    let rest = b.trim_start_matches(|c: char| c.is_ascii_digit());
                    format!("{a} size=<n>{rest}").trim_end().to_string()
                }
                None => out.trim_end().to_string(),
            }
        })
        .collect()
}

/// A frame of the unpack progress bar (`unpacking 1.2 MiB/3.4 MiB …`), not a log line.
fn is_bar_frame(l: &str) -> bool {
    l.contains(" unpacking ") && l.contains('/') && !l.contains("bundle")
}

#[test]
fn a_terminal_gets_text_log_lines_and_json_only_when_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bundle = lab_bundle(dir.path());
    let bundle = bundle.to_str().expect("utf-8");
    let work = dir.path().join("work");
    let work = work.to_str().expect("utf-8");

    let (code, raw) = on_tty(&["--work-dir", work, "unpack", "--bundle", bundle], &[]);
    let text = screen(&raw, dir.path());
    assert_eq!(code, 0, "{raw}");
    assert!(
        text.iter().all(|l| !l.trim_start().starts_with('{')),
        "a JSON line on the terminal without --log-format json:\n{}",
        text.join("\n")
    );
    assert!(
        text.iter()
            .any(|l| l.contains("INFO") && l.contains("bundle unpacked")),
        "{}",
        text.join("\n")
    );
    insta::assert_snapshot!("unpack_on_a_terminal", text.join("\n"));

    // The same, again (already unpacked), with -q: warnings and the result only.
    let (code, raw) = on_tty(
        &["--work-dir", work, "-q", "unpack", "--bundle", bundle],
        &[],
    );
    let quiet = screen(&raw, dir.path());
    assert_eq!(code, 0, "{raw}");
    assert!(
        quiet.iter().all(|l| !l.contains("INFO")),
        "{}",
        quiet.join("\n")
    );
    assert!(
        quiet
            .iter()
            .any(|l| l.contains("already unpacked in DIR/work/bundles/<digest>")),
        "{}",
        quiet.join("\n")
    );

    // JSON when asked, by flag or by environment: every log line is one JSON object.
    for (args, envs) in [
        (vec!["--log-format", "json"], vec![]),
        (vec![], vec![("KUBEXM_LOG_FORMAT", "json")]),
    ] {
        let mut all = vec!["--work-dir", work];
        all.extend(args);
        all.extend(["unpack", "--bundle", bundle]);
        let (code, raw) = on_tty(&all, &envs);
        assert_eq!(code, 0, "{raw}");
        let lines = screen(&raw, dir.path());
        let json: Vec<serde_json::Value> = lines
            .iter()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect();
        assert!(
            json.iter().any(
                |v| v["level"] == "INFO" && v["fields"]["message"] == "bundle already unpacked"
            ),
            "{}",
            lines.join("\n")
        );
        assert!(
            lines
                .iter()
                .all(|l| l.starts_with('{') || !l.contains("INFO")),
            "a text log line with JSON asked for:\n{}",
            lines.join("\n")
        );
    }
}

fn run(args: &[&str], work: &Path) -> Output {
    Command::new(BIN)
        .arg("--work-dir")
        .arg(work)
        .args(args)
        .env_remove("KUBEXM_TRUSTED_KEYS")
        .env("KUBEXM_LAB_PASSWORD", "not-used")
        .env("KUBEXM_LOG", "off")
        .output()
        .expect("kubexm-install runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The lab cluster.yaml with every node on a loopback address whose SSH port refuses
/// connections at once (port 1).
fn unreachable_cluster(dir: &Path) -> PathBuf {
    let lab = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab/cluster.yaml");
    let mut yaml = std::fs::read_to_string(lab).expect("lab cluster.yaml");
    for i in 1..=3 {
        yaml = yaml.edit(
            &format!("address: 10.88.10.1{i},"),
            &format!("address: 127.0.0.{}, port: 1,", 10 + i),
        );
    }
    assert_eq!(yaml.matches("port: 1,").count(), 3, "{yaml}");
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, yaml).expect("write");
    path
}

/// An installed cluster `lab` recorded in `DIR/work` from [`unreachable_cluster`]: the work
/// directory, the cluster.yaml and its text.
fn recorded_unreachable(dir: &Path) -> (PathBuf, PathBuf, String) {
    use kubexm_install::record::{self, Applied, Operation, Outcome, Records};
    let work = dir.join("work");
    let cluster = unreachable_cluster(dir);
    let lab = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab");
    let ctx = kubexm_install::context::load_context(
        &cluster,
        Some(&lab.join("mirror/catalog-lab.yaml")),
        None,
        &work,
    )
    .expect("context");
    let yaml = std::fs::read_to_string(&cluster).expect("read");
    let op = Operation {
        operation: "install".into(),
        nodes: ctx.all(),
        started_at: "2026-11-23T22:00:00.000Z".into(),
        finished_at: "2026-11-23T22:05:00.000Z".into(),
        seconds: 300.0,
        result: Outcome::Succeeded,
        error: None,
        notes: Vec::new(),
        cluster_yaml_sha256: record::sha256_hex(yaml.as_bytes()),
        bundle_digest: None,
    };
    Records::new(&work)
        .finish(
            "lab",
            op,
            Some(Applied {
                cluster_yaml: &yaml,
                base_dir: dir,
                bundle_digest: None,
                nodes: record::membership(&ctx.cluster),
                present: true,
            }),
        )
        .expect("record");
    (work, cluster, yaml)
}

#[test]
fn each_failure_class_exits_with_its_documented_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");

    // 2: usage, from the parser and from a verb missing what it needs.
    assert_eq!(run(&["--no-such-flag"], &work).status.code(), Some(2));
    let out = run(&["install"], &work);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    // 3: cluster.yaml that breaks the rules.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kubexm.io/v1alpha1\nkind: Cluster\nmetadata: {name: x}\nspec: {hosts: []}\n",
    )
    .expect("write");
    let out = run(&["check", "-f", bad.to_str().expect("utf-8")], &work);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));

    // 4: a damaged bundle is refused.
    let bundle = lab_bundle(dir.path());
    let mut bytes = std::fs::read(&bundle).expect("read");
    bytes.truncate(bytes.len() / 2);
    let cut = dir.path().join("cut.tar.zst");
    std::fs::write(&cut, bytes).expect("write");
    let out = run(&["unpack", "--bundle", cut.to_str().expect("utf-8")], &work);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));

    // 5: no node accepts the connection.
    let cluster = unreachable_cluster(dir.path());
    let out = run(
        &[
            "install",
            "--bundle",
            bundle.to_str().expect("utf-8"),
            "-f",
            cluster.to_str().expect("utf-8"),
            "--accept-new-host-keys",
        ],
        &work,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("cannot connect to 3 node(s)"), "{err}");
}

#[test]
fn status_shows_unreachable_nodes_and_exits_partial() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (work, _, _) = recorded_unreachable(dir.path());

    let out = run(&["status", "-o", "json"], &work);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status -o json");
    assert_eq!(v["cluster"], "lab");
    assert_eq!(v["record"]["lastOperation"]["operation"], "install");
    assert_eq!(v["record"]["lastOperation"]["result"], "succeeded");
    let nodes = v["nodes"].as_array().expect("nodes");
    let names: Vec<&str> = nodes.iter().filter_map(|n| n["name"].as_str()).collect();
    assert_eq!(names, ["node1", "node2", "node3"]);
    for n in nodes {
        assert_eq!(n["reachable"], false, "{n}");
        assert_eq!(
            n["address"].as_str().map(|a| a.starts_with("127.0.0.")),
            Some(true)
        );
        assert!(
            n["roles"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == "master")),
            "{n}"
        );
    }
    let problems: Vec<&str> = v["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(
        problems.contains(&"node2: unreachable over SSH"),
        "{problems:?}"
    );
    assert!(err.contains("is not fully healthy"), "{err}");

    let out = run(&["status"], &work);
    assert_eq!(out.status.code(), Some(7));
    let shown = text(&out.stdout);
    assert!(shown.starts_with("cluster lab\n"), "{shown}");
    assert!(shown.contains("UNREACHABLE"), "{shown}");
}

#[test]
fn help_completions_and_man_pages_cover_every_subcommand() {
    let paths = kubexm_testkit::cli::every_help_has_examples(BIN);
    for verb in [
        "install",
        "status",
        "add-node",
        "etcd",
        "completions",
        "man",
    ] {
        assert!(
            paths.iter().any(|p| p == &[verb.to_string()]),
            "{verb}: {paths:?}"
        );
    }
    assert!(paths
        .iter()
        .any(|p| p == &["etcd".to_string(), "add-member".to_string()]));
    kubexm_testkit::cli::completions_and_man_pages_check(BIN, "kubexm-install", &paths);
}

/// `status` of a cluster KubeXM deleted says so (when, by which operation, how to put it back),
/// asks no node, exits 0; `-o json` carries `state: "deleted"`.
#[test]
fn status_of_a_deleted_cluster_says_it_was_deleted() {
    use kubexm_install::record::{self, Applied, Operation, Outcome, Records};
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    let cluster = unreachable_cluster(dir.path());
    let lab = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab");
    let ctx = kubexm_install::context::load_context(
        &cluster,
        Some(&lab.join("mirror/catalog-lab.yaml")),
        None,
        &work,
    )
    .expect("context");
    let yaml = std::fs::read_to_string(&cluster).expect("read");
    let op = |operation: &str, at: &str| Operation {
        operation: operation.into(),
        nodes: ctx.all(),
        started_at: at.into(),
        finished_at: at.into(),
        seconds: 12.0,
        result: Outcome::Succeeded,
        error: None,
        notes: Vec::new(),
        cluster_yaml_sha256: record::sha256_hex(yaml.as_bytes()),
        bundle_digest: None,
    };
    let applied = |present: bool| Applied {
        cluster_yaml: &yaml,
        base_dir: dir.path(),
        bundle_digest: None,
        nodes: record::membership(&ctx.cluster),
        present,
    };
    let records = Records::new(&work);
    records
        .finish(
            "lab",
            op("install", "2026-11-23T22:05:00.000Z"),
            Some(applied(true)),
        )
        .expect("install");
    records
        .finish(
            "lab",
            op("delete", "2026-11-24T01:00:00.000Z"),
            Some(applied(false)),
        )
        .expect("delete");

    let out = run(&["status"], &work);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        said.starts_with("cluster lab: deleted by `delete` at 2026-11-24T01:00:00.000Z"),
        "{said}"
    );
    assert!(said.contains("kubexm-install install"), "{said}");
    assert!(
        !text(&out.stderr).contains("cannot connect"),
        "no node is asked"
    );
    let out = run(&["status", "-o", "json"], &work);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["state"], "deleted");
    assert_eq!(v["deletedAt"], "2026-11-24T01:00:00.000Z");
    assert_eq!(v["lastOperation"]["operation"], "delete");
}

/// `apply` judges the edited cluster.yaml before connecting anywhere: a pod CIDR change and a
/// new host are refused with exit 2, each named with what to do, and nothing is recorded; the
/// installed cluster.yaml again is "nothing to apply"; a feature gate is shown in its group and
/// then needs the nodes (unreachable here: exit 5).
#[test]
fn apply_refuses_before_connecting_and_shows_the_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (work, cluster, yaml) = recorded_unreachable(dir.path());
    let recorded = std::fs::read(work.join("clusters/lab/cluster.yaml")).expect("recorded");
    let history = || {
        std::fs::read_to_string(work.join("clusters/lab/installed.json"))
            .expect("record")
            .len()
    };
    let before = history();
    let edited = |name: &str, edit: &dyn Fn(String) -> String| {
        let path = dir.path().join(name);
        let text = edit(yaml.clone());
        assert_ne!(text, yaml, "{name} not edited");
        std::fs::write(&path, text).expect("write");
        path
    };

    let cidr = edited("cidr.yaml", &|t| {
        t.edit("  network:\n", "  network:\n    podCidr: 10.199.0.0/16\n")
    });
    let out = run(&["apply", "-f", cidr.to_str().expect("utf-8")], &work);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("spec.network.podCidr"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(err.contains("needs a new cluster"), "{err}");

    let host = edited("host.yaml", &|t| {
        t.edit(
            "  roleGroups:\n",
            "    - {name: node9, address: 127.0.0.19, port: 1, user: root}\n  roleGroups:\n",
        )
        .edit(
            "    worker: [\"node[1:3]\"]",
            "    worker: [\"node[1:3]\", node9]",
        )
    });
    let out = run(&["apply", "-f", host.to_str().expect("utf-8")], &work);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("add-node --node node9"), "{err}");

    let out = run(&["apply", "-f", cluster.to_str().expect("utf-8")], &work);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("nothing to apply"));

    let gate = edited("gate.yaml", &|t| {
        t.edit(
            "  kubernetes:\n",
            "  kubernetes:\n    featureGates: {RotateKubeletServerCertificate: true}\n",
        )
    });
    let out = run(
        &["apply", "-f", gate.to_str().expect("utf-8"), "--dry-run"],
        &work,
    );
    let said = text(&out.stdout);
    assert!(
        said.contains("control plane")
            && said.contains(
                "~ spec.kubernetes.featureGates.RotateKubeletServerCertificate: unset -> `true`"
            ),
        "{said}"
    );
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));

    assert_eq!(
        std::fs::read(work.join("clusters/lab/cluster.yaml")).expect("recorded"),
        recorded,
        "a refused or unreachable apply records nothing"
    );
    assert_eq!(history(), before);
}

/// A bundle holding nothing but its bundle.json (Kubernetes `version`) and a cluster.yaml.
fn version_bundle(dir: &Path, version: &str) -> PathBuf {
    use kubexm_bundles::pack::{pack, Entry, PackOptions, Source, FILE_MODE};
    let out = dir.join(format!("{version}.tar.zst"));
    let mut manifest = crate::intake::manifest_with(&[]);
    manifest.kubernetes_version = version.to_string();
    let entries = vec![Entry {
        path: kubexm_bundles::manifest::CLUSTER_PATH.into(),
        source: Source::Bytes(b"kind: Cluster\n".to_vec()),
        sha256: None,
        mode: FILE_MODE,
    }];
    pack(&out, &manifest, entries, &PackOptions::default()).expect("pack");
    out
}

#[test]
fn upgrade_refuses_a_downgrade_and_a_gap_before_connecting_and_names_what_to_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (work, _, _) = recorded_unreachable(dir.path());
    let record = || std::fs::read(work.join("clusters/lab/installed.json")).expect("record");
    let before = record();
    let upgrade = |bundles: &[&Path], extra: &[&str]| {
        let mut args = vec!["upgrade"];
        for b in bundles {
            args.extend(["--bundle", b.to_str().expect("utf-8")]);
        }
        args.extend(extra);
        run(&args, &work)
    };
    // The recorded cluster runs v1.33.11 (the lab's cluster.yaml).
    let older = version_bundle(dir.path(), "v1.32.4");
    let out = upgrade(&[&older], &["--yes", "--no-backup"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("does not downgrade"), "{err}");

    let v35 = version_bundle(dir.path(), "v1.35.2");
    let out = upgrade(&[&v35], &["--yes", "--no-backup"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no v1.34.x") && err.contains("build a bundle holding v1.34.x"),
        "{err}"
    );
    // --to a version no bundle holds.
    let v34 = version_bundle(dir.path(), "v1.34.1");
    let out = upgrade(&[&v34, &v35], &["--to", "v1.35.9", "--no-backup"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no v1.35.9"), "{err}");

    // The installed version: nothing to do, and nothing connects.
    let same = version_bundle(dir.path(), "v1.33.11");
    let out = upgrade(&[&same], &["--yes", "--no-backup"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("runs v1.33.11 already: nothing to upgrade"),
        "{}",
        text(&out.stdout)
    );
    // KubeXM's etcd and no --backup-key: refused (a backup comes first).
    let out = upgrade(&[&v34], &["--yes"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("pass --backup-key FILE"), "{err}");
    assert_eq!(record(), before, "a refused upgrade changed the record");
    assert!(
        !work.join("state").exists()
            || std::fs::read_dir(work.join("state"))
                .expect("state")
                .next()
                .is_none()
    );
}

/// A bundle built for an upgrade path (`kubexm-build bundle --upgrade-from`): `target` in
/// bundle.json with `path` as its `upgradePath`, each version's cluster.yaml the installed one
/// (`yaml`) at that version passed through `edit(version, text)`, the lab's catalog beside them.
fn path_bundle(
    out: &Path,
    yaml: &str,
    target: &str,
    path: &[&str],
    edit: impl Fn(&str, String) -> String,
) {
    use kubexm_bundles::manifest::{upgrade_cluster_path, UpgradeStepRecord};
    use kubexm_bundles::pack::{pack, Entry, PackOptions, Source, FILE_MODE};
    let lab = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab");
    let at = |v: &str| {
        let t = yaml.edit("    version: v1.33.11\n", &format!("    version: {v}\n"));
        assert_ne!(t, yaml, "the lab's cluster.yaml names v1.33.11");
        edit(v, t).into_bytes()
    };
    let file = |path: String, bytes: Vec<u8>| Entry {
        path,
        source: Source::Bytes(bytes),
        sha256: None,
        mode: FILE_MODE,
    };
    let mut manifest = crate::intake::manifest_with(&[]);
    manifest.kubernetes_version = target.to_string();
    let catalog = std::fs::read(lab.join("mirror/catalog-lab.yaml")).expect("catalog");
    let mut entries = vec![
        file(kubexm_bundles::manifest::CLUSTER_PATH.into(), at(target)),
        file(kubexm_bundles::manifest::CATALOG_PATH.into(), catalog),
    ];
    for v in path {
        manifest.upgrade_path.push(UpgradeStepRecord {
            kubernetes_version: (*v).to_string(),
            cluster: upgrade_cluster_path(v),
        });
        entries.push(file(upgrade_cluster_path(v), at(v)));
    }
    pack(out, &manifest, entries, &PackOptions::default()).expect("pack");
}

#[test]
fn upgrade_takes_every_minor_of_the_path_from_one_bundle_with_each_versions_cluster_yaml() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (work, _, yaml) = recorded_unreachable(dir.path());
    let record = || std::fs::read(work.join("clusters/lab/installed.json")).expect("record");
    let before = record();
    let upgrade = |b: &Path| {
        let out = run(
            &[
                "upgrade",
                "--bundle",
                b.to_str().expect("utf-8"),
                "--no-backup",
            ],
            &work,
        );
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    // One bundle: v1.35.8 with v1.34.11 on its upgrade path; the installed v1.33.11 needs both.
    let multi = dir.path().join("path.tar.zst");
    path_bundle(&multi, &yaml, "v1.35.8", &["v1.34.11"], |_, t| t);
    let m = multi.display().to_string();
    let (code, stdout, err) = upgrade(&multi);
    assert!(
        stdout.contains("upgrade path: v1.33.11 -> v1.34.11 -> v1.35.8"),
        "{stdout}\n{err}"
    );
    for v in ["v1.34.11", "v1.35.8"] {
        assert!(
            stdout.contains(&format!("  {v}: bundle `{m}`"))
                && stdout.contains(&format!("the {v} cluster.yaml of `{m}`")),
            "{v}: {stdout}"
        );
    }
    // Every step was checked against the installed cluster before the nodes were reached
    // (they cannot be: nothing changed).
    assert!(code.is_some_and(|c| c != 0 && c != 2), "{code:?}: {err}");
    assert!(err.contains("127.0.0.11"), "{err}");

    // Without its upgrade path the same bundle lacks v1.34: refused naming it.
    let single = dir.path().join("single.tar.zst");
    path_bundle(&single, &yaml, "v1.35.8", &[], |_, t| t);
    let (code, _, err) = upgrade(&single);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no v1.34.x"), "{err}");

    // The path version's cluster.yaml changing more than the version: refused naming it.
    let edited = dir.path().join("edited.tar.zst");
    path_bundle(&edited, &yaml, "v1.35.8", &["v1.34.11"], |v, t| {
        if v == "v1.34.11" {
            t.edit("ntpServers: [node1]", "ntpServers: [node2]")
        } else {
            t
        }
    });
    let (code, _, err) = upgrade(&edited);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("the v1.34.11 cluster.yaml of") && err.contains("ntpServers"),
        "{err}"
    );
    assert_eq!(record(), before, "a refused upgrade changed the record");
}
