"""The chart and the controller on a real Kubernetes control plane (etcd + kube-apiserver on
127.0.0.1, see k8s_harness.py): helm lint/template/install; then three "nodes" (bessemerd in
their own network namespaces, TLS + token on their control port, registered as Node objects)
driven by bessemer-controller through BessemerPipeline resources: create, update (kept,
refused and invalid), a daemon killed and restarted, a node relabelled and one deleted, the
resource deleted, and VXLAN between two nodes made of the pipeline's own modules. Every
outcome is checked on the daemons themselves (their modules, edges, counters) as well as in
the resource's status. Tests run in file order on one cluster."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from bessemer.client import BESS

from . import k8s_harness
from .conftest import ROOT, ROOT_ONLY, daemon_binary, send_and_capture, sh

CHART = ROOT / "deploy/helm/bessemer"
SAMPLES = ROOT / "deploy/samples"
NODE_NAMES = ("node-a", "node-b", "node-c")


def load_yaml(plane, text: str) -> list[dict]:
    """The objects of a YAML stream, read by kubectl (client-side, no PyYAML needed)."""
    text = plane.kubectl("create", "--dry-run=client", "-o", "json", "-f", "-", input=text).stdout
    dec, objs, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        obj, i = dec.raw_decode(text, i)
        objs.extend(obj["items"] if obj.get("kind") == "List" else [obj])
    return objs


def wait_for(fn, secs: float, what: str, every: float = 0.25):
    """fn()'s first truthy answer within `secs` seconds, else a failure naming `what`."""
    end = time.monotonic() + secs
    last = None
    while time.monotonic() < end:
        try:
            last = fn()
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {secs} s (last: {last!r})")


def controller_binary() -> Path:
    env = os.environ.get("BESSEMER_CONTROLLER")
    if env:
        return Path(env)
    path = ROOT / "target/debug/bessemer-controller"
    if not path.exists():
        subprocess.run(
            ["cargo", "build", "-q", "-p", "bessemer-controller"],
            cwd=ROOT,
            check=True,
            timeout=1800,
        )
    return path


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    why = k8s_harness.missing()
    if why:
        pytest.skip(why)
    cp = k8s_harness.ControlPlane(tmp_path_factory.mktemp("k8s"))
    try:
        cp.start()
        print(f"control plane up: {cp.timings}")
        yield cp
    finally:
        cp.stop()


