"""Sim-mode traffic for conf/upf/upf.bess: packet templates and SequentialUpdate ranges.

The templates are built with struct (no scapy) so that the pipeline runs anywhere the client
runs; checksums are filled once, and the fields SequentialUpdate rewrites per packet (TEID
and UE address) leave them stale, which nothing on the sim path verifies.
"""

from __future__ import annotations

import socket
import struct

GTPU_PORT = 2152
APP_SPORT = 10001
APP_DPORT = 10002

# Offsets in an Ethernet + IPv4 + UDP + GTP-U (8-byte header) + IPv4 frame.
TEID_OFFSET = 14 + 20 + 8 + 4
INNER_SRC_OFFSET = 14 + 20 + 8 + 8 + 12
INNER_DST_OFFSET = INNER_SRC_OFFSET + 4
# Offset of the IPv4 destination in a plain Ethernet + IPv4 frame.
PLAIN_DST_OFFSET = 14 + 16


def ip2int(addr: str) -> int:
    """The host-order integer of a dotted IPv4 address."""
    return struct.unpack("!I", socket.inet_aton(addr))[0]


def int2ip(value: int) -> str:
    """The dotted form of a host-order IPv4 integer."""
    return socket.inet_ntoa(struct.pack("!I", value & 0xFFFFFFFF))


def mac2bytes(mac: str) -> bytes:
    """The 6 bytes of a colon-separated MAC address."""
    return bytes(int(x, 16) for x in mac.split(":"))


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ipv4(src: str, dst: str, payload: bytes, proto: int = 17) -> bytes:
    hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(payload),
        1,
        0,
        64,
        proto,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    return hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:] + payload


def _udp(sport: int, dport: int, payload: bytes) -> bytes:
    # Checksum 0 (none): the sim path rewrites addresses under it.
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def _payload(n: int) -> bytes:
    return (b"hello" + b"0123456789" * 200)[: max(n, 0)]


def inet_packet(
    size: int, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str
) -> bytes:
    """A plain Ethernet/IPv4/UDP frame of `size` bytes (N6 downlink traffic)."""
    eth = mac2bytes(dst_mac) + mac2bytes(src_mac) + b"\x08\x00"
    body = _payload(size - 14 - 20 - 8)
    return eth + _ipv4(src_ip, dst_ip, _udp(APP_SPORT, APP_DPORT, body))


def gtpu_packet(
    size: int,
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    inner_src: str,
    inner_dst: str,
    teid: int,
) -> bytes:
    """A G-PDU of `size` bytes carrying an IPv4/UDP packet (N3 uplink, N9 traffic)."""
    eth = mac2bytes(dst_mac) + mac2bytes(src_mac) + b"\x08\x00"
    body = _payload(size - 14 - 20 - 8 - 8 - 20 - 8)
    inner = _ipv4(inner_src, inner_dst, _udp(APP_SPORT, APP_DPORT, body))
    gtp = struct.pack("!BBHI", 0x30, 0xFF, len(inner), teid) + inner
    return eth + _ipv4(src_ip, dst_ip, _udp(GTPU_PORT, GTPU_PORT, gtp))


def echo_request(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str) -> bytes:
    """A GTP-U Echo Request with the S flag (sequence number 0), as the path monitor wants."""
    eth = mac2bytes(dst_mac) + mac2bytes(src_mac) + b"\x08\x00"
    gtp = struct.pack("!BBHIHBB", 0x32, 1, 4, 0, 0, 0, 0)
    return eth + _ipv4(src_ip, dst_ip, _udp(GTPU_PORT, GTPU_PORT, gtp))


def gtpu_seq_fields(
    sessions: int, start_ue: str, ue_offset: int, start_teid: int
) -> list:
    """SequentialUpdate fields spreading G-PDUs over `sessions` (TEID, UE address) pairs."""
    ue = ip2int(start_ue)
    return [
        {
            "offset": TEID_OFFSET,
            "size": 4,
            "min": start_teid,
            "max": start_teid + sessions - 1,
        },
        {"offset": ue_offset, "size": 4, "min": ue, "max": ue + sessions - 1},
    ]


def inet_seq_fields(sessions: int, start_ue: str) -> list:
    """SequentialUpdate fields spreading N6 packets over `sessions` UE addresses."""
    ue = ip2int(start_ue)
    return [
        {"offset": PLAIN_DST_OFFSET, "size": 4, "min": ue, "max": ue + sessions - 1}
    ]
