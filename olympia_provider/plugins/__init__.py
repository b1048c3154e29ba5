"""Airflow plugins of the Olympia provider."""
