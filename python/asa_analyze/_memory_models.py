"""Models held in memory (a transformers model or a `(config, state_dict)` pair) handed to
the Rust loader as the checkpoint `save_pretrained` would write, without writing it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Mapping, Optional

from ._native import UsageError
from ._types import Models


@dataclass(frozen=True)
class HeldTensor:
    """One tensor of a model in memory as the Rust loader reads it: its name, safetensors
    dtype (`F32`, `F16`, `BF16`, `F64`), shape, the C-contiguous host array holding its bytes
    (kept alive while the analysis reads them in place), their address and length."""

    name: str
    dtype: str
    shape: List[int]
    array: Any
    address: int
    nbytes: int


@dataclass(frozen=True)
class HostCopy:
    """The copy of a model's device tensors to the host (run.json's `host_copy`): from
    which device(s), how many tensors and bytes, how long."""

    device: str
    tensors: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class Memory:
    """A model held in memory, handed to the Rust loader as the checkpoint `save_pretrained`
    would write: its label, config.json text and tensors, and the host copy they needed."""

    label: str
    config_json: str
    tensors: List[HeldTensor]
    host_copy: Optional[HostCopy]


def _in_memory(model: Any) -> bool:
    """Whether `model` is held in memory: a transformers model (it has `config` and
    `state_dict`) or a `(config, state_dict)` pair."""
    if isinstance(model, tuple):
        return len(model) == 2 and isinstance(model[1], Mapping)
    return hasattr(model, "state_dict") and hasattr(model, "config")


def _models(models: Models) -> tuple:
    """(label, path) pairs (a dict gives its labels; a path its folder name; a Hub id itself;
    a model in memory "model", or its dict label), and the in-memory models ([`Memory`])."""
    if isinstance(models, Mapping):
        items = [(str(k), v) for k, v in models.items()]
    else:
        if isinstance(models, (str, os.PathLike)) or _in_memory(models):
            models = [models]
        items = []
        for m in models:
            if _in_memory(m):
                items.append(("model", m))
            else:
                path = os.fspath(m)
                items.append((Path(path).resolve().stem if os.path.exists(path) else path, path))
    pairs, memory = [], []
    for label, m in items:
        if _in_memory(m):
            pairs.append((label, ""))
            memory.append(_held(label, m))
        else:
            pairs.append((label, os.fspath(m)))
    return pairs, memory


_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}


def _held(label: str, model: Any) -> Memory:
    """The config.json text and the tensors of a model in memory, each tensor's bytes read in
    place from a C-contiguous host array (a CPU torch tensor seen through numpy, bf16 as its
    raw 16-bit words; a tensor on a GPU is copied to the host once)."""
    import numpy as np

    if isinstance(model, tuple):
        config, state = model
    else:
        config, state = model.config, model.state_dict()
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    if isinstance(config, (str, bytes)):
        config = json.loads(config)
    if not isinstance(config, Mapping):
        raise UsageError(
            f"model {label}: its config is a {type(config).__name__}; give a dict, a JSON "
            "text or a transformers config"
        )
    if not isinstance(state, Mapping):
        raise UsageError(f"model {label}: its state_dict is a {type(state).__name__}, not a mapping")
    tied = bool(config.get("tie_word_embeddings", False))
    tensors = []
    copy = _HostCopy()
    for name, value in state.items():
        if tied and name == "lm_head.weight":
            continue  # save_pretrained leaves the tied copy out, and so does its checkpoint
        dtype, array = _host_array(label, name, value, np, copy)
        flat = array.reshape(-1)
        address = flat.__array_interface__["data"][0] if flat.size else 0
        tensors.append(HeldTensor(name, dtype, list(array.shape), flat, address, flat.nbytes))
    config_json = json.dumps(_finite_json(config), allow_nan=False)
    return Memory(label, config_json, tensors, copy.record())


class _HostCopy:
    """The copy of a model's device tensors to the host: which device, how many tensors and
    bytes, how long (run.json's `host_copy`)."""

    def __init__(self) -> None:
        self.devices: List[str] = []
        self.tensors = 0
        self.bytes = 0
        self.seconds = 0.0

    def to_host(self, value: Any) -> Any:
        """`value` (a torch tensor on a device) copied to the host, the copy counted."""
        import time

        start = time.perf_counter()
        host = value.cpu()
        self.seconds += time.perf_counter() - start
        device = str(value.device)
        if device not in self.devices:
            self.devices.append(device)
        self.tensors += 1
        self.bytes += host.element_size() * host.nelement()
        return host

    def record(self) -> Optional[HostCopy]:
        """What was copied, or None when nothing was."""
        if not self.tensors:
            return None
        return HostCopy(",".join(self.devices), self.tensors, self.bytes, self.seconds)


def _finite_json(value):
    """`value` with every non-finite float written as transformers writes it in config.json
    (`{"__float__": "Infinity"}`: Granite's and Falcon-H1's `time_step_limit` is (0, inf)),
    so the JSON handed over is valid JSON."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        word = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return {"__float__": word}
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def _host_array(label: str, name: str, value: Any, np: Any, copy: "_HostCopy") -> tuple:
    """(safetensors dtype name, C-contiguous host array) of one tensor (one on a device
    copied to the host, counted in `copy`)."""
    module = type(value).__module__
    if module.startswith("torch"):
        if value.is_meta:
            raise UsageError(f"tensor {name} of model {label} is on the meta device: load its weights first")
        value = value.detach()
        if value.device.type != "cpu":
            value = copy.to_host(value)
        kind = str(value.dtype).replace("torch.", "")
        if kind not in _DTYPES:
            raise UsageError(f"tensor {name} of model {label}: dtype {kind} is not one of {', '.join(_DTYPES)}")
        value = value.contiguous()
        if kind == "bfloat16":
            import torch

            return "BF16", value.view(torch.int16).numpy()
        return _DTYPES[kind], value.numpy()
    array = np.asarray(value)
    kind = str(array.dtype)
    if kind not in _DTYPES:
        raise UsageError(f"tensor {name} of model {label}: dtype {kind} is not one of {', '.join(_DTYPES)}")
    return _DTYPES[kind], np.ascontiguousarray(array)
