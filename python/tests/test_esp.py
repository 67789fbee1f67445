"""ESPEncap / ESPDecap through the daemon against another IPsec implementation, scapy's
`SecurityAssociation` (scapy.layers.ipsec, crypto by the `cryptography` package): what scapy
encrypts our decapsulator accepts, and what our encapsulator emits scapy decrypts, and is
byte for byte what scapy makes with the same sequence number and IV; both cipher suites.
Then (root) a TCP transfer between two namespaces through a tunnel between two gateway
pipelines on AFPacketPort veths."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("cryptography", reason="scapy's IPsec layer needs the cryptography package")

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.ipsec import ESP, SecurityAssociation  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

from bessemer.script import run_script  # noqa: E402

from .conftest import ROOT, ROOT_ONLY, in_ns, ogate_packets, sh  # noqa: E402

SAMPLE = ROOT / "conf" / "samples" / "ipsec_gateway.bess"

GCM_KEY = bytes(range(1, 17)) + bytes.fromhex("a0a1a2a3")  # AES key then 4-byte salt
CBC_KEY = bytes(range(0x21, 0x31))
CBC_AUTH = bytes(range(0x41, 0x55))
LOCAL, PEER = "192.0.2.1", "192.0.2.2"
ETHER = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")


def _our_sa(spi: int, cbc: bool, **extra) -> dict:
    sa = {"spi": spi, "local": LOCAL, "peer": PEER, **extra}
    if cbc:
        sa.update(cipher="aes-cbc-128-hmac-sha1-96", key=CBC_KEY, auth_key=CBC_AUTH)
    else:
        sa.update(cipher="aes-gcm-128", key=GCM_KEY)
    return sa


def _scapy_sa(spi: int, cbc: bool) -> SecurityAssociation:
    tunnel = IP(src=LOCAL, dst=PEER)
    if cbc:
        return SecurityAssociation(
            ESP,
            spi=spi,
            crypt_algo="AES-CBC",
            crypt_key=CBC_KEY,
            auth_algo="HMAC-SHA1-96",
            auth_key=CBC_AUTH,
            tunnel_header=tunnel,
        )
    return SecurityAssociation(
        ESP, spi=spi, crypt_algo="AES-GCM", crypt_key=GCM_KEY, tunnel_header=tunnel
    )


# Inner payload sizes covering every padding residue of both suites and a near-MTU packet.
SIZES = list(range(0, 17)) + [100, 1000, 1400]


def _inner(dst: str, size: int) -> IP:
    pkt = IP(src="10.1.0.1", dst=dst, id=size) / UDP(sport=1234, dport=5678) / os.urandom(size)
    return IP(bytes(pkt))


def _through(bess, tmp_path, name: str, module: str, frames: list[bytes]) -> list[bytes]:
    """Sends `frames` into a UnixSocketPort -> `module` -> back out; returns what came back."""
    path = str(tmp_path / f"{name}.sock")
    bess.create_port("UnixSocketPort", name, {"path": path})
    bess.create_module("PortInc", f"{name}_in", {"port": name})
    bess.create_module("PortOut", f"{name}_out", {"port": name})
    bess.connect_modules(f"{name}_in", module)
    bess.connect_modules(module, f"{name}_out")
    bess.resume_all()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.settimeout(10)
    try:
        c.connect(path)
        got = []
        # One at a time: the port's receive side is a datagram queue; order is kept anyway.
        for f in frames:
            c.send(f)
            got.append(c.recv(65536))
        return got
    finally:
        c.close()


def test_decap_accepts_what_scapy_encrypts(bess, tmp_path):
    gcm, cbc = _scapy_sa(0x1001, False), _scapy_sa(0x1002, True)
    bess.create_module("ESPDecap", "dec", {"sas": [_our_sa(0x1001, False), _our_sa(0x1002, True)]})
    inners, frames = [], []
    for seq, size in enumerate(SIZES, start=1):
        for sa in (gcm, cbc):
            inner = _inner("10.2.0.1", size)
            inners.append(bytes(ETHER / inner))
            frames.append(bytes(ETHER / sa.encrypt(inner, seq_num=seq)))
    got = _through(bess, tmp_path, "d", "dec", frames)
    assert got == inners
    stats = {s.spi: s for s in bess.run_module_command("dec", "get_stats", "EmptyArg").sas}
    assert stats[0x1001].packets == stats[0x1002].packets == len(SIZES)
    assert stats[0x1001].seq == len(SIZES)
    # Refused and counted: a replayed packet; a forged one with the same sequence number
    # (the window refuses it before its ICV is checked); a fresh one with a flipped ICV bit.
    tampered = bytearray(frames[0])
    tampered[14 + 20 + 20] ^= 1
    forged = bytearray(bytes(ETHER / gcm.encrypt(_inner("10.2.0.1", 20), seq_num=999)))
    forged[-1] ^= 1
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.settimeout(10)
    c.connect(str(tmp_path / "d.sock"))
    for f in (frames[0], bytes(tampered), bytes(forged)):
        c.send(f)
    c.close()
    deadline = time.monotonic() + 5
    drops = {}
    while time.monotonic() < deadline:
        drops = {d.reason: d.count for d in bess.get_module_info("dec").drops}
        if drops.get("replay", 0) + drops.get("bad_icv", 0) >= 3:
            break
        time.sleep(0.02)
    assert (drops["replay"], drops["bad_icv"]) == (2, 1)


def test_scapy_decrypts_what_encap_emits_byte_for_byte(bess, tmp_path):
    gcm, cbc = _scapy_sa(0x1001, False), _scapy_sa(0x1002, True)
    bess.create_module(
        "ESPEncap",
        "enc",
        {
            "sas": [
                _our_sa(0x1001, False, inner_dst="10.2.0.0/24"),
                _our_sa(0x1002, True, inner_dst="10.3.0.0/24"),
            ]
        },
    )
    inners = []
    for size in SIZES:
        inners.append(_inner("10.2.0.1", size))
        inners.append(_inner("10.3.0.1", size))
    got = _through(bess, tmp_path, "e", "enc", [bytes(ETHER / p) for p in inners])
    assert len(got) == len(inners)
    for i, (inner, frame) in enumerate(zip(inners, got, strict=True)):
        seq = i // 2 + 1
        eth = Ether(frame)
        assert bytes(eth)[:14] == bytes(ETHER)[:12] + b"\x08\x00"
        outer = eth[IP]
        assert (outer.src, outer.dst, outer.proto) == (LOCAL, PEER, 50)
        sa = cbc if i % 2 else gcm
        assert bytes(sa.decrypt(IP(bytes(outer)))) == bytes(inner)
        esp = bytes(outer)[20:]
        assert int.from_bytes(esp[4:8], "big") == seq
        iv = esp[8:24] if i % 2 else esp[8:16]
        if not i % 2:
            assert iv == seq.to_bytes(8, "big"), "GCM's explicit IV is the sequence number"
        # scapy, given the same sequence number and IV, makes the same ESP bytes.
        assert bytes(sa.encrypt(inner, seq_num=seq, iv=iv))[20:] == esp
    ivs = {bytes(Ether(f)[IP])[28:44] for f in got[1::2]}
    assert len(ivs) == len(SIZES), "every CBC packet has its own IV"
    stats = {s.spi: s for s in bess.run_module_command("enc", "get_stats", "EmptyArg").sas}
    assert stats[0x1001].seq == stats[0x1002].seq == len(SIZES)


def test_sa_commands_refuse_bad_arguments_by_name(bess):
    bess.create_module("ESPEncap", "enc", {"sas": [_our_sa(0x1001, False)]})
    with pytest.raises(bess.Error, match="already in use"):
        bess.run_module_command("enc", "add_sa", "ESPSecurityAssociation", _our_sa(0x1001, True))
    with pytest.raises(bess.Error, match="takes 20 bytes"):
        bess.run_module_command(
            "enc", "add_sa", "ESPSecurityAssociation", {**_our_sa(0x2000, False), "key": b"x"}
        )
    with pytest.raises(bess.Error, match="no SA with SPI 4660"):
        bess.run_module_command("enc", "delete_sa", "ESPCommandDeleteSaArg", {"spi": 0x1234})
    bess.run_module_command("enc", "delete_sa", "ESPCommandDeleteSaArg", {"spi": 0x1001})
    assert list(bess.run_module_command("enc", "get_stats", "EmptyArg").sas) == []
    with pytest.raises(bess.Error, match="ESPDecapArg.replay_window"):
        bess.create_module("ESPDecap", "dec", {"replay_window": 4096})


# ---- a tunnel between two namespaces --------------------------------------------------------

HOST_MAC = {"a": "02:00:00:00:0a:01", "b": "02:00:00:00:0b:01"}
GW_MAC = {"a": "02:00:00:00:fe:0a", "b": "02:00:00:00:fe:0b"}
NET = {"a": "10.1.0", "b": "10.2.0"}

# Receives one TCP connection on ADDR:PORT and prints the byte count and sha256 (20 s max).
FILE_PORT = 5302
SERVER = f"""
import hashlib, socket, sys
s = socket.socket(); s.bind((sys.argv[1], {FILE_PORT})); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20); h = hashlib.sha256(); n = 0
while d := c.recv(1 << 16):
    h.update(d); n += len(d)
