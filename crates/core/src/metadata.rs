//! Dynamic per-packet metadata: offset assignment (BESS dissertation §5.3.3, BESS
//! `core/metadata.cc`).
//!
//! Modules declare attributes (name, size, read / write / update). Whenever the graph
//! changes, each attribute's lifetimes are found as *scope components*: a writer, the readers
//! of its value, and every module on a path between them (the value is live "through" those
//! modules). Two components that share a module are live at the same time and must not share
//! bytes; the rest may. Components are coloured greedily, largest degree first, each at the
//! lowest offset (aligned to its size rounded up to a power of two) clear of its already placed
//! neighbours.
//!
//! Special cases: a write that nobody downstream reads is skipped ([`AttrOffset::NoWrite`]); a
//! read that some path from a source reaches without passing a writer (or that no writer
//! reaches at all) is refused ([`AttrOffset::NoRead`], reads yield zeros) with a warning.
//!
//! An `Update` is a read followed by a write of the same bytes: it belongs to the component of
//! the value it reads and carries that component on downstream. An `Update` that is itself
//! refused (`NoRead`) does not count as a writer for the modules below it.
//!
//! Cost: per attribute, a few linear passes over the graph (O(modules + edges)); then the scope
//! graph (sum over modules of the square of the number of components live there) and the
//! colouring (bit masks over the 128 bytes).

use std::collections::HashMap;

/// Bytes of metadata per packet.
pub const METADATA_TOTAL_SIZE: usize = 128;
/// Largest attribute, in bytes.
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
    /// Reads the value set upstream and then modifies it in place.
    Update,
}

/// One declared attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrSpec {
    /// Attribute name (an opaque string shared by the modules that agree on it).
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
    /// Written, never read downstream: writes are skipped.
    NoWrite,
    /// Read, but some path has no writer: reads yield zeros.
    NoRead,
}

/// A module as the offset assignment sees it.
#[derive(Clone, Debug)]
pub struct MetaModule {
    /// Module name (for messages).
    pub name: String,
    /// Declared attributes.
    pub attrs: Vec<AttrSpec>,
    /// Indices of modules fed by this module's output gates (duplicates and self-loops allowed).
    pub downstream: Vec<usize>,
}

/// The result of an assignment.
#[derive(Clone, Debug, Default)]
pub struct MetaAssignment {
    /// Per module, per declared attribute (in declaration order).
    pub offsets: Vec<Vec<AttrOffset>>,
    /// Warnings naming module and attribute (readers refused as `NoRead`).
    pub warnings: Vec<String>,
    /// For each of `warnings`, the module (index) and the attribute it is about.
    pub warned: Vec<(usize, String)>,
    /// Bytes of the metadata area in use (the largest end offset).
    pub bytes_used: usize,
}

/// Configuration errors (the graph change that caused them is refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataError {
    /// One attribute name declared with two sizes.
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
    /// Size 0 or above [`MAX_ATTR_SIZE`].
    TooLarge {
        /// Module.
        module: String,
        /// Attribute.
        attr: String,
        /// Size declared.
        size: usize,
    },
    /// More than [`MAX_ATTRS_PER_MODULE`] attributes in one module.
    TooManyAttrs {
        /// Module.
        module: String,
        /// How many it declares.
        count: usize,
    },
    /// The attributes live at once do not fit in the metadata area.
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
            MetadataError::SizeConflict {
                attr,
                module_a,
                size_a,
                module_b,
                size_b,
            } => write!(
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
            MetadataError::NoSpace {
                module,
                attr,
                needed,
            } => write!(
                f,
                "no space for metadata attribute '{attr}' ({needed} bytes) at module '{module}': more than {METADATA_TOTAL_SIZE} bytes are live at once"
            ),
        }
    }
}

impl std::error::Error for MetadataError {}

/// One lifetime of one attribute.
#[derive(Clone, Debug)]
struct Component {
    /// Attribute name.
    attr: String,
    /// Attribute size.
    size: usize,
    /// Every module the value is live through, sorted.
    modules: Vec<usize>,
    /// (module, declared attribute index) pairs that get this component's offset.
    slots: Vec<(usize, usize)>,
    /// Byte offset, once placed.
    offset: usize,
}

/// Every use of one attribute name.
struct AttrUses {
    /// Size (the same everywhere, checked).
    size: usize,
    /// Module that first declared it (for messages).
    first: usize,
    /// (module, attribute index, mode) for the first declaration in each module.
    uses: Vec<(usize, usize, AccessMode)>,
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

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        // Smaller index as root keeps the result independent of traversal order.
        let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
        parent[hi] = lo;
    }
}

