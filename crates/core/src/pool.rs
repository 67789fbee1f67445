//! Packet pools: fixed-size frames in one region, with lock-free per-worker caches.
//!
//! An ordinary pool owns its frames. A *lent* pool ([`PacketPool::lent`]) has its frames in
//! memory someone else maps (a slice's shared packet area) while its descriptors stay in the
//! daemon's private memory like any pool's: its buffers are lent out to that owner and come
//! back as packets through [`PacketPool::adopt`], and a freed one waits on the pool's free
//! list for the owner to take it back ([`PacketPool::take_returned`]) instead of being
//! allocated again. Workers never cache a lent pool's buffers: they are always foreign to
//! a worker's cache, so the only place that knows about the kind is the cold path that
//! already sends a foreign buffer home.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::batch::PacketBatch;
use crate::mem::{PageKind, PagePolicy, Region};
use crate::packet::{
    data_capacity, home_offset, Packet, PacketDesc, DESC_SIZE, FRAME_SIZE, LARGE_FRAME_SIZE,
};

/// Most pools that can exist at once (the descriptor stores a pool index).
pub const MAX_POOLS: usize = 64;
/// Packets a per-worker cache holds at most.
pub const CACHE_SIZE: usize = 512;
const REFILL: usize = CACHE_SIZE / 2;

// The descriptor's bytes 2..10 hold the reference count (2..4), the data length (4..8) and the
// pool id (8..10); `free_bulk` tests the first and last in one load.
const OWNER_WORD_OFFSET: usize = std::mem::offset_of!(PacketDesc, refcnt);
const OWNER_WORD_ONE: u64 = 1;
const OWNER_WORD_MASK: u64 = 0xFFFF_0000_0000_FFFF;
const _: () = assert!(std::mem::offset_of!(PacketDesc, pool_id) == OWNER_WORD_OFFSET + 6);
/// Largest frame size a pool may have (a descriptor keeps data offsets in 16 bits).
pub const MAX_FRAME_SIZE: usize = 32768;

static POOLS: [AtomicPtr<PoolShared>; MAX_POOLS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_POOLS];

#[derive(Clone, Copy)]
struct FramePtr(*mut PacketDesc);
// SAFETY: frame pointers are indices into a region shared by all workers.
unsafe impl Send for FramePtr {}

/// What a pool's frames are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// Frames in the pool's own region; a freed buffer is allocated again.
    Ordinary,
    /// Frames in memory the pool does not own (see [`PacketPool::lent`]); a freed buffer
    /// waits for its owner to take it back.
    Lent,
}

/// Where the frames live.
enum Frames {
    Own(Region),
    /// Memory of `len` bytes at `base` that `_owner` keeps mapped while the pool lives.
    Lent {
        base: *mut u8,
        len: usize,
        _owner: Arc<dyn Send + Sync>,
    },
}

// SAFETY: the lent memory is plain shared memory kept alive by its owner; the pool's users
// synchronise its contents as they do an own region's.
unsafe impl Send for Frames {}
// SAFETY: as for `Send`: `&Frames` only gives out the base pointer and length, and the owner
// is `Send + Sync` itself.
unsafe impl Sync for Frames {}

impl Frames {
    fn base(&self) -> *mut u8 {
        match self {
            Frames::Own(r) => r.base(),
            Frames::Lent { base, .. } => *base,
        }
    }

    fn len(&self) -> usize {
        match self {
            Frames::Own(r) => r.len(),
            Frames::Lent { len, .. } => *len,
        }
    }

    fn kind(&self) -> PageKind {
        match self {
            Frames::Own(r) => r.kind(),
            Frames::Lent { .. } => PageKind::Plain,
        }
    }
}

struct PoolShared {
    id: u16,
    name: String,
    kind: PoolKind,
    descs: Region,
    region: Frames,
    nframes: usize,
    frame_shift: u32,
    policy: PagePolicy,
    large: OnceLock<Option<PacketPool>>,
    free: Mutex<Vec<FramePtr>>,
    caches: Mutex<Vec<Arc<AtomicUsize>>>,
    alloc_failures: AtomicU64,
    /// Lent pools: buffers live as packets (adopted and not yet freed or lent out again).
    live: AtomicUsize,
}

/// Statistics of one pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// Pool name.
    pub name: String,
    /// Number of frames.
    pub capacity: usize,
    /// Bytes per frame.
    pub frame_size: usize,
    /// Frames not in use (shared free list plus all worker caches).
    pub free: usize,
    /// Allocation requests that could not be satisfied.
    pub alloc_failures: u64,
    /// Which pages back the region.
    pub pages: PageKind,
}

/// A pool of packet buffers. Cloning shares the pool.
#[derive(Clone)]
pub struct PacketPool {
    shared: Arc<PoolShared>,
}

/// Errors creating a pool.
#[derive(Debug)]
pub enum PoolError {
    /// Zero or too many frames requested.
    BadSize(usize),
    /// A frame size that is not a power of two in FRAME_SIZE..=MAX_FRAME_SIZE.
    BadFrameSize(usize),
    /// All pool slots are taken.
    TooManyPools,
    /// The memory could not be mapped.
    Map(std::io::Error),
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::BadSize(n) => {
                write!(f, "packet pool size {n} is invalid (1..=16777216 buffers)")
            }
            PoolError::BadFrameSize(n) => write!(
                f,
                "packet frame size {n} is invalid (a power of two, {FRAME_SIZE}..={MAX_FRAME_SIZE})"
            ),
            PoolError::TooManyPools => {
                write!(f, "at most {MAX_POOLS} packet pools may exist at once")
            }
            PoolError::Map(e) => write!(f, "cannot map packet memory: {e}"),
        }
    }
}

impl std::error::Error for PoolError {}

impl PacketPool {
    /// Creates a pool of `nframes` buffers, choosing pages by `policy`; logs which pages it got.
    pub fn new(name: &str, nframes: usize, policy: PagePolicy) -> Result<PacketPool, PoolError> {
        Self::with_frame_size(name, nframes, FRAME_SIZE, policy)
    }

