"""Apache Airflow 3 provider that runs pod tasks across a federation of Kubernetes clusters."""

__version__ = "0.1.0"
