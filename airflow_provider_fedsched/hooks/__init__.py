"""Airflow hooks of the federation provider."""
