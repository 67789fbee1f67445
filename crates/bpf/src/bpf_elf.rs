//! A small loader for the clang-built XDP programs (`bpf/*.bpf.c`): reads the ELF object,
//! creates the maps of its `maps` section (or reuses maps the caller already has, such as an
//! AFXDPPort's XSKMAP), patches the programs' map references and loads one program.
//!
//! Why not libbpf-rs or aya: the objects are ours and use one feature of the format, maps
//! referenced by 64-bit immediate loads (`R_BPF_64_64` relocations against symbols of the
//! legacy `maps` section, 20-byte definitions). That is a hundred lines over the bpf(2)
//! layer [`crate::bpf`] already has, where libbpf-rs would build libbpf and libelf from C
//! (libbpf-sys) into every build of the drivers crate, and aya would add a large dependency
//! tree, on a shared 2-core build machine; and neither would make the crate build without
//! the C toolchain pieces any easier. One more feature: static functions in `.text` whose
//! address a program takes (`bpf_loop` callbacks): they are appended to the program, the
//! address becomes a BPF_PSEUDO_FUNC load, and the BTF the kernel then needs (one FUNC per
//! function, for `func_info`) is built here. CO-RE, global data, calls to `.text` functions
//! (clang inlines `always_inline` ones) and tail calls are not supported and are refused
//! with an error naming them.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use bessemer_core::{Error, Result};

use crate::bpf::{self, Attr, Insn, BPF_MAP_CREATE, BPF_PSEUDO_FUNC, BPF_PSEUDO_MAP_FD};

const SHT_SYMTAB: u32 = 2;
const SHT_REL: u32 = 9;
const R_BPF_64_64: u32 = 1;
/// Size of one map definition in the `maps` section.
const MAP_DEF: usize = 20;

/// A map the object defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapDef {
    pub name: String,
    pub ty: u32,
    pub key: u32,
    pub value: u32,
    pub entries: u32,
    pub flags: u32,
}

/// One program section: its instructions and, per instruction index, the map it names.
#[derive(Clone, Debug)]
pub struct ProgSection {
    pub name: String,
    pub insns: Vec<Insn>,
    pub relocs: Vec<(usize, String)>,
    /// Per 64-bit immediate load of a function's address: its index and the function's byte
    /// offset in `.text`.
    pub funcs: Vec<(usize, usize)>,
}

/// A parsed object.
#[derive(Clone, Debug)]
pub struct Object {
    pub maps: Vec<MapDef>,
    pub progs: Vec<ProgSection>,
    /// The functions of `.text`: name and byte offset.
    pub text_funcs: Vec<(String, usize)>,
}

fn bad(what: &str) -> Error {
    Error::invalid(format!("BPF object: {what}"))
}

