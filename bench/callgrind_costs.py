"""Instruction counts per function from a callgrind output file (for bench/profile*.sh)."""

import re
import subprocess


def costs(path, inclusive):
    """Instructions by function name in callgrind output `path` ("yes": inclusive costs)."""
    txt = subprocess.run(
        [
            "callgrind_annotate",
            f"--inclusive={inclusive}",
            "--auto=no",
            "--threshold=100",
            path,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    fns = {}
    for line in txt.splitlines():
        m = re.match(r"\s*([\d,]+) \([\s\d.]+%\)\s+(.*)", line)
        if m and "PROGRAM TOTALS" not in line:
            key = m.group(2).split(":", 1)[-1].split(" [")[0]
            fns[key] = fns.get(key, 0) + int(m.group(1).replace(",", ""))
    return fns


def call_costs(path, suffix):
    """Instructions spent in calls to functions whose name ends with `suffix`, read from the
    call edges of callgrind output `path` (the cost a caller records for each call, callee
    included). Exact where callgrind_annotate's inclusive figures are not: it splits a
    function by source file, and code inlined from another file can count its calls twice."""
    names = {}
    total = 0
    callee = None
    after_calls = False
    with open(path) as f:
        for line in f:
            if after_calls:
                total += int(line.split()[-1]) if callee and callee.endswith(suffix) else 0
                after_calls = False
                continue
            m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                if m.group(3) is not None:
                    names[m.group(2)] = m.group(3)
                if m.group(1) == "cfn":
                    callee = names.get(m.group(2))
                continue
            if line.startswith("calls="):
                after_calls = True
    return total
