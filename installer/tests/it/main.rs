//! Integration tests of kubexm-install (one test binary).

mod cli;
mod delete;
mod etcd;
mod harbor;
mod kubeadm;
mod kubexm;
mod lb;
mod network;
mod osrepo;
mod pipeline;
mod plan_cli;
mod runtime;
mod scope;
mod seed;
mod ssh;
mod unpack;
