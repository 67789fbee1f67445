//! BPF: classifies packets with pcap-filter(7) expressions; the highest-priority matching
//! filter chooses the output gate.
//!
//! Expressions are compiled by libpcap (for Ethernet, snaplen 65535) into classic BPF, which
//! a small interpreter here defines the semantics, with every packet load checked against the
//! packet length; a load past the end ends the program with "no match", as the kernel's filter
//! does. Packets are not run through the programs one by one: all filters are merged into one
//! structure (bpf_compile.rs) that finds the first accepting filter with a few table lookups.
use super::bpf_compile::{analyse, Columns, Merged, PathSpec};
pub use super::cbpf::{decode, exec, run, validate, Insn, Op};
use crate::util::{parse_list, send_each, Verdict, IDLE};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Mutex, RwLock};

use bessemer_core::module::{CoreDrop, MAX_GATES};
use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, ModuleClass, PacketBatch, Result,
    SharedModule, Value, MAX_BURST,
};

#[repr(C)]
struct BpfProgram {
    bf_len: c_uint,
    bf_insns: *mut Insn,
}

#[link(name = "pcap")]
extern "C" {
    fn pcap_open_dead(linktype: c_int, snaplen: c_int) -> *mut c_void;
    fn pcap_compile(
        p: *mut c_void,
        fp: *mut BpfProgram,
        expr: *const c_char,
        optimize: c_int,
        netmask: u32,
    ) -> c_int;
    fn pcap_geterr(p: *mut c_void) -> *const c_char;
    fn pcap_freecode(fp: *mut BpfProgram);
    fn pcap_close(p: *mut c_void);
}

const DLT_EN10MB: c_int = 1;
/// BESS's snapshot length for compiling filters.
const SNAPLEN: c_int = 0xffff;
const PCAP_NETMASK_UNKNOWN: u32 = 0xffff_ffff;

/// Serialises compilations: older libpcap parsers keep global state.
static COMPILE_LOCK: Mutex<()> = Mutex::new(());

/// Compiles a pcap-filter expression for Ethernet frames; errors carry libpcap's message.
pub fn compile(expr: &str) -> std::result::Result<Vec<Insn>, String> {
    let c = CString::new(expr).map_err(|_| "expression contains a NUL byte".to_string())?;
    let _guard = COMPILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: plain libpcap calls; the handle and program are freed on every path, and the
    // instructions are copied out before pcap_freecode.
    unsafe {
        let p = pcap_open_dead(DLT_EN10MB, SNAPLEN);
        if p.is_null() {
            return Err("pcap_open_dead failed".into());
        }
        let mut prog = BpfProgram {
            bf_len: 0,
            bf_insns: std::ptr::null_mut(),
        };
        let r = if pcap_compile(p, &mut prog, c.as_ptr(), 1, PCAP_NETMASK_UNKNOWN) == -1 {
            Err(CStr::from_ptr(pcap_geterr(p))
                .to_string_lossy()
                .into_owned())
        } else {
            let insns = if prog.bf_insns.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize).to_vec()
            };
            pcap_freecode(&mut prog);
            Ok(insns)
        };
        pcap_close(p);
        r
    }
}

/// One installed filter.
#[derive(Clone, Debug)]
struct Filter {
    priority: i64,
    expr: String,
    gate: u16,
    /// The program as libpcap compiled it, for `get_programs`.
    insns: Vec<Insn>,
    prog: Vec<Op>,
    /// The program's accepting paths (None: too complex to merge, so it is interpreted).
    paths: Option<Vec<PathSpec>>,
}

/// The installed filters and, rebuilt on every change, their merged form.
#[derive(Default)]
struct Filters {
    list: Vec<Filter>,
    merged: Merged,
}

impl Filters {
    fn rebuild(&mut self) {
        self.merged = Merged::build(self.list.iter().map(|f| f.paths.as_deref()));
    }
}

/// Filters in priority order (highest first; equal priorities in the order added). The first
/// that matches chooses the gate; unmatched packets leave by gate 0. Several workers may run
/// one instance (as in BESS), so the filters sit behind a lock taken once per batch.
pub struct Bpf {
    filters: RwLock<Filters>,
}

