//! MetadataTest: declares metadata attributes it reads, writes or updates, for testing the
//! offset assignment (BESS's test module); packets pass from input gate i to output gate i.
use bessemer_core::metadata::MAX_ATTR_SIZE;
use bessemer_core::module::MAX_GATES;
use bessemer_core::{
    AccessMode, Args, AttrSpec, Context, Error, InitContext, Instance, Module, ModuleClass,
    PacketBatch, Result, Value,
};

/// Passes packets through, gate to same-numbered gate.
pub struct MetadataTest {
    attrs: usize,
}

impl Module for MetadataTest {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16) {
        ctx.forward(igate, batch);
    }

    fn desc(&self) -> String {
        format!("{} attributes", self.attrs)
    }
}

fn declare(init: &mut InitContext, v: Option<&Value>, field: &str, mode: AccessMode) -> Result<()> {
    let Some(v) = v else { return Ok(()) };
    let Value::Map(entries) = v else {
        return Err(Error::invalid(format!(
            "MetadataTestArg.{field}: expected a map of attribute name to size"
        )));
    };
    for (name, size) in entries {
        let size = size
            .as_i64()
            .filter(|s| (1..=MAX_ATTR_SIZE as i64).contains(s))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "MetadataTestArg.{field}['{name}']: size {size:?} is not 1..={MAX_ATTR_SIZE}"
                ))
            })?;
        init.add_attr(AttrSpec {
            name: name.clone(),
            size: size as usize,
            mode,
        })?;
    }
    Ok(())
}

fn create(init: &mut InitContext, arg: &Value) -> Result<Instance> {
    let mut a = Args::new(arg, "MetadataTestArg")?;
    let read = a.any("read");
    let write = a.any("write");
    let update = a.any("update");
    a.finish()?;
    declare(init, read, "read", AccessMode::Read)?;
    declare(init, write, "write", AccessMode::Write)?;
    declare(init, update, "update", AccessMode::Update)?;
    Ok(Instance::Exclusive(Box::new(MetadataTest {
        attrs: init.attrs().len(),
    })))
}

/// The MetadataTest class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "MetadataTest",
    name_template: "metadata_test",
    help: "dynamic metadata test module: declares attributes, passes packets through",
    arg_type: "MetadataTestArg",
    arg_doc: &[
        "read: map<string, int64> — attributes read (name: size in bytes)",
        "write: map<string, int64> — attributes written",
        "update: map<string, int64> — attributes read and modified",
    ],
    igates: MAX_GATES,
    ogates: MAX_GATES,
    commands: &[],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create,
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    fn attrs(field: &str, list: &[(&str, i64)]) -> Value {
        Value::map().with(
            field,
            Value::Map(
                list.iter()
                    .map(|(n, s)| (n.to_string(), Value::Int(*s)))
                    .collect(),
            ),
        )
    }

    #[test]
    fn declares_attributes_and_forwards_gate_to_gate() {
        let mut h = Harness::new();
        h.add(&CLASS, "w", &attrs("write", &[("a", 4), ("b", 2)]))
            .unwrap();
        h.add(&CLASS, "r", &attrs("read", &[("a", 4)])).unwrap();
        h.connect("w", 3, "r", 3).unwrap();
        let offs = h.graph.attr_offsets("r").unwrap();
        assert_eq!(offs.len(), 1);
        assert_eq!(offs[0].0.name, "a");
        let out = h.capture("r", 3);
        h.inject("w", 3, &[vec![7u8; 20], vec![8u8; 30]]);
        assert_eq!(out.take_data(), vec![vec![7u8; 20], vec![8u8; 30]]);
    }

    #[test]
    fn bad_sizes_and_conflicts_name_the_attribute() {
        let mut h = Harness::new();
        let e = h
            .add(&CLASS, "x", &attrs("write", &[("big", 99)]))
            .unwrap_err();
        assert!(e.msg.contains("write['big']"), "{}", e.msg);
        let e = h.add(&CLASS, "y", &attrs("read", &[("a", 0)])).unwrap_err();
        assert!(e.msg.contains("read['a']"), "{}", e.msg);
        h.add(&CLASS, "w", &attrs("write", &[("a", 4)])).unwrap();
        let e = h.add(&CLASS, "r", &attrs("read", &[("a", 2)])).unwrap_err();
        assert!(
            e.msg.contains("'a'") && e.msg.contains("2 bytes"),
            "{}",
            e.msg
        );
    }
}
