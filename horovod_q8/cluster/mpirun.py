"""Run an MPI (Horovod) job across the emulated hosts: `mpirun` starts in host 0's namespace
and reaches the other hosts, addressed by their own IPs, through a launch agent that enters
the host's namespace where a real cluster would ssh."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Dict, List, Optional, Sequence

from horovod_q8.cluster.netns import HOST_IFACE, Cluster, ClusterError
from horovod_q8.cores import share, usable_cores
from horovod_q8.startup import MALLOC_TUNABLES, malloc_huge_pages

# OpenMPI's tuned ring allreduce: its default choice took twice as long on these links. The
# compressed schedule's collectives: a ring allgatherv (a Sendrecv ring moved 0.90 Gbit/s per
# link where the default Allgather moved 0.53, docs/runs/cluster/2026-11-30-66d42d6/collective_check_4x1gbit.log)
# and a basic linear alltoallv (every block in flight at once: 188 ms against the pairwise
# one's 258 on 4 hosts, with TCP_FLAGS; docs/launch.md, "Collectives").
RING_ALLREDUCE = {"coll_tuned_use_dynamic_rules": "1", "coll_tuned_allreduce_algorithm": "4",
                  "coll_tuned_allgatherv_algorithm": "3", "coll_tuned_alltoallv_algorithm": "1"}
# The TCP BTL without its emulated RDMA put: with it, two ranks sending each other a large
# message at once moved 0.48 Gbit/s each way instead of 0.9 (docs/launch.md, "Collectives").
TCP_FLAGS = "send,inplace,need-ack,need-csum"
FORWARDED_PREFIXES = ("HOROVOD_", "TF_", "OMP_", "NUMBA_", "PYTHON", "HQ8_")
FORWARDED = ("PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "HOME", MALLOC_TUNABLES)


def core_groups(hosts: int, cores: Sequence[int]) -> List[str]:
    """Each emulated host's own cores, as taskset lists: equal shares, in order.

    Unpinned, the hosts share every core, and a rank waiting on the wire (MPI polls while it
    waits) takes CPU time from another host's compute, which a real cluster never does.
    """
    per = len(cores) // hosts
    if per == 0:
        raise ClusterError(f"--pin-cores needs a core per host: {len(cores)} usable cores for {hosts} hosts")
    return [",".join(str(c) for c in cores[i * per:(i + 1) * per]) for i in range(hosts)]


def write_agent(cluster: Cluster, directory: str, cores: Optional[Sequence[str]] = None) -> str:
    """The plm_rsh_agent: `agent HOST COMMAND...` runs COMMAND in HOST's namespace (on the
    host's own cores when `cores` gives them)."""
    cases = "\n".join(f"  {a}) ns={cluster.namespace(i)}; cpus={cores[i] if cores else ''};;"
                      for i, a in enumerate(cluster.addresses))
    path = Path(directory) / "netns-agent"
    pin = 'taskset -c "$cpus" ' if cores else ""
    path.write_text(
        "#!/bin/sh\n# written by horovod_q8.cluster: ssh's place for the emulated hosts\n"
        'host=$1; shift\ncase "$host" in\n'
        f'{cases}\n  *) echo "netns-agent: unknown host $host" >&2; exit 255;;\nesac\n'
        f'exec {pin}ip netns exec "$ns" sh -c "$*"\n')
    path.chmod(0o755)
    return str(path)


def job_environment(processes: int) -> dict:
    """This environment, with this interpreter's bin first on PATH (for venv entry points) and
    this machine's cores shared among the emulated processes unless thread counts are set."""
    env = dict(os.environ)
    threads = str(share(processes))
    for k in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env.setdefault(k, threads)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env[MALLOC_TUNABLES] = malloc_huge_pages(env.get(MALLOC_TUNABLES, ""))
    return env


