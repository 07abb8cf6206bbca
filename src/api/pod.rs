//! The subset of the core/v1 Pod object that picolet honours.
//!
//! Field names follow the Kubernetes JSON names exactly (note the upper-case
//! acronyms: `hostPID`, `hostIPC`, `hostIP`, `podIP`, `podIPs`, `hostIPs`,
//! `imageID`, `containerID`). Fields not modelled here come out of
//! [`crate::api::decode`] as not modelled; [`crate::api::fields`] says which of them are
//! standard Pod fields and what becomes of each.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::quantity::Quantity;

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pod {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: PodSpec,
    pub status: PodStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodList {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    pub metadata: ListMeta,
    pub items: Vec<Pod>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListMeta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// The apiserver's count of spec changes (a resize raises it); the status reports the one
    /// it reflects (`observedGeneration`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    pub containers: Vec<Container>,
    /// Pod-level resources: kept opaque so that validation refuses them by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    /// Added to a running API pod through its `ephemeralcontainers` subresource: each started
    /// once, never restarted, stopped with the pod. Refused in a manifest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ephemeral_containers: Vec<Container>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(skip_serializing_if = "is_false")]
    pub host_network: bool,
    #[serde(rename = "hostPID", skip_serializing_if = "is_false")]
    pub host_pid: bool,
    #[serde(rename = "hostIPC", skip_serializing_if = "is_false")]
    pub host_ipc: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Only the required node affinity counts on a node (admission); the rest is the
    /// scheduler's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// The pod's own resource overhead (set by admission from its RuntimeClass); admission adds
    /// it to the containers' requests.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub overhead: BTreeMap<String, Quantity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<PodOs>,
    /// One PID namespace for every container of the pod (the sandbox's, CRI mode POD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_process_namespace: Option<bool>,
    /// Extra lines of the pod's managed /etc/hosts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_aliases: Vec<HostAlias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<PodDnsConfig>,
    /// Conditions that must also be True for the pod to be Ready.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub readiness_gates: Vec<PodReadinessGate>,
    /// Modelled so validation can refuse them by name: picolet does not apply them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_users: Option<bool>,
    #[serde(rename = "setHostnameAsFQDN", skip_serializing_if = "Option::is_none")]
    pub set_hostname_as_fqdn: Option<bool>,
    /// Secrets (in the pod's namespace) holding registry credentials for its images.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Whether the containers get the variables of the namespace's services (default true);
    /// the master service's they get always.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_service_links: Option<bool>,
}

/// A reference to an object in the same namespace, by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LocalObjectReference {
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodOs {
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Affinity {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
    /// The scheduler's alone: accepted and ignored on a node, as upstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_affinity: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeAffinity {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
    /// The scheduler's alone: accepted and ignored on a node, as upstream.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preferred_during_scheduling_ignored_during_execution: Vec<serde_json::Value>,
}

/// Terms ORed; within a term, every requirement ANDed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSelector {
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<NodeSelectorRequirement>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_fields: Vec<NodeSelectorRequirement>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HostAlias {
    pub ip: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodDnsConfig {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<PodDnsConfigOption>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodDnsConfigOption {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodReadinessGate {
    pub condition_type: String,
}

/// `seccompProfile` of a pod or container.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SeccompProfile {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub localhost_profile: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSecurityContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<i64>,
    /// `Always` (the default) or `OnRootMismatch`: when the volumes' ownership is changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs_group_change_policy: Option<String>,
    /// `Merge` (the default: the image's groups join the listed ones) or `Strict`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supplemental_groups_policy: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub supplemental_groups: Vec<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sysctls: Vec<Sysctl>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<SeccompProfile>,
    /// Kept opaque: validation refuses what picolet cannot apply, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_armor_profile: Option<serde_json::Value>,
    #[serde(rename = "seLinuxOptions", skip_serializing_if = "Option::is_none")]
    pub se_linux_options: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Sysctl {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Toleration {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    pub image: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Kept opaque: only pods from the apiserver may use it (`objects::EnvFromSource`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    #[serde(skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Probe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_message_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_message_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// On an init container, `Always` makes a sidecar, started before the app containers,
    /// kept running beside them and stopped after them. Otherwise (`Always`, `OnFailure`,
    /// `Never`) it replaces the pod's restart policy for this container, after its
    /// `restartPolicyRules`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// Checked in order when the container exits: the first rule whose exit codes match
    /// decides (`Restart`); none matching leaves it to `restartPolicy`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restart_policy_rules: Vec<ContainerRestartRule>,
    #[serde(skip_serializing_if = "is_false")]
    pub stdin: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub tty: bool,
    /// An ephemeral container's only: the container whose process namespace it joins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_container_name: Option<String>,
    /// Per resource, whether an in-place resize restarts the container (`RestartContainer`)
    /// or not (`NotRequired`, the default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resize_policy: Vec<ContainerResizePolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerResizePolicy {
    pub resource_name: String,
    pub restart_policy: String,
}

impl Container {
    /// Whether resizing `resource` restarts the container (`RestartContainer`).
    pub fn resize_restarts(&self, resource: &str) -> bool {
        self.resize_policy
            .iter()
            .any(|p| p.resource_name == resource && p.restart_policy == "RestartContainer")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

/// Only `fieldRef` is honoured; the other sources are kept opaque so that
/// validation can refuse them by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EnvVarSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectFieldSelector {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub field_path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub container_port: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_port: Option<i32>,
    #[serde(rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
}

impl ResourceRequirements {
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.requests.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeMount {
    pub name: String,
    pub mount_path: String,
    #[serde(skip_serializing_if = "is_false")]
    pub read_only: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
    /// A subPath with `$(VAR)` references to the container's environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_path_expr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount_propagation: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SecurityContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_root_filesystem: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_privilege_escalation: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<SeccompProfile>,
    /// Kept opaque: validation refuses what picolet cannot apply, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_armor_profile: Option<serde_json::Value>,
    #[serde(rename = "seLinuxOptions", skip_serializing_if = "Option::is_none")]
    pub se_linux_options: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Capabilities {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Probe {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_delay_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// One of a container's `restartPolicyRules`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerRestartRule {
    /// `Restart`.
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_codes: Option<ContainerRestartRuleOnExitCodes>,
}

/// The exit codes a restart rule matches: `In` the values, or `NotIn` them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerRestartRuleOnExitCodes {
    pub operator: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<i32>,
}

impl ContainerRestartRule {
    /// Whether the rule's exit codes match `code` (upstream's FindMatchingContainerRestartRule:
    /// an unknown operator never matches).
    pub fn matches(&self, code: i32) -> bool {
        let Some(e) = &self.exit_codes else {
            return false;
        };
        let listed = e.values.contains(&code);
        match e.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        }
    }
}

impl Container {
    /// An init container with `restartPolicy: Always`: a sidecar.
    pub fn is_sidecar(&self) -> bool {
        self.restart_policy.as_deref() == Some("Always")
    }
}

/// Hooks run after a container starts and before it is stopped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Lifecycle {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_start: Option<LifecycleHandler>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<LifecycleHandler>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LifecycleHandler {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    /// Accepted by the API for old manifests, never run by the kubelet: validation refuses it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep: Option<SleepAction>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SleepAction {
    pub seconds: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ExecAction {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpGetAction {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub port: IntOrString,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub http_headers: Vec<HttpHeader>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TcpSocketAction {
    pub port: IntOrString,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GrpcAction {
    pub port: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

/// A port given as a number (`port: 8080`) or by name (`port: http`).
/// A quoted number (`port: "8080"`) stays a string, as in Kubernetes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntOrString {
    Int(i32),
    String(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        IntOrString::Int(0)
    }
}

impl fmt::Display for IntOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrString::Int(i) => write!(f, "{i}"),
            IntOrString::String(s) => f.write_str(s),
        }
    }
}

impl Serialize for IntOrString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrString::Int(i) => s.serialize_i32(*i),
            IntOrString::String(v) => s.serialize_str(v),
        }
    }
}

struct IntOrStringVisitor;

impl Visitor<'_> for IntOrStringVisitor {
    type Value = IntOrString;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a 32-bit integer or a string")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrString, E> {
        i32::try_from(v)
            .map(IntOrString::Int)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrString, E> {
        i32::try_from(v)
            .map(IntOrString::Int)
            .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrString, E> {
        Ok(IntOrString::String(v.to_owned()))
    }
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IntOrStringVisitor)
    }
}

/// A pod volume. `hostPath`, `emptyDir` and `image` are modelled; every other key
/// (configMap, secret, nfs, persistentVolumeClaim, projected, ...) is kept in
/// `other` so validation can refuse it by name.
///
/// Deserialization is hand-written instead of using `#[serde(flatten)]`:
/// flatten buffers the whole map first, which would hide unknown keys inside
/// `hostPath`/`emptyDir` from unknown-field detection and blur error paths.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_path: Option<HostPathVolumeSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirVolumeSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageVolumeSource>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

struct VolumeVisitor;

impl<'de> Visitor<'de> for VolumeVisitor {
    type Value = Volume;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a volume")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Volume, A::Error> {
        let mut v = Volume::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "name" => v.name = map.next_value()?,
                "hostPath" => v.host_path = map.next_value()?,
                "emptyDir" => v.empty_dir = map.next_value()?,
                "image" => v.image = map.next_value()?,
                _ => {
                    let value = map.next_value()?;
                    v.other.insert(key, value);
                }
            }
        }
        Ok(v)
    }
}

impl<'de> Deserialize<'de> for Volume {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(VolumeVisitor)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HostPathVolumeSource {
    pub path: String,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// An image volume: an OCI image or artifact the runtime mounts read-only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ImageVolumeSource {
    pub reference: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<PullPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EmptyDirVolumeSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub medium: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_limit: Option<Quantity>,
}

// ---- status ----

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodCondition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    #[serde(rename = "hostIPs", skip_serializing_if = "Vec::is_empty")]
    pub host_i_ps: Vec<HostIp>,
    #[serde(rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(rename = "podIPs", skip_serializing_if = "Vec::is_empty")]
    pub pod_i_ps: Vec<PodIp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub init_container_statuses: Vec<ContainerStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub container_statuses: Vec<ContainerStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ephemeral_container_statuses: Vec<ContainerStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<String>,
    /// The `metadata.generation` of the spec this status reflects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostIp {
    pub ip: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodIp {
    pub ip: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    pub state: ContainerState,
    pub last_state: ContainerState,
    pub ready: bool,
    pub restart_count: i32,
    pub image: String,
    #[serde(rename = "imageID")]
    pub image_id: String,
    #[serde(rename = "containerID", skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<bool>,
    /// The requests the node has allocated to the container (a resize changes them once it
    /// fits).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated_resources: BTreeMap<String, Quantity>,
    /// The CPU and memory requests and limits the running container has been given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerState {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<ContainerStateWaiting>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<ContainerStateRunning>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminated: Option<ContainerStateTerminated>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStateWaiting {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStateRunning {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStateTerminated {
    pub exit_code: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(rename = "containerID", skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nginx_pod_from_the_docs() {
        // https://kubernetes.io/docs/concepts/workloads/pods/ (pods/simple-pod.yaml)
        let pod: Pod = yaml_serde::from_str(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nginx\nspec:\n  containers:\n  - name: nginx\n    image: nginx:1.14.2\n    ports:\n    - containerPort: 80\n",
        )
        .unwrap();
        assert_eq!(pod.api_version, "v1");
        assert_eq!(pod.kind, "Pod");
        assert_eq!(pod.metadata.name, "nginx");
        assert_eq!(pod.spec.containers.len(), 1);
        let c = &pod.spec.containers[0];
        assert_eq!(c.image, "nginx:1.14.2");
        assert_eq!(c.ports[0].container_port, 80);
        assert_eq!(c.ports[0].host_port, None);
        assert_eq!(pod.spec.restart_policy, None);
    }

    #[test]
    fn acronym_field_names() {
        let mut pod = Pod::default();
        pod.spec.host_pid = true;
        pod.spec.host_ipc = true;
        pod.spec.host_network = true;
        pod.spec.containers.push(Container {
            ports: vec![ContainerPort {
                container_port: 53,
                host_ip: Some("127.0.0.1".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        pod.status.pod_ip = Some("10.0.0.2".into());
        pod.status.pod_i_ps = vec![PodIp {
            ip: "10.0.0.2".into(),
        }];
        pod.status.host_ip = Some("192.168.1.5".into());
        pod.status.host_i_ps = vec![HostIp {
            ip: "192.168.1.5".into(),
        }];
        pod.status.container_statuses.push(ContainerStatus {
            name: "c".into(),
            image_id: "sha256:abc".into(),
            container_id: Some("containerd://123".into()),
            state: ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 1,
                    container_id: Some("containerd://123".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        });
        let v = serde_json::to_value(&pod).unwrap();
        assert_eq!(v["spec"]["hostPID"], json!(true));
        assert_eq!(v["spec"]["hostIPC"], json!(true));
        assert_eq!(v["spec"]["hostNetwork"], json!(true));
        assert_eq!(
            v["spec"]["containers"][0]["ports"][0]["hostIP"],
            json!("127.0.0.1")
        );
        assert_eq!(v["status"]["podIP"], json!("10.0.0.2"));
        assert_eq!(v["status"]["podIPs"], json!([{"ip": "10.0.0.2"}]));
        assert_eq!(v["status"]["hostIP"], json!("192.168.1.5"));
        assert_eq!(v["status"]["hostIPs"], json!([{"ip": "192.168.1.5"}]));
        let cs = &v["status"]["containerStatuses"][0];
        assert_eq!(cs["imageID"], json!("sha256:abc"));
        assert_eq!(cs["containerID"], json!("containerd://123"));
        assert_eq!(cs["ready"], json!(false));
        assert_eq!(cs["restartCount"], json!(0));
        assert_eq!(cs["state"]["terminated"]["exitCode"], json!(1));
        assert_eq!(
            cs["state"]["terminated"]["containerID"],
            json!("containerd://123")
        );
        assert_eq!(cs["lastState"], json!({}));
        // round trip
        let back: Pod = serde_json::from_value(v).unwrap();
        assert_eq!(back, pod);
    }

    #[test]
    fn empty_fields_are_omitted() {
        let pod = Pod {
            api_version: "v1".into(),
            kind: "Pod".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&pod).unwrap(),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{},"spec":{"containers":[]},"status":{}}"#
        );
        let c = Container {
            name: "a".into(),
            image: "b".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"name":"a","image":"b"}"#
        );
    }

    #[test]
    fn condition_type_and_status_names() {
        let c = PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some("2024-05-01T12:34:56Z".into()),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T12:34:56Z"})
        );
        let list = PodList {
            api_version: "v1".into(),
            kind: "PodList".into(),
            metadata: ListMeta {
                resource_version: Some("7".into()),
            },
            items: vec![],
        };
        assert_eq!(
            serde_json::to_value(&list).unwrap(),
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []})
        );
    }

    #[test]
    fn enums_use_kubernetes_spelling() {
        let s: PodSpec =
            serde_json::from_value(json!({"restartPolicy": "OnFailure", "containers": [{"name": "a", "imagePullPolicy": "IfNotPresent"}]}))
                .unwrap();
        assert_eq!(s.restart_policy, Some(RestartPolicy::OnFailure));
        assert_eq!(
            s.containers[0].image_pull_policy,
            Some(PullPolicy::IfNotPresent)
        );
        assert_eq!(
            serde_json::to_value(RestartPolicy::Never).unwrap(),
            json!("Never")
        );
        let e =
            serde_json::from_value::<PodSpec>(json!({"restartPolicy": "Sometimes"})).unwrap_err();
        assert!(e.to_string().contains("unknown variant `Sometimes`"), "{e}");
        let e = serde_json::from_value::<PodSpec>(json!({"restartPolicy": "always"})).unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }

    #[test]
    fn int_or_string() {
        let p: TcpSocketAction = yaml_serde::from_str("port: 8080").unwrap();
        assert_eq!(p.port, IntOrString::Int(8080));
        let p: TcpSocketAction = yaml_serde::from_str("port: http").unwrap();
        assert_eq!(p.port, IntOrString::String("http".into()));
        let p: TcpSocketAction = yaml_serde::from_str("port: \"8080\"").unwrap();
        assert_eq!(p.port, IntOrString::String("8080".into()));
        let p: TcpSocketAction = serde_json::from_str(r#"{"port": -1}"#).unwrap();
        assert_eq!(p.port, IntOrString::Int(-1));
        assert!(serde_json::from_str::<TcpSocketAction>(r#"{"port": 4294967296}"#).is_err());
        assert!(serde_json::from_str::<TcpSocketAction>(r#"{"port": 1.5}"#).is_err());
        assert!(serde_json::from_str::<TcpSocketAction>(r#"{"port": null}"#).is_err());
        assert_eq!(serde_json::to_string(&IntOrString::Int(80)).unwrap(), "80");
        assert_eq!(
            serde_json::to_string(&IntOrString::String("http".into())).unwrap(),
            r#""http""#
        );
        assert_eq!(TcpSocketAction::default().port, IntOrString::Int(0));
        assert_eq!(IntOrString::String("web".into()).to_string(), "web");
    }

    #[test]
    fn volume_sources() {
        let vols: Vec<Volume> = yaml_serde::from_str(
            "- name: data\n  hostPath:\n    path: /var/data\n    type: DirectoryOrCreate\n- name: cache\n  emptyDir:\n    medium: Memory\n    sizeLimit: 64Mi\n- name: cfg\n  configMap:\n    name: my-config\n",
        )
        .unwrap();
        assert_eq!(vols[0].host_path.as_ref().unwrap().path, "/var/data");
        assert_eq!(
            vols[0].host_path.as_ref().unwrap().type_.as_deref(),
            Some("DirectoryOrCreate")
        );
        assert!(vols[0].other.is_empty());
        let ed = vols[1].empty_dir.as_ref().unwrap();
        assert_eq!(ed.medium.as_deref(), Some("Memory"));
        assert_eq!(ed.size_limit.as_ref().unwrap().value(), 64 << 20);
        assert_eq!(vols[2].name, "cfg");
        assert!(vols[2].host_path.is_none() && vols[2].empty_dir.is_none());
        assert_eq!(vols[2].other["configMap"], json!({"name": "my-config"}));

        // serializes back flat, with the foreign source in place
        assert_eq!(
            serde_json::to_value(&vols[2]).unwrap(),
            json!({"name": "cfg", "configMap": {"name": "my-config"}})
        );
        assert_eq!(
            serde_json::to_value(&vols[1]).unwrap(),
            json!({"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}})
        );
        // an empty emptyDir is still a source
        let v: Volume = yaml_serde::from_str("name: x\nemptyDir: {}\n").unwrap();
        assert_eq!(v.empty_dir, Some(EmptyDirVolumeSource::default()));
        let e = serde_json::from_value::<Volume>(json!({"name": "x", "hostPath": {"path": 7}}))
            .unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
        assert!(serde_json::from_value::<Volume>(json!(["x"])).is_err());
    }

    #[test]
    fn env_sources_are_kept() {
        let e: EnvVar = serde_json::from_value(json!({
            "name": "POD_IP",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}
        }))
        .unwrap();
        let f = e.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
        assert_eq!(f.field_path, "status.podIP");
        assert_eq!(f.api_version, None);
        let e: EnvVar = serde_json::from_value(json!({
            "name": "PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}
        }))
        .unwrap();
        assert_eq!(
            e.value_from.unwrap().secret_key_ref,
            Some(json!({"name": "db", "key": "password"}))
        );
    }

    #[test]
    fn resources_parse_numbers_and_strings() {
        let c: Container = yaml_serde::from_str(
            "name: app\nimage: x\nresources:\n  requests:\n    cpu: 0.5\n    memory: \"64Mi\"\n  limits:\n    cpu: 1\n    memory: 128Mi\n",
        )
        .unwrap();
        assert_eq!(c.resources.requests["cpu"].milli_value(), 500);
        assert_eq!(c.resources.limits["cpu"].milli_value(), 1000);
        assert_eq!(c.resources.requests["memory"].value(), 64 << 20);
        assert_eq!(c.resources.limits["memory"].as_str(), "128Mi");
        assert!(!c.resources.is_empty());
    }
}
