"""Airflow triggers of the federation provider."""
