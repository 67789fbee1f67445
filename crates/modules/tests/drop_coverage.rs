//! Every drop reason of every class is asserted by some packet-level test: its printed name
//! appears in the crate's test code (a `#[cfg(test)]` module of a class file, or a file in
//! `tests/`). A reason added without a test that reaches it fails here.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_drop_reason_of_every_class_is_asserted_by_a_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("tests"), &mut files);
    let mut test_code = String::new();
    for f in files {
        if f.ends_with("drop_coverage.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        if f.starts_with(root.join("tests")) {
            test_code += &text;
        } else if let Some(i) = text.find("#[cfg(test)]") {
            test_code += &text[i..];
        }
    }
    let mut missing = Vec::new();
    for class in bessemer_modules::classes() {
        for reason in class.drop_reasons {
            if !test_code.contains(&format!("\"{reason}\"")) {
                missing.push(format!("{}: {reason}", class.name));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "drop reasons no test asserts: {missing:?}"
    );
}
