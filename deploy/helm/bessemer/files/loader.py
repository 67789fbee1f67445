"""The pipeline loader beside bessemerd: runs the pipeline script once the daemon answers,
and again whenever the daemon comes back without modules (a restarted container), so every
node keeps its pipeline. Runs from the chart's ConfigMap with the image's Python CLI."""

import os
import subprocess
import sys
import time

sys.path.insert(0, "/usr/lib/bessemer/python")
if not os.access(os.path.expanduser("~"), os.W_OK):
    os.environ.setdefault("XDG_CACHE_HOME", "/usr/lib/bessemer/cache")

from bessemer.client import BESS

port = int(os.environ.get("BESSEMER_PORT", "10514"))
script = os.environ["BESSEMER_PIPELINE"]
every = float(os.environ.get("BESSEMER_CHECK_SECONDS", "5"))
extra = [
    f"{k[len('PIPELINE_ENV_') :]}={v}"
    for k, v in os.environ.items()
    if k.startswith("PIPELINE_ENV_")
]
token = None
if os.path.exists("/etc/bessemer/token/token"):
    token = open("/etc/bessemer/token/token").readline().strip()
while True:
    try:
        bess = BESS("127.0.0.1", port, timeout=5, token=token)
        empty = not bess.list_modules()
        bess.close()
    except Exception as exc:  # noqa: BLE001 - the daemon is starting or restarting
        print(f"loader: daemon not answering yet: {exc}", flush=True)
        time.sleep(1)
        continue
    if empty:
        cmd = ["bessemer", "--host", "127.0.0.1", "--port", str(port)]
        if token:
            cmd += ["--token-file", "/etc/bessemer/token/token"]
        cmd += ["run", script, *extra]
        print(f"loader: daemon has no pipeline; running {script}", flush=True)
        r = subprocess.run(cmd)
        print(f"loader: {script} exited {r.returncode}", flush=True)
    time.sleep(every)
