//! The lab bundle: the local mirror (`tests/lab/mirror/build-mirror`) and, when the cluster lists
//! `osReleases`, the lab's Debian archive (`build-debmirror`) served over loopback HTTP, a source
//! registry filled with the images the cluster resolves to (`fill-registry`), and
//! `kubexm-build bundle` from them. The servers stop once the bundle is built.

use std::path::{Path, PathBuf};
use std::process::Command;

use kubexm_testkit::{HttpMirror, Registry, RegistryOptions};

use crate::cluster::ClusterYaml;
use crate::command::{check, Output};
use crate::Tools;

/// Builds `WORK/lab.tar.zst` for the cluster.yaml at `cluster` and returns its path.
///
/// # Panics
/// When a mirror, the registry fill or the bundle fails (with its output).
#[must_use]
pub fn build(tools: &Tools, work: &Path, cluster: &Path) -> PathBuf {
    let mirror_dir = crate::lab_dir().join("mirror");
    let mirror = Output::run(&mut Command::new(mirror_dir.join("build-mirror"))).ok("build-mirror");
    let files = HttpMirror::start(&PathBuf::from(mirror.stdout_trimmed()).join("files"));
    let registry = Registry::start(RegistryOptions::default());
    let text = fs_err::read_to_string(cluster).expect("read the cluster.yaml");
    let os = ClusterYaml::parse(&text)
        .tree()
        .pointer("/spec/system/osReleases")
        .is_some();
    let deb = os.then(|| {
        let dir = Output::run(&mut Command::new(mirror_dir.join("build-debmirror")))
            .ok("build-debmirror");
        HttpMirror::start(Path::new(dir.stdout_trimmed()))
    });
    let zone_in = fs_err::read_to_string(mirror_dir.join("zone-lab.yaml")).expect("zone-lab.yaml");
    let mut zone = zone_in.clone();
    for (placeholder, real) in [
        ("127.0.0.1:28080", files.addr().to_string()),
        ("127.0.0.1:25000", registry.host()),
    ]
    .into_iter()
    .chain(
        deb.as_ref()
            .map(|d| ("127.0.0.1:28081", d.addr().to_string())),
    ) {
        check(
            zone.contains(placeholder),
            &format!("zone-lab.yaml names {placeholder}"),
            &zone_in,
        );
        zone = zone.replace(placeholder, &real);
    }
    let zone_file = work.join("zone.yaml");
    fs_err::write(&zone_file, zone).expect("write zone.yaml");
    let mut args: Vec<std::ffi::OsString> = vec![
        "-f".into(),
        cluster.into(),
        "--catalog".into(),
        mirror_dir.join("catalog-lab.yaml").into(),
        "--zone-file".into(),
        zone_file.into(),
    ];
    let resolve = Output::run(
        Command::new(tools.build_bin())
            .arg("resolve")
            .args(&args)
            .args(["-o", "json"]),
    )
    .ok("kubexm-build resolve");
    let resolve_json = work.join("resolve.json");
    fs_err::write(&resolve_json, &resolve.stdout).expect("write resolve.json");
    let _ = Output::run(Command::new(mirror_dir.join("fill-registry")).arg(&resolve_json))
        .ok("fill-registry");
    let bundle = work.join("lab.tar.zst");
    args.extend(["-o".into(), bundle.clone().into()]);
    let _ = Output::run(
        Command::new(tools.build_bin())
            .arg("bundle")
            .args(&args)
            .env("KUBEXM_CACHE_DIR", work.join("cache")),
    )
    .ok("kubexm-build bundle");
    drop((files, registry, deb));
    bundle
}
