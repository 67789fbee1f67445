//! eBPF: the redirect program, the XSKMAP and the link, made with the bpf(2) syscall directly;
//! and the offload target through which another program may take the redirect program's place.

use super::*;

use crate::bpf::{
    insn, link_detach, link_xdp, load_xdp_flags, map_create, map_update_u32, Insn,
    BPF_FUNC_REDIRECT_MAP, BPF_F_XDP_HAS_FRAGS, BPF_MAP_TYPE_XSKMAP, BPF_PSEUDO_MAP_FD,
    XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE, XDP_PASS,
};

/// Offset of `rx_queue_index` in `struct xdp_md`.
pub(super) const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`
pub(super) fn program(map_fd: RawFd) -> [Insn; 6] {
    [
        insn(0x61, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0), // r2 = *(u32 *)(r1 + 16)
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd), // r1 = &xsks (64-bit immediate...)
        insn(0, 0, 0, 0, 0),                        // (...its upper half)
        insn(0xb7, 3, 0, 0, XDP_PASS),              // r3 = XDP_PASS (result when no entry)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // call bpf_redirect_map
        insn(0x95, 0, 0, 0, 0),                     // exit
    ]
}

/// The XDP program attached to one interface, shared by every port on it.
pub(super) struct Attach {
    pub(super) key: (u64, u64, u32),
    pub(super) ifname: String,
    pub(super) map: OwnedFd,
    pub(super) entries: u32,
    pub(super) generic: bool,
    /// The program accepts multi-buffer packets (sockets may bind with XDP_USE_SG).
    pub(super) frags: bool,
    pub(super) taken: Mutex<HashSet<u32>>,
    // Closing the link detaches the program; the program fd only keeps it loaded.
    pub(super) _link: OwnedFd,
    pub(super) _prog: OwnedFd,
}

pub(super) static ATTACHED: Mutex<Vec<Weak<Attach>>> = Mutex::new(Vec::new());

impl Drop for Attach {
    fn drop(&mut self) {
        // Closing the link detaches the program too, but not always before close returns;
        // an explicit detach is synchronous, so the interface is free for the next port.
        link_detach(&self._link);
    }
}

impl Attach {
    /// The program on `ifindex` of the current namespace, attaching it if needed.
    pub(super) fn get(
        ifname: &str,
        ifindex: u32,
        entries: u32,
        skb_mode: bool,
    ) -> Result<Arc<Attach>> {
        let ns = std::fs::metadata("/proc/thread-self/ns/net").map_err(|e| {
            Error::new(libc::EIO, format!("cannot identify network namespace: {e}"))
        })?;
        let key = (ns.dev(), ns.ino(), ifindex);
        let mut reg = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
        reg.retain(|w| w.strong_count() > 0);
        if let Some(a) = reg.iter().filter_map(Weak::upgrade).find(|a| a.key == key) {
            if a.entries < entries {
                return Err(Error::invalid(format!(
                    "interface '{ifname}': queue {} is beyond the {} the attached XDP program serves",
                    entries - 1,
                    a.entries
                )));
            }
            return Ok(a);
        }
        let map = map_create(
            BPF_MAP_TYPE_XSKMAP,
            4,
            4,
            entries,
            "cannot create the XSKMAP (bpf)",
        )?;
        let (prog, frags) = load_program(map.as_raw_fd())?;
        let attach = |flags: u32| {
            link_xdp(
                prog.as_raw_fd(),
                ifindex,
                flags,
                &format!("cannot attach the XDP program to '{ifname}'"),
            )
        };
        let (link, generic) = if skb_mode {
            (attach(XDP_FLAGS_SKB_MODE), true)
        } else {
            match attach(XDP_FLAGS_DRV_MODE) {
                Err(e) if e.code == libc::EOPNOTSUPP || e.code == libc::EINVAL => {
                    (attach(XDP_FLAGS_SKB_MODE), true)
                }
                other => (other, false),
            }
        };
        let link = link.map_err(|mut e| {
            if e.code == libc::EBUSY || e.code == libc::EEXIST {
                e.msg += " (the interface already has an XDP program of another user)";
            }
            if e.code == libc::ERANGE {
                e.msg += &format!(
                    " (the MTU of '{ifname}' is larger than one XDP frame holds{}; lower it, \
                     or use AFPacketPort for jumbo frames)",
                    if frags {
                        " and its driver takes no multi-buffer XDP"
                    } else {
                        ", and this kernel loads no multi-buffer XDP programs"
                    }
                );
            }
            e
        })?;
        let a = Arc::new(Attach {
            key,
            ifname: ifname.to_string(),
            map,
            entries,
            generic,
            frags,
            taken: Mutex::new(HashSet::new()),
            _link: link,
            _prog: prog,
        });
        reg.push(Arc::downgrade(&a));
        Ok(a)
    }

    /// Reserves interface queue `q` for one socket.
    pub(super) fn claim(&self, q: u32) -> Result<()> {
        if !self
            .taken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(q)
        {
            return Err(Error::busy(format!(
                "queue {q} of interface '{}' is already used by another AF_XDP port",
                self.ifname
            )));
        }
        Ok(())
    }

    pub(super) fn release(&self, q: u32) {
        self.taken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&q);
    }

    /// Points the program's entry for queue `q` at socket `fd`.
    pub(super) fn insert(&self, q: u32, fd: RawFd) -> Result<()> {
        let r = map_update_u32(self.map.as_raw_fd(), q, fd as u32);
        if r < 0 {
            return Err(netns::os_error(&format!(
                "cannot insert the socket of queue {q} into the XSKMAP"
            )));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Offload (crates/drivers/src/xdp_offload.rs): another program may take the place of the
// redirect program on the port's interface, through the same link (BPF_LINK_UPDATE swaps
// programs atomically, so no packet sees the interface without a program), and reuse the
// XSKMAP, so what it sends up still reaches the port's sockets.

/// BPF_LINK_UPDATE.
pub(super) const BPF_LINK_UPDATE: i32 = 29;

/// What an offload needs of an AFXDPPort: its interface, the XSKMAP and the link.
pub struct OffloadTarget {
    pub(super) attach: Arc<Attach>,
    /// The interface and its namespace ("" for the daemon's).
    pub ifname: String,
    pub netns: String,
    pub ifindex: u32,
}

/// AFXDPPorts by (pool, port name): ports are named per engine, and an engine has one pool.
pub(super) type PortKey = (usize, String);
pub(super) static PORTS: Mutex<Vec<(PortKey, Weak<OffloadTarget>)>> = Mutex::new(Vec::new());

/// The offload target of AFXDPPort `port` of the engine whose pool is `pool`.
pub fn offload_target(pool: &PacketPool, port: &str) -> Option<Arc<OffloadTarget>> {
    let key = (pool.region_base() as usize, port.to_string());
    let reg = PORTS.lock().unwrap_or_else(|p| p.into_inner());
    reg.iter()
        .filter(|(k, _)| *k == key)
        .find_map(|(_, w)| w.upgrade())
}

impl OffloadTarget {
    /// The port's XSKMAP (interface queue -> socket), for the offload program to reuse.
    pub fn xskmap(&self) -> RawFd {
        self.attach.map.as_raw_fd()
    }

    /// Whether the port's program is multi-buffer aware (a replacement must be too, or the
    /// kernel refuses it on an interface whose MTU needs it).
    pub fn frags(&self) -> bool {
        self.attach.frags
    }

    /// Whether the program runs in generic (skb) mode.
    pub fn generic(&self) -> bool {
        self.attach.generic
    }

    /// Puts program `prog` in place of what runs on the interface now.
    pub fn install(&self, prog: RawFd) -> Result<()> {
        self.swap(prog)
    }

    /// Puts the port's own redirect program back.
    pub fn restore(&self) -> Result<()> {
        self.attach.swap(self.attach._prog.as_raw_fd())
    }

    pub(super) fn swap(&self, prog: RawFd) -> Result<()> {
        self.attach.swap(prog)
    }

    /// A handle that can put the redirect program back as long as the interface's program
    /// lives, even after this port is gone: another port on the same interface keeps it.
    pub fn restorer(&self) -> Restorer {
        Restorer(Arc::downgrade(&self.attach))
    }
}

/// See [`OffloadTarget::restorer`].
pub struct Restorer(Weak<Attach>);

impl Restorer {
    /// Puts the redirect program back (nothing to do when the interface's program is gone).
    pub fn restore(&self) -> Result<()> {
        match self.0.upgrade() {
            Some(a) => a.swap(a._prog.as_raw_fd()),
            None => Ok(()),
        }
    }
}

impl Attach {
    /// Replaces the program on the interface through the link.
    pub(super) fn swap(&self, prog: RawFd) -> Result<()> {
        let r = crate::bpf::Attr::new()
            .u32(0, self._link.as_raw_fd() as u32)
            .u32(4, prog as u32)
            .call(BPF_LINK_UPDATE);
        if r < 0 {
            return Err(netns::os_error(&format!(
                "cannot replace the XDP program on '{}' (BPF_LINK_UPDATE)",
                self.ifname
            )));
        }
        Ok(())
    }
}

/// Loads the program, multi-buffer aware where the kernel allows; says which it got.
pub(super) fn load_program(map_fd: RawFd) -> Result<(OwnedFd, bool)> {
    let prog = program(map_fd);
    match load_xdp_flags(&prog, "bessemer_xsk", BPF_F_XDP_HAS_FRAGS) {
        Ok(fd) => Ok((fd, true)),
        Err(_) => Ok((load_xdp_flags(&prog, "bessemer_xsk", 0)?, false)),
    }
}
