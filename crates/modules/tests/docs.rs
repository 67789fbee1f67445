//! The module reference in `docs/modules/` is generated from the class descriptors (the text
//! `show mclass` prints): one page per class plus an index, `docs/modules.md`. This test fails
//! when any page is stale or a page has no class. Regenerate with
//! `BESSEMER_UPDATE_DOCS=1 cargo test -p bessemer-modules --test docs`.

use std::collections::BTreeMap;
use std::path::PathBuf;

fn pages() -> BTreeMap<PathBuf, String> {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs"));
    let mut out = BTreeMap::new();
    let mut index = String::from(
        "# Module classes\n\nGenerated from the class descriptors in `crates/modules` (the same text \
         `bessemer show mclass` prints); do not edit by hand.\n\n| class | what it does |\n|---|---|\n",
    );
    for c in bessemer_modules::classes() {
        index += &format!("| [{0}](modules/{0}.md) | {1} |\n", c.name, c.help);
        out.insert(
            root.join("modules").join(format!("{}.md", c.name)),
            format!("# {}\n\n```text\n{}```\n", c.name, c.describe()),
        );
    }
    out.insert(root.join("modules.md"), index);
    out
}

#[test]
fn module_docs_are_current() {
    let want = pages();
    let update = std::env::var_os("BESSEMER_UPDATE_DOCS").is_some();
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/modules"));
    if update {
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if !want.contains_key(&e.path()) {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        for (p, text) in &want {
            std::fs::write(p, text).unwrap();
        }
    }
    for (p, text) in &want {
        let have = std::fs::read_to_string(p).unwrap_or_default();
        assert!(
            &have == text,
            "{} is stale; run BESSEMER_UPDATE_DOCS=1 cargo test -p bessemer-modules --test docs",
            p.display()
        );
    }
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        assert!(
            want.contains_key(&e.path()),
            "{} describes no class; regenerate the docs",
            e.path().display()
        );
    }
}

#[test]
fn every_class_has_help_and_unique_bess_name() {
    let mut names: Vec<&str> = bessemer_modules::classes().iter().map(|c| c.name).collect();
    for c in bessemer_modules::classes() {
        assert!(!c.help.is_empty(), "{} has no help text", c.name);
        assert!(
            c.arg_type.ends_with("Arg"),
            "{}: argument type {}",
            c.name,
            c.arg_type
        );
        assert!(!c.name.starts_with("Stub_"), "{} is a placeholder", c.name);
    }
    names.sort();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "duplicate class names");
}
