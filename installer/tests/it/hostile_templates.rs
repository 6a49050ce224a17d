//! Hostile values in every field of every template (issue 34, "the rule to build in"): real
//! clusters are planned while the contexts every template is rendered with are recorded; then
//! each string of each context, one at a time, is replaced by a hostile value (newlines, quotes,
//! `: `, `#`, `[Service]`, `ExecStartPre=`, `%`, `$`, braces, escapes, C1 controls, U+2028) and
//! the template rendered again. Either a filter refuses the value (the rendering fails saying
//! so), or the output, parsed with a real parser of its format (YAML: serde-saphyr, JSON:
//! serde_json, TOML: Python's tomllib, units: KubeXM's reading of systemd's quoting plus
//! `systemd-analyze verify`), is the document rendered with a harmless value in that field, with
//! the hostile value in exactly the place of the harmless one: no value changed the structure.
//! Line-based configurations (haproxy, nginx, keepalived, chrony, hosts, exports, sysctl,
//! modules-load, ld.so.conf) keep every line that holds no value the same.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use kubexm_install::context::load_context;
use kubexm_install::pipeline::plan;
use kubexm_install::pipelines::install_pipeline;
use kubexm_install::templates::{escape, recording, render_json, TEMPLATES};

use crate::common::Edit as _;

/// What every hostile value carries after its harmless prefix.
const PAYLOAD: &str = "\nforce-new-cluster: true\n[Service]\nExecStartPre=/bin/sh -c 'id' \"q\" \\ $(id) `id` ; # %n %% ${X} {a: [b, c]} \u{1b}[31m \u{85} \u{2028} \t\r- x";

/// Fields whose value is a document KubeXM serialized itself before rendering (the addon's Helm
/// values: `serde_json::to_string_pretty` in `modules/addons.rs`), not a value from outside.
const SERIALIZED: &[(&str, &str)] = &[("addons/values.yaml.tera", "/values")];

/// What a filter says when it refuses a value.
const REFUSALS: &[&str] = &[
    "cannot be one word of this configuration file",
    "holds the control character",
    "is not an absolute path of letters, digits and /._-+@",
];

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kubexm")
        .join(name)
}

/// An edit of the fixture's text.
type Edit = Box<dyn Fn(String) -> String>;

/// The cluster variants planned: between them they render every template but those in
/// [`NOT_PLANNED`].
fn variants() -> Vec<(&'static str, Edit)> {
    fn r(a: &'static str, b: &'static str) -> Edit {
        Box::new(move |t: String| t.edit(a, b))
    }
    const EXTERNAL: &str = "  loadBalancer:\n    mode: external\n    external:\n      type: kubexm-kh\n    vip: 192.168.50.100\n    interface: eth0\n";
    fn internal(lb: &'static str) -> Edit {
        Box::new(move |t: String| {
            t.edit(EXTERNAL, lb)
                .edit("    loadbalancer: [\"master[1:3]\"]\n", "")
        })
    }
    vec![
        ("kubexm path", Box::new(|t| t)),
        ("kubeadm path", r("type: kubexm\n    version:", "type: kubeadm\n    version:")),
        ("cri-o", r("type: containerd", "type: cri-o")),
        ("docker", r("type: containerd", "type: docker")),
        (
            "isulad",
            Box::new(|t: String| {
                t.edit("type: kubexm\n    version:", "type: kubeadm\n    version:")
                    .edit("type: containerd", "type: isulad")
            }),
        ),
        ("kubexm-kn", r("type: kubexm-kh", "type: kubexm-kn")),
        (
            "harbor",
            r(
                "  registry:\n    type: registry",
                "  registry:\n    type: harbor\n    harborConfig: {adminPassword: Harbor-12345}",
            ),
        ),
        ("cilium", r("plugin: calico", "plugin: cilium")),
        ("kube-ovn", r("plugin: calico", "plugin: kube-ovn")),
        ("hybridnet", r("plugin: calico", "plugin: hybridnet")),
        ("internal haproxy", internal("  loadBalancer:\n    mode: internal\n")),
        (
            "internal nginx",
            internal("  loadBalancer:\n    mode: internal\n    internal:\n      type: nginx\n"),
        ),
        (
            "kube-vip",
            internal("  loadBalancer:\n    mode: internal\n    internal:\n      type: kube-vip\n    vip: 192.168.50.100\n    interface: eth0\n"),
        ),
        (
            "everything else",
            Box::new(|t: String| {
                t.edit("    plugin: calico\n", "    plugin: multus\n    multus: {delegate: calico}\n")
                    .edit(
                        "    type: kubexm\n    version:",
                        "    type: kubexm\n    kata: {enabled: true}\n    nodeFeatureDiscovery: {enabled: true}\n    securityEnhancement: true\n    version:",
                    )
                    .edit("    worker: [\"worker[1:2]\"]\n", "    worker: [\"worker[1:2]\"]\n    nfs: [worker2]\n")
                    + "  storage:\n    nfs: {}\n    localVolume: {enabled: true}\n  system:\n    ntpServers: [master1]\n"
            }),
        ),
    ]
}

