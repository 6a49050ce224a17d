//! Integration tests of kubexm-install (one test binary).

mod delete;
mod etcd;
mod kubeadm;
mod lb;
mod network;
mod pipeline;
mod plan_cli;
mod runtime;
mod seed;
mod ssh;
mod unpack;
