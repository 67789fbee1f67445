//! Measurement and inspection modules.
pub mod dump;
#[allow(clippy::module_inception)]
pub mod measure;
pub mod timestamp;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[&dump::CLASS, &measure::CLASS, &timestamp::CLASS];
