//! Pipelines: each is only an ordered list of modules from [`crate::modules`], built from an
//! [`InstallContext`](crate::context::InstallContext). A pipeline decides nothing itself: every
//! module skips itself (or some of its tasks) from the cluster description.
//!
//! Adding a pipeline (e.g. `add_node`): a new file here with one `pub fn …_pipeline(ctx) ->
//! Pipeline` listing existing modules in order, a `commands/<verb>.rs` in the binary that builds
//! the context, plans it (`--dry-run`) and runs it with [`crate::run::run_pipeline`]. The
//! pipeline's `name` names its state file (`WORK/state/<cluster>-<name>.json`) and journal.

pub mod create;
pub mod delete;

pub use create::install_pipeline;
pub use delete::delete_pipeline;