/// Templates no variant plans, each for a reason; the test fails when one of them is planned
/// after all (then remove it here) or another is not.
const NOT_PLANNED: &[&str] = &[
    // Rendered by `backup schedule` and the backup-timer module on the control host.
    "backup/kubexm-job.service.tera",
    "backup/kubexm-job.timer.tera",
    // Addons need chart or manifest files beside cluster.yaml.
    "addons/values.yaml.tera",
    // containerd 2.x is not in the stand-in catalog.
    "containerd/config-v3.toml.tera",
    // The isulad variant stops at planning: the stand-in catalog has no registry archive it
    // asks for.
    "isulad/daemon.json.tera",
    "isulad/isulad.service.tera",
    "isulad/ld.so.conf.tera",
    // Rendered by `kubexm-install verify`, not by the install.
    "verify/probe.yaml.tera",
];

/// Every (template, context) rendered while planning every variant, without repeats.
fn recorded_contexts() -> Vec<(String, serde_json::Value)> {
    let text = std::fs::read_to_string(fixture("cluster.yaml")).expect("fixture");
    recording::start();
    for (what, edit) in variants() {
        let work = tempfile::tempdir().expect("tempdir");
        let file = work.path().join("cluster.yaml");
        std::fs::write(&file, edit(text.clone())).expect("write cluster.yaml");
        let ctx = match load_context(
            &file,
            Some(&fixture("catalog-stand-in.yaml")),
            None,
            work.path(),
        ) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                eprintln!("variant {what} does not load: {e:#}");
                continue;
            }
        };
        if let Err(e) = plan::build(
            &install_pipeline(&ctx),
            &ctx.plan_nodes(),
            &Default::default(),
        ) {
            eprintln!("variant {what} does not plan: {e}");
        }
    }
    let mut seen = BTreeSet::new();
    recording::take()
        .into_iter()
        .filter(|(name, c)| seen.insert(format!("{name}\n{c}")))
        .collect()
}

/// JSON pointers of every string in `v`.
fn string_leaves(v: &serde_json::Value, at: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(_) => out.push(at.to_owned()),
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                string_leaves(item, &format!("{at}/{i}"), out);
            }
        }
        serde_json::Value::Object(map) => {
            for (k, item) in map {
                string_leaves(
                    item,
                    &format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        _ => {}
    }
}

fn with_leaf(ctx: &serde_json::Value, pointer: &str, value: &str) -> serde_json::Value {
    let mut c = ctx.clone();
    if let Some(slot) = c.pointer_mut(pointer) {
        *slot = serde_json::Value::String(value.to_owned());
    }
    c
}

/// `v` with every occurrence of `from` in its strings (keys too) replaced by `to`.
fn replaced(v: serde_json::Value, from: &str, to: &str) -> serde_json::Value {
    match v {
        serde_json::Value::String(s) => serde_json::Value::String(s.replace(from, to)),
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(|i| replaced(i, from, to)).collect())
        }
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.into_iter()
                .map(|(k, i)| (k.replace(from, to), replaced(i, from, to)))
                .collect(),
        ),
        other => other,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Yaml,
    Json,
    Toml,
    Unit,
    Lines,
}

