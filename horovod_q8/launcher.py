"""`horovod-q8 launch`: render a launch template from options, then run it or print it.

Templates live in launch/ (shipped as package data): horovodrun (Gloo, MPI), mpirun for
OpenMPI 4 (TCP + NCCL over InfiniBand) and OpenMPI 5 (UCX), Slurm batch scripts (srun with
PMIx, mpirun inside the allocation) and a hostfile. Placeholders are `${NAME}`. Comment
lines keep their placeholders as written (they document the template); values are filled
into commands and `#SBATCH` directives only. Every value is one line: words are
shell-quoted (with `$'...'` when they hold control characters, so a multi-line
`python -c` program reaches the command exactly), and values that must be one line
(hosts, interfaces, job name, time) are refused when they hold a control character.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unicodedata
from importlib import resources
from pathlib import Path
from string import Template
from typing import Dict, Iterable, List, Optional, Tuple

from horovod_q8.errors import UserError
from horovod_q8.startup import MALLOC_TUNABLES, malloc_huge_pages

TEMPLATES = ("horovodrun_gloo.sh", "horovodrun_mpi.sh", "mpirun_ompi4_ib.sh", "mpirun_ompi5_ucx.sh",
             "slurm_srun.sbatch", "slurm_mpirun.sbatch", "hostfile")
_PLACEHOLDER = re.compile(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)\}")  # $${X} is a literal ${X}
_CONTROL = ("Cc", "Zl", "Zp")  # control characters and Unicode line/paragraph separators
_HOST = re.compile(r"^[A-Za-z0-9_.@-]+$")
# Slurm's --time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or no limit.
_SLURM_TIME = re.compile(r"^(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE)$")


# The placeholders each option fills. A template whose commands use none of an option's
# placeholders would drop that option without a word, so the option is refused there.
OPTION_SLOTS: Dict[str, Tuple[str, ...]] = {
    "--nodes": ("NP", "NODES", "HOST_LINES"),  # hostfile: checked against the hosts' count
    "--gpus-per-node": ("NP", "GPUS_PER_NODE", "HOSTS", "HOST_LINES"),
    "--hosts": ("HOSTS", "HOST_LINES"),
    "--hostfile": ("HOSTS", "HOST_LINES"),
    "--iface": ("IFACE",),
    "--ib-device": ("IB_DEVICE",),
    "--env": ("EXPORTS", "MPI_ENV"),
    "--mpi-arg": ("MPI_EXTRA",),
    "--no-gpus": ("SBATCH_GPUS",),
    "--job-name": ("JOB_NAME",),
    "--time": ("TIME",),
    "the command after --": ("COMMAND",),
}
# What to do instead, where there is something.
_INSTEAD = {
    "--mpi-arg": "horovodrun and srun take no mpirun arguments",
    "--hosts": "Slurm chooses the hosts: give --nodes",
    "--hostfile": "Slurm chooses the hosts: give --nodes",
    "--ib-device": "give --env NCCL_IB_HCA=<device> instead",
}
DEFAULT_JOB_NAME = "horovod_q8"
DEFAULT_TIME = "01:00:00"


class LaunchError(UserError, ValueError):
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


def slots(name: str) -> List[str]:
    """The placeholders a template's commands and directives use (comments left out)."""
    return placeholders("".join(line for line in template_text(name).splitlines(True)
                                if not is_comment(line)))


def templates_taking(option: str) -> List[str]:
    """The templates that have a place for `option` (a key of OPTION_SLOTS)."""
    return [t for t in TEMPLATES if set(OPTION_SLOTS[option]) & set(slots(t))]


def given_options(args: argparse.Namespace) -> List[str]:
    """The OPTION_SLOTS keys the user gave (not left at their default)."""
    given = {"--nodes": args.nodes is not None, "--gpus-per-node": args.gpus_per_node is not None,
             "--hosts": bool(args.hosts), "--hostfile": bool(args.hostfile), "--iface": bool(args.iface),
             "--ib-device": bool(args.ib_device), "--env": bool(args.env), "--mpi-arg": bool(args.mpi_arg),
             "--no-gpus": args.no_gpus, "--job-name": args.job_name is not None,
             "--time": args.time is not None, "the command after --": bool(getattr(args, "command", None))}
    return [option for option in OPTION_SLOTS if given[option]]


def refuse_unused(template: str, args: argparse.Namespace) -> None:
    """Refuse every given option that `template` has no place for, naming the ones that do."""
    have = set(slots(template))
    lines = []
    for option in given_options(args):
        if have & set(OPTION_SLOTS[option]):
            continue
        hint = f"; {_INSTEAD[option]}" if option in _INSTEAD else ""
        lines.append(f"{option} has no place in {template}, it would be dropped (templates that take it: "
                     f"{', '.join(templates_taking(option)) or 'none'}{hint})")
    if lines:
        raise LaunchError("\n".join(lines))


