//! Kubernetes Protobuf, spoken by the simulator: stored JSON → the typed
//! `k8s-openapi` object (serde) → the `k8s-pb` message, generated from
//! Kubernetes' own `generated.proto` files, → bytes with prost. No field
//! number is written by hand here, so podns' slim decoder (which does know
//! field numbers) is checked against an encoder it shares nothing with.
//!
//! `k8s-pb` has no serde, so the typed object is carried over field by
//! field, by name ([`Pb`]). The fields carried are every field the
//! simulator writes (realistic and lean pods, Services, Jobs, Namespaces)
//! and every field DNS reads; a field outside both (a probe, an init
//! container) is dropped from the Protobuf form, as the note on each type
//! says. The envelope, list and watch framing follow kubernetes.io "API
//! concepts: Protobuf encoding" and apimachinery's protobuf serializer.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1 as obatch;
use k8s_openapi::api::core::v1 as ocore;
use k8s_openapi::api::discovery::v1 as odisc;
use k8s_openapi::api::networking::v1 as onet;
use k8s_openapi::api::rbac::v1 as orbac;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as OQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as ometa;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString as OIntOrString;
use k8s_pb::api::batch::v1 as pbatch;
use k8s_pb::api::core::v1 as pcore;
use k8s_pb::api::discovery::v1 as pdisc;
use k8s_pb::api::networking::v1 as pnet;
use k8s_pb::api::rbac::v1 as prbac;
use k8s_pb::apimachinery::pkg::api::resource::Quantity as PQuantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pmeta;
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString as PIntOrString;
use prost::Message;

use crate::kind::Kind;

pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
pub const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
const MAGIC: &[u8; 4] = b"k8s\0";

/// A typed value carried into its generated Protobuf counterpart.
pub trait Pb<T> {
    fn pb(&self) -> T;
}

macro_rules! same {
    ($($t:ty),*) => {$(
        impl Pb<$t> for $t { fn pb(&self) -> $t { self.clone() } }
        impl Pb<Option<$t>> for $t { fn pb(&self) -> Option<$t> { Some(self.clone()) } }
    )*};
}
same!(String, bool, i32, i64);

impl<A: Pb<B>, B> Pb<Option<B>> for Option<A> {
    fn pb(&self) -> Option<B> {
        self.as_ref().map(Pb::pb)
    }
}
impl<A: Pb<B>, B> Pb<Vec<B>> for Vec<A> {
    fn pb(&self) -> Vec<B> {
        self.iter().map(Pb::pb).collect()
    }
}
impl<A: Pb<B>, B> Pb<Vec<B>> for Option<Vec<A>> {
    fn pb(&self) -> Vec<B> {
        self.iter().flatten().map(Pb::pb).collect()
    }
}
impl<A: Pb<B>, B> Pb<BTreeMap<String, B>> for Option<BTreeMap<String, A>> {
    fn pb(&self) -> BTreeMap<String, B> {
        self.iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.pb()))
            .collect()
    }
}
impl<A: Pb<B>, B> Pb<BTreeMap<String, B>> for BTreeMap<String, A> {
    fn pb(&self) -> BTreeMap<String, B> {
        self.iter().map(|(k, v)| (k.clone(), v.pb())).collect()
    }
}

/// `typed => generated { field, … }`: each listed field is carried by
/// name (`a => b` when the two crates spell it differently).
macro_rules! message {
    ($o:ty => $p:ty { $($f:ident $(=> $g:ident)?),* $(,)? }) => {
        impl Pb<$p> for $o {
            fn pb(&self) -> $p {
                #[allow(unused_mut)]
                let mut out = <$p>::default();
                $( message!(@set out, self, $f $(=> $g)?); )*
                out
            }
        }
        impl Pb<Option<$p>> for $o {
            fn pb(&self) -> Option<$p> {
                Some(self.pb())
            }
        }
    };
    (@set $out:ident, $s:ident, $f:ident) => { $out.$f = $s.$f.pb(); };
    (@set $out:ident, $s:ident, $f:ident => $g:ident) => { $out.$g = $s.$f.pb(); };
}

