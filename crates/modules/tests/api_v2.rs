//! The module API's two tables, checked over every class: each listed command reaches its own
//! handler (dispatch is by the table, so a listed command without a handler cannot exist and a
//! handler without a listing cannot be called), and drop reasons are counted under their own
//! printed names. Also: thread-safe commands of shared modules run without pausing workers.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::sched::TaskResult;
use bessemer_core::testing::Harness;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, InitContext, Instance, ModuleClass, PacketBatch,
    PoolCache, Result, SharedModule, Value,
};
use common::{class, engine_with_buffers};

/// A port whose queues receive nothing and take every packet (enough to create I/O modules).
struct NullPort;
struct NullRx;
struct NullTx;

impl RxQueue for NullRx {
    fn recv(&mut self, _: &mut PoolCache, _: &mut PacketBatch, _: usize) -> usize {
        0
    }
}

impl TxQueue for NullTx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        let n = batch.len();
        cache.free_bulk(batch);
        n
    }
}

impl Port for NullPort {
    fn rx_queue(&self, _: usize) -> Result<Box<dyn RxQueue>> {
        Ok(Box::new(NullRx))
    }
    fn tx_queue(&self, _: usize) -> Result<Box<dyn TxQueue>> {
        Ok(Box::new(NullTx))
    }
    fn link_status(&self) -> LinkStatus {
        LinkStatus::default()
    }
    fn conf(&self) -> PortConf {
        PortConf::default()
    }
}

static NULL_PORT: PortDriver = PortDriver {
    name: "NullPort",
    name_template: "null",
    help: "test port",
    arg_type: "EmptyArg",
    arg_doc: &[],
    create: |p, _| {
        Ok(NewPort {
            port: Box::new(NullPort),
            num_inc_q: p.num_inc_q.max(1),
            num_out_q: p.num_out_q.max(1),
        })
    },
};

fn add_port(h: &Harness, name: &str) {
    h.graph
        .ports()
        .create(
            &NULL_PORT,
            PortParams {
                name: name.into(),
                num_inc_q: 4,
                num_out_q: 4,
                size_inc_q: 0,
                size_out_q: 0,
                pool: h.pool.clone(),
            },
            &Value::map(),
        )
        .unwrap();
}

fn field(offset: i64, num_bytes: i64) -> Value {
    Value::map()
        .with("offset", offset)
        .with("num_bytes", num_bytes)
}

/// The smallest valid argument of each class; the I/O classes name port `p{n}`.
fn minimal_arg(class: &str, n: usize) -> Value {
    bessemer_modules::samples::minimal_arg(class, &format!("p{n}"))
}

/// The errors dispatch itself produces (never a handler's).
fn dispatch_error(e: &Error) -> bool {
    e.msg.contains("has no command") || e.msg.contains("other kind of instance")
}

#[test]
fn every_listed_command_reaches_its_handler() {
    let mut calls = 0;
    for (n, c) in bessemer_modules::classes().iter().enumerate() {
        // A fresh harness per class: the I/O classes claim port queues.
        let mut h = Harness::new();
        add_port(&h, &format!("p{n}"));
        add_port(&h, "q");
        let name = h
            .add(c, "m", &minimal_arg(c.name, n))
            .unwrap_or_else(|e| panic!("{}: cannot create with a minimal argument: {e}", c.name));
        let mut names: Vec<&str> = c.commands.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(
            names.len(),
            c.commands.len(),
            "{}: a command is listed twice (the second entry could never run)",
            c.name
        );
        for spec in c.commands {
            // The handler runs (a handler bound to another type panics in its downcast); what
            // it answers to an empty argument is its own business.
            if let Err(e) = h.command(&name, spec.name, &Value::map()) {
                assert!(
                    !dispatch_error(&e),
                    "{}.{}: did not reach its handler: {}",
                    c.name,
                    spec.name,
                    e.msg
                );
            }
            calls += 1;
        }
        // An unlisted name is refused by dispatch, naming the class and its commands.
        let e = h
            .command(&name, "no_such_command", &Value::map())
            .unwrap_err();
        assert_eq!(e.code, libc::ENOTSUP, "{}", c.name);
        assert!(
            e.msg
                .contains(&format!("({}) has no command 'no_such_command'", c.name)),
            "{}",
            e.msg
        );
        let listed = if c.commands.is_empty() {
            "none".to_string()
        } else {
            names_in_order(c)
        };
        assert!(
            e.msg.ends_with(&format!("(commands: {listed})")),
            "{}",
            e.msg
        );
    }
    assert!(calls > 60, "only {calls} commands called");
}

