//! bessemer-httpd: an HTTP/1.1 static-file server on MegaPipe or epoll.

use std::sync::Arc;

use clap::{CommandFactory, Parser};
use megapipe::apps::{self, http::StaticFiles, Io};

/// HTTP/1.1 static-file server (GET/HEAD, keep-alive, pipelining).
#[derive(Parser)]
#[command(name = "bessemer-httpd", version)]
struct Args {
    /// Directory to serve.
    #[arg(long)]
    root: std::path::PathBuf,
    /// TCP port (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
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
    if !args.root.is_dir() {
        eprintln!(
            "bessemer-httpd: --root {} is not a directory",
            args.root.display()
        );
        std::process::exit(2);
    }
    apps::run_server(
        "bessemer-httpd",
        Arc::new(StaticFiles::new(&args.root)),
        &args.addr,
        args.port,
        args.cpus.as_deref(),
        args.io,
    );
}
