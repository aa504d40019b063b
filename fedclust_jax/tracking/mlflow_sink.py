"""MLflow: one MLflow run per logged run, through ``MlflowClient`` (no global active run, so
a sweep call's points are logged side by side).

Store: the sink's URI, else $MLFLOW_TRACKING_URI, else the SQLite file ``mlflow.db`` in the
working folder (``mlflow ui`` run there shows it; no server needed). Experiment:
$MLFLOW_EXPERIMENT_NAME, else ``fedclust_jax``. Parameters at the start (values longer
than MLflow takes are cut), metrics at step = rounds done, the summary as metrics at the
last step; the run ends FINISHED, or KILLED when interrupted (a resume sets it running
again).
"""

from __future__ import annotations

import logging
import os
import time

EXPERIMENT = "fedclust_jax"
MAX_PARAM = 6000        # characters MLflow keeps of a parameter value


def default_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or \
        "sqlite:///" + os.path.abspath("mlflow.db")


class MLflowRun:
    """One logged run (``tracking.Sink`` handle)."""

    def __init__(self, uri: str | None, run):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient
        for name in ("mlflow", "alembic"):      # the store's set-up messages stay quiet
            logging.getLogger(name).setLevel(logging.WARNING)
        resume = run.resume or {}
        self.uri = resume.get("uri") or uri or default_uri()
        self.client = MlflowClient(tracking_uri=self.uri)
        self.last = int(resume.get("step", 0))
        if resume.get("run_id"):
            self.run_id = resume["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        found = self.client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else self.client.create_experiment(name)
        tags = {"fedclust_jax.label": run.name}
        if run.group:
            tags["group"] = run.group
        self.run_id = self.client.create_run(experiment, run_name=run.name,
                                             tags=tags).info.run_id
        params = [Param(k, str(v)[:MAX_PARAM]) for k, v in run.params.items()]
        for i in range(0, len(params), 100):    # MLflow takes 100 parameters a batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def state(self) -> dict:
        return {"uri": self.uri, "run_id": self.run_id, "step": self.last}

    def log(self, step: int, values: dict):
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, int(step)) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])
        self.last = max(self.last, int(step))

    def summary(self, values: dict):
        if values:
            self.log(self.last, values)

    def flush(self):
        pass

    def close(self, status: str):
        self.client.set_terminated(self.run_id, {"finished": "FINISHED",
                                                 "interrupted": "KILLED"}.get(status, "FAILED"))
