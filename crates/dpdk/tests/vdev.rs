//! The EAL and ethdev ports on DPDK's virtual devices (no NIC, no hugepages): net_null and
//! net_ring. One process starts one EAL, so every case runs in one test, in order.

#[cfg(dpdk)]
use bessemer_dpdk::{DevSpec, EthPort, PortSetup, RxBurst};

#[cfg(dpdk)]
fn buffers(n: usize, size: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| vec![i as u8; size]).collect()
}

#[test]
#[cfg_attr(
    not(dpdk),
    ignore = "built without DPDK: install libdpdk-dev (make deps)"
)]
#[cfg_attr(not(root), ignore = "needs root: DPDK's EAL")]
fn virtual_devices_send_receive_count_and_refuse_what_they_cannot() {
    #[cfg(dpdk)]
    run();
}

#[cfg(dpdk)]
fn run() {
    bessemer_dpdk::set_eal_args(vec![], Some(0));
    bessemer_dpdk::ensure_eal().expect("EAL starts without hugepages");

    // net_null: receives as fast as asked (64-byte packets), swallows what it is sent.
    let mut null = EthPort::open(&DevSpec::Vdev("net_null0".into())).unwrap();
    assert_eq!(null.info().driver, "net_null");
    null.setup(&PortSetup::default(), None).unwrap();
    let mut bufs = buffers(32, 2048);
    let ptrs: Vec<*mut u8> = bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
    let mut burst = RxBurst::default();
    let n = null.rx_burst(0, &mut burst, 32);
    assert_eq!(n, 32);
    assert!(
        burst.lens[..32].iter().all(|&l| l == 64),
        "{:?}",
        burst.lens
    );
    EthPort::rx_copy_out(&mut burst, &ptrs);
    let src: Vec<*const u8> = bufs.iter().map(|b| b.as_ptr()).collect();
    let slens = vec![100u32; 32];
    let mut nombuf = 0;
    assert_eq!(null.tx_copy(0, &src, &slens, &mut nombuf), 32);
    let s = null.stats();
    assert_eq!((s.ipackets, s.opackets), (32, 32));
    // (net_null counts packets, not bytes.)

    // The same vdev twice is refused by name; so is an unknown vdev, with DPDK's words.
    let e = EthPort::open(&DevSpec::Vdev("net_null0".into())).unwrap_err();
    assert_eq!(e.errno, libc::EEXIST, "{e}");
    let e = EthPort::open(&DevSpec::Vdev("net_nosuchdriver0".into())).unwrap_err();
    assert!(e.msg.contains("net_nosuchdriver0"), "{e}");
    let e = EthPort::open(&DevSpec::Vdev("net_null1,nosuchoption=1".into())).unwrap_err();
    assert!(e.msg.contains("net_null1,nosuchoption=1"), "{e}");
    // As BESS: beyond DPDK's port table EINVAL, a free slot ENODEV, a port held EBUSY.
    let e = EthPort::open(&DevSpec::PortId(200)).unwrap_err();
    assert_eq!(e.errno, libc::EINVAL, "{e}");
    let e = EthPort::open(&DevSpec::PortId(20)).unwrap_err();
    assert_eq!(e.errno, libc::ENODEV, "{e}");
    let e = EthPort::open(&DevSpec::PortId(null.id())).unwrap_err();
    assert_eq!(e.errno, libc::EBUSY, "{e}");
    let e = EthPort::open(&DevSpec::Pci("0000:ff:1f.7".into())).unwrap_err();
    assert!(e.msg.contains("0000:ff:1f.7"), "{e}");

    // net_ring: what is sent on its one queue pair comes back on it, bytes intact.
    let mut ring = EthPort::open(&DevSpec::Vdev("net_ring0".into())).unwrap();
    let e = ring
        .setup(
            &PortSetup {
                rx_queues: 64,
                ..PortSetup::default()
            },
            None,
        )
        .unwrap_err();
    assert!(
        e.msg.contains("num_inc_q 64 is more than the device has"),
        "{e}"
    );
    ring.setup(&PortSetup::default(), None).unwrap();
    let data: Vec<Vec<u8>> = (0..8)
        .map(|i| (0..60 + i).map(|b| (b * 7 + i) as u8).collect())
        .collect();
    let src: Vec<*const u8> = data.iter().map(|b| b.as_ptr()).collect();
    let slens: Vec<u32> = data.iter().map(|b| b.len() as u32).collect();
    assert_eq!(ring.tx_copy(0, &src, &slens, &mut nombuf), 8);
    let n = ring.rx_burst(0, &mut burst, 16);
    assert_eq!(n, 8);
    let lens = burst.lens;
    // One packet dropped on the way out (a null destination): the rest copied intact.
    let mut dst = ptrs[..8].to_vec();
    dst[3] = std::ptr::null_mut();
    EthPort::rx_copy_out(&mut burst, &dst);
    for i in (0..8).filter(|&i| i != 3) {
        assert_eq!(&bufs[i][..lens[i] as usize], &data[i][..]);
    }
    // Closing detaches the vdev: the name can be used again.
    drop(ring);
    let again = EthPort::open(&DevSpec::Vdev("net_ring0".into())).unwrap();
    drop(again);
    drop(null);
}
