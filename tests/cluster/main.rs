//! podns against a real Kubernetes control plane built from source
//! (`tests/cluster/up.sh`): kube-apiserver, kube-controller-manager,
//! kube-scheduler, etcd and kwok's fake kubelets on loopback. Opt-in:
//!
//! ```sh
//! C=$(mktemp -d); tests/cluster/up.sh $C
//! PODNS_CLUSTER=$C cargo test --test cluster -- --include-ignored
//! tests/cluster/down.sh $C
//! ```
//!
//! Every test that needs the cluster is `#[ignore = "needs PODNS_CLUSTER"]`,
//! so plain `cargo test` lists them as ignored; run with `--include-ignored`
//! without `PODNS_CLUSTER`, each fails with one line saying how to set it.
//! `.ci/run` brings a cluster up and runs them whenever Go is present.
//! Objects are made with the release's own kubectl, pod IPs by kwok, pods
//! of Jobs by the real Job controller, so everything podns decodes here was
//! written by the real API server.

// `&[x.clone()]` reads better than `std::slice::from_ref(&x)` in a list of
// expected answers.
#![allow(clippy::cloned_ref_to_slice_refs)]

mod daemonset;
mod faults;
mod forward_target;
mod node_setup;
mod rbac;
mod real_node;
mod records;
mod relay;
mod relay_auth;
mod reverse;
mod rollouts;
mod sim_vs_real;
mod slices;
mod support;
mod termination;
mod watch_encoding;
mod wires;
