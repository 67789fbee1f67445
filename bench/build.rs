//! Sets `cfg(root)` when the tests are built by root: tests that need network namespaces and
//! veths are then run, and reported as ignored (with the reason) otherwise, never as passed.

fn main() {
    root_cfg();
}

include!("../build-support/root_cfg.rs");
