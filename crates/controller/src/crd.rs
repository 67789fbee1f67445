//! The `BessemerPipeline` custom resource (group `bessemer.io`, version `v1alpha1`): a packet
//! graph, the nodes it goes to and their parameters (spec), and what each node's bessemerd
//! did with it (status). `bessemer-controller crd` prints the CustomResourceDefinition;
//! deploy/crds/bessemerpipelines.yaml is that output, checked by the tests.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A packet graph applied to the bessemerd of every selected node, as one transaction per
/// node (all or nothing).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "bessemer.io",
    version = "v1alpha1",
    kind = "BessemerPipeline",
    namespaced,
    status = "BessemerPipelineStatus",
    shortname = "bpl",
    printcolumn = r#"{"name":"Applied","type":"string","jsonPath":".status.summary"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BessemerPipelineSpec {
    /// Labels a Node must carry to get this pipeline (empty: every node).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Default values of the `${name}` parameters used in the graph's arguments.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Values by node name, overriding `params` on that node. `${node}` (the node's name)
    /// and `${nodeIP}` (its address) are always set.
    #[serde(default)]
    pub node_params: BTreeMap<String, BTreeMap<String, String>>,
    /// The graph: ports, modules, their connections and module commands.
    pub graph: Graph,
}

/// A packet graph in terms of BESS's own requests.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Graph {
    /// Ports (created before the modules, destroyed after them).
    #[serde(default)]
    pub ports: Vec<PortSpec>,
    /// Modules: a name, a class and the class's argument.
    pub modules: Vec<ModuleSpec>,
    /// Edges: module `from`'s output gate `ogate` to module `to`'s input gate `igate`.
    #[serde(default)]
    pub connections: Vec<Connection>,
    /// Module commands run right after their module is created (e.g. ExactMatch `add`).
    #[serde(default)]
    pub commands: Vec<CommandSpec>,
}

/// A port: BESS's CreatePortRequest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortSpec {
    /// The port's name (PortInc / PortOut refer to it).
    pub name: String,
    /// Its driver: AFPacketPort, AFXDPPort, PMDPort, VPort, UnixSocketPort, ...
    pub driver: String,
    /// The driver's argument (`<Driver>Arg`) in protobuf's JSON form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub arg: Option<serde_json::Value>,
    /// Incoming queues (0 or absent: the driver's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_inc_q: Option<u32>,
    /// Outgoing queues (0 or absent: the driver's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_out_q: Option<u32>,
}

/// A module: BESS's CreateModuleRequest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleSpec {
    /// The module's name on the node (unique there).
    pub name: String,
    /// The module class (Source, PortInc, VXLANEncap, ...).
    pub class: String,
    /// The class's argument (`<Class>Arg`) in protobuf's JSON form; strings may hold
    /// `${param}`; bytes are base64, or `hex:...`, `ipv4:a.b.c.d`, `mac:aa:bb:...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub arg: Option<serde_json::Value>,
}

/// An edge of the graph.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    /// Upstream module.
    pub from: String,
    /// Its output gate (default 0).
    #[serde(default)]
    pub ogate: u32,
    /// Downstream module.
    pub to: String,
    /// Its input gate (default 0).
    #[serde(default)]
    pub igate: u32,
}

/// A module command (BESS's CommandRequest), run when its module is created.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommandSpec {
    /// The module (one of the graph's).
    pub module: String,
    /// The command (`add`, `set_default_gate`, ...).
    pub cmd: String,
    /// The argument's message type; absent: the type the daemon lists for the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg_type: Option<String>,
    /// The argument in protobuf's JSON form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub arg: Option<serde_json::Value>,
}

/// What the controller saw and did, per node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BessemerPipelineStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Applied` (every selected node has it), `Degraded` (some failed or are unreachable),
    /// `Pending` (no node selected yet).
    #[serde(default)]
    pub phase: String,
    /// "applied/selected", e.g. "2/3".
    #[serde(default)]
    pub summary: String,
    /// One entry per selected node (and per node still being cleaned up).
    #[serde(default)]
    pub nodes: Vec<NodeStatus>,
}

/// One node's state of the pipeline.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The Node's name.
    pub node: String,
    /// The bessemerd control address used.
    #[serde(default)]
    pub address: String,
    /// `Applied`, `Failed` (the daemon refused; `message` says why, nothing was changed),
    /// `Unreachable` (no answer from the daemon) or `Invalid` (the graph cannot be rendered
    /// for this node).
    pub phase: String,
    /// The daemon's error, or why the node could not be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Digest of the graph as applied on the node (after its parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_hash: Option<String>,
    /// The pipeline's modules on the node, with the digest of each one's class, argument and
    /// commands (a module whose digest is unchanged is kept across updates).
    #[serde(default)]
    pub modules: BTreeMap<String, String>,
    /// The pipeline's ports on the node.
    #[serde(default)]
    pub ports: Vec<String>,
    /// How many times the graph was (re)applied to the node: an update, or the daemon
    /// found without it (restarted), counts one more.
    #[serde(default)]
    pub applies: u64,
    /// When the graph was last applied (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<String>,
    /// Packets the pipeline's modules dropped, in total and by module and reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drops: Option<DropSummary>,
}

/// Drop counters of a pipeline's modules on one node (bessemerd's ShowErrors).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DropSummary {
    /// Every drop of the pipeline's modules.
    pub total: u64,
    /// The largest counts, at most ten, largest first.
    #[serde(default)]
    pub top: Vec<DropCount>,
}

/// Packets one module dropped for one reason.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DropCount {
    /// The module.
    pub module: String,
    /// The reason, as the class names it (`not_vxlan`, `too_short`, ...).
    pub reason: String,
    /// Packets.
    pub count: u64,
}

/// An object whose fields the schema does not describe: a protobuf message in JSON form,
/// checked against the message's descriptor by the controller instead.
fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}
