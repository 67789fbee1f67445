//! Encapsulation and decapsulation: modules that add or remove headers.

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[];
