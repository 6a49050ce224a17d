//! KubeXM installer library: unpacking a bundle, seeding a registry, and the pipelines that
//! install and delete a cluster over SSH. `main.rs` only parses flags and maps results to exit
//! codes.
//!
//! Layout: [`context`] (what every module reads), [`modules`] (reusable modules per area, each
//! deciding which tasks run where), [`pipelines`] (ordered lists of modules: create, delete),
//! [`pipeline`] (the engine: steps, executor, state, journal, plan), [`run`] (connecting to the
//! nodes and running a pipeline), [`runner`] (local and SSH runners), [`intake`] (a bundle on
//! its way in: split parts, signature, delta completion, the site inventory).
//!
//! Day-2: [`record`] (the installed cluster kept in the work directory), [`change`] (what an
//! edited cluster.yaml changes), [`facts`] (what the running cluster says, gathered once, and
//! the checks made on it) and the `add_node`, `delete_node` and `etcd_member` pipelines.
#![warn(missing_docs)]

pub mod apply_change;
pub mod backup;
pub mod certs;
pub mod change;
pub mod context;
pub mod coverage;
pub mod error_chain;
pub mod facts;
pub mod intake;
pub mod inventory;
pub mod modules;
pub mod pipeline;
pub mod pipelines;
pub mod pki;
pub mod private_dir;
pub mod progress;
pub mod record;
pub mod rotation;
pub mod run;
pub mod runner;
pub mod seed;
pub mod templates;
pub mod unpack;
pub mod verify;
