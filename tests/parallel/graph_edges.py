"""What a traced TensorFlow op waits for: used by the graph checks of host-call order."""
from __future__ import annotations


def ancestors(op) -> set:
    """Every op `op` waits for, through data and control edges."""
    seen, todo = set(), [op]
    while todo:
        o = todo.pop()
        for a in [i.op for i in o.inputs] + list(o.control_inputs):
            if a not in seen:
                seen.add(a)
                todo.append(a)
    return seen
