//! Dynamically typed argument values, the common form of BESS's `<Class>Arg` messages.
//!
//! The gRPC layer decodes `google.protobuf.Any` messages into `Value::Map`s keyed by the
//! protobuf field names; scripts and tests build the same maps directly. Module classes read
//! their typed arguments with [`Args`], which rejects unknown fields and wrong types by name.

use crate::error::{Error, Result};

/// An argument value (the shape of a protobuf message field).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Absent / empty.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer (all protobuf integer types).
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A UTF-8 string.
    Str(String),
    /// Raw bytes.
    Bytes(Vec<u8>),
    /// A repeated field.
    List(Vec<Value>),
    /// A message: field name → value, in order.
    Map(Vec<(String, Value)>),
}

impl Value {
    /// An empty message.
    pub fn map() -> Value {
        Value::Map(Vec::new())
    }

    /// Adds a field to a message value (builder style).
    pub fn with(mut self, key: &str, v: impl Into<Value>) -> Value {
        if let Value::Map(m) = &mut self {
            m.push((key.to_string(), v.into()));
        }
        self
    }

    /// Looks up a field of a message value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The protobuf-ish type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Map(_) => "message",
        }
    }

    /// Integer view (accepts floats with no fractional part).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int(i) => Some(i),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Some(f as i64),
            Value::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    /// Float view.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            _ => None,
        }
    }

    /// String view.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Bytes view (strings count as their UTF-8 bytes).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            Value::Str(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// List view (null is an empty list).
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(l) => Some(l),
            Value::Null => Some(&[]),
            _ => None,
        }
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Value {
        Value::Int(v as i64)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(v as i64)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v as i64)
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::Int(v as i64)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Str(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Str(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Value {
        Value::Bytes(v)
    }
}
impl From<Vec<Value>> for Value {
    fn from(v: Vec<Value>) -> Value {
        Value::List(v)
    }
}

/// Reads the fields of one argument message, checking names and types.
///
/// Call [`Args::finish`] at the end: any field not read is reported as unknown.
pub struct Args<'a> {
    msg: &'a str,
    fields: &'a [(String, Value)],
    used: Vec<bool>,
}

