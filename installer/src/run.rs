//! Running the install pipeline for real: one SSH connection per node (opened in parallel, all
//! failures reported together), the control host as `localhost`, the journal and state file in
//! the work directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::context::InstallContext;
use crate::inventory::{host_password, InventoryError};
use crate::pipeline::executor::{ExecOptions, Executor, PipelineError, RunReport};
use crate::pipeline::journal::Journal;
use crate::pipeline::{Node, Pipeline};
use crate::runner::local::LocalRunner;
use crate::runner::ssh::{SshOptions, SshRunner};
use crate::runner::{RunError, Runner};

pub use crate::inventory::{control_node, CONTROL_HOST};

/// How to connect and run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Work directory (journal, state, PKI).
    pub work_dir: PathBuf,
    /// Directory relative `privateKeyPath`/`passwordFile` entries are resolved against.
    pub base_dir: PathBuf,
    /// OpenSSH known_hosts file.
    pub known_hosts: PathBuf,
    /// Record unknown host keys (changed keys are always refused).
    pub accept_new_host_keys: bool,
    /// Skip tasks the state file records as done with the same inputs.
    pub resume: bool,
    /// Most nodes working at once.
    pub concurrency: usize,
    /// SSH connect timeout.
    pub connect_timeout: Duration,
}

/// Why an install could not run or finish.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// Credentials could not be read.
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    /// One or more nodes could not be reached (every one is listed).
    #[error("cannot connect to {} node(s):{}", .0.len(), .0.iter().map(|e| format!("\n  {}", crate::error_chain::Chain(e))).collect::<String>())]
    Connect(Vec<RunError>),
    /// The journal could not be created.
    #[error("cannot write the run journal under {path}")]
    Journal {
        /// Work directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The pipeline failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

fn expand_home(path: &str, base: &Path) -> PathBuf {
    if let Some(rest) = path.strip_prefix("~/") {
        if let Some(home) = dirs::home_dir() {
            return home.join(rest);
        }
    }
    base.join(path)
}

/// Opens one SSH connection per node, in parallel; every failure is reported.
pub async fn connect_all(
    ctx: &InstallContext,
    opts: &RunOptions,
) -> Result<Vec<(Node, Arc<dyn Runner>)>, InstallError> {
    let (mut runners, failed) = connect_nodes(ctx, &ctx.all(), opts).await?;
    if !failed.is_empty() {
        return Err(InstallError::Connect(
            failed.into_iter().map(|(_, e)| e).collect(),
        ));
    }
    runners.push((control_node(), Arc::new(LocalRunner::new(CONTROL_HOST))));
    Ok(runners)
}

/// Opens one SSH connection to each of the nodes `names` of `ctx`, in parallel: the runners of
/// the nodes reached, and apart each node that could not be reached with why (a day-2 command
/// decides whether that matters). The control host is not included.
pub async fn connect_nodes(
    ctx: &InstallContext,
    names: &[String],
    opts: &RunOptions,
) -> Result<ConnectOutcome, InstallError> {
    let mut attempts = Vec::new();
    for node in ctx.nodes.iter().filter(|n| names.contains(&n.name)) {
        let Some(host) = ctx
            .cluster
            .file
            .spec
            .hosts
            .iter()
            .find(|h| h.name == node.name)
        else {
            continue;
        };
        let mut o = SshOptions::new(&node.name, &host.address, &host.user, &opts.known_hosts);
        o.port = host.port;
        o.password = host_password(host, &opts.base_dir)?;
        o.private_key = host
            .private_key_path
            .as_deref()
            .map(|p| expand_home(p, &opts.base_dir));
        o.accept_new_host_keys = opts.accept_new_host_keys;
        o.connect_timeout = opts.connect_timeout;
        attempts.push((node.clone(), o));
    }
    let results = join_all(
        attempts
            .into_iter()
            .map(|(node, o)| async move { (node, SshRunner::connect(o).await) }),
    )
    .await;
    let mut runners: Vec<(Node, Arc<dyn Runner>)> = Vec::new();
    let mut failed = Vec::new();
    for (node, r) in results {
        match r {
            Ok(r) => runners.push((node, Arc::new(r))),
            Err(e) => failed.push((node.name, e)),
        }
    }
    Ok((runners, failed))
}

/// The nodes reached (with their runners) and those that were not (with why).
pub type ConnectOutcome = (Vec<(Node, Arc<dyn Runner>)>, Vec<(String, RunError)>);

/// Runs `pipeline` over `runners`, journaling under the work directory.
pub async fn run_pipeline(
    ctx: &InstallContext,
    pipeline: &Pipeline,
    runners: Vec<(Node, Arc<dyn Runner>)>,
    opts: &RunOptions,
) -> Result<(RunReport, Arc<Journal>), InstallError> {
    let secrets = crate::inventory::secrets(&ctx.cluster, &opts.base_dir);
    let journal = Arc::new(
        Journal::create(&opts.work_dir, &pipeline.name, secrets).map_err(|source| {
            InstallError::Journal {
                path: opts.work_dir.clone(),
                source,
            }
        })?,
    );
    let exec = Executor::new(
        runners,
        journal.clone(),
        ExecOptions {
            concurrency: opts.concurrency.max(1),
            resume: opts.resume,
            state_path: opts.work_dir.join("state").join(format!(
                "{}-{}.json",
                ctx.cluster.cluster_name(),
                pipeline.name
            )),
        },
    );
    let report = exec.run(pipeline).await?;
    Ok((report, journal))
}
