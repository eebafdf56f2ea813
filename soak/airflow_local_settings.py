"""The soak deployment's Airflow local settings (copied to ``$AIRFLOW_HOME/config``).

Every Airflow process imports this module at start-up. It preloads the Kubernetes clients, so that the task
processes forked from the executor's workers share them instead of importing them anew: on the soak's
2-core machine that import costs about 6 s of CPU per task process, and 16 task processes starting at once
then overrun Airflow's DAG import timeout (measured: 120 s). Gunicorn's ``preload_app`` does the same for
web workers. Only libraries that do not import Airflow may be imported here (Airflow is still starting).
"""

import kubernetes.client  # noqa: F401
import kubernetes_asyncio.client  # noqa: F401