/// Bit mask of `size` bytes starting at `off`.
fn range_mask(off: usize, size: usize) -> u128 {
    let ones = if size >= 128 {
        u128::MAX
    } else {
        (1u128 << size) - 1
    };
    ones << off
}

/// Validates the declarations and indexes every attribute's uses; also returns duplicate
/// declarations (module, index, index of the first declaration of that name in the module).
#[allow(clippy::type_complexity)]
fn index_attrs(
    modules: &[MetaModule],
) -> Result<(HashMap<&str, AttrUses>, Vec<(usize, usize, usize)>), MetadataError> {
    let mut by_name: HashMap<&str, AttrUses> = HashMap::new();
    let mut dups = Vec::new();
    for (i, m) in modules.iter().enumerate() {
        if m.attrs.len() > MAX_ATTRS_PER_MODULE {
            return Err(MetadataError::TooManyAttrs {
                module: m.name.clone(),
                count: m.attrs.len(),
            });
        }
        for (k, a) in m.attrs.iter().enumerate() {
            if a.size == 0 || a.size > MAX_ATTR_SIZE {
                return Err(MetadataError::TooLarge {
                    module: m.name.clone(),
                    attr: a.name.clone(),
                    size: a.size,
                });
            }
            if let Some(first) = m.attrs[..k].iter().position(|b| b.name == a.name) {
                if m.attrs[first].size != a.size {
                    return Err(MetadataError::SizeConflict {
                        attr: a.name.clone(),
                        module_a: m.name.clone(),
                        size_a: m.attrs[first].size,
                        module_b: m.name.clone(),
                        size_b: a.size,
                    });
                }
                // The first declaration of a name in a module decides; later ones mirror it.
                dups.push((i, k, first));
                continue;
            }
            let entry = by_name.entry(a.name.as_str()).or_insert(AttrUses {
                size: a.size,
                first: i,
                uses: Vec::new(),
            });
            if entry.size != a.size {
                return Err(MetadataError::SizeConflict {
                    attr: a.name.clone(),
                    module_a: modules[entry.first].name.clone(),
                    size_a: entry.size,
                    module_b: m.name.clone(),
                    size_b: a.size,
                });
            }
            entry.uses.push((i, k, a.mode));
        }
    }
    Ok((by_name, dups))
}