def test_chart_lints_templates_and_installs(plane):
    for extra in ([], ["-f", str(CHART / "values-upf.yaml")]):
        plane.helm("lint", "--strict", str(CHART), *extra)
    out = plane.helm("template", "rel", str(CHART)).stdout
    docs = load_yaml(plane, out)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Service",
            "DaemonSet",
            "Deployment",
        ]
    ), kinds
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    daemon = pod["containers"][0]
    assert pod["hostNetwork"] is True
    assert daemon["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert daemon["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert set(daemon["securityContext"]["capabilities"]["add"]) >= {
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
    }
    assert daemon["resources"]["requests"] == daemon["resources"]["limits"]  # Guaranteed QoS
    assert "--no-hugepages" in daemon["args"]
    upf = load_yaml(
        plane,
        plane.helm("template", "upf", str(CHART), "-f", str(CHART / "values-upf.yaml")).stdout,
    )
    upf_ds = next(d for d in upf if d["kind"] == "DaemonSet")["spec"]["template"]
    names = [c["name"] for c in upf_ds["spec"]["containers"]]
    assert names == ["bessemerd", "pipeline", "pfcpiface"], names
    assert upf_ds["spec"]["containers"][0]["resources"]["limits"]["hugepages-1Gi"] == "2Gi"
    assert "access-net" in upf_ds["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
    env = {e["name"]: e.get("value") for e in upf_ds["spec"]["containers"][1]["env"]}
    assert env["BESSEMER_PIPELINE"] == "/usr/share/bessemer/conf/upf/upf.bess"
    assert env["PIPELINE_ENV_UPF_MODE"] == "af_packet"
    assert any(d["kind"] == "ConfigMap" and "upf.jsonc" in d["data"] for d in upf)

    # The chart's CRD is what the controller generates from its types.
    gen = subprocess.run(
        [str(controller_binary()), "crd"], capture_output=True, text=True, check=True
    ).stdout
    assert (CHART / "crds/bessemerpipelines.yaml").read_text() == gen, (
        "deploy/helm/bessemer/crds/bessemerpipelines.yaml is stale: "
        "bessemer-controller crd > deploy/helm/bessemer/crds/bessemerpipelines.yaml"
    )

    # Installed for real (CRD, DaemonSet, controller, ...), and the UPF profile checked by
    # the API server (server-side dry run).
    plane.helm(
        "install",
        "bessemer",
        str(CHART),
        "-n",
        "bessemer-system",
        "--create-namespace",
        "--set",
        "pipeline.enabled=true",
        "--set",
        "pipeline.file=/usr/share/bessemer/conf/demo.bess",
    )
    plane.kubectl(
        "wait", "--for=condition=Established", "crd/bessemerpipelines.bessemer.io", "--timeout=30s"
    )
    got = plane.get("ds,deploy,svc,cm", "-n", "bessemer-system")["items"]
    assert sorted((i["kind"], i["metadata"]["name"]) for i in got) >= sorted(
        [
            ("ConfigMap", "bessemer-loader"),
            ("DaemonSet", "bessemer"),
            ("Deployment", "bessemer-controller"),
            ("Service", "bessemer-metrics"),
        ]
    ), got
    plane.kubectl("create", "namespace", "upf")
    plane.helm(
        "install",
        "upf",
        str(CHART),
        "-n",
        "upf",
        "-f",
        str(CHART / "values-upf.yaml"),
        "--dry-run=server",
    )
    # Bad input to the CRD's schema is refused by the API server.
    bad = {
        "apiVersion": "bessemer.io/v1alpha1",
        "kind": "BessemerPipeline",
        "metadata": {"name": "bad"},
        "spec": {"graph": {"modules": [{"name": "x"}]}},
    }
    r = plane.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert r.returncode != 0 and "class" in r.stderr, r.stderr


class Nodes:
    """Three nodes: namespaces joined by a bridge (10.251.0.0/24, the root namespace at .1),
    each with bessemerd on its eth0 address behind TLS and a token; node-a and node-b also
    have an access interface acc0 whose other end is in a host namespace (for traffic)."""

    def __init__(self, root: Path):
        self.root = root
        self.tag = uuid.uuid4().hex[:5]
        self.lan = f"bkl{self.tag}"
        self.ctl = f"bkc{self.tag}"
        self.ns = {n: f"bk{i}{self.tag}" for i, n in enumerate(NODE_NAMES)}
        self.hosts = {n: f"bkh{i}{self.tag}" for i, n in enumerate(NODE_NAMES[:2])}
        self.ip = {n: f"10.251.0.{11 + i}" for i, n in enumerate(NODE_NAMES)}
        self.mac = {n: f"02:00:00:00:0a:{1 + i:02x}" for i, n in enumerate(NODE_NAMES)}
        self.procs: dict[str, subprocess.Popen] = {}
        self.pki = root / "pki"
        self.pki.mkdir()

    def ip_(self, *args: str) -> None:
        r = sh("ip", *args)
        assert r.returncode == 0, f"ip {' '.join(args)}: {r.stderr}"

    def up(self) -> Nodes:
        k8s_harness.make_ca(self.pki)
        sans = ",".join(f"IP:{ip}" for ip in self.ip.values()) + ",DNS:bessemerd"
        k8s_harness.make_cert(self.pki, "daemon", "bessemerd", sans)
        self.token = self.pki / "token"
        self.token.write_text(uuid.uuid4().hex + "\n")
        for ns in [self.lan, *self.ns.values(), *self.hosts.values()]:
            self.ip_("netns", "add", ns)
            self.ip_("-n", ns, "link", "set", "lo", "up")
        self.ip_("-n", self.lan, "link", "add", "br0", "type", "bridge")
        self.ip_("-n", self.lan, "link", "set", "br0", "up")
        self.ip_("link", "add", self.ctl, "type", "veth", "peer", "name", "c0", "netns", self.lan)
        self.ip_("addr", "add", "10.251.0.1/24", "dev", self.ctl)
        self.ip_("link", "set", self.ctl, "up")
        self.ip_("-n", self.lan, "link", "set", "c0", "master", "br0", "up")
        for i, (node, ns) in enumerate(self.ns.items()):
            self.ip_(
                "-n",
                self.lan,
                "link",
                "add",
                f"p{i}",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                ns,
            )
            self.ip_("-n", self.lan, "link", "set", f"p{i}", "master", "br0", "up")
            self.ip_("-n", ns, "link", "set", "eth0", "address", self.mac[node])
            self.ip_("-n", ns, "addr", "add", f"{self.ip[node]}/24", "dev", "eth0")
            self.ip_("-n", ns, "link", "set", "eth0", "up")
            if node in self.hosts:
                self.ip_(
                    "-n",
                    ns,
                    "link",
                    "add",
                    "acc0",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "h0",
                    "netns",
                    self.hosts[node],
                )
                self.ip_("-n", ns, "link", "set", "acc0", "up")
                self.ip_("-n", self.hosts[node], "link", "set", "h0", "up")
            self.start(node)
        return self

    def start(self, node: str) -> None:
        log = self.root / f"{node}.log"
        cmd = [
            "ip",
            "netns",
            "exec",
            self.ns[node],
            str(daemon_binary()),
            "--bind",
            self.ip[node],
            "--port",
            "10514",
            "--tls-cert",
            str(self.pki / "daemon.crt"),
            "--tls-key",
            str(self.pki / "daemon.key"),
            "--token-file",
            str(self.token),
            "--no-hugepages",
            "--no-pin",
            "--buffers",
            "4096",
            "--idle-sleep-max-us",
            "2000",
            "--log-file",
            str(log),
        ]
        self.procs[node] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(lambda: self.client(node).get_version(), 30, f"bessemerd on {node}")

    def kill(self, node: str) -> None:
        p = self.procs[node]
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def client(self, node: str) -> BESS:
        return BESS(
            self.ip[node],
            10514,
            timeout=5,
            tls_ca=str(self.pki / "ca.crt"),
            token=self.token.read_text().strip(),
        )

    def modules(self, node: str) -> dict[str, str]:
        b = self.client(node)
        try:
            return {m.name: m.desc for m in b.list_modules()}
        finally:
            b.close()

    def edges(self, node: str, names) -> set[tuple[str, int, str, int]]:
        b = self.client(node)
        try:
            return {
                (n, og.ogate, og.name, og.igate)
                for n in names
                for og in b.get_module_info(n).ogates
                if og.name
            }
        finally:
            b.close()

    def down(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        sh("ip", "link", "del", self.ctl)
        for ns in [*self.hosts.values(), *self.ns.values(), self.lan]:
            sh("ip", "netns", "del", ns)


@pytest.fixture(scope="module")
def nodes(plane, tmp_path_factory):
    if os.geteuid() != 0 or sh("ip", "-V").returncode != 0:
        pytest.skip("needs root and iproute2 (network namespaces)")
    ns = Nodes(tmp_path_factory.mktemp("nodes"))
    try:
        ns.up()
        for node, ip in ns.ip.items():
            labels = {"kubernetes.io/hostname": node}
            if node != "node-c":
                labels |= {"bessemer.io/role": "dataplane", "bessemer.io/overlay": "true"}
            obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}
            plane.kubectl("apply", "-f", "-", input=json.dumps(obj))
            status = {
                "status": {
                    "addresses": [
                        {"type": "InternalIP", "address": ip},
                        {"type": "Hostname", "address": node},
                    ]
                }
            }
            plane.kubectl(
                "patch",
                "node",
                node,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps(status),
            )
        yield ns
    finally:
        ns.down()


@pytest.fixture(scope="module")
def controller(plane, nodes, tmp_path_factory):
    log = tmp_path_factory.mktemp("controller") / "controller.log"
    cmd = [
        str(controller_binary()),
        "run",
        "--resync-secs",
        "1",
        "--timeout-secs",
        "3",
        "--tls-ca",
        str(nodes.pki / "ca.crt"),
        "--token-file",
        str(nodes.token),
        "--log-level",
        "info,kube=warn",
    ]
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=plane.env())
    try:
        yield log
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
        print(log.read_text()[-4000:])


def pipeline(plane, name: str) -> dict | None:
    r = plane.kubectl("get", "bessemerpipeline", name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def node_status(plane, name: str) -> dict[str, dict]:
    p = pipeline(plane, name) or {}
    return {n["node"]: n for n in p.get("status", {}).get("nodes", [])}


def apply(plane, doc: dict) -> None:
    plane.kubectl("apply", "-f", "-", input=json.dumps(doc))


_marker: dict = {}


def marker(plane) -> dict:
    """deploy/samples/marker.yaml as an object (a fresh copy)."""
    if not _marker:
        _marker.update(load_yaml(plane, (SAMPLES / "marker.yaml").read_text())[0])
    return copy.deepcopy(_marker)


MK = ["mk_in", "mk_tag", "mk_count", "mk_out"]


@ROOT_ONLY
def test_pipeline_applied_to_selected_nodes(plane, nodes, controller):
    apply(plane, marker(plane))
    st = wait_for(
        lambda: (
            (pipeline(plane, "marker") or {}).get("status", {}).get("phase") == "Applied"
            and pipeline(plane, "marker")["status"]
        ),
        30,
        "marker applied",
    )
    assert st["summary"] == "2/2", st
    for node in ("node-a", "node-b"):
        mods = nodes.modules(node)
        assert set(MK) <= set(mods), (node, mods)
        assert mods["mk_count"] == "1 sessions", mods  # the add command ran
        assert nodes.edges(node, MK) == {
            ("mk_in", 0, "mk_tag", 0),
            ("mk_tag", 0, "mk_count", 0),
            ("mk_count", 0, "mk_out", 0),
        }
        rec = node_status(plane, "marker")[node]
        assert rec["phase"] == "Applied" and rec["applies"] == 1, rec
        assert rec["address"] == f"{nodes.ip[node]}:10514"
        assert sorted(rec["modules"]) == sorted(MK)
    # Per-node parameters render different graphs (tag 1 and 2).
    ns = node_status(plane, "marker")
    assert ns["node-a"]["appliedHash"] != ns["node-b"]["appliedHash"]
    assert not any(m.startswith("mk_") for m in nodes.modules("node-c")), "node-c is not selected"
    assert "node-c" not in ns


@ROOT_ONLY
def test_update_splices_and_keeps_unchanged_modules(plane, nodes, controller):
    doc = marker(plane)
    g = doc["spec"]["graph"]
    g["modules"].insert(2, {"name": "mk_mid", "class": "Bypass"})
    g["connections"] = [
        {"from": "mk_in", "to": "mk_tag"},
        {"from": "mk_tag", "to": "mk_mid"},
        {"from": "mk_mid", "to": "mk_count"},
        {"from": "mk_count", "to": "mk_out"},
    ]
    apply(plane, doc)
    wait_for(
        lambda: all(
            r.get("applies") == 2 and r["phase"] == "Applied"
            for r in node_status(plane, "marker").values()
        ),
        30,
        "update applied",
    )
    names = [*MK, "mk_mid"]
    for node in ("node-a", "node-b"):
        assert nodes.edges(node, names) == {
            ("mk_in", 0, "mk_tag", 0),
            ("mk_tag", 0, "mk_mid", 0),
            ("mk_mid", 0, "mk_count", 0),
            ("mk_count", 0, "mk_out", 0),
        }
        # mk_count's digest did not change: kept, not made again (its add ran once).
        assert nodes.modules(node)["mk_count"] == "1 sessions"
    log = controller.read_text()
    assert "kept=4" in log, log[-2000:]


@ROOT_ONLY
def test_refused_update_leaves_nodes_as_they_were(plane, nodes, controller):
    before = {n: nodes.edges(n, [*MK, "mk_mid"]) for n in ("node-a", "node-b")}
    doc = marker(plane)
    g = doc["spec"]["graph"]
    g["modules"].append({"name": "mk_extra", "class": "Bypass"})
    # A Sink has no output gate: the daemon refuses the transaction as a whole.
    g["connections"].append({"from": "mk_out", "to": "mk_extra"})
    apply(plane, doc)
    recs = wait_for(
        lambda: (
            (r := node_status(plane, "marker"))
            and all(x["phase"] == "Failed" for x in r.values())
            and r
        ),
        30,
        "refusal reported",
    )
    for node, rec in recs.items():
        assert "mk_out" in rec["message"] or "gate" in rec["message"], rec
        mods = nodes.modules(node)
        assert "mk_extra" not in mods and "mk_mid" in mods, mods  # nothing half-applied
        assert nodes.edges(node, [*MK, "mk_mid"]) == before[node]
    assert pipeline(plane, "marker")["status"]["phase"] == "Degraded"

    # An argument the class's message lacks is caught before any daemon is asked.
    doc = marker(plane)
    doc["spec"]["graph"]["modules"][1]["arg"] = {
        "attrs": [{"name": "mk_id", "size": 4, "nosuch": 1}]
    }
    apply(plane, doc)
    recs = wait_for(
        lambda: (
            (r := node_status(plane, "marker"))
            and all(x["phase"] == "Invalid" for x in r.values())
            and r
        ),
        30,
        "invalid graph reported",
    )
    assert all("nosuch" in r["message"] for r in recs.values()), recs
    assert "mk_mid" in nodes.modules("node-a")

    # Back to the sample: applied again everywhere.
    apply(plane, marker(plane))
    wait_for(lambda: pipeline(plane, "marker")["status"]["phase"] == "Applied", 30, "recovered")
    assert "mk_mid" not in nodes.modules("node-a")
    assert nodes.edges("node-a", MK) == {
        ("mk_in", 0, "mk_tag", 0),
        ("mk_tag", 0, "mk_count", 0),
        ("mk_count", 0, "mk_out", 0),
    }


@ROOT_ONLY
def test_restarted_daemon_gets_its_pipeline_back(plane, nodes, controller):
    applies = node_status(plane, "marker")["node-a"]["applies"]
    nodes.kill("node-a")
    nodes.start("node-a")
    wait_for(lambda: set(MK) <= set(nodes.modules("node-a")), 30, "pipeline back on node-a")
    assert nodes.modules("node-a")["mk_count"] == "1 sessions"
    wait_for(
        lambda: node_status(plane, "marker")["node-a"]["applies"] == applies + 1,
        15,
        "re-application counted",
    )


@ROOT_ONLY
def test_removed_nodes_lose_the_pipeline(plane, nodes, controller):
    # Relabelled: no longer selected, its daemon is cleaned.
    plane.kubectl("label", "node", "node-b", "bessemer.io/role-")
    wait_for(
        lambda: not any(m.startswith("mk_") for m in nodes.modules("node-b")),
        30,
        "marker removed from node-b",
    )
    wait_for(lambda: "node-b" not in node_status(plane, "marker"), 15, "node-b out of the status")
    assert pipeline(plane, "marker")["status"]["summary"] == "1/1"
    # Deleted: out of the status (its daemon, still up here, is cleaned too).
    plane.kubectl("delete", "node", "node-a")
    wait_for(lambda: not node_status(plane, "marker"), 30, "node-a out of the status")
    assert not any(m.startswith("mk_") for m in nodes.modules("node-a"))
    assert pipeline(plane, "marker")["status"]["phase"] == "Pending"
    # Both come back: applied again.
    plane.kubectl("label", "node", "node-b", "bessemer.io/role=dataplane")
    obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "node-a",
            "labels": {"bessemer.io/role": "dataplane", "bessemer.io/overlay": "true"},
        },
    }
    apply(plane, obj)
    plane.kubectl(
        "patch",
        "node",
        "node-a",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {"status": {"addresses": [{"type": "InternalIP", "address": nodes.ip["node-a"]}]}}
        ),
    )
    wait_for(lambda: pipeline(plane, "marker")["status"]["summary"] == "2/2", 30, "2/2 again")
    assert set(MK) <= set(nodes.modules("node-a")) and set(MK) <= set(nodes.modules("node-b"))


