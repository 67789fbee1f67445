"""Running the real omec-project UPF pieces against bessemerd in a network namespace: omec's
`bessctl run up4` with omec's own pybess and the sample plugin's stubs, the Go agent
`pfcpiface` (simulated sessions or PFCP), the PFCP client `pfcpsim`/`pfcpctl`, and
`route_control.py`. Built by `scripts/omec-peers.sh` into a cache outside the tree; nothing of
theirs is changed: the tests write only their own copy of the UPF's configuration (the
shipped `conf/upf.jsonc` with the settings an operator would set, e.g. `mode`), as an
operator does, and pass it in `CONF_FILE` / `-config`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .conftest import ROOT, daemon_binary, sh

PROBE = Path(__file__).with_name("upf_probe.py")
PY = ROOT / ".venv" / "bin" / "python"


def peers() -> Path:
    """The cache the peers were built into (built now if needed); raises RuntimeError with
    the build's own message if they cannot be built here."""
    r = subprocess.run(
        [str(ROOT / "scripts" / "omec-peers.sh")],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"scripts/omec-peers.sh failed: {r.stderr.strip()[-800:]}")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("CACHE=")][-1]
    return Path(line.split("=", 1)[1])


def refused_rules(r: subprocess.CompletedProcess) -> list[str]:
    """The log lines in which pfcpiface reports a rule the daemon refused (it logs each and
    goes on, exit status 0; it also logs some ordinary lines at ERROR level, without
    "failed")."""
    return [ln for ln in (r.stdout + r.stderr).splitlines() if "\tERROR\t" in ln and "failed" in ln]


