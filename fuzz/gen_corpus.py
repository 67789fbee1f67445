#!/usr/bin/env python3
"""Seeds for the fuzz targets, built from real frames (scapy, from the project's .venv).

Writes fuzz/corpus/<target>/seed-<name> for the targets whose inputs carry frames, pcap
files, requests or operation sequences, in each target's input format (see
crates/fuzz-targets/src). Every header the parsers know appears, whole and cut short:
Ethernet, 802.1Q, QinQ (802.1ad), MPLS, ARP, IPv4 with options and fragments, IPv6 with
extension headers, UDP, TCP, ICMP, ICMPv6, GTP-U (G-PDU with a PDU session container,
echo), VXLAN and ESP (AES-GCM and AES-CBC + HMAC-SHA1-96, the SAs of module_tables).

Run: .venv/bin/python fuzz/gen_corpus.py [DIR]   (DIR: where to write, default fuzz/corpus;
then `cargo fuzz cmin` each target, see docs/reliability.md). Deterministic: the same script
writes the same files.
"""

import hashlib
import os
import random
import struct
import sys
import tempfile
from pathlib import Path

from scapy.all import (
    ARP,
    ICMP,
    IP,
    TCP,
    UDP,
    Dot1AD,
    Dot1Q,
    Ether,
    ICMPv6EchoRequest,
    IPOption_Router_Alert,
    IPOption_RR,
    IPv6,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    PcapNgWriter,
    PcapWriter,
    fragment,
)
from scapy.contrib.gtp import GTP_U_Header, GTPEchoRequest, GTPPDUSessionContainer
from scapy.contrib.mpls import MPLS
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.vxlan import VXLAN

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "corpus"
rng = random.Random(1234)

