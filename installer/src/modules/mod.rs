//! Reusable modules, one area per file or folder: each decides which tasks run on which nodes
//! (skip conditions); its tasks assemble specific steps; specific steps call the generic ones in
//! [`crate::pipeline::ops`]. Pipelines ([`crate::pipelines`]) only compose these modules.
//!
//! Imports flow one way:
//! * [`k8s`] (shared Kubernetes constants and helpers: `ADMIN_CONF`, `kubectl()`, `STATE_DIR`,
//!   the API server's port, `image_named`, …) and [`task_id`] are leaves: they import no other
//!   module.
//! * Component modules (what a cluster is made of: os, runtime, etcd, kubeadm, kubexm, network,
//!   dns, registry, loadbalancer, addons, …) use the leaves and each other, never a day-2
//!   group. Shared helpers among them: [`apply`] (manifests and Helm releases applied with the
//!   admin kubeconfig), [`images`] (where nodes pull an image from) and [`delete`] (the delete
//!   preflight and the keep/restore helpers every removal uses).
//! * Day-2 groups compose components: [`certs`] (renew, rotate), [`backup`] (the backup timer,
//!   restore) and [`lifecycle`] (membership, etcd members, upgrade, kernel).
//!
//! The integration test `imports` checks this (and that no import circle spans more than two
//! files).

pub mod addons;
pub mod apply;
pub mod backup;
pub mod certs;
pub mod delete;
pub mod dns;
pub mod etcd;
pub mod finalize;
pub mod images;
pub mod internal_lb;
pub mod k8s;
pub mod kubeadm;
pub mod kubexm;
pub mod lifecycle;
pub mod loadbalancer;
pub mod network;
pub mod os;
pub mod osrepo;
pub mod plugins;
pub mod preflight;
pub mod ready;
pub mod registry;
mod remote_path;
pub mod runtime;
pub mod scripts;
pub mod security;
pub mod storage;
pub mod task_id;
