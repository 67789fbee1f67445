//! Rewrite: replaces packet contents with templates, in round robin.
use bessemer_core::packet::{Packet, DATA_CAPACITY};
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

/// Most templates one Rewrite holds (BESS's kNumSlots).
pub const MAX_TEMPLATES: usize = 16;

/// Overwrites each packet with the next template (length and bytes).
pub struct Rewrite {
    templates: Vec<Template>,
    next: usize,
    /// The CPU has AVX2: one template is copied with 32-byte stores (checked once, at
    /// creation, so that the default build stays portable).
    avx2: bool,
}

/// A template padded with zeros to whole 64-byte blocks, for block copies.
struct Template {
    blocks: Vec<[u8; 64]>,
    len: usize,
}

impl Template {
    fn new(bytes: Vec<u8>) -> Template {
        let len = bytes.len();
        let mut blocks = vec![[0u8; 64]; len.div_ceil(64)];
        blocks.as_flattened_mut()[..len].copy_from_slice(&bytes);
        Template { blocks, len }
    }
}

/// Writes template `t` into every packet: a fixed-size copy for templates of up to four
/// blocks (the common small packets), a block loop beyond.
#[inline(always)]
fn fill_all(pkts: &mut [Packet], t: &Template) {
    #[inline(always)]
    fn fixed<const B: usize>(pkts: &mut [Packet], t: &Template) {
        let blocks: &[[u8; 64]; B] = t.blocks[..].try_into().expect("B blocks");
        for p in pkts {
            p.set_data_blocks(blocks, t.len);
        }
    }
    match t.blocks.len() {
        1 => fixed::<1>(pkts, t),
        2 => fixed::<2>(pkts, t),
        3 => fixed::<3>(pkts, t),
        4 => fixed::<4>(pkts, t),
        _ => {
            for p in pkts {
                p.set_data_padded(t.blocks.as_flattened(), t.len);
            }
        }
    }
}

/// `fill_all` compiled for AVX2. A template of one or two blocks is held in vector registers
/// for the whole batch, so each packet costs only stores: loading it again for every packet
/// (as the plain copy does, since the stores might overlap it) was slower and made the copy's
/// speed depend on the heap layout (180-380 Mpps over layouts; likely a template load whose
/// address matched a recent packet store's in its low 12 bits and waited for it: this VM has
/// no hardware counters to confirm it). Held in registers: 396-402 Mpps.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fill_all_avx2(pkts: &mut [Packet], t: &Template) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_storeu_si256};
    /// Writes the `N` registers of `regs` (32 bytes each) into every packet.
    #[inline(always)]
    unsafe fn store_all<const N: usize>(pkts: &mut [Packet], regs: [__m256i; N], len: usize) {
        for p in pkts {
            if let Some(at) = p.reset_at_home(len, N * 32) {
                for (k, r) in regs.iter().enumerate() {
                    // SAFETY: `reset_at_home` checked that N * 32 bytes fit from `at`.
                    unsafe { _mm256_storeu_si256((at as *mut __m256i).add(k), *r) };
                }
            }
        }
    }
    let src = t.blocks.as_ptr() as *const __m256i;
    // SAFETY: `blocks` holds 2 (or 4) whole 32-byte halves of 64-byte blocks.
    unsafe {
        match t.blocks.len() {
            1 => store_all(
                pkts,
                [_mm256_loadu_si256(src), _mm256_loadu_si256(src.add(1))],
                t.len,
            ),
            2 => store_all(
                pkts,
                [
                    _mm256_loadu_si256(src),
                    _mm256_loadu_si256(src.add(1)),
                    _mm256_loadu_si256(src.add(2)),
                    _mm256_loadu_si256(src.add(3)),
                ],
                t.len,
            ),
            _ => fill_all(pkts, t),
        }
    }
}

fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn parse_templates(list: &[Value], msg: &str) -> Result<Vec<Vec<u8>>> {
    if list.len() > MAX_TEMPLATES {
        return Err(Error::invalid(format!(
            "{msg}.templates: at most {MAX_TEMPLATES} templates, got {}",
            list.len()
        )));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            let b = v
                .as_bytes()
                .ok_or_else(|| Error::invalid(format!("{msg}.templates[{i}]: expected bytes")))?;
            if b.is_empty() || b.len() > DATA_CAPACITY {
                return Err(Error::invalid(format!(
                    "{msg}.templates[{i}]: {} bytes (must be 1..={DATA_CAPACITY})",
                    b.len()
                )));
            }
            Ok(b.to_vec())
        })
        .collect()
}

