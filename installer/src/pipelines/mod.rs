//! Pipelines: each is only an ordered list of modules from [`crate::modules`], built from an
//! [`InstallContext`](crate::context::InstallContext). A pipeline decides nothing itself: every
//! module skips itself (or some of its tasks) from the cluster description.
//!
//! Adding a pipeline (e.g. `add_node`): a new file here with one `pub fn …_pipeline(ctx) ->
//! Pipeline` listing existing modules in order, a `commands/<verb>.rs` in the binary that builds
//! the context, plans it (`--dry-run`) and runs it with [`crate::run::run_pipeline`]. The
//! pipeline's `name` names its state file (`WORK/state/<cluster>-<name>.json`) and journal.
//!
//! ## Scope: the nodes a module applies to
//!
//! Create and delete run every module on every node it concerns ([`Scope::All`], the default:
//! a module used as is). A day-2 pipeline reuses the same modules for some nodes only by
//! wrapping them in [`Scoped`]: each task keeps the hosts in scope (the control host always
//! stays: its tasks make what the nodes need) and a task left without hosts is dropped. Build the
//! scope with [`InstallContext::scope`], which refuses names that are not in cluster.yaml:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use kubexm_install::context::{InstallContext, ScopeExt};
//! # use kubexm_install::modules::{os, preflight, runtime};
//! # use kubexm_install::pipeline::Pipeline;
//! # fn add_node(ctx: &Arc<InstallContext>) -> Result<Pipeline, Box<dyn std::error::Error>> {
//! let new = ctx.scope(&["node4"])?;
//! Ok(Pipeline {
//!     name: "add-node".to_string(),
//!     modules: vec![
//!         Box::new(preflight::PreflightModule(ctx.clone()).scoped(new.clone())),
//!         Box::new(os::NodePrepModule(ctx.clone()).scoped(new.clone())),
//!         Box::new(runtime::RuntimeModule(ctx.clone()).scoped(new)),
//!     ],
//! })
//! # }
//! ```
//!
//! [`scoped`] restricts every module of a pipeline at once. A scope filters hosts only: what a
//! step writes (e.g. the managed /etc/hosts block listing every node) still comes from the whole
//! cluster.
//!
//! [`Scope::All`]: crate::context::Scope::All
//! [`Scoped`]: crate::context::Scoped
//! [`scoped`]: crate::context::scoped
//! [`InstallContext::scope`]: crate::context::InstallContext::scope

pub mod add_node;
pub mod apply;
pub mod create;
pub mod delete;
pub mod delete_node;
pub mod etcd_member;
pub mod kernel_upgrade;
pub mod kubeadm;
pub mod phase;
pub mod renew;
pub mod restore;
pub mod rotate;
pub mod upgrade;

pub use add_node::add_node_pipeline;
pub use create::install_pipeline;
pub use delete::delete_pipeline;
pub use delete_node::delete_node_pipeline;
pub use etcd_member::{add_member_pipeline, remove_member_pipeline};
pub use kernel_upgrade::kernel_upgrade_pipeline;
pub use restore::{restore_fresh_pipeline, restore_pipeline};
