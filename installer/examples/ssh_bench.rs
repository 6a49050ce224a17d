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
    /// Run the benchmark task (see [`task`]) through the pipeline engine on one node per port
    /// (each port its own sshd, standing for its own host), e.g. `--task-ports 2201,2202,2203`.
    #[arg(long, value_delimiter = ',')]
    task_ports: Vec<u16>,
    /// Directory on the nodes the task writes under (`DIR/<node>/…`, removed before each run).
    #[arg(long, default_value = "/tmp/kubexm-task-bench")]
    task_dir: String,
    /// How many times the task runs (fresh each time); every run's time is printed.
    #[arg(long, default_value_t = 1)]
    task_runs: usize,
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
    if !args.task_ports.is_empty() {
        return task::run(&args).await;
    }
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

/// "The same task on N hosts": one pipeline task of specific steps shaped like node preparation
/// (a directory, an 8 MiB artifact upload, a config file, a managed block, ten guarded
/// commands; about 40 remote execs per host), run fresh by the engine on every node at once.
mod task {
    use std::sync::Arc;
    use std::time::Instant;

    use anyhow::{bail, Context as _};
    use kubexm_install::pipeline::executor::{ExecOptions, Executor};
    use kubexm_install::pipeline::journal::Journal;
    use kubexm_install::pipeline::ops::{CreateDir, ManagedBlock, Op, RunCommand, UploadFile};
    use kubexm_install::pipeline::{Facts, Module, Node, Pipeline, Step, StepError, Task};
    use kubexm_install::runner::ssh::{SshOptions, SshRunner};
    use kubexm_install::runner::{Exec, Runner};

    use super::Args;

    struct Prepare {
        dir: String,
        payload: Arc<Vec<u8>>,
    }

    impl Prepare {
        fn node_dir(&self, node: &Node) -> String {
            format!("{}/{}", self.dir, node.name)
        }
    }

    struct Workdir(Arc<Prepare>);
    struct Artifact(Arc<Prepare>);
    struct Config(Arc<Prepare>);
    struct Commands(Arc<Prepare>);

    impl Step for Workdir {
        fn name(&self) -> &str {
            "workdir"
        }
        fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
            Ok(vec![Op::Mkdir(CreateDir {
                path: self.0.node_dir(node),
                mode: 0o755,
            })])
        }
    }

    impl Step for Artifact {
        fn name(&self) -> &str {
            "artifact"
        }
        fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
            let dest = format!("{}/artifact.bin", self.0.node_dir(node));
            Ok(vec![Op::Upload(UploadFile::bytes(
                self.0.payload.to_vec(),
                dest,
                0o644,
            ))])
        }
    }

    impl Step for Config {
        fn name(&self) -> &str {
            "config"
        }
        fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
            let dir = self.0.node_dir(node);
            let conf = format!("node = {}\naddress = {}\n", node.name, node.address);
            Ok(vec![
                Op::Upload(UploadFile::bytes(
                    conf.into_bytes(),
                    format!("{dir}/node.conf"),
                    0o644,
                )),
                Op::Block(ManagedBlock::new(
                    format!("{dir}/hosts"),
                    vec![format!("{} {}", node.address, node.name)],
                )),
            ])
        }
    }

    impl Step for Commands {
        fn name(&self) -> &str {
            "commands"
        }
        fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
            let dir = self.0.node_dir(node);
            Ok((0..10)
                .map(|i| {
                    let marker = format!("{dir}/done-{i}");
                    Op::Run(
                        RunCommand::new(kubexm_install::script!(
                            "echo {i} > {marker}",
                            i = i,
                            marker = marker
                        ))
                        .unless(kubexm_install::script!("test -s {marker}", marker = marker))
                        .undo(kubexm_install::script!("rm -f {marker}", marker = marker)),
                    )
                })
                .collect())
        }
    }

    struct BenchModule(Arc<Prepare>, Vec<String>);

    impl Module for BenchModule {
        fn name(&self) -> &str {
            "bench"
        }
        fn tasks(&self) -> Result<Vec<Task>, StepError> {
            Ok(vec![Task::new("prepare", self.1.clone())
                .step(Workdir(self.0.clone()))
                .step(Artifact(self.0.clone()))
                .step(Config(self.0.clone()))
                .step(Commands(self.0.clone()))])
        }
    }

    pub(super) async fn run(args: &Args) -> anyhow::Result<()> {
        let mut nodes = Vec::new();
        for (i, port) in args.task_ports.iter().enumerate() {
            let name = format!("host{}", i + 1);
            let mut opts = SshOptions::new(&name, &args.host, &args.user, &args.known_hosts);
            opts.port = *port;
            opts.private_key = Some(args.key.clone());
            let runner: Arc<dyn Runner> = Arc::new(
                SshRunner::connect(opts)
                    .await
                    .with_context(|| format!("connect to port {port}"))?,
            );
            let node = Node {
                name: name.clone(),
                address: format!("{}:{port}", args.host),
                internal_address: args.host.clone(),
                roles: vec![kubexm_manifests::resolve::Role::Worker],
                arch: "amd64".into(),
            };
            nodes.push((node, runner));
        }
        let payload: Vec<u8> = (0..8u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let prepare = Arc::new(Prepare {
            dir: args.task_dir.clone(),
            payload: Arc::new(payload),
        });
        let names: Vec<String> = nodes.iter().map(|(n, _)| n.name.clone()).collect();
        let work = tempfile::tempdir()?;
        for run in 0..args.task_runs {
            for (node, runner) in &nodes {
                let out = runner
                    .exec(&Exec {
                        script: format!("rm -rf {}/{}", args.task_dir, node.name),
                        sudo: true,
                        stdin: None,
                        timeout: std::time::Duration::from_secs(60),
                    })
                    .await?;
                if !out.success() {
                    bail!("cleaning {} failed: {out:?}", node.name);
                }
            }
            let journal = Arc::new(Journal::create(work.path(), "bench", Vec::new())?);
            let exec = Executor::new(
                nodes.clone(),
                journal,
                ExecOptions {
                    concurrency: 16,
                    resume: false,
                    state_path: work.path().join(format!("state-{run}.json")),
                },
            );
            let pipeline = Pipeline {
                name: "bench".into(),
                modules: vec![Box::new(BenchModule(prepare.clone(), names.clone()))],
            };
            let started = Instant::now();
            let report = exec.run(&pipeline).await?;
            let secs = started.elapsed().as_secs_f64();
            if report.steps_changed == 0 {
                bail!("the task changed nothing: the run did not do the work");
            }
            println!("task_hosts={}", nodes.len());
            println!("task_steps_changed={}", report.steps_changed);
            println!("task_s={secs:.4}");
        }
        Ok(())
    }
}