/// Computes offsets and returns the placed scope components too (for tests).
fn solve(modules: &[MetaModule]) -> Result<(MetaAssignment, Vec<Component>), MetadataError> {
    let n = modules.len();
    let (by_name, dups) = index_attrs(modules)?;

    // Deduplicated adjacency, both directions (out-of-range indices ignored).
    let down: Vec<Vec<usize>> = modules
        .iter()
        .map(|m| {
            let mut d: Vec<usize> = m.downstream.iter().copied().filter(|&d| d < n).collect();
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect();
    let mut up: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, ds) in down.iter().enumerate() {
        for &d in ds {
            up[d].push(i);
        }
    }
    let sources: Vec<usize> = (0..n).filter(|&i| up[i].is_empty()).collect();

    // Initial offsets as in BESS: readers refused, writers skipped, until placed.
    let mut offsets: Vec<Vec<AttrOffset>> = modules
        .iter()
        .map(|m| {
            m.attrs
                .iter()
                .map(|a| match a.mode {
                    AccessMode::Write => AttrOffset::NoWrite,
                    AccessMode::Read | AccessMode::Update => AttrOffset::NoRead,
                })
                .collect()
        })
        .collect();
    let mut warnings = Vec::new();
    let mut warned = Vec::new();
    let mut comps: Vec<Component> = Vec::new();

    // Per-attribute scratch, reset after each attribute.
    let mut mode: Vec<Option<(AccessMode, usize)>> = vec![None; n];
    let mut undef = vec![false; n]; // some path from a source reaches here without a writer
    let mut reach = vec![false; n]; // some writer reaches here
    let mut member = vec![false; n];
    let mut parent: Vec<usize> = (0..n).collect();
    let mut stack: Vec<usize> = Vec::new();

    let mut names: Vec<&str> = by_name.keys().copied().collect();
    names.sort_unstable();
    for attr in names {
        let info = &by_name[attr];
        for &(m, k, md) in &info.uses {
            mode[m] = Some((md, k));
        }
        let is_write = |m: usize| matches!(mode[m], Some((AccessMode::Write, _)));

        // Undefined on some path: forward from every source, stopped only by a Write (an
        // Update whose input is undefined produces an undefined value, so it passes through).
        for &s in &sources {
            undef[s] = true;
            stack.push(s);
        }
        while let Some(x) = stack.pop() {
            if is_write(x) {
                continue;
            }
            for &d in &down[x] {
                if !undef[d] {
                    undef[d] = true;
                    stack.push(d);
                }
            }
        }
        // Reached by some writer at all (catches readers in writer-free loops with no source).
        for &(w, _, md) in &info.uses {
            if md == AccessMode::Write {
                stack.push(w);
            }
        }
        while let Some(x) = stack.pop() {
            for &d in &down[x] {
                if !reach[d] {
                    reach[d] = true;
                    stack.push(d);
                }
            }
        }
        let safe = |m: usize| {
            matches!(mode[m], Some((AccessMode::Read | AccessMode::Update, _)))
                && !undef[m]
                && reach[m]
        };
        // Effective writers end an upstream walk: Writes, and Updates that are safe readers.
        let ends_walk = |m: usize| match mode[m] {
            Some((AccessMode::Write, _)) => true,
            Some((AccessMode::Update, _)) => safe(m),
            _ => false,
        };

        // Refused readers.
        for &(m, k, md) in &info.uses {
            if md != AccessMode::Write && !safe(m) {
                offsets[m][k] = AttrOffset::NoRead;
                let verb = if md == AccessMode::Update {
                    "updates"
                } else {
                    "reads"
                };
                warnings.push(format!(
                    "module '{}' {verb} metadata attribute '{attr}' but no upstream module sets it on some path",
                    modules[m].name
                ));
                warned.push((m, attr.to_string()));
            }
        }

        // Scope components: walk upstream from every safe reader to the effective writers
        // feeding it; everything on the way is live. Modules joined by a walked edge share a
        // component (a reader and its writers; two readers of one writer; an Update and the
        // readers of what it wrote).
        for &(m, _, _) in &info.uses {
            if safe(m) {
                member[m] = true;
                stack.push(m);
            }
        }
        let mut touched: Vec<usize> = stack.clone();
        while let Some(y) = stack.pop() {
            for &u in &up[y] {
                union(&mut parent, u, y);
                if !member[u] {
                    member[u] = true;
                    touched.push(u);
                    if !ends_walk(u) {
                        stack.push(u);
                    }
                }
            }
        }
        touched.sort_unstable();
        let mut root_comp: HashMap<usize, usize> = HashMap::new();
        for &m in &touched {
            let root = find(&mut parent, m);
            let ci = *root_comp.entry(root).or_insert_with(|| {
                comps.push(Component {
                    attr: attr.to_string(),
                    size: info.size,
                    modules: Vec::new(),
                    slots: Vec::new(),
                    offset: 0,
                });
                comps.len() - 1
            });
            comps[ci].modules.push(m);
            // Refused readers inside a component (possible only in source-less loops) keep
            // NoRead; everyone else declaring the attribute gets the offset.
            match mode[m] {
                Some((AccessMode::Write, k)) => comps[ci].slots.push((m, k)),
                Some((_, k)) if safe(m) => comps[ci].slots.push((m, k)),
                _ => {}
            }
        }

        // Reset scratch.
        for &(m, _, _) in &info.uses {
            mode[m] = None;
        }
        for &m in &touched {
            member[m] = false;
            parent[m] = m;
        }
        undef.iter_mut().for_each(|x| *x = false);
        reach.iter_mut().for_each(|x| *x = false);
    }

    // Scope graph: components sharing a module overlap.
    let mut live_at: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (ci, c) in comps.iter().enumerate() {
        for &m in &c.modules {
            live_at[m].push(ci);
        }
    }
    let adj: Vec<Vec<usize>> = comps
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            let mut a: Vec<usize> = c
                .modules
                .iter()
                .flat_map(|&m| live_at[m].iter().copied())
                .filter(|&o| o != ci)
                .collect();
            a.sort_unstable();
            a.dedup();
            a
        })
        .collect();

    // Greedy colouring, largest degree first (ties: attribute name, then first module).
    let mut order: Vec<usize> = (0..comps.len()).collect();
    order.sort_by(|&a, &b| {
        adj[b]
            .len()
            .cmp(&adj[a].len())
            .then_with(|| comps[a].attr.cmp(&comps[b].attr))
            .then_with(|| comps[a].modules[0].cmp(&comps[b].modules[0]))
    });
    let mut placed = vec![false; comps.len()];
    let mut bytes_used = 0;
    for &c in &order {
        let size = comps[c].size;
        let align = size.next_power_of_two();
        let busy = adj[c]
            .iter()
            .filter(|&&o| placed[o])
            .fold(0u128, |acc, &o| {
                acc | range_mask(comps[o].offset, comps[o].size)
            });
        let found = (0..=METADATA_TOTAL_SIZE - size)
            .step_by(align)
            .find(|&off| busy & range_mask(off, size) == 0);
        let Some(off) = found else {
            let m = comps[c]
                .slots
                .first()
                .map(|s| s.0)
                .unwrap_or(comps[c].modules[0]);
            return Err(MetadataError::NoSpace {
                module: modules[m].name.clone(),
                attr: comps[c].attr.clone(),
                needed: size,
            });
        };
        comps[c].offset = off;
        placed[c] = true;
        bytes_used = bytes_used.max(off + size);
    }
    for c in &comps {
        for &(m, k) in &c.slots {
            offsets[m][k] = AttrOffset::At(c.offset as u16);
        }
    }
    for &(m, k, first) in &dups {
        offsets[m][k] = offsets[m][first];
    }
    Ok((
        MetaAssignment {
            offsets,
            warnings,
            warned,
            bytes_used,
        },
        comps,
    ))
}

