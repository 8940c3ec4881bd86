"""What this machine is, as a measurement's key names it (``calibration``): the
CPU and its flags, the threads this process may use, the library versions."""

from __future__ import annotations

import hashlib
import os
import platform
from importlib import metadata


def threads() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_identity() -> dict[str, str]:
    """The CPU model and a hash of its flags; /proc/cpuinfo may be hidden (the
    systemd unit's ProcSubset=pid), then what platform tells."""
    model, flags = platform.processor() or platform.machine(), ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model in ("", platform.machine()):
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    return {
        "cpu": model,
        "flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "flags": " ".join(f for f in flags.split() if f.startswith(("amx", "avx512_bf16", "avx2"))),
        # oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 hides AMX) changes speed
        "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
        "threads": str(
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        ),
        "arch": platform.machine(),
    }


def version(package: str) -> str:
    """An installed package's version, or "none"."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"