/// One entry of a `filters` list (message `m`): its priority, expression and gate.
fn filter_entry(f: &Value, m: &str) -> Result<(i64, String, u16)> {
    let mut a = Args::new(f, m)?;
    let priority = a.int("priority", i64::MIN, i64::MAX)?.unwrap_or(0);
    let expr = a.str("filter")?.unwrap_or("").to_string();
    let gate = a.int("gate", 0, MAX_GATES as i64 - 1)?.unwrap_or(0) as u16;
    a.finish()?;
    Ok((priority, expr, gate))
}

fn parse_filters(arg: &Value, msg: &str) -> Result<Vec<Filter>> {
    parse_list(arg, msg, "filters", |f, m| {
        let (priority, expr, gate) = filter_entry(f, m)?;
        let prog = compile(&expr)
            .map_err(|e| Error::invalid(format!("{m}.filter: cannot compile '{expr}': {e}")))?;
        validate(&prog).map_err(|e| {
            Error::invalid(format!(
                "{m}.filter: '{expr}' compiled to a bad program: {e}"
            ))
        })?;
        let insns = prog;
        let prog = decode(&insns);
        Ok(Filter {
            priority,
            expr,
            gate,
            paths: analyse(&prog),
            insns,
            prog,
        })
    })
}

fn add_sorted(filters: &mut Filters, new: Vec<Filter>) {
    filters.list.extend(new);
    // Stable: equal priorities keep the order they were added in.
    filters.list.sort_by_key(|f| std::cmp::Reverse(f.priority));
    filters.rebuild();
}

impl Bpf {
    fn filters(&self) -> std::sync::RwLockReadGuard<'_, Filters> {
        self.filters.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl Bpf {
    /// The `add` command.
    fn cmd_add(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let new = parse_filters(arg, "BPFArg")?;
        add_sorted(
            &mut self.filters.write().unwrap_or_else(|e| e.into_inner()),
            new,
        );
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        let mut filters = self.filters.write().unwrap_or_else(|e| e.into_inner());
        filters.list.clear();
        filters.rebuild();
        Ok(Value::Null)
    }

    /// The `delete` command.
    fn cmd_delete(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        // As BESS: each listed filter removes the first installed one with the same
        // priority, gate and expression; ones not installed are ignored.
        let del = parse_list(arg, "BPFArg", "filters", filter_entry)?;
        let mut filters = self.filters.write().unwrap_or_else(|e| e.into_inner());
        for (priority, expr, gate) in del {
            if let Some(i) = filters
                .list
                .iter()
                .position(|f| f.priority == priority && f.gate == gate && f.expr == expr)
            {
                filters.list.remove(i);
            }
        }
        filters.rebuild();
        Ok(Value::Null)
    }

    /// The `get_initial_arg` command.
    fn cmd_get_initial_arg(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        // As BESS: the installed filters (in priority order), a BPFArg.
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(self.info())
    }

    /// The `get_programs` command (Bessemer's own): the filters in the order they are
    /// tried, each with its classic BPF program as libpcap compiled it (what the XDP
    /// offload runs in the kernel).
    fn cmd_get_programs(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        let insn = |i: &Insn| {
            Value::map()
                .with("code", i.code as u32)
                .with("jt", i.jt as u32)
                .with("jf", i.jf as u32)
                .with("k", i.k)
        };
        let list = self
            .filters()
            .list
            .iter()
            .map(|f| {
                Value::map()
                    .with("priority", f.priority)
                    .with("filter", f.expr.as_str())
                    .with("gate", f.gate as i64)
                    .with("program", Value::List(f.insns.iter().map(insn).collect()))
            })
            .collect();
        Ok(Value::map().with("filters", Value::List(list)))
    }
}

impl SharedModule for Bpf {
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let filters = self.filters();
        if filters.list.is_empty() {
            return ctx.forward(0, batch);
        }
        let list = &filters.list;
        let mut data: [&[u8]; MAX_BURST] = [&[]; MAX_BURST];
        for (d, pkt) in data.iter_mut().zip(batch.pkts()) {
            *d = pkt.data();
        }
        let mut best = [0u32; MAX_BURST];
        COLUMNS.with_borrow_mut(|cols| {
            filters.merged.first_match_batch(
                cols,
                &mut data[..batch.len()],
                |i| &list[i as usize].prog,
                &mut best,
            )
        });
        let mut gates = [0u16; MAX_BURST];
        for (g, &b) in gates.iter_mut().zip(&best[..batch.len()]) {
            *g = list.get(b as usize).map_or(0, |f| f.gate);
        }
        send_each(ctx, batch, |i| Verdict::<CoreDrop>::Gate(gates[i]));
    }

