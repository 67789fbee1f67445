//! bessemer-kv: a memcached text-protocol server on MegaPipe or epoll.

use std::sync::Arc;

use clap::{CommandFactory, Parser};
use megapipe::apps::{self, kv::Kv, Io};

/// Memcached text-protocol server (get/gets/set/add/replace/cas/delete/incr/decr/flush_all/version/stats).
#[derive(Parser)]
#[command(name = "bessemer-kv", version)]
struct Args {
    /// TCP port (0 picks a free one).
    #[arg(long, default_value_t = 11211)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    addr: String,
    /// I/O backend: megapipe or epoll.
    #[arg(long, default_value = "megapipe", value_parser = Io::parse)]
    io: Io,
    /// CPUs to run one pinned thread on each (e.g. 0,1 or 0-3); default: all.
    #[arg(long)]
    cpus: Option<String>,
}

fn main() {
    bessemer_clidoc::generate_if_asked(Args::command);
    let args = Args::parse();
    apps::run_server(
        "bessemer-kv",
        Arc::new(Kv::default()),
        &args.addr,
        args.port,
        args.cpus.as_deref(),
        args.io,
    );
}
