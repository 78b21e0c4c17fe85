"""The top costs in a py-spy profile (`py-spy record --format raw`: one line per distinct stack,
frames root first separated by ';', then the number of samples).

Self: samples whose innermost frame is the function. Inclusive: samples with the function
anywhere on the stack (counted once per sample). Both as a share of all samples, which are
samples of threads on the CPU (py-spy leaves idle threads out unless asked).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def function_of(frame: str) -> str:
    found = FRAME.match(frame.strip())
    if found is None:
        return frame.strip()
    path = found["file"]
    for marker in ("site-packages/", "/lib/python3.11/", "/wt-bench/", "/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{found['function']} ({path})"


def top_costs(raw: Path, limit: int = 15) -> dict[str, Any]:
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [function_of(f) for f in stack.split(";") if f]
        # The first frame is the thread ("process 123:\"python ...\"" or "thread (0x...)").
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        self_time[frames[-1]] += count
        for function in set(frames):
            inclusive[function] += count

    def share(samples: int) -> float:
        return round(100 * samples / total, 1) if total else 0.0

    return {
        "samples": total,
        "self_percent": [[f, share(n)] for f, n in self_time.most_common(limit)],
        "inclusive_percent": [[f, share(n)] for f, n in inclusive.most_common(limit * 2)],
    }
