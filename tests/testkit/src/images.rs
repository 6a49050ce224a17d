//! Tiny real OCI images, built offline with `umoci` and pushed with `skopeo`.
//!
//! [`busybox_layout`] makes a one-layer image (Debian's static busybox plus a file holding
//! the variant name) in an OCI image layout. Builds are reproducible: every timestamp is
//! pinned to the epoch and every mode is set, so the same `(variant, arch)` always gives the
//! same digests on a machine (as long as the busybox-static package is the same).
//! The architecture is a label only: the binary inside is always the host's busybox.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::tools::{self, run_or_panic};
use crate::Registry;

/// The tag [`busybox_layout`] gives its image inside the layout.
pub const LAYOUT_TAG: &str = "latest";
/// OCI image index media type.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker schema 2 manifest media type.
pub const DOCKER_MANIFEST_V2: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// Where Debian's busybox-static puts the binary.
const BUSYBOX: &str = "/bin/busybox";
/// Every timestamp in the image.
const EPOCH: &str = "1970-01-01T00:00:00Z";
/// The file in the image that makes variants differ.
const VARIANT_FILE: &str = "etc/kubexm-variant";

/// Builds an OCI layout at `dir/busybox-VARIANT-ARCH` holding one image tagged both
/// [`LAYOUT_TAG`] and `arch`: `/bin/busybox` and `/etc/kubexm-variant` (containing
/// `variant`), with `architecture = arch`, `os = linux` in its config. Returns the layout
/// path (`dir` is created if needed).
///
/// # Panics
/// If `variant` or `arch` is not `[A-Za-z0-9._-]+`, the layout already exists, or umoci
/// fails (the message has the command and its stderr).
#[must_use]
pub fn busybox_layout(dir: &Path, variant: &str, arch: &str) -> PathBuf {
    for (what, value) in [("variant", variant), ("arch", arch)] {
        assert!(
            !value.is_empty()
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
            "busybox_layout: {what} `{value}` must match [A-Za-z0-9._-]+"
        );
    }
    tools::require_file(Path::new(BUSYBOX), "busybox-static");
    fs_err::create_dir_all(dir).expect("busybox_layout: create the target directory");
    let layout = dir.join(format!("busybox-{variant}-{arch}"));
    assert!(
        !layout.exists(),
        "busybox_layout: `{}` already exists",
        layout.display()
    );
    let image = format!("{}:{LAYOUT_TAG}", layout.display());
    let umoci = |args: &[&str], what: &str| {
        run_or_panic(
            Command::new("umoci").args(args),
            &format!("busybox_layout {variant}/{arch}: {what}"),
        );
    };
    let history = [
        format!("--history.created={EPOCH}"),
        "--history.created_by=kubexm-testkit busybox_layout".to_owned(),
    ];
    let layout_arg = layout.to_string_lossy();

    umoci(&["init", "--layout", &layout_arg], "umoci init");
    umoci(&["new", "--image", &image], "umoci new");
    let work = tempfile::tempdir().expect("busybox_layout: create a temp dir for the bundle");
    let bundle = work.path().join("bundle");
    let bundle_arg = bundle.to_string_lossy();
    // --rootless works as root too and gives the same layer, so it is always used.
    umoci(
        &["unpack", "--rootless", "--image", &image, &bundle_arg],
        "umoci unpack",
    );
    fill_rootfs(&bundle.join("rootfs"), variant);
    umoci(
        &[
            "repack",
            &history[0],
            &history[1],
            "--image",
            &image,
            &bundle_arg,
        ],
        "umoci repack",
    );
    umoci(
        &[
            "config",
            &history[0],
            &history[1],
            &format!("--created={EPOCH}"),
            &format!("--architecture={arch}"),
            "--os=linux",
            "--config.entrypoint=/bin/busybox",
            "--config.cmd=sh",
            "--image",
            &image,
        ],
        "umoci config",
    );
    umoci(&["gc", "--layout", &layout_arg], "umoci gc");
    if arch != LAYOUT_TAG {
        umoci(&["tag", "--image", &image, arch], "umoci tag");
    }
    layout
}

