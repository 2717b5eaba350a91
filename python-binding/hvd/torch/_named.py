"""The (name, parameter) pairs a distributed optimizer reduces by: every
rank must name the same parameters alike, so names are checked here once
for DistributedOptimizer and its Adasum variant."""

from typing import Any, List, Optional, Sequence, Tuple


def named_parameters_of(param_groups: Sequence[dict], named_parameters: Optional[Any]) -> List[Tuple[str, Any]]:
    """named_parameters as a list, or names made from the parameters'
    places in param_groups when it is None. Raises ValueError for entries
    that are not pairs, duplicate names, or parameters left unnamed."""
    if named_parameters is not None:
        named = list(named_parameters)
    else:
        named = [(f"allreduce.noname.{i}.{j}", v)
                 for i, group in enumerate(param_groups)
                 for j, v in enumerate(group["params"])]
    if any(not isinstance(p, tuple) for p in named):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    seen, dups = set(), set()
    for k, _ in named:
        if k in seen:
            dups.add(k)
        seen.add(k)
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                         % ", ".join(sorted(dups)))
    unnamed = {id(v) for group in param_groups for v in group["params"]} - {id(v) for _, v in named}
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters were not "
                         "named. Python object ids: %s" % ", ".join(str(i) for i in sorted(unnamed)))
    return named
