//! Which module, port and traffic-class names are acceptable.

/// Longest module, port or traffic-class name accepted (BESS has no limit; ours bounds memory).
pub const MAX_NAME_LEN: usize = 1024;

/// True if `name` is acceptable as a module or port name. BESS takes any non-empty string
/// (`soc_3_2026-11-24-10-00`, `my-mod.1`, ...); so do we, up to [`MAX_NAME_LEN`] bytes, except
/// for control characters (newlines, escapes, tabs): a name is printed in logs, tables and
/// terminals, where they would forge lines or send escape sequences (docs/compat.md).
pub fn valid_name(name: &str) -> bool {
    name_problem(name).is_none()
}

/// Why `name` is not acceptable as a module or port name (see [`valid_name`]), if it is not.
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the name is empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!(
            "the name is too long ({} bytes; at most {MAX_NAME_LEN})",
            name.len()
        ));
    }
    let (at, c) = name.char_indices().find(|(_, c)| c.is_control())?;
    Some(format!(
        "the name '{}' holds a control character ({} at byte {at}); names are printed in \
         logs, tables and terminals",
        name.chars()
            .flat_map(char::escape_default)
            .collect::<String>(),
        c.escape_default()
    ))
}
