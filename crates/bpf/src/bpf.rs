//! The few bpf(2) calls Bessemer makes, without libbpf: maps, hand-assembled programs, XDP
//! links and `BPF_PROG_TEST_RUN`. AFXDPPort uses it for its XSKMAP redirect program; the
//! port benchmark (`bench/src/bench_ports.rs`) for its live-frames generator, its XDP
//! counter at the sink and its in-kernel XDP_REDIRECT baseline.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use bessemer_core::error::os_error;
use bessemer_core::Result;

/// bpf(2) commands.
pub const BPF_MAP_CREATE: i32 = 0;
pub const BPF_MAP_LOOKUP_ELEM: i32 = 1;
pub const BPF_MAP_UPDATE_ELEM: i32 = 2;
pub const BPF_MAP_DELETE_ELEM: i32 = 3;
pub const BPF_MAP_GET_NEXT_KEY: i32 = 4;
pub const BPF_PROG_LOAD: i32 = 5;
pub const BPF_PROG_ATTACH: i32 = 8;
pub const BPF_PROG_DETACH: i32 = 9;
pub const BPF_PROG_TEST_RUN: i32 = 10;
pub const BPF_PROG_GET_FD_BY_ID: i32 = 13;
pub const BPF_MAP_GET_FD_BY_ID: i32 = 14;
pub const BPF_OBJ_GET_INFO_BY_FD: i32 = 15;
pub const BPF_PROG_QUERY: i32 = 16;
pub const BPF_LINK_CREATE: i32 = 28;
pub const BPF_LINK_DETACH: i32 = 34;
/// Map types.
pub const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
pub const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// Program types and attach types.
pub const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
pub const BPF_PROG_TYPE_XDP: u32 = 6;
pub const BPF_XDP: u32 = 37;
pub const BPF_TCX_INGRESS: u32 = 46;
pub const BPF_TCX_EGRESS: u32 = 47;
/// Program flag: the XDP program handles multi-buffer packets (jumbo frames; 5.18+).
pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
/// `src` of a 64-bit immediate load that names a map by fd.
pub const BPF_PSEUDO_MAP_FD: u8 = 1;
/// ld_imm64 source register: the immediate is a function (a bpf_loop callback).
pub const BPF_PSEUDO_FUNC: u8 = 4;
/// bpf(2) command: load BTF.
pub const BPF_BTF_LOAD: i32 = 18;
/// Helpers.
pub const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
pub const BPF_FUNC_REDIRECT: i32 = 23;
pub const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// XDP verdicts.
pub const XDP_DROP: i32 = 1;
pub const XDP_PASS: i32 = 2;
pub const XDP_TX: i32 = 3;
/// XDP attach flags.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `BPF_PROG_TEST_RUN` flag: XDP frames really leave through the redirect target (5.18+).
pub const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// `union bpf_attr`, as bytes: each command fills the few fields it needs, the rest is zero.
#[repr(C, align(8))]
pub struct Attr(pub [u8; 128]);

impl Default for Attr {
    fn default() -> Attr {
        Attr::new()
    }
}

impl Attr {
    pub fn new() -> Attr {
        Attr([0; 128])
    }
    pub fn u32(&mut self, off: usize, v: u32) -> &mut Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn u64(&mut self, off: usize, v: u64) -> &mut Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn get_u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.0[off..off + 4].try_into().expect("4 bytes"))
    }
    /// Calls bpf(`cmd`) with this attribute; the raw result (negative: see errno).
    pub fn call(&mut self, cmd: i32) -> i64 {
        // SAFETY: the attribute buffer is valid for its full size; the caller keeps the
        // memory its pointers name alive for the call.
        unsafe { libc::syscall(libc::SYS_bpf, cmd, self.0.as_mut_ptr(), self.0.len() as u32) }
    }
    /// Calls bpf(`cmd`) for a new fd, or the OS error prefixed with `what`.
    pub fn fd(&mut self, cmd: i32, what: &str) -> Result<OwnedFd> {
        let fd = self.call(cmd);
        if fd < 0 {
            return Err(os_error(what));
        }
        // SAFETY: a fresh fd returned by the kernel.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }
}

