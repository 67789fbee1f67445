"""The two interfaces of conf/upf/upf.bess (access: N3, core: N6 or N9), as the UPF's
conf/ports.py sets them up: each has an input chain that ends in the shared pipeline and an
output chain the pipeline ends in.

In sim mode the input is a generator (Source, Rewrite with one template, SequentialUpdate
spreading the packets over the sessions) and the output a Sink: no NIC, no root. Otherwise
the interface is a port of driver `UPF_DRIVER` (AFPacketPort or AFXDPPort) on the interface
named by the script, read by PortInc and written by PortOut, with the next hop's MAC address
written into every frame that leaves.
"""

from __future__ import annotations


class Interface:
    """One side of the UPF: `inp` is the last module of its input chain, `out` the first of
    its output chain (a Merge, so that several pipeline branches can end in it)."""

    def __init__(self, scope: dict, name: str):
        self.scope = scope
        self.name = name
        self.inp = None
        self.out = None
        self.port = None

    def _m(self, mclass: str, suffix: str, **arg):
        return self.scope[mclass](name=self.name + suffix, **arg)

    def _tail(self, measure: bool, last):
        """Timestamps arriving packets (the Measure before the output reads it)."""
        if measure:
            ts = self._m("Timestamp", "_timestamp", attr_name="timestamp")
            last.connect(ts)
            return ts
        return last

    def _out_head(self, measure: bool, last):
        self.out = self._m("Merge", "_out")
        nxt = self.out
        if measure:
            # Named as the agent reads it: ifName + '_measure'.
            m = self._m("Measure", "_measure", attr_name="timestamp")
            nxt.connect(m)
            nxt = m
        nxt.connect(last)

    def sim(self, template: bytes, seq_fields: list, measure: bool) -> Interface:
        """A generator of `template` packets updated by `seq_fields`, and a Sink."""
        src = self._m("Source", "_src", pkt_size=len(template))
        rw = self._m("Rewrite", "_rewrite", templates=[template])
        seq = self._m("SequentialUpdate", "_seq", fields=seq_fields)
        src.connect(rw)
        rw.connect(seq)
        self.inp = self._tail(measure, seq)
        self._out_head(measure, self._m("Sink", "_sink"))
        return self

    def real(
        self, driver: str, ifname: str, next_hop_mac: str, measure: bool
    ) -> Interface:
        """PortInc and PortOut on a port of `driver` bound to interface `ifname`."""
        self.port = self.scope[driver](name=self.name + "Fast", ifname=ifname)
        inc = self._m("PortInc", "_inc", port=self.port.name)
        self.inp = self._tail(measure, inc)
        out = self._m("PortOut", "_portout", port=self.port.name)
        if next_hop_mac:
            mac = int(next_hop_mac.replace(":", ""), 16)
            own = int(self.port.mac_addr.replace(":", ""), 16)
            upd = self._m(
                "Update",
                "_l2",
                fields=[
                    {"offset": 0, "size": 6, "value": mac},
                    {"offset": 6, "size": 6, "value": own},
                ],
            )
            upd.connect(out)
            out = upd
        self._out_head(measure, out)
        return self
