"""What a transformers model's attention modules are: the modules whose forward calls the
attention interface, their layer numbers and stacks, and the keys each was declared to see
(from its config), which each call checks against its mask."""

from __future__ import annotations

import inspect as _inspect
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ._native import UsageError

# per class: whether its forward calls transformers' attention interface
_ROUTED: Dict[type, bool] = {}

def _routed(module: Any) -> bool:
    """Whether `module`'s forward calls transformers' attention interface."""
    cls = type(module)
    if cls not in _ROUTED:
        try:
            source = _inspect.getsource(cls.forward)
        except (OSError, TypeError):
            source = ""
        _ROUTED[cls] = "ALL_ATTENTION_FUNCTIONS" in source or "attention_interface" in source
    return _ROUTED[cls]


@dataclass(frozen=True)
class _Module:
    """An attention module as the native capture takes it (0-based layer number)."""

    name: str
    number: int
    keys: str
    size: int
    softcap: Optional[float]
    sinks: bool


def _layer_types(config: Any) -> List[Any]:
    return list(getattr(config, "layer_types", None) or [])


def _declared(name: str, module: Any, number: int) -> _Module:
    """What `module` says of itself and its config: the keys its queries see (by the
    config's `layer_types` where it has them, else a `sliding_window` of the module or its
    config), its soft-cap and its sinks. Each call checks it against the mask."""
    config = getattr(module, "config", None)
    layer_index = getattr(module, "layer_idx", None)
    layer_index = number if layer_index is None else layer_index
    types = _layer_types(config)
    layer_type = types[layer_index] if 0 <= layer_index < len(types) else None
    window = getattr(module, "sliding_window", None) or getattr(config, "sliding_window", None)
    keys, size = "causal", 0
    if getattr(module, "is_causal", True) is False:
        # an encoder's or a vision tower's: every key, or those within the config's
        # sliding_window on either side (ModernBERT's local layers)
        local = layer_type == "sliding_attention"
        keys, size = "bidirectional", int(getattr(config, "sliding_window", 0) or 0) if local else 0
    elif layer_type == "chunked_attention":
        keys, size = "chunked", int(getattr(config, "attention_chunk_size"))
    elif layer_type == "sliding_attention":
        keys, size = "sliding", int(window)
    elif layer_type is None and window and getattr(config, "use_sliding_window", True) is not False:
        keys, size = "sliding", int(window)
    softcap = getattr(config, "attn_logit_softcapping", None)
    sinks = getattr(module, "sinks", None) is not None
    return _Module(name, number, keys, size, float(softcap) if softcap else None, sinks)


def _attention_modules(model: Any) -> List[Tuple[str, _Module]]:
    """Every module of `model` whose forward calls the attention interface, with its stack
    (the qualified name before its layer number), numbered by the first integer of its
    qualified name, in layer order."""
    found = []
    for name, module in model.named_modules():
        if not _routed(module):
            continue
        digits = re.search(r"\d+", name)
        if digits is None:
            raise UsageError(f"attention module {name or type(module).__name__} has no layer number in its name")
        found.append((name[: digits.start()].rstrip("."), _declared(name, module, int(digits.group()))))
    return sorted(found, key=lambda sm: sm[1].number)


def _stack_names(prefixes: Iterable[str]) -> Dict[str, str]:
    """Each stack's name: the first component of its prefix that the other stacks' prefixes
    do not share (`model.vision_tower.encoder.layers` -> `vision_tower` beside
    `model.language_model.layers`); a single stack's is empty."""
    prefixes = sorted(set(prefixes))
    if len(prefixes) == 1:
        return {prefixes[0]: ""}
    split = {p: p.split(".") for p in prefixes}
    names = {}
    for p, parts in split.items():
        others = [o for q, o in split.items() if q != p]
        k = 0
        while k < len(parts) and all(k < len(o) and o[k] == parts[k] for o in others):
            k += 1
        names[p] = parts[k] if k < len(parts) else p
    return names


def _chosen_stacks(model: Any, stack: Optional[str]) -> List[Tuple[str, List[_Module]]]:
    """The stacks to capture, each with its name (empty for a model of one stack) and
    modules: every stack, or the one `stack` names (its name or its prefix)."""
    found = _attention_modules(model)
    names = _stack_names(prefix for prefix, _ in found)
    if stack is None:
        return [(n, [m for p, m in found if p == prefix]) for prefix, n in names.items()]
    chosen = [p for p, n in names.items() if stack in (n, p)]
    if not chosen:
        listed = ", ".join(n or p for p, n in names.items())
        raise UsageError(f"{type(model).__name__} has no stack {stack!r} (its stacks: {listed})", )
    return [(names[chosen[0]] or chosen[0], [m for p, m in found if p == chosen[0]])]


def _key_range(keys: str, size: int, i: Any, t: int) -> Tuple[Any, Any]:
    """The first and last key queries `i` (a tensor) see, of `t`, as KeyWindow has them."""
    if keys == "bidirectional":
        if not size:
            return i * 0, i * 0 + t - 1
        return (i - size).clamp(min=0), (i + size).clamp(max=t - 1)
    if keys == "sliding":
        return (i + 1 - size).clamp(min=0), i
    if keys == "chunked":
        return i - i % size, i
    return i * 0, i