/// `struct bpf_insn`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

/// One instruction: opcode, destination and source registers, offset, immediate.
pub const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    // The register nibbles are a C bitfield: dst first, so its position follows endianness.
    let regs = if cfg!(target_endian = "little") {
        dst | (src << 4)
    } else {
        (dst << 4) | src
    };
    Insn {
        code,
        regs,
        off,
        imm,
    }
}

/// Creates a map of `ty` with `entries` entries of `key`/`value` bytes.
pub fn map_create(ty: u32, key: u32, value: u32, entries: u32, what: &str) -> Result<OwnedFd> {
    Attr::new()
        .u32(0, ty)
        .u32(4, key)
        .u32(8, value)
        .u32(12, entries)
        .fd(BPF_MAP_CREATE, what)
}

/// Sets `map[key] = value` (4-byte keys and values, as XSKMAP has).
pub fn map_update_u32(map: RawFd, key: u32, value: u32) -> i64 {
    Attr::new()
        .u32(0, map as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, &value as *const u32 as u64)
        .call(BPF_MAP_UPDATE_ELEM)
}

/// The CPUs a per-CPU map has a value for (`/sys/devices/system/cpu/possible`).
pub fn possible_cpus() -> usize {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    s.trim()
        .split(',')
        .filter_map(|r| {
            let mut it = r.split('-');
            let a: usize = it.next()?.trim().parse().ok()?;
            let b: usize = it.next().map_or(Some(a), |b| b.trim().parse().ok())?;
            Some(b + 1)
        })
        .max()
        .unwrap_or(1)
}

/// The sum over CPUs of entry `key` of a per-CPU map of u64 values.
pub fn percpu_u64_sum(map: RawFd, key: u32) -> Result<u64> {
    let mut vals = vec![0u64; possible_cpus()];
    let r = Attr::new()
        .u32(0, map as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, vals.as_mut_ptr() as u64)
        .call(BPF_MAP_LOOKUP_ELEM);
    if r < 0 {
        return Err(os_error("cannot read the per-CPU map (bpf)"));
    }
    Ok(vals.iter().sum())
}

/// Loads an XDP program (GPL) named `name`; on failure the error carries the verifier log.
pub fn load_xdp(prog: &[Insn], name: &str) -> Result<OwnedFd> {
    load_xdp_flags(prog, name, 0)
}

/// [`load_xdp`] with `prog_flags` (e.g. [`BPF_F_XDP_HAS_FRAGS`]).
pub fn load_xdp_flags(prog: &[Insn], name: &str, prog_flags: u32) -> Result<OwnedFd> {
    load_prog(BPF_PROG_TYPE_XDP, BPF_XDP, prog, name, prog_flags)
}

/// Loads a (GPL) program of type `prog_type` with `expected_attach_type`, named `name`; on
/// failure the error carries the verifier log.
pub fn load_prog(
    prog_type: u32,
    expected_attach_type: u32,
    prog: &[Insn],
    name: &str,
    prog_flags: u32,
) -> Result<OwnedFd> {
    load_prog_with(
        prog_type,
        expected_attach_type,
        prog,
        name,
        prog_flags,
        |_| {},
    )
}