impl Pb<pmeta::Time> for ometa::Time {
    fn pb(&self) -> pmeta::Time {
        pmeta::Time {
            seconds: Some(self.0.as_second()),
            nanos: Some(self.0.subsec_nanosecond()),
        }
    }
}
impl Pb<Option<pmeta::Time>> for ometa::Time {
    fn pb(&self) -> Option<pmeta::Time> {
        Some(self.pb())
    }
}
impl Pb<pmeta::FieldsV1> for ometa::FieldsV1 {
    fn pb(&self) -> pmeta::FieldsV1 {
        // FieldsV1 is raw JSON on both wires.
        pmeta::FieldsV1 {
            raw: serde_json::to_vec(&self.0).ok(),
        }
    }
}
impl Pb<Option<pmeta::FieldsV1>> for ometa::FieldsV1 {
    fn pb(&self) -> Option<pmeta::FieldsV1> {
        Some(self.pb())
    }
}
impl Pb<PQuantity> for OQuantity {
    fn pb(&self) -> PQuantity {
        PQuantity {
            string: Some(self.0.clone()),
        }
    }
}
impl Pb<Option<PIntOrString>> for OIntOrString {
    fn pb(&self) -> Option<PIntOrString> {
        Some(self.pb())
    }
}
impl Pb<PIntOrString> for OIntOrString {
    fn pb(&self) -> PIntOrString {
        match self {
            OIntOrString::Int(i) => PIntOrString {
                r#type: Some(0),
                int_val: Some(*i),
                str_val: None,
            },
            OIntOrString::String(s) => PIntOrString {
                r#type: Some(1),
                int_val: None,
                str_val: Some(s.clone()),
            },
        }
    }
}
/// `name` of a reference, embedded as a `LocalObjectReference` in Protobuf.
impl Pb<pcore::LocalObjectReference> for String {
    fn pb(&self) -> pcore::LocalObjectReference {
        pcore::LocalObjectReference {
            name: Some(self.clone()),
        }
    }
}
impl Pb<Option<pcore::LocalObjectReference>> for String {
    fn pb(&self) -> Option<pcore::LocalObjectReference> {
        Some(self.pb())
    }
}
impl Pb<pcore::Volume> for ocore::Volume {
    fn pb(&self) -> pcore::Volume {
        // The source is an embedded `VolumeSource` in Protobuf.
        pcore::Volume {
            name: self.name.pb(),
            volume_source: Some(pcore::VolumeSource {
                empty_dir: self.empty_dir.pb(),
                persistent_volume_claim: self.persistent_volume_claim.pb(),
                config_map: self.config_map.pb(),
                secret: self.secret.pb(),
                projected: self.projected.pb(),
                downward_api: self.downward_api.pb(),
                host_path: self.host_path.pb(),
                ..Default::default()
            }),
        }
    }
}

message!(ometa::ObjectMeta => pmeta::ObjectMeta {
    name, generate_name, namespace, uid, resource_version, generation,
    creation_timestamp, deletion_timestamp, deletion_grace_period_seconds,
    labels, annotations, owner_references, finalizers, managed_fields,
});
message!(ometa::OwnerReference => pmeta::OwnerReference {
    api_version, kind, name, uid, controller, block_owner_deletion,
});
message!(ometa::ManagedFieldsEntry => pmeta::ManagedFieldsEntry {
    manager, operation, api_version, time, fields_type, fields_v1, subresource,
});
message!(ometa::LabelSelector => pmeta::LabelSelector { match_labels, match_expressions });
message!(ometa::LabelSelectorRequirement => pmeta::LabelSelectorRequirement { key, operator, values });