def mpirun_command(cluster: Cluster, agent: str, command: Sequence[str], slots: int = 1,
                   ring: bool = True, env: Optional[dict] = None, cores: Optional[Sequence[str]] = None,
                   mca: Optional[Dict[str, str]] = None) -> List[str]:
    """The full command line, `ip netns exec <host 0> mpirun ... command` (under `taskset`
    with host 0's cores when `cores` gives each host's; the agent pins the others). mca: MCA
    parameters that replace any of the values set here or add to them (OpenMPI refuses a
    parameter given twice, so each is given once)."""
    env = os.environ if env is None else env
    hosts = ",".join(f"{a}:{slots}" for a in cluster.addresses)
    forwarded = sorted(k for k in env if k in FORWARDED or k.startswith(FORWARDED_PREFIXES))
    pin = ["taskset", "-c", cores[0]] if cores else []
    params = {
        "plm_rsh_agent": agent,
        # mpirun starts every daemon itself and talks to each directly
        "plm_rsh_no_tree_spawn": "1", "routed": "direct",
        # TCP only, and only on the emulated links: no shared memory between "hosts"
        "pml": "ob1", "btl": "tcp,self", "btl_tcp_flags": TCP_FLAGS,
        # waiting ranks yield the CPU: the emulated hosts share this machine's cores
        "mpi_yield_when_idle": "1",
        "btl_tcp_if_include": cluster.subnet, "oob_tcp_if_include": cluster.subnet,
        **(RING_ALLREDUCE if ring else {}), **(mca or {})}
    cmd = [*pin, "ip", "netns", "exec", cluster.namespace(0),
           "mpirun", "--allow-run-as-root", "-np", str(cluster.hosts * slots), "--host", hosts,
           "--map-by", "slot", "--bind-to", "none"]
    for name, value in params.items():
        cmd += ["--mca", name, value]
    for k in forwarded:
        cmd += ["-x", k]
    return cmd + list(command)


class _Interrupted(Exception):
    pass


def _raise_interrupted(signum, frame):
    raise _Interrupted(signal.Signals(signum).name)


def run_job(cluster: Cluster, command: Sequence[str], slots: int = 1, ring: bool = True,
            timeout: Optional[float] = None, log: Optional[IO[str]] = None, pin_cores: bool = False,
            mca: Optional[Dict[str, str]] = None) -> int:
    """Bring the cluster up, run command on every host, stream its output, always tear down.

    pin_cores: each host's processes on cores of their own (`core_groups`).

    Returns the job's exit status (124 on timeout, 130 on SIGINT/SIGTERM).
    """
    if not command:
        raise ClusterError("no command to run on the cluster (put it after `--`)")
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    proc: Optional[subprocess.Popen] = None
    cores = None
    if pin_cores:
        if shutil.which("taskset") is None:
            raise ClusterError("--pin-cores needs taskset (util-linux)")
        cores = core_groups(cluster.hosts, usable_cores())
    try:
        with cluster, tempfile.TemporaryDirectory(prefix="hq8-cluster-") as tmp:
            agent = write_agent(cluster, tmp, cores)
            env = job_environment(cluster.hosts * slots)
            # for jobs that rendezvous without MPI (torch.distributed): host 0 and its device
            env.update(HOROVOD_Q8_HOST0=cluster.addresses[0], HOROVOD_Q8_IFACE=HOST_IFACE)
            cmd = mpirun_command(cluster, agent, command, slots, ring, env, cores, mca)
            try:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env, start_new_session=True)
                deadline = None if timeout is None else time.monotonic() + timeout
                return _stream(proc, deadline, log)
            finally:
                _stop(proc)  # before the namespaces go, so mpirun can end its daemons
    except _Interrupted as e:
        print(f"horovod-q8 cluster: {e}, stopping the job and tearing down", file=sys.stderr)
        return 130
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _stream(proc: subprocess.Popen, deadline: Optional[float], log: Optional[IO[str]]) -> int:
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    while True:
        if deadline is not None and time.monotonic() > deadline:
            print("horovod-q8 cluster: timeout, stopping the job", file=sys.stderr)
            return 124
        if not sel.select(timeout=1.0):
            continue
        line = proc.stdout.readline()
        if not line:
            return proc.wait()
        sys.stdout.write(line)
        sys.stdout.flush()
        if log is not None:
            log.write(line)
            log.flush()


def _stop(proc: Optional[subprocess.Popen]) -> None:
    """SIGTERM mpirun's whole session, SIGKILL after 5 s (namespaces are removed after)."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
