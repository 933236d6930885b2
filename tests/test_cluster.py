"""The emulated cluster: real namespaces, veth links, tc shaping and mpirun across them."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from horovod_q8.cluster import Cluster, ClusterError, parse_rate, parse_time
from horovod_q8.cluster.netns import PREFIX, existing_namespaces

root_only = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("mpirun") is None,
                               reason="needs root, iproute2 and OpenMPI")
pytestmark = pytest.mark.parallel
HERE = Path(__file__).parent


def cli(*args: str, timeout: float = 300, env: Optional[dict] = None):
    """Run `horovod-q8 ARGS` (in `env`, default this one); also check it left none of its
    namespaces behind."""
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([sys.executable, "-m", "horovod_q8.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    out, _ = proc.communicate(timeout=timeout)
    assert ours_for(proc.pid) == [], f"namespaces left behind: {ours_for(proc.pid)}\n{out}"
    return proc.returncode, out


def ours_for(pid: int) -> list:
    return existing_namespaces(f"{PREFIX}{pid}-")


def test_rates_and_times_parse():
    assert parse_rate("1gbit") == 1e9
    assert parse_rate("2.5Gbit") == 2.5e9
    assert parse_rate("100mbit/s") == 1e8
    assert parse_time("50us") == pytest.approx(50e-6)
    assert parse_time("0") == 0
    for bad in ("fast", "1gb", "0gbit"):
        with pytest.raises(ClusterError):
            parse_rate(bad)
    with pytest.raises(ClusterError):
        parse_time("soon")


def test_bad_settings_are_refused():
    with pytest.raises(ClusterError, match="at least one host"):
        Cluster(0)
    with pytest.raises(ClusterError, match="do not fit"):
        Cluster(300, subnet="10.99.0.0/24")


@root_only
def test_two_hosts_come_up_with_their_own_addresses_and_go():
    with Cluster(2, parse_rate("1gbit")) as c:
        made = ours_for(os.getpid())
        assert sorted(made) == sorted([c.switch, c.namespace(0), c.namespace(1)])
        out = subprocess.run(["ip", "-n", c.namespace(1), "-4", "-o", "addr", "show", "eth0"],
                             capture_output=True, text=True).stdout
        assert "10.99.0.2/24" in out
        qdisc = subprocess.run(["ip", "netns", "exec", c.switch, "tc", "qdisc", "show", "dev", "p1"],
                               capture_output=True, text=True).stdout
        assert "tbf" in qdisc and "1Gbit" in qdisc
    assert ours_for(os.getpid()) == []


@root_only
def test_mpi_job_runs_across_hosts_at_the_shaped_rate():
    """bench transfer on 2 hosts at 200 Mbit/s: the ranks sit on their own IPs, the ping-pong
    sees the shaped bandwidth, and every compressed allreduce is bit-identical on both."""
    rc, out = cli("cluster", "--hosts", "2", "--bandwidth", "200mbit", "--timeout", "240", "--",
                  "python", "-m", "horovod_q8.bench.transfer", "--elements", "300000",
                  "--compressions", "none,q8,q4", "--repeats", "1")
    assert rc == 0, out[-4000:]
    assert "10.99.0.1 10.99.0.2" in out
    gbit = float(out.split("bandwidth ")[1].split(" Gbit/s")[0])
    assert 0.15 < gbit < 0.21, out
    rows = [line for line in out.splitlines() if line.startswith("| q")]
    assert len(rows) == 2 and all(line.rstrip().endswith("| yes |") for line in rows), out


@root_only
def test_horovod_compressed_allreduce_on_two_emulated_hosts():
    rc, out = cli("cluster", "--hosts", "2", "--bandwidth", "1gbit", "--timeout", "600", "--",
                  "python", str(HERE / "parallel" / "allreduce_checks.py"), "q8,q4", timeout=700)
    assert rc == 0 and "OK" in out, out[-4000:]


@root_only
def test_failing_job_returns_its_status_and_tears_down():
    rc, out = cli("cluster", "--hosts", "2", "--bandwidth", "none", "--",
                  "python", "-c", "import sys; sys.exit(3)")
    assert rc != 0, out


def _start(*job: str, extra=()):
    return subprocess.Popen([sys.executable, "-m", "horovod_q8.cli", "cluster", "--hosts", "2",
                             *extra, "--", *job], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _wait_for_namespaces(pid: int, n: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while len(ours_for(pid)) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(ours_for(pid)) == n


@root_only
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_the_job_and_tears_down(sig):
    proc = _start("sleep", "600")
    _wait_for_namespaces(proc.pid, 3)
    time.sleep(3)  # let mpirun start its daemons in the hosts
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert ours_for(proc.pid) == [], out


@root_only
def test_timeout_stops_the_job_and_tears_down():
    proc = _start("sleep", "600", extra=("--timeout", "5"))
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 124 and "timeout" in out, out
    assert ours_for(proc.pid) == []


@root_only
def test_latency_without_netem_is_a_clear_error_or_works():
    rc, out = cli("cluster", "--hosts", "2", "--latency", "100us", "--", "true")
    assert rc == 0 or ("no netem qdisc" in out and "--latency 0" in out), out


def test_missing_command_is_a_clear_error():
    if os.geteuid() != 0:
        pytest.skip("root check comes first")
    rc, out = cli("cluster", "--hosts", "2")
    assert rc == 2 and "no command" in out, out


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_without_root_a_clear_error():
    """As user nobody (who cannot read root's venv, so netns.py is loaded by path: stdlib only)."""
    if os.geteuid() != 0:
        rc, out = cli("cluster", "--hosts", "2", "--", "true")
        assert rc == 2 and "needs root" in out, out
        return
    code = ("import importlib.util as u; s = u.spec_from_file_location('netns', {path!r}); "
            "m = u.module_from_spec(s); import sys; sys.modules['netns'] = m; "
            "s.loader.exec_module(m); m.Cluster(2).up()")
    path = str(HERE.parent / "horovod_q8" / "cluster" / "netns.py")
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "/usr/bin/python3", "-c", code.format(path=path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "ClusterError: the emulated cluster needs root" in proc.stderr, proc.stderr


def test_core_groups_give_each_host_its_own_cores():
    from horovod_q8.cluster.mpirun import core_groups

    assert core_groups(2, [0, 1]) == ["0", "1"]
    assert core_groups(2, [0, 1, 2, 3, 4]) == ["0,1", "2,3"]
    assert core_groups(1, [3, 5]) == ["3,5"]
    with pytest.raises(ClusterError, match="a core per host: 2 usable cores for 3 hosts"):
        core_groups(3, [0, 1])


@root_only
def test_pinned_hosts_run_on_their_own_cores(tmp_path):
    """--pin-cores: each host's rank (mpirun's local one and the agent's) may use only its cores."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs 2 cores")
    probe = tmp_path / "probe.py"
    # a file per rank: the ranks' stdout lines reach mpirun's output interleaved mid-line
    probe.write_text(f"import os\nr = os.environ['OMPI_COMM_WORLD_RANK']\n"
                     f"open(os.path.join({str(tmp_path)!r}, 'rank' + r), 'w').write("
                     f"str(sorted(os.sched_getaffinity(0))))\n")
    rc, out = cli("cluster", "--hosts", "2", "--bandwidth", "none", "--pin-cores", "--timeout", "120", "--",
                  sys.executable, str(probe))
    assert rc == 0, out[-3000:]
    per = len(cores) // 2
    for r in (0, 1):
        assert (tmp_path / f"rank{r}").read_text() == str(cores[r * per:(r + 1) * per]), out[-3000:]


@root_only
def test_pin_cores_with_too_few_cores_is_a_clear_error():
    rc, out = cli("cluster", "--hosts", str(len(os.sched_getaffinity(0)) + 1), "--pin-cores", "--", "true")
    assert rc == 2 and "a core per host" in out, out


@root_only
def test_mca_settings_replace_the_defaults():
    """--mca NAME=VALUE reaches every rank as OpenMPI gives it (OMPI_MCA_NAME), given once: a
    default of the same name (a tuned collective's or a base setting's) is replaced, not given
    twice, which OpenMPI refuses."""
    show = ('echo "alltoallv=$OMPI_MCA_coll_tuned_alltoallv_algorithm allgatherv=$OMPI_MCA_coll_tuned_allgatherv_algorithm'
            ' yield=$OMPI_MCA_mpi_yield_when_idle"')
    rc, out = cli("cluster", "--hosts", "2", "--bandwidth", "none", "--mca", "coll_tuned_alltoallv_algorithm=2",
                  "--mca", "mpi_yield_when_idle=0", "--", "sh", "-c", show, timeout=120)
    assert rc == 0 and out.count("alltoallv=2 allgatherv=3 yield=0") == 2, out


@root_only
def test_every_rank_gets_mallocs_huge_pages_added_to_its_tunables():
    """Each emulated host's rank runs with glibc.malloc.hugetlb=1 added to the GLIBC_TUNABLES
    it was given (docs/performance.md: a fresh 51 MB allgather a step in 4 KB pages)."""
    env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.arena_max=4")
    rc, out = cli("cluster", "--hosts", "2", "--bandwidth", "none", "--", "sh", "-c",
                  'echo "tunables=$GLIBC_TUNABLES"', timeout=120, env=env)
    assert rc == 0 and out.count("tunables=glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1") == 2, out


def test_bad_mca_settings_are_refused():
    for bad in ("coll_tuned_alltoallv_algorithm", "=1", "Bad-Name=1", "x=1;rm -rf /", "x="):
        rc, out = cli("cluster", "--hosts", "2", "--mca", bad, "--", "true", timeout=60)
        assert rc == 2 and "expected NAME=VALUE" in out, (bad, out)
