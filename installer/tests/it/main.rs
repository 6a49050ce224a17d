//! Integration tests of kubexm-install (one test binary).

mod seed;
mod ssh;
mod unpack;
