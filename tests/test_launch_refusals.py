"""No option is dropped without a word: for every option x template pair, an option that
changes nothing in the rendered script is refused, naming the templates that take it; and a
host named twice becomes one hostfile line that the real OpenMPI accepts."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

from horovod_q8 import launcher

CMD = ["train", "--data-dir", "/data"]
# The base every pair starts from (hosts for the host templates, nodes for Slurm), and two
# different values of each option: an option is carried when the outcome changes.
BASE = {"--gpus-per-node": ["4"], "--hosts": ["node1,node2"], "--nodes": ["2"], "--iface": ["eth0"],
        "--ib-device": ["mlx5_0"], "the command after --": ["cmd"]}
VALUES = {"--nodes": (["2"], ["3"]), "--gpus-per-node": (["4"], ["2"]), "--hosts": (["node1,node2"], ["a,b"]),
          "--hostfile": (["HOSTFILE"], None), "--iface": (["eth0"], ["eth1"]),
          "--ib-device": (["mlx5_0"], ["mlx5_1"]), "--env": (["A=1"], ["A=2"]),
          "--mpi-arg": (["--report-bindings"], ["--tag-output"]), "--no-gpus": ([], None),
          "--job-name": (["one"], ["two"]), "--time": (["02:00:00"], ["03:00:00"]),
          "the command after --": (["x"], ["y"])}


def outcome(template: str, options: dict, hostfile: Path) -> str:
    """The rendered script, or the error's text."""
    argv: List[str] = [template]
    command: List[str] = []
    for option, words in options.items():
        words = [str(hostfile) if w == "HOSTFILE" else w for w in words]
        if option == "the command after --":
            command = words
        elif option == "--mpi-arg":
            argv += [f"--mpi-arg={w}" for w in words]
        else:
            argv += [option, *words]
    args = launcher.build_parser().parse_args(argv)
    args.command = command
    try:
        return launcher.render(template, launcher.values_from_args(args))
    except launcher.LaunchError as e:
        return f"error: {e}"


def dropped(template: str, option: str, hostfile: Path) -> bool:
    """Whether the option changes nothing: the same outcome without it and with each value."""
    base = {k: v for k, v in BASE.items() if k != option and not (option == "--hostfile" and k == "--hosts")}
    if "--ib-device" in base and template.startswith("horovodrun"):
        del base["--ib-device"]  # the base itself must not hold a refused option
    if template.endswith(".sbatch"):
        base.pop("--hosts", None)
    if template == "hostfile":
        for option_ in ("--iface", "--ib-device", "the command after --"):
            base.pop(option_, None)
    outcomes = [outcome(template, base, hostfile)]
    outcomes += [outcome(template, {**base, option: v}, hostfile) for v in VALUES[option] if v is not None]
    assert not all(o.startswith("error: ") for o in outcomes), outcomes  # a script to compare
    return len(set(outcomes)) == 1