    /// Creates a pool of `nframes` buffers of `frame_size` bytes each (a power of two,
    /// FRAME_SIZE..=MAX_FRAME_SIZE).
    pub fn with_frame_size(
        name: &str,
        nframes: usize,
        frame_size: usize,
        policy: PagePolicy,
    ) -> Result<PacketPool, PoolError> {
        if nframes == 0 || nframes > 1 << 24 {
            return Err(PoolError::BadSize(nframes));
        }
        if !frame_size.is_power_of_two() || !(FRAME_SIZE..=MAX_FRAME_SIZE).contains(&frame_size) {
            return Err(PoolError::BadFrameSize(frame_size));
        }
        let region = Region::new(nframes * frame_size, policy).map_err(PoolError::Map)?;
        let descs = Region::new(nframes * DESC_SIZE, policy).map_err(PoolError::Map)?;
        tracing::info!(
            pool = name,
            buffers = nframes,
            frame_size,
            bytes = region.len() + descs.len(),
            "packet memory on {}",
            region.kind()
        );
        Self::build(
            name,
            nframes,
            frame_size,
            policy,
            descs,
            Frames::Own(region),
            PoolKind::Ordinary,
        )
    }

    /// A pool of `nframes` buffers of `frame_size` bytes (a power of two,
    /// FRAME_SIZE..=MAX_FRAME_SIZE) whose frames are the `len` bytes at `base`, which
    /// `owner` keeps mapped; the pool holds `owner` until it is dropped. Descriptors live in
    /// private memory. Every buffer starts lent out to the owner (the free list is empty):
    /// the owner turns a frame into a packet with [`adopt`](Self::adopt), and a packet the
    /// pipeline frees waits for [`take_returned`](Self::take_returned). Never make a cache
    /// of a lent pool.
    ///
    /// # Safety
    /// `base` is page aligned and `len` bytes there stay mapped, readable and writable, for
    /// as long as `owner` lives.
    pub unsafe fn lent(
        name: &str,
        nframes: usize,
        frame_size: usize,
        base: *mut u8,
        len: usize,
        owner: Arc<dyn Send + Sync>,
    ) -> Result<PacketPool, PoolError> {
        if nframes == 0 || nframes > 1 << 24 || nframes * frame_size > len {
            return Err(PoolError::BadSize(nframes));
        }
        if !frame_size.is_power_of_two() || !(FRAME_SIZE..=MAX_FRAME_SIZE).contains(&frame_size) {
            return Err(PoolError::BadFrameSize(frame_size));
        }
        let descs = Region::new(nframes * DESC_SIZE, PagePolicy::Plain).map_err(PoolError::Map)?;
        let p = Self::build(
            name,
            nframes,
            frame_size,
            PagePolicy::Plain,
            descs,
            Frames::Lent {
                base,
                len,
                _owner: owner,
            },
            PoolKind::Lent,
        )?;
        p.shared.free.lock().unwrap().clear();
        Ok(p)
    }