# The UPF scenario's addresses (crates/fuzz-targets/src/graph.rs, upf_consts).
N3 = "198.18.0.1"
GNB = "198.18.0.2"
UE = [f"16.0.0.{1 + i}" for i in range(8)]
UL_TEID = 0x100
MACS = dict(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")


def eth(p):
    return Ether(**MACS) / p


def gpdu(teid, inner, psc=False, seq=None):
    if psc:
        g = GTP_U_Header(teid=teid, E=1, S=1, seq=seq or 0, next_ex=0x85) / GTPPDUSessionContainer(
            type=1, QFI=9
        )
    elif seq is not None:
        g = GTP_U_Header(teid=teid, S=1, seq=seq)
    else:
        g = GTP_U_Header(teid=teid)
    return eth(IP(src=GNB, dst=N3) / UDP(sport=2152, dport=2152) / g / inner)


def frames():
    """(name, bytes) of every kind of frame."""
    inner = IP(src="10.0.0.1", dst="8.8.8.8") / UDP(sport=1234, dport=53) / b"\xca\xfe\xba\xbe"
    out = [
        (
            "udp",
            eth(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1000, dport=2000) / (b"u" * 18)),
        ),
        ("tcp_syn", eth(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1000, dport=80, flags="S"))),
        (
            "tcp_opts",
            eth(
                IP(src="10.0.0.1", dst="10.0.0.2")
                / TCP(
                    sport=1000,
                    dport=443,
                    flags="PA",
                    options=[("MSS", 1460), ("NOP", None), ("WScale", 7)],
                )
                / (b"t" * 40)
            ),
        ),
        (
            "ip_options",
            eth(
                IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption_Router_Alert(), IPOption_RR()])
                / UDP()
                / b"o"
            ),
        ),
        (
            "icmp_echo",
            eth(IP(src="10.0.0.1", dst="10.0.0.2") / ICMP(type=8, id=7, seq=1) / b"ping"),
        ),
        (
            "icmp_unreach",
            eth(
                IP(src="10.0.0.9", dst="10.0.0.1")
                / ICMP(type=3, code=3)
                / IP(src="10.0.0.1", dst="10.0.0.2")
                / UDP(sport=1000, dport=2000)
            ),
        ),
        ("vlan", eth(Dot1Q(vlan=10, prio=3) / IP(src="10.0.0.1", dst="10.0.0.2") / UDP() / b"v")),
        (
            "qinq",
            Ether(**MACS, type=0x88A8)
            / Dot1AD(vlan=100)
            / Dot1Q(vlan=10)
            / IP(src="10.0.0.1", dst="10.0.0.2")
            / UDP()
            / b"q",
        ),
        (
            "mpls",
            Ether(**MACS)
            / MPLS(label=16, s=0)
            / MPLS(label=17, s=1)
            / IP(src="10.0.0.1", dst="10.0.0.2")
            / UDP(),
        ),
        (
            "arp_req",
            Ether(src=MACS["src"], dst="ff:ff:ff:ff:ff:ff")
            / ARP(op=1, psrc="10.0.0.1", pdst="10.0.0.2", hwsrc=MACS["src"]),
        ),
        (
            "arp_rep",
            eth(ARP(op=2, psrc="10.0.0.2", pdst="10.0.0.1", hwsrc=MACS["dst"], hwdst=MACS["src"])),
        ),
        (
            "ipv6_udp",
            eth(IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=1000, dport=2000) / b"6"),
        ),
        (
            "ipv6_tcp",
            eth(IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP(sport=1000, dport=80, flags="S")),
        ),
        (
            "ipv6_hbh_frag",
            eth(
                IPv6(src="2001:db8::1", dst="2001:db8::2")
                / IPv6ExtHdrHopByHop()
                / IPv6ExtHdrFragment(id=5, m=1)
                / UDP()
                / (b"f" * 8)
            ),
        ),
        (
            "icmpv6",
            eth(IPv6(src="2001:db8::1", dst="2001:db8::2") / ICMPv6EchoRequest(id=1, seq=1)),
        ),
        ("gtpu", gpdu(UL_TEID, inner)),
        ("gtpu_psc", gpdu(UL_TEID, inner, psc=True, seq=7)),
        ("gtpu_seq", gpdu(UL_TEID + 1, inner, seq=9)),
        (
            "gtpu_echo",
            eth(
                IP(src=GNB, dst=N3)
                / UDP(sport=2152, dport=2152)
                / GTP_U_Header(S=1, seq=1)
                / GTPEchoRequest()
            ),
        ),
        ("gtpu_v6_inner", gpdu(UL_TEID, IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP())),
        (
            "vxlan",
            eth(
                IP(src="10.0.0.1", dst="10.0.0.2")
                / UDP(sport=5000, dport=4789)
                / VXLAN(vni=42)
                / eth(IP(src="10.1.0.1", dst="10.1.0.2") / UDP())
            ),
        ),
        ("esp_gcm", eth(esp_gcm().encrypt(inner, seq_num=1, iv=bytes(8)))),
        ("esp_cbc", eth(esp_cbc().encrypt(inner, seq_num=1, iv=bytes(16)))),
    ]
    out = [(n, bytes(p)) for n, p in out]
    frags = [
        bytes(eth(f))
        for f in fragment(
            IP(src="10.0.0.1", dst="10.0.0.2", id=77) / UDP() / (b"F" * 600), fragsize=200
        )
    ]
    out += [(f"frag{i}", f) for i, f in enumerate(frags)]
    return out


def esp_gcm():
    return SecurityAssociation(
        ESP,
        spi=0x100,
        crypt_algo="AES-GCM",
        crypt_key=bytes(range(20)),
        tunnel_header=IP(src="192.0.2.2", dst="192.0.2.1"),
    )


def esp_cbc():
    return SecurityAssociation(
        ESP,
        spi=0x101,
        crypt_algo="AES-CBC",
        crypt_key=bytes(range(0x20, 0x30)),
        auth_algo="HMAC-SHA1-96",
        auth_key=bytes(range(0x40, 0x54)),
        tunnel_header=IP(src="192.0.2.2", dst="192.0.2.1"),
    )