message!(ocore::Pod => pcore::Pod { metadata, spec, status });
impl Pb<pcore::Probe> for ocore::Probe {
    fn pb(&self) -> pcore::Probe {
        // The action is an embedded `ProbeHandler` in Protobuf.
        pcore::Probe {
            handler: Some(pcore::ProbeHandler {
                exec: self.exec.pb(),
                http_get: self.http_get.pb(),
                tcp_socket: self.tcp_socket.pb(),
                grpc: self.grpc.pb(),
            }),
            initial_delay_seconds: self.initial_delay_seconds.pb(),
            timeout_seconds: self.timeout_seconds.pb(),
            period_seconds: self.period_seconds.pb(),
            success_threshold: self.success_threshold.pb(),
            failure_threshold: self.failure_threshold.pb(),
            termination_grace_period_seconds: self.termination_grace_period_seconds.pb(),
        }
    }
}
impl Pb<Option<pcore::Probe>> for ocore::Probe {
    fn pb(&self) -> Option<pcore::Probe> {
        Some(self.pb())
    }
}
message!(ocore::ExecAction => pcore::ExecAction { command });
message!(ocore::HTTPGetAction => pcore::HttpGetAction { path, port, host, scheme, http_headers });
message!(ocore::HTTPHeader => pcore::HttpHeader { name, value });
message!(ocore::TCPSocketAction => pcore::TcpSocketAction { port, host });
message!(ocore::GRPCAction => pcore::GrpcAction { port, service });

