//! KubeXM installer library: unpacking a bundle, seeding a registry, and (later) the install
//! pipeline. `main.rs` only parses flags and maps results to exit codes.
#![warn(missing_docs)]

pub mod install;
pub mod inventory;
pub mod pipeline;
pub mod pki;
pub mod private_dir;
pub mod runner;
pub mod seed;
pub mod templates;
pub mod unpack;