def cuts(f):
    """A frame cut short at its header boundaries."""
    return [f[:n] for n in (13, 14, 18, 22, 33, 34, 38, 41, 42, 54, len(f) - 1) if n < len(f)]


def framed(fs):
    return b"".join(struct.pack(">H", len(f)) + f for f in fs)


def tagged(items):
    return b"".join(bytes([t]) + struct.pack(">H", len(f)) + f for t, f in items)


def write(target, name, data):
    d = ROOT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / ("seed-" + name)).write_bytes(data)


def all_frames():
    fs = frames()
    whole = [f for _, f in fs]
    cut = [c for f in whole[:12] for c in cuts(f)[::3]]
    return fs, whole, cut


def module_frames(fs, whole, cut):
    # One seed per class index (module_frames picks the class by the first byte), each with
    # a rotating handful of real frames and two cut ones.
    for c in range(80):
        pick = [whole[(c + k * 7) % len(whole)] for k in range(6)] + [
            cut[c % len(cut)],
            cut[(c * 5) % len(cut)],
        ]
        write("module_frames", f"class{c:02d}", bytes([c]) + framed(pick))


def module_graph(fs, whole, cut):
    for s in range(48):
        n = rng.randrange(2, 7)
        prog = bytes([n - 2])
        for _ in range(n):
            prog += bytes([rng.randrange(256), rng.randrange(256), rng.randrange(256)])
        pick = rng.sample(whole, 6) + [rng.choice(cut)]
        write("module_graph", f"g{s:02d}", prog + framed(pick))


