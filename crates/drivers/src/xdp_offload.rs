//! The XDP offload program (`bpf/offload.bpf.c`, built by clang in build.rs) and its maps:
//! load it, fill the key layout, the rules, the devmap, read the per-CPU counters, and put it
//! on an AFXDPPort's interface in place of the port's redirect program.
//!
//! The byte layouts of the maps' values are the planner's (`bessemer_planner::offload`);
//! this file only moves bytes, so the drivers crate does not depend on the planner.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Weak};

use bessemer_core::{Error, Result};

use crate::af_xdp_port::{OffloadTarget, Restorer};
use crate::bpf::{self, map_update, Attr, BPF_F_XDP_HAS_FRAGS};
use crate::bpf_elf::{self, Loaded, Object};
use crate::netns;

/// The clang-built object (empty when clang was missing at build time).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/offload.bpf.o"));

/// Bytes of an ExactMatch rule key, of an action, of the configuration, of a rewrite
/// program (the C structs' sizes).
pub const KEY_BYTES: usize = 32;
pub const ACTION_BYTES: usize = 24;
pub const CONFIG_BYTES: usize = 404;
pub const PROG_BYTES: usize = 292;
/// Bytes of a BPF classifier filter (the C `struct cbpf_prog`); its slots (two banks).
pub const CBPF_BYTES: usize = 2056;
pub const CBPF_SLOTS: u32 = 64;
/// The maps holding rules: ExactMatch's, IPLookup's LPM trie, WildcardMatch's.
pub const RULE_MAPS: [&str; 3] = ["rules", "lpm", "wrules"];
/// Rules the `rules` map holds; counter slots; devmap slots.
pub const MAX_RULES: u32 = 65536;
pub const COUNTER_SLOTS: u32 = 65540;
pub const DEV_SLOTS: u32 = 64;

/// Why the offload cannot be used in this build, if it cannot.
pub fn unavailable() -> Option<String> {
    if let Some(why) = option_env!("BESSEMER_OFFLOAD_UNAVAILABLE") {
        return Some(format!("XDP offload unavailable: {why}"));
    }
    if OBJECT.is_empty() {
        return Some("XDP offload unavailable: the program was not built (clang missing; install the 'clang' package and rebuild)".into());
    }
    None
}

/// The loaded program with its maps; dropping it puts the port's own program back.
pub struct XdpOffload {
    loaded: Loaded,
    target: Option<Weak<OffloadTarget>>,
    /// Puts the port's program back, even when the port is gone but its interface's
    /// program lives on (another AFXDPPort on the same interface).
    restorer: Option<Restorer>,
    installed: bool,
}

impl XdpOffload {
    /// Loads the program. With `target`, it reuses the port's XSKMAP (packets it sends up go
    /// to the port's sockets) and matches its multi-buffer mode; without, it has an XSKMAP
    /// of its own (tests that run it with BPF_PROG_TEST_RUN).
    pub fn load(target: Option<&Arc<OffloadTarget>>) -> Result<XdpOffload> {
        if let Some(why) = unavailable() {
            return Err(Error::unsupported(why));
        }
        let obj = Object::parse(OBJECT)?;
        let reuse: Vec<(&str, RawFd)> = target.map_or(vec![], |t| vec![("xsks", t.xskmap())]);
        let frags = target.is_some_and(|t| t.frags());
        let flags = if frags { BPF_F_XDP_HAS_FRAGS } else { 0 };
        let loaded = bpf_elf::load_xdp(&obj, "xdp", "bessemer_offl", &reuse, flags)?;
        Ok(XdpOffload {
            loaded,
            target: target.map(Arc::downgrade),
            restorer: target.map(|t| t.restorer()),
            installed: false,
        })
    }

    /// The program's fd.
    pub fn prog(&self) -> RawFd {
        self.loaded.prog.as_raw_fd()
    }

    /// Puts the program on the target port's interface (atomically replacing its program).
    pub fn install(&mut self) -> Result<()> {
        let t = self.target()?;
        t.install(self.prog())?;
        self.installed = true;
        Ok(())
    }

    /// Puts the port's own program back.
    pub fn uninstall(&mut self) -> Result<()> {
        if self.installed {
            self.installed = false;
            if let Some(r) = &self.restorer {
                r.restore()?;
            }
        }
        Ok(())
    }

    fn target(&self) -> Result<Arc<OffloadTarget>> {
        self.target
            .as_ref()
            .and_then(Weak::upgrade)
            .ok_or_else(|| Error::not_found("the offload's AFXDPPort is gone"))
    }

    /// Whether the port it was loaded for still exists.
    pub fn port_alive(&self) -> bool {
        self.target.as_ref().is_some_and(|w| w.strong_count() > 0)
    }

    /// Writes the configuration (key layout and default action).
    pub fn set_config(&self, cfg: &[u8; CONFIG_BYTES]) -> Result<()> {
        map_update(
            self.loaded.map("config")?,
            &0u32.to_ne_bytes(),
            cfg,
            "cannot write the offload configuration map",
        )
    }

