"""How busy the machine was while the soak ran (informational: the audit never relies on it).

The soak is timing-sensitive and shares its cores with other work. When a run goes wrong, these figures
say whether CPU starvation was the likely cause: the load average, and Linux's CPU pressure
(``/proc/pressure/cpu``, "some": the share of wall time in which at least one runnable task waited for
a CPU).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

PRESSURE = Path("/proc/pressure/cpu")


def cpu_pressure_total(source: Path = PRESSURE) -> float | None:
    """Microseconds, since boot, in which some runnable task waited for a CPU (None without PSI)."""
    try:
        for line in source.read_text().splitlines():
            if line.startswith("some "):
                fields = dict(part.split("=", 1) for part in line.split()[1:])
                return float(fields["total"])
    except (OSError, KeyError, ValueError):
        return None
    return None


class MachineLoad:
    """Samples the 1-minute load average; measures CPU pressure between construction and ``summary``."""

    def __init__(self) -> None:
        self.loads: list[float] = []
        self._started = time.monotonic()
        self._pressure0 = cpu_pressure_total()

    def sample(self) -> float:
        load = os.getloadavg()[0]
        self.loads.append(load)
        return load

    def pressure_percent(self) -> float | None:
        now = cpu_pressure_total()
        elapsed = time.monotonic() - self._started
        if now is None or self._pressure0 is None or elapsed <= 0:
            return None
        return min(100.0, (now - self._pressure0) / 1e6 / elapsed * 100)

    def summary(self) -> str:
        if not self.loads:
            self.sample()
        pressure = self.pressure_percent()
        return (
            f"machine: {os.cpu_count()} cores; load average during the run min {min(self.loads):.1f} "
            f"median {statistics.median(self.loads):.1f} max {max(self.loads):.1f}"
            + (f"; CPU pressure (some) {pressure:.0f}% of the run" if pressure is not None else "")
        )
