"""Fan a shard plan out to a scheduler and back in: a Slurm job array (one task per shard)
with a fan-in job that merges the shards, publishes asv's site and writes the report;
for users without Slurm, a Kubernetes Indexed Job manifest and a CI matrix.

CPU shards ask for a node of their own (``--exclusive``): shards sharing cores disturb
each other's clocks. CUDA shards ask for one GPU each (``--gres=gpu:1``); Slurm sets
``CUDA_VISIBLE_DEVICES`` to it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from mhabench.asvproject.asv_config import write_config
from mhabench.cluster.shard import Plan, ShardError, shard_folder


def _cli(python: str) -> str:
    return f"{shlex.quote(python)} -m mhabench.cli"


def array_script(plan: Plan, plan_path: Path, repo: Path, logs: Path, python: str,
                 run_args: str = "") -> str:
    """The sbatch job array: task K runs shard K (``mhabench shard run``)."""
    resources = ("#SBATCH --gres=gpu:1\n" if plan.devices == "cuda" else
                 "#SBATCH --exclusive  # one CPU shard per node: shared cores disturb clocks\n")
    return (f"#!/bin/bash\n"
            f"#SBATCH --job-name=mhabench-{plan.grid}-{plan.commit[:8]}\n"
            f"#SBATCH --array=0-{len(plan.shards) - 1}\n"
            f"#SBATCH --nodes=1\n#SBATCH --ntasks=1\n"
            f"{resources}"
            f"#SBATCH --chdir={repo}\n"
            f"#SBATCH --output={logs}/shard-%A-%a.log\n"
            f"set -euo pipefail\n"
            f"exec {_cli(python)} shard run {shlex.quote(str(plan_path))} "
            f"\"$SLURM_ARRAY_TASK_ID\"{(' ' + run_args) if run_args else ''}\n")


def fanin_script(plan: Plan, plan_path: Path, repo: Path, logs: Path, python: str,
                 results: Path, publish: Path, reports: Path) -> str:
    """The fan-in job: merge every shard's results into ``results`` (checked against the
    plan), publish asv's site from them (the asv config ``publish``), write a new report
    into ``reports``."""
    shards = " ".join(shlex.quote(str(shard_folder(plan_path, s.index) / "results"))
                      for s in plan.shards)
    report = f"{reports}/report-{plan.commit[:8]}-sharded-$(date -u +%Y%m%dT%H%M%SZ).html"
    return (f"#!/bin/bash\n"
            f"#SBATCH --job-name=mhabench-{plan.grid}-{plan.commit[:8]}-merge\n"
            f"#SBATCH --nodes=1\n#SBATCH --ntasks=1\n"
            f"#SBATCH --chdir={repo}\n"
            f"#SBATCH --output={logs}/merge-%j.log\n"
            f"set -euo pipefail\n"
            f"{_cli(python)} merge --plan {shlex.quote(str(plan_path))} "
            f"--into {shlex.quote(str(results))} {shards}\n"
            f"{shlex.quote(python)} -m asv publish --config {shlex.quote(str(publish))}\n"
            "# plug-ins the shards loaded through ASV_PYTHONPATH, for the report too\n"
            'export PYTHONPATH="${ASV_PYTHONPATH:+$ASV_PYTHONPATH:}${PYTHONPATH:-}"\n'
            f"{_cli(python)} report --results {shlex.quote(str(results))} --out \"{report}\"\n")


def write_slurm(plan: Plan, plan_path: Path, out: Path, *, repo: Path, python: str,
                results: Path, html: Path, reports: Path, run_args: str = ""
                ) -> tuple[Path, Path]:
    """Write the array script to ``out`` and the fan-in beside it (``*-merge.sbatch``,
    with the asv config it publishes ``results`` to ``html`` with); neither may exist
    yet."""
    out = Path(out)
    fanin = out.with_name(out.stem + "-merge" + out.suffix)
    for path in (out, fanin):
        if path.exists():
            raise ShardError(f"{str(path)!r} exists: scripts are never overwritten; choose "
                             "another --out")
    logs = out.resolve().parent / "slurm-logs"
    logs.mkdir(parents=True, exist_ok=True)
    plan_path, repo = Path(plan_path).resolve(), Path(repo).resolve()
    publish = write_config(repo, out.resolve().parent / f"{out.stem}-publish", exist_ok=True,
                           results=results, html=html)
    out.write_text(array_script(plan, plan_path, repo, logs, python, run_args))
    fanin.write_text(fanin_script(plan, plan_path, repo, logs, python, Path(results).resolve(),
                                  publish, Path(reports).resolve()))
    return out, fanin


def submit(array: Path, fanin: Path) -> tuple[str, str]:
    """``sbatch`` the array, then the fan-in after all its tasks succeed; the job ids."""
    def sbatch(*args: str) -> str:
        try:
            done = subprocess.run(["sbatch", "--parsable", *args], capture_output=True,
                                  text=True, timeout=60)
        except FileNotFoundError:
            raise ShardError("sbatch not found: is this a Slurm login node?") from None
        if done.returncode != 0:
            raise ShardError(f"sbatch {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    job = sbatch(str(array))
    return job, sbatch(f"--dependency=afterok:{job}", str(fanin))


def k8s_job(plan: Plan, plan_path: str, image: str) -> dict:
    """A Kubernetes Indexed Job: completion index K runs shard K; the plan at
    ``plan_path`` inside the image, which holds the checkout at the plan's commit."""
    container: dict = {
        "name": "shard", "image": image,
        "command": ["python", "-m", "mhabench.cli", "shard", "run", plan_path,
                    "$(JOB_COMPLETION_INDEX)"],
        "env": [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}],
    }
    if plan.devices == "cuda":
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    n = len(plan.shards)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"mhabench-{plan.grid}-{plan.commit[:8]}"},
            "spec": {"completionMode": "Indexed", "completions": n, "parallelism": n,
                     "backoffLimitPerIndex": 1, "maxFailedIndexes": n,
                     "template": {"spec": {"restartPolicy": "Never",
                                           "containers": [container]}}}}


def ci_matrix(plan: Plan) -> dict:
    """A CI matrix (GitHub Actions ``strategy.matrix``): one entry per shard."""
    return {"include": [{"shard": s.index, "cells": len(s.cells),
                         "predicted_minutes": round(s.predicted_seconds / 60, 1)}
                        for s in plan.shards]}


def write_json(data: dict, out: Path) -> Path:
    out = Path(out)
    if out.exists():
        raise ShardError(f"{str(out)!r} exists: never overwritten; choose another path")
    out.write_text(json.dumps(data, indent=1) + "\n")
    return out


__all__ = ["array_script", "ci_matrix", "fanin_script", "k8s_job", "submit", "write_json",
           "write_slurm"]