fn load_prog_with(
    prog_type: u32,
    expected_attach_type: u32,
    prog: &[Insn],
    name: &str,
    prog_flags: u32,
    more: impl FnOnce(&mut Attr),
) -> Result<OwnedFd> {
    let license = b"GPL\0";
    let mut attr = Attr::new();
    attr.u32(0, prog_type)
        .u32(4, prog.len() as u32)
        .u64(8, prog.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(44, prog_flags)
        .u32(68, expected_attach_type);
    more(&mut attr);
    let n = name.len().min(15);
    attr.0[48..48 + n].copy_from_slice(&name.as_bytes()[..n]);
    let what = if prog_type == BPF_PROG_TYPE_XDP {
        "cannot load the XDP program (bpf)".to_string()
    } else {
        format!("cannot load BPF program '{name}' (bpf)")
    };
    match attr.fd(BPF_PROG_LOAD, &what) {
        Ok(fd) => Ok(fd),
        Err(mut e) => {
            // Load again with the verifier log, to say why (its end says what failed).
            let mut log = vec![0u8; 1 << 20];
            attr.u32(24, 1)
                .u32(28, log.len() as u32)
                .u64(32, log.as_mut_ptr() as u64);
            if attr.call(BPF_PROG_LOAD) < 0 {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]);
                let text = text.trim();
                if !text.is_empty() {
                    let tail = text.len().saturating_sub(3000);
                    let tail = (tail..text.len())
                        .find(|&i| text.is_char_boundary(i))
                        .unwrap_or(0);
                    e.msg += &format!("; verifier: {}", &text[tail..]);
                }
            }
            Err(e)
        }
    }
}

/// Loads BTF blob `btf` (for a program's `func_info`).
pub fn btf_load(btf: &[u8]) -> Result<OwnedFd> {
    let mut log = vec![0u8; 1 << 16];
    let mut attr = Attr::new();
    attr.u64(0, btf.as_ptr() as u64)
        .u64(8, log.as_mut_ptr() as u64)
        .u32(16, btf.len() as u32)
        .u32(20, log.len() as u32)
        .u32(24, 1);
    attr.fd(BPF_BTF_LOAD, "cannot load the program's BTF (bpf)")
        .map_err(|mut e| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            e.msg += &format!("; {}", String::from_utf8_lossy(&log[..end]).trim());
            e
        })
}

/// As [`load_prog`], with BTF `btf` and its `func_info` (insn_off, type_id pairs): for a
/// program with functions whose addresses it takes.
pub fn load_prog_btf(
    prog_type: u32,
    expected_attach_type: u32,
    prog: &[Insn],
    name: &str,
    prog_flags: u32,
    btf: RawFd,
    func_info: &[u32],
) -> Result<OwnedFd> {
    load_prog_with(
        prog_type,
        expected_attach_type,
        prog,
        name,
        prog_flags,
        |a| {
            a.u32(72, btf as u32)
                .u32(76, 8)
                .u64(80, func_info.as_ptr() as u64)
                .u32(88, (func_info.len() / 2) as u32);
        },
    )
}

/// Attaches XDP program `prog` to interface `ifindex` of the current namespace with a BPF
/// link (`flags`: XDP_FLAGS_*); closing the link, or [`link_detach`], detaches it.
pub fn link_xdp(prog: RawFd, ifindex: u32, flags: u32, what: &str) -> Result<OwnedFd> {
    Attr::new()
        .u32(0, prog as u32)
        .u32(4, ifindex)
        .u32(8, BPF_XDP)
        .u32(12, flags)
        .fd(BPF_LINK_CREATE, what)
}

/// Attaches program `prog` (SCHED_CLS) at TCX `attach_type` ([`BPF_TCX_INGRESS`] or
/// [`BPF_TCX_EGRESS`]) of interface `ifindex` with a link, behind the programs already there;
/// closing the link, or [`link_detach`], detaches it.
pub fn link_tcx(prog: RawFd, ifindex: u32, attach_type: u32, what: &str) -> Result<OwnedFd> {
    Attr::new()
        .u32(0, prog as u32)
        .u32(4, ifindex)
        .u32(8, attach_type)
        .fd(BPF_LINK_CREATE, what)
}

/// Attaches program `prog` at TCX `attach_type` of `ifindex` without a link: it stays until
/// [`tcx_detach`] or until the interface goes, whatever happens to this process.
pub fn tcx_attach(prog: RawFd, ifindex: u32, attach_type: u32, what: &str) -> Result<()> {
    let r = Attr::new()
        .u32(0, ifindex)
        .u32(4, prog as u32)
        .u32(8, attach_type)
        .call(BPF_PROG_ATTACH);
    if r < 0 {
        return Err(os_error(what));
    }
    Ok(())
}

