//! Rendering a BessemerPipeline's graph for one node: parameters, arguments checked against
//! the BESS protocol's messages, bytes forms, digests, and errors that name the problem.

use bessemer_controller::crd::BessemerPipelineSpec;
use bessemer_controller::graph::{bytes_of, params_for, pool, render};
use prost_reflect::DynamicMessage;
use serde_json::json;

fn spec(v: serde_json::Value) -> BessemerPipelineSpec {
    serde_json::from_value(v).expect("a valid spec")
}

fn marker(tag_arg: serde_json::Value) -> BessemerPipelineSpec {
    spec(json!({
        "params": {"tag": "7"},
        "nodeParams": {"n1": {"tag": "1"}},
        "graph": {
            "modules": [
                {"name": "in", "class": "Bypass"},
                {"name": "tag", "class": "SetMetadata", "arg": tag_arg},
                {"name": "out", "class": "Sink"}
            ],
            "connections": [{"from": "in", "to": "tag"}, {"from": "tag", "to": "out"}]
        }
    }))
}

fn decoded(any: &prost_types::Any) -> DynamicMessage {
    let name = any.type_url.rsplit('/').next().unwrap();
    let desc = pool().get_message_by_name(name).unwrap();
    DynamicMessage::decode(desc, any.value.as_slice()).unwrap()
}

#[test]
fn node_parameters_override_defaults_and_reach_the_argument() {
    let s = marker(json!({"attrs": [{"name": "t", "size": 4, "value_int": "${tag}"}]}));
    let r1 = render(&s, &params_for(&s, "n1", Some("10.0.0.1"))).unwrap();
    let r2 = render(&s, &params_for(&s, "n2", None)).unwrap();
    let tag = &r1.modules[1];
    assert_eq!(
        tag.arg.type_url,
        "type.googleapis.com/bess.pb.SetMetadataArg"
    );
    let m = decoded(&tag.arg);
    let attrs = m.get_field_by_name("attrs").unwrap();
    let first = attrs.as_list().unwrap()[0].as_message().unwrap().clone();
    assert_eq!(
        first.get_field_by_name("value_int").unwrap().as_u64(),
        Some(1)
    );
    // Different parameters, different digests; the untouched modules' digests are equal.
    assert_ne!(r1.hash, r2.hash);
    assert_ne!(r1.modules[1].hash, r2.modules[1].hash);
    assert_eq!(r1.modules[0].hash, r2.modules[0].hash);
    // Rendering is deterministic.
    assert_eq!(
        r1,
        render(&s, &params_for(&s, "n1", Some("10.0.0.1"))).unwrap()
    );
}

#[test]
fn unknown_field_and_unset_parameter_are_named() {
    let s = marker(json!({"attrs": [{"name": "t", "size": 4, "nosuch": 1}]}));
    let e = render(&s, &params_for(&s, "n1", None)).unwrap_err();
    assert!(
        e.contains("module 'tag' (SetMetadata)") && e.contains("nosuch"),
        "{e}"
    );
    let s = marker(json!({"attrs": [{"name": "t", "size": 4, "value_int": "${missing}"}]}));
    let e = render(&s, &params_for(&s, "n1", None)).unwrap_err();
    assert!(e.contains("parameter 'missing' is not set"), "{e}");
    let s = marker(json!({"attrs": [{"name": "t", "size": "four"}]}));
    let e = render(&s, &params_for(&s, "n1", None)).unwrap_err();
    assert!(
        e.contains("attrs[0].size") && e.contains("unsigned 64-bit"),
        "{e}"
    );
}

#[test]
fn graph_errors_name_the_edge_or_module() {
    let s = spec(json!({"graph": {
        "modules": [{"name": "a", "class": "Bypass"}],
        "connections": [{"from": "a", "to": "b"}]}}));
    let e = render(&s, &params_for(&s, "n", None)).unwrap_err();
    assert!(e.contains("module 'b' is not in the graph"), "{e}");
    let s = spec(json!({"graph": {"modules": [
        {"name": "a", "class": "Bypass"}, {"name": "a", "class": "Sink"}]}}));
    assert!(render(&s, &params_for(&s, "n", None))
        .unwrap_err()
        .contains("repeated"));
    let s = spec(
        json!({"graph": {"modules": [{"name": "a", "class": "NoSuchClass", "arg": {"x": 1}}]}}),
    );
    let e = render(&s, &params_for(&s, "n", None)).unwrap_err();
    assert!(e.contains("NoSuchClassArg"), "{e}");
}

#[test]
fn bytes_forms() {
    assert_eq!(bytes_of("ipv4:10.1.2.3").unwrap(), vec![10, 1, 2, 3]);
    assert_eq!(
        bytes_of("mac:02:00:00:00:0a:01").unwrap(),
        vec![2, 0, 0, 0, 10, 1]
    );
    assert_eq!(bytes_of("hex:0000 0064").unwrap(), vec![0, 0, 0, 100]);
    assert_eq!(bytes_of("AAAAZA==").unwrap(), vec![0, 0, 0, 100]);
    assert!(bytes_of("ipv4:10.1.2")
        .unwrap_err()
        .contains("not an IPv4 address"));
    assert!(bytes_of("hex:abc").unwrap_err().contains("odd number"));
    assert!(bytes_of("mac:02:00")
        .unwrap_err()
        .contains("not a MAC address"));
}

#[test]
fn ports_and_commands_render() {
    let s = spec(json!({"graph": {
        "ports": [{"name": "p", "driver": "AFPacketPort", "arg": {"ifname": "${ifname}"}}],
        "modules": [{"name": "c", "class": "Counter", "arg": {"name_id": "x", "total": 4}}],
        "commands": [{"module": "c", "cmd": "add", "argType": "CounterAddArg", "arg": {"ctr_id": 1}}]},
        "params": {"ifname": "eth9"}}));
    let r = render(&s, &params_for(&s, "n", None)).unwrap();
    assert_eq!(
        r.ports[0].arg.type_url,
        "type.googleapis.com/bessemer.pb.AFPacketPortArg"
    );
    let p = decoded(&r.ports[0].arg);
    assert_eq!(
        p.get_field_by_name("ifname").unwrap().as_str(),
        Some("eth9")
    );
    assert_eq!(r.modules[0].commands.len(), 1);
    let s = spec(json!({"graph": {
        "modules": [{"name": "c", "class": "Counter"}],
        "commands": [{"module": "c", "cmd": "add", "argType": "CounterAddArg", "arg": {"nope": 1}}]}}));
    let e = render(&s, &params_for(&s, "n", None)).unwrap_err();
    assert!(e.contains("nope") && e.contains("module 'c'"), "{e}");
}