    fn build(
        name: &str,
        nframes: usize,
        frame_size: usize,
        policy: PagePolicy,
        descs: Region,
        region: Frames,
        kind: PoolKind,
    ) -> Result<PacketPool, PoolError> {
        let mut free = Vec::with_capacity(nframes);
        // Hand out low frames last so a fresh pool touches few pages.
        for i in (0..nframes).rev() {
            // SAFETY: record i lies inside the descriptor region, frame i inside the frames.
            let d = unsafe { descs.base().add(i * DESC_SIZE) } as *mut PacketDesc;
            // SAFETY: `d` is descriptor record i of the fresh, writable descriptor region
            // (nframes * DESC_SIZE bytes), which nothing else references yet; frame i at
            // `i * frame_size` is inside the frames (nframes * frame_size bytes, checked by
            // the callers).
            unsafe {
                (*d).frame_idx = i as u32;
                (*d).frame_size = frame_size as u32;
                (*d).buf = region.base().add(i * frame_size);
                // The owner of lent frames writes packets where it likes; the default offset
                // only matters to `set_data`, so it is plain headroom, not staggered.
                (*d).home_off = match kind {
                    PoolKind::Ordinary => home_offset(i),
                    PoolKind::Lent => crate::packet::HEADROOM,
                } as u16;
                #[cfg(debug_assertions)]
                {
                    (*d).state = crate::packet::STATE_FREE;
                }
            }
            free.push(FramePtr(d));
        }
        let mut shared = Arc::new(PoolShared {
            id: 0,
            name: name.to_string(),
            kind,
            descs,
            region,
            nframes,
            frame_shift: frame_size.trailing_zeros(),
            policy,
            large: OnceLock::new(),
            free: Mutex::new(free),
            caches: Mutex::new(Vec::new()),
            alloc_failures: AtomicU64::new(0),
            live: AtomicUsize::new(0),
        });
        let ptr = Arc::as_ptr(&shared) as *mut PoolShared;
        let id = POOLS
            .iter()
            .position(|slot| {
                slot.compare_exchange(
                    std::ptr::null_mut(),
                    ptr,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            })
            .ok_or(PoolError::TooManyPools)?;
        let s = Arc::get_mut(&mut shared).expect("fresh pool is unshared");
        s.id = id as u16;
        for f in s.free.get_mut().unwrap().iter() {
            // SAFETY: frames are exclusively owned by the new pool.
            unsafe { (*f.0).pool_id = id as u16 };
        }
        Ok(PacketPool { shared })
    }

    /// What the pool's frames are.
    pub fn kind(&self) -> PoolKind {
        self.shared.kind
    }

    /// Lent pools: packets that live now (adopted, not yet freed nor lent out again).
    pub fn live(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }

    /// Lent pools: makes lent-out buffer `idx` a packet of `len` bytes at offset `off` of its
    /// frame (refcount 1, metadata as the frame's previous packet left it); None if `idx`,
    /// `off` or `len` is out of range or the pool is not lent.
    ///
    /// # Safety
    /// The buffer is lent out: no packet, free list or other adoption holds it.
    #[inline]
    pub unsafe fn adopt(&self, idx: u32, off: usize, len: usize) -> Option<Packet> {
        let s = &*self.shared;
        if s.kind != PoolKind::Lent || idx as usize >= s.nframes || off + len > 1 << s.frame_shift {
            return None;
        }
        let d = s.descs.base().add(idx as usize * DESC_SIZE) as *mut PacketDesc;
        // One store sets data_off, refcnt = 1 and data_len (see PacketDesc's layout).
        (d as *mut u64).write(off as u64 | (1u64 << 16) | ((len as u64) << 32));
        #[cfg(debug_assertions)]
        {
            assert_eq!(
                (*d).state,
                crate::packet::STATE_FREE,
                "lent buffer adopted twice"
            );
            (*d).state = crate::packet::STATE_LIVE;
        }
        s.live.fetch_add(1, Ordering::Relaxed);
        Some(Packet::from_raw(d))
    }

    /// Lent pools: ends a packet held once without freeing its buffer, which is lent out
    /// again (its owner now holds the frame); returns (buffer index, data offset, length).
    /// The packet comes back if it is of another pool or shared.
    #[inline]
    pub fn lend(&self, pkt: Packet) -> Result<(u32, usize, usize), Packet> {
        if pkt.pool_id() != self.shared.id
            || self.shared.kind != PoolKind::Lent
            || pkt.refcnt() != 1
        {
            return Err(pkt);
        }
        let r = (pkt.frame_index(), pkt.data_offset(), pkt.len());
        let d = pkt.into_raw();
        #[cfg(debug_assertions)]
        // SAFETY: d was live and this was its only reference.
        unsafe {
            (*d).state = crate::packet::STATE_FREE;
        }
        let _ = d;
        self.shared.live.fetch_sub(1, Ordering::Release);
        Ok(r)
    }

    /// Lent pools: takes up to `max` buffers the pipeline freed, calling `f` with each one's
    /// index; they are lent out again. Returns how many.
    pub fn take_returned(&self, max: usize, mut f: impl FnMut(u32)) -> usize {
        let mut g = self.shared.free.lock().unwrap();
        let n = max.min(g.len());
        let start = g.len() - n;
        for fp in &g[start..] {
            // SAFETY: a buffer on the free list has a valid descriptor.
            f(unsafe { (*fp.0).frame_idx });
        }
        g.truncate(start);
        n
    }

    /// Lent pools: puts lent-out buffers (their owner gave them up) where freed ones wait.
    ///
    /// # Safety
    /// Each buffer is lent out and named once; none is live.
    pub unsafe fn give_back(&self, idxs: &[u32]) {
        let s = &*self.shared;
        let mut g = s.free.lock().unwrap();
        for &i in idxs {
            if (i as usize) < s.nframes {
                g.push(FramePtr(
                    s.descs.base().add(i as usize * DESC_SIZE) as *mut PacketDesc
                ));
            }
        }
    }

    /// The pool's index, stored in every descriptor.
    pub fn id(&self) -> u16 {
        self.shared.id
    }

    /// Number of buffers.
    pub fn capacity(&self) -> usize {
        self.shared.nframes
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> usize {
        1 << self.shared.frame_shift
    }

    /// Largest packet every fresh buffer of this pool holds without using headroom.
    pub fn data_capacity(&self) -> usize {
        data_capacity(self.frame_size())
    }

    /// The companion pool of LARGE_FRAME_SIZE frames where drivers put frames too large for
    /// this pool's buffers (jumbo frames); made on first use, with an eighth as many buffers
    /// (256..=4096). None if this pool's frames are already that large or the companion
    /// cannot be made (the failure is logged once; callers count such frames as drops).
    pub fn large(&self) -> Option<PacketPool> {
        if self.frame_size() >= LARGE_FRAME_SIZE {
            return None;
        }
        self.shared
            .large
            .get_or_init(|| {
                let n = (self.shared.nframes / 8).clamp(256, 4096);
                let name = format!("{}_large", self.shared.name);
                // Hugepages stay for the main pool: the companion is touched only by jumbo
                // traffic, and plain pages cost nothing until then.
                let policy = match self.shared.policy {
                    PagePolicy::RequireHuge => PagePolicy::RequireHuge,
                    _ => PagePolicy::Plain,
                };
                match PacketPool::with_frame_size(&name, n, LARGE_FRAME_SIZE, policy) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        tracing::warn!(pool = %name, "no buffers for jumbo frames: {e}");
                        None
                    }
                }
            })
            .clone()
    }

    /// Which pages back the pool.
    pub fn page_kind(&self) -> PageKind {
        self.shared.region.kind()
    }

    /// The large-frame companion if it has been made (never makes it).
    pub(crate) fn large_made(&self) -> Option<PacketPool> {
        self.shared.large.get().cloned().flatten()
    }

    /// Start of the frame region (for registering it as an AF_XDP UMEM).
    pub fn region_base(&self) -> *mut u8 {
        self.shared.region.base()
    }

    /// Length of the frame region in bytes.
    pub fn region_len(&self) -> usize {
        self.shared.region.len()
    }

    /// The packet whose frame contains `addr` (an offset into the region), in O(1).
    ///
    /// # Safety
    /// The frame must be owned by the caller (e.g. returned by the kernel on an AF_XDP ring).
    pub unsafe fn packet_at(&self, addr: u64) -> Option<Packet> {
        let idx = (addr >> self.shared.frame_shift) as usize;
        if idx >= self.shared.nframes {
            return None;
        }
        Some(Packet::from_raw(
            self.shared.descs.base().add(idx * DESC_SIZE) as *mut PacketDesc,
        ))
    }

    /// Region offset of a packet's frame.
    pub fn frame_addr(&self, pkt: &Packet) -> u64 {
        (pkt.frame_index() as u64) << self.shared.frame_shift
    }

