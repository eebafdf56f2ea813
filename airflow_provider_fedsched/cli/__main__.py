"""``python -m airflow_provider_fedsched.cli``: the ``fedsched`` command without its console script."""

import sys

from airflow_provider_fedsched.cli import main

sys.exit(main())
