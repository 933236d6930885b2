"""The Slurm template for real: a single-node Slurm (slurmctld + slurmd + munge) started by
the test, the rendered slurm_srun.sbatch submitted with sbatch, 2 tasks via PMIx."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from horovod_q8 import launcher

pytestmark = pytest.mark.parallel
NEEDED = ("slurmctld", "slurmd", "sbatch", "munged")

CONF = """ClusterName=horovodq8test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
SlurmctldPort={port}
SlurmdPort={port2}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
{node}
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = [c for c in NEEDED if shutil.which(c) is None and not Path("/usr/sbin", c).exists()]
    if missing or os.geteuid() != 0:
        pytest.skip(f"needs root and Slurm ({', '.join(missing) or 'not root'}); scripts/setup.sh installs them")
    d = tmp_path_factory.mktemp("slurm")
    (d / "state").mkdir()
    (d / "spool").mkdir()
    host = socket.gethostname().split(".")[0]
    node = subprocess.run(["slurmd", "-C"], capture_output=True, text=True).stdout.splitlines()[0]
    node = " ".join(w for w in node.split() if not w.startswith("RealMemory")) + " State=UNKNOWN"
    conf = d / "slurm.conf"
    conf.write_text(CONF.format(host=host, d=d, node=node, port=16817, port2=16818))
    env = dict(os.environ, SLURM_CONF=str(conf))
    procs = []
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True)
    procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    time.sleep(2)
    procs.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    try:
        for _ in range(60):
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env).stdout
            if "idle" in out:
                break
            time.sleep(1)
        else:
            pytest.fail("single-node Slurm did not come up: " + (d / "slurmctld.log").read_text()[-2000:])
        yield env, d
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


TRAIN = [sys.executable, "-m", "horovod_q8.workloads.train", "mnist", "--synthetic", "--steps-per-epoch", "4",
         "--epochs", "1", "--compression", "q8", "--fused", "--verbose", "0"]


def test_rendered_sbatch_runs_two_ranks_through_pmix(slurm, tmp_path):
    env, _ = slurm
    args = launcher.build_parser().parse_args(["slurm_srun.sbatch", "--nodes", "1", "--gpus-per-node", "2",
                                               "--no-gpus", "--iface", "lo", "--ib-device", "mlx5_0",
                                               "--time", "00:10:00"])
    args.command = TRAIN
    script = tmp_path / "job.sbatch"
    script.write_text(launcher.render("slurm_srun.sbatch", launcher.values_from_args(args)))
    proc = subprocess.run(["sbatch", "--wait", "--output", str(tmp_path / "out.txt"), str(script)],
                          capture_output=True, text=True, env=dict(env, TF_CPP_MIN_LOG_LEVEL="2"),
                          cwd=tmp_path, timeout=600)
    out = (tmp_path / "out.txt").read_text() if (tmp_path / "out.txt").exists() else ""
    assert proc.returncode == 0, proc.stderr + out[-4000:]
    assert "SUMMARY compression=q8 fused=True ranks=2" in out, out[-4000:]



PROGRAM = """import json, sys
with open(sys.argv[1], "w") as f:
    json.dump(sys.argv[2:], f)
"""


def test_sbatch_takes_a_quoted_job_name_and_a_multiline_command(slurm, tmp_path):
    """The real sbatch parses `#SBATCH --job-name='two words'` and srun gets a multi-line
    `python -c` program and awkward arguments exactly as given."""
    env, _ = slurm
    out = tmp_path / "argv.json"
    words = ["it's", "two\nlines", "$HOME", "a b"]
    args = launcher.build_parser().parse_args(["slurm_srun.sbatch", "--nodes", "1", "--gpus-per-node", "1",
                                               "--no-gpus", "--iface", "lo", "--ib-device", "mlx5_0",
                                               "--job-name", "q8 two words", "--time", "00:05:00"])
    args.command = [sys.executable, "-c", PROGRAM, str(out), *words]
    script = tmp_path / "job.sbatch"
    script.write_text(launcher.render("slurm_srun.sbatch", launcher.values_from_args(args)))
    proc = subprocess.run(["sbatch", "--parsable", "--wait", "--output", str(tmp_path / "out.txt"), str(script)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    log = (tmp_path / "out.txt").read_text() if (tmp_path / "out.txt").exists() else ""
    assert proc.returncode == 0, proc.stderr + log
    assert json.loads(out.read_text()) == words
    job = proc.stdout.strip().split(";")[0]
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=env).stdout
    assert "JobName=q8 two words" in shown, shown