/// Detaches program `prog` from TCX `attach_type` of `ifindex` (attached by [`tcx_attach`]).
pub fn tcx_detach(prog: RawFd, ifindex: u32, attach_type: u32, what: &str) -> Result<()> {
    let r = Attr::new()
        .u32(0, ifindex)
        .u32(4, prog as u32)
        .u32(8, attach_type)
        .call(BPF_PROG_DETACH);
    if r < 0 {
        return Err(os_error(what));
    }
    Ok(())
}

/// The ids of the programs at TCX `attach_type` of `ifindex`, in run order (at most 64).
pub fn tcx_query(ifindex: u32, attach_type: u32) -> Result<Vec<u32>> {
    let mut ids = vec![0u32; 64];
    let mut attr = Attr::new();
    attr.u32(0, ifindex)
        .u32(4, attach_type)
        .u64(16, ids.as_mut_ptr() as u64)
        .u32(24, ids.len() as u32);
    if attr.call(BPF_PROG_QUERY) < 0 {
        return Err(os_error("cannot list the interface's TCX programs (bpf)"));
    }
    ids.truncate((attr.get_u32(24) as usize).min(64));
    Ok(ids)
}

/// An fd for program `id`.
pub fn prog_by_id(id: u32) -> Result<OwnedFd> {
    Attr::new().u32(0, id).fd(
        BPF_PROG_GET_FD_BY_ID,
        &format!("cannot open BPF program {id}"),
    )
}

/// An fd for map `id`.
pub fn map_by_id(id: u32) -> Result<OwnedFd> {
    Attr::new()
        .u32(0, id)
        .fd(BPF_MAP_GET_FD_BY_ID, &format!("cannot open BPF map {id}"))
}

fn obj_info(fd: RawFd, info: &mut [u8]) -> Result<()> {
    let r = Attr::new()
        .u32(0, fd as u32)
        .u32(4, info.len() as u32)
        .u64(8, info.as_mut_ptr() as u64)
        .call(BPF_OBJ_GET_INFO_BY_FD);
    if r < 0 {
        return Err(os_error("cannot read a BPF object's information"));
    }
    Ok(())
}

fn name_at(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// A program's name and the ids of the maps it uses (`struct bpf_prog_info`).
pub fn prog_info(prog: RawFd) -> Result<(String, Vec<u32>)> {
    let mut ids = vec![0u32; 64];
    let mut info = [0u8; 128];
    info[52..56].copy_from_slice(&(ids.len() as u32).to_ne_bytes());
    info[56..64].copy_from_slice(&(ids.as_mut_ptr() as u64).to_ne_bytes());
    obj_info(prog, &mut info)?;
    let n = u32::from_ne_bytes(info[52..56].try_into().expect("4")) as usize;
    ids.truncate(n.min(64));
    Ok((name_at(&info[64..80]), ids))
}

/// A map's name (`struct bpf_map_info`).
pub fn map_name(map: RawFd) -> Result<String> {
    let mut info = [0u8; 96];
    obj_info(map, &mut info)?;
    Ok(name_at(&info[24..40]))
}

/// `map[key] = value` (any sizes; the map's).
pub fn map_update(map: RawFd, key: &[u8], value: &[u8], what: &str) -> Result<()> {
    let r = Attr::new()
        .u32(0, map as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_ptr() as u64)
        .call(BPF_MAP_UPDATE_ELEM);
    if r < 0 {
        return Err(os_error(what));
    }
    Ok(())
}

/// `map[key]` into `value` (its size must be the map's value size); false if absent.
pub fn map_lookup(map: RawFd, key: &[u8], value: &mut [u8]) -> Result<bool> {
    let r = Attr::new()
        .u32(0, map as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_mut_ptr() as u64)
        .call(BPF_MAP_LOOKUP_ELEM);
    if r < 0 {
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) {
            return Ok(false);
        }
        return Err(os_error("cannot read a BPF map entry"));
    }
    Ok(true)
}