@pytest.mark.parametrize("template", launcher.TEMPLATES)
def test_every_option_is_carried_or_refused(template, tmp_path, monkeypatch):
    """With the refusal switched off, find which options change nothing; with it on, exactly
    those are refused, and each message names the templates where the option does change
    the script (found the same way, not from the launcher's table)."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node7\nnode8\n")
    with monkeypatch.context() as m:
        m.setattr(launcher, "refuse_unused", lambda template, args: None)
        silent = {o: dropped(template, o, hostfile) for o in VALUES}
        takers = {o: [t for t in launcher.TEMPLATES if not dropped(t, o, hostfile)] for o in VALUES}
    for option, is_dropped in silent.items():
        value = VALUES[option][0]
        text = outcome(template, {**({"--nodes": ["2"]} if option != "--nodes" else {}), option: value}, hostfile)
        refusal = f"{option} has no place in {template}"
        if is_dropped:
            assert refusal in text, (option, text)
            line = next(line for line in text.splitlines() if refusal in line)
            named = re.escape(f"(templates that take it: {', '.join(takers[option])}") + "[;)]"
            assert re.search(named, line), (takers[option], line)
        else:
            assert refusal not in text, (option, text)


def test_the_dropped_pairs_the_issue_names_are_refused():
    for template in ("horovodrun_gloo.sh", "horovodrun_mpi.sh", "slurm_srun.sbatch"):
        assert template not in launcher.templates_taking("--mpi-arg")
    assert launcher.templates_taking("--mpi-arg") == ["mpirun_ompi4_ib.sh", "mpirun_ompi5_ucx.sh",
                                                      "slurm_mpirun.sbatch"]


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "horovod_q8.cli", "launch", *argv], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])


def test_cli_refuses_mpi_arg_for_horovodrun_in_one_message():
    proc = cli("horovodrun_gloo.sh", "--hosts", "n1,n2", "--gpus-per-node", "1", "--iface", "eth0",
               "--mpi-arg=--report-bindings", "--ib-device", "mlx5_0", "--dry-run", "--", "true")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert re.search(r"--mpi-arg has no place in horovodrun_gloo.sh.*mpirun_ompi4_ib.sh, mpirun_ompi5_ucx.sh, "
                     r"slurm_mpirun.sbatch", proc.stderr), proc.stderr
    assert "--ib-device has no place in horovodrun_gloo.sh" in proc.stderr
    assert "--env NCCL_IB_HCA=<device>" in proc.stderr


def hostfile_lines(hosts: str, gpus: int, nodes: Optional[int] = None) -> List[str]:
    argv = ["hostfile", "--hosts", hosts, "--gpus-per-node", str(gpus)] + (["--nodes", str(nodes)] if nodes else [])
    args = launcher.build_parser().parse_args(argv)
    args.command = []
    text = launcher.render("hostfile", launcher.values_from_args(args))
    return [line for line in text.splitlines() if line and not launcher.is_comment(line)]


def test_a_host_named_twice_gets_one_line_with_the_slots_added():
    assert hostfile_lines("node1,node1", 2) == ["node1 slots=4"]
    assert hostfile_lines("node1,node2,node1", 1) == ["node1 slots=2", "node2 slots=1"]
    with pytest.raises(launcher.LaunchError, match=r"--nodes 2 but 1 hosts given \(node1 named 2 times"):
        hostfile_lines("node1,node1", 1, nodes=2)
    args = launcher.build_parser().parse_args(["horovodrun_gloo.sh", "--hosts", "node1,node2,node1",
                                               "--gpus-per-node", "2", "--iface", "eth0"])
    args.command = ["true"]
    script = launcher.render("horovodrun_gloo.sh", launcher.values_from_args(args))
    assert "-np 6 -H node1:4,node2:2 " in script


MPIRUN = shutil.which("mpirun")
ROOT = ["--allow-run-as-root"] if MPIRUN and os.geteuid() == 0 else []


@pytest.mark.skipif(MPIRUN is None, reason="needs OpenMPI's mpirun (scripts/setup.sh installs it)")
def test_real_mpirun_runs_two_ranks_from_a_host_named_twice(tmp_path):
    lines = hostfile_lines("localhost,localhost", 1)
    assert lines == ["localhost slots=2"]
    good, bad = tmp_path / "merged", tmp_path / "as_named"
    good.write_text("\n".join(lines) + "\n")
    bad.write_text("localhost slots=1\nlocalhost slots=1\n")  # what was rendered before
    run = ["mpirun", *ROOT, "-np", "2", "--hostfile"]
    refused = subprocess.run(run + [str(bad), "true"], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "multiple definitions" in refused.stdout + refused.stderr
    ok = subprocess.run(run + [str(good), "--display-allocation", "sh", "-c", "echo rank-$OMPI_COMM_WORLD_RANK"],
                        capture_output=True, text=True, timeout=120)
    out = ok.stdout + ok.stderr
    assert ok.returncode == 0, out
    assert sorted(re.findall(r"rank-\d", out)) == ["rank-0", "rank-1"], out
    allocated = re.findall(r"^\s*(\S+): flags=\S+ slots=(\d+) ", out, re.M)  # localhost shows as this host's name
    assert [slots for _, slots in allocated] == ["2"], out
