//! Integration tests of kubexm-install (one test binary).

mod pipeline;
mod seed;
mod unpack;
