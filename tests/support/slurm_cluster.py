"""A real single-node Slurm cluster for the shard tests: Debian's munge and slurm-wlm
(.ci/run installs them), started in a folder of the test's own, bound to 127.0.0.1 on free
ports, and stopped by their own PIDs.

munged runs as the munge user with its own socket, key copy, pid and log files; slurmctld
and slurmd run as root (``SlurmUser=root``) with ``proctrack/linuxproc`` and ``task/none``
and no cgroup.conf (slurmd 22.05 refuses ``CgroupPlugin=disabled``). Clients find the
cluster through ``SLURM_CONF``."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch")


def missing() -> str | None:
    """Why no cluster can start here (a daemon or client missing), or None."""
    for name in DAEMONS:
        if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists():
            return f"{name} is not installed (Debian: apt-get install slurm-wlm munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user (Debian's munge package makes it)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node() -> tuple[str, int, int]:
    """This host's short name, CPUs and memory (MB) as slurmd sees them."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
    return fields["NodeName"], int(fields["CPUs"]), int(fields["RealMemory"])


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]
    run_dir: Path  # munged's socket, pid and log
    pids: dict[str, int] = field(default_factory=dict)

    def run(self, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def wait_idle(self, job: str, timeout: float) -> dict[str, str]:
        """Wait until every task of ``job`` has left the queue; its tasks' final states
        (``sacct`` is not configured: states come from the controller's ``scontrol``)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            queued = self.run("squeue", "-h", "-j", job, "-o", "%i %T").stdout.split()
            if not queued:
                break
            time.sleep(2)
        else:
            raise TimeoutError(f"job {job} still queued after {timeout} s")
        out = self.run("scontrol", "show", "job", job, "-o").stdout
        states = {}
        for line in out.splitlines():
            parts = dict(p.split("=", 1) for p in line.split() if "=" in p)
            states[parts.get("JobId", "?") + "_" + parts.get("ArrayTaskId", "")] = parts.get(
                "JobState", "?")
        return states

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.run_dir, ignore_errors=True)


def start(root: Path) -> Cluster:
    """munged, slurmctld and slurmd under ``root``; waits until the node is idle."""
    root.mkdir(parents=True, exist_ok=True)
    munge = pwd.getpwnam("munge")
    # munged refuses a key or socket folder it cannot reach or others can write to: the
    # test's temporary folders are root's (0700), so munge gets a folder of its own.
    run_dir = Path("/tmp") / f"mhabench-munge-{os.getpid()}-{time.monotonic_ns()}"
    run_dir.mkdir()
    os.chmod(run_dir, 0o755)  # munged: the socket's folder must be searchable by all
    key = run_dir / "munge.key"
    shutil.copy("/etc/munge/munge.key", key)
    os.chmod(key, 0o600)
    for path in (run_dir, key):
        os.chown(path, munge.pw_uid, munge.pw_gid)
    sock = run_dir / "munge.socket"
    cluster = Cluster(root, {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}, run_dir)
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged",
                    f"--socket={sock}", f"--key-file={key}",
                    f"--pid-file={run_dir / 'munged.pid'}",
                    f"--log-file={run_dir / 'munged.log'}",
                    f"--seed-file={run_dir / 'munged.seed'}"], check=True, timeout=30)
    cluster.pids["munged"] = int((run_dir / "munged.pid").read_text())
    name, cpus, memory = _node()
    spool = root / "spool"
    spool.mkdir()
    (root / "state").mkdir()
    (root / "slurm.conf").write_text(f"""ClusterName=mhabench-test
SlurmctldHost={name}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={spool}
SlurmctldPidFile={root / 'slurmctld.pid'}
SlurmdPidFile={root / 'slurmd.pid'}
SlurmctldLogFile={root / 'slurmctld.log'}
SlurmdLogFile={root / 'slurmd.log'}
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MaxArraySize=1001
NodeName={name} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=test Nodes={name} Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
""")
    try:
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([f"/usr/sbin/{daemon}", "-f", str(root / "slurm.conf")],
                           env=cluster.env, check=True, timeout=60)
            pid_file = root / f"{daemon}.pid"
            for _ in range(100):  # the daemon writes it just after it detaches
                if pid_file.exists() and pid_file.read_text().strip():
                    break
                time.sleep(0.1)
            cluster.pids[daemon] = int(pid_file.read_text())
        end = time.monotonic() + 60
        while time.monotonic() < end:
            state = cluster.run("sinfo", "-h", "-o", "%T").stdout.strip()
            if state == "idle":
                return cluster
            time.sleep(1)
        raise RuntimeError(f"the Slurm node is {state!r}, not idle, after 60 s: "
                           + (root / "slurmctld.log").read_text()[-1500:])
    except BaseException:
        cluster.stop()
        raise
