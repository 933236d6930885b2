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
import shutil
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
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"  # never a leading '-': it would read as an option
_HOST = re.compile(rf"^(?:{_NAME}@)?{_NAME}$")
# Interfaces (eth0, eth0:1 an alias, eth0,ib0) and HCAs (mlx5_0, mlx5_0:1,mlx5_1:2): name[:number] lists.
_NAME_LIST = re.compile(rf"^{_NAME}(?::\d+)?(?:,{_NAME}(?::\d+)?)*$")
_HOSTFILE_SLOTS = re.compile(r"^slots=(\d+)$")
_HOSTFILE_IGNORED = re.compile(r"^max[-_]slots=\d+$")  # OpenMPI's cap on oversubscription: no slots of its own
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
    "--ib-device": ("NCCL_IB_ARGS", "UCX_ARGS", "IB_EXPORTS"),
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
_HOST_SLOTS = ("NP", "HOSTS", "HOST_LINES")  # filled from the hosts and their processes
_FILLED_BY = {"NODES": "--nodes", "GPUS_PER_NODE": "--gpus-per-node", "IFACE": "--iface",
              "SBATCH_GPUS": "--gpus-per-node (or --no-gpus)", "COMMAND": "a command after --"}
# The program each runnable template needs where it is run (a batch script's run on the nodes).
RUNNERS = {"horovodrun_gloo.sh": "horovodrun", "horovodrun_mpi.sh": "horovodrun", "mpirun_ompi4_ib.sh": "mpirun",
           "mpirun_ompi5_ucx.sh": "mpirun", "slurm_srun.sbatch": "sbatch", "slurm_mpirun.sbatch": "sbatch"}
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
                          "(and user@host), starting with a letter or digit, one host per entry")
    return value


def _hostfile_line(path: Path, lineno: int, words: List[str]) -> Tuple[str, Optional[int]]:
    """(host, slots or None) from one hostfile line: `host [slots=N] [max_slots=M]`."""
    host_name(words[0])
    slots = None
    for word in words[1:]:
        match = _HOSTFILE_SLOTS.match(word)
        if match:
            slots = int(match.group(1))
        elif not _HOSTFILE_IGNORED.match(word):
            raise LaunchError(f"hostfile {path} line {lineno}: {word!r} is not `slots=N` or `max_slots=N`")
    if slots == 0:
        raise LaunchError(f"hostfile {path} line {lineno}: {words[0]} has slots=0, so it would run no "
                          "process; leave the host out")
    return words[0], slots


def _hosts(args: argparse.Namespace) -> List[Tuple[str, Optional[int]]]:
    """(host, slots or None) from --hostfile (`host [slots=N]` lines) or --hosts, each checked."""
    if args.hostfile:
        path = Path(args.hostfile)
        if not path.is_file():
            raise LaunchError(f"hostfile {path} does not exist or is not a file")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise LaunchError(f"cannot read hostfile {path}: {e}") from None
        hosts = []
        for lineno, line in enumerate(text.splitlines(), 1):
            words = line.split("#", 1)[0].split()
            if words:
                hosts.append(_hostfile_line(path, lineno, words))
        if not hosts:
            raise LaunchError(f"hostfile {path} names no host (only blank lines and comments)")
    else:
        hosts = [(h, None) for h in (args.hosts or "").split(",") if h]
    return [(host_name(h), n) for h, n in hosts]


def host_slots(hosts: List[Tuple[str, Optional[int]]], gpus: Optional[int]) -> Dict[str, int]:
    """Each host once, in first-seen order, with its processes: a hostfile's slots=, else
    --gpus-per-node; a host named twice gets both entries' (OpenMPI refuses a hostfile that gives
    one host's slots on two lines). Empty when the processes per host are not known."""
    counts: Dict[str, int] = {}
    for host, slots in hosts:
        if slots is not None and gpus is not None and slots != gpus:
            raise LaunchError(f"the hostfile gives {host} slots={slots} but --gpus-per-node is {gpus}; "
                              "give one of them")
        n = gpus if slots is None else slots
        if n is None:
            if any(s is not None for _, s in hosts):
                raise LaunchError(f"the hostfile gives no slots= for {host}: give slots= on every line, "
                                  "or --gpus-per-node")
            return {}
        counts[host] = counts.get(host, 0) + n
    return counts


def positive(option: str, value: Optional[int]) -> Optional[int]:
    """value, refused unless it is None (not given) or a whole number of at least 1."""
    if value is not None and value < 1:
        raise LaunchError(f"{option} must be a whole number of at least 1, got {value}")
    return value


def interfaces(value: str) -> str:
    """An --iface value: one interface name or a comma-separated list (eth0, ib0, eth0,ib0)."""
    one_line("--iface", value)
    if not _NAME_LIST.match(value):
        raise LaunchError(f"--iface {value!r} is not an interface name (letters, digits, '.', '-', '_', "
                          "starting with a letter or digit) or a comma-separated list of them; "
                          "`ip -br link` lists this host's")
    return value


def ib_devices(value: str) -> List[str]:
    """--ib-device as a list of HCAs, each `name` or `name:port` (mlx5_0, mlx5_0:1,mlx5_1:1)."""
    one_line("--ib-device", value)
    if not _NAME_LIST.match(value):
        raise LaunchError(f"--ib-device {value!r} is not an HCA name or a comma-separated list of "
                          "`name[:port]` (mlx5_0, mlx5_0:1,mlx5_1:1; `ibv_devices` lists them); for "
                          "NCCL's ^ and = forms give --env NCCL_IB_HCA=... instead")
    return value.split(",")


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


