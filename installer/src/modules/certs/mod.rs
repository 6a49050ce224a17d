//! Day-2: certificates renewed ([`renew`], [`renew_kubelet`], [`renew_registry`]) and CAs rotated
//! ([`rotate`], [`rotate_kubernetes`], [`rotate_kubeadm_ca`]). Component modules never import
//! this group; the pipelines compose it with them.

pub mod renew;
pub mod renew_kubelet;
pub mod renew_registry;
pub mod rotate;
pub mod rotate_kubeadm_ca;
pub mod rotate_kubernetes;
