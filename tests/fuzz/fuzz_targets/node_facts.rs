//! What nodes print about themselves: preflight's host facts (`facts::host::parse`: uname -r,
//! the cgroup filesystem, os-release), its network facts (`facts::net::parse`: interfaces and
//! `ip -o addr`; `facts::net::learn_vip`), the etcd disk probe (`facts::fio::parse`: fio's
//! JSON), the Harbor host probe (`facts::harbor::parse`, round-tripping through its text), the
//! KVM probe (`facts::kata::parse`), kernel-upgrade's facts (`facts::kernel`: os-release, the
//! kernel state, releases and package names; `BootId::parse`) and `status`'s node facts (`facts::node::parse_node`:
//! versions, units, certificates). Never panics; accepted host facts are short and hold no
//! control characters; accepted interface names are plain and short, and the facts round-trip
//! through the pipeline's store, as do the etcd disk facts (paths and fio's version plain); node
//! facts hold no control characters in what is printed.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use kubexm_install::facts::{fio, harbor, host, kata, kernel, net, node};
use kubexm_install::pipeline::ops::BootId;
use kubexm_install::pipeline::Facts;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(h) = host::parse(text) {
        assert!(h.kernel_release.len() <= 128, "{:?}", h.kernel_release);
        assert!(!h.kernel_release.chars().any(char::is_control));
        if let Some(os) = &h.os {
            assert!(!os.chars().any(char::is_control), "{os:?}");
        }
        let _ = h.summary();
    }
    if let Ok(n) = net::parse(text) {
        for i in &n.interfaces {
            assert!(i.as_str().len() <= net::IFNAME_MAX, "{i:?}");
            assert!(
                i.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
                "{i:?}"
            );
        }
        let facts = Facts::default();
        for (k, v) in n.to_facts() {
            facts.set(format!("{}{k}", net::fact_prefix("n")), v);
        }
        assert_eq!(net::NetFacts::from_facts(&facts, "n").as_ref(), Some(&n));
        let _ = (
            n.describe_family(true),
            n.describe_family(false),
            n.describe_interfaces(),
        );
    }
    let _ = net::learn_vip(text);
    if let Ok(f) = fio::parse(text) {
        let facts = Facts::default();
        for (k, v) in f.to_facts() {
            facts.set(format!("{}{k}", fio::fact_prefix("n")), v);
        }
        assert_eq!(fio::FsyncFacts::from_facts(&facts, "n").as_ref(), Some(&f));
        if let fio::FsyncFacts::Measured(m) = &f {
            for p in std::iter::once(&m.dir).chain(&m.mount).chain(&m.fio) {
                assert!(p.len() <= fio::MAX_PATH, "{p:?}");
                assert!(!p.chars().any(|c| c.is_control() || c == ' '), "{p:?}");
            }
            let _ = m.p99.to_string();
        }
    }
    if let Ok(h) = harbor::parse(text) {
        for l in &h.listeners {
            if let Some(p) = &l.process {
                assert!(!p.chars().any(char::is_control), "{p:?}");
            }
        }
        // What the facts store keeps reads back the same.
        assert_eq!(harbor::parse(&h.to_text()).ok().as_ref(), Some(&h));
        let _ = h.summary();
    }
    let _ = kata::parse(text);
    // kernel-upgrade: what is accepted is plain (it is printed and goes into commands).
    let plain = |s: &str| !s.chars().any(|c| c.is_control() || c == ' ' || c == '\'');
    if let Ok(os) = kernel::parse_os(text) {
        assert!(plain(&os.id), "{:?}", os.id);
    }
    if let Ok(r) = kernel::KernelRelease::parse(text, "fuzz") {
        assert!(plain(r.as_str()) && r.as_str().len() <= 64, "{r:?}");
    }
    if let Ok(p) = kernel::KernelPackage::parse(text) {
        assert!(plain(p.as_str()) && p.as_str().len() <= 100, "{p:?}");
        if let Ok(st) = kernel::parse_state(text, &p) {
            assert!(!st.summary().chars().any(char::is_control));
        }
    }
    if let Ok(package) = kernel::KernelPackage::parse("linux-image-amd64") {
        if let Ok(st) = kernel::parse_state(text, &package) {
            assert!(!st.summary().chars().any(char::is_control));
        }
    }
    if let Ok(b) = BootId::parse(text) {
        assert!(b.as_str().len() == 36 && plain(b.as_str()), "{b:?}");
    }
    let f = node::parse_node(text, UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    for c in &f.certificates {
        assert!(!c.path.chars().any(char::is_control), "{:?}", c.path);
        assert!(!c.subject.chars().any(char::is_control), "{:?}", c.subject);
    }
    for v in f.versions.values() {
        assert!(!v.chars().any(char::is_control), "{v:?}");
    }
});
