"""Executors: where a run's trials execute, the local pool (`local.py`) or a Ray cluster
(`ray.py`), and the one entry point that runs a dataset through them, `run()` (`runs.py`)."""

from levelfield.executor.runs import PlanInfo, RunResult, harness_version, run

__all__ = ["PlanInfo", "RunResult", "harness_version", "run"]