def module_tables(fs, whole, cut):
    # 0: the UPF pipeline (uplink tag odd, downlink even).
    from scapy.all import UDP as U

    for sessions in (1, 4, 8):
        for qer in (0, 1):
            items = []
            for s in range(sessions):
                inner = IP(src=UE[s], dst="6.6.6.6") / U(sport=10001, dport=10002) / (b"Z" * 20)
                items.append(
                    (1, bytes(gpdu(UL_TEID + s, inner, psc=bool(s & 1), seq=s if s & 2 else None)))
                )
                items.append(
                    (
                        0,
                        bytes(
                            eth(
                                IP(src="6.6.6.6", dst=UE[s])
                                / U(sport=10002, dport=10001)
                                / (b"D" * 20)
                            )
                        ),
                    )
                )
            items.append((1, bytes(gpdu(0x999, IP(src=UE[0], dst="6.6.6.6") / U()))))
            items.append((0, bytes(eth(IP(src="6.6.6.6", dst="9.9.9.9") / U()))))
            items += [(1, c) for c in cuts(items[0][1])[::2]]
            write(
                "module_tables",
                f"upf_s{sessions}_q{qer}",
                bytes([0, sessions - 1, qer]) + tagged(items),
            )
    # 1: NAT: inside flows, then replies to them (tag 2, k), and outside strays.
    inside = [
        eth(IP(src="10.0.0.1", dst="93.184.216.34") / TCP(sport=40000, dport=80, flags="S")),
        eth(IP(src="10.0.0.2", dst="93.184.216.34") / UDP(sport=5353, dport=53) / b"q"),
        eth(IP(src="10.0.0.3", dst="93.184.216.34") / ICMP(type=8, id=99, seq=1)),
    ]
    items = [(0, bytes(p)) for p in inside]
    items += [(2, bytes([k])) for k in range(3)]
    items += [(2, bytes([0]) + bytes(TCP(sport=80, dport=1024, flags="SA"))[:20])]
    items += [
        (1, bytes(eth(IP(src="93.184.216.34", dst="203.0.113.1") / UDP(sport=53, dport=1) / b"x")))
    ]
    items += [(0, c) for c in cuts(bytes(inside[0]))[::2]]
    write("module_tables", "nat", bytes([1, 0]) + tagged(items))
    write("module_tables", "nat_ranges", bytes([1, 1, 0x10, 0x00, 16]) + tagged(items))
    # 2: IPDefrag: fragments of many datagrams (many flows), in and out of order, some
    # through IPFrag (tag 1).
    items = []
    for flow in range(24):
        dg = (
            IP(src=f"10.0.{flow}.1", dst="10.0.0.2", id=1000 + flow)
            / UDP(sport=flow, dport=9)
            / (b"%c" % (65 + flow % 26) * 150)
        )
        fr = [bytes(eth(f)) for f in fragment(dg, fragsize=64)]
        if flow % 3 == 1:
            fr.reverse()
        if flow % 5 == 2:
            fr = fr[:-1]
        items += [(0, f) for f in fr]
        if flow % 4 == 0:
            items.append((1, bytes(eth(dg))))
    for nf in (1, 8, 64):
        write("module_tables", f"defrag_f{nf}", bytes([2, nf - 1, 0x01, 0x00]) + tagged(items))
    # 3: ESPDecap: scapy's ciphertexts (tag 0) and plaintexts the target seals (tag 1 GCM,
    # tag 3 CBC): sequence number, 16 IV bytes, inner packet, padding, pad length, next header.
    items = []
    for seq in (1, 2, 2, 70, 3):
        for sa, ivlen in ((esp_gcm(), 8), (esp_cbc(), 16)):
            p = IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=2152, dport=2152) / b"in"
            items.append((0, bytes(eth(sa.encrypt(p, seq_num=seq, iv=bytes([seq]) * ivlen)))))
    inner = bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP() / b"abc")
    for tag, align in ((1, 4), (3, 16)):
        for nh, padn in ((4, None), (59, None), (41, None), (4, 250)):
            pad = (align - (len(inner) + 2) % align) % align if padn is None else padn
            pt = inner + bytes(range(1, pad + 1)) + bytes([pad & 0xFF, nh])
            items.append((tag, struct.pack(">I", 10 + nh) + bytes(16) + pt))
    write("module_tables", "esp_w64", bytes([3, 64]) + tagged(items))
    write("module_tables", "esp_w0", bytes([3, 0]) + tagged(items))
    # 4: ExactMatch / WildcardMatch rules keyed on IPv4 dst, proto, L4 dst port.
    rules = b""
    for k, (dst, proto, port) in enumerate(
        [("10.0.0.2", 17, 2000), ("10.0.0.2", 6, 80), ("8.8.8.8", 17, 53)]
    ):
        rules += (
            bytes(map(int, dst.split(".")))
            + bytes([proto])
            + struct.pack(">H", port)
            + bytes([k % 4])
        )
        rules += bytes([8 * k, 1, k & 1, k])
    write("module_tables", "match", bytes([4, 3]) + rules + framed(whole[:8] + cut[:3]))


def slice_port(fs, whole, cut):
    small = [f for f in whole if len(f) < 400]
    progs = {
        # app sends, daemon receives, sends back (zero copy), app receives and releases.
        "roundtrip": [0, 3, *framed(small[:4]), 7, 8, 8, 8, 4, 8],
        # app keeps what it receives, releases twice; daemon sends fresh packets.
        "keep": [
            0,
            1,
            *framed(small[4:6]),
            7,
            4,
            9,
            2,
            0,
            60,
            0x11,
            0x05,
            0xEE,
            0x7F,
            0xFF,
            0x22,
            5,
            8,
            6,
            8,
            1,
        ],
        # garbage descriptors on both rings, scribbled indices.
        "garbage": [
            1,
            2,
            0,
            0,
            0x10,
            0,
            0,
            1,
            0x10,
            0x40,
            7,
            8,
            2,
            1,
            0,
            0,
            0,
            0,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            3,
            40,
            0,
            0,
            0,
            200,
            7,
            8,
            3,
            0,
            0x80,
            0,
            0,
            0,
        ],
        # detach while the pipeline holds the app's frames, attach again.
        "detach": [
            0,
            3,
            *framed(small[:3]),
            7,
            32,
            0x8B,
            0,
            0,
            2,
            *framed(small[3:5]),
            7,
            8,
            10,
            8,
            4,
            8,
        ],
        # alloc_tx with odd offsets and lengths.
        "alloc": [11, 3, 0, 64, 0x0F, 0xFF, 1, 0, 0x10, 0x40, 2, 0, 0, 0, 7, 8, 8, 8],
    }
    for name, prog in progs.items():
        write("slice_port", name, bytes(prog))


