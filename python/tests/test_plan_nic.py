"""The NIC planner served by the daemon (`PlanNic`): the `bessemer plan-nic` command, the
client call and scripts answer as the standalone `bessemer-planner` tool does."""

from __future__ import annotations

import re
import subprocess

import pytest

from bessemer.client import BESS

from .conftest import ROOT
from .test_cli import cli


def planner_binary():
    path = ROOT / "target" / "debug" / "bessemer-planner"
    if not path.exists():
        subprocess.run(
            ["cargo", "build", "-q", "-p", "bessemer-planner", "--bin", "bessemer-planner"],
            cwd=ROOT,
            check=True,
            timeout=900,
        )
    return path


def without_timing(text: str) -> str:
    return re.sub(r"search took [0-9.]+ ms", "search took _ ms", text)


PLAN = ["--nic", "82599", "--policy", "isolation", "--generate", "12", "--hp-every", "4"]


def test_plan_nic_answers_as_the_standalone_planner(daemon):
    ours = cli(daemon.port, "plan-nic", "plan", *PLAN, "--rss-off")
    assert ours.returncode == 0, ours.stderr
    tool = subprocess.run(
        [str(planner_binary()), "plan", *PLAN, "--rss-off"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tool.returncode == 0, tool.stderr
    assert without_timing(ours.stdout) == without_timing(tool.stdout)
    # The report a user reads: the verdict, the filters, each queue's pruned pipeline.
    assert "verdict: Accept" in ours.stdout, ours.stdout
    assert "per-queue pipelines:" in ours.stdout and "queue Q1:" in ours.stdout
    assert "(default queue: never pruned)" in ours.stdout


def test_plan_nic_show_and_graphviz(daemon):
    show = cli(daemon.port, "plan-nic", "show", "--nic", "sfc9020", "--queues", "3")
    assert show.returncode == 0, show.stderr
    assert "NIC model sfc9020 (3 queues)" in show.stdout and "Csfwild" in show.stdout
    dot = cli(daemon.port, "plan-nic", "plan", *PLAN, "--dot")
    assert dot.returncode == 0, dot.stderr
    assert dot.stdout.startswith("digraph") and "pipeline on Q0" in dot.stdout


def test_plan_nic_flow_file_and_errors(daemon, tmp_path):
    flows = tmp_path / "flows"
    flows.write_text("udp 10.0.0.5:4000 10.0.0.1:53 hp\nudp 10.0.0.6:4000 10.0.0.1:80\n")
    ok = cli(daemon.port, "plan-nic", "plan", "--flows", str(flows), "--policy", "isolation")
    assert ok.returncode == 0, ok.stderr
    assert "2 flows" in ok.stdout and "udp 10.0.0.5:4000 -> 10.0.0.1:53 hp" in ok.stdout
    flows.write_text("udp 10.0.0.5:4000 10.0.0.1:53\nicmp 10.0.0.5:1 10.0.0.1:1\n")
    bad = cli(daemon.port, "plan-nic", "plan", "--flows", str(flows))
    assert bad.returncode == 1 and "flows line 2" in bad.stderr and "icmp" in bad.stderr
    assert "Traceback" not in bad.stderr
    no_iface = cli(daemon.port, "plan-nic", "show", "--nic", "ethtool")
    assert no_iface.returncode == 1 and "needs --iface" in no_iface.stderr
    nothing = cli(daemon.port, "plan-nic", "plan")
    assert nothing.returncode == 1 and "--generate N" in nothing.stderr
    with pytest.raises(BESS.Error, match="unknown policy"):
        daemon.client.plan_nic(policy="fastest", generate=3)
    with pytest.raises(BESS.Error, match="format"):
        daemon.client.plan_nic(fmt="pdf", generate=3)
    # The daemon is still there and answers.
    assert "NIC model 82599" in daemon.client.plan_nic(fmt="show")


def test_a_script_asks_the_planner(daemon, tmp_path):
    script = tmp_path / "plan.bess"
    script.write_text(
        "text = bess.plan_nic('82599', generate=8, policy='balance', queues=2)\n"
        "assert 'flow map:' in text, text\n"
        "print(text.splitlines()[1])\n"
    )
    r = cli(daemon.port, "run", str(script))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("verdict:"), r.stdout


SAMPLE = ROOT / "conf" / "planner" / "nic_plan.bess"


def test_plan_nic_specialises_the_pipeline_behind_a_port(daemon, tmp_path):
    # The sample builds the pipeline and prints the plan for the capture's flows.
    r = cli(daemon.port, "run", str(SAMPLE), f"OUT={tmp_path / 'out.pcap'}")
    assert r.returncode == 0, r.stderr
    assert "policy isolation" in r.stdout and "queue Q1:" in r.stdout, r.stdout
    flows = tmp_path / "flows"
    flows.write_text(
        "udp 10.0.0.1:1234 10.0.0.2:5678 hp\n"
        "udp 10.0.0.1:1234 10.0.0.2:5679\n"
        "udp 10.0.0.1:1234 10.0.0.2:5680\n"
    )
    args = ["--flows", str(flows), "--policy", "isolation", "--queues", "2", "--rss-off"]
    r = cli(daemon.port, "plan-nic", "plan", "--for-port", "nic_plan_p0", *args)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    q0, q1 = out.split("queue Q0:")[1].split("queue Q1:")
    # The running modules, by their names; Q0 (the HP queue) keeps everything (default
    # queue); Q1 carries only best-effort flows, so the HP rule and the ExactMatch behind
    # it are pruned from its copy.
    assert "(default queue: never pruned)" in q0 and "[1] em ExactMatch" in q0, q0
    assert "proto=udp & dport=5678 -> em" in q0, q0
    assert "1 modules removed" in q1 and "[1] (pruned)" in q1 and "5678" not in q1, q1
    assert "dport=5679 -> drop" in q1, q1
    # The demonstration pipeline is not what was specialised.
    assert "services" not in out and "by_port" not in out
    # Bad input is named and the daemon goes on.
    bad = cli(daemon.port, "plan-nic", "plan", "--for-port", "nosuch", *args)
    assert bad.returncode == 1 and "nosuch" in bad.stderr, bad.stderr
    nic = cli(
        daemon.port, "plan-nic", "plan", "--for-port", "nic_plan_p0", "--nic", "ethtool", *args
    )
    assert nic.returncode == 1 and "has no interface to read" in nic.stderr, nic.stderr
    assert cli(daemon.port, "show", "status").returncode == 0