fn u16_at(b: &[u8], o: usize) -> Result<u16> {
    b.get(o..o + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| bad("truncated"))
}
fn u32_at(b: &[u8], o: usize) -> Result<u32> {
    b.get(o..o + 4)
        .map(|s| u32::from_le_bytes(s.try_into().expect("4")))
        .ok_or_else(|| bad("truncated"))
}
fn u64_at(b: &[u8], o: usize) -> Result<u64> {
    b.get(o..o + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8")))
        .ok_or_else(|| bad("truncated"))
}

struct Section {
    name: String,
    ty: u32,
    off: usize,
    size: usize,
    link: u32,
    info: u32,
}

fn cstr(b: &[u8], o: usize) -> String {
    let s = b.get(o..).unwrap_or(&[]);
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    String::from_utf8_lossy(&s[..end]).into_owned()
}

impl Object {
    /// Parses a little-endian ELF64 BPF object.
    pub fn parse(b: &[u8]) -> Result<Object> {
        if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
            return Err(bad("not a little-endian ELF64 file"));
        }
        if u16_at(b, 18)? != 247 {
            return Err(bad("not a BPF object (e_machine is not EM_BPF)"));
        }
        let shoff = u64_at(b, 0x28)? as usize;
        let shentsize = u16_at(b, 0x3a)? as usize;
        let shnum = u16_at(b, 0x3c)? as usize;
        let shstrndx = u16_at(b, 0x3e)? as usize;
        if shentsize < 64 || shnum == 0 || shstrndx >= shnum {
            return Err(bad("bad section header table"));
        }
        let mut raw = Vec::with_capacity(shnum);
        for i in 0..shnum {
            let h = shoff + i * shentsize;
            raw.push((
                u32_at(b, h)?,
                u32_at(b, h + 4)?,
                u64_at(b, h + 24)? as usize,
                u64_at(b, h + 32)? as usize,
                u32_at(b, h + 40)?,
                u32_at(b, h + 44)?,
            ));
        }
        let strtab = raw[shstrndx].2;
        let secs: Vec<Section> = raw
            .iter()
            .map(|&(name, ty, off, size, link, info)| Section {
                name: cstr(b, strtab + name as usize),
                ty,
                off,
                size,
                link,
                info,
            })
            .collect();
        for s in &secs {
            if s.ty != 8 && s.off.checked_add(s.size).is_none_or(|e| e > b.len()) {
                return Err(bad(&format!("section '{}' lies outside the file", s.name)));
            }
        }
        let data = |s: &Section| &b[s.off..s.off + s.size];
        let symtab = secs
            .iter()
            .find(|s| s.ty == SHT_SYMTAB)
            .ok_or_else(|| bad("no symbol table"))?;
        let symstr = secs
            .get(symtab.link as usize)
            .ok_or_else(|| bad("bad symbol string table"))?;
        // Symbols: (name, section index, value); and the functions (STT_FUNC).
        let syms: Vec<(String, usize, usize)> = data(symtab)
            .chunks_exact(24)
            .map(|e| {
                let name = u32::from_le_bytes(e[0..4].try_into().expect("4")) as usize;
                let shndx = u16::from_le_bytes([e[6], e[7]]) as usize;
                let value = u64::from_le_bytes(e[8..16].try_into().expect("8")) as usize;
                (cstr(b, symstr.off + name), shndx, value)
            })
            .collect();
        let text_idx = secs.iter().position(|s| s.name == ".text");
        let mut text_funcs: Vec<(String, usize)> = data(symtab)
            .chunks_exact(24)
            .zip(&syms)
            .filter(|(e, s)| e[4] & 0x0f == 2 && Some(s.1) == text_idx)
            .map(|(_, s)| (s.0.clone(), s.2))
            .collect();
        text_funcs.sort_by_key(|f| f.1);
        let maps_idx = secs.iter().position(|s| s.name == "maps");
        let mut maps = Vec::new();
        let mut map_at = HashMap::new();
        if let Some(mi) = maps_idx {
            let md = data(&secs[mi]);
            let mut defs: Vec<&(String, usize, usize)> = syms
                .iter()
                .filter(|s| s.1 == mi && !s.0.is_empty())
                .collect();
            defs.sort_by_key(|s| s.2);
            for (name, _, at) in defs {
                let d = md
                    .get(*at..at + MAP_DEF)
                    .ok_or_else(|| bad(&format!("map '{name}' definition truncated")))?;
                let f = |i: usize| u32::from_le_bytes(d[i * 4..i * 4 + 4].try_into().expect("4"));
                map_at.insert(*at, name.clone());
                maps.push(MapDef {
                    name: name.clone(),
                    ty: f(0),
                    key: f(1),
                    value: f(2),
                    entries: f(3),
                    flags: f(4),
                });
            }
        }
        let mut progs = Vec::new();
        for (i, s) in secs.iter().enumerate() {
            // Executable (SHF_EXECINSTR) sections with code are programs.
            let flags = u64_at(b, shoff + i * shentsize + 8)?;
            if flags & 4 == 0 || s.size == 0 {
                continue;
            }
            let insns: Vec<Insn> = data(s)
                .chunks_exact(8)
                .map(|c| Insn {
                    code: c[0],
                    regs: c[1],
                    off: i16::from_le_bytes([c[2], c[3]]),
                    imm: i32::from_le_bytes(c[4..8].try_into().expect("4")),
                })
                .collect();
            let mut relocs = Vec::new();
            let mut funcs = Vec::new();
            for r in secs
                .iter()
                .filter(|r| r.ty == SHT_REL && r.info as usize == i)
            {
                for e in data(r).chunks_exact(16) {
                    let off = u64::from_le_bytes(e[0..8].try_into().expect("8")) as usize;
                    let info = u64::from_le_bytes(e[8..16].try_into().expect("8"));
                    let (sym, ty) = ((info >> 32) as usize, info as u32);
                    let (sname, shndx, value) = syms
                        .get(sym)
                        .ok_or_else(|| bad("relocation against a missing symbol"))?;
                    let at = off / 8;
                    let ld64 =
                        off.is_multiple_of(8) && at + 1 < insns.len() && insns[at].code == 0x18;
                    if ty == R_BPF_64_64 && Some(*shndx) == text_idx && ld64 {
                        // A function's address (a bpf_loop callback): against the section
                        // symbol the offset is the load's immediate.
                        funcs.push((at, *value + insns[at].imm as u32 as usize));
                        continue;
                    }
                    if ty != R_BPF_64_64 || Some(*shndx) != maps_idx {
                        return Err(bad(&format!(
                            "section '{}' refers to '{sname}' in section '{}': only maps in \
                             the 'maps' section are supported (no global data, subprograms, BTF)",
                            s.name,
                            secs.get(*shndx).map_or("?", |x| x.name.as_str())
                        )));
                    }
                    let map = map_at
                        .get(value)
                        .ok_or_else(|| bad(&format!("'{sname}' is not a map definition")))?;
                    if !ld64 {
                        return Err(bad(&format!(
                            "relocation of '{sname}' is not on a 64-bit immediate load"
                        )));
                    }
                    relocs.push((at, map.clone()));
                }
            }
            progs.push(ProgSection {
                name: s.name.clone(),
                insns,
                relocs,
                funcs,
            });
        }
        Ok(Object {
            maps,
            progs,
            text_funcs,
        })
    }
}

