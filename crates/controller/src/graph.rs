//! Turns a pipeline's graph into the daemon's requests for one node: `${param}`
//! substitution, protobuf arguments from their JSON form (checked against the BESS
//! protocol's descriptors), and a digest of each module and of the whole.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::OnceLock;

use base64::Engine as _;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, Value};
use serde_json::Value as Json;

use crate::crd::{BessemerPipelineSpec, Connection};

static FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/bess_descriptor.bin"));

/// The BESS protocol's descriptors (decoded once).
pub fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("build.rs made a valid descriptor set")
    })
}

/// A graph ready for one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub ports: Vec<RPort>,
    pub modules: Vec<RModule>,
    pub connections: Vec<Connection>,
    /// Digest of everything above (hex).
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RPort {
    pub name: String,
    pub driver: String,
    pub arg: prost_types::Any,
    pub num_inc_q: u64,
    pub num_out_q: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RModule {
    pub name: String,
    pub class: String,
    pub arg: prost_types::Any,
    /// Commands run after creation: (cmd, argument type or None, argument JSON).
    pub commands: Vec<RCommand>,
    /// Digest of class, argument and commands (hex).
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RCommand {
    pub cmd: String,
    pub arg_type: Option<String>,
    pub arg: Json,
}

impl RCommand {
    /// The command's argument as an `Any` of `type_name`.
    pub fn encode(&self, type_name: &str) -> Result<prost_types::Any, String> {
        encode_any(
            type_name,
            Some(&self.arg),
            &format!("command '{}'", self.cmd),
        )
    }
}

/// The parameters of a node: the spec's defaults, then the node's own, then the built-ins.
pub fn params_for(
    spec: &BessemerPipelineSpec,
    node: &str,
    node_ip: Option<&str>,
) -> BTreeMap<String, String> {
    let mut p = spec.params.clone();
    if let Some(own) = spec.node_params.get(node) {
        p.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    p.insert("node".into(), node.into());
    if let Some(ip) = node_ip {
        p.insert("nodeIP".into(), ip.into());
    }
    p
}

/// Renders the graph for a node with `params`. Errors name the module, port or edge.
pub fn render(
    spec: &BessemerPipelineSpec,
    params: &BTreeMap<String, String>,
) -> Result<Rendered, String> {
    let g = &spec.graph;
    let mut names = BTreeSet::new();
    let mut ports = Vec::new();
    for p in &g.ports {
        if p.name.is_empty() || !names.insert(format!("port:{}", p.name)) {
            return Err(format!("port name '{}' is empty or repeated", p.name));
        }
        let arg =
            substitute(p.arg.as_ref(), params).map_err(|e| format!("port '{}': {e}", p.name))?;
        let ty = arg_type(&p.driver).ok_or_else(|| {
            format!(
                "port '{}': driver '{}' has no argument message ({}Arg)",
                p.name, p.driver, p.driver
            )
        })?;
        let arg = encode_any(&ty, arg.as_ref(), &format!("port '{}'", p.name))?;
        ports.push(RPort {
            name: p.name.clone(),
            driver: p.driver.clone(),
            arg,
            num_inc_q: p.num_inc_q.unwrap_or(0).into(),
            num_out_q: p.num_out_q.unwrap_or(0).into(),
        });
    }
    let mut modules = Vec::new();
    for m in &g.modules {
        if m.name.is_empty() || !names.insert(format!("module:{}", m.name)) {
            return Err(format!("module name '{}' is empty or repeated", m.name));
        }
        let what = format!("module '{}' ({})", m.name, m.class);
        let arg = substitute(m.arg.as_ref(), params).map_err(|e| format!("{what}: {e}"))?;
        let arg = match arg_type(&m.class) {
            Some(ty) => encode_any(&ty, arg.as_ref(), &what)?,
            None if is_empty(arg.as_ref()) => prost_types::Any::default(),
            None => {
                return Err(format!(
                    "{what}: the class takes no argument ({}Arg is not a known message)",
                    m.class
                ))
            }
        };
        modules.push(RModule {
            name: m.name.clone(),
            class: m.class.clone(),
            arg,
            commands: Vec::new(),
            hash: String::new(),
        });
    }
    for c in &g.commands {
        let m = modules
            .iter_mut()
            .find(|m| m.name == c.module)
            .ok_or_else(|| {
                format!(
                    "command '{}': module '{}' is not in the graph",
                    c.cmd, c.module
                )
            })?;
        let arg = substitute(c.arg.as_ref(), params)
            .map_err(|e| format!("command '{}' of '{}': {e}", c.cmd, c.module))?;
        let rc = RCommand {
            cmd: c.cmd.clone(),
            arg_type: c.arg_type.clone(),
            arg: arg.unwrap_or(Json::Object(Default::default())),
        };
        // An explicit type is checked now; otherwise the daemon's listing is used at apply.
        if let Some(t) = &rc.arg_type {
            rc.encode(t)
                .map_err(|e| format!("module '{}': {e}", c.module))?;
        }
        m.commands.push(rc);
    }
    for c in &g.connections {
        for end in [&c.from, &c.to] {
            if !modules.iter().any(|m| &m.name == end) {
                return Err(format!(
                    "connection {}:{} -> {}:{}: module '{end}' is not in the graph",
                    c.from, c.ogate, c.igate, c.to
                ));
            }
        }
    }
    let mut ogates = BTreeSet::new();
    for c in &g.connections {
        if !ogates.insert((c.from.clone(), c.ogate)) {
            return Err(format!(
                "output gate {} of '{}' is connected twice",
                c.ogate, c.from
            ));
        }
    }
    let mut whole = ring::digest::Context::new(&ring::digest::SHA256);
    for p in &ports {
        whole.update(
            format!(
                "port\0{}\0{}\0{}\0{}\0{}\0",
                p.name, p.driver, p.arg.type_url, p.num_inc_q, p.num_out_q
            )
            .as_bytes(),
        );
        whole.update(&p.arg.value);
    }
    for m in &mut modules {
        let mut d = ring::digest::Context::new(&ring::digest::SHA256);
        d.update(format!("{}\0{}\0", m.class, m.arg.type_url).as_bytes());
        d.update(&m.arg.value);
        for c in &m.commands {
            d.update(format!("\0{}\0{:?}\0{}", c.cmd, c.arg_type, c.arg).as_bytes());
        }
        m.hash = hex(d.finish().as_ref());
        whole.update(format!("module\0{}\0{}\0", m.name, m.hash).as_bytes());
    }
    for c in &g.connections {
        whole.update(format!("edge\0{}\0{}\0{}\0{}\0", c.from, c.ogate, c.to, c.igate).as_bytes());
    }
    Ok(Rendered {
        ports,
        modules,
        connections: g.connections.clone(),
        hash: hex(&whole.finish().as_ref()[..16]),
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn is_empty(v: Option<&Json>) -> bool {
    match v {
        None | Some(Json::Null) => true,
        Some(Json::Object(m)) => m.is_empty(),
        _ => false,
    }
}

/// `${name}` in every string of `v` replaced by the parameter's value; an unset
/// parameter is an error naming it. `$${` stands for a literal `${`.
pub fn substitute(
    v: Option<&Json>,
    params: &BTreeMap<String, String>,
) -> Result<Option<Json>, String> {
    fn walk(v: &Json, p: &BTreeMap<String, String>) -> Result<Json, String> {
        Ok(match v {
            Json::String(s) => Json::String(subst_str(s, p)?),
            Json::Array(a) => Json::Array(a.iter().map(|x| walk(x, p)).collect::<Result<_, _>>()?),
            Json::Object(o) => Json::Object(
                o.iter()
                    .map(|(k, x)| Ok((k.clone(), walk(x, p)?)))
                    .collect::<Result<_, String>>()?,
            ),
            other => other.clone(),
        })
    }
    v.map(|v| walk(v, params)).transpose()
}

fn subst_str(s: &str, p: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        if let Some(r) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = r;
        } else if let Some(r) = after.strip_prefix("${") {
            let end = r
                .find('}')
                .ok_or_else(|| format!("unterminated '${{' in \"{s}\""))?;
            let name = &r[..end];
            let val = p.get(name).ok_or_else(|| {
                format!("parameter '{name}' is not set (spec.params or spec.nodeParams)")
            })?;
            out.push_str(val);
            rest = &r[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The argument message of a module class or port driver: `<Class>Arg` in `bess.pb`, then
/// `bessemer.pb`, then any message of that name whatever its case (BESS spells a few
/// differently from their class: MPLSPop takes MplsPopArg).
pub fn arg_type(class: &str) -> Option<String> {
    let want = format!("{class}Arg");
    for pkg in ["bess.pb", "bessemer.pb"] {
        let full = format!("{pkg}.{want}");
        if pool().get_message_by_name(&full).is_some() {
            return Some(full);
        }
    }
    pool()
        .all_messages()
        .find(|m| m.name().eq_ignore_ascii_case(&want))
        .map(|m| m.full_name().to_string())
}

/// `v` (JSON) as message `type_name` packed in an `Any`.
pub fn encode_any(
    type_name: &str,
    v: Option<&Json>,
    what: &str,
) -> Result<prost_types::Any, String> {
    let full = if type_name.contains('.') {
        type_name.to_string()
    } else {
        format!("bess.pb.{type_name}")
    };
    let desc = pool()
        .get_message_by_name(&full)
        .ok_or_else(|| format!("{what}: unknown message type '{full}'"))?;
    let msg = match v {
        None | Some(Json::Null) => DynamicMessage::new(desc),
        Some(v) => json_to_message(&desc, v, "").map_err(|e| format!("{what}: {e}"))?,
    };
    Ok(prost_types::Any {
        type_url: format!("type.googleapis.com/{full}"),
        value: msg.encode_to_vec(),
    })
}

/// A message from its JSON form, as protobuf's JSON mapping has it (field names as in the
/// .proto or in lowerCamelCase, 64-bit integers as numbers or strings, enums by name or
/// number, bytes in base64), plus `hex:`, `ipv4:` and `mac:` strings for bytes. Unknown
/// fields and wrong types are errors naming the field's path.
pub fn json_to_message(
    desc: &MessageDescriptor,
    v: &Json,
    path: &str,
) -> Result<DynamicMessage, String> {
    let obj = v.as_object().ok_or_else(|| {
        format!(
            "{}: expected an object ({}), got {v}",
            show(path),
            desc.name()
        )
    })?;
    let mut msg = DynamicMessage::new(desc.clone());
    for (k, x) in obj {
        let f = desc
            .get_field_by_name(k)
            .or_else(|| desc.get_field_by_json_name(k))
            .ok_or_else(|| {
                let known: Vec<_> = desc.fields().map(|f| f.name().to_string()).collect();
                format!(
                    "{}: {} has no field '{k}' (fields: {})",
                    show(path),
                    desc.name(),
                    known.join(", ")
                )
            })?;
        if x.is_null() {
            continue;
        }
        let p = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        let val = if f.is_map() {
            let Kind::Message(entry) = f.kind() else {
                unreachable!("map fields are messages")
            };
            let (kf, vf) = (entry.map_entry_key_field(), entry.map_entry_value_field());
            let m = x
                .as_object()
                .ok_or_else(|| format!("{p}: expected an object (a map)"))?;
            let mut out = std::collections::HashMap::new();
            for (mk, mv) in m {
                let key = match scalar(&kf.kind(), &Json::String(mk.clone()), &p)? {
                    Value::String(s) => MapKey::String(s),
                    Value::I32(i) => MapKey::I32(i),
                    Value::I64(i) => MapKey::I64(i),
                    Value::U32(i) => MapKey::U32(i),
                    Value::U64(i) => MapKey::U64(i),
                    Value::Bool(b) => MapKey::Bool(b),
                    _ => return Err(format!("{p}: unsupported map key type")),
                };
                out.insert(key, single(&vf.kind(), mv, &format!("{p}.{mk}"))?);
            }
            Value::Map(out)
        } else if f.is_list() {
            let a = x
                .as_array()
                .ok_or_else(|| format!("{p}: expected a list"))?;
            Value::List(
                a.iter()
                    .enumerate()
                    .map(|(i, e)| single(&f.kind(), e, &format!("{p}[{i}]")))
                    .collect::<Result<_, _>>()?,
            )
        } else {
            single(&f.kind(), x, &p)?
        };
        msg.try_set_field(&f, val)
            .map_err(|e| format!("{p}: {e}"))?;
    }
    Ok(msg)
}

fn show(path: &str) -> &str {
    if path.is_empty() {
        "argument"
    } else {
        path
    }
}

fn single(kind: &Kind, v: &Json, path: &str) -> Result<Value, String> {
    match kind {
        Kind::Message(d) => Ok(Value::Message(json_to_message(d, v, path)?)),
        k => scalar(k, v, path),
    }
}

fn scalar(kind: &Kind, v: &Json, path: &str) -> Result<Value, String> {
    let bad = |what: &str| format!("{path}: expected {what}, got {v}");
    let int = |v: &Json| -> Option<i128> {
        match v {
            Json::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 1.8e19)
                        .map(|f| f as i128)
                }),
            Json::String(s) => s.trim().parse::<i128>().ok(),
            _ => None,
        }
    };
    let ranged = |lo: i128, hi: i128, what: &str| -> Result<i128, String> {
        let i = int(v).ok_or_else(|| bad(what))?;
        if i < lo || i > hi {
            return Err(format!("{path}: {i} is out of range for {what}"));
        }
        Ok(i)
    };
    Ok(match kind {
        Kind::Bool => match v {
            Json::Bool(b) => Value::Bool(*b),
            Json::String(s) if s == "true" || s == "false" => Value::Bool(s == "true"),
            _ => return Err(bad("a boolean")),
        },
        Kind::String => match v {
            Json::String(s) => Value::String(s.clone()),
            _ => return Err(bad("a string")),
        },
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Value::I32(ranged(i32::MIN.into(), i32::MAX.into(), "a 32-bit integer")? as i32)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            Value::I64(ranged(i64::MIN.into(), i64::MAX.into(), "a 64-bit integer")? as i64)
        }
        Kind::Uint32 | Kind::Fixed32 => {
            Value::U32(ranged(0, u32::MAX.into(), "an unsigned 32-bit integer")? as u32)
        }
        Kind::Uint64 | Kind::Fixed64 => {
            Value::U64(ranged(0, u64::MAX.into(), "an unsigned 64-bit integer")? as u64)
        }
        Kind::Double | Kind::Float => {
            let f = match v {
                Json::Number(n) => n.as_f64(),
                Json::String(s) => s.trim().parse::<f64>().ok(),
                _ => None,
            }
            .ok_or_else(|| bad("a number"))?;
            if matches!(kind, Kind::Float) {
                Value::F32(f as f32)
            } else {
                Value::F64(f)
            }
        }
        Kind::Bytes => {
            let s = v
                .as_str()
                .ok_or_else(|| bad("a string (base64, hex:, ipv4: or mac:)"))?;
            Value::Bytes(bytes_of(s).map_err(|e| format!("{path}: {e}"))?.into())
        }
        Kind::Enum(e) => match v {
            Json::String(s) if s.parse::<i32>().is_err() => Value::EnumNumber(
                e.get_value_by_name(s)
                    .ok_or_else(|| format!("{path}: enum {} has no value '{s}'", e.name()))?
                    .number(),
            ),
            _ => {
                Value::EnumNumber(ranged(i32::MIN.into(), i32::MAX.into(), "an enum number")? as i32)
            }
        },
        Kind::Message(_) => return Err(bad("an object")),
    })
}

/// Bytes from `hex:0a0b`, `ipv4:10.0.0.1`, `mac:02:00:00:00:00:01`, or base64.
pub fn bytes_of(s: &str) -> Result<Vec<u8>, String> {
    if let Some(h) = s.strip_prefix("hex:") {
        let h: String = h.chars().filter(|c| !c.is_whitespace()).collect();
        if !h.len().is_multiple_of(2) {
            return Err(format!("'{s}': odd number of hex digits"));
        }
        return (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|_| format!("'{s}': not hex")))
            .collect();
    }
    if let Some(a) = s.strip_prefix("ipv4:") {
        let ip: Ipv4Addr = a
            .trim()
            .parse()
            .map_err(|_| format!("'{s}': not an IPv4 address"))?;
        return Ok(ip.octets().to_vec());
    }
    if let Some(m) = s.strip_prefix("mac:") {
        let b: Result<Vec<u8>, _> = m.split(':').map(|x| u8::from_str_radix(x, 16)).collect();
        return match b {
            Ok(b) if b.len() == 6 => Ok(b),
            _ => Err(format!("'{s}': not a MAC address (six hex bytes with ':')")),
        };
    }
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("'{s}': not base64 ({e}); use hex:, ipv4: or mac: for other forms"))
}
