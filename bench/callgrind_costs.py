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
