//! Fields written at fixed packet offsets: what Update and RandomUpdate share (not a class).
use crate::util::{process_each, Verdict};
use bessemer_core::{Args, Context, DropReason, PacketBatch, Result, Value};

/// One field: `size` bytes (1..8) at packet `offset`, written big-endian from a value that
/// `spec` describes (a constant, a random range, ...).
#[derive(Clone, Debug)]
pub struct OffsetField<S> {
    /// Packet offset of the first byte.
    pub offset: usize,
    /// Bytes written (1..8): the low-order bytes of the value.
    pub size: usize,
    /// What the class makes the value from.
    pub spec: S,
}

/// A class's fields and the shortest packet that holds them all.
#[derive(Clone, Debug)]
pub struct OffsetFields<S> {
    fields: Vec<OffsetField<S>>,
    min_len: usize,
}

impl<S> Default for OffsetFields<S> {
    /// No fields.
    fn default() -> OffsetFields<S> {
        OffsetFields {
            fields: Vec::new(),
            min_len: 0,
        }
    }
}

impl<S: Clone> OffsetFields<S> {
    /// The fields, in the order they are written.
    pub fn fields(&self) -> &[OffsetField<S>] {
        &self.fields
    }

    /// How many fields there are.
    pub fn count(&self) -> usize {
        self.fields.len()
    }

    /// The `desc` of a class writing these fields: how many there are.
    pub fn desc(&self) -> String {
        format!("{} fields", self.count())
    }

    /// Replaces the fields.
    pub fn set(&mut self, fields: Vec<OffsetField<S>>) {
        self.min_len = fields.iter().map(|f| f.offset + f.size).max().unwrap_or(0);
        self.fields = fields;
    }

    /// The fields followed by `new`.
    pub fn extended(&self, new: Vec<OffsetField<S>>) -> Vec<OffsetField<S>> {
        let mut all = self.fields.clone();
        all.extend(new);
        all
    }

    /// Writes every field into every packet of `batch`, each as the low `size` bytes of
    /// `value(spec)` big-endian (fields in order), and sends the packet out of gate 0; a
    /// packet too short for some field is dropped unchanged under `too_short`.
    pub fn write_each<R: DropReason + PartialEq>(
        &self,
        ctx: &mut Context,
        batch: &mut PacketBatch,
        too_short: R,
        mut value: impl FnMut(&S) -> u64,
    ) {
        process_each(ctx, batch, |p| {
            if p.len() < self.min_len {
                return Verdict::Drop(too_short);
            }
            let d = p.data_mut();
            for f in &self.fields {
                let v = value(&f.spec);
                d[f.offset..f.offset + f.size].copy_from_slice(&v.to_be_bytes()[8 - f.size..]);
            }
            Verdict::Gate(0)
        });
    }
}

/// Parses a `fields` list of message `msg`, each entry named `{msg}.fields[i]` in errors: its
/// `offset` (0..4095, default 0) and required `size` (1..=`max_size`, `sizes` in the error),
/// then with `spec` (given the entry's arguments, name and size; it reads the rest and finishes
/// them) what the field's value is made from. Stops at the first error.
pub fn parse_offset_fields<S>(
    list: &[Value],
    msg: &str,
    max_size: i64,
    sizes: &str,
    mut spec: impl FnMut(Args<'_>, &str, usize) -> Result<S>,
) -> Result<Vec<OffsetField<S>>> {
    list.iter()
        .enumerate()
        .map(|(i, f)| {
            let m = format!("{msg}.fields[{i}]");
            let mut a = Args::new(f, &m)?;
            let offset = a.int("offset", 0, 4095)?.unwrap_or(0) as usize;
            let size = a.int("size", 1, max_size)?.ok_or_else(|| {
                bessemer_core::Error::invalid(format!("{m}.size is required ({sizes})"))
            })? as usize;
            let spec = spec(a, &m, size)?;
            Ok(OffsetField { offset, size, spec })
        })
        .collect()
}

/// Parses the `fields` list of argument message `msg` with `parse` (the list and `msg`), then
/// checks `msg` has no other field.
pub fn parse_fields_arg<F>(
    arg: &Value,
    msg: &str,
    parse: impl FnOnce(&[Value], &str) -> Result<F>,
) -> Result<F> {
    let mut a = Args::new(arg, msg)?;
    let fields = parse(a.list("fields")?, msg)?;
    a.finish()?;
    Ok(fields)
}
