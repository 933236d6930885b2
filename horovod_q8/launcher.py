"""`horovod-q8 launch`: render a launch template from options, then run it or print it.

Templates live in launch/ (shipped as package data): horovodrun (Gloo, MPI), mpirun for
OpenMPI 4 (TCP + NCCL over InfiniBand) and OpenMPI 5 (UCX), Slurm batch scripts (srun with
PMIx, mpirun inside the allocation) and a hostfile. Placeholders are `${NAME}`.
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from string import Template
from typing import Dict, List, Optional

TEMPLATES = ("horovodrun_gloo.sh", "horovodrun_mpi.sh", "mpirun_ompi4_ib.sh", "mpirun_ompi5_ucx.sh",
             "slurm_srun.sbatch", "slurm_mpirun.sbatch", "hostfile")
_PLACEHOLDER = re.compile(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)\}")  # $${X} is a literal ${X}


class LaunchError(ValueError):
    """A template or its values are wrong; nothing was started."""


def template_text(name: str) -> str:
    """A template's text: from launch/ of a source checkout, or the installed package data."""
    if name not in TEMPLATES:
        raise LaunchError(f"unknown template {name!r}; templates: {', '.join(TEMPLATES)}")
    checkout = Path(__file__).resolve().parents[1] / "launch" / name
    if checkout.exists():
        return checkout.read_text()
    return resources.files("horovod_q8.launch").joinpath(name).read_text()


def placeholders(text: str) -> List[str]:
    """The placeholder names a template uses (comments included, so they are documented)."""
    return sorted(set(_PLACEHOLDER.findall(text)))


def render(name: str, values: Dict[str, str]) -> str:
    """The template filled in; every placeholder needs a value (an empty string is a value)."""
    text = template_text(name)
    missing = [p for p in placeholders(text) if values.get(p) is None]
    if missing:
        raise LaunchError(f"template {name} needs values for {', '.join(missing)}")
    return Template(text).substitute({k: str(v) for k, v in values.items() if v is not None})


def _hosts(args) -> List[str]:
    if args.hostfile:
        path = Path(args.hostfile)
        if not path.exists():
            raise LaunchError(f"hostfile {path} does not exist")
        hosts = []
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                hosts.append(line.split()[0])
        return hosts
    return [h for h in (args.hosts or "").split(",") if h]


def values_from_args(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    """Placeholder values from the command-line options, quoted for the shell."""
    hosts = _hosts(args)
    if hosts and args.nodes and len(hosts) != args.nodes:
        raise LaunchError(f"--nodes {args.nodes} but {len(hosts)} hosts given")
    nodes = args.nodes or len(hosts) or None
    env = []
    for item in args.env:
        if "=" not in item or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", item):
            raise LaunchError(f"--env wants VAR=value, got {item!r}")
        env.append(item.split("=", 1))
    gpus = args.gpus_per_node
    return {
        "NP": str(nodes * gpus) if nodes and gpus else None,
        "NODES": str(nodes) if nodes else None,
        "GPUS_PER_NODE": str(gpus) if gpus else None,
        "HOSTS": ",".join(f"{shlex.quote(h)}:{gpus}" for h in hosts) if hosts and gpus else None,
        "HOST_LINES": "\n".join(f"{h} slots={gpus}" for h in hosts) if hosts and gpus else None,
        "IFACE": shlex.quote(args.iface) if args.iface else None,
        "IB_DEVICE": shlex.quote(args.ib_device) if args.ib_device else None,
        "EXPORTS": "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env),
        "MPI_ENV": " ".join(f"-x {shlex.quote(k + '=' + v)}" for k, v in env),
        "MPI_EXTRA": " ".join(shlex.quote(a) for a in args.mpi_arg),
        "SBATCH_GPUS": "" if args.no_gpus else (f"#SBATCH --gpus-per-node={gpus}" if gpus else None),
        "JOB_NAME": shlex.quote(args.job_name),
        "TIME": args.time,
        "COMMAND": shlex.join(args.command) if args.command else None,
    }


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 launch", description=__doc__)
    p.add_argument("template", help=f"one of: {', '.join(TEMPLATES)}")
    p.add_argument("--nodes", type=int)
    p.add_argument("--gpus-per-node", type=int, help="processes per node")
    p.add_argument("--hosts", help="comma-separated host names")
    p.add_argument("--hostfile", help="OpenMPI hostfile to take the hosts from")
    p.add_argument("--iface", help="network interface between hosts (eth0, ib0, lo)")
    p.add_argument("--ib-device", help="InfiniBand HCA for NCCL / UCX, e.g. mlx5_0")
    p.add_argument("--env", action="append", default=[], help="VAR=value for every rank")
    p.add_argument("--mpi-arg", action="append", default=[], help="extra mpirun argument; write --mpi-arg=--flag")
    p.add_argument("--no-gpus", action="store_true", help="Slurm: ask for no GPUs (CPU-only nodes)")
    p.add_argument("--job-name", default="horovod_q8")
    p.add_argument("--time", default="01:00:00")
    p.add_argument("--dry-run", action="store_true", help="print the rendered script, run nothing")
    p.epilog = "End the options with --, then give the training command."
    return p


def split_command(argv: List[str]) -> tuple:
    """(options, command): the training command is everything after the first `--`."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def run(args: argparse.Namespace) -> int:
    try:
        text = render(args.template, values_from_args(args))
    except LaunchError as e:
        print(f"horovod-q8 launch: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(text)
        return 0
    with tempfile.NamedTemporaryFile("w", suffix="_" + args.template, delete=False) as f:
        f.write(text)
    if args.template == "hostfile":
        print(f.name)
        return 0
    runner = ["sbatch"] if args.template.endswith(".sbatch") else ["bash"]
    return subprocess.call(runner + [f.name])


def main(argv=None) -> None:
    options, command = split_command(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(options)
    args.command = command
    sys.exit(run(args))


if __name__ == "__main__":
    main()
