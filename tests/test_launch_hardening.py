"""Launcher hardening (issue 15): hostile values never run, multi-line commands arrive
exactly, counts must be positive, and a real mpirun accepts the rendered hostfile.

The rendered scripts really run here, against stub `horovodrun`, `mpirun` and `srun` that
record their argv (the stub `srun` then runs the command) and a stub `sbatch` that runs the
script with bash, as a node would."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from horovod_q8 import launcher

SCRIPTS = [t for t in launcher.TEMPLATES if t != "hostfile"]
BASE = ["--nodes", "1", "--gpus-per-node", "2", "--hosts", "localhost", "--iface", "lo",
        "--ib-device", "mlx5_0"]


def base(template: str) -> list:
    """BASE less what the template refuses: hosts under Slurm, the HCA for horovodrun, the
    interfaces for a hostfile."""
    drop = {"--hosts"} if template.endswith(".sbatch") else set()
    drop |= {"--ib-device"} if template.startswith("horovodrun") else set()
    drop |= {"--iface", "--ib-device"} if template == "hostfile" else set()
    return [w for opt, value in zip(BASE[::2], BASE[1::2]) if opt not in drop for w in (opt, value)]
STUB = """#!/bin/bash
name=$(basename "$0")
printf '%s\\0' "$@" > "$HQ8_STUB_DIR/$name.argv"
printf '%s' "${MSG-}" > "$HQ8_STUB_DIR/$name.env"
"""
SRUN_RUNS = 'while [[ "${1-}" == --* ]]; do shift; done\nexec "$@"\n'  # drop srun's options
SBATCH = '#!/bin/bash\nexec bash "$1"\n'


def hostile(marker: Path) -> str:
    """Every way a value could try to run `touch marker`."""
    return (f"x\ntouch {marker}\n; touch {marker}; $(touch {marker}) `touch {marker}` "
            f"'; touch {marker}; ' \"; touch {marker}\" \\")


@pytest.fixture
def stubs(tmp_path):
    """(env, stub_dir): PATH starts with the stubs; each writes NAME.argv into stub_dir."""
    bindir, rec = tmp_path / "bin", tmp_path / "rec"
    bindir.mkdir()
    rec.mkdir()
    for name, extra in (("horovodrun", ""), ("mpirun", ""), ("srun", SRUN_RUNS)):
        (bindir / name).write_text(STUB + extra)
    (bindir / "sbatch").write_text(SBATCH)
    for f in bindir.iterdir():
        f.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", HQ8_STUB_DIR=str(rec),
               SLURM_NTASKS="2", TMPDIR=str(tmp_path / "tmp"))
    env.pop("MSG", None)
    return env, rec


def launch(options, command, env, dry_run=False):
    """`horovod-q8 launch` in a subprocess (the launcher module's own main)."""
    argv = [sys.executable, "-m", "horovod_q8.launcher", *options, *(["--dry-run"] if dry_run else []),
            "--", *command]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


def recorded(rec: Path, name: str):
    """(argv, MSG) a stub saw."""
    argv = (rec / f"{name}.argv").read_text().split("\0")[:-1]
    return argv, (rec / f"{name}.env").read_text()


def runner_of(template: str) -> str:
    """The stub a rendered template calls."""
    if template.startswith("horovodrun"):
        return "horovodrun"
    return "srun" if template == "slurm_srun.sbatch" else "mpirun"


CONTROL = "holds control characters"
NOT_HOST = "is not a host name"


@pytest.mark.parametrize("template,options,message", [
    ("slurm_srun.sbatch", ["--time", "01:00:00\ntouch {m}"], "--time '01:00:00\\\\ntouch .*' " + CONTROL),
    ("slurm_mpirun.sbatch", ["--time", "01:00:00\rtouch {m}"], "--time .* " + CONTROL),
    ("slurm_srun.sbatch", ["--job-name", "job\ntouch {m}"], "--job-name .* " + CONTROL),
    ("horovodrun_gloo.sh", ["--hosts", "localhost,node2\ntouch {m}"], "host .* " + CONTROL),
    ("horovodrun_mpi.sh", ["--hosts", "node$(touch {m})"], "host 'node.*' " + NOT_HOST),
    ("mpirun_ompi4_ib.sh", ["--iface", "lo\ntouch {m}"], "--iface .* " + CONTROL),
    ("mpirun_ompi5_ucx.sh", ["--ib-device", "mlx5_0\x1b\ntouch {m}"], "--ib-device .* " + CONTROL),
    ("slurm_mpirun.sbatch", ["--iface", "lo\u2028touch {m}"], "--iface .* " + CONTROL),
    ("hostfile", ["--hosts", "node1\ntouch {m} slots=9"], "host .* " + CONTROL),
])
def test_one_line_values_with_control_characters_are_refused(template, options, message, stubs, tmp_path):
    env, rec = stubs
    marker = tmp_path / "pwned"
    opts = [template, *base(template), *[o.replace("{m}", str(marker)) for o in options]]
    for dry_run in (True, False):
        proc = launch(opts, [] if template == "hostfile" else ["true"], env, dry_run)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == "" and re.search("horovod-q8 launch: " + message, proc.stderr), proc.stderr
    assert not marker.exists() and not list(rec.iterdir())  # nothing ran


def test_shell_word_quotes_every_character_on_one_line():
    for word in ["plain", "a b", "it's", "\\", "x\ny", "\t\r\x1b\x7f\x85\u2028", "$'", "é"]:
        quoted = launcher.shell_word(word)
        assert len(quoted.splitlines()) == 1  # no newline, \x85 or \u2028 left raw
        out = subprocess.run(["bash", "-c", "printf %s " + quoted], capture_output=True, check=True).stdout
        assert out == word.encode("utf-8")
    with pytest.raises(launcher.LaunchError, match="NUL"):
        launcher.shell_word("a\x00b")


def test_hostfile_entries_must_be_host_names(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text(f"node1 slots=2\nnode2;touch {tmp_path / 'x'} slots=2\n")
    args = launcher.build_parser().parse_args(["hostfile", "--gpus-per-node", "2", "--hostfile", str(hf)])
    args.command = []
    with pytest.raises(launcher.LaunchError, match=r"host 'node2;touch' is not a host name"):
        launcher.values_from_args(args)


def test_render_keeps_values_out_of_comments_and_off_other_lines():
    """render() itself, given raw values that skipped the option checks, still refuses."""
    args = launcher.build_parser().parse_args(["slurm_srun.sbatch", *base("slurm_srun.sbatch")])
    args.command = ["true"]
    values = launcher.values_from_args(args)
    with pytest.raises(launcher.LaunchError, match="TIME has several lines"):
        launcher.render("slurm_srun.sbatch", dict(values, TIME="01:00:00\ntouch /tmp/x"))
    with pytest.raises(launcher.LaunchError, match="COMMAND holds control characters"):
        launcher.render("slurm_srun.sbatch", dict(values, COMMAND="true\rtouch /tmp/x"))
    out = launcher.render("slurm_srun.sbatch", dict(values, IFACE="VALUE_IN_CODE"))
    comments = [line for line in out.splitlines() if launcher.is_comment(line)]
    assert "#   ${IFACE}      TCP interface for NCCL's bootstrap (NCCL_SOCKET_IFNAME)" in comments
    assert not any("VALUE_IN_CODE" in line for line in comments)
    assert "export NCCL_SOCKET_IFNAME=VALUE_IN_CODE" in out


@pytest.mark.parametrize("template", SCRIPTS)
def test_hostile_words_reach_the_command_exactly_and_run_nothing(template, stubs, tmp_path):
    env, rec = stubs
    marker = tmp_path / "pwned"
    bad = hostile(marker)
    command = ["true", bad, "it's", "$HOME", ""]  # the stub srun runs `true` with these
    mpi_arg = ["--mpi-arg=--tag=" + bad] if template in launcher.templates_taking("--mpi-arg") else []
    opts = [template, *base(template), "--env", "MSG=" + bad, *mpi_arg]
    dry = launch(opts, command, env, dry_run=True)
    assert dry.returncode == 0, dry.stderr
    subprocess.run(["bash", "-n"], input=dry.stdout, text=True, check=True)
    proc = launch(opts, command, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists()
    assert not list((tmp_path / "tmp").iterdir())  # the rendered script is removed after it ran
    argv, msg = recorded(rec, runner_of(template))
    assert argv[-len(command):] == command
    if template.startswith("mpirun") or template == "slurm_mpirun.sbatch":
        assert "--tag=" + bad in argv
    if template.startswith("mpirun"):
        assert argv[argv.index("MSG=" + bad) - 1] == "-x"
    else:
        assert msg == bad  # exported before the runner starts


PROGRAM = """import json, sys
with open(sys.argv[1], "w") as f:
    json.dump(sys.argv[2:], f)
"""


def test_multiline_python_c_runs_the_exact_program(stubs, tmp_path):
    env, rec = stubs
    out = tmp_path / "argv.json"
    words = ["a b", "it's", "$HOME", "tab\there", "two\nlines", "", "\x1b[31m", "é \u2028"]
    command = [sys.executable, "-c", PROGRAM, str(out), *words]
    args = launcher.build_parser().parse_args(["slurm_srun.sbatch", *base("slurm_srun.sbatch"), "--no-gpus"])
    args.command = command
    script = launcher.render("slurm_srun.sbatch", launcher.values_from_args(args))
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert script.splitlines()[-1].startswith("srun --mpi=pmix")  # the command stayed on its line
    (tmp_path / "job.sh").write_text(script)
    proc = subprocess.run(["bash", str(tmp_path / "job.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == words
    assert recorded(rec, "srun")[0] == ["--mpi=pmix", "--cpu-bind=none", *command]


@pytest.mark.parametrize("option,value", [("--gpus-per-node", "-3"), ("--gpus-per-node", "0"),
                                          ("--nodes", "0"), ("--nodes", "-2")])
def test_counts_must_be_positive(option, value, stubs):
    env, _ = stubs
    opts = ["mpirun_ompi4_ib.sh", *base("mpirun_ompi4_ib.sh"), option, value]
    args = launcher.build_parser().parse_args(opts)
    args.command = ["true"]
    with pytest.raises(launcher.LaunchError, match=f"{option} must be a whole number of at least 1, got {value}"):
        launcher.values_from_args(args)
    proc = launch(opts, ["true"], env, dry_run=True)
    assert proc.returncode == 2 and proc.stdout == "" and "at least 1" in proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("value,ok", [("01:00:00", True), ("30", True), ("2-12", True), ("1-00:30:00", True),
                                      ("UNLIMITED", True), ("1 hour", False), ("01:00:00;x", False), ("", False)])
def test_slurm_time_forms(value, ok):
    if ok:
        assert launcher.slurm_time(value) == value
    else:
        with pytest.raises(launcher.LaunchError, match="is not a Slurm time"):
            launcher.slurm_time(value)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs OpenMPI's mpirun (scripts/setup.sh installs it)")
def test_real_mpirun_accepts_the_rendered_hostfile(tmp_path):
    args = launcher.build_parser().parse_args(["hostfile", "--hosts", "node1,node2,node3", "--gpus-per-node", "2"])
    args.command = []
    text = launcher.render("hostfile", launcher.values_from_args(args))
    hosts = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert hosts == ["node1 slots=2", "node2 slots=2", "node3 slots=2"]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(text)
    # mpirun parses the file and maps 6 ranks onto the 3 hosts, then stops: --do-not-launch
    # starts no daemons (the agent /bin/false would fail if it did; local orteds posing as
    # hosts crashed in hwloc on a loaded CI machine). Every slot is used, so a lost or
    # duplicated line fails the map below.
    proc = subprocess.run(["mpirun", "--allow-run-as-root", "--mca", "plm_rsh_agent", "/bin/false",
                           "--hostfile", str(hostfile), "--display-map", "--do-not-launch", "-np", "6", "true"],
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "parse error" not in out and "not enough slots" not in out, out
    assert "Total slots allocated 6" in out, out
    for host in ("node1", "node2", "node3"):
        assert re.search(rf"Data for node: {host}\s+Num slots: 2\s+Max slots: 0\s+Num procs: 2", out), out
