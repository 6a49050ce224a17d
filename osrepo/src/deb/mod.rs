//! Debian-family repositories: control files, versions, relationships, `Release` and `Packages`
//! indexes, the dependency closure and the bundle's own signed repository.

pub mod closure;
pub mod control;
pub mod index;
pub mod relation;
pub mod release;
pub mod repo;
pub mod version;
