//! Queueing modules.
#[allow(clippy::module_inception)]
pub mod queue;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[&queue::CLASS];
