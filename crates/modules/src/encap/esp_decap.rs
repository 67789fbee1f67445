//! ESPDecap: the receiving side of an IPsec tunnel (ESP tunnel mode, RFC 4303). Each ESP
//! packet is checked (SPI, anti-replay window, ICV, padding) and replaced by the IPv4 packet
//! it carries, behind the frame's Ethernet header.
use std::collections::HashMap;

use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

use super::esp::{
    sa_stats, OpenError, ReplayWindow, Sa, DEFAULT_REPLAY_WINDOW, ESP_HEADER_LEN,
    MAX_REPLAY_WINDOW, NEXT_HEADER_IPV4, NEXT_HEADER_NONE, PROTO_ESP,
};
use super::esp_encap::parse_spi;
use crate::headers::{EthernetView, Ipv4Error, Ipv4View, ETHERTYPE_IPV4, ETH_LEN};
use crate::util::{process_each, Verdict};

bessemer_core::drop_reasons! {
    /// Why ESPDecap drops packets: the outer IPv4 header errors (`too_short` also for an
    /// ESP packet shorter than its header, IV and ICV), then its own.
    pub enum EspDecapDrop {
        Ipv4(Ipv4Error),
        /// The outer IPv4 protocol is not ESP (50).
        NotEsp = "not_esp",
        /// An IPv4 fragment of an ESP packet (reassemble first).
        Fragment = "fragment",
        /// No SA has the packet's SPI.
        UnknownSpi = "unknown_spi",
        /// The CBC ciphertext is not a whole number of 16-byte blocks.
        BadLength = "bad_length",
        /// The sequence number was seen already, is 0, or is left of the anti-replay window.
        Replay = "replay",
        /// The ICV does not verify.
        BadIcv = "bad_icv",
        /// The pad length runs past the payload, or the padding is not 1, 2, 3, ...
        BadPadding = "bad_padding",
        /// A dummy packet (next header 59), dropped as RFC 4303 §2.6 says.
        Dummy = "dummy",
        /// The next header is not IPv4 (4).
        BadNextHeader = "bad_next_header",
        /// The decrypted packet is not a well-formed IPv4 packet.
        BadInner = "bad_inner",
    }
}

/// One SA of the decapsulator with its window and counters.
struct DecapSa {
    sa: Sa,
    window: ReplayWindow,
    packets: u64,
    bytes: u64,
    replay: u64,
    bad_icv: u64,
}

/// Verifies and decrypts ESP tunnel-mode packets.
pub struct EspDecap {
    sas: HashMap<u32, DecapSa>,
    replay_window: u32,
}

const MSG_SA: &str = "ESPSecurityAssociation";

impl EspDecap {
    fn add(&mut self, sa: Sa) -> Result<()> {
        if self.sas.contains_key(&sa.spi) {
            return Err(Error::exists(format!(
                "ESPDecap: SPI {} is already in use; delete_sa it first",
                sa.spi
            )));
        }
        self.sas.insert(
            sa.spi,
            DecapSa {
                sa,
                window: ReplayWindow::new(self.replay_window),
                packets: 0,
                bytes: 0,
                replay: 0,
                bad_icv: 0,
            },
        );
        Ok(())
    }

    fn cmd_add_sa(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.add(Sa::parse(arg, MSG_SA, false)?)?;
        Ok(Value::Null)
    }

    fn cmd_delete_sa(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let spi = parse_spi(arg)?;
        self.sas
            .remove(&spi)
            .map(|_| Value::Null)
            .ok_or_else(|| Error::not_found(format!("ESPDecap: no SA with SPI {spi}")))
    }

    fn cmd_clear(&mut self, _ctx: &mut Context, _arg: &Value) -> Result<Value> {
        self.sas.clear();
        Ok(Value::Null)
    }

    fn cmd_get_stats(&mut self, _ctx: &mut Context, _arg: &Value) -> Result<Value> {
        let mut spis: Vec<u32> = self.sas.keys().copied().collect();
        spis.sort_unstable();
        let sas = spis
            .iter()
            .map(|spi| {
                let s = &self.sas[spi];
                sa_stats(&s.sa, s.packets, s.bytes, s.window.top() as u64)
                    .with("replay", s.replay)
                    .with("bad_icv", s.bad_icv)
            })
            .collect::<Vec<_>>();
        Ok(Value::map().with("sas", sas))
    }