def missing_options(template: str, values: Dict[str, Optional[str]], args: argparse.Namespace) -> List[str]:
    """The options still needed for `template`'s placeholders that have no value."""
    needs = []
    for p in slots(template):
        if values.get(p) is not None:
            continue
        if p in _HOST_SLOTS:
            if not (args.hosts or args.hostfile):
                needs.append("--hosts or --hostfile")
            if args.gpus_per_node is None:
                needs.append("--gpus-per-node (processes per host; or slots= on every hostfile line)")
        elif not (p == "SBATCH_GPUS" and args.gpus_per_node is None):  # that one is said by GPUS_PER_NODE
            needs.append(_FILLED_BY.get(p, p))
    return list(dict.fromkeys(needs))


def values_from_args(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    """Placeholder values from the command-line options, quoted for the shell; refused with
    the options still needed when the template has a place they would fill."""
    values = _values(args)
    needs = missing_options(args.template, values, args)
    if needs:
        raise LaunchError(f"{args.template} needs {', '.join(needs)}")
    return values


def _values(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    refuse_unused(args.template, args)
    positive("--nodes", args.nodes)
    gpus = positive("--gpus-per-node", args.gpus_per_node)
    named = _hosts(args)
    distinct = list(dict.fromkeys(h for h, _ in named))
    if distinct and args.nodes and len(distinct) != args.nodes:
        twice = [f"{h} named {n} times" for h in distinct if (n := sum(x == h for x, _ in named)) > 1]
        raise LaunchError(f"--nodes {args.nodes} but {len(distinct)} hosts given"
                          + (f" ({', '.join(twice)}: one host, its slots added)" if twice else ""))
    hosts = host_slots(named, gpus)
    nodes = args.nodes or len(distinct) or None
    np_ = sum(hosts.values()) if hosts else (nodes * gpus if nodes and gpus and not named else None)
    env = _env(args.env)
    if MALLOC_TUNABLES not in {k for k, _ in env}:  # `--env GLIBC_TUNABLES=` keeps glibc's defaults
        env.append([MALLOC_TUNABLES, malloc_huge_pages(os.environ.get(MALLOC_TUNABLES, ""))])
    iface = interfaces(args.iface) if args.iface else None
    ib = ib_devices(args.ib_device) if args.ib_device else []
    return {
        "NP": str(np_) if np_ else None,
        "NODES": str(nodes) if nodes else None,
        "GPUS_PER_NODE": str(gpus) if gpus else None,
        "HOSTS": ",".join(f"{h}:{n}" for h, n in hosts.items()) if hosts else None,
        "HOST_LINES": "\n".join(f"{h} slots={n}" for h, n in hosts.items()) if hosts else None,
        "IFACE": shlex.quote(iface) if iface else None,
        # Without --ib-device these render nothing: NCCL and UCX then pick the devices themselves
        # (on Ethernet, none), where an empty NCCL_IB_HCA or UCX_NET_DEVICES would select none.
        "NCCL_IB_ARGS": f"-x NCCL_IB_HCA={','.join(ib)}" if ib else "",
        "UCX_ARGS": "-x UCX_NET_DEVICES=" + ",".join(d if ":" in d else d + ":1" for d in ib) if ib else "",
        "IB_EXPORTS": f"export NCCL_IB_HCA={','.join(ib)}" if ib else "",
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
    where = p.add_mutually_exclusive_group()
    where.add_argument("--hosts", help="comma-separated host names; a host named twice gets the slots of both")
    where.add_argument("--hostfile", help="OpenMPI hostfile (`host [slots=N]` lines) to take the hosts from; "
                                          "slots= there, or --gpus-per-node, gives each host's processes")
    p.add_argument("--iface", help="network interface(s) between hosts (eth0, ib0, lo; eth0,ib0)")
    p.add_argument("--ib-device", help="InfiniBand HCA(s) for NCCL / UCX, e.g. mlx5_0 or mlx5_0:1,mlx5_1:1; "
                                       "leave it out on Ethernet")
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


def runner_environment() -> Dict[str, str]:
    """This environment with this Python's bin folder last on PATH: where the venv is not
    activated, its horovodrun and horovod-q8 are found there; PATH's own come first."""
    env = dict(os.environ)
    here = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    if here not in path.split(os.pathsep):
        env["PATH"] = (path + os.pathsep if path else "") + here
    return env


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
    env = runner_environment()
    program = RUNNERS[args.template]
    if shutil.which(program, path=env["PATH"]) is None:
        Path(f.name).unlink(missing_ok=True)
        print(f"horovod-q8 launch: {program} is not on PATH (nor beside this Python, {Path(sys.executable).parent}); "
              + ("run it on a Slurm login node" if program == "sbatch" else
                 "install it or activate the environment that has it") + "; --dry-run prints the script", file=sys.stderr)
        return 2
    runner = ["sbatch"] if args.template.endswith(".sbatch") else ["bash"]
    try:
        return subprocess.call(runner + [f.name], env=env)
    finally:  # sbatch keeps its own copy of the script once it has submitted it
        Path(f.name).unlink(missing_ok=True)


def main(argv=None) -> None:
    options, command = split_command(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(options)
    args.command = command
    sys.exit(run(args))


if __name__ == "__main__":
    main()
