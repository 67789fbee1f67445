//! bessemer-kv: a memcached text-protocol server on MegaPipe or epoll.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use megapipe::apps::{self, kv::Kv, Io, ServeConfig};

/// Memcached text-protocol server (get/gets/set/add/replace/cas/delete/incr/decr/flush_all/version/stats).
#[derive(Parser)]
#[command(name = "bessemer-kv")]
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
    let args = Args::parse();
    let cpus = match args
        .cpus
        .as_deref()
        .map(apps::parse_cpus)
        .unwrap_or_else(|| Ok((0..megapipe::net::online_cpus()).collect()))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bessemer-kv: {e}");
            std::process::exit(2);
        }
    };
    let addr: SocketAddr = match format!("{}:{}", args.addr, args.port).parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bessemer-kv: bad address {}:{}: {e}", args.addr, args.port);
            std::process::exit(2);
        }
    };
    let server = match apps::serve(
        Arc::new(Kv::default()),
        ServeConfig {
            addr,
            cpus: cpus.clone(),
            io: args.io,
        },
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bessemer-kv: cannot serve on {addr}: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "bessemer-kv listening on {} (io={:?}, cpus={cpus:?})",
        server.addr, args.io
    );
    apps::wait_for_termination();
    server.shutdown();
}
