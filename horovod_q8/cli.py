"""The `horovod-q8` command: one entry point; a subcommand's module loads only when it runs,
so a missing optional piece (TensorFlow, Horovod, mpi4py, numba) breaks only what needs it."""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Dict, List, Optional, Tuple

# name: (module with build_parser(p) and run(args), help, run returns an exit code)
COMMANDS: Dict[str, Tuple[str, str, bool]] = {
    "train": ("horovod_q8.workloads.train", "Keras training under horovodrun/mpirun", False),
    "hybrid": ("horovod_q8.workloads.hybrid", "data-parallel conv + model-parallel FC, compressed activations", False),
    "compare": ("horovod_q8.workloads.compare", "the main job: 2-process training per compression, one table", True),
    "report": ("horovod_q8.workloads.accuracy_report", "accuracy table and plot from compare runs", False),
    "launch": ("horovod_q8.launcher", "render a launch template and run or print it", True),
    "doctor": ("horovod_q8.doctor", "check Horovod, TensorFlow, MPI, CuPy, kernels, network", True),
    "speedup": ("horovod_q8.speedup.command", "predicted time per step and speedup against GPU count", False),
    "cluster": ("horovod_q8.cluster.command", "run a job on emulated hosts (netns, tc-shaped links)", True),
}
BENCHES: Dict[str, Tuple[str, str, bool]] = {
    "formats": ("horovod_q8.bench.format_errors", "error and speed of every format", False),
    "codec": ("horovod_q8.bench.codec", "codec time per format against a float32 copy", False),
    "allreduce": ("horovod_q8.bench.allreduce", "compressed allreduce under horovodrun", False),
    "auto": ("horovod_q8.bench.auto", "Auto against every fixed compression under horovodrun", False),
    "training": ("horovod_q8.bench.training", "training images/s per compression, loopback or emulated hosts", True),
    "ddp": ("horovod_q8.bench.ddp", "DDP training steps per hook: allreduce, torch's fp16 hook, ddp_hook", False),
    "transfer": ("horovod_q8.bench.transfer", "mpi4py: link alpha/beta, codec rates, transfer and "
                                              "allreduce per format", False),
}

# Errors of other modules that are the user's to fix, found by name so that none is imported here.
USER_ERRORS: Tuple[Tuple[str, str], ...] = (
    ("horovod_q8.collective.agreement", "ConfigMismatchError"),  # ranks given different settings
    ("horovod_q8.cluster.netns", "ClusterError"),  # not root, no `ip` or `tc`, a bad --bandwidth
)


def _parser(chosen: Optional[str], bench: Optional[str]) -> argparse.ArgumentParser:
    """Every subcommand listed; only the chosen one's module imported for its options."""
    parser = argparse.ArgumentParser(prog="horovod-q8", description="8-bit and 4-bit compression for Horovod")
    sub = parser.add_subparsers(dest="subcommand", required=True)
    for name, (module, help_, _) in COMMANDS.items():
        p = sub.add_parser(name, help=help_)
        if name == chosen:
            importlib.import_module(module).build_parser(p)
    benches = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    for name, (module, help_, _) in BENCHES.items():
        p = benches.add_parser(name, help=help_)
        if chosen == "bench" and name == bench:
            importlib.import_module(module).build_parser(p)
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = argv[0] if argv and argv[0] in (*COMMANDS, "bench") else None
    bench = argv[1] if chosen == "bench" and len(argv) > 1 else None
    command: List[str] = []
    if chosen == "launch":
        from horovod_q8.launcher import split_command
        argv, command = split_command(argv)
    args = _parser(chosen, bench).parse_args(argv)
    args.command = command
    module, _, returns_code = BENCHES[args.bench] if args.subcommand == "bench" else COMMANDS[args.subcommand]
    try:
        result = importlib.import_module(module).run(args)
    except Exception as e:
        if not is_user_error(e):
            raise
        print(f"horovod-q8 {args.subcommand}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    if returns_code:
        sys.exit(result)


def is_user_error(error: BaseException) -> bool:
    """An error whose message says all (no traceback): a UserError, or one of USER_ERRORS
    whose module has been loaded (only a loaded module can have raised it)."""
    from horovod_q8.errors import UserError

    if isinstance(error, UserError):
        return True
    return any(isinstance(error, getattr(sys.modules[module], name)) for module, name in USER_ERRORS
               if module in sys.modules and hasattr(sys.modules[module], name))


if __name__ == "__main__":
    main()