    /// Adds or replaces a rule of rule map `map` (one of [`RULE_MAPS`]; the key is that
    /// map's key layout).
    pub fn put_rule(&self, map: &str, key: &[u8], action: &[u8; ACTION_BYTES]) -> Result<()> {
        map_update(
            self.rule_map(map)?,
            key,
            action,
            "cannot write an offload rule (is the map full?)",
        )
    }

    /// Removes a rule of rule map `map` (absent: nothing to do).
    pub fn delete_rule(&self, map: &str, key: &[u8]) -> Result<()> {
        bpf::map_delete(self.rule_map(map)?, key)
    }

    fn rule_map(&self, map: &str) -> Result<RawFd> {
        if !RULE_MAPS.contains(&map) {
            return Err(Error::invalid(format!(
                "'{map}' is not an offload rule map"
            )));
        }
        self.loaded.map(map)
    }

    /// Writes rewrite program slot `slot`.
    pub fn set_prog(&self, slot: u32, prog: &[u8; PROG_BYTES]) -> Result<()> {
        map_update(
            self.loaded.map("progs")?,
            &slot.to_ne_bytes(),
            prog,
            "cannot write an offload rewrite program",
        )
    }

    /// Writes BPF classifier filter slot `slot` (the C `struct cbpf_prog`).
    pub fn set_filter(&self, slot: u32, filter: &[u8; CBPF_BYTES]) -> Result<()> {
        map_update(
            self.loaded.map("cbpf")?,
            &slot.to_ne_bytes(),
            filter,
            "cannot write an offload BPF filter",
        )
    }

    /// Points devmap slot `slot` at interface `ifindex` of namespace `ns` (the kernel
    /// resolves the index in the caller's namespace).
    pub fn set_dev(&self, slot: u32, ifindex: u32, ns: &str) -> Result<()> {
        let map = self.loaded.map("devs")?;
        netns::run_in(ns, || {
            map_update(
                map,
                &slot.to_ne_bytes(),
                &ifindex.to_ne_bytes(),
                &format!("cannot put interface {ifindex} in the offload's devmap"),
            )
        })
    }

    /// Counter slot `slot`: (packets, bytes), summed over CPUs.
    pub fn counter(&self, slot: u32) -> Result<(u64, u64)> {
        let n = bpf::possible_cpus();
        // Per-CPU values: (packets, bytes) for each possible CPU.
        let mut v = vec![0u8; 16 * n];
        bpf::map_lookup(self.loaded.map("counters")?, &slot.to_ne_bytes(), &mut v)?;
        let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().expect("8 bytes"));
        Ok(v.chunks_exact(16)
            .fold((0, 0), |(p, b), c| (p + word(&c[..8]), b + word(&c[8..]))))
    }

    /// Zeroes counter slot `slot` (before it is given to a new rule).
    pub fn reset_counter(&self, slot: u32) -> Result<()> {
        map_update(
            self.loaded.map("counters")?,
            &slot.to_ne_bytes(),
            &vec![0u8; 16 * bpf::possible_cpus()],
            "cannot reset an offload counter",
        )
    }

    /// Runs the program once on `frame` (BPF_PROG_TEST_RUN): the verdict and the frame as
    /// the program left it. XDP_REDIRECT is reported as the verdict; nothing is sent.
    pub fn test_run(&self, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
        let mut out = vec![0u8; frame.len() + 256];
        let mut attr = Attr::new();
        attr.u32(0, self.prog() as u32)
            .u32(8, frame.len() as u32)
            .u32(12, out.len() as u32)
            .u64(16, frame.as_ptr() as u64)
            .u64(24, out.as_mut_ptr() as u64)
            .u32(32, 1);
        let r = attr.call(bpf::BPF_PROG_TEST_RUN);
        if r < 0 {
            return Err(netns::os_error("BPF_PROG_TEST_RUN of the offload program"));
        }
        let verdict = attr.get_u32(4);
        let n = attr.get_u32(12) as usize;
        out.truncate(n.min(out.len()));
        Ok((verdict, out))
    }
}

impl Drop for XdpOffload {
    fn drop(&mut self) {
        let _ = self.uninstall();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        not(bpf_clang),
        ignore = "needs clang at build time: the XDP offload program is compiled with clang"
    )]
    fn the_object_takes_the_address_of_its_bpf_interpreter_step() {
        let obj = Object::parse(OBJECT).unwrap();
        // One .text function, the bpf_loop callback; the XDP section takes its address
        // once, and .text refers to the filters' maps.
        assert_eq!(obj.text_funcs, vec![("cbpf_step".to_string(), 0)]);
        let xdp = obj.progs.iter().find(|p| p.name == "xdp").unwrap();
        assert_eq!(xdp.funcs.len(), 1);
        assert_eq!(xdp.funcs[0].1, 0);
        let text = obj.progs.iter().find(|p| p.name == ".text").unwrap();
        assert!(text.relocs.iter().any(|r| r.1 == "cbpf"));
        assert!(text.relocs.iter().any(|r| r.1 == "cbpfst"));
        assert!(text.funcs.is_empty());
        let def = |n: &str| obj.maps.iter().find(|m| m.name == n).unwrap().clone();
        assert_eq!(def("cbpf").value as usize, CBPF_BYTES);
        assert_eq!(def("cbpf").entries, CBPF_SLOTS);
        assert_eq!(def("config").value as usize, CONFIG_BYTES);
    }
}
