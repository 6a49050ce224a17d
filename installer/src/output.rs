//! How `kubexm-install` talks to the operator on standard error: the log format (`--log-format`,
//! `KUBEXM_LOG_FORMAT`), the verbosity (`-q`, `-v`) and the generated completions and man pages.
//! The run journal under `WORK_DIR/runs/` is JSON whatever is chosen here.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Context, Result};
use clap::{ArgAction, Args, CommandFactory, ValueEnum};

/// How log lines are written to standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Text on a terminal, JSON lines otherwise (log collectors, CI).
    Auto,
    /// Readable lines: level, message and fields.
    Text,
    /// One JSON object per line.
    Json,
}

/// The flags every verb takes.
#[derive(Debug, Args)]
pub(crate) struct OutputArgs {
    /// Log format on standard error (also KUBEXM_LOG_FORMAT). The run journal under
    /// WORK_DIR/runs/ is always JSON.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "KUBEXM_LOG_FORMAT",
        default_value_t = LogFormat::Auto,
        value_name = "FORMAT"
    )]
    pub(crate) log_format: LogFormat,
    /// Only warnings and errors, no progress bars.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: bool,
    /// More detail: -v debug, -vv trace (KUBEXM_LOG=FILTER overrides both).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub(crate) verbose: u8,
}

impl OutputArgs {
    /// The tracing filter these flags ask for.
    fn level(&self) -> &'static str {
        match (self.quiet, self.verbose) {
            (true, _) => "warn",
            (false, 0) => "info",
            (false, 1) => "debug",
            (false, _) => "trace",
        }
    }

    /// Whether log lines are JSON.
    fn json(&self) -> bool {
        match self.log_format {
            LogFormat::Json => true,
            LogFormat::Text => false,
            LogFormat::Auto => !std::io::stderr().is_terminal(),
        }
    }

    /// Installs the log subscriber; progress bars only on a terminal and without `-q`.
    pub(crate) fn init(&self) {
        let filter = tracing_subscriber::EnvFilter::try_from_env("KUBEXM_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(self.level()));
        let builder = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(filter);
        if self.json() {
            builder.json().init();
        } else {
            builder
                .with_target(false)
                .without_time()
                .with_ansi(std::io::stderr().is_terminal())
                .init();
        }
        kubexm_install::progress::set_enabled(!self.quiet && !self.json());
    }
}

/// Shells `completions` writes a script for.
pub(crate) use clap_complete::Shell;

/// Writes the completion script for `shell` to standard output.
pub(crate) fn completions(shell: Shell) -> Result<()> {
    let mut cmd = crate::cli::Cli::command();
    let name = cmd.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    std::io::Write::write_all(&mut std::io::stdout(), &script)
        .context("Failed to write the completion script")
}

/// Writes the man pages (the command and each subcommand) into `dir`, or the main page to
/// standard output.
pub(crate) fn man(dir: Option<&Path>) -> Result<()> {
    let cmd = crate::cli::Cli::command();
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .with_context(|| format!("Failed to create `{}`", d.display()))?;
            clap_mangen::generate_to(cmd, d)
                .with_context(|| format!("Failed to write the man pages into `{}`", d.display()))
        }
        None => clap_mangen::Man::new(cmd)
            .render(&mut std::io::stdout())
            .context("Failed to write the man page"),
    }
}