def is_comment(line: str) -> bool:
    """A shell / hostfile comment line; `#SBATCH` directives are not comments."""
    stripped = line.lstrip()
    return stripped.startswith("#") and not stripped.startswith("#SBATCH")


def control_characters(value: str) -> List[str]:
    """The control characters (newline, tab, NUL, ...) in value, as escapes like '\\n'."""
    return sorted({repr(c)[1:-1] for c in value if unicodedata.category(c) in _CONTROL})


def shell_word(value: str) -> str:
    """value as one shell word on one line: shlex.quote, or $'...' when it holds control
    characters (each written as an escape, so the word never spans lines)."""
    if "\0" in value:
        raise LaunchError(f"{value!r} holds a NUL character, which no command argument can carry")
    if not control_characters(value):
        return shlex.quote(value)
    out = []
    for c in value:
        if c in "\\'":
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif unicodedata.category(c) in _CONTROL:  # the UTF-8 bytes: exact whatever the locale
            out.extend(f"\\x{b:02x}" for b in c.encode("utf-8"))
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def shell_words(words: Iterable[str]) -> str:
    """Words joined for a command line, each quoted by shell_word."""
    return " ".join(shell_word(w) for w in words)


def one_line(option: str, value: str) -> str:
    """value, refused if it holds a control character (it goes where only one line can)."""
    bad = control_characters(value)
    if bad:
        raise LaunchError(f"{option} {value!r} holds control characters ({', '.join(bad)}); "
                          "give it on one line without them")
    return value


def _check_line(name: str, lineno: int, line: str, values: Dict[str, str]) -> None:
    """Only a placeholder alone on its line may take a multi-line value (EXPORTS,
    HOST_LINES: one complete line each); anything else would leave its line."""
    for p in _PLACEHOLDER.findall(line):
        value = values[p]
        bad = control_characters(value.replace("\n", ""))
        if bad:
            raise LaunchError(f"value of {p} holds control characters ({', '.join(bad)})")
        if "\n" in value and line.strip() != "${" + p + "}":
            raise LaunchError(f"template {name} line {lineno}: {p} has several lines but shares its "
                              "line with other text; give it on one line")


def render(name: str, values: Dict[str, str]) -> str:
    """The template filled in; every placeholder needs a value (an empty string is a value).
    Comment lines are kept as written, so no value ever lands in a comment."""
    text = template_text(name)
    missing = [p for p in placeholders(text) if values.get(p) is None]
    if missing:
        raise LaunchError(f"template {name} needs values for {', '.join(missing)}")
    values = {k: str(v) for k, v in values.items() if v is not None}
    lines = []
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        if is_comment(line):
            lines.append(line)
            continue
        _check_line(name, lineno, line, values)
        lines.append(Template(line).substitute(values))
    return "".join(lines)


def host_name(value: str) -> str:
    """A host name or address, refused if it could not stand as one word in a hostfile or -H."""
    one_line("host", value)
    if not _HOST.match(value):
        raise LaunchError(f"host {value!r} is not a host name; use letters, digits, '.', '-', '_' "
                          "(and user@host), one host per entry")
    return value


def _hosts(args: argparse.Namespace) -> List[str]:
    """The host names from --hostfile (first word of each line) or --hosts, each checked."""
    if args.hostfile:
        path = Path(args.hostfile)
        if not path.is_file():
            raise LaunchError(f"hostfile {path} does not exist or is not a file")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise LaunchError(f"cannot read hostfile {path}: {e}") from None
        hosts = []
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                hosts.append(line.split()[0])
    else:
        hosts = [h for h in (args.hosts or "").split(",") if h]
    return [host_name(h) for h in hosts]


def merge_hosts(hosts: List[str]) -> Dict[str, int]:
    """Each host once, in first-seen order, with how often it was named: OpenMPI refuses a
    hostfile that gives one host's slots on two lines, so their slots are added instead."""
    counts: Dict[str, int] = {}
    for h in hosts:
        counts[h] = counts.get(h, 0) + 1
    return counts


def positive(option: str, value: Optional[int]) -> Optional[int]:
    """value, refused unless it is None (not given) or a whole number of at least 1."""
    if value is not None and value < 1:
        raise LaunchError(f"{option} must be a whole number of at least 1, got {value}")
    return value


