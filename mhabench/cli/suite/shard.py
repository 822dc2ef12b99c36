"""``mhabench shard plan|run|slurm``: the grid as shards of near-equal predicted time, one
run per host, fanned out on Slurm (:mod:`mhabench.cluster.shard`, :mod:`mhabench.cluster.fanout`);
``mhabench merge`` fans them back in."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_command(sub: Any) -> None:
    from mhabench.cluster.shard import CHUNK_CELLS
    from mhabench.core.grids import GRIDS

    p = sub.add_parser("shard", help="split a grid into shards, run one, fan out on Slurm")
    actions = p.add_subparsers(dest="action", required=True, parser_class=type(p))

    plan = actions.add_parser("plan", help="list the grid's asv cells as N shards of "
                              "near-equal predicted time")
    plan.add_argument("--grid", default="full", help=f"one of {', '.join(GRIDS)} (default full)")
    plan.add_argument("--shards", type=int, required=True, help="number of shards (>= 1)")
    plan.add_argument("--devices", default="cpu", help="cpu or cuda (default cpu)")
    plan.add_argument("--machine", default=None,
                      help="asv machine name the shards record (default: this host's name)")
    plan.add_argument("--results", default=None,
                      help="stored asv results to predict times from (time model, "
                      "calibration, recorded durations)")
    plan.add_argument("--bench", default=None, help="only the cells whose asv name matches "
                      "this regex")
    plan.add_argument("--out", required=True, help="the plan file to write (new)")
    plan.set_defaults(func=run_plan)

    run = actions.add_parser("run", help="run one shard of a plan with asv (restartable)")
    run.add_argument("plan", help="the plan file")
    run.add_argument("index", type=int, help="the shard to run (0-based)")
    run.add_argument("--folder", default=None, help="the shard's asv config and results "
                     "(default: PLAN-shard-INDEX beside the plan)")
    run.add_argument("--python", default=None, choices=["same"],
                     help="'same': time in this interpreter's environment (asv "
                     "--python=same) instead of asv's own")
    run.add_argument("--quick", action="store_true",
                     help="asv --quick: one sample a cell (a smoke run, not for timing)")
    run.add_argument("--chunk", type=int, default=CHUNK_CELLS, metavar="N",
                     help="cells per asv invocation; progress is saved after each (default "
                     f"{CHUNK_CELLS}): smaller loses less to a preempted node, costs a start each")
    run.set_defaults(func=run_shard)

    slurm = actions.add_parser("slurm", help="write (and --submit) a Slurm job array for a "
                               "plan, and its fan-in job")
    slurm.add_argument("plan", help="the plan file")
    slurm.add_argument("--out", required=True, help="the sbatch script to write (new); the "
                       "fan-in job goes beside it as *-merge.sbatch")
    slurm.add_argument("--results", default=".asv/results",
                       help="where the fan-in merges the shards (default .asv/results)")
    slurm.add_argument("--html", default=".asv/html",
                       help="where the fan-in publishes asv's site (default .asv/html)")
    slurm.add_argument("--reports", default="reports",
                       help="where the fan-in writes its report (default reports)")
    slurm.add_argument("--python", default=None, choices=["same"],
                       help="passed to each shard run ('same')")
    slurm.add_argument("--quick", action="store_true", help="passed to each shard run")
    slurm.add_argument("--chunk", type=int, default=None, metavar="N",
                       help="passed to each shard run")
    slurm.add_argument("--k8s", default=None, metavar="FILE",
                       help="also write a Kubernetes Indexed Job manifest (JSON)")
    slurm.add_argument("--image", default="mhabench:latest",
                       help="the container image of the Kubernetes manifest")
    slurm.add_argument("--matrix", default=None, metavar="FILE",
                       help="also write a CI matrix (JSON, an include: list)")
    slurm.add_argument("--submit", action="store_true",
                       help="sbatch the array and the fan-in (afterok)")
    slurm.set_defaults(func=run_slurm)


def run_plan(args: argparse.Namespace) -> int:
    import socket

    from mhabench.cluster.shard import make_plan

    results = Path(args.results) if args.results else None
    if results is not None and not results.is_dir():
        raise ValueError(f"--results {args.results!r} is not a folder")
    plan = make_plan(Path("."), args.grid, args.shards, args.devices,
                     args.machine or socket.gethostname(), results, bench=args.bench)
    plan.save(Path(args.out))
    print(f"mhabench shard plan: {plan.summary()}; written to {args.out}")
    return 0


def run_shard(args: argparse.Namespace) -> int:
    from mhabench.cli.common import CLIError
    from mhabench.cluster.shard_run import run_shard as run

    try:
        results = run(Path(args.plan), args.index, folder=args.folder, python=args.python,
                      asv_args=["--quick"] if args.quick else [],
                      chunk=args.chunk,
                      echo=lambda text: print(text, file=sys.stderr, flush=True))
    except RuntimeError as err:
        raise CLIError(str(err).replace("\n", " ")) from err
    print(f"mhabench shard run: shard {args.index} done; results in {results}")
    return 0


def run_slurm(args: argparse.Namespace) -> int:
    from mhabench.cluster.fanout import ci_matrix, k8s_job, submit, write_json, write_slurm
    from mhabench.cluster.shard import load_plan
    from mhabench.cluster.shard_run import check_chunk

    if args.chunk is not None:
        check_chunk(args.chunk)  # refused here, before any script is written
    plan = load_plan(args.plan)
    run_args = " ".join([*(["--python same"] if args.python else []),
                         *(["--quick"] if args.quick else []),
                         *([f"--chunk {args.chunk}"] if args.chunk is not None else [])])
    array, fanin = write_slurm(plan, Path(args.plan), Path(args.out), repo=Path("."),
                               python=sys.executable, results=Path(args.results),
                               html=Path(args.html), reports=Path(args.reports),
                               run_args=run_args)
    print(f"mhabench shard slurm: {len(plan.shards)}-task array in {array}, fan-in in {fanin}")
    if args.k8s:
        job = write_json(k8s_job(plan, args.plan, args.image), Path(args.k8s))
        print(f"  Kubernetes Indexed Job: {job}")
    if args.matrix:
        print(f"  CI matrix: {write_json(ci_matrix(plan), Path(args.matrix))}")
    if args.submit:
        job, merge_job = submit(array, fanin)
        print(f"  submitted: array job {job}, fan-in job {merge_job} (after the array)")
    return 0