print(n, h.hexdigest())
"""
CLIENT = f"""
import socket, sys
s = socket.create_connection((sys.argv[1], {FILE_PORT}), timeout=20)
s.sendall(bytes.fromhex(sys.stdin.read().strip()))
s.shutdown(socket.SHUT_WR)
s.recv(1)
"""


@pytest.fixture()
def tunnel_namespaces():
    """Host namespaces A and B and a gateway namespace holding the daemon's interfaces:
    A's and B's veth peers, and the WAN veth pair between the two gateways."""
    tag = uuid.uuid4().hex[:6]
    ns = {"a": f"espa{tag}", "b": f"espb{tag}", "gw": f"espg{tag}"}
    try:
        for n in ns.values():
            assert sh("ip", "netns", "add", n).returncode == 0
            sh("ip", "-n", n, "link", "set", "lo", "up")
        for side in ("a", "b"):
            host, gw = f"h{side}{tag}", f"g{side}{tag}"
            cmds = [
                [
                    "ip",
                    "-n",
                    ns["gw"],
                    "link",
                    "add",
                    gw,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    host,
                    "netns",
                    ns[side],
                ],
                ["ip", "-n", ns[side], "link", "set", host, "address", HOST_MAC[side]],
                ["ip", "-n", ns[side], "addr", "add", f"{NET[side]}.1/24", "dev", host],
                ["ip", "-n", ns[side], "link", "set", host, "up"],
                ["ip", "-n", ns["gw"], "link", "set", gw, "up"],
                [
                    "ip",
                    "-n",
                    ns[side],
                    "neigh",
                    "add",
                    f"{NET[side]}.254",
                    "lladdr",
                    GW_MAC[side],
                    "dev",
                    host,
                    "nud",
                    "permanent",
                ],
            ]
            other = "b" if side == "a" else "a"
            cmds.append(
                [
                    "ip",
                    "-n",
                    ns[side],
                    "route",
                    "add",
                    f"{NET[other]}.0/24",
                    "via",
                    f"{NET[side]}.254",
                ]
            )
            for c in cmds:
                r = sh(*c)
                assert r.returncode == 0, (c, r.stderr)
            ns[f"if_{side}"] = gw
        # The WAN link: ESP adds up to 73 bytes to a 1500-byte packet.
        wa, wb = f"wa{tag}", f"wb{tag}"
        for c in (
            [
                "ip",
                "-n",
                ns["gw"],
                "link",
                "add",
                wa,
                "mtu",
                "1600",
                "type",
                "veth",
                "peer",
                "name",
                wb,
                "mtu",
                "1600",
            ],
            ["ip", "-n", ns["gw"], "link", "set", wa, "up"],
            ["ip", "-n", ns["gw"], "link", "set", wb, "up"],
        ):
            r = sh(*c)
            assert r.returncode == 0, (c, r.stderr)
        ns["wan_a"], ns["wan_b"] = wa, wb
        yield ns
    finally:
        for key in ("a", "b", "gw"):
            sh("ip", "netns", "del", ns[key])


def _gateway(bess, ns: dict, side: str, out_spi: int, in_spi: int, cbc: bool) -> None:
    """One gateway from conf/samples/ipsec_gateway.bess (af_packet mode): plain port ->
    ESPEncap -> WAN port, WAN port -> ESPDecap -> MAC rewrite -> plain port."""
    local, peer = ("192.0.2.1", "192.0.2.2") if side == "a" else ("192.0.2.2", "192.0.2.1")
    other = "b" if side == "a" else "a"
    env = {
        "IPSEC_MODE": "af_packet",
        "IPSEC_GW": f"gw{side}",
        "IPSEC_NETNS": ns["gw"],
        "IPSEC_PLAIN_IF": ns[f"if_{side}"],
        "IPSEC_WAN_IF": ns[f"wan_{side}"],
        "IPSEC_CIPHER": "aes-cbc-128-hmac-sha1-96" if cbc else "aes-gcm-128",
        "IPSEC_LOCAL": local,
        "IPSEC_PEER": peer,
        "IPSEC_REMOTE_NET": f"{NET[other]}.0/24",
        "IPSEC_OUT_SPI": str(out_spi),
        "IPSEC_IN_SPI": str(in_spi),
        "IPSEC_LAN_MAC": HOST_MAC[side],
        "IPSEC_GW_MAC": GW_MAC[side],
    }
    run_script(SAMPLE, bess, env)


def test_sample_gateway_pair_decrypts_everything_in_sim_mode(bess):
    run_script(SAMPLE, bess)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(ogate_packets(bess, f"dec_{s}") > 100 for s in "ab"):
            break
        time.sleep(0.05)
    bess.pause_all()
    for side, spi in (("a", 0x1002), ("b", 0x1001)):
        (st,) = bess.run_module_command(f"dec_{side}", "get_stats", "EmptyArg").sas
        assert st.spi == spi and st.packets > 100
        drops = {d.reason: d.count for d in bess.get_module_info(f"dec_{side}").drops}
        assert sum(drops.values()) == 0, drops


@ROOT_ONLY
@pytest.mark.parametrize("cbc", [False, True], ids=["aes-gcm-128", "aes-cbc-hmac-sha1"])
def test_tcp_transfer_crosses_a_tunnel_between_two_gateways(bess, tunnel_namespaces, cbc):
    ns = tunnel_namespaces
    _gateway(bess, ns, "a", 0x0A0B, 0x0B0A, cbc)
    _gateway(bess, ns, "b", 0x0B0A, 0x0A0B, cbc)
    data = os.urandom(2 << 20)
    server = subprocess.Popen(
        ["ip", "netns", "exec", ns["b"], "python3", "-c", SERVER, f"{NET['b']}.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if f":{FILE_PORT}" in in_ns(ns["b"], "ss", "-ltn").stdout:
                break
            time.sleep(0.05)
        client = subprocess.run(
            ["ip", "netns", "exec", ns["a"], "python3", "-c", CLIENT, f"{NET['b']}.1"],
            input=data.hex(),
            capture_output=True,
            text=True,
            timeout=40,
        )
        assert client.returncode == 0, client.stderr
        out, err = server.communicate(timeout=30)
        assert server.returncode == 0, err
    finally:
        server.kill()
        server.wait()
    assert out.split() == [str(len(data)), hashlib.sha256(data).hexdigest()]
    # Both directions went through the tunnel (data one way, ACKs the other), every packet
    # authenticated: nothing refused for a bad ICV or replay.
    for side, spi in (("b", 0x0A0B), ("a", 0x0B0A)):
        (st,) = bess.run_module_command(f"gw{side}_dec", "get_stats", "EmptyArg").sas
        assert st.spi == spi and st.packets > 0
        assert st.bad_icv == 0 and st.replay == 0
        assert ogate_packets(bess, f"gw{'a' if side == 'b' else 'b'}_enc") > 0


def test_external_app_over_a_slice_interoperates_with_the_pipeline(bess, tmp_path):
    """conf/slices/esp_app.py, an IPsec gateway outside the daemon (scapy's ESP over the slice
    library), attached to a SlicePort: what it encrypts, ESPDecap in the pipeline decrypts to
    the original; what scapy encrypts for it, it decrypts; both come back through the daemon."""
    pytest.importorskip("bessemer.slice")
    from bessemer.slice import SliceError, library_path

    try:
        library_path()
    except SliceError:
        subprocess.run(
            ["cargo", "build", "-q", "-p", "bessemer-slice"], cwd=ROOT, check=True, timeout=900
        )
    app_path, user_path = str(tmp_path / "app.sock"), str(tmp_path / "user.sock")
    bess.create_port("SlicePort", "app", {"path": app_path, "ring_size": 256})
    bess.create_port("UnixSocketPort", "user", {"path": user_path})
    for name, cls, arg in (
        ("u_in", "PortInc", {"port": "user"}),
        ("a_out", "PortOut", {"port": "app"}),
        ("a_in", "PortInc", {"port": "app"}),
        ("u_out", "PortOut", {"port": "user"}),
        ("by_proto", "Split", {"size": 1, "offset": 23}),
        ("dec", "ESPDecap", {"sas": [_our_sa(0x3001, False)]}),
    ):
        bess.create_module(cls, name, arg)
    bess.connect_modules("u_in", "a_out")
    bess.connect_modules("a_in", "by_proto")
    bess.connect_modules("by_proto", "dec", 50)  # ESP from the app: decrypted here
    bess.connect_modules("dec", "u_out")
    bess.connect_modules("by_proto", "u_out", 17)  # UDP the app decrypted
    bess.resume_all()
    app = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "conf" / "slices" / "esp_app.py"),
            "--path",
            app_path,
            "--out-spi",
            "0x3001",
            "--in-spi",
            "0x3002",
            "--key",
            GCM_KEY.hex(),
            "--local",
            LOCAL,
            "--peer",
            PEER,
            "--seconds",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
    )
    try:
        assert app.stdout.readline().strip() == "attached", app.stderr.read()
        to_app = _scapy_sa(0x3002, False)  # the peer's outbound SA = the app's inbound one
        plain = [bytes(ETHER / _inner("10.2.0.1", size)) for size in SIZES]
        sealed = [
            bytes(ETHER / to_app.encrypt(_inner("10.2.0.9", size), seq_num=seq))
            for seq, size in enumerate(SIZES, start=1)
        ]
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        c.settimeout(10)
        c.connect(user_path)
        got = []
        for f in plain + sealed:
            c.send(f)
            got.append(c.recv(65536))
        c.close()
    finally:
        app.terminate()
        out, err = app.communicate(timeout=20)
    assert got[: len(plain)] == plain, "ESPDecap did not recover what the app encrypted"
    want = [bytes(ETHER / to_app.decrypt(IP(f[14:]))) for f in sealed]
    assert got[len(plain) :] == want
    stats = bess.run_module_command("dec", "get_stats", "EmptyArg").sas
    assert stats[0].packets == len(SIZES)
    assert ogate_packets(bess, "by_proto", 17) == len(SIZES)
