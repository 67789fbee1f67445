//! ESPEncap: the sending side of an IPsec tunnel (ESP tunnel mode, RFC 4303). Each IPv4
//! packet of an Ethernet frame is encrypted whole into an ESP packet to the SA's peer.
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

use super::esp::{
    sa_stats, IvSource, Sa, Suite, ESP_HEADER_LEN, NEXT_HEADER_IPV4, OUTER_IP_LEN, PROTO_ESP,
};
use crate::headers::{EthernetView, Ipv4Error, Ipv4View, ETHERTYPE_IPV4, ETH_LEN};
use crate::util::{process_each, Verdict};

bessemer_core::drop_reasons! {
    /// Why ESPEncap drops packets: the IPv4 header errors of the inner packet, then its own.
    pub enum EspEncapDrop {
        Ipv4(Ipv4Error),
        /// No SA's `inner_dst` covers the inner destination.
        NoSa = "no_sa",
        /// The SA sent 2^32 - 1 packets; RFC 4303 forbids cycling: add a new SA.
        SeqExhausted = "seq_exhausted",
        /// Not enough headroom for the outer IPv4 and ESP headers.
        NoHeadroom = "no_headroom",
        /// Not enough tailroom for the ESP trailer and ICV, or the result would exceed 64 KB.
        NoTailroom = "no_tailroom",
    }
}

/// One SA of the encapsulator with its counters.
struct EncapSa {
    sa: Sa,
    packets: u64,
    bytes: u64,
}

/// Encrypts inner IPv4 packets into ESP tunnel-mode packets.
pub struct EspEncap {
    /// Ordered by `inner_dst` prefix length, longest first; among equal lengths the SA added
    /// last comes first, so a new SA takes over a prefix (rekeying) before the old is deleted.
    sas: Vec<EncapSa>,
    ttl: u8,
    ident: u16,
    ivs: IvSource,
}

const MSG_SA: &str = "ESPSecurityAssociation";

impl EspEncap {
    fn add(&mut self, sa: Sa) -> Result<()> {
        if self.sas.iter().any(|s| s.sa.spi == sa.spi) {
            return Err(Error::exists(format!(
                "ESPEncap: SPI {} is already in use; delete_sa it first",
                sa.spi
            )));
        }
        let len = sa.inner_dst.1;
        let at = self
            .sas
            .iter()
            .position(|s| s.sa.inner_dst.1 <= len)
            .unwrap_or(self.sas.len());
        self.sas.insert(
            at,
            EncapSa {
                sa,
                packets: 0,
                bytes: 0,
            },
        );
        Ok(())
    }

    fn cmd_add_sa(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.add(Sa::parse(arg, MSG_SA, true)?)?;
        Ok(Value::Null)
    }

    fn cmd_delete_sa(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let spi = parse_spi(arg)?;
        let n = self.sas.len();
        self.sas.retain(|s| s.sa.spi != spi);
        if self.sas.len() == n {
            return Err(Error::not_found(format!("ESPEncap: no SA with SPI {spi}")));
        }
        Ok(Value::Null)
    }

    fn cmd_clear(&mut self, _ctx: &mut Context, _arg: &Value) -> Result<Value> {
        self.sas.clear();
        Ok(Value::Null)
    }

    fn cmd_get_stats(&mut self, _ctx: &mut Context, _arg: &Value) -> Result<Value> {
        let sas = self
            .sas
            .iter()
            .map(|s| sa_stats(&s.sa, s.packets, s.bytes, s.sa.seq))
            .collect::<Vec<_>>();
        Ok(Value::map().with("sas", sas))
    }