def pcap_bytes(pkts, ng=False):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.pcap")
        w = (PcapNgWriter if ng else PcapWriter)(path)
        for i, p in enumerate(pkts):
            p = Ether(p)
            p.time = 1700000000 + i * 0.001
            w.write(p)
        w.close()
        return Path(path).read_bytes()


def port_rx(fs, whole, cut):
    # UnixSocketPort: messages of every size (empty, fitting, oversize), receive, send back,
    # reconnect.
    prog = [0, 1]
    prog += [0, 0x00, 60, 0x41, 1, 0, 0x42, 2, 0x20, 0x00, 0x3C, 0x43, 2, 3]
    prog += [0x20, 0x2F, 0x00, 0x44, 2, 3, 4, 0, 0x05, 0xDC, 0x45, 2, 3]
    write("port_rx", "unix", bytes(prog))
    write("port_rx", "unix_many", bytes([0, 0] + [0xE1, 200, 1] * 8 + [2, 0x7A, 3, 0x83, 4, 2]))
    # PcapFilePort: real captures, classic and pcapng, replayed once, looped, timed.
    for flags in (0, 1, 2):
        write("port_rx", f"pcap_f{flags}", bytes([1, flags]) + pcap_bytes(whole[:10]))
    write("port_rx", "pcapng", bytes([1, 0]) + pcap_bytes(whole[10:20], ng=True))
    write("port_rx", "pcap_cut", bytes([1, 0]) + pcap_bytes(whole[:3])[:-7])
    write("pcap_read", "pcap", pcap_bytes(whole[:6]))
    write("pcap_read", "pcapng", pcap_bytes(whole[6:12], ng=True))


def http_endpoints(fs, whole, cut):
    reqs = {
        "metrics": b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "snapshot": b"GET /api/snapshot HTTP/1.1\r\nHost: x\r\n\r\n",
        "view": b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "pipelined": b"GET /metrics HTTP/1.1\r\n\r\n"
        b"HEAD /api/snapshot HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\n",
        "post": b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        "chunked": b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "bearer": b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer fuzz-token-1234\r\n\r\n",
        "bad_bearer": b"GET /api/snapshot HTTP/1.1\r\nAuthorization: Bearer nope\r\n\r\n",
        "http10": b"GET /metrics HTTP/1.0\r\n\r\n",
        "garbage": b"\x00\x01GET\r\n\r\n",
        "long_uri": b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
    }
    for k, (name, r) in enumerate(reqs.items()):
        for flags in (0, 7, 3 | (k & 1) << 3):
            write("http_endpoints", f"{name}_{flags}", bytes([flags]) + r)


