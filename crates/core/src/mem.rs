//! Page-aligned memory regions backing packet pools (2 MiB hugepages when available).

use std::ptr::NonNull;

/// Size of one hugepage on x86_64 Linux.
pub const HUGEPAGE_SIZE: usize = 2 << 20;

/// Which kind of pages back a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Explicit 2 MiB hugepages (MAP_HUGETLB).
    Huge,
    /// Ordinary 4 KiB pages.
    Plain,
}

impl std::fmt::Display for PageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PageKind::Huge => "2 MiB hugepages",
            PageKind::Plain => "plain pages (transparent hugepages requested)",
        })
    }
}

/// How to choose pages for a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PagePolicy {
    /// Hugepages when the machine has free ones, plain pages otherwise.
    #[default]
    Auto,
    /// Hugepages or fail.
    RequireHuge,
    /// Never hugepages.
    Plain,
}

/// One contiguous anonymous mapping, unmapped on drop.
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    kind: PageKind,
}

// SAFETY: the region is plain memory; synchronisation of its contents is the users' concern.
unsafe impl Send for Region {}
// SAFETY: as for `Send`: `&Region` only hands out the base pointer and length; any access
// to the memory behind them is unsafe and synchronised by its users.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `len` bytes (rounded up to the page size used), zero-filled.
    pub fn new(len: usize, policy: PagePolicy) -> std::io::Result<Region> {
        if policy != PagePolicy::Plain {
            let huge_len = len.div_ceil(HUGEPAGE_SIZE) * HUGEPAGE_SIZE;
            match Self::map(huge_len, libc::MAP_HUGETLB) {
                Ok(base) => {
                    return Ok(Region {
                        base,
                        len: huge_len,
                        kind: PageKind::Huge,
                    })
                }
                Err(e) if policy == PagePolicy::RequireHuge => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!(
                        "cannot map {huge_len} bytes of 2 MiB hugepages ({e}); reserve some with \
                             'echo 512 > /proc/sys/vm/nr_hugepages' or run without hugepages"
                    ),
                    ))
                }
                Err(_) => {}
            }
        }
        let page = 4096;
        let plain_len = len.div_ceil(page) * page;
        let base = Self::map(plain_len, 0)?;
        // Ask for transparent hugepages where the kernel allows them (advice only): fewer
        // TLB misses when descriptors and frames are spread over many pages.
        // SAFETY: advice on a mapping we own.
        unsafe {
            libc::madvise(
                base.as_ptr() as *mut libc::c_void,
                plain_len,
                libc::MADV_HUGEPAGE,
            );
        }
        Ok(Region {
            base,
            len: plain_len,
            kind: PageKind::Plain,
        })
    }

    fn map(len: usize, extra: libc::c_int) -> std::io::Result<NonNull<u8>> {
        // SAFETY: anonymous private mapping with no address hint.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(NonNull::new(p as *mut u8).expect("mmap returned null"))
    }

    /// First byte of the region (page aligned).
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the region has no bytes (never, for a mapped region).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Which pages back the region.
    pub fn kind(&self) -> PageKind {
        self.kind
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned.
        unsafe {
            libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_region_is_page_aligned_and_writable() {
        let r = Region::new(10_000, PagePolicy::Plain).unwrap();
        assert_eq!(r.kind(), PageKind::Plain);
        assert_eq!(r.base() as usize % 4096, 0);
        assert_eq!(r.len(), 12288);
        // SAFETY: the last byte of a live, writable mapping of `r.len()` bytes.
        unsafe { *r.base().add(r.len() - 1) = 7 };
    }

    #[test]
    fn auto_falls_back_to_plain_without_hugepages() {
        let r = Region::new(HUGEPAGE_SIZE, PagePolicy::Auto).unwrap();
        assert!((r.base() as usize).is_multiple_of(4096));
        if r.kind() == PageKind::Huge {
            assert_eq!(r.base() as usize % HUGEPAGE_SIZE, 0);
        }
    }
}