def slurm_time(value: str) -> str:
    """A Slurm --time value, refused unless it has one of Slurm's forms."""
    one_line("--time", value)
    if not _SLURM_TIME.match(value):
        raise LaunchError(f"--time {value!r} is not a Slurm time; use minutes, H:M:S, D-H:M:S "
                          "(e.g. 01:00:00) or UNLIMITED")
    return value


def _env(items: List[str]) -> List[List[str]]:
    """[name, value] pairs from the --env VAR=value items."""
    env = []
    for item in items:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", item):
            raise LaunchError(f"--env wants VAR=value, got {item!r}")
        env.append(item.split("=", 1))
    return env


def values_from_args(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    """Placeholder values from the command-line options, quoted for the shell."""
    refuse_unused(args.template, args)
    positive("--nodes", args.nodes)
    gpus = positive("--gpus-per-node", args.gpus_per_node)
    named = _hosts(args)
    hosts = merge_hosts(named)
    if hosts and args.nodes and len(hosts) != args.nodes:
        twice = [f"{h} named {n} times" for h, n in hosts.items() if n > 1]
        raise LaunchError(f"--nodes {args.nodes} but {len(hosts)} hosts given"
                          + (f" ({', '.join(twice)}: one host, its slots added)" if twice else ""))
    nodes = args.nodes or len(hosts) or None
    np_ = len(named) * gpus if hosts and gpus else (nodes * gpus if nodes and gpus else None)
    env = _env(args.env)
    if MALLOC_TUNABLES not in {k for k, _ in env}:  # `--env GLIBC_TUNABLES=` keeps glibc's defaults
        env.append([MALLOC_TUNABLES, malloc_huge_pages(os.environ.get(MALLOC_TUNABLES, ""))])
    iface = one_line("--iface", args.iface) if args.iface else None
    ib_device = one_line("--ib-device", args.ib_device) if args.ib_device else None
    return {
        "NP": str(np_) if np_ else None,
        "NODES": str(nodes) if nodes else None,
        "GPUS_PER_NODE": str(gpus) if gpus else None,
        "HOSTS": ",".join(f"{h}:{gpus * n}" for h, n in hosts.items()) if hosts and gpus else None,
        "HOST_LINES": "\n".join(f"{h} slots={gpus * n}" for h, n in hosts.items()) if hosts and gpus else None,
        "IFACE": shlex.quote(iface) if iface else None,
        "IB_DEVICE": shlex.quote(ib_device) if ib_device else None,
        "EXPORTS": "\n".join(f"export {k}={shell_word(v)}" for k, v in env),
        "MPI_ENV": " ".join(f"-x {shell_word(k + '=' + v)}" for k, v in env),
        "MPI_EXTRA": shell_words(args.mpi_arg),
        "SBATCH_GPUS": "" if args.no_gpus else (f"#SBATCH --gpus-per-node={gpus}" if gpus else None),
        "JOB_NAME": shlex.quote(one_line("--job-name", DEFAULT_JOB_NAME if args.job_name is None else args.job_name)),
        "TIME": slurm_time(DEFAULT_TIME if args.time is None else args.time),
        "COMMAND": shell_words(args.command) if args.command else None,
    }


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 launch", description=__doc__)
    p.add_argument("template", help=f"one of: {', '.join(TEMPLATES)}")
    p.add_argument("--nodes", type=int)
    p.add_argument("--gpus-per-node", type=int, help="processes per node")
    p.add_argument("--hosts", help="comma-separated host names; a host named twice gets the slots of both")
    p.add_argument("--hostfile", help="OpenMPI hostfile to take the hosts from")
    p.add_argument("--iface", help="network interface between hosts (eth0, ib0, lo)")
    p.add_argument("--ib-device", help="InfiniBand HCA for NCCL / UCX, e.g. mlx5_0")
    p.add_argument("--env", action="append", default=[], help="VAR=value for every rank")
    p.add_argument("--mpi-arg", action="append", default=[], help="extra mpirun argument; write --mpi-arg=--flag")
    p.add_argument("--no-gpus", action="store_true", help="Slurm: ask for no GPUs (CPU-only nodes)")
    p.add_argument("--job-name", help=f"Slurm (default {DEFAULT_JOB_NAME})")
    p.add_argument("--time", help=f"Slurm (default {DEFAULT_TIME})")
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
    try:
        return subprocess.call(runner + [f.name])
    finally:  # sbatch keeps its own copy of the script once it has submitted it
        Path(f.name).unlink(missing_ok=True)


def main(argv=None) -> None:
    options, command = split_command(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(options)
    args.command = command
    sys.exit(run(args))


if __name__ == "__main__":
    main()
