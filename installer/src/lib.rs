//! KubeXM installer library: unpacking a bundle, seeding a registry, and the pipelines that
//! install and delete a cluster over SSH. `main.rs` only parses flags and maps results to exit
//! codes.
//!
//! Layout: [`context`] (what every module reads), [`modules`] (reusable modules per area, each
//! deciding which tasks run where), [`pipelines`] (ordered lists of modules: create, delete),
//! [`pipeline`] (the engine: steps, executor, state, journal, plan), [`run`] (connecting to the
//! nodes and running a pipeline), [`runner`] (local and SSH runners).
#![warn(missing_docs)]

pub mod context;
pub mod inventory;
pub mod modules;
pub mod pipeline;
pub mod pipelines;
pub mod pki;
pub mod run;
pub mod runner;
pub mod seed;
pub mod templates;
pub mod unpack;