    /// Buffers not in use, counting every worker cache (exact when workers are quiescent).
    pub fn free_count(&self) -> usize {
        let global = self.shared.free.lock().unwrap().len();
        let cached: usize = self
            .shared
            .caches
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        global + cached
    }

    /// Statistics snapshot.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            name: self.shared.name.clone(),
            capacity: self.shared.nframes,
            frame_size: self.frame_size(),
            free: self.free_count(),
            alloc_failures: self.shared.alloc_failures.load(Ordering::Relaxed),
            pages: self.page_kind(),
        }
    }

    /// A new per-worker cache drawing from this pool (an ordinary one).
    pub fn cache(&self) -> PoolCache {
        debug_assert_eq!(self.kind(), PoolKind::Ordinary, "cache of a lent pool");
        let count = Arc::new(AtomicUsize::new(0));
        self.shared.caches.lock().unwrap().push(count.clone());
        PoolCache {
            pool_id: self.shared.id,
            data_capacity: self.data_capacity(),
            large: None,
            pool: self.clone(),
            items: vec![FramePtr(std::ptr::null_mut()); CACHE_SIZE].into_boxed_slice(),
            n: 0,
            count,
        }
    }
}

impl Drop for PoolShared {
    fn drop(&mut self) {
        if let Some(slot) = POOLS.get(self.id as usize) {
            let _ = slot.compare_exchange(
                self as *mut PoolShared,
                std::ptr::null_mut(),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }
}

/// A worker's private stack of free buffers: batch alloc/free without locks.
pub struct PoolCache {
    pool_id: u16,
    data_capacity: usize,
    /// The pool's large companion, looked up on the first jumbo allocation.
    large: Option<Option<PacketPool>>,
    pool: PacketPool,
    items: Box<[FramePtr]>,
    n: usize,
    count: Arc<AtomicUsize>,
}

// SAFETY: a cache is owned by one worker at a time; it holds exclusively owned frames.
unsafe impl Send for PoolCache {}

impl PoolCache {
    /// The pool this cache draws from.
    pub fn pool(&self) -> &PacketPool {
        &self.pool
    }

    /// Largest packet a fresh buffer from this cache holds.
    #[inline(always)]
    pub fn data_capacity(&self) -> usize {
        self.data_capacity
    }

    #[inline(always)]
    fn publish(&self) {
        // A plain store: only this worker writes it, readers want a quiescent snapshot.
        self.count.store(self.n, Ordering::Relaxed);
    }

    #[cold]
    fn refill(&mut self, want: usize) {
        let mut g = self.pool.shared.free.lock().unwrap();
        let take = (REFILL + want).min(CACHE_SIZE - self.n).min(g.len());
        let start = g.len() - take;
        self.items[self.n..self.n + take].copy_from_slice(&g[start..]);
        g.truncate(start);
        self.n += take;
    }

    #[cold]
    fn flush(&mut self, keep: usize) {
        if self.n <= keep {
            return;
        }
        let mut g = self.pool.shared.free.lock().unwrap();
        g.extend_from_slice(&self.items[keep..self.n]);
        self.n = keep;
    }

    /// Returns every cached buffer to the shared free list.
    pub fn flush_all(&mut self) {
        self.flush(0);
        self.publish();
    }

    #[inline(always)]
    unsafe fn init(d: *mut PacketDesc, len: usize) {
        // One store sets data_off, refcnt = 1 and data_len (see PacketDesc's layout).
        let word = (*d).home_off as u64 | (1u64 << 16) | ((len as u64) << 32);
        (d as *mut u64).write(word);
        #[cfg(debug_assertions)]
        {
            assert_eq!(
                (*d).state,
                crate::packet::STATE_FREE,
                "packet buffer allocated twice"
            );
            (*d).state = crate::packet::STATE_LIVE;
        }
    }

    /// Allocates one packet with `len` data bytes (contents undefined), or None if exhausted.
    #[inline]
    pub fn alloc(&mut self, len: usize) -> Option<Packet> {
        if self.n == 0 {
            self.refill(1);
            if self.n == 0 {
                self.pool
                    .shared
                    .alloc_failures
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        self.n -= 1;
        let d = self.items[self.n].0;
        self.publish();
        // SAFETY: the frame was free and is now exclusively ours.
        unsafe {
            Self::init(d, len.min(self.data_capacity));
            Some(Packet::from_raw(d))
        }
    }

    /// Allocates a packet of exactly `len` bytes: from this cache when it fits a buffer,
    /// else from the pool's large companion (jumbo frames). None when no buffer that large
    /// exists (`len` > LARGE_DATA_CAPACITY) or the pool is exhausted (counted).
    #[inline]
    pub fn alloc_any(&mut self, len: usize) -> Option<Packet> {
        if len <= self.data_capacity {
            return self.alloc(len);
        }
        self.alloc_large(len)
    }

    // Jumbo frames are rare next to small ones; their buffers come straight from the
    // companion's shared list (one lock) rather than from a per-worker cache.
    #[cold]
    fn alloc_large(&mut self, len: usize) -> Option<Packet> {
        let pool = &self.pool;
        let large = self.large.get_or_insert_with(|| pool.large()).as_ref()?;
        if len > large.data_capacity() {
            return None;
        }
        let Some(d) = large.shared.free.lock().unwrap().pop() else {
            large.shared.alloc_failures.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        // SAFETY: the frame was free and is now exclusively ours.
        unsafe {
            Self::init(d.0, len);
            Some(Packet::from_raw(d.0))
        }
    }

    /// Appends up to `n` new packets of `len` bytes to `batch`; all or nothing. Returns the
    /// number added (0 when the pool is exhausted, counted in the pool's failures).
    #[inline]
    pub fn alloc_bulk(&mut self, batch: &mut PacketBatch, n: usize, len: usize) -> usize {
        let n = n.min(batch.room());
        if self.n < n {
            self.refill(n);
            if self.n < n {
                self.pool
                    .shared
                    .alloc_failures
                    .fetch_add(1, Ordering::Relaxed);
                return 0;
            }
        }
        let len = len.min(self.data_capacity);
        let start = self.n - n;
        let base = batch.len();
        // SAFETY: slots base..base+n are free in the batch; frames start..self.n are ours.
        unsafe {
            let dst = batch.slots_mut().add(base) as *mut *mut PacketDesc;
            let src = self.items.as_ptr().add(start) as *const *mut PacketDesc;
            for i in 0..n {
                let d = *src.add(i);
                Self::init(d, len);
                *dst.add(i) = d;
            }
            batch.set_len(base + n);
        }
        self.n = start;
        self.publish();
        n
    }

    #[inline(always)]
    fn put(&mut self, d: *mut PacketDesc) {
        if self.n == CACHE_SIZE {
            self.flush(REFILL);
        }
        // SAFETY: n < CACHE_SIZE after the flush above; the caller owns the last reference.
        unsafe { self.put_with_room(d) };
    }

    /// Puts a frame back. Caller: owns the last reference to `d`, and `self.n < CACHE_SIZE`.
    #[inline(always)]
    unsafe fn put_with_room(&mut self, d: *mut PacketDesc) {
        #[cfg(debug_assertions)]
        {
            assert_eq!(
                (*d).state,
                crate::packet::STATE_LIVE,
                "double free of a packet buffer"
            );
            (*d).state = crate::packet::STATE_FREE;
        }
        if (*d).pool_id != self.pool_id {
            return Self::put_foreign(d);
        }
        *self.items.get_unchecked_mut(self.n) = FramePtr(d);
        self.n += 1;
    }

    #[cold]
    unsafe fn put_foreign(d: *mut PacketDesc) {
        Self::put_foreign_run(&[d]);
    }

    /// Sends frames of one other pool home under one lock. Caller: owns the last reference
    /// to each, all of one pool.
    unsafe fn put_foreign_run(ds: &[*mut PacketDesc]) {
        let p = POOLS[(*ds[0]).pool_id as usize].load(Ordering::Acquire);
        assert!(!p.is_null(), "packet freed after its pool was destroyed");
        (*p).free
            .lock()
            .unwrap()
            .extend(ds.iter().map(|d| FramePtr(*d)));
        // Last, and with release ordering: whoever sees a lent pool with no live packet may
        // drop it (and unmap its frames), so nothing of it may be touched after this.
        if (*p).kind == PoolKind::Lent {
            (*p).live.fetch_sub(ds.len(), Ordering::Release);
        }
    }

    /// True if dropping this reference to the live frame `d` leaves none: a buffer held once
    /// (the common case) is recognised by one plain load, with no atomic read-modify-write.
    #[inline(always)]
    unsafe fn last_reference(d: *mut PacketDesc) -> bool {
        let rc = &(*d).refcnt;
        rc.load(Ordering::Acquire) == 1 || rc.fetch_sub(1, Ordering::AcqRel) == 1
    }

    #[inline(always)]
    fn release(&mut self, pkt: Packet) {
        let d = pkt.into_raw();
        // SAFETY: d is live.
        if unsafe { Self::last_reference(d) } {
            self.put(d);
        }
    }

    /// Frees one packet (drops one reference).
    #[inline]
    pub fn free(&mut self, pkt: Packet) {
        self.release(pkt);
        self.publish();
    }

    /// Frees every packet of the batch, leaving it empty.
    #[inline]
    pub fn free_bulk(&mut self, batch: &mut PacketBatch) {
        let n = batch.len();
        // Room for the whole batch is made once, not checked per packet.
        if self.n + n > CACHE_SIZE {
            self.flush(REFILL.min(CACHE_SIZE - n));
        }
        let slots = batch.slots_mut() as *const *mut PacketDesc;
        // SAFETY: the batch gives up its n packets, each released exactly once below; the
        // cache has room for all n (flushed above), so slots n..n+n of `items` are ours to
        // write even when the fast path is not taken.
        unsafe {
            batch.set_len(0);
            // The common case, every buffer held once and from this pool, is checked without
            // a branch per packet: each pointer is stored speculatively and the checks are
            // folded into one word, tested once for the batch.
            let dst = self.items.as_mut_ptr().add(self.n) as *mut *mut PacketDesc;
            let want = OWNER_WORD_ONE | (self.pool_id as u64) << 48;
            let mut odd = 0u64;
            for i in 0..n {
                let d = *slots.add(i);
                odd |= Self::owner_word(d) ^ want;
                *dst.add(i) = d;
            }
            odd &= OWNER_WORD_MASK;
            if odd == 0 {
                std::sync::atomic::fence(Ordering::Acquire);
                #[cfg(debug_assertions)]
                for i in 0..n {
                    Self::mark_free(*slots.add(i));
                }
                self.n += n;
            } else {
                self.free_mixed(slots, n);
            }
        }
        self.publish();
    }

    /// `free_bulk` when some buffer is shared or from another pool. Buffers of other pools
    /// go home in runs, one lock per run of one pool rather than one per packet (a slice's
    /// or a port's pool gets whole batches back).
    ///
    /// # Safety
    /// As `free_bulk`'s: `slots` holds `n` (at most a batch) live packets given up by the
    /// caller, and the cache has room for `n` more.
    #[cold]
    #[inline(never)]
    unsafe fn free_mixed(&mut self, slots: *const *mut PacketDesc, n: usize) {
        let mut run = [std::ptr::null_mut::<PacketDesc>(); crate::batch::MAX_BURST];
        let (mut len, mut run_pool) = (0usize, u16::MAX);
        for i in 0..n {
            let d = *slots.add(i);
            if !Self::last_reference(d) {
                continue;
            }
            let pid = (*d).pool_id;
            if pid == self.pool_id {
                self.put_with_room(d);
                continue;
            }
            #[cfg(debug_assertions)]
            Self::mark_free(d);
            if pid != run_pool && len > 0 {
                Self::put_foreign_run(&run[..len]);
                len = 0;
            }
            run_pool = pid;
            run[len] = d;
            len += 1;
        }
        if len > 0 {
            Self::put_foreign_run(&run[..len]);
        }
    }

    /// The eight bytes from the reference count to the pool id (`OWNER_WORD_MASK` selects
    /// those two) of a live frame, in one load.
    ///
    /// A plain load, not an atomic one, for speed: it is tested only for "count 1", and a
    /// count of 1 read by the holder of a reference is exact (every other holder released
    /// with release ordering, none can appear). Any other count sends the batch down the
    /// slow path, whose atomic read decides. The acquire fence after the batch's loads gives
    /// the fast path `last_reference`'s ordering.
    #[inline(always)]
    unsafe fn owner_word(d: *mut PacketDesc) -> u64 {
        std::ptr::read_unaligned((d as *const u8).add(OWNER_WORD_OFFSET) as *const u64)
    }

    #[cfg(debug_assertions)]
    unsafe fn mark_free(d: *mut PacketDesc) {
        assert_eq!(
            (*d).state,
            crate::packet::STATE_LIVE,
            "double free of a packet buffer"
        );
        (*d).state = crate::packet::STATE_FREE;
    }

    /// Makes a second reference to a packet (for Replicate).
    #[inline]
    pub fn clone_packet(&self, pkt: &Packet) -> Packet {
        let d = pkt.as_ptr();
        // SAFETY: the packet is live; the new handle owns the added reference.
        unsafe {
            (*d).refcnt.fetch_add(1, Ordering::AcqRel);
            Packet::from_raw(d)
        }
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        self.flush(0);
        self.publish();
        let mut caches = self.pool.shared.caches.lock().unwrap();
        caches.retain(|c| !Arc::ptr_eq(c, &self.count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::MAX_BURST;

    // Allocates packets one batch at a time and frees them, for quick self-checks.
    fn exercise(cache: &mut PoolCache, rounds: usize, len: usize) -> usize {
        let mut b = PacketBatch::new();
        let mut got = 0;
        for _ in 0..rounds {
            got += cache.alloc_bulk(&mut b, MAX_BURST, len);
            cache.free_bulk(&mut b);
        }
        got
    }

    fn pool(n: usize) -> PacketPool {
        PacketPool::new("test", n, PagePolicy::Plain).unwrap()
    }

    #[test]
    fn alloc_free_returns_every_buffer() {
        let p = pool(1024);
        let start = p.free_count();
        assert_eq!(start, 1024);
        let mut c = p.cache();
        let mut b = PacketBatch::new();
        assert_eq!(c.alloc_bulk(&mut b, MAX_BURST, 60), MAX_BURST);
        assert_eq!(p.free_count(), start - MAX_BURST);
        for pkt in b.pkts() {
            assert_eq!(pkt.len(), 60);
            assert_eq!(pkt.refcnt(), 1);
            assert!(pkt.headroom() >= crate::packet::HEADROOM);
            assert!(pkt.tailroom() >= crate::packet::DATA_CAPACITY - 60);
        }
        c.free_bulk(&mut b);
        assert_eq!(p.free_count(), start);
        assert_eq!(exercise(&mut c, 1000, 60), 1000 * MAX_BURST);
        assert_eq!(p.free_count(), start);
    }

    #[test]
    fn exhaustion_counts_and_does_not_panic() {
        // One full batch and some left over, whatever the batch capacity.
        const N: usize = MAX_BURST + 8;
        let p = pool(N);
        let mut c = p.cache();
        let mut b1 = PacketBatch::new();
        let mut b2 = PacketBatch::new();
        assert_eq!(c.alloc_bulk(&mut b1, MAX_BURST, 60), MAX_BURST);
        assert_eq!(c.alloc_bulk(&mut b2, MAX_BURST, 60), 0);
        assert_eq!(p.stats().alloc_failures, 1);
        let mut singles = Vec::new();
        while let Some(x) = c.alloc(10) {
            singles.push(x);
        }
        assert_eq!(singles.len(), N - MAX_BURST);
        assert_eq!(p.stats().alloc_failures, 2);
        for x in singles {
            c.free(x);
        }
        c.free_bulk(&mut b1);
        assert_eq!(p.free_count(), N);
    }

    #[test]
    fn refcount_keeps_buffer_until_last_free() {
        let p = pool(8);
        let mut c = p.cache();
        let a = c.alloc(64).unwrap();
        let b = c.clone_packet(&a);
        assert!(a.is_shared());
        assert_eq!(p.free_count(), 7);
        c.free(a);
        assert_eq!(p.free_count(), 7);
        assert!(!b.is_shared());
        c.free(b);
        assert_eq!(p.free_count(), 8);
    }

    #[test]
    fn frame_address_maps_back_to_packet() {
        let p = pool(16);
        let mut c = p.cache();
        let a = c.alloc(100).unwrap();
        let addr = p.frame_addr(&a);
        assert_eq!(addr % FRAME_SIZE as u64, 0);
        // SAFETY: the frame is `a`'s, which this test holds; the second handle is given up
        // with `into_raw` below, so the frame is freed once.
        let again = unsafe { p.packet_at(addr + 300) }.unwrap();
        assert_eq!(again.as_ptr(), a.as_ptr());
        let _ = again.into_raw(); // a second handle to the same frame: not freed twice

        // SAFETY: beyond the 16 frames: answers None without touching a frame.
        assert!(unsafe { p.packet_at((16 * FRAME_SIZE) as u64) }.is_none());
        c.free(a);
    }

    #[test]
    fn data_bounds_set_by_a_driver() {
        let p = pool(4);
        let mut c = p.cache();
        let mut a = c.alloc(10).unwrap();
        assert!(a.set_data_bounds(256, 60));
        assert_eq!((a.data_offset(), a.len()), (256, 60));
        assert!(!a.set_data_bounds(4000, 100));
        assert_eq!((a.data_offset(), a.len()), (256, 60));
        assert!(a.set_data_bounds(0, FRAME_SIZE));
        c.free(a);
    }

    #[test]
    fn free_bulk_takes_shared_and_foreign_buffers_the_slow_way() {
        let p1 = pool(256);
        let p2 = pool(8);
        let mut c1 = p1.cache();
        let mut c2 = p2.cache();
        // A batch of buffers held once from this pool (the fast path) ...
        let mut b = PacketBatch::new();
        assert_eq!(c1.alloc_bulk(&mut b, MAX_BURST, 60), MAX_BURST);
        c1.free_bulk(&mut b);
        assert!(b.is_empty());
        assert_eq!(p1.free_count(), 256);
        // ... and one that mixes a shared buffer and another pool's buffer in the middle.
        assert_eq!(c1.alloc_bulk(&mut b, 10, 60), 10);
        let shared = b.pop().unwrap();
        let second = c1.clone_packet(&shared);
        b.push(shared).ok().unwrap();
        b.push(c2.alloc(60).unwrap()).ok().unwrap();
        assert_eq!(c1.alloc_bulk(&mut b, 5, 60), 5);
        c1.free_bulk(&mut b);
        assert_eq!(
            p1.free_count(),
            255,
            "the shared buffer keeps its second reference"
        );
        assert_eq!(p2.free_count(), 8, "the foreign buffer went home");
        assert!(!second.is_shared());
        c1.free(second);
        assert_eq!(p1.free_count(), 256);
        // Every buffer is still distinct: a full cycle hands out no buffer twice.
        let mut seen = std::collections::HashSet::new();
        let mut held = Vec::new();
        while let Some(pkt) = c1.alloc(60) {
            assert!(
                seen.insert(pkt.as_ptr() as usize),
                "buffer handed out twice"
            );
            held.push(pkt);
        }
        assert_eq!(held.len(), 256);
        for pkt in held {
            c1.free(pkt);
        }
    }

    #[test]
    fn cross_pool_free_goes_home() {
        let p1 = pool(8);
        let p2 = pool(8);
        let mut c1 = p1.cache();
        let mut c2 = p2.cache();
        let a = c1.alloc(10).unwrap();
        c2.free(a);
        assert_eq!(p1.free_count(), 8);
        assert_eq!(p2.free_count(), 8);
    }

    #[test]
    fn large_companion_holds_jumbo_frames_and_frees_home() {
        let p = pool(64);
        let big = p.large().expect("companion pool");
        assert_eq!(big.id(), p.large().unwrap().id(), "made once");
        assert_eq!(big.frame_size(), LARGE_FRAME_SIZE);
        assert_eq!(big.capacity(), 256);
        assert!(big.large().is_none());
        let mut bc = big.cache();
        let mut c = p.cache();
        let jumbo: Vec<u8> = (0..9014u32).map(|i| i as u8).collect();
        let mut a = bc.alloc(0).unwrap();
        assert!(a.capacity() >= crate::packet::LARGE_DATA_CAPACITY);
        assert!(a.set_data(&jumbo));
        assert_eq!(a.data(), &jumbo[..]);
        assert_eq!(
            a.tailroom(),
            LARGE_FRAME_SIZE - a.data_offset() - jumbo.len()
        );
        assert!(a.append(a.tailroom()).is_some());
        assert!(a.append(1).is_none());
        // Frame addresses use the companion's frame size.
        let addr = big.frame_addr(&a);
        assert_eq!(addr % LARGE_FRAME_SIZE as u64, 0);
        // SAFETY: the frame is `a`'s, which this test holds; the second handle is given up
        // with `into_raw` below, so the frame is freed once.
        let again = unsafe { big.packet_at(addr + 5000) }.unwrap();
        assert_eq!(again.as_ptr(), a.as_ptr());
        let _ = again.into_raw();
        // A small buffer refuses what the large one took.
        let mut s = c.alloc(0).unwrap();
        assert!(!s.set_data(&jumbo));
        c.free(s);
        // A worker's cache of the main pool frees the jumbo buffer back to its own pool.
        c.free(a);
        assert_eq!(big.free_count(), 256);
        assert_eq!(p.free_count(), 64);
        // alloc_any picks the buffer by size.
        let s = c.alloc_any(100).unwrap();
        assert_eq!(s.pool_id(), p.id());
        let j = c.alloc_any(9014).unwrap();
        assert_eq!((j.pool_id(), j.len()), (big.id(), 9014));
        assert!(c
            .alloc_any(crate::packet::LARGE_DATA_CAPACITY + 1)
            .is_none());
        c.free(s);
        c.free(j);
        assert_eq!((p.free_count(), big.free_count()), (64, 256));
        assert!(matches!(
            PacketPool::with_frame_size("x", 4, 5000, PagePolicy::Plain),
            Err(PoolError::BadFrameSize(5000))
        ));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "double free")]
    fn double_free_is_caught_in_debug() {
        let p = pool(8);
        let mut c = p.cache();
        let a = c.alloc(10).unwrap();
        let raw = a.as_ptr();
        c.free(a);
        // SAFETY: deliberately breaks `from_raw`'s contract (the frame was just freed) to
        // check that a debug build catches it; the descriptor stays mapped by the pool.
        c.free(unsafe { Packet::from_raw(raw) });
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "use after free")]
    fn use_after_free_is_caught_in_debug() {
        let p = pool(8);
        let mut c = p.cache();
        let a = c.alloc(10).unwrap();
        let raw = a.as_ptr();
        c.free(a);
        // SAFETY: deliberately breaks `from_raw`'s contract (the frame was just freed) to
        // check that a debug build catches it; the descriptor stays mapped by the pool, and
        // `ManuallyDrop` keeps the ghost from being freed again.
        let ghost = std::mem::ManuallyDrop::new(unsafe { Packet::from_raw(raw) });
        let _ = ghost.len();
    }

    /// A lent pool over 8 frames of an ordinary region that stands in for shared memory.
    fn lent_pool() -> (PacketPool, Arc<Region>) {
        let mem = Arc::new(Region::new(8 * FRAME_SIZE, PagePolicy::Plain).unwrap());
        // SAFETY: the region is 8 frames long and lives as long as the pool holds it.
        let p =
            unsafe { PacketPool::lent("lent", 8, FRAME_SIZE, mem.base(), mem.len(), mem.clone()) }
                .unwrap();
        (p, mem)
    }

    #[test]
    fn lent_pool_adopts_frames_in_place_and_frees_them_back_to_the_owner() {
        let (lp, mem) = lent_pool();
        assert_eq!(lp.kind(), PoolKind::Lent);
        assert_eq!(lp.free_count(), 0, "every buffer starts lent out");
        let p = pool(64);
        let mut c = p.cache();
        // The owner wrote a packet at offset 256 of frame 3.
        // SAFETY: 5 bytes at offset 256 of frame 3 lie inside the 8-frame region `mem`, which
        // no packet holds yet.
        unsafe {
            std::ptr::copy_nonoverlapping(
                b"hello".as_ptr(),
                mem.base().add(3 * FRAME_SIZE + 256),
                5,
            )
        };
        // SAFETY: every buffer of a fresh lent pool is lent out; frame 3 is adopted once.
        let a = unsafe { lp.adopt(3, 256, 5) }.unwrap();
        assert_eq!(a.data(), b"hello");
        assert_eq!(
            a.data().as_ptr(),
            // SAFETY: offset 256 of frame 3 is inside the 8-frame region.
            unsafe { mem.base().add(3 * FRAME_SIZE + 256) } as *const u8
        );
        assert_eq!(
            (a.pool_id(), a.frame_index(), a.headroom()),
            (lp.id(), 3, 256)
        );
        assert_eq!(lp.live(), 1);
        // SAFETY: out of range (frame 8 of 8, 5 bytes past the frame's end): refused before
        // any frame is touched.
        assert!(unsafe { lp.adopt(8, 0, 1) }.is_none());
        // SAFETY: as above.
        assert!(unsafe { lp.adopt(2, FRAME_SIZE - 4, 5) }.is_none());
        assert!(
            // SAFETY: an ordinary pool refuses before touching a frame.
            unsafe { p.adopt(0, 0, 1) }.is_none(),
            "ordinary pools adopt nothing"
        );
        // A worker's cache of another pool frees it home, where the owner takes it back.
        // SAFETY: frame 5 is still lent out and adopted once.
        let b = unsafe { lp.adopt(5, 0, 60) }.unwrap();
        let mut batch = PacketBatch::new();
        batch.push(a).ok().unwrap();
        batch.push(c.alloc(60).unwrap()).ok().unwrap();
        batch.push(b).ok().unwrap();
        c.free_bulk(&mut batch);
        assert_eq!(lp.live(), 0);
        assert_eq!(p.free_count(), 64);
        let mut back = Vec::new();
        assert_eq!(lp.take_returned(1, |i| back.push(i)), 1);
        assert_eq!(lp.take_returned(10, |i| back.push(i)), 1);
        back.sort();
        assert_eq!(back, [3, 5]);
        assert_eq!(lp.take_returned(10, |_| panic!("nothing left")), 0);
    }

    #[test]
    fn lent_pool_lends_held_once_packets_and_keeps_shared_ones() {
        let (lp, _mem) = lent_pool();
        let p = pool(8);
        let mut c = p.cache();
        // SAFETY: every buffer of a fresh lent pool is lent out; frame 1 is adopted once.
        let a = unsafe { lp.adopt(1, 64, 100) }.unwrap();
        let second = c.clone_packet(&a);
        let a = lp.lend(a).expect_err("shared: not lent");
        c.free(second);
        assert_eq!(lp.live(), 1);
        assert_eq!(lp.lend(a).ok(), Some((1, 64, 100)));
        assert_eq!(lp.live(), 0);
        let other = c.alloc(10).unwrap();
        let other = lp.lend(other).expect_err("another pool's packet");
        c.free(other);
        // A lent-out buffer can be adopted again, or given back to wait with freed ones.
        // SAFETY: `lend` above lent frame 1 out again, and nothing holds it.
        let a = unsafe { lp.adopt(1, 0, 10) }.unwrap();
        assert!(lp.lend(a).is_ok());
        // SAFETY: frame 1 is lent out again (by `lend`) and named once; 99 is out of range
        // and skipped.
        unsafe { lp.give_back(&[1, 99]) };
        let mut back = Vec::new();
        lp.take_returned(8, |i| back.push(i));
        assert_eq!(back, [1]);
    }

    #[test]
    fn lent_pool_keeps_its_owner_alive_until_dropped() {
        let (lp, mem) = lent_pool();
        let weak = Arc::downgrade(&mem);
        drop(mem);
        assert!(weak.upgrade().is_some(), "the pool holds the owner");
        drop(lp);
        assert!(
            weak.upgrade().is_none(),
            "dropping the pool releases the owner"
        );
    }

    #[test]
    fn headroom_and_tailroom_operations() {
        let p = pool(4);
        let mut c = p.cache();
        let mut a = c.alloc(0).unwrap();
        assert!(a.set_data(&[1, 2, 3, 4]));
        a.prepend(2).unwrap().copy_from_slice(&[9, 9]);
        assert_eq!(a.data(), &[9, 9, 1, 2, 3, 4]);
        assert!(a.adj(3));
        assert_eq!(a.data(), &[2, 3, 4]);
        a.append(1).unwrap()[0] = 5;
        assert_eq!(a.data(), &[2, 3, 4, 5]);
        assert!(a.trim(2));
        assert_eq!(a.data(), &[2, 3]);
        assert!(!a.trim(3));
        assert!(a.prepend(10_000).is_none());
        c.free(a);
    }
}
