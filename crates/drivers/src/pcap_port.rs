//! PCAPPort: BESS's libpcap live-capture driver (`PCAPPortArg { dev }`), served by the
//! AF_PACKET code of [`crate::af_packet_port`] on interface `dev` in the daemon's namespace,
//! promiscuous as BESS opens it, so BESS scripts using `PCAPPort(dev='eth0')` run unchanged.

use bessemer_core::port::{NewPort, PortDriver, PortParams};
use bessemer_core::{Args, Error, Result, Value};

use crate::af_packet_port::{self, Config, DEFAULT_BLOCK_SIZE, DEFAULT_NUM_BLOCKS};

fn create(params: &PortParams, arg: &Value) -> Result<NewPort> {
    let mut a = Args::new(arg, "PCAPPortArg")?;
    let dev = a.str("dev")?.unwrap_or("").to_string();
    a.finish()?;
    if dev.is_empty() {
        return Err(Error::invalid(
            "PCAPPortArg.dev: an interface name is required",
        ));
    }
    let cfg = Config {
        ifname: dev,
        netns: String::new(),
        promiscuous: true,
        block_size: DEFAULT_BLOCK_SIZE,
        num_blocks: DEFAULT_NUM_BLOCKS,
        keep_offloads: false,
        driver: "PCAPPort",
    };
    af_packet_port::open(params, &cfg)
}

/// The PCAPPort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "PCAPPort",
    name_template: "pcap_port",
    help: "live capture from a Linux interface (BESS's libpcap driver, served by AFPacketPort's AF_PACKET code)",
    arg_type: "PCAPPortArg",
    arg_doc: &["dev: string — the interface, in the daemon's network namespace (required)"],
    create,
};
