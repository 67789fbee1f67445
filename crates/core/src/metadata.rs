//! Dynamic per-packet metadata: offset assignment (BESS dissertation §5.3.3).
//!
//! Modules declare attributes (name, size, read / write / update). Whenever the graph
//! changes, each attribute's lifetimes are found as *scope components*: the modules from a
//! writer to the readers of its value, including every module on a path between them. Two
//! components that share a module are live at the same time and must not share bytes; the
//! rest may. Components are coloured greedily, largest degree first, each at the lowest
//! offset (aligned to its size rounded up to a power of two) clear of its already placed
//! neighbours. Special cases: a write nobody reads is skipped (`NoWrite`); a read that some
//! path reaches without a writer is refused (`NoRead`, reads zeros) with a warning.

use std::collections::HashMap;

/// Bytes of metadata per packet.
pub const METADATA_TOTAL_SIZE: usize = 128;
/// Largest attribute.
pub const MAX_ATTR_SIZE: usize = 32;
/// Most attributes one module may declare.
pub const MAX_ATTRS_PER_MODULE: usize = 16;

/// How a module uses an attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessMode {
    /// Reads the value set upstream.
    Read,
    /// Sets a new value.
    Write,
    /// Reads and then modifies the value.
    Update,
}

/// One declared attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrSpec {
    /// Attribute name (an opaque string shared by modules that agree on it).
    pub name: String,
    /// Size in bytes (1..=32).
    pub size: usize,
    /// Access mode.
    pub mode: AccessMode,
}

/// Where one module's attribute lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrOffset {
    /// Byte offset in the metadata area.
    At(u16),
    /// Written but never read downstream: writes are skipped.
    NoWrite,
    /// Read but not set on every path: reads yield zeros.
    NoRead,
}

/// A module as the offset assignment sees it.
#[derive(Clone, Debug)]
pub struct MetaModule {
    /// Module name (for messages).
    pub name: String,
    /// Declared attributes.
    pub attrs: Vec<AttrSpec>,
    /// Indices of modules fed by this module's output gates (duplicates and loops allowed).
    pub downstream: Vec<usize>,
}

/// The result of an assignment.
#[derive(Clone, Debug, Default)]
pub struct MetaAssignment {
    /// Per module, per declared attribute (in declaration order).
    pub offsets: Vec<Vec<AttrOffset>>,
    /// Warnings naming module and attribute.
    pub warnings: Vec<String>,
    /// Bytes of the metadata area in use.
    pub bytes_used: usize,
}

/// Configuration errors (the graph change that caused them is refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataError {
    /// One name, two sizes.
    SizeConflict {
        /// Attribute.
        attr: String,
        /// First module.
        module_a: String,
        /// Its size.
        size_a: usize,
        /// Second module.
        module_b: String,
        /// Its size.
        size_b: usize,
    },
    /// Size 0 or above the maximum.
    TooLarge {
        /// Module.
        module: String,
        /// Attribute.
        attr: String,
        /// Size declared.
        size: usize,
    },
    /// More attributes than a module may declare.
    TooManyAttrs {
        /// Module.
        module: String,
        /// How many.
        count: usize,
    },
    /// The live attributes do not fit in the metadata area.
    NoSpace {
        /// A module where the attribute lives.
        module: String,
        /// Attribute.
        attr: String,
        /// Its size.
        needed: usize,
    },
}

impl std::fmt::Display for MetadataError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetadataError::SizeConflict { attr, module_a, size_a, module_b, size_b } => write!(
                f,
                "metadata attribute '{attr}' is {size_a} bytes in module '{module_a}' but {size_b} bytes in module '{module_b}'"
            ),
            MetadataError::TooLarge { module, attr, size } => write!(
                f,
                "module '{module}' declares metadata attribute '{attr}' of {size} bytes (must be 1..={MAX_ATTR_SIZE})"
            ),
            MetadataError::TooManyAttrs { module, count } => write!(
                f,
                "module '{module}' declares {count} metadata attributes (at most {MAX_ATTRS_PER_MODULE})"
            ),
            MetadataError::NoSpace { module, attr, needed } => write!(
                f,
                "no space for metadata attribute '{attr}' ({needed} bytes) at module '{module}': more than {METADATA_TOTAL_SIZE} bytes are live at once"
            ),
        }
    }
}