fn format_of(name: &str) -> Format {
    if name.ends_with(".yaml.tera")
        || name.ends_with(".yml.tera")
        || name == "kubexm/kubeconfig.tera"
    {
        Format::Yaml
    } else if name.ends_with(".json.tera") {
        Format::Json
    } else if name.ends_with(".toml.tera")
        || name.starts_with("crio/") && name.ends_with(".conf.tera")
    {
        Format::Toml
    } else if [".service.tera", ".timer.tera", ".socket.tera"]
        .iter()
        .any(|s| name.ends_with(s))
        || name == "kubeadm/10-kubeadm.conf.tera"
    {
        Format::Unit
    } else {
        Format::Lines
    }
}

/// A parsed document as JSON, by the format's real parser.
fn parse(format: Format, name: &str, text: &str) -> Result<serde_json::Value, String> {
    match format {
        Format::Yaml => serde_saphyr::from_multiple::<serde_json::Value>(text)
            .map(serde_json::Value::Array)
            .map_err(|e| e.to_string()),
        Format::Json => serde_json::from_str(text).map_err(|e| e.to_string()),
        Format::Toml => toml_to_json(text),
        Format::Unit => Ok(unit_to_json(text)),
        Format::Lines => Ok(serde_json::Value::Array(
            text.lines()
                .map(|l| serde_json::Value::String(l.to_owned()))
                .collect(),
        )),
    }
    .map_err(|e| format!("{name}: {e}\n{text}"))
}

/// TOML read by Python's tomllib (a real TOML 1.0 parser), as JSON.
fn toml_to_json(text: &str) -> Result<serde_json::Value, String> {
    use std::io::Write;
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, json, tomllib; print(json.dumps(tomllib.loads(sys.stdin.read())))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// A unit file as systemd reads it: `[section, key, words]` per setting, the words unquoted
/// and unescaped as systemd does for command lines and `Environment=` (quotes, C escapes,
/// `%%`, `$$`), continuation lines joined, comments dropped.
fn unit_to_json(text: &str) -> serde_json::Value {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = if pending.is_empty() {
            line.to_owned()
        } else {
            format!("{pending} {line}")
        };
        if let Some(head) = line.strip_suffix('\\') {
            pending = head.to_owned();
            continue;
        }
        pending.clear();
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if t.starts_with('[') {
            section = t.to_owned();
            continue;
        }
        let (key, value) = t.split_once('=').unwrap_or((t, "<no = sign>"));
        out.push(serde_json::json!([section, key.trim(), unit_words(value)]));
    }
    serde_json::Value::Array(out)
}

fn unit_words(value: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some('n') => cur.push('\n'),
                            Some('t') => cur.push('\t'),
                            Some('r') => cur.push('\r'),
                            Some('x') => {
                                let h: String = chars.by_ref().take(2).collect();
                                cur.push(char::from(u8::from_str_radix(&h, 16).unwrap_or(b'?')));
                            }
                            Some('u') => {
                                let h: String = chars.by_ref().take(4).collect();
                                cur.push(
                                    u32::from_str_radix(&h, 16)
                                        .ok()
                                        .and_then(char::from_u32)
                                        .unwrap_or('?'),
                                );
                            }
                            Some(other) => cur.push(other),
                            None => {}
                        },
                        other => cur.push(other),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
        .into_iter()
        .map(|w| w.replace("%%", "%").replace("$$", "$"))
        .collect()
}

