"""An IPsec gateway outside the daemon: an external application attached to a SlicePort
through the slice library, doing what ESPEncap / ESPDecap do inside the pipeline, with
scapy's IPsec layer (ESP tunnel mode, AES-GCM-128) instead of Bessemer's.

Every IPv4 frame the daemon hands it is either ESP (decrypted with the inbound SA) or plain
(encrypted with the outbound SA); the result goes back into the daemon on the same slice.
Frames it cannot handle are counted by reason and printed at exit.

    python conf/slices/esp_app.py --path /tmp/esp.sock --out-spi 0x100 --in-spi 0x200 \\
        --key 0102...a0a1a2a3 --local 192.0.2.1 --peer 192.0.2.2 [--seconds 60]

It runs until the daemon goes away, --seconds pass or --frames frames were handled, and
prints one JSON line of counters. Needs the `cryptography` package (scapy's IPsec layer).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

from bessemer.slice import Slice, SliceError
from scapy.layers.inet import IP
from scapy.layers.ipsec import ESP, SecurityAssociation

ETH_IPV4 = b"\x08\x00"
PROTO_ESP = 50


def _sa(spi: int, key: bytes, src: str, dst: str) -> SecurityAssociation:
    return SecurityAssociation(
        ESP,
        spi=spi,
        crypt_algo="AES-GCM",
        crypt_key=key,
        tunnel_header=IP(src=src, dst=dst),
    )


def handle(frame: bytes, out_sa, in_sa, counts: Counter) -> bytes | None:
    """The frame to send back for `frame`, or None (counted under a reason)."""
    if len(frame) < 34 or frame[12:14] != ETH_IPV4:
        counts["not_ipv4"] += 1
        return None
    eth = frame[:14]
    try:
        ip = IP(frame[14:])
    except Exception:  # noqa: BLE001 - any parse failure of a hostile frame is a drop
        counts["bad_ip_header"] += 1
        return None
    if ip.proto == PROTO_ESP:
        try:
            inner = in_sa.decrypt(ip)
        except Exception:  # noqa: BLE001 - scapy raises several kinds for a bad ICV
            counts["bad_esp"] += 1
            return None
        counts["decrypted"] += 1
        return eth + bytes(inner)
    counts["encrypted"] += 1
    return eth + bytes(out_sa.encrypt(ip))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="the SlicePort's socket path")
    p.add_argument("--out-spi", type=lambda s: int(s, 0), required=True)
    p.add_argument("--in-spi", type=lambda s: int(s, 0), required=True)
    p.add_argument("--key", required=True, help="hex: 16-byte AES key then 4-byte salt")
    p.add_argument("--local", required=True, help="this gateway's tunnel address")
    p.add_argument("--peer", required=True, help="the other gateway's tunnel address")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument(
        "--frames", type=int, default=0, help="stop after this many (0: no limit)"
    )
    a = p.parse_args(argv)
    key = bytes.fromhex(a.key)
    if len(key) != 20:
        p.error("--key: 20 bytes (AES-128 key and salt) in hex")
    out_sa = _sa(a.out_spi, key, a.local, a.peer)
    in_sa = _sa(a.in_spi, key, a.peer, a.local)
    counts: Counter = Counter()
    end = time.monotonic() + a.seconds
    handled = 0
    try:
        with Slice.attach(a.path) as s:
            print("attached", flush=True)
            while time.monotonic() < end and (not a.frames or handled < a.frames):
                if not s.wait(spin_us=100, timeout_ms=50):
                    continue
                replies = []
                for frame in s.recv_batch():
                    handled += 1
                    r = handle(frame, out_sa, in_sa, counts)
                    if r is not None:
                        replies.append(r)
                while replies:
                    sent = s.send_batch(replies)
                    counts["sent"] += sent
                    replies = replies[sent:]
                    if replies:
                        time.sleep(0.001)
    except SliceError as exc:
        counts["daemon_left"] += 1
        print(f"esp_app: {exc}", file=sys.stderr)
    print(json.dumps(dict(counts)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
