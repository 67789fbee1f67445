//! TEMPORARY STUB written by the lead so other crates compile; the engineer who owns this file replaces it entirely.
pub const METADATA_TOTAL_SIZE: usize = 128;
pub const MAX_ATTR_SIZE: usize = 32;
pub const MAX_ATTRS_PER_MODULE: usize = 16;
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessMode {
    Read,
    Write,
    Update,
}
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrSpec {
    pub name: String,
    pub size: usize,
    pub mode: AccessMode,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrOffset {
    At(u16),
    NoWrite,
    NoRead,
}
pub struct MetaModule {
    pub name: String,
    pub attrs: Vec<AttrSpec>,
    pub downstream: Vec<usize>,
}
pub struct MetaAssignment {
    pub offsets: Vec<Vec<AttrOffset>>,
    pub warnings: Vec<String>,
    pub bytes_used: usize,
}
#[derive(Debug)]
pub struct MetadataError;
impl std::fmt::Display for MetadataError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "x")
    }
}
pub fn assign_offsets(m: &[MetaModule]) -> Result<MetaAssignment, MetadataError> {
    Ok(MetaAssignment {
        offsets: m
            .iter()
            .map(|x| vec![AttrOffset::NoRead; x.attrs.len()])
            .collect(),
        warnings: vec![],
        bytes_used: 0,
    })
}
