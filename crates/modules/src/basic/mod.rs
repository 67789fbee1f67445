//! Sources, sinks and pure forwarding/splitting modules.
pub mod bypass;
pub mod flow_gen;
pub mod merge;
pub mod metadata_test;
pub mod noop;
pub mod random_split;
pub mod replicate;
pub mod round_robin;
pub mod sink;
pub mod source;
pub mod split;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[
    &bypass::CLASS,
    &flow_gen::CLASS,
    &merge::CLASS,
    &metadata_test::CLASS,
    &noop::CLASS,
    &random_split::CLASS,
    &replicate::CLASS,
    &round_robin::CLASS,
    &sink::CLASS,
    &source::CLASS,
    &split::CLASS,
];
