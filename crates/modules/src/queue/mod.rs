//! Queueing modules.
pub mod buffer;
pub mod drr;
#[allow(clippy::module_inception)]
pub mod queue;
pub mod ring;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[&buffer::CLASS, &drr::CLASS, &queue::CLASS];
