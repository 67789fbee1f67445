//! Starting DPDK's Environment Abstraction Layer inside bessemerd, as bessd does on its
//! first PMDPort, and keeping what DPDK logs.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::DpdkError;

/// The EAL's state: not tried, started, or failed (with why; DPDK cannot be started twice).
static EAL: Mutex<Option<Result<(), DpdkError>>> = Mutex::new(None);
/// Arguments the daemon adds (its `--dpdk-args`), and its hugepage memory (`-m`).
static EXTRA: Mutex<(Vec<String>, Option<u32>)> = Mutex::new((Vec::new(), None));
/// The last lines DPDK logged, for error messages ("DPDK's own reason").
static LOG: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
const LOG_LINES: usize = 16;

/// Sets the arguments added to the EAL's (before the first PMDPort) and the hugepage memory
/// in MB (`None`: hugepages if the machine has free ones, else `--no-huge`; `Some(0)`:
/// never hugepages, as bessd's `-m 0`).
pub fn set_eal_args(extra: Vec<String>, mem_mb: Option<u32>) {
    *EXTRA.lock().unwrap() = (extra, mem_mb);
}

fn free_hugepages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The CPUs this process may run on, as an EAL cpuset ("0-3,6").
fn allowed_cpus() -> String {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the size matches the set passed.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i is below CPU_SETSIZE.
        .filter(|&i| !ok || unsafe { libc::CPU_ISSET(i, &set) })
        .take(if ok { usize::MAX } else { 1 })
        .collect();
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The EAL's whole argument list as it is (or would be) started.
pub fn eal_args() -> Vec<String> {
    let (extra, mem) = EXTRA.lock().unwrap().clone();
    // One lcore (0) floating over every CPU the daemon may use: the EAL's own thread is
    // not a worker, and Bessemer pins its workers itself. No files under /var/run
    // (--in-memory with hugepages; --no-shconf without, where --in-memory is refused), so
    // several daemons (and bessd) can run side by side.
    let mut a = vec![
        "bessemerd".to_string(),
        format!("--lcores=0@({})", allowed_cpus()),
    ];
    let huge = match mem {
        Some(0) => false,
        Some(_) => true,
        None => free_hugepages() > 0,
    };
    if huge {
        a.push("--in-memory".into());
        if let Some(mb) = mem {
            a.push("-m".into());
            a.push(mb.to_string());
        }
    } else {
        // No hugepages: plain memory, virtual addresses (virtual devices, AF_XDP, vhost).
        a.extend(["--no-huge", "--no-shconf", "-m", "512", "--iova-mode=va"].map(String::from));
    }
    a.extend(extra);
    a
}

/// The last lines DPDK logged (newest last).
pub fn recent_log() -> Vec<String> {
    LOG.lock().unwrap().iter().cloned().collect()
}

/// Called by the C shim for every line DPDK writes to its log.
#[cfg(dpdk)]
#[no_mangle]
extern "C" fn bsm_dpdk_log(buf: *const std::os::raw::c_char, len: usize) {
    if buf.is_null() {
        return;
    }
    // SAFETY: DPDK hands its log stream `len` bytes at `buf`.
    let bytes = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
    let text = String::from_utf8_lossy(bytes);
    let mut log = LOG.lock().unwrap();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        tracing::info!(target: "dpdk", "{line}");
        if log.len() == LOG_LINES {
            log.pop_front();
        }
        log.push_back(line.to_string());
    }
}

/// Starts the EAL if it has not been started; the result of the first try is kept.
pub fn ensure_eal() -> Result<(), DpdkError> {
    crate::available()?;
    let mut state = EAL.lock().unwrap();
    if let Some(r) = &*state {
        return r.clone();
    }
    let r = start(eal_args());
    *state = Some(r.clone());
    r
}

#[cfg(not(dpdk))]
fn start(_args: Vec<String>) -> Result<(), DpdkError> {
    crate::available()
}

#[cfg(dpdk)]
fn start(args: Vec<String>) -> Result<(), DpdkError> {
    use std::ffi::CString;
    let shown = args.join(" ");
    tracing::info!("starting DPDK: {shown}");
    // The EAL pins the thread that starts it to its main lcore: a thread of its own, so
    // no control-plane thread is pinned. The EAL keeps the argv strings: leak them.
    let handle = std::thread::Builder::new()
        .name("dpdk-eal-init".into())
        .spawn(move || {
            let mut ptrs: Vec<*mut std::os::raw::c_char> = args
                .into_iter()
                .map(|a| CString::new(a).unwrap_or_default().into_raw())
                .collect();
            let argc = ptrs.len() as i32;
            ptrs.push(std::ptr::null_mut());
            let argv = Box::leak(ptrs.into_boxed_slice());
            // SAFETY: argv is a NULL-terminated array of NUL-terminated strings that live
            // for the rest of the process.
            unsafe { crate::ffi::bsm_eal_init(argc, argv.as_mut_ptr()) }
        })
        .map_err(|e| DpdkError {
            errno: libc::EAGAIN,
            msg: format!("could not start a thread for DPDK: {e}"),
        })?;
    let r = handle.join().unwrap_or(-libc::EFAULT);
    if r < 0 {
        let log = recent_log();
        return Err(DpdkError {
            errno: -r,
            msg: format!(
                "DPDK's EAL did not start ({}) with '{shown}'{}",
                crate::ffi::strerror(r),
                if log.is_empty() {
                    String::new()
                } else {
                    format!(": {}", log.join(" | "))
                }
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_without_hugepages_use_plain_memory() {
        set_eal_args(vec!["--log-level=8".into()], Some(0));
        let a = eal_args();
        assert_eq!(a[0], "bessemerd");
        assert!(a.contains(&"--no-shconf".to_string()));
        assert!(a.contains(&"--no-huge".to_string()));
        assert!(a.iter().any(|x| x.starts_with("--lcores=0@(")));
        assert_eq!(a.last().unwrap(), "--log-level=8");
        set_eal_args(vec![], Some(1024));
        let a = eal_args();
        assert!(!a.contains(&"--no-huge".to_string()));
        assert!(a.contains(&"--in-memory".to_string()));
        assert!(a.windows(2).any(|w| w == ["-m", "1024"]));
        set_eal_args(vec![], None);
    }
}