@ROOT_ONLY
def test_deleted_pipeline_is_removed_everywhere(plane, nodes, controller):
    plane.kubectl("delete", "bessemerpipeline", "marker", "--wait=false")
    wait_for(lambda: pipeline(plane, "marker") is None, 30, "resource gone (finalizer released)")
    for node in NODE_NAMES:
        assert not any(m.startswith("mk_") for m in nodes.modules(node)), node


@ROOT_ONLY
def test_vxlan_between_two_nodes(plane, nodes, controller):
    doc = load_yaml(plane, (SAMPLES / "vxlan-two-node.yaml").read_text())[0]
    apply(plane, doc)
    st = wait_for(
        lambda: (
            (p := pipeline(plane, "vxlan-overlay"))
            and p.get("status", {}).get("phase") == "Applied"
            and p["status"]
        ),
        30,
        "overlay applied",
    )
    assert st["summary"] == "2/2", st
    ha, hb = nodes.hosts["node-a"], nodes.hosts["node-b"]
    mac_b = json.loads(sh("ip", "-n", hb, "-j", "link", "show", "h0").stdout)[0]["address"]
    mac_a = json.loads(sh("ip", "-n", ha, "-j", "link", "show", "h0").stdout)[0]["address"]
    from scapy.all import IP, UDP, Ether, Raw  # noqa: PLC0415 - scapy is slow to import

    marker = b"bessemer-vxlan-" + uuid.uuid4().hex[:8].encode()
    frames = [
        bytes(
            Ether(src=mac_a, dst=mac_b)
            / IP(src="192.168.77.1", dst="192.168.77.2")
            / UDP(sport=5000 + i, dport=6000)
            / Raw(marker)
        )
        for i in range(5)
    ]
    got = send_and_capture((ha, "h0"), frames, (hb, "h0"), marker, (42,), 10)
    assert len(got) == 5, f"{len(got)} of 5 frames crossed node-a -> VXLAN -> node-b"
    assert sorted(got) == sorted(frames), "frames changed on the way"
    # ...and back, node-b -> node-a.
    back = [
        bytes(
            Ether(src=mac_b, dst=mac_a)
            / IP(src="192.168.77.2", dst="192.168.77.1")
            / UDP(sport=6000, dport=5000)
            / Raw(marker)
        )
    ]
    assert len(send_and_capture((hb, "h0"), back, (ha, "h0"), marker, (42,), 10)) == 1
    # The underlay also carries the controller's own gRPC traffic to each node: VXLANDecap
    # drops it under its reason, and the status summarises drops by reason.
    drops = wait_for(
        lambda: (
            (d := node_status(plane, "vxlan-overlay")["node-b"].get("drops"))
            and d["total"] > 0
            and d
        ),
        20,
        "drops summarised",
    )
    assert any(t["module"] == "vx_decap" and t["reason"] == "not_vxlan" for t in drops["top"]), (
        drops
    )
    plane.kubectl("delete", "bessemerpipeline", "vxlan-overlay")
    wait_for(
        lambda: not any(m.startswith("vx_") for m in nodes.modules("node-a")), 30, "overlay removed"
    )
    b = nodes.client("node-a")
    try:
        assert not [p.name for p in b.list_ports()], "ports removed with the pipeline"
    finally:
        b.close()
