"""The test bed's ports: chosen below the kernel's ephemeral range (testbed/processes.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from airflow_provider_fedsched.testbed.processes import LOWEST_PORT, ephemeral_low, free_port


def test_a_port_for_a_component_is_below_the_range_outgoing_connections_are_given() -> None:
    low = ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST_PORT <= port < low for port in ports), ports
    for port in list(ports)[:3]:  # free: a server binds it
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen()


def test_a_port_taken_by_a_server_is_not_handed_out_again(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        assert busy not in {free_port() for _ in range(200)}


def test_the_ephemeral_range_is_read_from_the_kernel_or_defaults(tmp_path: Path) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t60999\n")
    assert ephemeral_low(ranges) == 40000
    assert ephemeral_low(tmp_path / "missing") == 32768