/// Removes `map[key]` (absent: nothing to do).
pub fn map_delete(map: RawFd, key: &[u8]) -> Result<()> {
    let r = Attr::new()
        .u32(0, map as u32)
        .u64(8, key.as_ptr() as u64)
        .call(BPF_MAP_DELETE_ELEM);
    if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
        return Err(os_error("cannot delete a BPF map entry"));
    }
    Ok(())
}

/// Every key of hash map `map` (keys of `key_len` bytes), at most `max`.
pub fn map_keys(map: RawFd, key_len: usize, max: usize) -> Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    let mut cur: Option<Vec<u8>> = None;
    while keys.len() < max {
        let mut next = vec![0u8; key_len];
        let r = Attr::new()
            .u32(0, map as u32)
            .u64(8, cur.as_ref().map_or(0, |k| k.as_ptr() as u64))
            .u64(16, next.as_mut_ptr() as u64)
            .call(BPF_MAP_GET_NEXT_KEY);
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) {
                break;
            }
            return Err(os_error("cannot list a BPF map's keys"));
        }
        keys.push(next.clone());
        cur = Some(next);
    }
    Ok(keys)
}

/// Detaches a link's program now (closing the link fd may detach it later).
pub fn link_detach(link: &OwnedFd) {
    Attr::new()
        .u32(0, link.as_raw_fd() as u32)
        .call(BPF_LINK_DETACH);
}

/// An XDP program attached with a link; dropping it detaches the program synchronously.
pub struct XdpLink {
    link: OwnedFd,
    _prog: OwnedFd,
}

impl XdpLink {
    /// Attaches `prog` to `ifindex` in native (driver) mode, or generic mode if the driver
    /// has none.
    pub fn attach(prog: OwnedFd, ifindex: u32, what: &str) -> Result<XdpLink> {
        let link = match link_xdp(prog.as_raw_fd(), ifindex, XDP_FLAGS_DRV_MODE, what) {
            Err(e) if e.code == libc::EOPNOTSUPP || e.code == libc::EINVAL => {
                link_xdp(prog.as_raw_fd(), ifindex, XDP_FLAGS_SKB_MODE, what)?
            }
            other => other?,
        };
        Ok(XdpLink { link, _prog: prog })
    }
}

impl Drop for XdpLink {
    fn drop(&mut self) {
        link_detach(&self.link);
    }
}

/// `return verdict;`
pub fn prog_verdict(verdict: i32) -> [Insn; 2] {
    [insn(0xb7, 0, 0, 0, verdict), insn(0x95, 0, 0, 0, 0)]
}

/// `return bpf_redirect(ifindex, 0);`
pub fn prog_redirect(ifindex: u32) -> [Insn; 4] {
    [
        insn(0xb7, 1, 0, 0, ifindex as i32), // r1 = ifindex
        insn(0xb7, 2, 0, 0, 0),              // r2 = 0 (flags)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT),
        insn(0x95, 0, 0, 0, 0),
    ]
}

/// A traffic generator's program for [`xdp_live_frames`]: steps the low 3 bits of the UDP
/// source port of an untagged IPv4 frame without IP options (byte 35) on every run, over
/// `flows` (a power of two, at most 256) values, and returns XDP_TX. Live frames keep their
/// contents between runs, so each buffer of the kernel's page pool cycles through the flows.
pub fn prog_tx_flows(flows: u32) -> [Insn; 11] {
    let mask = flows.next_power_of_two().clamp(1, 256) as i32 - 1;
    [
        insn(0x61, 2, 1, 0, 0),      // r2 = ctx->data
        insn(0x61, 3, 1, 4, 0),      // r3 = ctx->data_end
        insn(0xbf, 4, 2, 0, 0),      // r4 = r2
        insn(0x07, 4, 0, 0, 42),     // r4 += 42 (Ethernet + IPv4 + UDP)
        insn(0x2d, 4, 3, 4, 0),      // if r4 > r3 goto +4
        insn(0x71, 5, 2, 35, 0),     // r5 = *(u8 *)(r2 + 35)
        insn(0x07, 5, 0, 0, 1),      // r5 += 1
        insn(0x57, 5, 0, 0, mask),   // r5 &= mask
        insn(0x73, 2, 5, 35, 0),     // *(u8 *)(r2 + 35) = r5
        insn(0xb7, 0, 0, 0, XDP_TX), // r0 = XDP_TX
        insn(0x95, 0, 0, 0, 0),      // exit
    ]
}

