"""MemifPort against a real memif peer: DPDK's own net_memif driver, in a second daemon
process (bessemerd's PMDPort, linked with Debian's DPDK), in both roles; and two bessemerds
joined by MemifPort alone. What one side sends the other receives, counted on both; the
link follows the peer. The DPDK cases skip (with the reason) where bessemerd was built
without DPDK."""

from __future__ import annotations

import time

import pytest

from bessemer.client import BESS
from bessemer.script import run_script

from .conftest import ROOT, running_daemon
from .test_pmd_port import _dpdk_or_skip, _wait


def _stream(tx: BESS, tx_port: str, rx: BESS, rx_port: str, tag: str, size: int = 60) -> int:
    """Source -> PortOut(tx_port) on `tx`, PortInc(rx_port) -> Sink on `rx`: packets arrive,
    and once the sender pauses, every packet it sent (the receiver keeps running)."""
    tx.pause_all()
    rx.pause_all()
    tx.create_module("Source", f"src_{tag}", {"pkt_size": size})
    tx.create_module("PortOut", f"out_{tag}", {"port": tx_port})
    tx.connect_modules(f"src_{tag}", f"out_{tag}")
    if not any(m.name == f"inc_{rx_port}" for m in rx.list_modules()):
        rx.create_module("PortInc", f"inc_{rx_port}", {"port": rx_port})
        rx.create_module("Sink", f"sink_{rx_port}")
        rx.connect_modules(f"inc_{rx_port}", f"sink_{rx_port}")
    before = rx.get_port_stats(rx_port).inc.packets
    sent_before = tx.get_port_stats(tx_port).out.packets
    rx.resume_all()
    tx.resume_all()
    assert _wait(lambda: rx.get_port_stats(rx_port).inc.packets - before > 5_000)
    tx.pause_all()
    tx.destroy_module(f"src_{tag}")
    tx.destroy_module(f"out_{tag}")
    tx.resume_all()
    sent = tx.get_port_stats(tx_port).out.packets - sent_before
    assert _wait(lambda: rx.get_port_stats(rx_port).inc.packets - before == sent, 5), (
        sent,
        rx.get_port_stats(rx_port).inc.packets - before,
    )
    return sent


def _details(b: BESS, port: str) -> str:
    return b.show_port_details([port]).ports[0].details


@pytest.mark.parametrize("bessemer_role", ["server", "client"])
def test_memif_port_with_dpdks_net_memif(tmp_path, bessemer_role):
    sock = str(tmp_path / "memif.sock")
    dpdk_role = "client" if bessemer_role == "server" else "server"
    with running_daemon(tmp_path) as ours, running_daemon(tmp_path) as dpdk:
        _dpdk_or_skip(dpdk.client)
        m, d = ours.client, dpdk.client
        vdev = f"net_memif0,role={dpdk_role},socket={sock},socket-abstract=no,id=3"
        arg = {"socket": sock, "role": bessemer_role, "id": 3}
        if bessemer_role == "server":
            m.create_port("MemifPort", "mif", arg)
            d.create_port("PMDPort", "mif", {"vdev": vdev})
        else:
            d.create_port("PMDPort", "mif", {"vdev": vdev})
            m.create_port("MemifPort", "mif", arg)
        assert _wait(lambda: m.get_link_status("mif").link_up), "no memif connection"
        assert _wait(lambda: d.get_link_status("mif").link_up)
        _stream(m, "mif", d, "mif", "to_dpdk")
        _stream(d, "mif", m, "mif", "from_dpdk", size=1400)
        st = m.get_port_stats("mif")
        assert st.inc.dropped == 0
        details = _details(m, "mif")
        want = f"memif {bessemer_role} {sock} id 3 (connected to 'net_memif0' (DPDK"
        assert want in details, details
        assert "rx_bad_desc=0" in details
        # The DPDK side goes away: our link follows, and the daemon keeps answering.
        d.pause_all()
        d.reset_all()
        assert _wait(lambda: not m.get_link_status("mif").link_up), "link stayed up"
        m.get_version()


def test_two_bessemerds_over_memif_port(tmp_path):
    sock = f"@bessemer-memif-test-{time.monotonic_ns()}"
    with running_daemon(tmp_path) as a, running_daemon(tmp_path) as z:
        a.client.create_port("MemifPort", "m", {"socket": sock})
        z.client.create_port("MemifPort", "m", {"socket": sock, "role": "client"})
        assert _wait(lambda: a.client.get_link_status("m").link_up)
        _stream(a.client, "m", z.client, "m", "ab")
        _stream(z.client, "m", a.client, "m", "za", size=2800)  # chained buffers (2048 each)
        # A Source outruns any receiver: the sender's ring-full drops are counted as such;
        # nothing is dropped on receipt.
        for b in (a.client, z.client):
            assert b.get_port_stats("m").inc.dropped == 0
            assert "tx_ring_full=" in _details(b, "m")


def test_memif_port_bad_arguments(daemon):
    b = daemon.client
    with pytest.raises(BESS.Error) as e:
        b.create_port("MemifPort", "m", {"role": "boss"})
    assert "role 'boss'" in str(e.value)
    with pytest.raises(BESS.Error) as e:
        b.create_port("MemifPort", "m", {"ring_size": 1000})
    assert "power of two" in str(e.value)
    assert b.list_ports() == []


def test_memif_reflect_sample_sends_frames_back(tmp_path):
    """conf/ports/memif_reflect.bess as the server; a client daemon sends, the reflector
    receives everything and sends it back (less what the client's full ring refused,
    counted), and all of that arrives."""
    sock = str(tmp_path / "reflect.sock")
    with running_daemon(tmp_path) as a, running_daemon(tmp_path) as z:
        run_script(ROOT / "conf" / "ports" / "memif_reflect.bess", a.client, {"SOCKET": sock})
        (port,) = a.client.list_ports()
        c = z.client
        c.create_port("MemifPort", "m", {"socket": sock, "role": "client"})
        assert _wait(lambda: c.get_link_status("m").link_up)
        c.create_module("Source", "src", {"pkt_size": 60})
        c.create_module("PortOut", "out", {"port": "m"})
        c.connect_modules("src", "out")
        c.create_module("PortInc", "inc", {"port": "m"})
        c.create_module("Sink", "sink")
        c.connect_modules("inc", "sink")
        c.resume_all()
        assert _wait(lambda: c.get_port_stats("m").inc.packets > 5_000)
        c.pause_all()
        c.destroy_module("src")
        c.resume_all()
        sent = c.get_port_stats("m").out.packets

        def settled() -> bool:
            got, back = a.client.get_port_stats(port.name), c.get_port_stats("m").inc
            return got.inc.packets == sent and back.packets == got.out.packets

        assert _wait(settled, 5)
        out = a.client.get_port_stats(port.name).out
        assert out.packets + out.dropped == sent and out.packets > 5_000