    /// Encapsulates one frame in place; the verdict says where it goes.
    #[inline]
    fn encap(&mut self, p: &mut bessemer_core::Packet) -> Verdict<EspEncapDrop> {
        let d = p.data();
        let Ok(eth) = EthernetView::new_checked(d) else {
            return Verdict::Drop(Ipv4Error::TooShort.into());
        };
        if eth.ethertype() != ETHERTYPE_IPV4 {
            return Verdict::Drop(Ipv4Error::NotIpv4.into());
        }
        let ip = match Ipv4View::new_checked(&d[ETH_LEN..]) {
            Ok(ip) => ip,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let (inner_len, dst, tos) = (ip.total_len(), ip.dst(), ip.header()[1]);
        let Some(e) = self.sas.iter_mut().find(|s| s.sa.matches(dst)) else {
            return Verdict::Drop(EspEncapDrop::NoSa);
        };
        let seq = e.sa.seq + 1;
        if seq > u32::MAX as u64 {
            return Verdict::Drop(EspEncapDrop::SeqExhausted);
        }
        let suite = e.sa.suite;
        let pad = suite.pad_len(inner_len);
        let head = OUTER_IP_LEN + suite.head_len();
        let tail = pad + 2 + suite.icv_len();
        let outer_len = head + inner_len + tail;
        if outer_len > u16::MAX as usize {
            return Verdict::Drop(EspEncapDrop::NoTailroom);
        }
        // Frame padding after the inner packet is not part of it.
        p.set_len(ETH_LEN + inner_len);
        if p.prepend(head).is_none() {
            return Verdict::Drop(EspEncapDrop::NoHeadroom);
        }
        if p.append(tail).is_none() {
            // Undo the prepend so the dropped packet is as it came (for a dump or a tap).
            p.adj(head);
            return Verdict::Drop(EspEncapDrop::NoTailroom);
        }
        e.sa.seq = seq;
        e.packets += 1;
        e.bytes += inner_len as u64;
        self.ident = self.ident.wrapping_add(1);
        let iv = match suite {
            // RFC 4106 §3.1: the IV must not repeat under a key; the sequence number (which
            // never cycles) guarantees that.
            Suite::AesGcm128 => {
                let mut v = [0u8; 16];
                v[..8].copy_from_slice(&seq.to_be_bytes());
                v
            }
            Suite::AesCbc128HmacSha196 => self.ivs.next_iv(),
        };
        let d = p.data_mut();
        // The Ethernet header moves to the new front; the inner packet stays where it was.
        d.copy_within(head..head + ETH_LEN, 0);
        let (eth, rest) = d.split_at_mut(ETH_LEN);
        EthernetView::new_checked(eth)
            .expect("14 bytes")
            .set_ethertype(ETHERTYPE_IPV4);
        rest[..OUTER_IP_LEN].copy_from_slice(&[
            0x45, tos, 0, 0, 0, 0, 0, 0, self.ttl, PROTO_ESP, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]);
        rest[2..4].copy_from_slice(&(outer_len as u16).to_be_bytes());
        let mut oip = Ipv4View::new_checked(&mut rest[..]).expect("the outer packet we built");
        oip.set_ident(self.ident);
        oip.set_src_bytes(e.sa.local);
        oip.set_dst_bytes(e.sa.peer);
        oip.fill_checksum();
        let esp = &mut rest[OUTER_IP_LEN..];
        esp[..4].copy_from_slice(&e.sa.spi.to_be_bytes());
        esp[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        esp[ESP_HEADER_LEN..suite.head_len()].copy_from_slice(&iv[..suite.iv_len()]);
        let trailer = suite.head_len() + inner_len;
        for (i, b) in esp[trailer..trailer + pad].iter_mut().enumerate() {
            // RFC 4303 §2.4: the default padding is 1, 2, 3, ...
            *b = i as u8 + 1;
        }
        esp[trailer + pad] = pad as u8;
        esp[trailer + pad + 1] = NEXT_HEADER_IPV4;
        e.sa.seal(esp);
        Verdict::Gate(0)
    }
}

/// The SPI of a `delete_sa` argument.
pub(crate) fn parse_spi(arg: &Value) -> Result<u32> {
    let mut a = Args::new(arg, "ESPCommandDeleteSaArg")?;
    let spi = a.uint("spi", u32::MAX as u64)?;
    a.finish()?;
    spi.map(|s| s as u32)
        .ok_or_else(|| Error::invalid("ESPCommandDeleteSaArg.spi: the SPI is required"))
}

impl Module for EspEncap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, |p| self.encap(p));
    }

    fn desc(&self) -> String {
        format!("{} SAs", self.sas.len())
    }
}