impl<'a> Args<'a> {
    /// Starts reading `v` as message type `msg` (e.g. "SourceArg"); null is an empty message.
    pub fn new(v: &'a Value, msg: &'a str) -> Result<Args<'a>> {
        let fields: &[(String, Value)] = match v {
            Value::Map(m) => m,
            Value::Null => &[],
            other => {
                return Err(Error::invalid(format!(
                    "{msg}: expected a message, got {}",
                    other.type_name()
                )))
            }
        };
        Ok(Args {
            msg,
            fields,
            used: vec![false; fields.len()],
        })
    }

    fn take(&mut self, key: &str) -> Option<&'a Value> {
        let mut found = None;
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if k == key {
                self.used[i] = true;
                found = Some(v);
            }
        }
        found.filter(|v| !matches!(v, Value::Null))
    }

    fn wrong(&self, key: &str, want: &str, got: &Value) -> Error {
        Error::invalid(format!(
            "{}.{key}: expected {want}, got {} ({got:?})",
            self.msg,
            got.type_name()
        ))
    }

    /// An optional integer field within `min..=max`.
    pub fn int(&mut self, key: &str, min: i64, max: i64) -> Result<Option<i64>> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        let i = v.as_i64().ok_or_else(|| self.wrong(key, "an integer", v))?;
        if i < min || i > max {
            return Err(Error::invalid(format!(
                "{}.{key}: {i} is out of range [{min}, {max}]",
                self.msg
            )));
        }
        Ok(Some(i))
    }

    /// An optional unsigned integer field up to `max`. A negative Int is read as the u64 it
    /// stands for (uint64 values above i64::MAX arrive that way: `Value::from(u64)`).
    pub fn uint(&mut self, key: &str, max: u64) -> Result<Option<u64>> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        let u = match *v {
            Value::Int(i) => i as u64,
            _ => v
                .as_i64()
                .filter(|&i| i >= 0)
                .ok_or_else(|| self.wrong(key, "an unsigned integer", v))? as u64,
        };
        if u > max {
            return Err(Error::invalid(format!(
                "{}.{key}: {u} is out of range [0, {max}]",
                self.msg
            )));
        }
        Ok(Some(u))
    }

    /// An optional float field.
    pub fn float(&mut self, key: &str) -> Result<Option<f64>> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        let f = v.as_f64().ok_or_else(|| self.wrong(key, "a number", v))?;
        if !f.is_finite() {
            return Err(Error::invalid(format!(
                "{}.{key}: {f} is not finite",
                self.msg
            )));
        }
        Ok(Some(f))
    }

    /// An optional boolean field.
    pub fn bool(&mut self, key: &str) -> Result<Option<bool>> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        match v {
            Value::Bool(b) => Ok(Some(*b)),
            Value::Int(0) => Ok(Some(false)),
            Value::Int(1) => Ok(Some(true)),
            _ => Err(self.wrong(key, "a bool", v)),
        }
    }

    /// An optional string field.
    pub fn str(&mut self, key: &str) -> Result<Option<&'a str>> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        v.as_str()
            .map(Some)
            .ok_or_else(|| self.wrong(key, "a string", v))
    }

    /// An optional bytes field.
    pub fn bytes(&mut self, key: &str) -> Result<Option<&'a [u8]>> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        v.as_bytes()
            .map(Some)
            .ok_or_else(|| self.wrong(key, "bytes", v))
    }

    /// A repeated field (empty when absent).
    pub fn list(&mut self, key: &str) -> Result<&'a [Value]> {
        let Some(v) = self.take(key) else {
            return Ok(&[]);
        };
        v.as_list().ok_or_else(|| self.wrong(key, "a list", v))
    }

    /// An optional nested message field, returned raw for its own `Args`.
    pub fn message(&mut self, key: &str) -> Result<Option<&'a Value>> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        match v {
            Value::Map(_) => Ok(Some(v)),
            _ => Err(self.wrong(key, "a message", v)),
        }
    }

    /// An optional field of any type.
    pub fn any(&mut self, key: &str) -> Option<&'a Value> {
        self.take(key)
    }

    /// Fails naming the first field that was never read.
    pub fn finish(self) -> Result<()> {
        for (i, (k, _)) in self.fields.iter().enumerate() {
            if !self.used[i] {
                return Err(Error::invalid(format!("{}: unknown field '{k}'", self.msg)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_typed_fields_and_rejects_unknown() {
        let v = Value::map().with("pkt_size", 60).with("burst", 32);
        let mut a = Args::new(&v, "SourceArg").unwrap();
        assert_eq!(a.int("pkt_size", 1, 9000).unwrap(), Some(60));
        assert_eq!(
            a.finish().unwrap_err().msg,
            "SourceArg: unknown field 'burst'"
        );
    }

    #[test]
    fn type_and_range_errors_name_the_field() {
        let v = Value::map().with("pkt_size", "big");
        let mut a = Args::new(&v, "SourceArg").unwrap();
        let e = a.int("pkt_size", 1, 9000).unwrap_err();
        assert!(
            e.msg.starts_with("SourceArg.pkt_size: expected an integer"),
            "{}",
            e.msg
        );
        let v = Value::map().with("pkt_size", 100_000);
        let mut a = Args::new(&v, "SourceArg").unwrap();
        let e = a.int("pkt_size", 1, 9000).unwrap_err();
        assert_eq!(
            e.msg,
            "SourceArg.pkt_size: 100000 is out of range [1, 9000]"
        );
        assert_eq!(e.code, libc::EINVAL);
    }

    #[test]
    fn non_message_argument_is_rejected() {
        assert!(Args::new(&Value::Int(3), "SinkArg").is_err());
        let null = Value::Null;
        assert!(Args::new(&null, "SinkArg").unwrap().finish().is_ok());
    }
}
