"""Machine and process facts shared by the benchmarks (CPU, load, RSS, package versions)."""
from __future__ import annotations

import os
import platform
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
