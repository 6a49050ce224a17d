//! Integration tests of kubexm-install (one test binary).

mod attacks;
mod certs;
mod cli;
mod day2;
mod delete;
mod etcd;
mod guide;
mod harbor;
mod intake;
mod intake_cli;
mod kubeadm;
mod kubexm;
mod lb;
mod network;
mod osrepo;
mod pipeline;
mod plan_cli;
mod runtime;
mod scope;
mod scripts;
mod seed;
mod ssh;
mod terminal;
mod unpack;
mod versions;
