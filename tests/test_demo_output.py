"""What `make demo` prints of the pods' output: the pods' own lines, without Airflow's log decorations."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_fedsched.demo import pod_lines


def test_pod_lines_keep_what_the_pod_printed_and_drop_the_logger_suffix(tmp_path: Path) -> None:
    log = tmp_path / "airflow.log"
    log.write_text(
        "[2026-12-04T12:00:00Z] {pod_manager.py:508} INFO - [base] loaded 48M user events\n"
        "2026-12-04 12:00:01 [info     ] [base] epoch 1/2 loss=0.71     "
        "[airflow_provider_fedsched.kube.pods.FederatedPodManager] loc=pod_manager.py:508\n"
        "2026-12-04 12:00:02 [info     ] [base] report [draft] written "
        "[airflow.providers.cncf.kubernetes.utils.pod_manager.PodManager]\n"
        "2026-12-04 12:00:03 [info     ] Task instance is in running state\n"
        "[base] train-bert-x: worker ready: 3/3 in the gang\n"
    )
    assert pod_lines(log) == [
        "loaded 48M user events",
        "epoch 1/2 loss=0.71",
        "report [draft] written",
        "train-bert-x: worker ready: 3/3 in the gang",
    ]
