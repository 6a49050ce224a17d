//! Integration tests of kubexm-install (one test binary).

mod etcd;
mod pipeline;
mod plan_cli;
mod seed;
mod unpack;
