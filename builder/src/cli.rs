//! Command-line interface of `kubexm-build`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Build KubeXM offline bundles on a connected machine.
///
/// Reads a cluster description (cluster.yaml), resolves exactly which binaries and container
/// images it needs for the chosen zone, downloads and verifies them, and writes one .tar.zst
/// bundle that `kubexm-install` installs on air-gapped hosts.
#[derive(Debug, Parser)]
#[command(
    name = "kubexm-build",
    version,
    propagate_version = true,
    args_override_self = true,
    after_long_help = TOP_EXAMPLES
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Log format and verbosity.
    #[command(flatten)]
    pub output: crate::output::OutputArgs,
}

const TOP_EXAMPLES: &str = "Examples:
  kubexm-build validate -f cluster.yaml
  kubexm-build bundle -f cluster.yaml -o demo.tar.zst
  kubexm-build verify demo.tar.zst
  kubexm-build completions bash > /etc/bash_completion.d/kubexm-build

Exit codes: 0 done, 1 other failure, 2 usage, 3 invalid cluster.yaml, catalog, zone or imported
file, 4 bundle refused by verify, 5 a download failed. The guide: installer/docs/guide.md.";

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the files, images and OS packages a cluster needs (only the OS repositories'
    /// signed indexes are downloaded).
    #[command(after_help = RESOLVE_EXAMPLES)]
    Resolve(ResolveArgs),
    /// Check a cluster.yaml and report every problem.
    #[command(after_help = VALIDATE_EXAMPLES)]
    Validate(SourceArgs),
    /// Download and verify everything the cluster needs and write one .tar.zst bundle.
    #[command(after_help = BUNDLE_EXAMPLES)]
    Bundle(BundleArgs),
    /// Check every entry of a bundle against its SHA256SUMS and bundle.json.
    #[command(after_help = VERIFY_EXAMPLES)]
    Verify(VerifyArgs),
    /// Say what changes if a new bundle replaces an old one, or what the cluster runs: Kubernetes
    /// and component versions, files, images, OS packages, cluster.yaml, sizes.
    #[command(after_help = DIFF_EXAMPLES)]
    Diff(DiffArgs),
    /// Convert another installer's configuration into a cluster.yaml.
    #[command(after_help = IMPORT_EXAMPLES)]
    Import(ImportArgs),
    /// Make a key pair for signing bundles (minisign format: `minisign -V` checks signatures).
    #[command(after_help = KEYGEN_EXAMPLES)]
    Keygen(KeygenArgs),
    /// Print a shell completion script.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (kubexm-build.1 and one per subcommand) into a directory, or the
    /// main page to standard output.
    #[command(after_help = MAN_EXAMPLES)]
    Man {
        /// Directory to write the pages into (default: the main page on standard output).
        #[arg(short = 'o', long = "output", value_name = "DIR")]
        output: Option<PathBuf>,
    },
}

const COMPLETIONS_EXAMPLES: &str = "Examples:
  kubexm-build completions bash > /etc/bash_completion.d/kubexm-build
  kubexm-build completions zsh > \"${fpath[1]}/_kubexm-build\"
  kubexm-build completions fish > ~/.config/fish/completions/kubexm-build.fish";

const MAN_EXAMPLES: &str = "Examples:
  kubexm-build man -o /usr/local/share/man/man1 && man kubexm-build-bundle
  kubexm-build man | man -l -";

/// `import` options.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Which tool the configuration comes from.
    #[command(subcommand)]
    pub from: ImportFrom,
}

/// Configurations `import` reads.
#[derive(Debug, Subcommand)]
pub enum ImportFrom {
    /// A KubeKey configuration: a v1alpha2 `Cluster` (KubeKey v1–v3, `kk create config`), or a v4
    /// `Config` with its `Inventory`.
    #[command(after_help = IMPORT_EXAMPLES)]
    Kubekey(KubekeyArgs),
}

/// `import kubekey` options.
#[derive(Debug, Args)]
pub struct KubekeyArgs {
    /// The KubeKey file: a v1alpha2 Cluster, or a v4 Config.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
    /// The KubeKey v4 Inventory (hosts and groups) that goes with a v4 Config.
    #[arg(short = 'i', long = "inventory", value_name = "FILE")]
    pub inventory: Option<PathBuf>,
    /// The cluster.yaml to write. Host passwords and inline keys go to `<FILE>.secrets/` (0600).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "cluster.yaml"
    )]
    pub output: PathBuf,
    /// Cluster name (default: KubeKey's metadata.name).
    #[arg(long)]
    pub name: Option<String>,
    /// Kubernetes version to install, when KubeKey's is not in the catalog.
    #[arg(long, value_name = "VERSION")]
    pub kubernetes_version: Option<String>,
    /// Network interface carrying the kube-vip VIP (KubeKey detects it; KubeXM needs it named).
    #[arg(long, value_name = "IFACE")]
    pub vip_interface: Option<String>,
    /// A catalog file merged over the built-in catalog (for versions it lacks).
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// Replace an existing output file and secrets.
    #[arg(long)]
    pub force: bool,
}