def megapipe_apps(fs, whole, cut):
    kv = [
        b"set a 5 0 3\r\nabc\r\nget a\r\ngets a b\r\n",
        b"add k 0 0 1\r\n1\r\nincr k 41\r\ndecr k 100\r\n"
        b"append k 0 0 2\r\nxy\r\nprepend k 0 0 1\r\n>\r\nget k\r\n",
        b"set c 0 0 2\r\nhi\r\ngets c\r\ncas c 0 0 2 2\r\nyo\r\n"
        b"cas c 0 0 2 999\r\nno\r\ndelete c\r\ndelete c noreply\r\n",
        b"set big 0 0 2000000\r\n" + b"x" * 64 + b"\r\nversion\r\nflush_all\r\nstats\r\nquit\r\n",
        b"set e 0 -1 1\r\nz\r\nget e\r\nreplace e 0 0 1\r\nq\r\n"
        b"bogus\r\n\r\nset bad 0 0 1\r\nxyz\r\n",
        b"get " + b"k" * 300 + b"\r\n" + b"g" * 2100 + b"\n",
    ]
    for k, s in enumerate(kv):
        write("megapipe_apps", f"kv{k}", bytes([0, 1, 7, 3, 250, 2, 9, 64, 5]) + s)
    http = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /a.txt HTTP/1.1\r\n\r\nHEAD /big.bin HTTP/1.1\r\n\r\n",
        b"GET /sub/ HTTP/1.0\r\n\r\n",
        b"GET /../secret HTTP/1.1\r\n\r\nGET /%2e%2e/secret HTTP/1.1\r\n\r\n"
        b"GET /sub/../../secret HTTP/1.1\r\n\r\n",
        b"GET /%zz HTTP/1.1\r\n\r\nGET /nope?x=1 HTTP/1.1\r\nConnection: close\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET /" + b"a" * 8200 + b" HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nX: " + b"h" * 17000 + b"\r\n\r\n",
    ]
    for k, s in enumerate(http):
        write("megapipe_apps", f"http{k}", bytes([1, 1, 2, 100, 255, 3, 17, 8, 200]) + s)


def control_sequence(fs, whole, cut):
    # Operation bytes as control.rs reads them: op % 20 picks the RPC.
    progs = {
        # CreatePort UnixSocketPort p0, CreateModule PortInc(p0) m0 and Sink m1, connect,
        # hook, list, destroy port.
        "ports": [
            5,
            0,
            0,
            0,
            0,
            0,
            1,
            1,
            0,
            30,
            0,
            0,
            2,
            2,
            30,
            0,
            0,
            2,
            0,
            1,
            0,
            0,
            0,
            7,
            0,
            1,
            0,
            0,
            0,
            1,
            19,
            0,
            0,
            6,
            0,
        ],
        # Workers, traffic classes, pause/resume, transactions.
        "sched": [
            9,
            0,
            0,
            0,
            12,
            0x0F,
            1,
            100,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            1,
            3,
            4,
            12,
            8,
            0,
            1,
            4,
            3,
            0,
            1,
            31,
            11,
            0,
            51,
            0,
            16,
            3,
            0,
            30,
            0,
            2,
            1,
            0,
            0,
            2,
            0,
            1,
            0,
            0,
            19,
            0,
            0,
        ],
        # SlicePort and PcapFilePort, port conf, resets.
        "ports2": [5, 1, 1, 0, 1, 1, 5, 2, 0, 0, 1, 1, 17, 0, 1, 0, 0, 0, 1, 15, 2, 35, 0, 55],
        # Commands with raw arguments, gate hook commands.
        "cmds": [0, 39, 0, 0, 2, 4, 39, 0, 0, 1, 8, 0x08, 0x01, 8, 1, 0, 0, 0, 0, 0, 1],
    }
    for name, prog in progs.items():
        write("control_sequence", name, bytes(prog))


def main():
    fs, whole, cut = all_frames()
    digest = hashlib.sha256(b"".join(whole)).hexdigest()[:12]
    print(f"frames: {len(whole)} whole, {len(cut)} cut (sha256 {digest})")
    for gen in (
        module_frames,
        module_graph,
        module_tables,
        slice_port,
        port_rx,
        http_endpoints,
        megapipe_apps,
        control_sequence,
    ):
        gen(fs, whole, cut)
    for t in sorted(p.name for p in ROOT.iterdir()):
        files = list((ROOT / t).glob("seed-*"))
        size = sum(f.stat().st_size for f in files)
        print(f"{t:<18} {len(files):4d} seeds, {size:7d} bytes")


if __name__ == "__main__":
    main()