/// Writes the image files with fixed modes and epoch timestamps.
fn fill_rootfs(rootfs: &Path, variant: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    let set_mode = |path: &Path, mode: u32| {
        fs_err::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .expect("busybox_layout: set a mode in the rootfs");
    };
    let bin = rootfs.join("bin");
    let etc = rootfs.join("etc");
    fs_err::create_dir_all(&bin).expect("busybox_layout: create rootfs/bin");
    fs_err::create_dir_all(&etc).expect("busybox_layout: create rootfs/etc");
    fs_err::copy(BUSYBOX, bin.join("busybox")).expect("busybox_layout: copy busybox");
    fs_err::write(rootfs.join(VARIANT_FILE), format!("{variant}\n"))
        .expect("busybox_layout: write the variant file");
    set_mode(&bin.join("busybox"), 0o755);
    set_mode(&rootfs.join(VARIANT_FILE), 0o644);
    // Files first, directories last: writing into a directory changes its mtime.
    for path in [
        bin.join("busybox"),
        rootfs.join(VARIANT_FILE),
        bin,
        etc,
        rootfs.to_path_buf(),
    ] {
        if path.is_dir() {
            set_mode(&path, 0o755);
        }
        let file = fs_err::File::open(&path).expect("busybox_layout: open a rootfs entry");
        file.file()
            .set_times(std::fs::FileTimes::new().set_modified(std::time::UNIX_EPOCH))
            .expect("busybox_layout: pin a rootfs mtime");
    }
}

/// Reads `layout/index.json` and returns the descriptor tagged `tag`.
fn layout_descriptor(layout: &Path, tag: &str) -> Value {
    let path = layout.join("index.json");
    let index: Value = serde_json::from_slice(
        &fs_err::read(&path).unwrap_or_else(|err| panic!("reading the OCI layout index: {err}")),
    )
    .unwrap_or_else(|err| panic!("parsing `{}`: {err}", path.display()));
    index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .cloned()
        .unwrap_or_else(|| panic!("`{}` has no manifest tagged `{tag}`", path.display()))
}

fn blob_path(layout: &Path, digest: &str) -> PathBuf {
    let hex = digest
        .strip_prefix("sha256:")
        .unwrap_or_else(|| panic!("unsupported digest `{digest}` (only sha256)"));
    layout.join("blobs").join("sha256").join(hex)
}

fn read_blob(layout: &Path, digest: &str) -> Vec<u8> {
    fs_err::read(blob_path(layout, digest))
        .unwrap_or_else(|err| panic!("reading a blob of the OCI layout: {err}"))
}

/// The manifest digest of the image tagged `tag` in an OCI layout.
///
/// # Panics
/// If the layout has no such tag or cannot be read.
#[must_use]
pub fn layout_manifest_digest(layout: &Path, tag: &str) -> String {
    let descriptor = layout_descriptor(layout, tag);
    descriptor["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("descriptor for `{tag}` has no digest: {descriptor}"))
        .to_owned()
}

/// `skopeo copy` from `src` to the registry with `--digestfile`; returns the pushed digest.
fn copy_to_registry(
    src: &str,
    registry: &Registry,
    creds: Option<(&str, &str)>,
    repo_tag: &str,
    extra: &[&str],
) -> String {
    let work = tempfile::tempdir().expect("push: create a temp dir for the digest file");
    let digest_file = work.path().join("digest");
    let mut args = vec!["--dest-tls-verify=false".to_owned()];
    if let Some((user, pass)) = creds {
        args.push(format!("--dest-creds={user}:{pass}"));
    }
    args.push(format!("--digestfile={}", digest_file.display()));
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dest = registry.docker_ref(repo_tag);
    tools::skopeo_copy(src, &dest, &args)
        .unwrap_or_else(|err| panic!("pushing {src} to {dest}: {err}"));
    let digest = fs_err::read_to_string(&digest_file)
        .unwrap_or_else(|err| panic!("reading skopeo's digest file: {err}"));
    digest.trim().to_owned()
}

/// Pushes the image tagged `tag` in `layout` to `registry` as `repo_tag` (`repo:tag`),
/// unchanged (OCI manifest), and returns its manifest digest (`sha256:...`).
///
/// # Panics
/// If skopeo fails (the message has its stderr).
#[must_use]
pub fn push(
    layout: &Path,
    tag: &str,
    registry: &Registry,
    creds: Option<(&str, &str)>,
    repo_tag: &str,
) -> String {
    let src = format!("oci:{}:{tag}", layout.display());
    copy_to_registry(&src, registry, creds, repo_tag, &[])
}

/// Like [`push`], but converted to a Docker schema 2 manifest (`skopeo copy --format v2s2`);
/// returns the digest of the converted manifest.
///
/// # Panics
/// If skopeo fails (the message has its stderr).
#[must_use]
pub fn push_docker_schema2(
    layout: &Path,
    tag: &str,
    registry: &Registry,
    creds: Option<(&str, &str)>,
    repo_tag: &str,
) -> String {
    let src = format!("oci:{}:{tag}", layout.display());
    copy_to_registry(&src, registry, creds, repo_tag, &["--format=v2s2"])
}

/// One platform entry of a pushed index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformManifest {
    /// `platform.architecture`, from the image config.
    pub architecture: String,
    /// `platform.os`, from the image config.
    pub os: String,
    /// The manifest digest.
    pub digest: String,
    /// The manifest size in bytes.
    pub size: u64,
}