impl Rewrite {
    /// The `add` command.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "RewriteArg")?;
        let t = parse_templates(a.list("templates")?, "RewriteArg")?;
        a.finish()?;
        if self.templates.len() + t.len() > MAX_TEMPLATES {
            return Err(Error::no_mem(format!(
                "Rewrite holds at most {MAX_TEMPLATES} templates"
            )));
        }
        self.templates.extend(t.into_iter().map(Template::new));
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "RewriteCommandClearArg")?.finish()?;
        self.templates.clear();
        self.next = 0;
        Ok(Value::Null)
    }
}

impl Module for Rewrite {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        match self.templates.len() {
            0 => {}
            1 => {
                let t = &self.templates[0];
                #[cfg(target_arch = "x86_64")]
                if self.avx2 {
                    // SAFETY: `avx2` is set only when the CPU has AVX2.
                    unsafe { fill_all_avx2(batch.pkts_mut(), t) };
                    return ctx.forward(0, batch);
                }
                fill_all(batch.pkts_mut(), t);
            }
            n => {
                for p in batch.pkts_mut() {
                    let t = &self.templates[self.next];
                    p.set_data_padded(t.blocks.as_flattened(), t.len);
                    self.next += 1;
                    if self.next == n {
                        self.next = 0;
                    }
                }
            }
        }
        ctx.forward(0, batch);
    }

    fn desc(&self) -> String {
        format!("{} templates", self.templates.len())
    }
}

/// The Rewrite class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Rewrite",
    name_template: "rewrite",
    help: "replaces entire packet data",
    arg_type: "RewriteArg",
    arg_doc: &["templates: [bytes] — up to 16 packet templates used in round robin"],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "RewriteArg",
            help: "appends templates",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Rewrite, Rewrite::cmd_add),
        },
        CommandSpec {
            name: "clear",
            arg_type: "RewriteCommandClearArg",
            help: "removes all templates",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Rewrite, Rewrite::cmd_clear),
        },
    ],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let mut a = Args::new(arg, "RewriteArg")?;
        let templates = parse_templates(a.list("templates")?, "RewriteArg")?;
        a.finish()?;
        let templates = templates.into_iter().map(Template::new).collect();
        Ok(Instance::Exclusive(Box::new(Rewrite {
            templates,
            next: 0,
            avx2: has_avx2(),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    fn templates(t: &[&[u8]]) -> Value {
        Value::map().with(
            "templates",
            Value::List(t.iter().map(|b| Value::Bytes(b.to_vec())).collect()),
        )
    }

    #[test]
    fn templates_in_round_robin() {
        let mut h = Harness::new();
        h.add(&CLASS, "rw", &templates(&[b"aaaa", b"bbbbbbbb", b"cc"]))
            .unwrap();
        let c = h.capture("rw", 0);
        h.inject("rw", 0, &vec![vec![0u8; 60]; 5]);
        let want: Vec<Vec<u8>> = [&b"aaaa"[..], b"bbbbbbbb", b"cc", b"aaaa", b"bbbbbbbb"]
            .iter()
            .map(|b| b.to_vec())
            .collect();
        assert_eq!(c.take_data(), want);
        h.command("rw", "clear", &Value::map()).unwrap();
        h.inject("rw", 0, &[vec![7u8; 9]]);
        assert_eq!(c.take_data(), vec![vec![7u8; 9]], "no templates: unchanged");
        h.command("rw", "add", &templates(&[b"z"])).unwrap();
        h.inject("rw", 0, &[vec![7u8; 9]]);
        assert_eq!(c.take_data(), vec![b"z".to_vec()]);
    }

    #[test]
    fn limits_are_enforced() {
        let mut h = Harness::new();
        let many: Vec<&[u8]> = vec![b"x"; 17];
        assert!(h
            .add(&CLASS, "a", &templates(&many))
            .unwrap_err()
            .msg
            .contains("at most 16"));
        let big = vec![0u8; DATA_CAPACITY + 1];
        assert!(h
            .add(&CLASS, "b", &templates(&[&big]))
            .unwrap_err()
            .msg
            .contains("templates[0]"));
        let sixteen: Vec<&[u8]> = vec![b"x"; 16];
        h.add(&CLASS, "c", &templates(&sixteen)).unwrap();
        assert!(h.command("c", "add", &templates(&[b"y"])).is_err());
    }

    #[test]
    fn one_template_of_every_size_is_written_exactly() {
        // Sizes around every block boundary of the fixed-size copies (1-4 blocks) and the
        // block loop beyond; the packets start longer and shorter than the template.
        for len in [
            1usize, 59, 63, 64, 65, 127, 128, 129, 191, 192, 255, 256, 257, 1500,
        ] {
            let t: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let mut h = Harness::new();
            h.add(&CLASS, "rw", &templates(&[&t])).unwrap();
            let c = h.capture("rw", 0);
            h.inject("rw", 0, &[vec![0xEEu8; 1514], vec![0x11u8; 14]]);
            assert_eq!(
                c.take_data(),
                vec![t.clone(), t.clone()],
                "template of {len} bytes"
            );
        }
    }
}
