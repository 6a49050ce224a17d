//! Day-2: the scheduled backup ([`timer`]), etcd restored on the same members ([`restore`]) and a
//! fresh cluster restored from a backup ([`restore_fresh`]). Component modules never import this
//! group; the pipelines compose it with them.

pub mod restore;
pub mod restore_fresh;
pub mod timer;