/// `u64 *n = bpf_map_lookup_elem(&counts, &(u32){0}); if (n) *n += 1; return XDP_DROP;` on a
/// one-entry per-CPU array `map_fd` (per-CPU, so the add needs no atomic).
pub fn prog_count_drop(map_fd: RawFd) -> [Insn; 12] {
    [
        insn(0x62, 10, 0, -4, 0),                      // *(u32 *)(r10 - 4) = 0
        insn(0xbf, 2, 10, 0, 0),                       // r2 = r10
        insn(0x07, 2, 0, 0, -4),                       // r2 += -4
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),   // r1 = &counts (64-bit immediate...)
        insn(0, 0, 0, 0, 0),                           // (...its upper half)
        insn(0x85, 0, 0, 0, BPF_FUNC_MAP_LOOKUP_ELEM), // r0 = bpf_map_lookup_elem(r1, r2)
        insn(0x15, 0, 0, 3, 0),                        // if r0 == 0 goto +3
        insn(0x79, 1, 0, 0, 0),                        // r1 = *(u64 *)(r0 + 0)
        insn(0x07, 1, 0, 0, 1),                        // r1 += 1
        insn(0x7b, 0, 1, 0, 0),                        // *(u64 *)(r0 + 0) = r1
        insn(0xb7, 0, 0, 0, XDP_DROP),                 // r0 = XDP_DROP
        insn(0x95, 0, 0, 0, 0),                        // exit
    ]
}

/// Runs XDP program `prog` `repeat` times on `frame` with `BPF_F_TEST_XDP_LIVE_FRAMES`, as if
/// received on `ifindex` (of the calling thread's namespace): frames the program sends on
/// (XDP_TX, XDP_REDIRECT) really leave. `batch` frames per batch (0: the kernel's 64).
/// Returns after all repeats, or early on a signal; the kernel does not say how many ran.
/// Each call enters the program into the kernel's XDP dispatcher and takes it out again,
/// two RCU grace periods (milliseconds) per call, unless the program is also attached in
/// native mode to some interface (then it is in the dispatcher already).
pub fn xdp_live_frames(
    prog: RawFd,
    frame: &[u8],
    ifindex: u32,
    repeat: u32,
    batch: u32,
) -> Result<()> {
    // struct xdp_md { data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress }
    let mut ctx = [0u32; 6];
    ctx[1] = frame.len() as u32;
    ctx[3] = ifindex;
    let r = Attr::new()
        .u32(0, prog as u32)
        .u32(8, frame.len() as u32)
        .u64(16, frame.as_ptr() as u64)
        .u32(32, repeat)
        .u32(40, std::mem::size_of_val(&ctx) as u32)
        .u64(48, ctx.as_ptr() as u64)
        .u32(64, BPF_F_TEST_XDP_LIVE_FRAMES)
        .u32(72, batch)
        .call(BPF_PROG_TEST_RUN);
    if r < 0 {
        return Err(os_error(
            "BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES failed",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_program_encodes_as_the_kernel_expects() {
        let p = prog_count_drop(9);
        // SAFETY: Insn is 8 plain bytes.
        let bytes: [u8; 96] = unsafe { std::mem::transmute(p) };
        assert_eq!(&bytes[0..8], &[0x62, 0x0a, 0xfc, 0xff, 0, 0, 0, 0]);
        assert_eq!(&bytes[8..16], &[0xbf, 0xa2, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[24..32], &[0x18, 0x11, 0, 0, 9, 0, 0, 0]);
        assert_eq!(&bytes[48..56], &[0x15, 0, 3, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[72..80], &[0x7b, 0x10, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn possible_cpus_is_at_least_one() {
        assert!(possible_cpus() >= 1);
    }
}
