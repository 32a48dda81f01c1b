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


# Instruction sets the engines' speed depends on (numpy's and numba's kernels, usearch's int8 distances,
# the model's matrix products): whether a host has them explains figures that differ between hosts.
FLAGS_THAT_MATTER = ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")


def _cpuinfo_field(name: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":", 1)[0].strip() == name:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_flags() -> list[str]:
    """The CPU's flags among ``FLAGS_THAT_MATTER`` and every ``avx512*`` one, in that order."""
    present = set((_cpuinfo_field("flags") or "").split())
    wanted = [flag for flag in FLAGS_THAT_MATTER if flag in present]
    return wanted + sorted(flag for flag in present if flag.startswith("avx512"))


def cpu_caches() -> dict[str, str]:
    """This CPU's caches, e.g. {"L1d": "32K", "L1i": "32K", "L2": "1024K", "L3": "32768K"} (Linux sysfs;
    an L3 is shared by the cores of its ``shared_cpu_list``)."""
    out: dict[str, str] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        out[f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")] = size
    return out


def cpu_id() -> str:
    """Family, model and stepping: what tells two CPUs apart when a VM names both "AMD EPYC"."""
    fields = [(name, _cpuinfo_field(name)) for name in ("cpu family", "model", "stepping")]
    return ", ".join(f"{name.split()[-1]} {value}" for name, value in fields if value is not None) or "unknown"


def cpu_description() -> dict[str, object]:
    """The CPU as the benchmarks print it beside ``python_loop_3m_ms``: model, id, flags, caches."""
    return {"cpu": cpu_model(), "cpu_id": cpu_id(), "cpu_flags": " ".join(cpu_flags()) or "unknown",
            "cpu_caches": " ".join(f"{name} {size}" for name, size in cpu_caches().items()) or "unknown"}


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


def main() -> None:
    """``python bench/machine.py``: this host as the benchmarks describe it."""
    for key, value in {**cpu_description(), "python_loop_3m_ms": python_speed_ms(), "cpus": usable_cpus(),
                       "load_average": load_average()}.items():
        print(f"{key:<18} {value}")


if __name__ == "__main__":
    main()