/// Checks the declarations alone (sizes, counts, one size per attribute name), as
/// [`assign_offsets`] does first, with the same error.
pub fn check_declarations(modules: &[MetaModule]) -> Result<(), MetadataError> {
    index_attrs(modules).map(|_| ())
}

/// Assigns an offset (or `NoWrite` / `NoRead`) to every module's declared attributes.
pub fn assign_offsets(modules: &[MetaModule]) -> Result<MetaAssignment, MetadataError> {
    solve(modules).map(|(a, _)| a)
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

    fn overlap(a: &Component, b: &Component) -> bool {
        a.modules.iter().any(|m| b.modules.binary_search(m).is_ok())
    }

    /// Components sharing a module have disjoint byte ranges; offsets are aligned and in range.
    fn check_components(comps: &[Component], bytes_used: usize) -> Result<(), String> {
        for (i, a) in comps.iter().enumerate() {
            if a.offset % a.size.next_power_of_two() != 0 || a.offset + a.size > bytes_used {
                return Err(format!("{} at {} misplaced", a.attr, a.offset));
            }
            for b in &comps[i + 1..] {
                let disjoint = a.offset + a.size <= b.offset || b.offset + b.size <= a.offset;
                if overlap(a, b) && !disjoint {
                    return Err(format!(
                        "{} {:?} at {} and {} {:?} at {} share bytes",
                        a.attr, a.modules, a.offset, b.attr, b.modules, b.offset
                    ));
                }
            }
        }
        Ok(())
    }

    fn comps_of<'a>(comps: &'a [Component], attr: &str) -> Vec<&'a Component> {
        comps.iter().filter(|c| c.attr == attr).collect()
    }

    #[test]
    fn six_attributes_fit_in_three_offsets() {
        // Figures 5.5-5.7 in spirit: six 1-byte attributes on a branching pipeline, at most three
        // live at once (A, B, C at m1 form a triangle), so three offsets suffice.
        let g = vec![
            m("m0", &[("A", 1, Write), ("B", 1, Write)], &[1]),
            m("m1", &[("A", 1, Read), ("C", 1, Write)], &[2, 3]),
            m("m2", &[("B", 1, Read), ("D", 1, Write)], &[4]),
            m("m3", &[("C", 1, Read), ("E", 1, Write)], &[5]),
            m("m4", &[("D", 1, Read), ("F", 1, Write)], &[6]),
            m("m5", &[("E", 1, Read)], &[]),
            m("m6", &[("F", 1, Read)], &[]),
        ];
        let (a, comps) = solve(&g).unwrap();
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        assert_eq!(comps.len(), 6);
        let mut pairs = 0;
        for (i, x) in comps.iter().enumerate() {
            for y in &comps[i + 1..] {
                if overlap(x, y) {
                    pairs += 1;
                    assert_ne!(x.offset, y.offset, "{} and {} overlap", x.attr, y.attr);
                }
            }
        }
        // A-B, A-C, B-C, B-D, C-E, D-F.
        assert_eq!(pairs, 6);
        check_components(&comps, a.bytes_used).unwrap();
        assert_eq!(a.bytes_used, 3);
        // Writer and readers of each attribute agree.
        assert_eq!(at(&a, 0, 0), at(&a, 1, 0));
        assert_eq!(at(&a, 0, 1), at(&a, 2, 0));
        assert_eq!(at(&a, 1, 1), at(&a, 3, 0));
        assert_eq!(at(&a, 2, 1), at(&a, 4, 0));
        assert_eq!(at(&a, 3, 1), at(&a, 5, 0));
        assert_eq!(at(&a, 4, 1), at(&a, 6, 0));
        let live_at_m1 = [at(&a, 0, 0), at(&a, 0, 1), at(&a, 1, 1)];
        let mut sorted = live_at_m1;
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2]);
    }

    #[test]
    fn figure_5_5_two_scope_components_of_one_attribute() {
        // 1 writes A; 2, 4, 5 read it (6 passes it on between 2 and 4 without touching it);
        // 3 is a side branch that does not read it; 10 rewrites A and 11 reads it.
        let g = vec![
            m("m1", &[("A", 2, Write)], &[1, 2]), // 0
            m("m2", &[("A", 2, Read)], &[3]),     // 1
            m("m3", &[], &[7]),                   // 2
            m("m6", &[], &[4]),                   // 3
            m("m4", &[("A", 2, Read)], &[5]),     // 4
            m("m5", &[("A", 2, Read)], &[6]),     // 5
            m("m10", &[("A", 2, Write)], &[8]),   // 6
            m("m7", &[], &[]),                    // 7
            m("m11", &[("A", 2, Read)], &[]),     // 8
        ];
        let (a, comps) = solve(&g).unwrap();
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        let cs = comps_of(&comps, "A");
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0].modules, vec![0, 1, 3, 4, 5]);
        assert!(
            !cs[0].modules.contains(&2),
            "side branch m3 is not in A's scope"
        );
        assert_eq!(cs[1].modules, vec![6, 8]);
        let first = at(&a, 0, 0);
        for i in [1, 4, 5] {
            assert_eq!(at(&a, i, 0), first);
        }
        assert_eq!(at(&a, 6, 0), at(&a, 8, 0));
        // The two lifetimes do not overlap, so the second reuses the same bytes.
        assert!(!overlap(cs[0], cs[1]));
        assert_eq!(at(&a, 6, 0), first);
        assert_eq!(a.bytes_used, 2);
    }

    #[test]
    fn a_second_lifetime_avoids_what_is_live_through_it() {
        // X is live from w through m10 to r; A's second lifetime (m10 -> m11) must avoid it,
        // but A's first lifetime (m1 -> m2) need not.
        let g = vec![
            m("w", &[("X", 2, Write)], &[1]),
            m("m1", &[("A", 2, Write)], &[2]),
            m("m2", &[("A", 2, Read)], &[3]),
            m("m10", &[("A", 2, Write)], &[4]),
            m("m11", &[("A", 2, Read)], &[5]),
            m("r", &[("X", 2, Read)], &[]),
        ];
        let (a, comps) = solve(&g).unwrap();
        check_components(&comps, a.bytes_used).unwrap();
        assert_ne!(at(&a, 3, 0), at(&a, 0, 0));
        assert_ne!(at(&a, 1, 0), at(&a, 0, 0));
        assert_eq!(at(&a, 0, 0), at(&a, 5, 0));
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
        assert_eq!(a.warnings.len(), 1);
        assert!(
            a.warnings[0].contains("'r'") && a.warnings[0].contains("'bar'"),
            "{:?}",
            a.warnings
        );
        assert_eq!(a.bytes_used, 0);
    }

    #[test]
    fn a_writer_on_only_one_path_is_not_enough() {
        let g = vec![
            m("s1", &[("foo", 1, Write)], &[2]),
            m("s2", &[], &[2]),
            m("r", &[("foo", 1, Read)], &[3]),
            m("r2", &[("foo", 1, Read)], &[]),
        ];
        let a = assign_offsets(&g).unwrap();
        assert_eq!(a.offsets[2][0], AttrOffset::NoRead);
        assert_eq!(a.offsets[3][0], AttrOffset::NoRead);
        assert_eq!(a.offsets[0][0], AttrOffset::NoWrite);
        assert_eq!(a.warnings.len(), 2);
        assert!(
            a.warnings[0].contains("'r'") && a.warnings[0].contains("'foo'"),
            "{:?}",
            a.warnings
        );
        // With a writer on the other path too, both reads are served.
        let mut g = g;
        g[1].attrs.push(AttrSpec {
            name: "foo".into(),
            size: 1,
            mode: Write,
        });
        let a = assign_offsets(&g).unwrap();
        assert!(a.warnings.is_empty());
        let o = at(&a, 0, 0);
        assert!([(1, 0), (2, 0), (3, 0)]
            .iter()
            .all(|&(i, k)| at(&a, i, k) == o));
    }

    #[test]
    fn an_update_without_a_writer_does_not_count_as_one() {
        // u updates 'c' but nothing sets it first: u and the reader below it are refused.
        let g = vec![
            m("src", &[], &[1]),
            m("u", &[("c", 4, Update)], &[2]),
            m("r", &[("c", 4, Read)], &[]),
        ];
        let a = assign_offsets(&g).unwrap();
        assert_eq!(a.offsets[1][0], AttrOffset::NoRead);
        assert_eq!(a.offsets[2][0], AttrOffset::NoRead);
        assert!(a.warnings[0].contains("'u' updates"), "{:?}", a.warnings);
        // With a writer in front, writer, updater and reader form one component.
        let g = vec![
            m("src", &[("c", 4, Write)], &[1]),
            m("u", &[("c", 4, Update)], &[2]),
            m("r", &[("c", 4, Read)], &[]),
        ];
        let (a, comps) = solve(&g).unwrap();
        assert_eq!(comps.len(), 1);
        assert_eq!(comps[0].modules, vec![0, 1, 2]);
        assert!((0..3).all(|i| at(&a, i, 0) == 0));
    }

    #[test]
    fn configuration_errors_name_module_and_attribute() {
        let e = assign_offsets(&[
            m("a0", &[("foo", 2, Write)], &[]),
            m("x", &[], &[]),
            m("b1", &[("foo", 4, Read)], &[]),
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "metadata attribute 'foo' is 2 bytes in module 'a0' but 4 bytes in module 'b1'"
        );
        let e = assign_offsets(&[m("a", &[("big", 33, Write)], &[])]).unwrap_err();
        assert_eq!(
            e,
            MetadataError::TooLarge {
                module: "a".into(),
                attr: "big".into(),
                size: 33
            }
        );
        assert!(e.to_string().contains("'big'") && e.to_string().contains("'a'"));
        let e = assign_offsets(&[m("a", &[("empty", 0, Read)], &[])]).unwrap_err();
        assert!(matches!(e, MetadataError::TooLarge { size: 0, .. }));

        let names: Vec<String> = (0..5).map(|i| format!("x{i}")).collect();
        let writes: Vec<(&str, usize, AccessMode)> =
            names.iter().map(|n| (n.as_str(), 32, Write)).collect();
        let reads: Vec<(&str, usize, AccessMode)> =
            names.iter().map(|n| (n.as_str(), 32, Read)).collect();
        let e = assign_offsets(&[m("w", &writes, &[1]), m("r", &reads, &[])]).unwrap_err();
        let MetadataError::NoSpace {
            ref attr, needed, ..
        } = e
        else {
            panic!("{e}")
        };
        assert_eq!(needed, 32);
        assert!(attr.starts_with('x'));
        assert!(
            e.to_string()
                .contains(&format!("no space for metadata attribute '{attr}'")),
            "{e}"
        );
        // Four fit exactly.
        let a = assign_offsets(&[m("w", &writes[..4], &[1]), m("r", &reads[..4], &[])]).unwrap();
        assert_eq!(a.bytes_used, 128);

        let many: Vec<String> = (0..17).map(|i| format!("y{i}")).collect();
        let many: Vec<(&str, usize, AccessMode)> =
            many.iter().map(|n| (n.as_str(), 1, Write)).collect();
        let e = assign_offsets(&[m("w", &many, &[])]).unwrap_err();
        assert_eq!(
            e,
            MetadataError::TooManyAttrs {
                module: "w".into(),
                count: 17
            }
        );
        assert!(assign_offsets(&[m("w", &many[..16], &[])]).is_ok());
    }

    #[test]
    fn cycles_terminate_with_valid_offsets() {
        // src -> a -> b -> c -> a, a self loop on b, plus a second attribute around the loop.
        let g = vec![
            m("src", &[("p", 1, Write)], &[1]),
            m("a", &[("p", 1, Update)], &[2]),
            m("b", &[("p", 1, Read), ("q", 2, Write)], &[3, 2, 2]),
            m("c", &[("q", 2, Read)], &[1, 4]),
            m("sink", &[("p", 1, Read)], &[]),
        ];
        let (a, comps) = solve(&g).unwrap();
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        check_components(&comps, a.bytes_used).unwrap();
        check_paths(&g, &a).unwrap();
        let o = at(&a, 0, 0);
        for (i, k) in [(1, 0), (2, 0), (4, 0)] {
            assert_eq!(at(&a, i, k), o);
        }
        assert_eq!(at(&a, 2, 1), at(&a, 3, 0));
        assert_ne!(at(&a, 2, 1), o, "q is written while p is live");
        // A loop with no source at all and no writer: the read is refused, nothing hangs.
        let g = vec![
            m("x", &[("p", 1, Read)], &[1]),
            m("y", &[("p", 1, Update)], &[0, 1]),
        ];
        let a = assign_offsets(&g).unwrap();
        assert_eq!(a.offsets[0][0], AttrOffset::NoRead);
        assert_eq!(a.offsets[1][0], AttrOffset::NoRead);
        assert_eq!(a.warnings.len(), 2);
    }

    #[test]
    fn offsets_are_aligned_to_size() {
        // 'one' overlaps everything, so it has the largest degree and is placed first, at 0; the
        // rest must skip past it to their alignment.
        let g = vec![
            m("w0", &[("one", 1, Write), ("z", 1, Write)], &[1]),
            m("w", &[("z", 1, Read)], &[2]),
            m(
                "w2",
                &[("four", 4, Write), ("three", 3, Write), ("eight", 8, Write)],
                &[3],
            ),
            m(
                "r",
                &[
                    ("one", 1, Read),
                    ("four", 4, Read),
                    ("three", 3, Read),
                    ("eight", 8, Read),
                ],
                &[],
            ),
        ];
        let (a, comps) = solve(&g).unwrap();
        check_components(&comps, a.bytes_used).unwrap();
        assert_eq!(at(&a, 0, 0), 0, "one");
        assert_eq!(at(&a, 0, 1), 1, "z");
        assert_eq!(at(&a, 1, 0), 1, "z");
        assert_eq!(at(&a, 2, 0), 4, "four: 4-aligned, past 'one'");
        assert_eq!(at(&a, 2, 2), 8, "eight: 8-aligned");
        assert_eq!(at(&a, 2, 1), 16, "three: 4-aligned, past the others");
        for k in 0..3 {
            assert_eq!(at(&a, 2, k), at(&a, 3, k + 1));
        }
        assert_eq!(a.bytes_used, 19);
    }

    #[test]
    fn large_graphs_are_assigned_correctly() {
        // 1000 modules in a pipeline with forward skips and back edges; 24 attributes each
        // written somewhere and read a few modules later.
        let n = 1000;
        let mut g: Vec<MetaModule> = (0..n)
            .map(|i| {
                let mut down = vec![];
                if i + 1 < n {
                    down.push(i + 1);
                }
                if i + 3 < n && i % 5 == 0 {
                    down.push(i + 3);
                }
                if i % 97 == 50 {
                    down.push(i - 40);
                }
                m(&format!("m{i}"), &[], &down)
            })
            .collect();
        for i in 0..n - 4 {
            let name = format!("a{}", i % 24);
            let size = [1, 2, 4][i % 3];
            g[i].attrs.push(AttrSpec {
                name: name.clone(),
                size,
                mode: Write,
            });
            g[i + 4].attrs.push(AttrSpec {
                name,
                size,
                mode: Read,
            });
        }
        // Correctness on a 1000-module graph; its speed is not asserted here (no timing in
        // unit tests), but the test would hang visibly if the assignment were quadratic-plus.
        let (a, comps) = solve(&g).unwrap();
        check_components(&comps, a.bytes_used).unwrap();
    }

    const NAMES: [(&str, usize); 5] = [("p", 1), ("q", 2), ("r", 4), ("s", 8), ("t", 3)];

    fn graph_strategy() -> impl Strategy<Value = Vec<MetaModule>> {
        (2usize..=12, 1usize..=3).prop_flat_map(|(n, nsrc)| {
            let nsrc = nsrc.min(n - 1);
            let module = (
                proptest::collection::vec((0usize..NAMES.len(), 0u8..3), 0..4),
                proptest::collection::vec(0usize..n, 0..4),
            );
            proptest::collection::vec(module, n).prop_map(move |mods| {
                mods.into_iter()
                    .enumerate()
                    .map(|(i, (attrs, down))| {
                        let mut seen = std::collections::HashSet::new();
                        let attrs = attrs
                            .into_iter()
                            .filter(|(k, _)| seen.insert(*k))
                            .map(|(k, mode)| AttrSpec {
                                name: NAMES[k].0.into(),
                                size: NAMES[k].1,
                                mode: [Read, Write, Update][mode as usize],
                            })
                            .collect();
                        // Modules 0..nsrc are sources: nobody feeds them. Anything may feed
                        // anything else, so loops, self-loops and duplicate edges all occur.
                        let down = down.into_iter().filter(|&d| d >= nsrc).collect();
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

    /// A byte of the simulated metadata area: which attribute's write last set it.
    type Tag = Option<(usize, u32)>;

    struct Sim<'a> {
        g: &'a [MetaModule],
        a: &'a MetaAssignment,
        next_write: u32,
        steps: usize,
    }

    impl Sim<'_> {
        /// Runs module `node` on one packet, then every module downstream, up to `hops` more.
        fn run(
            &mut self,
            node: usize,
            hops: usize,
            mem: &[Tag; METADATA_TOTAL_SIZE],
            last: &[Option<u32>; NAMES.len()],
        ) -> Result<(), String> {
            self.steps += 1;
            if self.steps > 20_000 {
                return Ok(());
            }
            let (mut mem, mut last) = (*mem, *last);
            let attr_id = |name: &str| NAMES.iter().position(|x| x.0 == name).unwrap();
            let me = &self.g[node];
            for (k, at) in me.attrs.iter().enumerate() {
                if at.mode == Write {
                    continue;
                }
                let id = attr_id(&at.name);
                if let AttrOffset::At(o) = self.a.offsets[node][k] {
                    let want = last[id].ok_or(format!(
                        "{} reads {} at {o} but nothing on this path wrote it",
                        me.name, at.name
                    ))?;
                    for (b, tag) in mem.iter().enumerate().skip(o as usize).take(at.size) {
                        if *tag != Some((id, want)) {
                            return Err(format!(
                                "{} reads {} at {o}: byte {b} holds {tag:?}, wanted write {want}",
                                me.name, at.name
                            ));
                        }
                    }
                }
            }
            for (k, at) in me.attrs.iter().enumerate() {
                if at.mode == Read {
                    continue;
                }
                let id = attr_id(&at.name);
                self.next_write += 1;
                last[id] = Some(self.next_write);
                if let AttrOffset::At(o) = self.a.offsets[node][k] {
                    for tag in mem.iter_mut().skip(o as usize).take(at.size) {
                        *tag = Some((id, self.next_write));
                    }
                }
            }
            if hops == 0 {
                return Ok(());
            }
            for &d in &me.downstream {
                self.run(d, hops - 1, &mem, &last)?;
            }
            Ok(())
        }
    }

    /// Walks every path (up to 10 hops) from every source, simulating the metadata bytes: a
    /// read with an offset must see the last write of that attribute on the path.
    fn check_paths(g: &[MetaModule], a: &MetaAssignment) -> Result<(), String> {
        let mut has_up = vec![false; g.len()];
        for mm in g {
            for &d in &mm.downstream {
                has_up[d] = true;
            }
        }
        let mut sim = Sim {
            g,
            a,
            next_write: 0,
            steps: 0,
        };
        for (s, &up) in has_up.iter().enumerate() {
            if !up {
                sim.steps = 0;
                sim.run(s, 10, &[None; METADATA_TOTAL_SIZE], &[None; NAMES.len()])?;
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn live_attributes_never_share_bytes(g in graph_strategy()) {
            let (a, comps) = solve(&g).unwrap();
            prop_assert!(a.bytes_used <= METADATA_TOTAL_SIZE);
            if let Err(e) = check_components(&comps, a.bytes_used) {
                prop_assert!(false, "{}", e);
            }
            if let Err(e) = check_paths(&g, &a) {
                prop_assert!(false, "{}", e);
            }
            // Every reader either has an offset or was warned about.
            for (i, mm) in g.iter().enumerate() {
                for (k, at) in mm.attrs.iter().enumerate() {
                    let o = a.offsets[i][k];
                    match at.mode {
                        Write => prop_assert!(o != AttrOffset::NoRead),
                        _ => {
                            let warned = a.warnings.iter().any(|w| {
                                w.contains(&format!("'{}'", mm.name))
                                    && w.contains(&format!("'{}'", at.name))
                            });
                            prop_assert!(o != AttrOffset::NoWrite);
                            prop_assert!(o != AttrOffset::NoRead || warned);
                        }
                    }
                }
            }
        }
    }
}
