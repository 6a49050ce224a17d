//! What `verify-cluster` reads from the cluster (`verify::parse`): `kubectl get nodes -o json`,
//! `kubectl get pods -o json`, the node metrics, the probe Service's clusterIP and the probe
//! pods' answers. The first byte chooses the reader, the rest is the answer. Never panics,
//! bounded; every name kept is a DNS name, every printed token short and plain, every label
//! what Kubernetes allows, every address an address; a refusal holds no control characters.
#![no_main]

use kubexm_install::verify::parse::{cluster_ip, node_metrics, nodes, pods, probe_answer};
use libfuzzer_sys::fuzz_target;

fn dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

fn token(s: &str) -> bool {
    s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic())
}

fn label_part(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn refusal_plain<T>(r: Result<T, impl std::fmt::Display>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            let shown = e.to_string();
            assert!(
                !shown.chars().any(|c| c.is_control() && c != '\n'),
                "{shown:?}"
            );
            None
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 5 {
        0 => {
            for n in refusal_plain(nodes(text)).unwrap_or_default() {
                assert!(dns_name(&n.name), "{:?}", n.name);
                for t in [&n.reason, &n.kubelet_version, &n.runtime_version] {
                    assert!(token(t) || t == "no Ready condition", "{t:?}");
                }
            }
        }
        1 => {
            for p in refusal_plain(pods(text)).unwrap_or_default() {
                assert!(dns_name(&p.name) && dns_name(&p.namespace), "{:?}", p.name);
                assert!(p.node.is_empty() || dns_name(&p.node), "{:?}", p.node);
                assert!(
                    p.ip.is_empty() || p.ip.parse::<std::net::IpAddr>().is_ok(),
                    "{:?}",
                    p.ip
                );
                assert!(token(&p.phase) && token(&p.waiting));
                for (k, v) in &p.labels {
                    let name = k.rsplit_once('/').map_or(k.as_str(), |(prefix, name)| {
                        assert!(dns_name(prefix), "{k:?}");
                        name
                    });
                    assert!(!name.is_empty() && label_part(name), "{k:?}");
                    assert!(label_part(v), "{v:?}");
                }
            }
        }
        2 => {
            for (name, (cpu, mem)) in refusal_plain(node_metrics(text)).unwrap_or_default() {
                assert!(dns_name(&name), "{name:?}");
                assert!(token(&cpu) && token(&mem));
            }
        }
        3 => {
            let _ = refusal_plain(cluster_ip(text));
        }
        _ => {
            if let Some(a) = refusal_plain(probe_answer(text)) {
                assert!(a.peers.len() <= 10_000);
                for (addr, node) in &a.peers {
                    assert!(addr.parse::<std::net::IpAddr>().is_ok(), "{addr:?}");
                    assert!(node.as_deref().is_none_or(dns_name), "{node:?}");
                }
                if let Some(d) = &a.dns {
                    assert!(d.parse::<std::net::IpAddr>().is_ok(), "{d:?}");
                }
            }
        }
    }
});