/// The ESPEncap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "ESPEncap",
    name_template: "esp_encap",
    help: "IPsec ESP tunnel mode, sending side: encrypts each IPv4 packet of an Ethernet frame \
           (AES-GCM-128 or AES-128-CBC + HMAC-SHA1-96) into an ESP packet from the SA's local \
           to its peer address; the SA is the one whose inner_dst prefix is the longest match \
           of the inner destination. Stateful (sequence numbers): one worker per instance.",
    arg_type: "ESPEncapArg",
    arg_doc: &[
        "sas: list of ESPSecurityAssociation — the SAs to start with (as add_sa takes them)",
        "ttl: uint — TTL of the outer IPv4 header (1..255, default 64)",
        "  ESPSecurityAssociation: spi (256..2^32-1), cipher (aes-gcm-128 | aes-cbc-128-hmac-sha1-96),",
        "  key (GCM: 16-byte AES key + 4-byte salt; CBC: 16 bytes), auth_key (CBC: 20 bytes),",
        "  local, peer (outer IPv4 addresses), inner_dst (a.b.c.d/n, default all), seq (last sent, default 0)",
        "  the Ethernet header is kept (downstream rewrites the MAC addresses)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "add_sa",
            arg_type: "ESPSecurityAssociation",
            help: "adds an SA; a new SA wins over older ones with the same inner_dst prefix",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive EspEncap, EspEncap::cmd_add_sa),
        },
        CommandSpec {
            name: "delete_sa",
            arg_type: "ESPCommandDeleteSaArg",
            help: "removes the SA with this SPI",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive EspEncap, EspEncap::cmd_delete_sa),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "removes every SA",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive EspEncap, EspEncap::cmd_clear),
        },
        CommandSpec {
            name: "get_stats",
            arg_type: "EmptyArg",
            help: "per SA: spi, cipher, packets, bytes (inner), seq (last sent)",
            mt_safe: false,
            reply_type: "ESPEncapCommandGetStatsResponse",
            mutates: false,
            handler: handler!(Exclusive EspEncap, EspEncap::cmd_get_stats),
        },
    ],
    drop_reasons: EspEncapDrop::NAMES,
    max_workers: 1,
    create: |_, arg: &Value| {
        let mut a = Args::new(arg, "ESPEncapArg")?;
        let sas = a.list("sas")?;
        let ttl = a.int("ttl", 1, 255)?.unwrap_or(64) as u8;
        a.finish()?;
        let mut m = EspEncap {
            sas: Vec::new(),
            ttl,
            ident: 0,
            ivs: IvSource::default(),
        };
        for v in sas {
            m.add(Sa::parse(v, MSG_SA, true)?)?;
        }
        Ok(Instance::Exclusive(Box::new(m)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::testutil::{hex, EAT_HEADROOM};
    use bessemer_core::testing::Harness;

    /// Test-only class: grows each IPv4 packet to the end of its buffer (zero bytes, total
    /// length updated) so nothing is left for an ESP trailer.
    struct FillTail;

    impl Module for FillTail {
        fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
            for p in batch.pkts_mut() {
                let n = p.tailroom();
                p.append(n).expect("tailroom").fill(0);
                let total = (p.len() - ETH_LEN) as u16;
                p.data_mut()[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&total.to_be_bytes());
            }
            ctx.forward(0, batch);
        }
    }

    static FILL_TAIL: ModuleClass = ModuleClass {
        name: "TestFillTail",
        name_template: "fill",
        help: "fills packets to the end of their buffer",
        arg_type: "EmptyArg",
        arg_doc: &[],
        igates: 1,
        ogates: 1,
        commands: &[],
        drop_reasons: &[],
        max_workers: 1,
        create: |_, _| Ok(Instance::Exclusive(Box::new(FillTail))),
    };

    fn arg() -> Value {
        let sa = Value::map()
            .with("spi", 0x1001u32)
            .with("key", vec![7u8; 20])
            .with("local", "192.0.2.1")
            .with("peer", "192.0.2.2");
        Value::map().with("sas", Value::List(vec![sa]))
    }

    const FRAME: &str = "020000000002 020000000001 0800 \
                         4500001c00070000401166ad0a0100010a020001 04d2162e00080000";

    #[test]
    fn no_headroom_and_no_tailroom_are_counted_and_leave_the_packet_whole() {
        for (cls, reason) in [(&EAT_HEADROOM, "no_headroom"), (&FILL_TAIL, "no_tailroom")] {
            let mut h = Harness::new();
            h.add(cls, "pre", &Value::Null).unwrap();
            h.add(&CLASS, "esp", &arg()).unwrap();
            h.connect("pre", 0, "esp", 0).unwrap();
            let c = h.capture("esp", 0);
            h.inject("pre", 0, &[hex(FRAME)]);
            assert!(c.is_empty());
            assert_eq!(h.drops("esp", reason), 1, "{reason}");
        }
    }
}
