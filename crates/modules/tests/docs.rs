//! `docs/modules.md` is generated from the class descriptors (the text `show mclass` prints);
//! this test fails when it is stale. Regenerate with `BESSEMER_UPDATE_DOCS=1 cargo test -p
//! bessemer-modules --test docs`.

fn render() -> String {
    let mut s = String::from(
        "# Module classes\n\nGenerated from the class descriptors in `crates/modules` (the same text \
         `show mclass` prints); do not edit by hand.\n\n",
    );
    for c in bessemer_modules::classes() {
        s += &format!("## {}\n\n```text\n{}```\n\n", c.name, c.describe());
    }
    s
}

#[test]
fn module_docs_are_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/modules.md");
    let want = render();
    if std::env::var_os("BESSEMER_UPDATE_DOCS").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "docs/modules.md is stale; run BESSEMER_UPDATE_DOCS=1 cargo test -p bessemer-modules --test docs"
    );
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
