//! Benchmark entry point for `tests/bench/ssh-bench.sh`: connects one `SshRunner`, runs N
//! trivial execs sequentially and/or uploads one file, and prints timings as
//! `key=value` lines (`connect_s`, `execs`, `execs_s`, `upload_bytes`, `upload_s`, `cat_s`).
//!
//! ```sh
//! ssh_bench --host 127.0.0.1 --port 2222 --user root --key id_ed25519 \
//!     --known-hosts known_hosts --execs 200 --upload big.bin --dest /tmp/big.bin
//! ```

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Parser;
use kubexm_install::runner::ssh::{SshOptions, SshRunner};
use kubexm_install::runner::{Exec, Runner, Upload, UploadOutcome, UploadSource};
use sha2::Digest as _;
use tokio::io::AsyncReadExt as _;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 22)]
    port: u16,
    #[arg(long, default_value = "root")]
    user: String,
    #[arg(long)]
    key: PathBuf,
    #[arg(long)]
    known_hosts: PathBuf,
    /// Trivial execs (`true`) run one after another.
    #[arg(long, default_value_t = 0)]
    execs: usize,
    /// File to upload.
    #[arg(long)]
    upload: Option<PathBuf>,
    /// Also send the file as the stdin of `cat > DEST.cat` (one exec, bytes held in memory):
    /// the transport alone, comparable with `ssh HOST 'cat > DEST' < FILE`.
    #[arg(long)]
    cat_upload: bool,
    /// Destination on the node.
    #[arg(long, default_value = "/tmp/kubexm-ssh-bench.bin")]
    dest: String,
}

async fn sha256_file(path: &PathBuf) -> anyhow::Result<String> {
    let mut file = tokio::fs::File::open(path)
        .await
        .with_context(|| format!("open {}", path.display()))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut opts = SshOptions::new("bench", &args.host, &args.user, &args.known_hosts);
    opts.port = args.port;
    opts.private_key = Some(args.key.clone());

    let started = Instant::now();
    let runner = SshRunner::connect(opts).await?;
    println!("connect_s={:.4}", started.elapsed().as_secs_f64());

    if args.execs > 0 {
        let exec = Exec {
            script: "true".into(),
            sudo: false,
            stdin: None,
            timeout: std::time::Duration::from_secs(60),
        };
        let started = Instant::now();
        for _ in 0..args.execs {
            let out = runner.exec(&exec).await?;
            if !out.success() {
                bail!("`true` failed: {out:?}");
            }
        }
        println!("execs={}", args.execs);
        println!("execs_s={:.4}", started.elapsed().as_secs_f64());
    }

    if let Some(path) = &args.upload {
        // The caller knows the sha256 (bundle records); hashing is not part of the upload.
        let sha256 = sha256_file(path).await?;
        let started = Instant::now();
        let outcome = runner
            .upload(&Upload {
                source: UploadSource::File(path.clone()),
                sha256,
                dest: args.dest.clone(),
                mode: 0o644,
                sudo: false,
            })
            .await?;
        let UploadOutcome::Uploaded(bytes) = outcome else {
            bail!("upload skipped: {} already has the content", args.dest);
        };
        println!("upload_bytes={bytes}");
        println!("upload_s={:.4}", started.elapsed().as_secs_f64());
    }
    if let (Some(path), true) = (&args.upload, args.cat_upload) {
        let bytes = tokio::fs::read(path).await?;
        let len = bytes.len();
        let exec = Exec {
            script: format!("cat > {}.cat", args.dest),
            sudo: false,
            stdin: Some(bytes),
            timeout: std::time::Duration::from_secs(600),
        };
        let started = Instant::now();
        let out = runner.exec(&exec).await?;
        if !out.success() {
            bail!("cat failed: {out:?}");
        }
        println!("cat_bytes={len}");
        println!("cat_s={:.4}", started.elapsed().as_secs_f64());
    }
    runner.close().await;
    Ok(())
}
