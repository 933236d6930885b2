"""Checkpoints that cannot be read, said in one sentence that names the file.

TensorFlow reports a damaged checkpoint in its own words, often without the file: a cut-short
data file is `IndexError: Read less bytes than requested`, a cut-short index "file is too
short to be an sstable", and an unreadable `checkpoint` state file is logged and skipped, so
training would start again from epoch 0 and overwrite the checkpoints that are there."""
from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Iterator, List, Optional

from horovod_q8.errors import UserError

STATE_FILE = "checkpoint"  # CheckpointManager's list of checkpoints in a folder
_WHAT_TO_DO = ("put back an intact copy, or start a new --checkpoint-dir (the damaged "
               "checkpoint cannot be resumed)")


class CheckpointError(UserError, ValueError):
    """A checkpoint under --checkpoint-dir is missing, cut short, corrupt or of another model."""


def _data_files(prefix: str) -> List[Path]:
    p = Path(prefix)
    return sorted(p.parent.glob(p.name + ".data-*"))


def _missing(prefix: str, message: str) -> Optional[str]:
    """The file of `prefix` that is not there, if one is."""
    named = re.findall(r"(\S+\.data-\d{5}-of-\d{5})", message)
    for path in [f"{prefix}.index", *named, *map(str, _data_files(prefix))]:
        if not Path(path.rstrip(";:,")).exists():
            return path.rstrip(";:,")
    return None


def describe(prefix: str, error: BaseException) -> str:
    """What is wrong with checkpoint `prefix`, naming its file, from the error reading it."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    index, data = f"{prefix}.index", ", ".join(map(str, _data_files(prefix))) or f"{prefix}.data-*"
    shard = re.search(r"shard (\d+)", message)
    missing = _missing(prefix, message)
    if missing:
        what = f"{missing} is missing"
    elif isinstance(error, IndexError) or "Read less bytes" in message:
        what = f"{data} is shorter than its index says (cut short while written or copied)"
    elif "sstable" in message or (index in message and "corrupt" in message):
        what = f"{index} is cut short or corrupt ({message})"
    elif "Checksum does not match" in message:
        files = _data_files(prefix)
        name = str(files[int(shard.group(1))]) if shard and int(shard.group(1)) < len(files) else data
        what = f"{name} is corrupt: its bytes do not match the checksum in {index}"
    elif isinstance(error, ValueError):
        return (f"checkpoint {prefix} does not fit this model and setting ({message}); resume with "
                f"the options it was written with, or start a new --checkpoint-dir")
    else:
        what = f"{prefix} cannot be read ({type(error).__name__}: {message})"
    return f"checkpoint {prefix} cannot be restored: {what}; {_WHAT_TO_DO}"


@contextlib.contextmanager
def reading(prefix: str) -> Iterator[None]:
    """Turn what TensorFlow raises while reading checkpoint `prefix` into a CheckpointError."""
    import tensorflow as tf

    try:
        yield
    except CheckpointError:
        raise
    except (tf.errors.OpError, IndexError, ValueError) as e:
        raise CheckpointError(describe(prefix, e)) from None


def verify(prefix: str) -> None:
    """Read every tensor of checkpoint `prefix` once, so that a damaged file is found now and
    not at the first training step (Keras restores optimizer slots when it creates them)."""
    import tensorflow as tf

    with reading(prefix):
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)


def check_folder(directory: str) -> None:
    """Refuse a folder whose `checkpoint` state file cannot be read, or that holds checkpoints
    but no state file: TensorFlow would start from epoch 0 and write over them."""
    import tensorflow as tf

    folder = Path(directory)
    state = folder / STATE_FILE
    written = sorted(p.name[:-len(".index")] for p in folder.glob("ckpt-*.index"))
    if state.exists():
        try:
            ok = tf.train.get_checkpoint_state(str(folder)) is not None
        except (tf.errors.OpError, ValueError):
            ok = False
        if not ok:
            raise CheckpointError(f"{state} cannot be read (it lists the checkpoints of {folder}; found "
                                  f"{', '.join(written) or 'none'}): put back an intact copy, or start a "
                                  "new --checkpoint-dir")
    elif written:
        raise CheckpointError(f"{folder} holds {', '.join(written)} but no {STATE_FILE} file, which says "
                              "which is the latest: put it back, or start a new --checkpoint-dir "
                              "(training would write over these checkpoints)")
