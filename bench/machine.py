"""Machine and process facts shared by the benchmarks (CPU, load, RSS, package versions)."""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def python_speed_ms() -> float:
    """Milliseconds this interpreter takes for a plain 3-million-step loop in a function (best of
    three): every Python-bound number (transports, the model's tokenizer, Django) moves with the
    host's speed, so results carry it to be compared across runs and hosts."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for step in range(3_000_000):
            total += step
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def proc_status_mib(key: str) -> float | None:
    """A ``/proc/self/status`` field (VmRSS, VmHWM, ...) in MiB, or None if it cannot be read."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def mapped_file_rss_mib(top: int = 8) -> dict[str, float]:
    """Resident MiB of this process's largest file mappings (``/proc/self/smaps``), by file name:
    what a process that maps index snapshots has actually touched."""
    sizes: dict[str, float] = {}
    current: str | None = None
    try:
        for line in Path("/proc/self/smaps").read_text().splitlines():
            head = line.split()
            if head and "-" in head[0] and len(head) >= 6 and head[5].startswith("/"):
                current = Path(head[5]).name
            elif head and "-" in head[0]:
                current = None
            elif current is not None and head[:1] == ["Rss:"]:
                sizes[current] = sizes.get(current, 0.0) + int(head[1]) / 1024
    except (OSError, ValueError, IndexError):
        return {}
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:top]
    return {name: round(mib, 1) for name, mib in largest}


@dataclass(frozen=True)
class MemorySnapshot:
    rss_mib: float | None
    hwm_mib: float | None


def memory_snapshot() -> MemorySnapshot:
    return MemorySnapshot(rss_mib=proc_status_mib("VmRSS"), hwm_mib=proc_status_mib("VmHWM"))


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"
