"""A real Kubernetes control plane on loopback for the deploy tests, as Kubernetes' own
envtest runs one: etcd and kube-apiserver (built from the Go module proxy by
scripts/k8s-cache.sh into ~/.cache/bessemer/k8s) with certificates made here, an admin
token, and kubectl and helm pointed at it. Nothing listens beyond 127.0.0.1 and everything
lives in one temporary folder, removed at the end."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

K8S_CACHE = Path(os.environ.get("BESSEMER_K8S_CACHE", Path.home() / ".cache/bessemer/k8s"))
BIN = K8S_CACHE / "bin"
NEEDED = ("etcd", "kube-apiserver", "kubectl", "helm")


def missing() -> str | None:
    """Why the control plane cannot run here, or None."""
    absent = [b for b in NEEDED if not (BIN / b).exists()]
    if absent:
        return f"{', '.join(absent)} not built in {BIN} (make k8s-cache builds them)"
    if shutil.which("openssl") is None:
        return "openssl is missing"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d: Path) -> None:
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=bessemer-test-ca",
        cwd=d,
    )


def make_cert(d: Path, name: str, cn: str, sans: str, usage: str = "serverAuth") -> None:
    """name.crt/name.key signed by d/ca.*, with subjectAltName `sans`."""
    (d / f"{name}.ext").write_text(f"subjectAltName={sans}\nextendedKeyUsage={usage}\n")
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        f"/CN={cn}",
        cwd=d,
    )
    openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        f"{name}.crt",
        "-days",
        "2",
        "-extfile",
        f"{name}.ext",
        cwd=d,
    )


class ControlPlane:
    """etcd + kube-apiserver on 127.0.0.1; `kubectl(...)`, `helm(...)` and `kubeconfig`."""

    def __init__(self, root: Path):
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.pki = root / "pki"
        self.pki.mkdir(parents=True)
        self.kubeconfig = root / "admin.kubeconfig"
        self.timings: dict[str, float] = {}

    def start(self) -> ControlPlane:
        t0 = time.monotonic()
        make_ca(self.pki)
        make_cert(
            self.pki,
            "apiserver",
            "kube-apiserver",
            "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes.default.svc",
        )
        openssl("genrsa", "-out", "sa.key", "2048", cwd=self.pki)
        openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=self.pki)
        self.token = os.urandom(16).hex()
        (self.pki / "tokens.csv").write_text(f"{self.token},admin,admin,system:masters\n")
        self.timings["certs_s"] = time.monotonic() - t0

        t1 = time.monotonic()
        client, peer, metrics = free_port(), free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                str(BIN / "etcd"),
                "--name",
                "test",
                "--data-dir",
                str(self.root / "etcd"),
                "--listen-client-urls",
                self.etcd_url,
                "--advertise-client-urls",
                self.etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"test=http://127.0.0.1:{peer}",
                "--listen-metrics-urls",
                f"http://127.0.0.1:{metrics}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes",
                str(256 << 20),
            ],
        )
        self.port = free_port()
        p = self.pki
        self._spawn(
            "kube-apiserver",
            [
                str(BIN / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={p}/apiserver.crt",
                f"--tls-private-key-file={p}/apiserver.key",
                f"--client-ca-file={p}/ca.crt",
                f"--token-auth-file={p}/tokens.csv",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={p}/sa.pub",
                f"--service-account-signing-key-file={p}/sa.key",
                "--service-cluster-ip-range=10.0.0.0/24",
                f"--cert-dir={self.root}/apiserver-certs",
                # The only start-up failure on loopback (see shared facts): no endpoint reconciler.
                "--endpoint-reconciler-type=none",
            ],
        )
        self.server = f"https://127.0.0.1:{self.port}"
        self._wait_ready(90)
        self.timings["control_plane_ready_s"] = time.monotonic() - t1
        k = ["--kubeconfig", str(self.kubeconfig)]
        for cmd in (
            [
                "config",
                "set-cluster",
                "local",
                f"--server={self.server}",
                f"--certificate-authority={p}/ca.crt",
                "--embed-certs",
            ],
            ["config", "set-credentials", "admin", f"--token={self.token}"],
            ["config", "set-context", "local", "--cluster=local", "--user=admin"],
            ["config", "use-context", "local"],
        ):
            subprocess.run([str(BIN / "kubectl"), *k, *cmd], check=True, capture_output=True)
        return self

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))

    def _wait_ready(self, secs: float) -> None:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        end = time.monotonic() + secs
        last = ""
        while time.monotonic() < end:
            for pr in self.procs:
                if pr.poll() is not None:
                    raise RuntimeError(f"{pr.args[0]} exited {pr.returncode}: {self.logs()}")
            try:
                req = urllib.request.Request(f"{self.server}/readyz")
                req.add_header("Authorization", f"Bearer {self.token}")
                with urllib.request.urlopen(req, context=ctx, timeout=2) as r:
                    if r.read() == b"ok":
                        return
            except Exception as exc:  # noqa: BLE001 - not up yet
                last = str(exc)
            time.sleep(0.3)
        raise RuntimeError(f"kube-apiserver not ready in {secs} s ({last}): {self.logs()}")

    def logs(self) -> str:
        out = []
        for f in sorted(self.root.glob("*.log")):
            out.append(
                f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:])
            )
        return "\n".join(out)

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [str(BIN / "kubectl"), *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
        )
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {r.stderr}")
        return r

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def helm(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        env = self.env() | {
            "HELM_CACHE_HOME": str(self.root / "helm/cache"),
            "HELM_CONFIG_HOME": str(self.root / "helm/config"),
            "HELM_DATA_HOME": str(self.root / "helm/data"),
        }
        r = subprocess.run(
            [str(BIN / "helm"), *args], capture_output=True, text=True, env=env, timeout=timeout
        )
        if check and r.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}: {r.stdout}\n{r.stderr}")
        return r

    def stop(self) -> None:
        for pr in reversed(self.procs):
            if pr.poll() is None:
                pr.terminate()
                try:
                    pr.wait(10)
                except subprocess.TimeoutExpired:
                    pr.kill()
                    pr.wait(5)