impl std::error::Error for MetadataError {}

struct Component {
    attr: String,
    size: usize,
    modules: Vec<usize>, // sorted
}

fn find(parent: &mut [usize], x: usize) -> usize {
    let mut r = x;
    while parent[r] != r {
        r = parent[r];
    }
    let mut x = x;
    while parent[x] != r {
        let next = parent[x];
        parent[x] = r;
        x = next;
    }
    r
}

/// Assigns offsets for every module's attributes.
pub fn assign_offsets(modules: &[MetaModule]) -> Result<MetaAssignment, MetadataError> {
    let n = modules.len();
    // Validation.
    let mut sizes: HashMap<&str, (usize, usize)> = HashMap::new();
    for (i, m) in modules.iter().enumerate() {
        if m.attrs.len() > MAX_ATTRS_PER_MODULE {
            return Err(MetadataError::TooManyAttrs {
                module: m.name.clone(),
                count: m.attrs.len(),
            });
        }
        for a in &m.attrs {
            if a.size == 0 || a.size > MAX_ATTR_SIZE {
                return Err(MetadataError::TooLarge {
                    module: m.name.clone(),
                    attr: a.name.clone(),
                    size: a.size,
                });
            }
            match sizes.get(a.name.as_str()) {
                Some(&(size, j)) if size != a.size => {
                    return Err(MetadataError::SizeConflict {
                        attr: a.name.clone(),
                        module_a: modules[j].name.clone(),
                        size_a: size,
                        module_b: m.name.clone(),
                        size_b: a.size,
                    })
                }
                Some(_) => {}
                None => {
                    sizes.insert(&a.name, (a.size, i));
                }
            }
        }
    }
    let mut upstream: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, m) in modules.iter().enumerate() {
        for &d in &m.downstream {
            if d < n && !upstream[d].contains(&i) {
                upstream[d].push(i);
            }
        }
    }
    let mode_of = |m: usize, attr: &str| {
        modules[m]
            .attrs
            .iter()
            .find(|a| a.name == attr)
            .map(|a| a.mode)
    };

    let mut offsets: Vec<Vec<AttrOffset>> = modules
        .iter()
        .map(|m| vec![AttrOffset::NoWrite; m.attrs.len()])
        .collect();
    let mut warnings = Vec::new();
    let mut comps: Vec<Component> = Vec::new();
    // module, attr → component index
    let mut comp_of: Vec<(usize, String, usize)> = Vec::new();

    let mut names: Vec<&str> = sizes.keys().copied().collect();
    names.sort();
    for attr in names {
        let size = sizes[attr].0;
        let readers: Vec<usize> = (0..n)
            .filter(|&m| {
                matches!(
                    mode_of(m, attr),
                    Some(AccessMode::Read | AccessMode::Update)
                )
            })
            .collect();
        // An updater that itself lacks a writer on some path does not count as a writer for
        // readers below it; find those updaters by fixpoint first.
        let mut demoted = vec![false; n];
        let walk = |r: usize, demoted: &[bool]| -> (bool, Vec<usize>) {
            let mut seen = vec![false; n];
            let mut stack = vec![r];
            seen[r] = true;
            let mut set = vec![r];
            let mut unsafe_path = upstream[r].is_empty();
            let mut writer_found = false;
            while let Some(x) = stack.pop() {
                if upstream[x].is_empty() && x != r {
                    unsafe_path = true;
                }
                for &u in &upstream[x] {
                    if seen[u] {
                        continue;
                    }
                    seen[u] = true;
                    set.push(u);
                    match mode_of(u, attr) {
                        Some(AccessMode::Write) => writer_found = true,
                        Some(AccessMode::Update) if !demoted[u] => writer_found = true,
                        _ => stack.push(u),
                    }
                }
            }
            (unsafe_path || !writer_found, set)
        };
        loop {
            let next: Vec<bool> = (0..n)
                .map(|u| mode_of(u, attr) == Some(AccessMode::Update) && walk(u, &demoted).0)
                .collect();
            if next == demoted {
                break;
            }
            demoted = next;
        }
        // Union-find over modules: a reader's scope set is everything on its upstream paths
        // back to the writers of the value it reads.
        let mut parent: Vec<usize> = (0..n).collect();
        let mut member = vec![false; n];
        let mut unsafe_reader = vec![false; n];
        for &r in &readers {
            let (bad, set) = walk(r, &demoted);
            if bad {
                unsafe_reader[r] = true;
                let verb = if mode_of(r, attr) == Some(AccessMode::Update) {
                    "updates"
                } else {
                    "reads"
                };
                warnings.push(format!(
                    "module '{}' {verb} metadata attribute '{attr}' but no upstream module sets it on some path",
                    modules[r].name
                ));
                continue;
            }
            for &x in &set {
                member[x] = true;
                let (a, b) = (find(&mut parent, r), find(&mut parent, x));
                parent[a] = b;
            }
        }
        // Group members into components.
        let mut by_root: HashMap<usize, Vec<usize>> = HashMap::new();
        for (m, &is_member) in member.iter().enumerate() {
            if is_member {
                let root = find(&mut parent, m);
                by_root.entry(root).or_default().push(m);
            }
        }
        let mut roots: Vec<_> = by_root.into_iter().collect();
        roots.sort_by_key(|(_, v)| v[0]);
        for (_, mods) in roots {
            let ci = comps.len();
            for &m in &mods {
                if mode_of(m, attr).is_some() {
                    comp_of.push((m, attr.to_string(), ci));
                }
            }
            comps.push(Component {
                attr: attr.to_string(),
                size,
                modules: mods,
            });
        }
        for &r in &readers {
            if unsafe_reader[r] {
                let k = modules[r]
                    .attrs
                    .iter()
                    .position(|a| a.name == attr)
                    .unwrap();
                offsets[r][k] = AttrOffset::NoRead;
            }
        }
    }

    // Scope graph and greedy colouring, largest degree first.
    let mut live_at: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (ci, c) in comps.iter().enumerate() {
        for &m in &c.modules {
            live_at[m].push(ci);
        }
    }
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); comps.len()];
    for list in &live_at {
        for &a in list {
            for &b in list {
                if a != b && !adj[a].contains(&b) {
                    adj[a].push(b);
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..comps.len()).collect();
    order.sort_by(|&a, &b| {
        adj[b]
            .len()
            .cmp(&adj[a].len())
            .then(comps[a].attr.cmp(&comps[b].attr))
            .then(a.cmp(&b))
    });
    let mut placed: Vec<Option<usize>> = vec![None; comps.len()];
    let mut bytes_used = 0;
    for &c in &order {
        let size = comps[c].size;
        let align = size.next_power_of_two();
        let mut off = 0;
        loop {
            if off + size > METADATA_TOTAL_SIZE {
                let m = comps[c].modules[0];
                return Err(MetadataError::NoSpace {
                    module: modules[m].name.clone(),
                    attr: comps[c].attr.clone(),
                    needed: size,
                });
            }
            let clash = adj[c]
                .iter()
                .filter_map(|&o| placed[o].map(|p| (p, comps[o].size)))
                .find(|&(p, s)| off < p + s && p < off + size);
            match clash {
                Some((p, s)) => off = (p + s).div_ceil(align) * align,
                None => break,
            }
        }
        placed[c] = Some(off);
        bytes_used = bytes_used.max(off + size);
    }
    for (m, attr, ci) in comp_of {
        let k = modules[m]
            .attrs
            .iter()
            .position(|a| a.name == attr)
            .unwrap();
        if offsets[m][k] != AttrOffset::NoRead {
            offsets[m][k] = AttrOffset::At(placed[ci].unwrap() as u16);
        }
    }
    Ok(MetaAssignment {
        offsets,
        warnings,
        bytes_used,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use AccessMode::*;

    fn m(name: &str, attrs: &[(&str, usize, AccessMode)], down: &[usize]) -> MetaModule {
        MetaModule {
            name: name.into(),
            attrs: attrs
                .iter()
                .map(|&(n, s, mode)| AttrSpec {
                    name: n.into(),
                    size: s,
                    mode,
                })
                .collect(),
            downstream: down.to_vec(),
        }
    }

    fn at(a: &MetaAssignment, module: usize, attr: usize) -> u16 {
        match a.offsets[module][attr] {
            AttrOffset::At(o) => o,
            other => panic!("module {module} attr {attr}: {other:?}"),
        }
    }

    #[test]
    fn six_attributes_fit_in_three_offsets() {
        // A chain where each attribute lives across three modules and at most three are live
        // at once (the dissertation's Figures 5.5-5.7: six attributes, three offsets).
        let g = vec![
            m("m0", &[("A", 1, Write)], &[1]),
            m("m1", &[("B", 1, Write)], &[2]),
            m("m2", &[("A", 1, Read), ("C", 1, Write)], &[3]),
            m("m3", &[("B", 1, Read), ("D", 1, Write)], &[4]),
            m("m4", &[("C", 1, Read), ("E", 1, Write)], &[5]),
            m("m5", &[("D", 1, Read), ("F", 1, Write)], &[6]),
            m("m6", &[("E", 1, Read), ("F", 1, Read)], &[]),
        ];
        let a = assign_offsets(&g).unwrap();
        assert_eq!(a.bytes_used, 3);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        // Writer and reader agree; attributes live together differ.
        assert_eq!(at(&a, 0, 0), at(&a, 2, 0));
        assert_eq!(at(&a, 1, 0), at(&a, 3, 0));
        let live_at_m2 = [at(&a, 2, 0), at(&a, 3, 0), at(&a, 2, 1)];
        assert!(
            live_at_m2[0] != live_at_m2[1]
                && live_at_m2[1] != live_at_m2[2]
                && live_at_m2[0] != live_at_m2[2]
        );
    }

    #[test]
    fn figure_5_5_two_scope_components_of_one_attribute() {
        // 1 writes A; 2, 4, 5 read it; 3 is a side branch; 10 rewrites A, 11 reads it.
        let g = vec![
            m("m1", &[("A", 2, Write)], &[1, 2]),
            m("m2", &[("A", 2, Read)], &[3]),
            m("m3", &[], &[]),
            m("m4", &[("A", 2, Read)], &[4]),
            m("m5", &[("A", 2, Read)], &[5]),
            m("m10", &[("A", 2, Write), ("X", 2, Write)], &[6]),
            m("m11", &[("A", 2, Read), ("X", 2, Read)], &[]),
        ];
        let a = assign_offsets(&g).unwrap();
        let first = at(&a, 0, 0);
        assert!([1, 3, 4].iter().all(|&i| at(&a, i, 0) == first));
        assert_eq!(at(&a, 5, 0), at(&a, 6, 0));
        assert_ne!(
            at(&a, 5, 0),
            at(&a, 5, 1),
            "A and X are live together at m10/m11"
        );
        // The second lifetime of A does not overlap the first: the same bytes may be reused.
        assert_eq!(a.bytes_used, 4);
    }

    #[test]
    fn unread_writes_are_skipped_and_unset_reads_warned() {
        let g = vec![
            m("w", &[("foo", 4, Write)], &[1]),
            m("mid", &[], &[]),
            m("src", &[], &[3]),
            m("r", &[("bar", 2, Read)], &[]),
        ];
        let a = assign_offsets(&g).unwrap();
        assert_eq!(a.offsets[0][0], AttrOffset::NoWrite);
        assert_eq!(a.offsets[3][0], AttrOffset::NoRead);
        assert!(
            a.warnings[0].contains("'r'") && a.warnings[0].contains("'bar'"),
            "{:?}",
            a.warnings
        );
    }

    #[test]
    fn a_writer_on_only_one_path_is_not_enough() {
        let g = vec![
            m("s1", &[("foo", 1, Write)], &[2]),
            m("s2", &[], &[2]),
            m("r", &[("foo", 1, Read)], &[]),
        ];
        let a = assign_offsets(&g).unwrap();
        assert_eq!(a.offsets[2][0], AttrOffset::NoRead);
        assert_eq!(a.offsets[0][0], AttrOffset::NoWrite);
        assert_eq!(a.warnings.len(), 1);
    }

    #[test]
    fn configuration_errors_name_module_and_attribute() {
        let e = assign_offsets(&[
            m("a0", &[("foo", 2, Write)], &[]),
            m("b1", &[("foo", 4, Read)], &[]),
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "metadata attribute 'foo' is 2 bytes in module 'a0' but 4 bytes in module 'b1'"
        );
        let e = assign_offsets(&[m("a", &[("big", 33, Write)], &[])]).unwrap_err();
        assert!(matches!(e, MetadataError::TooLarge { size: 33, .. }));
        let attrs: Vec<(String, usize, AccessMode)> =
            (0..5).map(|i| (format!("x{i}"), 32, Write)).collect();
        let attrs: Vec<(&str, usize, AccessMode)> =
            attrs.iter().map(|(n, s, m)| (n.as_str(), *s, *m)).collect();
        let reads: Vec<(&str, usize, AccessMode)> =
            attrs.iter().map(|&(n, s, _)| (n, s, Read)).collect();
        let e = assign_offsets(&[m("w", &attrs, &[1]), m("r", &reads, &[])]).unwrap_err();
        assert!(matches!(e, MetadataError::NoSpace { .. }), "{e}");
        assert!(e.to_string().contains("no space for metadata attribute"));
        let many: Vec<(String, usize, AccessMode)> =
            (0..17).map(|i| (format!("y{i}"), 1, Write)).collect();
        let many: Vec<(&str, usize, AccessMode)> =
            many.iter().map(|(n, s, m)| (n.as_str(), *s, *m)).collect();
        assert!(matches!(
            assign_offsets(&[m("w", &many, &[])]),
            Err(MetadataError::TooManyAttrs { count: 17, .. })
        ));
    }

    #[test]
    fn cycles_terminate_with_valid_offsets() {
        let g = vec![
            m("src", &[("a", 1, Write)], &[1]),
            m("x", &[("a", 1, Update)], &[2, 1]),
            m("y", &[("a", 1, Read), ("b", 2, Write)], &[0, 3]),
            m("z", &[("b", 2, Read)], &[1]),
        ];
        let a = assign_offsets(&g).unwrap();
        let o = at(&a, 0, 0);
        assert_eq!(at(&a, 1, 0), o);
        assert_eq!(at(&a, 2, 0), o);
        assert_ne!(at(&a, 2, 1), o);
    }

    #[test]
    fn offsets_are_aligned_to_size() {
        let g = vec![
            m(
                "w",
                &[("one", 1, Write), ("four", 4, Write), ("eight", 8, Write)],
                &[1],
            ),
            m(
                "r",
                &[("one", 1, Read), ("four", 4, Read), ("eight", 8, Read)],
                &[],
            ),
        ];
        let a = assign_offsets(&g).unwrap();
        assert_eq!(at(&a, 0, 1) % 4, 0);
        assert_eq!(at(&a, 0, 2) % 8, 0);
    }

    const NAMES: [(&str, usize); 4] = [("p", 1), ("q", 2), ("r", 4), ("s", 8)];

    fn graph_strategy() -> impl Strategy<Value = Vec<MetaModule>> {
        (2usize..10).prop_flat_map(|n| {
            let module = (
                proptest::collection::vec((0usize..4, 0u8..4), 0..3),
                proptest::collection::vec(0usize..n, 0..3),
            );
            proptest::collection::vec(module, n).prop_map(move |mods| {
                mods.into_iter()
                    .enumerate()
                    .map(|(i, (attrs, down))| {
                        let mut seen = std::collections::HashSet::new();
                        let attrs = attrs
                            .into_iter()
                            .filter(|(k, _)| seen.insert(*k))
                            .filter_map(|(k, mode)| {
                                let mode = match mode {
                                    0 => return None,
                                    1 => Read,
                                    2 => Write,
                                    _ => Update,
                                };
                                Some(AttrSpec {
                                    name: NAMES[k].0.into(),
                                    size: NAMES[k].1,
                                    mode,
                                })
                            })
                            .collect();
                        // Module 0 is always a source; others feed only higher or equal
                        // indices sometimes, so cycles and several sources both occur.
                        let down = down.into_iter().filter(|&d| d != 0 || i != 0).collect();
                        MetaModule {
                            name: format!("m{i}"),
                            attrs,
                            downstream: down,
                        }
                    })
                    .collect()
            })
        })
    }

    /// Walks every path from every source (bounded), simulating the metadata bytes.
    fn check_paths(g: &[MetaModule], a: &MetaAssignment) -> Result<(), String> {
        let n = g.len();
        let mut has_up = vec![false; n];
        for mm in g {
            for &d in &mm.downstream {
                has_up[d] = true;
            }
        }
        let mut write_id = 0u32;
        let mut paths = 0;
        #[allow(clippy::too_many_arguments)]
        fn walk(
            g: &[MetaModule],
            a: &MetaAssignment,
            node: usize,
            depth: usize,
            mem: &mut [Option<(usize, u32)>; METADATA_TOTAL_SIZE],
            expected: &mut HashMap<String, u32>,
            write_id: &mut u32,
            paths: &mut usize,
        ) -> Result<(), String> {
            *paths += 1;
            if depth > 8 || *paths > 5000 {
                return Ok(());
            }
            let mut mem2 = *mem;
            let mut exp2 = expected.clone();
            for (k, at) in g[node].attrs.iter().enumerate() {
                if matches!(at.mode, Read | Update) {
                    if let AttrOffset::At(o) = a.offsets[node][k] {
                        let want = exp2.get(&at.name).copied().ok_or(format!(
                            "{} reads {} with no writer on path",
                            g[node].name, at.name
                        ))?;
                        for (b, cell) in mem2.iter().enumerate().skip(o as usize).take(at.size) {
                            if cell.map(|x| x.1) != Some(want) {
                                return Err(format!(
                                    "{} reads {} clobbered at byte {b}",
                                    g[node].name, at.name
                                ));
                            }
                        }
                    }
                }
            }
            for (k, at) in g[node].attrs.iter().enumerate() {
                if matches!(at.mode, Write | Update) {
                    *write_id += 1;
                    exp2.insert(at.name.clone(), *write_id);
                    if let AttrOffset::At(o) = a.offsets[node][k] {
                        for cell in mem2.iter_mut().skip(o as usize).take(at.size) {
                            *cell = Some((k + node * 100, *write_id));
                        }
                    }
                }
            }
            let mut downs = g[node].downstream.clone();
            downs.sort();
            downs.dedup();
            for d in downs {
                walk(g, a, d, depth + 1, &mut mem2, &mut exp2, write_id, paths)?;
            }
            Ok(())
        }
        for (s, &up) in has_up.iter().enumerate() {
            if !up {
                let mut mem = [None; METADATA_TOTAL_SIZE];
                walk(
                    g,
                    a,
                    s,
                    0,
                    &mut mem,
                    &mut HashMap::new(),
                    &mut write_id,
                    &mut paths,
                )?;
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn live_attributes_never_share_bytes(g in graph_strategy()) {
            let a = assign_offsets(&g).unwrap();
            prop_assert!(a.bytes_used <= METADATA_TOTAL_SIZE);
            if let Err(e) = check_paths(&g, &a) {
                prop_assert!(false, "{e}");
            }
        }
    }
}
