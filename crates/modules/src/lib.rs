//! Bessemer module classes: one file per class, grouped by kind, registered in [`classes`].

pub mod basic;
pub mod measure;
pub mod queue;
pub mod rewrite;
pub mod util;

use bessemer_core::ModuleClass;

/// Every module class, in `show mclass` order (adding a class = one file + one line here).
pub fn classes() -> &'static [&'static ModuleClass] {
    static CLASSES: &[&ModuleClass] = &[
        &basic::bypass::CLASS,
        &basic::merge::CLASS,
        &basic::noop::CLASS,
        &basic::random_split::CLASS,
        &basic::replicate::CLASS,
        &basic::round_robin::CLASS,
        &basic::sink::CLASS,
        &basic::source::CLASS,
        &basic::split::CLASS,
        &measure::dump::CLASS,
        &measure::measure::CLASS,
        &measure::timestamp::CLASS,
        &queue::queue::CLASS,
        &rewrite::random_update::CLASS,
        &rewrite::rewrite::CLASS,
        &rewrite::set_metadata::CLASS,
        &rewrite::update::CLASS,
    ];
    CLASSES
}

/// Looks up a class by its BESS name.
pub fn find(name: &str) -> Option<&'static ModuleClass> {
    classes().iter().copied().find(|c| c.name == name)
}