/// `systemd-analyze verify` on the hostile units: nothing but missing programs (the units name
/// binaries this host does not have) may be reported.
fn systemd_verify(units: &[(String, String)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths = Vec::new();
    for (i, (name, text)) in units.iter().enumerate() {
        let ext = if name.ends_with(".timer.tera") {
            "timer"
        } else if name.ends_with(".socket.tera") {
            "socket"
        } else {
            "service"
        };
        let path = dir.path().join(format!("hostile-{i}.{ext}"));
        std::fs::write(&path, text).expect("write unit");
        paths.push(path);
    }
    for chunk in paths.chunks(50) {
        let out = std::process::Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .args(chunk)
            .output()
            .expect("systemd-analyze (systemd is installed on this host)");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let bad: Vec<&str> = stderr
            .lines()
            .filter(|l| {
                // Missing on this host: the programs, and the units the real ones depend on.
                !(l.contains("is not executable: No such file or directory")
                    || l.contains("Failed to create") && l.contains("not found.")
                    || l.contains("not loaded, socket cannot be started")
                    || l.trim().is_empty())
            })
            .collect();
        assert!(
            bad.is_empty(),
            "systemd-analyze verify complains about hostile units:\n{}\n(units in order: {:?})",
            bad.join("\n"),
            units.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>()
        );
    }
}

#[test]
fn no_value_changes_the_structure_of_any_template() {
    let contexts = recorded_contexts();
    let covered: BTreeSet<&str> = contexts.iter().map(|(n, _)| n.as_str()).collect();
    let missing: Vec<&str> = TEMPLATES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !covered.contains(n))
        .collect();
    let mut stats: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    let mut units = Vec::new();
    for (n, (name, ctx)) in contexts.iter().enumerate() {
        let format = format_of(name);
        let mut leaves = Vec::new();
        string_leaves(ctx, "", &mut leaves);
        for (i, leaf) in leaves.iter().enumerate() {
            if SERIALIZED.contains(&(name.as_str(), leaf.as_str())) {
                continue;
            }
            let token = format!("/kxv{n}x{i}z");
            let hostile = format!("{token}{PAYLOAD}");
            let entry = stats.entry(name).or_default();
            let Ok(base) = render_json(name, &with_leaf(ctx, leaf, &token)) else {
                continue;
            };
            let variant = match render_json(name, &with_leaf(ctx, leaf, &hostile)) {
                Ok(v) => v,
                Err(e) => {
                    let e = e.to_string();
                    assert!(
                        REFUSALS.iter().any(|r| e.contains(r)),
                        "{name} {leaf}: the hostile value failed the rendering without a filter's refusal: {e}"
                    );
                    entry.1 += 1;
                    continue;
                }
            };
            entry.0 += 1;
            // Every line that holds no value is the same, and no line was added.
            let (bl, vl): (Vec<&str>, Vec<&str>) =
                (base.lines().collect(), variant.lines().collect());
            assert_eq!(
                bl.len(),
                vl.len(),
                "{name} {leaf}: the hostile value added lines:\n{variant}"
            );
            for (b, v) in bl.iter().zip(&vl) {
                if !b.contains(&token) {
                    assert_eq!(b, v, "{name} {leaf}: a line without the value changed");
                }
            }
            let want = parse(format, name, &base).unwrap_or_else(|e| panic!("{e}"));
            let got = parse(format, name, &variant)
                .unwrap_or_else(|e| panic!("{leaf}: the hostile value broke the document: {e}"));
            if format != Format::Lines {
                // A document inside a string (a YAML config in an annotation) holds the value
                // escaped: read that back too.
                let nested = escape::dq(&tera::Value::from(hostile.as_str()));
                assert_eq!(
                    replaced(replaced(got, &hostile, &token), &nested, &token),
                    want,
                    "{name} {leaf}: the hostile value did not read back in its place:\n{variant}"
                );
            }
            if format == Format::Unit {
                units.push((name.clone(), variant));
                entry.2 += 1;
            }
        }
    }
    systemd_verify(&units);
    eprintln!("template: (hostile values read back in place, refused by a filter, units verified)");
    for (name, s) in &stats {
        eprintln!("  {name}: {s:?}");
    }
    let mut not_planned = NOT_PLANNED.to_vec();
    not_planned.sort_unstable();
    assert_eq!(
        missing, not_planned,
        "templates no planned variant rendered (add a variant, or say why in NOT_PLANNED)"
    );
}

#[test]
fn the_unit_reader_reads_systemd_quoting() {
    assert_eq!(
        unit_words(r#"/bin/x "--a=b c\nd" 100%% $$HOME -e"#),
        ["/bin/x", "--a=b c\nd", "100%", "$HOME", "-e"]
    );
}
