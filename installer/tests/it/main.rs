//! Integration tests of kubexm-install (one test binary).

mod attacks;
mod certs;
mod cli;
mod day2;
mod delete;
mod dns;
mod etcd;
mod guide;
mod harbor;
mod intake;
mod intake_cli;
mod kubeadm;
mod kubexm;
mod lb;
mod network;
mod pipeline;
mod plan_cli;
mod preflight;
mod runtime;
mod scope;
mod scripts;
mod seed;
mod ssh;
mod terminal;
mod unpack;
mod versions;