    /// Decapsulates one frame in place; the verdict says where it goes.
    #[inline]
    fn decap(&mut self, p: &mut bessemer_core::Packet) -> Verdict<EspDecapDrop> {
        let d = p.data_mut();
        let Ok(eth) = EthernetView::new_checked(&d[..]) else {
            return Verdict::Drop(Ipv4Error::TooShort.into());
        };
        if eth.ethertype() != ETHERTYPE_IPV4 {
            return Verdict::Drop(Ipv4Error::NotIpv4.into());
        }
        let ip = match Ipv4View::new_checked(&d[ETH_LEN..]) {
            Ok(ip) => ip,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if ip.protocol() != PROTO_ESP {
            return Verdict::Drop(EspDecapDrop::NotEsp);
        }
        if ip.is_fragment() {
            return Verdict::Drop(EspDecapDrop::Fragment);
        }
        let (esp_off, esp_end) = (ETH_LEN + ip.header_len(), ETH_LEN + ip.total_len());
        let esp = &mut d[esp_off..esp_end];
        if esp.len() < ESP_HEADER_LEN {
            return Verdict::Drop(Ipv4Error::TooShort.into());
        }
        let spi = u32::from_be_bytes([esp[0], esp[1], esp[2], esp[3]]);
        let seq = u32::from_be_bytes([esp[4], esp[5], esp[6], esp[7]]);
        let Some(s) = self.sas.get_mut(&spi) else {
            return Verdict::Drop(EspDecapDrop::UnknownSpi);
        };
        let suite = s.sa.suite;
        let head = suite.head_len();
        if esp.len() < head + 2 + suite.icv_len() {
            return Verdict::Drop(Ipv4Error::TooShort.into());
        }
        if !s.window.check(seq) {
            s.replay += 1;
            return Verdict::Drop(EspDecapDrop::Replay);
        }
        let pt_len = match s.sa.open(esp) {
            Ok(n) => n,
            Err(OpenError::BadIcv) => {
                s.bad_icv += 1;
                return Verdict::Drop(EspDecapDrop::BadIcv);
            }
            Err(OpenError::BadLength) => return Verdict::Drop(EspDecapDrop::BadLength),
        };
        // Authentic: only now may the window move (RFC 4303 §3.4.3).
        s.window.update(seq);
        let pt = &esp[head..head + pt_len];
        let (pad_len, next) = (pt[pt_len - 2] as usize, pt[pt_len - 1]);
        if pad_len + 2 > pt_len {
            return Verdict::Drop(EspDecapDrop::BadPadding);
        }
        let inner_len = pt_len - 2 - pad_len;
        if !pt[inner_len..inner_len + pad_len]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == i as u8 + 1)
        {
            return Verdict::Drop(EspDecapDrop::BadPadding);
        }
        match next {
            NEXT_HEADER_IPV4 => {}
            NEXT_HEADER_NONE => return Verdict::Drop(EspDecapDrop::Dummy),
            _ => return Verdict::Drop(EspDecapDrop::BadNextHeader),
        }
        let inner_total = match Ipv4View::new_checked(&pt[..inner_len]) {
            Ok(inner) => inner.total_len(),
            Err(_) => return Verdict::Drop(EspDecapDrop::BadInner),
        };
        s.packets += 1;
        s.bytes += inner_total as u64;
        // The Ethernet header moves up to just before the inner packet.
        let start = esp_off + head - ETH_LEN;
        d.copy_within(..ETH_LEN, start);
        p.adj(start);
        p.set_len(ETH_LEN + inner_total);
        Verdict::Gate(0)
    }
}

impl Module for EspDecap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, |p| self.decap(p));
    }

    fn desc(&self) -> String {
        format!("{} SAs", self.sas.len())
    }
}

/// The ESPDecap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "ESPDecap",
    name_template: "esp_decap",
    help: "IPsec ESP tunnel mode, receiving side: finds the SA by SPI, checks the anti-replay \
           window and the ICV, decrypts, checks the padding and replaces the outer IPv4/ESP \
           packet by the inner IPv4 packet (the Ethernet header is kept). Stateful (replay \
           windows): one worker per instance.",
    arg_type: "ESPDecapArg",
    arg_doc: &[
        "sas: list of ESPSecurityAssociation — the SAs to start with (spi, cipher, key, auth_key; local/peer optional)",
        "replay_window: uint — anti-replay window in packets (1..128; 0 or absent: 64)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "add_sa",
            arg_type: "ESPSecurityAssociation",
            help: "adds an SA (its window starts empty)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive EspDecap, EspDecap::cmd_add_sa),
        },
        CommandSpec {
            name: "delete_sa",
            arg_type: "ESPCommandDeleteSaArg",
            help: "removes the SA with this SPI",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive EspDecap, EspDecap::cmd_delete_sa),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "removes every SA",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive EspDecap, EspDecap::cmd_clear),
        },
        CommandSpec {
            name: "get_stats",
            arg_type: "EmptyArg",
            help: "per SA: spi, cipher, packets, bytes (inner), seq (highest accepted), replay, bad_icv",
            mt_safe: false,
            reply_type: "ESPDecapCommandGetStatsResponse",
            mutates: false,
            handler: handler!(Exclusive EspDecap, EspDecap::cmd_get_stats),
        },
    ],
    drop_reasons: EspDecapDrop::NAMES,
    max_workers: 1,
    create: |_, arg: &Value| {
        let mut a = Args::new(arg, "ESPDecapArg")?;
        let sas = a.list("sas")?;
        // proto3 cannot tell 0 from absent: both mean the default.
        let replay_window = match a.uint("replay_window", MAX_REPLAY_WINDOW as u64)? {
            None | Some(0) => DEFAULT_REPLAY_WINDOW,
            Some(w) => w as u32,
        };
        a.finish()?;
        let mut m = EspDecap {
            sas: HashMap::new(),
            replay_window,
        };
        for v in sas {
            m.add(Sa::parse(v, MSG_SA, false)?)?;
        }
        Ok(Instance::Exclusive(Box::new(m)))
    },
};