// Not carried: ephemeral containers, lifecycle hooks, DNS
// config, topology spread, overhead, resource claims (the simulator
// writes none of them; DNS reads none of them).
message!(ocore::PodSpec => pcore::PodSpec {
    volumes, init_containers, containers, restart_policy, termination_grace_period_seconds,
    active_deadline_seconds, dns_policy, node_selector, service_account_name, service_account,
    automount_service_account_token, node_name, host_network, host_pid, host_ipc,
    share_process_namespace, security_context, image_pull_secrets, hostname, subdomain,
    affinity, scheduler_name, tolerations, priority_class_name, priority, readiness_gates,
    runtime_class_name, enable_service_links, preemption_policy, set_hostname_as_fqdn,
});
message!(ocore::LocalObjectReference => pcore::LocalObjectReference { name });
message!(ocore::PodReadinessGate => pcore::PodReadinessGate { condition_type });
message!(ocore::Container => pcore::Container {
    name, image, command, args, working_dir, ports, env, resources, volume_mounts,
    termination_message_path, termination_message_policy, image_pull_policy,
    security_context, stdin, stdin_once, tty, liveness_probe, readiness_probe, startup_probe,
});
message!(ocore::ContainerPort => pcore::ContainerPort { name, host_port, container_port, protocol, host_ip });
message!(ocore::EnvVar => pcore::EnvVar { name, value, value_from });
message!(ocore::EnvVarSource => pcore::EnvVarSource { field_ref, resource_field_ref, config_map_key_ref, secret_key_ref });
message!(ocore::ObjectFieldSelector => pcore::ObjectFieldSelector { api_version, field_path });
message!(ocore::ResourceFieldSelector => pcore::ResourceFieldSelector { container_name, resource, divisor });
message!(ocore::ConfigMapKeySelector => pcore::ConfigMapKeySelector { name => local_object_reference, key, optional });
message!(ocore::SecretKeySelector => pcore::SecretKeySelector { name => local_object_reference, key, optional });
message!(ocore::ResourceRequirements => pcore::ResourceRequirements { limits, requests });
message!(ocore::SecurityContext => pcore::SecurityContext {
    capabilities, privileged, run_as_user, run_as_group, run_as_non_root,
    read_only_root_filesystem, allow_privilege_escalation,
});
message!(ocore::Capabilities => pcore::Capabilities { add, drop });
message!(ocore::PodSecurityContext => pcore::PodSecurityContext {
    run_as_user, run_as_group, run_as_non_root, fs_group, supplemental_groups,
});
message!(ocore::VolumeMount => pcore::VolumeMount { name, read_only, mount_path, sub_path });
message!(ocore::EmptyDirVolumeSource => pcore::EmptyDirVolumeSource { medium, size_limit });
message!(ocore::PersistentVolumeClaimVolumeSource => pcore::PersistentVolumeClaimVolumeSource { claim_name, read_only });
message!(ocore::ConfigMapVolumeSource => pcore::ConfigMapVolumeSource { name => local_object_reference, items, default_mode, optional });
message!(ocore::SecretVolumeSource => pcore::SecretVolumeSource { secret_name, items, default_mode, optional });
message!(ocore::HostPathVolumeSource => pcore::HostPathVolumeSource { path, type_ => r#type });
message!(ocore::KeyToPath => pcore::KeyToPath { key, path, mode });
message!(ocore::ProjectedVolumeSource => pcore::ProjectedVolumeSource { sources, default_mode });
message!(ocore::VolumeProjection => pcore::VolumeProjection { secret, downward_api, config_map, service_account_token });
message!(ocore::SecretProjection => pcore::SecretProjection { name => local_object_reference, items, optional });
message!(ocore::ConfigMapProjection => pcore::ConfigMapProjection { name => local_object_reference, items, optional });
message!(ocore::DownwardAPIProjection => pcore::DownwardAPIProjection { items });
message!(ocore::DownwardAPIVolumeSource => pcore::DownwardAPIVolumeSource { items, default_mode });
message!(ocore::DownwardAPIVolumeFile => pcore::DownwardAPIVolumeFile { path, field_ref, resource_field_ref, mode });
message!(ocore::ServiceAccountTokenProjection => pcore::ServiceAccountTokenProjection { audience, expiration_seconds, path });
message!(ocore::Toleration => pcore::Toleration { key, operator, value, effect, toleration_seconds });
message!(ocore::Affinity => pcore::Affinity { node_affinity, pod_affinity, pod_anti_affinity });
message!(ocore::NodeAffinity => pcore::NodeAffinity {
    required_during_scheduling_ignored_during_execution,
    preferred_during_scheduling_ignored_during_execution,
});
message!(ocore::NodeSelector => pcore::NodeSelector { node_selector_terms });
message!(ocore::NodeSelectorTerm => pcore::NodeSelectorTerm { match_expressions, match_fields });
message!(ocore::NodeSelectorRequirement => pcore::NodeSelectorRequirement { key, operator, values });
message!(ocore::PreferredSchedulingTerm => pcore::PreferredSchedulingTerm { weight, preference });
message!(ocore::PodAffinity => pcore::PodAffinity {
    required_during_scheduling_ignored_during_execution,
    preferred_during_scheduling_ignored_during_execution,
});
message!(ocore::PodAntiAffinity => pcore::PodAntiAffinity {
    required_during_scheduling_ignored_during_execution,
    preferred_during_scheduling_ignored_during_execution,
});
message!(ocore::WeightedPodAffinityTerm => pcore::WeightedPodAffinityTerm { weight, pod_affinity_term });
message!(ocore::PodAffinityTerm => pcore::PodAffinityTerm { label_selector, namespaces, topology_key, namespace_selector });
message!(ocore::PodStatus => pcore::PodStatus {
    phase, conditions, message, reason, nominated_node_name, host_ip, host_ips, pod_ip,
    pod_ips, start_time, init_container_statuses, container_statuses, qos_class,
});
message!(ocore::PodCondition => pcore::PodCondition { type_ => r#type, status, last_probe_time, last_transition_time, reason, message });
message!(ocore::PodIP => pcore::PodIp { ip });
message!(ocore::HostIP => pcore::HostIp { ip });
message!(ocore::ContainerStatus => pcore::ContainerStatus {
    name, state, last_state, ready, restart_count, image, image_id, container_id, started,
});
message!(ocore::ContainerState => pcore::ContainerState { waiting, running, terminated });
message!(ocore::ContainerStateWaiting => pcore::ContainerStateWaiting { reason, message });
message!(ocore::ContainerStateRunning => pcore::ContainerStateRunning { started_at });
message!(ocore::ContainerStateTerminated => pcore::ContainerStateTerminated {
    exit_code, signal, reason, message, started_at, finished_at, container_id,
});

message!(ocore::Service => pcore::Service { metadata, spec, status });
message!(ocore::ServiceSpec => pcore::ServiceSpec {
    ports, selector, cluster_ip, cluster_ips, type_ => r#type, external_ips, session_affinity,
    external_name, external_traffic_policy, publish_not_ready_addresses, ip_families,
    ip_family_policy, internal_traffic_policy,
});
message!(ocore::ServicePort => pcore::ServicePort { name, protocol, app_protocol, port, target_port, node_port });
message!(ocore::ServiceStatus => pcore::ServiceStatus { load_balancer, conditions });
// `kubectl describe service` prints `LoadBalancer Ingress` from here.
message!(ocore::LoadBalancerStatus => pcore::LoadBalancerStatus { ingress });
message!(ocore::LoadBalancerIngress => pcore::LoadBalancerIngress { ip, hostname, ip_mode, ports });
message!(ocore::PortStatus => pcore::PortStatus { port, protocol, error });
message!(ometa::Condition => pmeta::Condition {
    type_ => r#type, status, observed_generation, last_transition_time, reason, message,
});

message!(ocore::Namespace => pcore::Namespace { metadata, spec, status });
message!(ocore::NamespaceSpec => pcore::NamespaceSpec { finalizers });
message!(ocore::NamespaceStatus => pcore::NamespaceStatus { phase });

// Nodes: what the simulator writes (pod ranges, addresses, conditions).
message!(ocore::Node => pcore::Node { metadata, spec, status });
message!(ocore::NodeSpec => pcore::NodeSpec { pod_cidr, pod_cidrs => pod_cid_rs, provider_id, unschedulable });
message!(ocore::NodeStatus => pcore::NodeStatus { addresses, conditions });
message!(ocore::NodeAddress => pcore::NodeAddress { type_ => r#type, address });
message!(ocore::NodeCondition => pcore::NodeCondition {
    type_ => r#type, status, last_heartbeat_time, last_transition_time, reason, message,
});

message!(onet::ServiceCIDR => pnet::ServiceCIDR { metadata, spec, status });
message!(onet::ServiceCIDRSpec => pnet::ServiceCIDRSpec { cidrs });
message!(onet::ServiceCIDRStatus => pnet::ServiceCIDRStatus { conditions });

message!(obatch::Job => pbatch::Job { metadata, spec, status });
message!(obatch::JobSpec => pbatch::JobSpec {
    parallelism, completions, active_deadline_seconds, backoff_limit, backoff_limit_per_index,
    max_failed_indexes, selector, manual_selector, template, ttl_seconds_after_finished,
    completion_mode, suspend, pod_replacement_policy, managed_by,
});
message!(ocore::PodTemplateSpec => pcore::PodTemplateSpec { metadata, spec });
message!(obatch::JobStatus => pbatch::JobStatus {
    start_time, completion_time, active, succeeded, failed, terminating,
    completed_indexes, failed_indexes, uncounted_terminated_pods, ready,
});
message!(obatch::UncountedTerminatedPods => pbatch::UncountedTerminatedPods { succeeded, failed });

// Not carried: hints, deprecatedTopology, appProtocol (DNS reads none
// of them).
message!(odisc::EndpointSlice => pdisc::EndpointSlice { metadata, address_type, endpoints, ports });
message!(odisc::Endpoint => pdisc::Endpoint { addresses, conditions, hostname, target_ref, node_name, zone });
message!(odisc::EndpointConditions => pdisc::EndpointConditions { ready, serving, terminating });
message!(odisc::EndpointPort => pdisc::EndpointPort { name, protocol, port });
message!(ocore::ObjectReference => pcore::ObjectReference {
    kind, namespace, name, uid, api_version, resource_version, field_path,
});

// RBAC, for the simulator's authorizer: every field.
message!(orbac::ClusterRole => prbac::ClusterRole { metadata, rules, aggregation_rule });
message!(orbac::Role => prbac::Role { metadata, rules });
message!(orbac::AggregationRule => prbac::AggregationRule { cluster_role_selectors });
message!(orbac::PolicyRule => prbac::PolicyRule {
    verbs, api_groups, resources, resource_names, non_resource_urls => non_resource_ur_ls,
});
message!(orbac::ClusterRoleBinding => prbac::ClusterRoleBinding { metadata, subjects, role_ref });
message!(orbac::RoleBinding => prbac::RoleBinding { metadata, subjects, role_ref });
message!(orbac::RoleRef => prbac::RoleRef { api_group, kind, name });
message!(orbac::Subject => prbac::Subject { kind, api_group, name, namespace });

/// Why an object has no Protobuf form.
#[derive(Debug, thiserror::Error)]
#[error("failed to encode protobuf: {0}")]
pub struct EncodeError(String);

fn typed<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, EncodeError> {
    serde_json::from_slice(json).map_err(|e| EncodeError(e.to_string()))
}

/// A stored object as one item of its kind's list message: exactly the
/// bytes the item contributes to `…List.items`, so a list body is the
/// concatenation of these (Protobuf concatenates repeated fields).
pub fn list_item(kind: Kind, json: &[u8]) -> Result<Vec<u8>, EncodeError> {
    Ok(match kind {
        Kind::Pod => pcore::PodList {
            metadata: None,
            items: vec![typed::<ocore::Pod>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::Service => pcore::ServiceList {
            metadata: None,
            items: vec![typed::<ocore::Service>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::Namespace => pcore::NamespaceList {
            metadata: None,
            items: vec![typed::<ocore::Namespace>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::Job => pbatch::JobList {
            metadata: None,
            items: vec![typed::<obatch::Job>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::EndpointSlice => pdisc::EndpointSliceList {
            metadata: None,
            items: vec![typed::<odisc::EndpointSlice>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::Node => pcore::NodeList {
            metadata: None,
            items: vec![typed::<ocore::Node>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::ServiceCidr => pnet::ServiceCIDRList {
            metadata: None,
            items: vec![typed::<onet::ServiceCIDR>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::ClusterRole => prbac::ClusterRoleList {
            metadata: None,
            items: vec![typed::<orbac::ClusterRole>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::ClusterRoleBinding => prbac::ClusterRoleBindingList {
            metadata: None,
            items: vec![typed::<orbac::ClusterRoleBinding>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::Role => prbac::RoleList {
            metadata: None,
            items: vec![typed::<orbac::Role>(json)?.pb()],
        }
        .encode_to_vec(),
        Kind::RoleBinding => prbac::RoleBindingList {
            metadata: None,
            items: vec![typed::<orbac::RoleBinding>(json)?.pb()],
        }
        .encode_to_vec(),
    })
}

/// The object message alone, from its list-item form (one length-delimited
/// field: the item's key and length, then the object).
pub fn object(item: &[u8]) -> Option<&[u8]> {
    let mut b = item;
    let (_, wire) = prost::encoding::decode_key(&mut b).ok()?;
    if wire != prost::encoding::WireType::LengthDelimited {
        return None;
    }
    let n = usize::try_from(prost::encoding::decode_varint(&mut b).ok()?).ok()?;
    (b.len() == n).then_some(b)
}

/// The magic and a `runtime.Unknown` around an encoded message.
pub fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let u = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + u.encoded_len());
    out.extend_from_slice(MAGIC);
    u.encode(&mut out).expect("a Vec grows");
    out
}

/// The head of an enveloped list whose body is `raw_len` bytes and whose
/// items follow it: the envelope up to and including `raw`'s length (the
/// key of `raw` comes from encoding an empty one, not from a number typed
/// here), then the list's metadata.
pub fn list_head(kind: Kind, rv: u64, cont: Option<&str>, items_len: usize) -> Vec<u8> {
    let meta = Some(pmeta::ListMeta {
        resource_version: Some(rv.to_string()),
        r#continue: cont.map(str::to_owned),
        ..Default::default()
    });
    let list_meta = match kind {
        Kind::Pod => pcore::PodList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::Service => pcore::ServiceList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::Namespace => pcore::NamespaceList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::Job => pbatch::JobList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::EndpointSlice => pdisc::EndpointSliceList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::Node => pcore::NodeList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::ServiceCidr => pnet::ServiceCIDRList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::ClusterRole => prbac::ClusterRoleList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::ClusterRoleBinding => prbac::ClusterRoleBindingList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::Role => prbac::RoleList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
        Kind::RoleBinding => prbac::RoleBindingList {
            metadata: meta,
            items: vec![],
        }
        .encode_to_vec(),
    };
    let raw_len = list_meta.len() + items_len;
    // The envelope with an empty `raw` last: its final byte is raw's zero
    // length, to be replaced by the real one.
    let u = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(kind.api_version().into()),
            kind: Some(kind.list_name().into()),
        }),
        raw: Some(Vec::new()),
        content_encoding: None,
        content_type: None,
    };
    let mut head = MAGIC.to_vec();
    u.encode(&mut head).expect("a Vec grows");
    assert_eq!(head.pop(), Some(0), "raw is the last field, empty");
    prost::encoding::encode_varint(raw_len as u64, &mut head);
    head.extend_from_slice(&list_meta);
    head
}

/// One watch frame as kube-apiserver writes it: the 4-byte big-endian
/// length, then the bare `metav1.WatchEvent` (its stream serializer adds
/// neither the magic nor the envelope), whose object is the enveloped
/// object.
pub fn watch_frame(ty: &str, object: Vec<u8>) -> Vec<u8> {
    let ev = pmeta::WatchEvent {
        r#type: Some(ty.into()),
        object: Some(RawExtension { raw: Some(object) }),
    };
    let body = ev.encode_to_vec();
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// What follows an object's bytes in its envelope ([`envelope`]): the
/// empty `contentEncoding` and `contentType` of the `runtime.Unknown`.
pub fn envelope_tail() -> &'static [u8] {
    static TAIL: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
        Unknown {
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
            ..Default::default()
        }
        .encode_to_vec()
    });
    &TAIL
}

/// The head of a watch frame ([`watch_frame`]) whose object, enveloped as
/// `api_version`/`kind`, is `object_len` bytes: the frame is this head,
/// the object's bytes, then [`envelope_tail`]. A change's object is sent
/// from the bytes the relay keeps, not copied into each event.
pub fn watch_frame_head(ty: &str, api_version: &str, kind: &str, object_len: usize) -> Vec<u8> {
    let whole = watch_frame(ty, envelope(api_version, kind, vec![0; object_len]));
    // A copy, not a truncation: the head is kept, the placeholder's room
    // must not be.
    whole[..whole.len() - object_len - envelope_tail().len()].to_vec()
}

/// A bookmark's object: a `kind` with only metadata.
pub fn bookmark_object(kind: Kind, rv: u64, initial_end: bool) -> Vec<u8> {
    let metadata = Some(pmeta::ObjectMeta {
        resource_version: Some(rv.to_string()),
        annotations: if initial_end {
            BTreeMap::from([("k8s.io/initial-events-end".into(), "true".into())])
        } else {
            BTreeMap::new()
        },
        ..Default::default()
    });
    let raw = match kind {
        Kind::Pod => pcore::Pod {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::Service => pcore::Service {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::Namespace => pcore::Namespace {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::Job => pbatch::Job {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::EndpointSlice => pdisc::EndpointSlice {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::Node => pcore::Node {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::ServiceCidr => pnet::ServiceCIDR {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::ClusterRole => prbac::ClusterRole {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::ClusterRoleBinding => prbac::ClusterRoleBinding {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::Role => prbac::Role {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::RoleBinding => prbac::RoleBinding {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
    };
    envelope(kind.api_version(), kind.name(), raw)
}

/// A `metav1.Status` from its JSON form.
pub fn status(v: &serde_json::Value) -> Vec<u8> {
    let s = |k: &str| v[k].as_str().map(str::to_owned);
    let st = pmeta::Status {
        metadata: Some(pmeta::ListMeta::default()),
        status: s("status"),
        message: s("message"),
        reason: s("reason"),
        details: v
            .get("details")
            .filter(|d| d.is_object())
            .map(|d| pmeta::StatusDetails {
                retry_after_seconds: d["retryAfterSeconds"].as_i64().map(|n| n as i32),
                ..Default::default()
            }),
        code: v["code"].as_i64().map(|n| n as i32),
    };
    envelope("v1", "Status", st.encode_to_vec())
}

/// Which media type to answer with, from the client's `Accept`: the first
/// of its choices (highest `q` first, then order) the simulator can serve.
/// `None` when it names only types the simulator cannot produce.
pub fn negotiate(accept: Option<&str>, protobuf_ok: bool) -> Option<Media> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Media::Json);
    };
    let mut choices: Vec<(f32, usize, Media)> = Vec::new();
    for (i, part) in accept.split(',').enumerate() {
        let mut params = part.split(';').map(str::trim);
        let ty = params.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1.0f32;
        let mut other_params = false;
        for p in params {
            match p.split_once('=') {
                Some(("q", v)) => q = v.trim().parse().unwrap_or(0.0),
                // Watches say `;stream=watch`; the framing follows the verb.
                Some(("stream", _)) => {}
                // `as=Table;g=…;v=…` asks for a server-side Table, handled elsewhere.
                Some(_) => other_params = true,
                None => {}
            }
        }
        if q <= 0.0 || other_params {
            continue;
        }
        let m = match ty.as_str() {
            "application/json" | "application/*" | "*/*" => Media::Json,
            "application/vnd.kubernetes.protobuf" if protobuf_ok => Media::Protobuf,
            _ => continue,
        };
        choices.push((q, i, m));
    }
    choices.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    choices.first().map(|c| c.2)
}

/// A media type the simulator answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    Json,
    Protobuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_q_then_order() {
        use Media::*;
        assert_eq!(negotiate(None, true), Some(Json));
        assert_eq!(negotiate(Some("application/json"), true), Some(Json));
        assert_eq!(
            negotiate(
                Some("application/vnd.kubernetes.protobuf, application/json"),
                true
            ),
            Some(Protobuf)
        );
        assert_eq!(
            negotiate(
                Some("application/json, application/vnd.kubernetes.protobuf"),
                true
            ),
            Some(Json)
        );
        assert_eq!(
            negotiate(
                Some("application/json;q=0.5, application/vnd.kubernetes.protobuf;q=0.9"),
                true
            ),
            Some(Protobuf)
        );
        assert_eq!(
            negotiate(
                Some("application/vnd.kubernetes.protobuf, application/json"),
                false
            ),
            Some(Json)
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"), false),
            None
        );
        assert_eq!(negotiate(Some("text/html"), true), None);
        assert_eq!(negotiate(Some("*/*"), true), Some(Json));
    }

    #[test]
    fn a_watch_frame_is_its_head_the_object_and_the_tail() {
        // Object lengths on both sides of the varint steps of every
        // enclosing length.
        for len in [0, 1, 100, 127, 128, 129, 16_250, 16_383, 16_384, 70_000] {
            let object: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let whole = watch_frame("MODIFIED", envelope("v1", "Pod", object.clone()));
            let mut parts = watch_frame_head("MODIFIED", "v1", "Pod", len);
            parts.extend_from_slice(&object);
            parts.extend_from_slice(envelope_tail());
            assert_eq!(parts, whole, "object of {len} bytes");
        }
    }

    #[test]
    fn list_head_frames_the_items() {
        let pod = br#"{"metadata":{"name":"a","namespace":"ml"},"status":{"podIP":"10.0.0.1"}}"#;
        let item = list_item(Kind::Pod, pod).unwrap();
        let mut body = list_head(Kind::Pod, 7, Some("c"), item.len() * 2);
        body.extend_from_slice(&item);
        body.extend_from_slice(&item);
        let u = Unknown::decode(&body[4..]).unwrap();
        assert_eq!(&body[..4], MAGIC);
        assert_eq!(u.type_meta.unwrap().kind.as_deref(), Some("PodList"));
        let l = pcore::PodList::decode(u.raw.unwrap().as_slice()).unwrap();
        assert_eq!(l.items.len(), 2);
        assert_eq!(l.metadata.unwrap().resource_version.as_deref(), Some("7"));
        assert_eq!(
            l.items[1].status.as_ref().unwrap().pod_ip.as_deref(),
            Some("10.0.0.1")
        );
    }
}