/// What [`push_index`] pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedIndex {
    /// Digest (`sha256:...`) of the index: what `REPO:TAG` resolves to.
    pub index: String,
    /// The index JSON exactly as pushed.
    pub index_json: Vec<u8>,
    /// One entry per image, in the order given.
    pub manifests: Vec<PlatformManifest>,
}

/// Pushes a multi-platform OCI image index made of the images `(layout, tag)` in
/// `images` (e.g. an amd64 and an arm64 [`busybox_layout`], tagged [`LAYOUT_TAG`] or
/// their arch) as `repo_tag`. Entries keep the order given.
///
/// Writes a fresh OCI layout holding every image's blobs and an
/// `application/vnd.oci.image.index.v1+json` index whose entries carry
/// `platform {os, architecture}` from each image config, then `skopeo copy --all`.
///
/// # Panics
/// If an image cannot be read or skopeo fails, or if the registry's digest differs from
/// the index written (skopeo would have rewritten it).
#[must_use]
pub fn push_index<P: AsRef<Path>>(
    registry: &Registry,
    repo_tag: &str,
    images: &[(P, &str)],
    creds: Option<(&str, &str)>,
) -> PushedIndex {
    const INDEX_TAG: &str = "index";
    let work = tempfile::tempdir().expect("push_index: create a temp dir");
    let layout = work.path().join("layout");
    let blobs = layout.join("blobs").join("sha256");
    fs_err::create_dir_all(&blobs).expect("push_index: create the layout blobs dir");
    let copy_blob = |from: &Path, digest: &str| {
        let target = blob_path(&layout, digest);
        if !target.exists() {
            fs_err::copy(blob_path(from, digest), target)
                .unwrap_or_else(|err| panic!("push_index: copying a blob: {err}"));
        }
    };

    let mut manifests = Vec::new();
    let mut entries = Vec::new();
    for (source, tag) in images {
        let source = source.as_ref();
        let descriptor = layout_descriptor(source, tag);
        let digest = layout_manifest_digest(source, tag);
        let raw = read_blob(source, &digest);
        let manifest: Value = serde_json::from_slice(&raw)
            .unwrap_or_else(|err| panic!("push_index: parsing manifest {digest}: {err}"));
        let config_digest = manifest["config"]["digest"]
            .as_str()
            .unwrap_or_else(|| panic!("push_index: manifest {digest} has no config digest"));
        let config: Value = serde_json::from_slice(&read_blob(source, config_digest))
            .unwrap_or_else(|err| panic!("push_index: parsing config {config_digest}: {err}"));
        copy_blob(source, &digest);
        copy_blob(source, config_digest);
        for layer in manifest["layers"].as_array().into_iter().flatten() {
            let layer_digest = layer["digest"]
                .as_str()
                .unwrap_or_else(|| panic!("push_index: a layer of {digest} has no digest"));
            copy_blob(source, layer_digest);
        }
        let field = |name: &str| config[name].as_str().unwrap_or("unknown").to_owned();
        let entry = PlatformManifest {
            architecture: field("architecture"),
            os: field("os"),
            digest: digest.clone(),
            size: raw.len() as u64,
        };
        entries.push(json!({
            "mediaType": descriptor["mediaType"].as_str().unwrap_or(OCI_MANIFEST),
            "digest": entry.digest,
            "size": entry.size,
            "platform": { "architecture": entry.architecture, "os": entry.os },
        }));
        manifests.push(entry);
    }

    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": entries,
    }))
    .expect("serialize the image index");
    let index_digest = crate::sha256_digest(&index);
    fs_err::write(blob_path(&layout, &index_digest), &index).expect("push_index: write index");
    let layout_index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": OCI_INDEX,
            "digest": index_digest,
            "size": index.len(),
            "annotations": { "org.opencontainers.image.ref.name": INDEX_TAG },
        }],
    });
    fs_err::write(layout.join("index.json"), layout_index.to_string())
        .expect("push_index: write index.json");
    fs_err::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("push_index: write oci-layout");

    let src = format!("oci:{}:{INDEX_TAG}", layout.display());
    let pushed = copy_to_registry(&src, registry, creds, repo_tag, &["--all"]);
    assert_eq!(
        pushed, index_digest,
        "push_index: skopeo pushed an index with another digest than the one written"
    );
    PushedIndex {
        index: index_digest,
        index_json: index,
        manifests,
    }
}