/// `keygen` options.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Writes PREFIX.key (secret, mode 0600) and PREFIX.pub.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "PREFIX",
        default_value = "kubexm"
    )]
    pub output: PathBuf,
    /// Replace existing key files.
    #[arg(long)]
    pub force: bool,
}

/// `bundle` options.
#[derive(Debug, Args)]
pub struct BundleArgs {
    /// Inputs.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Bundle to write (default: kubexm-CLUSTER-VERSION.tar.zst in the current directory).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Content-addressed cache shared by files and image blobs (default: ~/.cache/kubexm).
    #[arg(long, value_name = "DIR", env = "KUBEXM_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Parallel downloads.
    #[arg(long, default_value_t = 8)]
    pub jobs: usize,
    /// zstd compression level (1–19).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    pub level: i32,
    /// Tries per download before giving up.
    #[arg(long, default_value_t = 4)]
    pub retries: u32,
    /// First retry delay in milliseconds (doubles each retry).
    #[arg(long, default_value_t = 500, value_name = "MS")]
    pub retry_delay_ms: u64,
    /// The whole time one file download may take, every retry included, in seconds (a server
    /// that sends a byte now and then would otherwise hold the build forever).
    #[arg(long, default_value_t = 3600, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub download_deadline: u64,
    /// The largest file downloaded (K, M, G, T: powers of 1024); a larger one is refused.
    #[arg(long, default_value = "8G", value_name = "SIZE", value_parser = parse_size)]
    pub max_download_size: u64,
    /// A docker config.json with registry credentials (default: $DOCKER_CONFIG or ~/.docker).
    #[arg(long, value_name = "FILE")]
    pub docker_config: Option<PathBuf>,
    /// Files the catalog cannot pin (the CNI manifests and charts, marked userPinned: no public
    /// sha256 exists) are downloaded once, their sha256 recorded in the bundle and printed with
    /// the catalog entry that pins them next time. Without it such files are refused.
    #[arg(long)]
    pub accept_unpinned: bool,
    /// OS repositories (spec.system.osReleases): reuse a signed index (InRelease, repomd.xml)
    /// cached less than this many seconds ago instead of fetching it again (0: always fetch).
    /// It is verified again either way.
    #[arg(long, default_value_t = 86_400, value_name = "SECONDS")]
    pub os_index_max_age: u64,
    /// Sign the bundle with this minisign secret key (`kubexm-build keygen`): writes
    /// FILE.minisig over the content digest (and signs the split index with --split).
    #[arg(long, value_name = "KEY")]
    pub sign: Option<PathBuf>,
    /// Cut the bundle into parts of at most SIZE bytes (K, M, G, T: powers of 1024), with a
    /// FILE.parts.json index holding each part's sha256.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub split: Option<u64>,
    /// Pack only what this site inventory (`kubexm-install inventory`) does not list: a delta
    /// bundle the installer completes from what the site holds.
    #[arg(long, value_name = "INVENTORY")]
    pub have: Option<PathBuf>,
    /// Build one bundle for an upgrade path: also bundle every Kubernetes minor between VERSION
    /// (the version the cluster runs) and cluster.yaml's, each the catalog's newest patch with
    /// its own cluster.yaml, so that `kubexm-install upgrade --bundle` goes from VERSION to
    /// cluster.yaml's version with this bundle alone. Files and image blobs the versions share
    /// are stored once.
    #[arg(long, value_name = "VERSION", value_parser = parse_kube_version)]
    pub upgrade_from: Option<kubexm_manifests::version::KubeVersion>,
}

fn parse_kube_version(s: &str) -> Result<kubexm_manifests::version::KubeVersion, String> {
    s.parse().map_err(|e| format!("{e}"))
}

/// `4G`, `10M`, `512K`, `1T` (powers of 1024; `KiB`/`MB` spellings too) or a number of bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size such as 4G or 10M"))?;
    let shift = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches('B')
        .trim_end_matches('I')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("`{s}`: unknown unit (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("`{s}` is not a usable size"))
}

/// `verify` options.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The bundle to check, or the index of a split bundle (FILE.parts.json).
    #[arg(value_name = "FILE.tar.zst")]
    pub bundle: PathBuf,
    /// Check the bundle's signature (FILE.minisig) against this minisign public key
    /// (repeatable: any of them may have signed).
    #[arg(long = "trusted-key", value_name = "KEY.pub")]
    pub trusted_keys: Vec<PathBuf>,
}