/// A loaded program with its maps.
pub struct Loaded {
    pub prog: OwnedFd,
    /// Each map by name: its fd (owned here unless the caller lent it).
    maps: HashMap<String, RawFd>,
    _owned: Vec<OwnedFd>,
}

impl Loaded {
    /// The fds of the program and its maps, which it keeps open (the fds stay valid as long
    /// as this value lives).
    pub fn into_parts(self) -> (OwnedFd, Vec<(String, OwnedFd)>) {
        let mut owned = self._owned;
        let mut named = Vec::new();
        for (name, fd) in &self.maps {
            if let Some(i) = owned.iter().position(|o| o.as_raw_fd() == *fd) {
                named.push((name.clone(), owned.swap_remove(i)));
            }
        }
        (self.prog, named)
    }

    /// The fd of map `name`.
    pub fn map(&self, name: &str) -> Result<RawFd> {
        self.maps
            .get(name)
            .copied()
            .ok_or_else(|| bad(&format!("no map '{name}'")))
    }
}

/// Creates the maps of `obj` (except those in `reuse`, by name) and loads XDP program
/// section `section` with `prog_flags`, named `name` in the kernel.
pub fn load_xdp(
    obj: &Object,
    section: &str,
    name: &str,
    reuse: &[(&str, RawFd)],
    prog_flags: u32,
) -> Result<Loaded> {
    load(
        obj,
        section,
        name,
        bpf::BPF_PROG_TYPE_XDP,
        bpf::BPF_XDP,
        reuse,
        prog_flags,
    )
}

