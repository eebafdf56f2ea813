"""The soak's machine-load figures: CPU pressure parsed from PSI, load samples summarised."""

from __future__ import annotations

from pathlib import Path

from soak.machine import MachineLoad, cpu_pressure_total


def test_cpu_pressure_total_reads_the_some_line(tmp_path: Path) -> None:
    psi = tmp_path / "cpu"
    psi.write_text(
        "some avg10=96.37 avg60=96.70 avg300=74.55 total=10159275830\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert cpu_pressure_total(psi) == 10159275830.0


def test_cpu_pressure_total_is_none_without_psi(tmp_path: Path) -> None:
    assert cpu_pressure_total(tmp_path / "absent") is None
    garbled = tmp_path / "garbled"
    garbled.write_text("some avg10=1\n")
    assert cpu_pressure_total(garbled) is None


def test_summary_gives_min_median_max_of_the_samples() -> None:
    machine = MachineLoad()
    machine.loads.extend([4.0, 30.0, 12.0])
    line = machine.summary()
    assert "load average during the run min 4.0 median 12.0 max 30.0" in line
    assert line.startswith("machine: ")