    fn run_task(&self, _ctx: &mut Context, _arg: u64) -> TaskResult {
        IDLE
    }

    fn desc(&self) -> String {
        format!("{} filters", self.filters().list.len())
    }

    fn info(&self) -> Value {
        Value::map().with(
            "filters",
            Value::List(
                self.filters()
                    .list
                    .iter()
                    .map(|f| {
                        Value::map()
                            .with("priority", f.priority)
                            .with("filter", f.expr.as_str())
                            .with("gate", f.gate as i64)
                    })
                    .collect(),
            ),
        )
    }
}

thread_local! {
    /// Each worker's scratch for a batch's field values (16 KiB: kept, not zeroed per batch).
    static COLUMNS: RefCell<Columns> = const { RefCell::new(Columns::new()) };
}

/// The BPF class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "BPF",
    name_template: "bpf",
    help: "classifies packets with pcap-filter(7) syntax",
    arg_type: "BPFArg",
    arg_doc: &[
        "filters: [{priority: int64, filter: string, gate: int64}] — tcpdump expressions (Ethernet)",
        "  the highest-priority matching filter sends the packet to its gate (ties: first added);",
        "  packets no filter matches leave by gate 0",
    ],
    igates: 1,
    ogates: MAX_GATES,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "BPFArg",
            help: "adds filters (all or none, if one does not compile)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Bpf, Bpf::cmd_add),
        },
        CommandSpec {
            name: "delete",
            arg_type: "BPFArg",
            help: "removes, for each filter given, the first installed one with its priority, gate and expression",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Bpf, Bpf::cmd_delete),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "removes all filters",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Bpf, Bpf::cmd_clear),
        },
        CommandSpec {
            name: "get_initial_arg",
            arg_type: "EmptyArg",
            help: "returns a BPFArg of the installed filters, highest priority first",
            mt_safe: true,
            reply_type: "BPFArg",
            mutates: false,
            handler: handler!(Shared Bpf, Bpf::cmd_get_initial_arg),
        },
        CommandSpec {
            name: "get_programs",
            arg_type: "EmptyArg",
            help: "(Bessemer) returns the filters in the order they are tried, each with its classic BPF program {code, jt, jf, k} as libpcap compiled it",
            mt_safe: true,
            reply_type: "BPFCommandGetProgramsResponse",
            mutates: false,
            handler: handler!(Shared Bpf, Bpf::cmd_get_programs),
        },
    ],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let mut filters = Filters::default();
        add_sorted(&mut filters, parse_filters(arg, "BPFArg")?);
        Ok(Instance::Shared(Box::new(Bpf {
            filters: RwLock::new(filters),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::cbpf::*;
    use bessemer_core::testing::Harness;

    const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

    fn eth(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = DST.to_vec();
        f.extend_from_slice(&SRC);
        f.extend_from_slice(&ty.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn ip(src: [u8; 4], dst: [u8; 4], proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
        let mut h = vec![0x45, 0];
        h.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
        h.extend_from_slice(&[0, 1]);
        h.extend_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[64, proto, 0, 0]);
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        h.extend_from_slice(l4);
        h
    }

    fn udp(sport: u16, dport: u16) -> Vec<u8> {
        let mut u = sport.to_be_bytes().to_vec();
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&[0, 8, 0, 0]);
        u
    }

    fn tcp(sport: u16, dport: u16) -> Vec<u8> {
        let mut t = sport.to_be_bytes().to_vec();
        t.extend_from_slice(&dport.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
        t
    }

    /// A DNS query and web requests from inside and outside 10.0.0.0/8.
    fn sample_flows() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let dns = eth(
            0x0800,
            &ip([10, 1, 1, 1], [8, 8, 8, 8], 17, 0, &udp(5000, 53)),
        );
        let web = eth(
            0x0800,
            &ip([10, 1, 1, 1], [1, 2, 3, 4], 6, 0, &tcp(4000, 80)),
        );
        let web_ext = eth(
            0x0800,
            &ip([11, 1, 1, 1], [1, 2, 3, 4], 6, 0, &tcp(4000, 80)),
        );
        (dns, web, web_ext)
    }

    fn matches(expr: &str, pkt: &[u8]) -> bool {
        let prog = compile(expr).unwrap();
        validate(&prog).unwrap();
        run(&prog, pkt) != 0
    }

    #[test]
    fn real_tcpdump_expressions() {
        let (dns, web, web_ext) = sample_flows();
        let arp = eth(0x0806, &[0u8; 28]);
        let v6 = eth(0x86dd, &[0x60; 40]);
        let mut tagged = DST.to_vec();
        tagged.extend_from_slice(&SRC);
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&dns[12..]);

        assert!(matches("ip", &dns) && matches("ip", &web));
        assert!(!matches("ip", &arp) && !matches("ip", &v6) && !matches("ip", &tagged));
        assert!(matches("ip6", &v6) && matches("arp", &arp));
        assert!(matches("udp dst port 53", &dns));
        assert!(!matches("udp dst port 53", &web) && !matches("udp src port 53", &dns));
        assert!(matches("tcp and src net 10.0.0.0/8", &web));
        assert!(!matches("tcp and src net 10.0.0.0/8", &web_ext));
        assert!(!matches("tcp and src net 10.0.0.0/8", &dns));
        assert!(matches("vlan", &tagged) && !matches("vlan", &dns));
        assert!(matches("vlan 5 and udp dst port 53", &tagged));
        assert!(!matches("vlan 6", &tagged));
        assert!(matches("ether host 02:00:00:00:00:01", &dns));
        assert!(matches("ether src 02:00:00:00:00:02", &dns));
        assert!(!matches("ether src 02:00:00:00:00:01", &dns));
        // A later fragment has no UDP header: a port test must not match it.
        let frag = eth(
            0x0800,
            &ip([10, 1, 1, 1], [8, 8, 8, 8], 17, 0x0010, &udp(5000, 53)),
        );
        assert!(!matches("udp dst port 53", &frag) && matches("udp", &frag));
    }

    #[test]
    fn loads_past_the_end_do_not_match() {
        let (dns, _, _) = sample_flows();
        // Cut inside the UDP ports: the port load fails, so no match, and no panic.
        assert!(!matches("udp dst port 53", &dns[..36]));
        assert!(matches("udp dst port 53", &dns[..38]));
        for n in 0..dns.len() {
            for e in [
                "ip",
                "udp dst port 53",
                "tcp and src net 10.0.0.0/8",
                "vlan",
                "ip[100] = 1",
            ] {
                let _ = matches(e, &dns[..n]);
            }
        }
        assert!(!matches("ip", &[]));
        // Bad IHL: the IP header length nibble is 0 / huge; loads stay checked.
        let mut bad = dns.clone();
        bad[14] = 0x4f;
        assert!(!matches("udp dst port 53", &bad));
    }

    #[test]
    fn interpreter_follows_classic_bpf_semantics() {
        let ins = |code, jt, jf, k| Insn { code, jt, jf, k };
        let pkt = [0x12u8, 0x34, 0x56, 0x78, 0x9a];
        // A = pkt[1..3] (0x3456); X = (pkt[4] & 0xf) << 2 = 40; A = A + X; M[3] = A;
        // A = X / 0 -> program returns 0.
        let p = [
            ins(LD | H | ABS, 0, 0, 1),
            ins(LDX | B | MSH, 0, 0, 4),
            ins(ALU | ADD | SRC_X, 0, 0, 0),
            ins(ST, 0, 0, 3),
            ins(LD | W | MEM, 0, 0, 3),
            ins(RET | RVAL_A, 0, 0, 0),
        ];
        validate(&p).unwrap();
        assert_eq!(run(&p, &pkt), 0x3456 + 40);
        let div0 = [
            ins(LDX | W | IMM, 0, 0, 0),
            ins(ALU | DIV | SRC_X, 0, 0, 0),
            ins(RET, 0, 0, 7),
        ];
        validate(&div0).unwrap();
        assert_eq!(run(&div0, &pkt), 0);
        // Indirect load: X + k past the end fails.
        let ind = [
            ins(LDX | W | IMM, 0, 0, 3),
            ins(LD | H | IND, 0, 0, 0),
            ins(RET | RVAL_A, 0, 0, 0),
        ];
        assert_eq!(run(&ind, &pkt), 0x789a);
        let ind_far = [
            ins(LDX | W | IMM, 0, 0, u32::MAX),
            ins(LD | B | IND, 0, 0, 2),
            ins(RET, 0, 0, 1),
        ];
        assert_eq!(run(&ind_far, &pkt), 0);
        // Jumps and the length.
        let jmp = [
            ins(LD | W | LEN, 0, 0, 0),
            ins(JMP | JGE, 1, 0, 5),
            ins(RET, 0, 0, 1),
            ins(RET, 0, 0, 2),
        ];
        assert_eq!(run(&jmp, &pkt), 2);
        assert_eq!(run(&jmp, &pkt[..4]), 1);
        // Shifts by X of 32 or more give 0, not a panic.
        let shl = [
            ins(LD | W | IMM, 0, 0, 1),
            ins(LDX | W | IMM, 0, 0, 40),
            ins(ALU | LSH | SRC_X, 0, 0, 0),
            ins(RET | RVAL_A, 0, 0, 0),
        ];
        validate(&shl).unwrap();
        assert_eq!(run(&shl, &pkt), 0);
    }

    #[test]
    fn validator_rejects_unsafe_programs() {
        let ins = |code, jt, jf, k| Insn { code, jt, jf, k };
        assert!(validate(&[]).is_err());
        assert!(
            validate(&[ins(LD | W | IMM, 0, 0, 1)]).is_err(),
            "no return"
        );
        assert!(validate(&[ins(JMP | JA, 0, 0, 5), ins(RET, 0, 0, 0)]).is_err());
        assert!(validate(&[ins(JMP | JEQ, 0, 3, 5), ins(RET, 0, 0, 0)]).is_err());
        assert!(validate(&[ins(ST, 0, 0, 16), ins(RET, 0, 0, 0)]).is_err());
        assert!(validate(&[ins(ALU | DIV, 0, 0, 0), ins(RET, 0, 0, 0)]).is_err());
        assert!(validate(&[ins(ALU | LSH, 0, 0, 32), ins(RET, 0, 0, 0)]).is_err());
        assert!(validate(&[ins(LD | W | MEM, 0, 0, 2), ins(RET, 0, 0, 0)]).is_err());
        // Written on one branch only: refused; on both: accepted.
        let one_branch = [
            ins(JMP | JEQ, 0, 1, 0),
            ins(ST, 0, 0, 2),
            ins(LD | W | MEM, 0, 0, 2),
            ins(RET | RVAL_A, 0, 0, 0),
        ];
        assert!(validate(&one_branch).is_err());
        let both = [
            ins(ST, 0, 0, 2),
            ins(JMP | JEQ, 0, 1, 0),
            ins(STX, 0, 0, 2),
            ins(LD | W | MEM, 0, 0, 2),
            ins(RET | RVAL_A, 0, 0, 0),
        ];
        assert!(validate(&both).is_ok());
        assert!(validate(&[ins(0xffff, 0, 0, 0), ins(RET, 0, 0, 0)]).is_err());
    }

    fn filter(priority: i64, expr: &str, gate: i64) -> Value {
        Value::map()
            .with("priority", priority)
            .with("filter", expr)
            .with("gate", gate)
    }

    fn filters(f: Vec<Value>) -> Value {
        Value::map().with("filters", Value::List(f))
    }

    #[test]
    fn delete_and_get_initial_arg() {
        let mut h = Harness::new();
        let all = filters(vec![
            filter(1, "ip", 1),
            filter(10, "udp dst port 53", 2),
            filter(5, "tcp", 3),
        ]);
        h.add(&CLASS, "bpf", &all).unwrap();
        // Highest priority first.
        assert_eq!(
            h.command("bpf", "get_initial_arg", &Value::map()).unwrap(),
            filters(vec![
                filter(10, "udp dst port 53", 2),
                filter(5, "tcp", 3),
                filter(1, "ip", 1),
            ])
        );
        // Only an exact (priority, gate, expression) match is removed; others are ignored.
        h.command(
            "bpf",
            "delete",
            &filters(vec![filter(10, "udp dst port 53", 2), filter(5, "tcp", 9)]),
        )
        .unwrap();
        let caps: Vec<_> = (0..4).map(|g| h.capture("bpf", g)).collect();
        let (dns, web, _) = sample_flows();
        h.inject("bpf", 0, &[dns.clone(), web.clone()]);
        assert_eq!(caps[1].take_data(), vec![dns], "dns now matches only 'ip'");
        assert_eq!(caps[3].take_data(), vec![web]);
        assert!(caps[2].is_empty());
        assert!(h
            .command("bpf", "delete", &filters(vec![filter(1, "ip", 9000)]))
            .is_err());
    }

    #[test]
    fn get_programs_returns_the_compiled_filters_in_order() {
        let mut h = Harness::new();
        let all = filters(vec![
            filter(1, "ip", 1),
            filter(10, "udp dst port 53", 2),
            filter(10, "tcp", 3),
        ]);
        h.add(&CLASS, "bpf", &all).unwrap();
        let out = h.command("bpf", "get_programs", &Value::map()).unwrap();
        let list = out.get("filters").and_then(Value::as_list).unwrap();
        let order: Vec<_> = list
            .iter()
            .map(|f| f.get("filter").and_then(Value::as_str).unwrap())
            .collect();
        // Tried highest priority first, ties in the order added.
        assert_eq!(order, ["udp dst port 53", "tcp", "ip"]);
        for (f, expr) in list.iter().zip(order) {
            let prog: Vec<Insn> = f
                .get("program")
                .and_then(Value::as_list)
                .unwrap()
                .iter()
                .map(|i| {
                    let n = |k: &str| i.get(k).and_then(Value::as_i64).unwrap();
                    Insn {
                        code: n("code") as u16,
                        jt: n("jt") as u8,
                        jf: n("jf") as u8,
                        k: n("k") as u32,
                    }
                })
                .collect();
            assert_eq!(prog, compile(expr).unwrap());
        }
    }

    #[test]
    fn highest_priority_match_chooses_the_gate() {
        let mut h = Harness::new();
        h.add(
            &CLASS,
            "bpf",
            &filters(vec![
                filter(1, "ip", 1),
                filter(10, "udp dst port 53", 2),
                filter(5, "tcp and src net 10.0.0.0/8", 3),
                filter(5, "tcp", 4),
            ]),
        )
        .unwrap();
        let caps: Vec<_> = (0..5).map(|g| h.capture("bpf", g)).collect();
        let (dns, web, web_ext) = sample_flows();
        let icmp = eth(
            0x0800,
            &ip([11, 1, 1, 1], [1, 2, 3, 4], 1, 0, &[8, 0, 0, 0]),
        );
        let arp = eth(0x0806, &[0u8; 28]);
        let short = vec![0u8; 5];
        h.inject(
            "bpf",
            0,
            &[
                dns.clone(),
                web.clone(),
                web_ext.clone(),
                icmp.clone(),
                arp.clone(),
                short.clone(),
            ],
        );
        assert_eq!(caps[0].take_data(), vec![arp, short]);
        assert_eq!(caps[1].take_data(), vec![icmp]);
        assert_eq!(caps[2].take_data(), vec![dns.clone()]);
        assert_eq!(caps[3].take_data(), vec![web]);
        assert_eq!(caps[4].take_data(), vec![web_ext]);
        // add keeps the order; a new top priority wins; clear sends all to gate 0.
        h.command("bpf", "add", &filters(vec![filter(100, "udp", 4)]))
            .unwrap();
        h.inject("bpf", 0, std::slice::from_ref(&dns));
        assert_eq!(caps[4].take_data(), vec![dns.clone()]);
        h.command("bpf", "clear", &Value::map()).unwrap();
        h.inject("bpf", 0, std::slice::from_ref(&dns));
        assert_eq!(caps[0].take_data(), vec![dns]);
    }

    #[test]
    fn invalid_expressions_quote_libpcap_and_name_the_filter() {
        let mut h = Harness::new();
        let e = h
            .add(
                &CLASS,
                "a",
                &filters(vec![
                    filter(0, "ip", 1),
                    filter(0, "udp dst port banana", 2),
                ]),
            )
            .unwrap_err();
        assert!(
            e.msg.contains(
                "BPFArg.filters[1].filter: cannot compile 'udp dst port banana': unknown port 'banana'"
            ),
            "{}",
            e.msg
        );
        let e = h
            .add(&CLASS, "b", &filters(vec![filter(0, "ip", 8192)]))
            .unwrap_err();
        assert!(e.msg.contains("filters[0].gate"), "{}", e.msg);
        // A failed add changes nothing.
        h.add(&CLASS, "c", &filters(vec![filter(0, "ip", 1)]))
            .unwrap();
        let e = h
            .command(
                "c",
                "add",
                &filters(vec![filter(9, "udp", 2), filter(9, "tcp and", 3)]),
            )
            .unwrap_err();
        assert!(e.msg.contains("filters[1].filter"), "{}", e.msg);
        let g1 = h.capture("c", 1);
        h.inject(
            "c",
            0,
            &[eth(
                0x0800,
                &ip([1, 1, 1, 1], [2, 2, 2, 2], 17, 0, &udp(1, 2)),
            )],
        );
        assert_eq!(g1.take_data().len(), 1);
    }

    extern "C" {
        /// libpcap's own interpreter, the reference.
        fn bpf_filter(pc: *const Insn, p: *const u8, wirelen: c_uint, buflen: c_uint) -> c_uint;
        fn bpf_validate(f: *const Insn, len: c_int) -> c_int;
    }

    fn reference(prog: &[Insn], pkt: &[u8]) -> u32 {
        // SAFETY: `prog` passed libpcap's own validator; the packet length is exact.
        unsafe {
            bpf_filter(
                prog.as_ptr(),
                pkt.as_ptr(),
                pkt.len() as c_uint,
                pkt.len() as c_uint,
            )
        }
    }

    fn libpcap_valid(prog: &[Insn]) -> bool {
        // SAFETY: reads `prog.len()` instructions.
        unsafe { bpf_validate(prog.as_ptr(), prog.len() as c_int) != 0 }
    }

    use proptest::prelude::*;

    /// Ethernet frames of several kinds with random IHL, ports and truncation.
    fn frame() -> impl Strategy<Value = Vec<u8>> {
        (
            prop_oneof![Just(0x0800u16), Just(0x86dd), Just(0x0806), Just(0x8100)],
            prop_oneof![Just(0x45u8), Just(0x46), Just(0x4f), Just(0x42), Just(0x60)],
            prop_oneof![Just(6u8), Just(17), Just(1)],
            prop_oneof![Just(0u16), Just(0x2000), Just(0x0010)],
            (0u8..3, any::<u8>()),
            prop_oneof![Just(53u16), Just(80), any::<u16>()],
            proptest::collection::vec(any::<u8>(), 0..24),
            0usize..90,
        )
            .prop_map(|(ty, vihl, proto, frag, (net, host), port, tail, cut)| {
                let mut f = eth(ty, &[]);
                if ty == 0x8100 {
                    f.extend_from_slice(&[0x00, 0x05, 0x08, 0x00]);
                }
                let mut l4 = port.to_be_bytes().to_vec();
                l4.extend_from_slice(&53u16.to_be_bytes());
                l4.extend_from_slice(&tail);
                let mut p = ip([9 + net, 0, 0, host], [8, 8, 8, 8], proto, frag, &l4);
                p[0] = vihl;
                f.extend_from_slice(&p);
                f.truncate(cut.max(1).min(f.len()));
                f
            })
    }

    const EXPRS: &[&str] = &[
        "ip",
        "ip6",
        "arp",
        "udp dst port 53",
        "tcp and src net 10.0.0.0/8",
        "vlan",
        "vlan 5 and udp",
        "ether host 02:00:00:00:00:01",
        "ip[6:2] & 0x1fff = 0",
        "tcp[13] & 2 != 0",
        "udp and len > 60",
        "ip and not src host 9.0.0.7",
        "portrange 50-60 or icmp",
        "ip[0] & 0xf > 5",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn compiled_filters_agree_with_libpcap(pkt in frame()) {
            for e in EXPRS {
                let prog = compile(e).unwrap();
                prop_assert!(libpcap_valid(&prog));
                prop_assert_eq!(run(&prog, &pkt), reference(&prog, &pkt), "{}", e);
            }
        }

        #[test]
        fn random_programs_agree_with_libpcap(
            prog in proptest::collection::vec(
                (
                    prop::sample::select(vec![
                        LD | W | ABS, LD | H | ABS, LD | B | ABS, LD | W | IND, LD | H | IND,
                        LD | B | IND, LD | W | LEN, LDX | W | LEN, LD | W | IMM, LDX | W | IMM,
                        LD | W | MEM, LDX | W | MEM, LDX | B | MSH, ST, STX,
                        ALU | ADD, ALU | SUB | SRC_X, ALU | MUL, ALU | DIV, ALU | DIV | SRC_X,
                        ALU | MOD | SRC_X, ALU | OR, ALU | AND | SRC_X, ALU | LSH, ALU | RSH | SRC_X,
                        ALU | LSH | SRC_X, ALU | XOR, ALU | NEG, JMP | JA, JMP | JEQ, JMP | JGT | SRC_X,
                        JMP | JGE, JMP | JSET, RET, RET | RVAL_A, MISC | TAX, MISC | TXA,
                    ]),
                    0u8..4,
                    0u8..4,
                    prop_oneof![0u32..40, any::<u32>()],
                ),
                1..24,
            ),
            pkt in frame(),
        ) {
            let mut prog: Vec<Insn> = prog
                .into_iter()
                .map(|(code, jt, jf, k)| Insn { code, jt, jf, k })
                .collect();
            prog.push(Insn { code: RET | RVAL_A, jt: 0, jf: 0, k: 0 });
            // Repair what the validator would refuse, so most programs get compared.
            let n = prog.len();
            for (pc, i) in prog.iter_mut().enumerate() {
                let room = (n - pc - 1).max(1);
                match i.code & 0x07 {
                    ST | STX => i.k %= MEMWORDS,
                    LD | LDX if i.code & 0xe0 == MEM => i.k %= MEMWORDS,
                    JMP if i.code & 0xf0 == JA => i.k %= room as u32,
                    JMP => {
                        i.jt %= room.min(255) as u8;
                        i.jf %= room.min(255) as u8;
                    }
                    ALU if i.code & SRC_X == 0 => match i.code & 0xf0 {
                        DIV | MOD if i.k == 0 => i.k = 1,
                        LSH | RSH => i.k %= 32,
                        _ => {}
                    },
                    _ => {}
                }
            }
            if validate(&prog).is_ok() {
                prop_assert!(libpcap_valid(&prog), "libpcap refuses {:?}", prog);
                prop_assert_eq!(run(&prog, &pkt), reference(&prog, &pkt), "{:?}", prog);
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Step {
        Add(Vec<(i64, String, i64)>),
        /// Deletes the installed filter at this position (modulo their number), or, when
        /// none is installed or the flag is set, one that is not installed.
        Delete(usize, bool),
        Clear,
    }

    fn step() -> impl Strategy<Value = Step> {
        use crate::classify::bpf_compile::tests::expr;
        prop_oneof![
            6 => proptest::collection::vec((0i64..4, expr(), 0i64..4), 1..8).prop_map(Step::Add),
            3 => (any::<usize>(), proptest::bool::weighted(0.2))
                .prop_map(|(i, absent)| Step::Delete(i, absent)),
            1 => Just(Step::Clear),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// add / delete / clear in random order: after each command every packet leaves by
        /// the gate of the first matching filter of a priority-sorted list (gate 0 if none).
        #[test]
        fn commands_agree_with_a_linear_model(
            steps in proptest::collection::vec(step(), 1..8),
            pkts in proptest::collection::vec(crate::classify::bpf_compile::tests::frame(), 1..24),
        ) {
            let mut h = Harness::new();
            h.add(&CLASS, "bpf", &filters(vec![])).unwrap();
            let caps: Vec<_> = (0..4).map(|g| h.capture("bpf", g)).collect();
            let mut model: Vec<(i64, String, i64, Vec<Op>)> = Vec::new();
            for s in steps {
                match s {
                    Step::Add(new) => {
                        let list = new.iter().map(|(p, e, g)| filter(*p, e, *g)).collect();
                        h.command("bpf", "add", &filters(list)).unwrap();
                        for (p, e, g) in new {
                            let prog = decode(&compile(&e).unwrap());
                            model.push((p, e, g, prog));
                        }
                        model.sort_by_key(|f| std::cmp::Reverse(f.0));
                    }
                    Step::Delete(i, absent) => {
                        let f = if model.is_empty() || absent {
                            (99, "ip".to_string(), 1)
                        } else {
                            let f = &model[i % model.len()];
                            (f.0, f.1.clone(), f.2)
                        };
                        h.command("bpf", "delete", &filters(vec![filter(f.0, &f.1, f.2)]))
                            .unwrap();
                        if let Some(j) = model
                            .iter()
                            .position(|m| (m.0, &m.1, m.2) == (f.0, &f.1, f.2))
                        {
                            model.remove(j);
                        }
                    }
                    Step::Clear => {
                        h.command("bpf", "clear", &Value::map()).unwrap();
                        model.clear();
                    }
                }
                h.inject("bpf", 0, &pkts);
                let mut want: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 4];
                for p in &pkts {
                    let g = model.iter().find(|m| exec(&m.3, p) != 0).map_or(0, |m| m.2);
                    want[g as usize].push(p.clone());
                }
                for (g, cap) in caps.iter().enumerate() {
                    prop_assert_eq!(cap.take_data(), want[g].clone(), "gate {}", g);
                }
            }
        }
    }
}
