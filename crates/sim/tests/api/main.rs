//! Tests of `podns sim` over real HTTP on loopback: kube-rs watchers,
//! kubectl, and the raw protocol (lists, watches, Status errors), one
//! module per topic.

mod endpoint_slices;
mod jobs;
mod kube_client;
mod kubectl;
mod protocol;
mod service_ips;
mod support;
mod tokens;
mod workload;
