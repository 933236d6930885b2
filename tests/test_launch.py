"""Launch templates: every one renders, bad input stops before anything starts, and the
rendered local horovodrun and mpirun commands really train."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from horovod_q8 import launcher
from horovod_q8.startup import WorldSizeMismatch, check_world_size, launcher_world_size

OPTIONS = {"--nodes": ["--nodes", "2"], "--gpus-per-node": ["--gpus-per-node", "4"],
           "--hosts": ["--hosts", "node1,node2"], "--iface": ["--iface", "eth0"],
           "--ib-device": ["--ib-device", "mlx5_0"], "--env": ["--env", "MSG=hello world; rm -rf /"],
           "--mpi-arg": ["--mpi-arg=--report-bindings"]}
CMD = ["horovod-q8", "train", "imagenet", "--data-dir", "/data/my images", "--compression", "q8"]


def full(template):
    """Every option of OPTIONS that the template takes (the others are refused)."""
    return [w for option, words in OPTIONS.items() if template in launcher.templates_taking(option) for w in words]


def render(template, options=None, command=CMD):
    options = full(template) if options is None else options
    command = [] if template == "hostfile" else command
    args = launcher.build_parser().parse_args([template, *options])
    args.command = command
    return launcher.render(template, launcher.values_from_args(args))


@pytest.mark.parametrize("template", launcher.TEMPLATES)
def test_every_template_renders_and_documents_its_placeholders(template):
    text = launcher.template_text(template)
    code = "".join(line for line in text.splitlines(True) if not launcher.is_comment(line))
    comments = "".join(line for line in text.splitlines(True) if launcher.is_comment(line))
    assert launcher.placeholders(code), template
    assert set(launcher.placeholders(code)) <= set(launcher.placeholders(comments))  # each is documented
    out = render(template)
    rendered_code = [line for line in out.splitlines() if not launcher.is_comment(line)]
    assert set(launcher.placeholders("\n".join(rendered_code))) <= {"SLURM_NTASKS"}  # only shell variables
    if template != "hostfile":
        assert "'/data/my images'" in out  # the command is quoted, not split
        subprocess.run(["bash", "-n"], input=out, text=True, check=True)  # valid shell


def test_the_mpirun_template_tunes_as_the_emulated_cluster_does():
    """The collectives and TCP settings measured fastest (horovod_q8.cluster.mpirun) are the
    template's too, so that a user's cluster starts from what was measured."""
    from horovod_q8.cluster.mpirun import RING_ALLREDUCE, TCP_FLAGS
    words = " ".join(render("mpirun_ompi4_ib.sh").replace("\\\n", " ").split())
    for name, value in {**RING_ALLREDUCE, "btl_tcp_flags": TCP_FLAGS}.items():
        assert f"-mca {name} {value} " in words, name


def test_rendered_contents():
    assert "-mca pml ob1 -mca btl ^openib" in render("mpirun_ompi4_ib.sh")
    assert "-x NCCL_IB_HCA=mlx5_0" in render("mpirun_ompi4_ib.sh")
    assert "-x 'MSG=hello world; rm -rf /'" in render("mpirun_ompi4_ib.sh")
    assert "--mca pml ucx" in render("mpirun_ompi5_ucx.sh")
    assert "UCX_NET_DEVICES=mlx5_0:1" in render("mpirun_ompi5_ucx.sh")
    srun = render("slurm_srun.sbatch")
    assert "#SBATCH --nodes=2" in srun and "srun --mpi=pmix" in srun
    assert "export MSG='hello world; rm -rf /'" in srun
    assert '-np "${SLURM_NTASKS}"' in render("slurm_mpirun.sbatch")
    hostfile = [line for line in render("hostfile").splitlines() if line and not launcher.is_comment(line)]
    assert hostfile == ["node1 slots=4", "node2 slots=4"]  # every line: a host, once
    assert "-H node1:4,node2:4" in render("horovodrun_gloo.sh")


def test_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(launcher.LaunchError, match="unknown template 'pbs.sh'"):
        launcher.template_text("pbs.sh")
    with pytest.raises(launcher.LaunchError, match="needs --iface$"):
        render("mpirun_ompi4_ib.sh", ["--nodes", "2", "--gpus-per-node", "1", "--hosts", "a,b"])
    with pytest.raises(launcher.LaunchError, match="needs a command after --"):
        render("horovodrun_gloo.sh", full("horovodrun_gloo.sh"), [])
    with pytest.raises(launcher.LaunchError, match=r"needs --gpus-per-node \(processes per host"):
        render("horovodrun_gloo.sh", ["--hosts", "a,b", "--iface", "eth0"])
    with pytest.raises(launcher.LaunchError, match="needs --hosts or --hostfile, --gpus-per-node"):
        render("mpirun_ompi5_ucx.sh", ["--iface", "eth0"])
    with pytest.raises(launcher.LaunchError, match="needs --gpus-per-node, --nodes$"):
        render("slurm_srun.sbatch", ["--iface", "eth0"])
    with pytest.raises(launcher.LaunchError, match="--nodes 3 but 2 hosts"):
        render("hostfile", ["--nodes", "3", "--gpus-per-node", "1", "--hosts", "a,b"])
    with pytest.raises(launcher.LaunchError, match="VAR=value"):
        render("horovodrun_gloo.sh", full("horovodrun_gloo.sh") + ["--env", "no-equals"])
    with pytest.raises(launcher.LaunchError, match="does not exist"):
        render("hostfile", ["--gpus-per-node", "1", "--hostfile", str(tmp_path / "none")])


def test_hostfile_slots(tmp_path):
    """A hostfile's slots= give each host's processes (an admin's counts are kept, not flattened);
    --gpus-per-node gives them where the lines have none, and the two may not disagree."""
    hf = tmp_path / "hosts"
    hf.write_text("# comment\nalpha slots=8 max_slots=16  # trailing\nbeta slots=1\n\nalpha slots=2\n")
    out = render("horovodrun_gloo.sh", ["--hostfile", str(hf), "--iface", "eth0"])
    assert "-np 11 -H alpha:10,beta:1 " in out
    assert "alpha slots=10\nbeta slots=1" in render("hostfile", ["--hostfile", str(hf)])
    with pytest.raises(launcher.LaunchError, match="gives alpha slots=8 but --gpus-per-node is 4"):
        render("hostfile", ["--gpus-per-node", "4", "--hostfile", str(hf)])
    hf.write_text("alpha slots=4\nbeta slots=4\n")
    assert "alpha slots=4" in render("hostfile", ["--gpus-per-node", "4", "--hostfile", str(hf)])
    hf.write_text("alpha\nbeta\n")
    assert "-np 6 -H alpha:3,beta:3 " in render("horovodrun_mpi.sh", ["--gpus-per-node", "3", "--hostfile", str(hf),
                                                                      "--iface", "eth0"])
    for text, refusal in (("alpha slots=2\nbeta\n", "no slots= for beta: give slots= on every line"),
                          ("alpha slots=0\n", "line 1: alpha has slots=0"),
                          ("alpha cpus=4\n", "line 1: 'cpus=4' is not `slots=N`"),
                          ("# nobody\n\n", "names no host"),
                          ("-oProxyCommand=x slots=1\n", "is not a host name")):
        hf.write_text(text)
        with pytest.raises(launcher.LaunchError, match=refusal):
            render("hostfile", ["--hostfile", str(hf)])


def test_interfaces_and_devices():
    """--ib-device is optional (Ethernet clusters have none: NCCL and UCX then pick), takes a list
    of name[:port], and UCX gets a port for each; host names and interfaces never start with '-'."""
    for template in ("mpirun_ompi4_ib.sh", "mpirun_ompi5_ucx.sh", "slurm_mpirun.sbatch", "slurm_srun.sbatch"):
        options = [w for w in full(template) if w != "--ib-device" and w != "mlx5_0"]
        out = render(template, options)
        assert "NCCL_IB_HCA" not in "".join(ln for ln in out.splitlines(True) if not launcher.is_comment(ln))
        subprocess.run(["bash", "-n"], input=out, text=True, check=True)
    out = render("mpirun_ompi5_ucx.sh", ["--hosts", "a", "--gpus-per-node", "1", "--iface", "ib0",
                                         "--ib-device", "mlx5_0,mlx5_1:2"])
    assert "-x UCX_NET_DEVICES=mlx5_0:1,mlx5_1:2 -x NCCL_IB_HCA=mlx5_0,mlx5_1:2" in out
    assert "export NCCL_IB_HCA=mlx5_0:1\n" in render("slurm_srun.sbatch", ["--nodes", "1", "--gpus-per-node", "1",
                                                                          "--iface", "ib0", "--ib-device", "mlx5_0:1"])
    assert "--network-interfaces eth0,ib0 " in render("horovodrun_gloo.sh", ["--hosts", "a", "--gpus-per-node", "1",
                                                                            "--iface", "eth0,ib0"])
    for options, refusal in ((["--ib-device", "mlx5_0:"], "not an HCA name"), (["--ib-device", "^mlx5_0"], "NCCL's \\^ and = forms"),
                             (["--iface=-eth0"], "not an interface name"), (["--iface", "eth0 ib0"], "ip -br link"),
                             (["--hosts=--tag-output"], "not a host name")):
        base = ["--hosts", "a", "--gpus-per-node", "1", "--iface", "eth0"]
        given = {o.split("=")[0] for o in options if o.startswith("--")}
        base = [w for i, w in enumerate(base) if w not in given and (i == 0 or base[i - 1] not in given)]
        with pytest.raises(launcher.LaunchError, match=refusal):
            render("mpirun_ompi5_ucx.sh", [*base, *options])


def test_hosts_and_hostfile_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit):
        launcher.build_parser().parse_args(["hostfile", "--hosts", "a", "--hostfile", str(tmp_path / "h")])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_missing_runner_is_a_sentence(tmp_path):
    """Run (not --dry-run) where the template's program is nowhere on PATH: one sentence, rc 2,
    nothing started; the venv's bin folder is searched after PATH's own."""
    base = [sys.executable, "-m", "horovod_q8.cli", "launch"]
    env = dict(os.environ, PATH=str(tmp_path))
    proc = subprocess.run(base + ["mpirun_ompi4_ib.sh", "--hosts", "localhost", "--gpus-per-node", "1", "--iface",
                                  "lo", "--", "true"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "mpirun is not on PATH" in proc.stderr and "Traceback" not in proc.stderr
    os.environ["PATH"], saved = str(tmp_path), os.environ["PATH"]
    try:
        assert launcher.runner_environment()["PATH"].split(os.pathsep) == [str(tmp_path), os.path.dirname(sys.executable)]
    finally:
        os.environ["PATH"] = saved


def test_cli_dry_run_and_errors():
    base = [sys.executable, "-m", "horovod_q8.cli", "launch"]
    ok = subprocess.run(base + ["horovodrun_gloo.sh", *full("horovodrun_gloo.sh"), "--dry-run", "--", *CMD],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "horovodrun --gloo -np 8" in ok.stdout, ok.stderr
    bad = subprocess.run(base + ["horovodrun_gloo.sh", "--dry-run"], capture_output=True, text=True)
    assert bad.returncode == 2 and "horovodrun_gloo.sh needs a command after --, --hosts or --hostfile" in bad.stderr


def test_launch_md_shows_what_the_templates_render():
    """docs/launch.md's walk-throughs: each `horovod-q8 launch ...` command there, run with
    --dry-run, prints the script the page shows after it (comment lines aside)."""
    import re
    import shlex
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "launch.md").read_text()
    pairs = re.findall(r"```console\n\$ (horovod-q8 launch .*?)\n```\n.*?```bash\n(.*?)```", doc, re.S)
    assert len(pairs) == 2, pairs
    for command, shown in pairs:
        words = shlex.split(command.replace("\\\n", " "))
        cut = words.index("--")
        run = subprocess.run([sys.executable, "-m", "horovod_q8.cli", *words[1:cut], "--dry-run", *words[cut:]],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        code = lambda t: [ln for ln in t.strip().splitlines() if not ln.startswith("#") or ln.startswith("#SBATCH")]  # noqa: E731
        assert code(run.stdout) == code(shown), command


def test_world_size_check():
    check_world_size(2, {"OMPI_COMM_WORLD_SIZE": "2"})
    check_world_size(4, {})
    assert launcher_world_size({"SLURM_STEP_NUM_TASKS": "8"}) == ("SLURM_STEP_NUM_TASKS", 8)
    with pytest.raises(WorldSizeMismatch, match="srun without PMI"):
        check_world_size(1, {"SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8"})


def test_world_size_inside_an_allocation():
    """horovodrun or mpirun inside an sbatch script: the allocation's SLURM_NTASKS (and a batch
    step's task count) reach every rank, but the launcher that started them says the size."""
    check_world_size(2, {"SLURM_NTASKS": "4"})
    check_world_size(2, {"SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "1", "HOROVOD_SIZE": "2"})
    check_world_size(8, {"SLURM_STEP_NUM_TASKS": "1", "OMPI_COMM_WORLD_SIZE": "8"})
    with pytest.raises(WorldSizeMismatch, match="HOROVOD_SIZE=4"):
        check_world_size(2, {"HOROVOD_SIZE": "4"})


TRAIN = [sys.executable, "-m", "horovod_q8.workloads.train", "mnist", "--synthetic",
         "--steps-per-epoch", "4", "--epochs", "1", "--compression", "q8", "--fused", "--verbose", "0"]


@pytest.mark.parallel
@pytest.mark.parametrize("template,extra", [
    ("horovodrun_gloo.sh", []),
    ("mpirun_ompi4_ib.sh", ["--mpi-arg=--allow-run-as-root", "--mpi-arg=--oversubscribe"]),
])
def test_rendered_local_launch_trains(template, extra, tmp_path):
    from test_parallel import horovodrun
    ib = ["--ib-device", "mlx5_0"] if template.startswith("mpirun") else []
    script = render(template, ["--nodes", "1", "--gpus-per-node", "2", "--hosts", "localhost",
                               "--iface", "lo", *ib, *extra], TRAIN)
    bindir = os.path.dirname(horovodrun())
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=600, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "SUMMARY compression=q8 fused=True ranks=2" in out, out[-4000:]


@pytest.mark.parametrize("template", [t for t in launcher.TEMPLATES if t in launcher.templates_taking("--env")])
def test_ranks_get_mallocs_huge_pages_unless_told_otherwise(template, monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    text = render(template)
    assert "GLIBC_TUNABLES=glibc.malloc.hugetlb=1" in text and "MSG=" in text, text
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=4")
    assert "GLIBC_TUNABLES=glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1" in render(template)
    mine = render(template, full(template) + ["--env", "GLIBC_TUNABLES="])  # the user's own value, even empty
    assert "hugetlb" not in mine and "GLIBC_TUNABLES=" in mine, mine


def test_malloc_huge_pages_adds_to_the_tunables_given():
    from horovod_q8.startup import malloc_huge_pages
    assert malloc_huge_pages("") == "glibc.malloc.hugetlb=1"
    assert malloc_huge_pages("glibc.malloc.arena_max=4") == "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1"
    assert malloc_huge_pages("glibc.malloc.hugetlb=0") == "glibc.malloc.hugetlb=0"
