"""Airflow operators of the federation provider."""