/// Creates the maps program section `section` of `obj` uses (except those in `reuse`, by
/// name) and loads it as a program of `prog_type` with `expected_attach_type` and
/// `prog_flags`, named `name` in the kernel. Maps only other sections use are not created,
/// so one object can hold programs for different places, each with its own maps.
pub fn load(
    obj: &Object,
    section: &str,
    name: &str,
    prog_type: u32,
    expected_attach_type: u32,
    reuse: &[(&str, RawFd)],
    prog_flags: u32,
) -> Result<Loaded> {
    let prog = obj
        .progs
        .iter()
        .find(|p| p.name == section)
        .ok_or_else(|| bad(&format!("no program section '{section}'")))?;
    // Functions whose address the program takes: `.text` goes after the program.
    let text = if prog.funcs.is_empty() {
        None
    } else {
        Some(
            obj.progs
                .iter()
                .find(|p| p.name == ".text")
                .ok_or_else(|| bad("a function's address is taken but there is no .text"))?,
        )
    };
    if text.is_some_and(|t| !t.funcs.is_empty()) {
        return Err(bad(
            ".text functions taking function addresses are not supported",
        ));
    }
    let mut relocs = prog.relocs.clone();
    if let Some(t) = text {
        relocs.extend(
            t.relocs
                .iter()
                .map(|(at, m)| (at + prog.insns.len(), m.clone())),
        );
    }
    let mut maps = HashMap::new();
    let mut owned = Vec::new();
    for m in &obj.maps {
        if !relocs.iter().any(|(_, n)| *n == m.name) {
            continue;
        }
        if let Some((_, fd)) = reuse.iter().find(|(n, _)| *n == m.name) {
            maps.insert(m.name.clone(), *fd);
            continue;
        }
        let mut attr = Attr::new();
        attr.u32(0, m.ty)
            .u32(4, m.key)
            .u32(8, m.value)
            .u32(12, m.entries)
            .u32(16, m.flags);
        let n = m.name.len().min(15);
        attr.0[28..28 + n].copy_from_slice(&m.name.as_bytes()[..n]);
        let fd = attr.fd(
            BPF_MAP_CREATE,
            &format!("cannot create BPF map '{}' (bpf)", m.name),
        )?;
        maps.insert(m.name.clone(), fd.as_raw_fd());
        owned.push(fd);
    }
    let mut insns = prog.insns.clone();
    let base = insns.len();
    if let Some(t) = text {
        insns.extend_from_slice(&t.insns);
    }
    for &(at, off) in &prog.funcs {
        if !off.is_multiple_of(8) || !obj.text_funcs.iter().any(|f| f.1 == off) {
            return Err(bad("a function address that is not a .text function"));
        }
        // BPF_PSEUDO_FUNC: imm = the function's first instruction relative to the next one.
        insns[at].regs = (insns[at].regs & 0x0f) | (BPF_PSEUDO_FUNC << 4);
        insns[at].imm = (base + off / 8) as i32 - at as i32 - 1;
        insns[at + 1].imm = 0;
    }
    for (at, map) in &relocs {
        let fd = maps[map];
        // The loader's half of the ld_imm64 contract: src = BPF_PSEUDO_MAP_FD, imm = fd.
        insns[*at].regs = (insns[*at].regs & 0x0f) | (BPF_PSEUDO_MAP_FD << 4);
        insns[*at].imm = fd;
        insns[*at + 1].imm = 0;
    }
    let fd = match text {
        None => bpf::load_prog(prog_type, expected_attach_type, &insns, name, prog_flags)?,
        Some(_) => {
            // The kernel wants BTF for a program whose function addresses are taken: one
            // static FUNC per function, and where each starts.
            let mut funcs = vec![(section.replace(['.', '/'], "_"), 0usize)];
            funcs.extend(
                obj.text_funcs
                    .iter()
                    .map(|(n, off)| (n.clone(), base + off / 8)),
            );
            let btf = bpf::btf_load(&btf_funcs(&funcs))?;
            let info: Vec<u32> = funcs
                .iter()
                .enumerate()
                .flat_map(|(i, f)| [f.1 as u32, 2 + i as u32])
                .collect();
            bpf::load_prog_btf(
                prog_type,
                expected_attach_type,
                &insns,
                name,
                prog_flags,
                btf.as_raw_fd(),
                &info,
            )?
        }
    };
    Ok(Loaded {
        prog: fd,
        maps,
        _owned: owned,
    })
}

/// A BTF blob with one static FUNC per (name, _) of `funcs`, types 2.., each of one
/// prototype (type 1: `void (void)`; the verifier takes a static function's arguments from
/// the code, not from BTF).
fn btf_funcs(funcs: &[(String, usize)]) -> Vec<u8> {
    const FUNC_PROTO: u32 = 13;
    const FUNC: u32 = 12;
    let mut strs = vec![0u8];
    let mut types: Vec<u32> = vec![0, FUNC_PROTO << 24, 0];
    for (name, _) in funcs {
        let at = strs.len() as u32;
        strs.extend_from_slice(name.as_bytes());
        strs.push(0);
        // Linkage 0: static.
        types.extend_from_slice(&[at, FUNC << 24, 1]);
    }
    let tbytes: Vec<u8> = types.iter().flat_map(|t| t.to_le_bytes()).collect();
    let mut b = Vec::new();
    b.extend_from_slice(&0xeb9fu16.to_le_bytes());
    b.push(1); // version
    b.push(0); // flags
    b.extend_from_slice(&24u32.to_le_bytes()); // header length
    b.extend_from_slice(&0u32.to_le_bytes()); // types offset
    b.extend_from_slice(&(tbytes.len() as u32).to_le_bytes());
    b.extend_from_slice(&(tbytes.len() as u32).to_le_bytes()); // strings offset
    b.extend_from_slice(&(strs.len() as u32).to_le_bytes());
    b.extend_from_slice(&tbytes);
    b.extend_from_slice(&strs);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_bpf_object() {
        assert!(Object::parse(b"hello").is_err());
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[18] = 62; // x86-64
        let e = Object::parse(&elf).unwrap_err();
        assert!(e.msg.contains("EM_BPF"), "{}", e.msg);
    }
}
