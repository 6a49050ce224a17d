//! Day-2: the cluster's life after install: nodes joining and leaving ([`membership`]), etcd
//! members added and removed ([`etcd_member`]), Kubernetes upgraded ([`upgrade`]) and node
//! kernels upgraded ([`kernel`]). Component modules never import this group; the pipelines
//! compose it with them.

pub mod etcd_member;
pub mod kernel;
pub mod membership;
pub mod upgrade;
