//! `make bench-ports` (one run; `bench/ports.sh` builds the topology and calls it per mode):
//! how many 60-byte UDP frames per second a switch forwards between two veth pairs.
//!
//! `bench-ports <mode> <gen_ns> <gen_if> <sw_in> <sw_out> <sink_ns> <sink_if> <seconds>`
//!
//! A Bessemer generator (Source -> Rewrite -> PortOut on an AFXDPPort on `gen_if` inside
//! `gen_ns`, worker 0) sends as fast as it can. Mode `afxdp`: a Bessemer switch (PortInc on
//! an AFXDPPort on `sw_in` -> PortOut on an AFXDPPort on `sw_out`, worker 1) forwards; mode
//! `bridge`: the caller has put `sw_in` and `sw_out` in a Linux bridge and only the generator
//! runs. The sink counts what reaches `sink_if` (its rx_packets). Prints one JSON line.

use std::process::Command;
use std::time::{Duration, Instant};

use bessemer_core::engine::{Engine, EngineConfig};
use bessemer_core::mem::PagePolicy;
use bessemer_core::port::PortParams;
use bessemer_core::{Result, Value};

/// Frame length without FCS (64 bytes on the wire).
const FRAME: usize = 60;
/// Destination MAC of the generated frames (the bridge has a static entry for it).
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

fn template() -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME);
    f.extend_from_slice(&DST_MAC);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00]);
    let ip_len = (FRAME - 14) as u16;
    let mut ip = [
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 99, 0, 1, 10, 99, 0, 2,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    let udp_len = ip_len - 20;
    f.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e]);
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(FRAME, 0);
    f
}

fn sink_count(ns: &str, ifname: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat"])
        .arg(format!("/sys/class/net/{ifname}/statistics/rx_packets"))
        .output()
        .expect("ip netns exec");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

fn port(e: &Engine, name: &str, ifname: &str, ns: &str) -> Result<()> {
    let arg = Value::map()
        .with("ifname", ifname)
        .with("netns", ns)
        .with("ring_size", 2048u64);
    let p = e.ports().create(
        &bessemer_drivers::af_xdp_port::DRIVER,
        PortParams {
            name: name.into(),
            num_inc_q: 0,
            num_out_q: 0,
            size_inc_q: 0,
            size_out_q: 0,
            pool: e.pool().clone(),
        },
        &arg,
    )?;
    eprintln!("bench-ports: port {name}: {}", p.port().desc());
    Ok(())
}

fn module(e: &mut Engine, class: &str, name: &str, arg: Value) -> Result<()> {
    let c = bessemer_modules::find(class).expect("module class");
    e.create_module(c, Some(name), &arg).map(|_| ())
}

fn run(args: &[String]) -> Result<String> {
    let [mode, gen_ns, gen_if, sw_in, sw_out, sink_ns, sink_if, secs] = args else {
        eprintln!(
            "usage: bench-ports <afxdp|bridge> <gen_ns> <gen_if> <sw_in> <sw_out> <sink_ns> <sink_if> <seconds>"
        );
        std::process::exit(2);
    };
    let secs: f64 = secs.parse().expect("seconds");
    let mut e = Engine::new(EngineConfig {
        buffers: 32768,
        pages: PagePolicy::Auto,
        pin: false,
    })?;
    e.add_worker(0, 0)?;
    port(&e, "gen", gen_if, gen_ns)?;
    module(
        &mut e,
        "Source",
        "src",
        Value::map().with("pkt_size", FRAME),
    )?;
    module(
        &mut e,
        "Rewrite",
        "tmpl",
        Value::map().with("templates", vec![Value::from(template())]),
    )?;
    module(
        &mut e,
        "PortOut",
        "gen_out",
        Value::map().with("port", "gen"),
    )?;
    e.connect("src", 0, "tmpl", 0)?;
    e.connect("tmpl", 0, "gen_out", 0)?;
    if mode == "afxdp" {
        e.add_worker(1, 1)?;
        port(&e, "sw_in", sw_in, "")?;
        port(&e, "sw_out", sw_out, "")?;
        module(&mut e, "PortInc", "inc", Value::map().with("port", "sw_in"))?;
        module(
            &mut e,
            "PortOut",
            "out",
            Value::map().with("port", "sw_out"),
        )?;
        e.connect("inc", 0, "out", 0)?;
        e.attach_task("inc", 0, None, Some(1))?;
    }
    std::thread::sleep(Duration::from_secs(1));
    let gen = e.ports().get("gen")?;
    let sw = e.ports().get("sw_in").ok();
    let snap = || {
        let (g_in, g_out) = gen.counts();
        let _ = g_in;
        let s = sw.as_ref().map(|p| p.counts().0).unwrap_or_default();
        (
            Instant::now(),
            sink_count(sink_ns, sink_if),
            g_out.packets,
            s.packets,
            s.dropped,
        )
    };
    let a = snap();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let b = snap();
    let dt = (b.0 - a.0).as_secs_f64();
    let mpps = |x: u64, y: u64| (y - x) as f64 / dt / 1e6;
    let line = format!(
        "{{\"mode\":\"{mode}\",\"seconds\":{dt:.2},\"frame_bytes\":{},\"offered_mpps\":{:.4},\"sink_mpps\":{:.4},\"switch_rx_mpps\":{:.4},\"switch_rx_dropped\":{}}}",
        FRAME + 4,
        mpps(a.2, b.2),
        mpps(a.1, b.1),
        mpps(a.3, b.3),
        b.4 - a.4
    );
    drop((gen, sw));
    for m in ["src", "tmpl", "gen_out", "inc", "out"] {
        let _ = e.destroy_module(m);
    }
    for p in ["gen", "sw_in", "sw_out"] {
        let _ = e.ports().destroy(p);
    }
    Ok(line)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("bench-ports: {}", e.msg);
            std::process::exit(1);
        }
    }
}