/// `diff` options.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// OLD.tar.zst NEW.tar.zst, or with --installed NEW.tar.zst alone. A split bundle is named by
    /// its index (FILE.parts.json); a delta bundle stands for the bundle it rebuilds.
    #[arg(value_name = "BUNDLE", num_args = 1..=2, required = true)]
    pub bundles: Vec<PathBuf>,
    /// Compare NEW with what the site's record says the cluster runs: the bundle it was last
    /// installed, upgraded or changed with (kept unpacked in the work directory) and the
    /// cluster.yaml last applied. Run it on the control host.
    #[arg(long)]
    pub installed: bool,
    /// With --installed: the cluster whose record is read (default: the only one recorded).
    #[arg(long, value_name = "NAME", requires = "installed")]
    pub cluster: Option<String>,
    /// With --installed: kubexm-install's work directory.
    #[arg(
        long,
        value_name = "DIR",
        env = "KUBEXM_WORK_DIR",
        default_value = "/var/lib/kubexm"
    )]
    pub work_dir: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = DiffFormat::Text)]
    pub output: DiffFormat,
}

/// `diff` output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DiffFormat {
    /// For people.
    Text,
    /// Stable JSON (`kubexmDiff: 1`; fields are only ever added).
    Json,
}

/// Where the cluster description, catalog and zone come from.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// The cluster description.
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    pub file: PathBuf,
    /// Zone: `default` (upstream), `cn` (mirrors), or the zone defined by --zone-file.
    #[arg(long, env = "KMZONE", value_name = "ZONE")]
    pub zone: Option<String>,
    /// A zone file (file URL and image registry rewrites), e.g. a local mirror.
    #[arg(long, env = "KUBEXM_ZONE_FILE", value_name = "FILE")]
    pub zone_file: Option<PathBuf>,
    /// A catalog file merged over the built-in catalog (add versions, URLs, sha256).
    #[arg(long, env = "KUBEXM_CATALOG", value_name = "FILE")]
    pub catalog: Option<PathBuf>,
}

/// `resolve` options.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Inputs.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Cache for the OS repositories' signed indexes (default: ~/.cache/kubexm). Only used when
    /// the cluster lists spec.system.osReleases: their indexes are fetched and verified to list
    /// the packages, no package is downloaded.
    #[arg(long, value_name = "DIR", env = "KUBEXM_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Reuse a signed index cached less than this many seconds ago (0: always fetch).
    #[arg(long, default_value_t = 86_400, value_name = "SECONDS")]
    pub os_index_max_age: u64,
}

/// Output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    /// A readable table.
    Table,
    /// Stable JSON (see `formatVersion`).
    Json,
}

const RESOLVE_EXAMPLES: &str = "Examples:
  kubexm-build resolve -f cluster.yaml
  kubexm-build resolve -f cluster.yaml --zone cn -o json";

const VALIDATE_EXAMPLES: &str = "Examples:
  kubexm-build validate -f cluster.yaml
  kubexm-build validate -f cluster.yaml --catalog my-catalog.yaml --zone-file my-zone.yaml";

const BUNDLE_EXAMPLES: &str = "Examples:
  kubexm-build bundle -f cluster.yaml -o demo.tar.zst
  kubexm-build bundle -f cluster.yaml -o demo.tar.zst --sign kubexm.key --split 4G
  kubexm-build bundle -f cluster.yaml -o delta.tar.zst --have site-inventory.json";

const VERIFY_EXAMPLES: &str = "Examples:
  kubexm-build verify demo.tar.zst
  kubexm-build verify demo.tar.zst --trusted-key kubexm.pub
  kubexm-build verify demo.tar.zst.parts.json";

const DIFF_EXAMPLES: &str = "Examples:
  kubexm-build diff old.tar.zst new.tar.zst
  kubexm-build diff old.tar.zst new.tar.zst.parts.json -o json
  kubexm-build diff --installed new.tar.zst           # on the control host

Exit codes: 0 compared (whether or not anything changes), 2 usage, 4 a bundle cannot be read
(damaged, truncated, not a bundle), 1 other failures (no cluster record, …).";

const IMPORT_EXAMPLES: &str = "Examples:
  kubexm-build import kubekey -f config-sample.yaml -o cluster.yaml
  kubexm-build import kubekey -f config.yaml -i inventory.yaml -o cluster.yaml";

const KEYGEN_EXAMPLES: &str = "Examples:
  kubexm-build keygen -o kubexm      # kubexm.key (0600) and kubexm.pub";
