//! The zone loader (`--zone-file FILE`) and its rewrites: never panics.
#![no_main]

use kubexm_manifests::image_ref::ImageRef;
use kubexm_manifests::zone::Zone;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(zone) = Zone::parse(text, "fuzz.yaml") else {
        return;
    };
    let _ = zone.name();
    let _ = zone.plain_http_registries();
    let _ = zone.rewrite_url("https://dl.k8s.io/release/v1.33.1/bin/linux/amd64/kubeadm");
    for image in ["registry.k8s.io/pause:3.10", "docker.io/calico/node:v3.28.0", "quay.io/cilium/cilium@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"] {
        if let Ok(r) = image.parse::<ImageRef>() {
            let _ = zone.rewrite_image(&r).to_string();
        }
    }
});
