//! RPM-family repositories: `repomd.xml` and `primary.xml`, rpm's version order, the dependency
//! closure and the bundle's own signed `repodata/`.

pub mod closure;
pub mod metadata;
pub mod repo;
pub mod version;
mod xml;