def shipped_config(cache: Path) -> dict:
    """omec-upf's conf/upf.jsonc, read with the parser omec's own code uses (jsoncomment)."""
    src = cache / "bess" / "bessctl" / "conf" / "upf.jsonc"
    code = (
        "import json, sys; from jsoncomment import JsonComment; "
        "print(json.dumps(JsonComment(json).loads(open(sys.argv[1]).read())))"
    )
    r = subprocess.run(
        [str(cache / "venv" / "bin" / "python"), "-c", code, str(src)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(r.stdout)


@dataclass
class Upf:
    """A network namespace holding the UPF host: its access and core interfaces (named as the
    configuration names them), bessemerd on the BESS port, and what the tests start there."""

    cache: Path
    ns: str
    tmp: Path
    conf: dict
    port: int = 10514
    daemon: subprocess.Popen | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)
    others: list[str] = field(default_factory=list)

    @property
    def access(self) -> str:
        return self.conf["access"]["ifname"]

    @property
    def core(self) -> str:
        return self.conf["core"]["ifname"]

    @property
    def conf_file(self) -> Path:
        return self.tmp / "upf.json"

    @property
    def log(self) -> Path:
        return self.tmp / "bessemerd.log"

    def write_conf(self) -> None:
        self.conf_file.write_text(json.dumps(self.conf, indent=1))

    def start_daemon(self, *extra: str, command: list[str] | None = None) -> None:
        """bessemerd (or `command`, e.g. the real bessd) in the namespace on the BESS port."""
        if command is None:
            command = [str(daemon_binary()), "--port", str(self.port), "--no-hugepages"]
            command += ["--buffers", "16384", "--log-file", str(self.log), *extra]
        log = open(self.log, "a")  # noqa: SIM115 - the daemon writes it until close()
        self.daemon = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, *command], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while True:
            r = sh("ip", "netns", "exec", self.ns, str(PY), str(PROBE), str(self.port), "ports")
            if r.returncode == 0:
                return
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                raise RuntimeError(f"bessemerd did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def probe(self, *requests: str) -> dict:
        r = sh("ip", "netns", "exec", self.ns, str(PY), str(PROBE), str(self.port), *requests)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def neighbour(self, role: str, upf_ip: str, peer_ip: str, upf_if: str | None = None) -> str:
        """Another host (namespace) joined to the UPF's by a veth: `upf_if` (default
        `to<role>`) with `upf_ip` on the UPF's side, `eth0` with `peer_ip` on the host's.
        Returns the host's namespace; removed by close()."""
        ns = f"{role}{uuid.uuid4().hex[:6]}"
        self.others.append(ns)
        assert sh("ip", "netns", "add", ns).returncode == 0
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        here = upf_if or f"to{role}"[:15]
        r = sh("ip", "-n", self.ns, "link", "add", here, "type", "veth", "peer", "name", "eth0",
               "netns", ns)  # fmt: skip
        assert r.returncode == 0, r.stderr
        sh("ip", "-n", self.ns, "addr", "add", upf_ip, "dev", here)
        sh("ip", "-n", self.ns, "link", "set", here, "up")
        sh("ip", "-n", ns, "addr", "add", peer_ip, "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        return ns

    def run(
        self,
        *args: str,
        cwd: Path | None = None,
        timeout: float = 300,
        env=None,
        ns: str | None = None,
    ):
        """Runs a command in the namespace (or `ns`); returns the CompletedProcess."""
        e = dict(os.environ)
        e.update(env or {})
        return subprocess.run(
            ["ip", "netns", "exec", ns or self.ns, *args],
            cwd=cwd,
            env=e,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def bessctl(self, *words: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """omec's bessctl, unchanged, in its own PID namespace (up4.bess re-pins every thread
        it can see in /proc) and the UPF's network namespace, with CONF_FILE set, as omec's
        image runs it."""
        bessctl = self.cache / "bess" / "bessctl"
        # bessctl connects to localhost:10514 by itself; another port is named first.
        connect = (
            [] if self.port == 10514 else ["daemon", "connect", f"localhost:{self.port}", "--"]
        )
        return self.run(
            "unshare", "--pid", "--fork", "--mount-proc",
            str(self.cache / "venv" / "bin" / "python"), str(bessctl / "bessctl"),
            *connect, *words,
            cwd=bessctl, timeout=timeout, env={"CONF_FILE": str(self.conf_file)},
        )  # fmt: skip

    def pfcpiface(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return self.run(
            str(self.cache / "bin" / "pfcpiface"), "-config", str(self.conf_file),
            "-bess", f"localhost:{self.port}", *args, cwd=self.tmp, timeout=timeout,
        )  # fmt: skip

    def spawn(
        self, *args: str, log: str, cwd: Path | None = None, ns: str | None = None, env=None
    ) -> subprocess.Popen:
        """Starts a long-running peer in the namespace or `ns` (stopped by close())."""
        f = open(self.tmp / log, "w")  # noqa: SIM115 - closed with the process
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.Popen(
            ["ip", "netns", "exec", ns or self.ns, *args],
            env=e,
            cwd=cwd or self.tmp,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(p)
        return p

    def wait_for_log(self, log: str, text: str, seconds: float = 30) -> None:
        """Waits until the peer writing `log` has logged `text` (e.g. pfcpiface listening)."""
        deadline = time.monotonic() + seconds
        while text not in (self.tmp / log).read_text(errors="replace"):
            assert time.monotonic() < deadline, f"{log}: no '{text}' within {seconds} s"
            time.sleep(0.1)

    def start_n4(self, smf: str, n3_addr: str, upf_n4: str) -> None:
        """pfcpiface serving PFCP here, pfcpsim in the SMF's namespace `smf` configured with
        the UPF's N3 address and N4 peer, and associated."""
        self.spawn(
            str(self.cache / "bin" / "pfcpiface"), "-config", str(self.conf_file),
            log="pfcpiface.log",
        )  # fmt: skip
        self.spawn(str(self.cache / "bin" / "pfcpsim"), "--interface", "eth0", log="pfcpsim.log",
                   ns=smf)  # fmt: skip
        self.wait_for_log("pfcpiface.log", "listening for new PFCP connections")
        self.wait_for_log("pfcpsim.log", "server listening")
        self.pfcpctl(smf, "service", "configure", "--n3-addr", n3_addr, "--remote-peer-addr",
                     upf_n4)  # fmt: skip
        self.pfcpctl(smf, "service", "associate")

    def pfcpctl(self, ns: str, *args: str, server: str = "localhost:54321") -> str:
        """pfcpctl in the SMF's namespace `ns` (where pfcpsim runs)."""
        r = self.run(str(self.cache / "bin" / "pfcpctl"), "-s", server, *args, timeout=120, ns=ns)
        assert r.returncode == 0, f"pfcpctl {' '.join(args)}: {r.stdout}{r.stderr}"
        return r.stdout + r.stderr

    def tables(self) -> dict[str, int]:
        """Rules per table, from each module's desc ("N fields, M rules"), as on BESS."""
        names = ["pdrLookup", "farLookup", "appQERLookup", "sessionQERLookup"]
        got = self.probe(*[f"desc:{n}" for n in names])
        out = {}
        for n in names:
            words = got[f"desc:{n}"].split()
            out[n] = int(words[words.index("rules") - 1])
        return out

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=5)
        if self.daemon and self.daemon.poll() is None:
            self.daemon.terminate()
            try:
                self.daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait(timeout=5)
        sh("ip", "netns", "del", self.ns)
        for ns in self.others:
            sh("ip", "netns", "del", ns)


def upf_host(
    cache: Path,
    tmp: Path,
    conf: dict,
    access_ip: str | None,
    core_ip: str | None,
    command: list[str] | None = None,
    extra: tuple[str, ...] = (),
) -> Upf:
    """A namespace holding bessemerd. With `access_ip` and `core_ip`, the UPF's two
    interfaces are made there too, as veth pairs whose peers stay in the same namespace (sim
    mode only needs the interfaces and their addresses); otherwise the caller joins them to
    other hosts with `neighbour`. `command` runs another daemon instead of bessemerd (the
    real bessd, for benchmarks); `extra` are more bessemerd options (e.g. `--http ADDR`)."""
    ns = f"upf{uuid.uuid4().hex[:6]}"
    u = Upf(cache=cache, ns=ns, tmp=tmp, conf=conf)
    assert sh("ip", "netns", "add", ns).returncode == 0
    try:
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        if access_ip and core_ip:
            for i, (ifname, ip) in enumerate(((u.access, access_ip), (u.core, core_ip))):
                peer = f"peer{i}"
                r = sh("ip", "-n", ns, "link", "add", ifname, "type", "veth", "peer", "name", peer)
                assert r.returncode == 0, r.stderr
                sh("ip", "-n", ns, "addr", "add", ip, "dev", ifname)
                sh("ip", "-n", ns, "link", "set", ifname, "up")
                sh("ip", "-n", ns, "link", "set", peer, "up")
        u.write_conf()
        u.start_daemon(*extra, command=command)
    except BaseException:
        u.close()
        raise
    return u