fn names_in_order(c: &ModuleClass) -> String {
    c.commands
        .iter()
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// An Ethernet + IPv4 + UDP frame (checksums not needed here).
fn ipv4_udp(ttl: u8, dst: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8 + 18];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20u16 + 8 + 18).to_be_bytes());
    ip[8] = ttl;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&dst);
    f[34..36].copy_from_slice(&1000u16.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

fn not_ipv4() -> Vec<u8> {
    let mut f = ipv4_udp(64, [10, 0, 0, 2]);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f
}

fn bad_ip_header() -> Vec<u8> {
    let mut f = ipv4_udp(64, [10, 0, 0, 2]);
    f[14] = 0x65;
    f
}

/// Injects `frames` into `module` and checks that exactly `want` was counted, by reason name;
/// every other reason (the core ones included) stays where it was.
fn expect_drops(h: &mut Harness, module: &str, frames: &[Vec<u8>], want: &[(&str, u64)]) {
    let before = h.graph.drops_of(module).unwrap();
    h.inject(module, 0, frames);
    let after = h.graph.drops_of(module).unwrap();
    for ((reason, b), (r2, a)) in before.iter().zip(&after) {
        assert_eq!(reason, r2);
        let got = a - b;
        let exp = want.iter().find(|(r, _)| r == reason).map_or(0, |w| w.1);
        assert_eq!(got, exp, "{module}: reason '{reason}': {after:?}");
    }
    for (r, _) in want {
        assert!(
            after.iter().any(|(x, _)| x == r),
            "{module} has no reason '{r}'"
        );
    }
}

#[test]
fn update_ttl_counts_each_reason_under_its_name() {
    let mut h = Harness::new();
    h.add(class("UpdateTTL"), "ttl", &Value::map()).unwrap();
    let names: Vec<String> = h
        .graph
        .drops_of("ttl")
        .unwrap()
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(
        names,
        [
            "too_short",
            "not_ipv4",
            "bad_ip_header",
            "ttl_expired",
            "deadend",
            "unhandled",
            "hop_limit"
        ]
    );
    expect_drops(&mut h, "ttl", &[vec![0u8; 10]], &[("too_short", 1)]);
    expect_drops(&mut h, "ttl", &[not_ipv4(), not_ipv4()], &[("not_ipv4", 2)]);
    expect_drops(&mut h, "ttl", &[bad_ip_header()], &[("bad_ip_header", 1)]);
    expect_drops(
        &mut h,
        "ttl",
        &[ipv4_udp(1, [10, 0, 0, 2]), ipv4_udp(0, [10, 0, 0, 2])],
        &[("ttl_expired", 2)],
    );
    // Gate 0 is not connected: a forwarded packet is the core's `deadend`.
    expect_drops(
        &mut h,
        "ttl",
        &[ipv4_udp(64, [10, 0, 0, 2])],
        &[("deadend", 1)],
    );
    let cap = h.capture("ttl", 0);
    expect_drops(&mut h, "ttl", &[ipv4_udp(64, [10, 0, 0, 2])], &[]);
    assert_eq!(cap.len(), 1);
}

#[test]
fn acl_counts_each_reason_under_its_name() {
    let mut h = Harness::new();
    let rule = |dst: &str, drop: bool| Value::map().with("dst_ip", dst).with("drop", drop);
    let arg = Value::map().with(
        "rules",
        Value::List(vec![rule("10.0.0.2/32", false), rule("10.0.0.3/32", true)]),
    );
    h.add(class("ACL"), "acl", &arg).unwrap();
    let _cap = h.capture("acl", 0);
    expect_drops(&mut h, "acl", &[ipv4_udp(64, [10, 0, 0, 2])], &[]);
    expect_drops(
        &mut h,
        "acl",
        &[ipv4_udp(64, [10, 0, 0, 3])],
        &[("denied", 1)],
    );
    expect_drops(
        &mut h,
        "acl",
        &[ipv4_udp(64, [10, 0, 0, 4])],
        &[("no_match", 1)],
    );
    let short = ipv4_udp(64, [10, 0, 0, 2])[..30].to_vec();
    expect_drops(&mut h, "acl", &[short], &[("too_short", 1)]);
    expect_drops(&mut h, "acl", &[not_ipv4()], &[("not_ipv4", 1)]);
    expect_drops(&mut h, "acl", &[bad_ip_header()], &[("bad_ip_header", 1)]);
}

#[test]
fn exact_match_counts_each_reason_under_its_name() {
    let mut h = Harness::new();
    let arg = Value::map().with("fields", Value::List(vec![field(30, 4)]));
    h.add(class("ExactMatch"), "em", &arg).unwrap();
    let _cap = h.capture("em", 0);
    let add = |dst: [u8; 4], gate: i64| {
        Value::map()
            .with(
                "fields",
                Value::List(vec![Value::map().with("value_bin", dst.to_vec())]),
            )
            .with("gate", gate)
    };
    h.command("em", "add", &add([10, 0, 0, 2], 0)).unwrap();
    h.command("em", "add", &add([10, 0, 0, 3], 8192)).unwrap();
    expect_drops(&mut h, "em", &[ipv4_udp(64, [10, 0, 0, 2])], &[]);
    expect_drops(
        &mut h,
        "em",
        &[ipv4_udp(64, [10, 0, 0, 3])],
        &[("rule_drop", 1)],
    );
    expect_drops(
        &mut h,
        "em",
        &[ipv4_udp(64, [10, 0, 0, 4])],
        &[("no_match", 1)],
    );
    expect_drops(&mut h, "em", &[vec![0u8; 20]], &[("too_short", 1)]);
}

#[test]
fn nat_counts_embedded_and_own_reasons_under_their_names() {
    let mut h = Harness::new();
    h.add(class("NAT"), "nat", &minimal_arg("NAT", 0)).unwrap();
    let _out = h.capture("nat", 1);
    expect_drops(&mut h, "nat", &[vec![0u8; 10]], &[("too_short", 1)]);
    expect_drops(&mut h, "nat", &[not_ipv4()], &[("not_ipv4", 1)]);
    expect_drops(&mut h, "nat", &[bad_ip_header()], &[("bad_ip_header", 1)]);
    let mut frag = ipv4_udp(64, [8, 8, 8, 8]);
    frag[20] = 0x20; // more fragments
    expect_drops(&mut h, "nat", &[frag], &[("fragment", 1)]);
    let mut other = ipv4_udp(64, [8, 8, 8, 8]);
    other[23] = 47; // GRE
    expect_drops(&mut h, "nat", &[other], &[("unsupported_protocol", 1)]);
    let mut zero = ipv4_udp(64, [8, 8, 8, 8]);
    zero[34..36].copy_from_slice(&[0, 0]);
    expect_drops(&mut h, "nat", &[zero], &[("zero_port", 1)]);
    expect_drops(&mut h, "nat", &[ipv4_udp(64, [8, 8, 8, 8])], &[]);
}

/// A shared test class: its task counts runs; `wait_for_runs` (thread-safe) returns once the
/// workers have run the task again, `runs_stay_put` (not thread-safe) checks they do not.
struct Ticker(AtomicU64);

impl Ticker {
    fn wait_for_runs(&self, _: &mut Context, _: &Value) -> Result<Value> {
        let start = self.0.load(Ordering::Relaxed);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if self.0.load(Ordering::Relaxed) > start + 10 {
                return Ok(Value::Null);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(Error::busy("the workers did not run during the command"))
    }

    fn runs_stay_put(&self, _: &mut Context, _: &Value) -> Result<Value> {
        let start = self.0.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
        if self.0.load(Ordering::Relaxed) == start {
            Ok(Value::Null)
        } else {
            Err(Error::busy("the workers ran during the command"))
        }
    }
}

impl SharedModule for Ticker {
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, _: u16) {
        ctx.free_batch(batch);
    }
    fn run_task(&self, _: &mut Context, _: u64) -> TaskResult {
        self.0.fetch_add(1, Ordering::Relaxed);
        TaskResult {
            block: false,
            packets: 0,
            bits: 0,
        }
    }
}

static TICKER: ModuleClass = ModuleClass {
    name: "TestTicker",
    name_template: "ticker",
    help: "counts its task runs",
    arg_type: "EmptyArg",
    arg_doc: &[],
    igates: 0,
    ogates: 0,
    commands: &[
        CommandSpec {
            name: "wait_for_runs",
            arg_type: "EmptyArg",
            help: "returns once the task ran again",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: false,
            handler: handler!(Shared Ticker, Ticker::wait_for_runs),
        },
        CommandSpec {
            name: "runs_stay_put",
            arg_type: "EmptyArg",
            help: "checks the task does not run",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: false,
            handler: handler!(Shared Ticker, Ticker::runs_stay_put),
        },
    ],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init: &mut InitContext, arg| {
        Args::new(arg, "EmptyArg")?.finish()?;
        init.register_task(0);
        Ok(Instance::Shared(Box::new(Ticker(AtomicU64::new(0)))))
    },
};

#[test]
fn thread_safe_commands_of_shared_modules_run_without_pausing() {
    let mut e = engine_with_buffers(1024);
    e.add_worker(0, 0).unwrap();
    e.create_module(&TICKER, Some("t"), &Value::map()).unwrap();
    e.attach_task("t", 0, None, Some(0)).unwrap();
    e.resume_all().unwrap();
    e.command("t", "wait_for_runs", &Value::map()).unwrap();
    e.command("t", "runs_stay_put", &Value::map()).unwrap();
    e.command("t", "wait_for_runs", &Value::map()).unwrap();
    let err = e.command("t", "nope", &Value::map()).unwrap_err();
    assert_eq!(err.code, libc::ENOTSUP);
    assert!(
        err.msg.ends_with(
            "(TestTicker) has no command 'nope' (commands: wait_for_runs, runs_stay_put)"
        ),
        "{}",
        err.msg
    );
    e.pause_all().unwrap();
}
