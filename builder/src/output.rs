//! How `kubexm-build` talks to the operator on standard error: the log format
//! (`--log-format`, `KUBEXM_LOG_FORMAT`; text unless JSON is asked for, since a build's log is
//! read by people), the verbosity (`-q`, `-v`), and the generated completions and man pages.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Context, Result};
use clap::{ArgAction, Args, CommandFactory, ValueEnum};

/// How log lines are written to standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Readable lines (the default, on a terminal or not).
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The flags every verb takes.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Log format on standard error (also KUBEXM_LOG_FORMAT).
    #[arg(
        long,
        global = true,
        value_enum,
        env = "KUBEXM_LOG_FORMAT",
        default_value_t = LogFormat::Text,
        value_name = "FORMAT"
    )]
    pub log_format: LogFormat,
    /// Only warnings and errors, no progress bars.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail: -v debug, -vv trace (KUBEXM_LOG=FILTER overrides both).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
}

impl OutputArgs {
    /// Installs the log subscriber.
    pub fn init(&self) {
        let level = match (self.quiet, self.verbose) {
            (true, _) => "warn",
            (false, 0) => "info",
            (false, 1) => "debug",
            (false, _) => "trace",
        };
        let filter = tracing_subscriber::EnvFilter::try_from_env("KUBEXM_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
        let builder = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(filter)
            .with_target(false);
        match self.log_format {
            LogFormat::Json => builder.json().init(),
            LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        }
    }

    /// Whether progress bars may be drawn (they still need a terminal).
    pub fn progress(&self) -> bool {
        !self.quiet && self.log_format == LogFormat::Text
    }
}

/// Writes the completion script for `shell` to standard output.
pub fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut cmd = crate::cli::Cli::command();
    let name = cmd.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    std::io::Write::write_all(&mut std::io::stdout(), &script)
        .context("Failed to write the completion script")
}

/// Writes the man pages (the command and each subcommand) into `dir`, or the main page to
/// standard output.
pub fn man(dir: Option<&Path>) -> Result<()> {
    let cmd = crate::cli::Cli::command();
    match dir {
        Some(d) => {
            fs_err::create_dir_all(d)?;
            clap_mangen::generate_to(cmd, d)
                .with_context(|| format!("Failed to write the man pages into `{}`", d.display()))
        }
        None => clap_mangen::Man::new(cmd)
            .render(&mut std::io::stdout())
            .context("Failed to write the man page"),
    }
}
