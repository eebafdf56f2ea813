"""``fedsched sim``: run or disturb the simulated federation (its subcommands live in ``sim/cli.py``)."""

from __future__ import annotations

from airflow_provider_fedsched.sim.cli import add_parser

__all__ = ["add_parser"]
