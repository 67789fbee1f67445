"""Packet trace against a real bessemerd: `trace add` on a port, `show trace`, `clear trace`,
and the dry run `trace packet` with hex and with a scapy expression, which sends nothing."""

from __future__ import annotations

import contextlib
import io
import time

from scapy.all import IP, UDP, Ether, rdpcap, wrpcap

from bessemer import cli

N = 5


def _cli(port: int, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["--port", str(port), *argv])
    return code, out.getvalue(), err.getvalue()


def _until(pred, seconds: float = 20.0):
    deadline = time.monotonic() + seconds
    while not (v := pred()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return v


def _pkt(ttl: int = 64):
    return (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2", ttl=ttl)
        / UDP(sport=1234, dport=5678)
        / (b"x" * 18)
    )


def _pipeline(b, tmp_path):
    """file (a pcap of N packets in, a pcap out) -> PortInc -> UpdateTTL -> PortOut."""
    wrpcap(str(tmp_path / "in.pcap"), [_pkt() for _ in range(N)])
    b.create_port(
        "PcapFilePort",
        "file",
        {"rx_file": str(tmp_path / "in.pcap"), "tx_file": str(tmp_path / "out.pcap")},
    )
    b.create_module("PortInc", "pin", {"port": "file"})
    b.create_module("UpdateTTL", "ttl")
    b.create_module("PortOut", "pout", {"port": "file"})
    b.connect_modules("pin", "ttl")
    b.connect_modules("ttl", "pout")


def test_trace_add_on_a_port_and_show_trace(daemon, tmp_path):
    b = daemon.client
    _pipeline(b, tmp_path)
    code, out, err = _cli(daemon.port, "show", "trace")
    assert (code, out) == (0, "No packets in trace buffer\n"), err
    code, out, err = _cli(daemon.port, "trace", "add", "file", "3")
    assert code == 0, err
    assert out == "tracing the next 3 packets entering pin\n"
    b.resume_all()
    assert _until(lambda: b.get_port_stats("file").out.packets == N)
    resp = _until(lambda: (r := b.show_trace()) and len(r.packets) == 3 and r)
    assert resp.armed and resp.points == ["pin"] and resp.remaining == 0
    for p in resp.packets:
        assert [(h.module, h.igate, list(h.ogates), h.end) for h in p.hops] == [
            ("pin", -1, [0], ""),
            ("ttl", 0, [0], ""),
            ("pout", 0, [], "output"),
        ]
        assert p.hops[2].end_detail == "file" and p.worker == 0
        ttl = p.hops[1]
        assert ttl.before.headers[1].startswith("IPv4 10.0.0.1 > 10.0.0.2 proto 17 ttl 64")
        assert ttl.after.headers[1].startswith("IPv4 10.0.0.1 > 10.0.0.2 proto 17 ttl 63")
        assert ttl.after.headers[2] == "UDP 1234 > 5678 len 26" and ttl.after.len == 60
    code, out, err = _cli(daemon.port, "show", "trace")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Packet 1 (worker 0)"
    assert [ln.split(": ", 1)[1] for ln in lines if ln[:1].isdigit()][:3] == [
        "pin (PortInc) task -> out gate 0",
        "ttl (UpdateTTL) in gate 0 -> out gate 0",
        "pout (PortOut) in gate 0",
    ]
    assert "  before: len 60, as pin left it" in lines and "  after: len 60" in lines
    assert "    ETH 02:00:00:00:00:01 > 02:00:00:00:00:02 type 0x0800" in lines
    assert "  sent to port file" in lines
    assert out.count("Packet ") == 3
    code, out, err = _cli(daemon.port, "clear", "trace")
    assert code == 0, err
    assert not b.show_trace().armed
    assert _cli(daemon.port, "show", "trace")[1] == "No packets in trace buffer\n"


def test_trace_packet_runs_hex_and_scapy_without_sending(daemon, tmp_path):
    b = daemon.client
    _pipeline(b, tmp_path)
    b.resume_all()
    assert _until(lambda: b.get_port_stats("file").out.packets == N)
    b.pause_all()
    sent = b.get_port_stats("file").out.packets
    hexpkt = bytes(_pkt(ttl=9)).hex()
    code, out, err = _cli(daemon.port, "trace", "packet", "ttl", hexpkt)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Packet 1 (dry run)"
    assert any(ln.endswith("ttl (UpdateTTL) in gate 0 -> out gate 0") for ln in lines)
    assert any("proto 17 ttl 9 " in ln for ln in lines)
    assert any("proto 17 ttl 8 " in ln for ln in lines)
    assert lines[-1] == "  dry run: would send to port file; not run"
    # A scapy expression; from the PortInc (taken as its output).
    expr = "Ether()/IP(src='10.1.1.1', dst='10.2.2.2', ttl=1)/UDP(dport=53)"
    code, out, err = _cli(daemon.port, "trace", "packet", "pin", expr)
    assert code == 0, err
    assert "pin (PortInc) task -> out gate 0" in out
    assert "IPv4 10.1.1.1 > 10.2.2.2 proto 17 ttl 1 " in out
    assert out.rstrip().endswith("dropped: ttl_expired")
    # Hex with spaces, over the RPC too.
    resp = b.trace_packet("ttl", bytes.fromhex(hexpkt))
    assert [h.module for h in resp.packet.hops] == ["ttl", "pout"]
    assert resp.packet.worker == -1 and resp.packet.hops[1].end == "dry_run_stop"
    # Nothing left the port, nothing was written to its file.
    b.resume_all()
    time.sleep(0.3)
    assert b.get_port_stats("file").out.packets == sent == N
    b.pause_all()
    assert len(rdpcap(str(tmp_path / "out.pcap"))) == N


def test_trace_errors_name_the_problem(daemon, tmp_path):
    b = daemon.client
    _pipeline(b, tmp_path)
    for argv, text in [
        (["trace", "add", "nope", "3"], "no module or port named 'nope'"),
        (["trace", "add", "ttl", "0"], "N must be 1..500"),
        (["trace", "add", "ttl", "501"], "N must be 1..500"),
        (["trace", "packet", "nope", "00" * 60], "nope"),
        (["trace", "packet", "ttl", "abc"], "odd number of digits"),
        (["trace", "packet", "ttl", "Ether(("], "neither hex nor a scapy expression"),
        (["trace", "packet", "ttl", "0011"], "2 bytes"),
        (["trace", "packet", "ttl", "0x0g"], "bad hex: 'g' at digit 1 is not a hex digit"),
    ]:
        code, out, err = _cli(daemon.port, *argv)
        assert code != 0 and text in err, (argv, out, err)
    # Over the RPC (no CLI check in between): the count's range is the daemon's too.
    try:
        b.trace_add("ttl", 0)
    except Exception as exc:  # the client raises the daemon's error
        assert "out of range (1..=500 packets)" in str(exc)
    else:
        raise AssertionError("count 0 accepted")
