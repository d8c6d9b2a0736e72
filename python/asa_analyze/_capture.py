"""`capture`: attention statistics of a transformers model from its own forward pass.

transformers routes the attention of its models through one interface
(`AttentionInterface`); this module registers a backend there under the name "asa" (with its
mask function in `AttentionMaskInterface`). Inside `with asa.capture(model) as cap:` every
attention call of the model goes to the Rust kernels that `asa-analyze analyze` runs on a
checkpoint's layers: they return the layer's output and reduce every metric as the query
blocks go by (no [T, T] map is held); `cap.result()` gives the CLI's tables.

    import asa_analyze as asa
    with asa.capture(model) as cap:
        model(**batch)
    cap.result().attention
"""

from __future__ import annotations

import inspect as _inspect
import re
import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import _native
from ._errors import _python_errors
from ._native import UsageError
from ._result import Result
from ._torch_blocks import attention_blocks

#: The name the backend is registered under (`attn_implementation="asa"`).
BACKEND = "asa"

# id(module) -> (the capture, the module's index among its layers), while a capture is open
_ACTIVE: Dict[int, Tuple["Capture", int]] = {}

# per class: whether its forward calls transformers' attention interface
_ROUTED: Dict[type, bool] = {}

# keyword arguments of an attention call that change what attention computes and that the
# kernels do not take: refused (a tensor-valued argument not named here is refused too; flags
# such as `output_router_logits` pass)
_REFUSED = {
    "position_bias",
    "attn_bias",
    "attention_bias",
    "alibi",
    "cu_seq_lens_q",
    "cu_seq_lens_k",
    "max_length_q",
    "max_length_k",
    "head_mask",
}

# tensor-valued keyword arguments that do not change what attention computes
_TENSORS_READ_ELSEWHERE = {"position_ids", "cache_position", "position_embeddings", "token_type_ids"}


def register() -> None:
    """Registers the "asa" attention backend and its mask function with transformers, so
    that `from_pretrained(..., attn_implementation="asa")` and
    `model.set_attn_implementation("asa")` work (`import asa_analyze` does it when
    transformers is already imported; `capture` does it always). Outside a capture the
    backend computes what SDPA computes (the model's own eager attention where SDPA does not
    serve: soft-capping, sinks)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(BACKEND, _attention)
    AttentionMaskInterface.register(BACKEND, _mask)


class _Mask:
    """What the "asa" mask function hands the attention calls: the arguments transformers
    built the mask from (its pattern as a function of (batch, head, query, key), the 2-D
    padding mask, the lengths and offsets). The capture reads the pattern from the function;
    outside a capture the SDPA or eager mask is made from the same arguments, once."""

    def __init__(self, args: Dict[str, Any]) -> None:
        self.args = args
        self._made: Dict[str, Any] = {}
        self._rows: Optional[Tuple[Any, Any, Any]] = None

    def made(self, kind: str) -> Any:
        """The mask transformers' `kind` ("sdpa" or "eager") mask function makes."""
        if kind not in self._made:
            from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

            self._made[kind] = ALL_MASK_ATTENTION_FUNCTIONS[kind](**self.args)
        return self._made[kind]

    def padded(self) -> bool:
        """Whether some position is padding."""
        mask = self.args.get("attention_mask")
        return mask is not None and not bool(mask.all())

    def rows(self) -> Tuple[Any, Any, Any]:
        """Per query: its first and last visible key and how many keys it sees (of the first
        sequence), from the pattern evaluated over every (query, key) pair, 256 queries at a
        time (never the whole [T, T])."""
        if self._rows is None:
            import torch

            a = self.args
            q_len, kv_len = int(a["q_length"]), int(a["kv_length"])
            q_off, kv_off = int(a.get("q_offset", 0) or 0), int(a.get("kv_offset", 0) or 0)
            fn = a["mask_function"]
            keys = torch.arange(kv_len) + kv_off
            zero = torch.zeros((), dtype=torch.long)
            first, last, count = [], [], []
            for start in range(0, q_len, 256):
                queries = torch.arange(start, min(start + 256, q_len)) + q_off
                seen = torch.as_tensor(fn(zero, zero, queries[:, None], keys[None, :]))
                seen = seen.to(torch.bool).broadcast_to((len(queries), kv_len))
                n = seen.sum(dim=1)
                index = torch.arange(kv_len).expand_as(seen)
                big = torch.full_like(index, kv_len)
                first.append(torch.where(seen, index, big).min(dim=1).values)
                last.append(torch.where(seen, index, -1).max(dim=1).values)
                count.append(n)
            self._rows = (torch.cat(first), torch.cat(last), torch.cat(count))
        return self._rows


def _mask(**kwargs: Any) -> _Mask:
    """The "asa" mask function: the arguments, kept ([`_Mask`])."""
    return _Mask(kwargs)


def _attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    is_causal: Optional[bool] = None,
    **kwargs: Any,
) -> Tuple[Any, None]:
    """The "asa" attention function: the capture's kernels for a captured module, what SDPA
    (or the model's own eager attention) computes otherwise."""
    active = _ACTIVE.get(id(module))
    if active is None:
        return _fallback(module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs)
    capture, index = active
    if not capture.tolerant:
        return capture._attend(index, module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs)
    try:
        return capture._attend(index, module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs)
    except Exception as e:  # inside a training step: the capture stops, the step goes on
        capture._stop(f"{e}")
        return _fallback(module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs)


def _fallback(module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs):
    """SDPA's attention, or the model's own eager attention where SDPA does not serve
    (soft-capping, sinks): what the module computes without the capture."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    eager = kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None
    if isinstance(attention_mask, _Mask):
        attention_mask = attention_mask.made("eager" if eager else "sdpa")
    if eager:
        forward = getattr(sys.modules[type(module).__module__], "eager_attention_forward")
        return forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    return sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs)


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


def _chosen_stack(model: Any, stack: Optional[str]) -> Tuple[str, List[_Module]]:
    """The stack to capture and its modules: the only one, or the one `stack` names (its
    name or its prefix); refused when the model has several and none is named."""
    found = _attention_modules(model)
    names = _stack_names(prefix for prefix, _ in found)
    if stack is None:
        if len(names) > 1:
            listed = ", ".join(f"{n} ({p})" for p, n in names.items())
            raise UsageError(
                f"{type(model).__name__} has {len(names)} stacks of attention modules: {listed}; "
                "capture one at a time with stack=NAME"
            )
        return "", [m for _, m in found]
    chosen = [p for p, n in names.items() if stack in (n, p)]
    if not chosen:
        listed = ", ".join(n or p for p, n in names.items())
        raise UsageError(f"{type(model).__name__} has no stack {stack!r} (its stacks: {listed})", )
    return names[chosen[0]] or chosen[0], [m for p, m in found if p == chosen[0]]


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


class Capture:
    """An open capture (see `capture`): `result()` gives what its forward passes' attention
    calls pooled."""

    def __init__(self, model: Any, native: Any, modules: List[_Module], label: str, path: str) -> None:
        self.model = model
        self._native = native
        self.modules = modules
        self.label = label
        self.path = path
        self._device: Optional[str] = None
        # inside a training step (the Monitor's): a refusal stops the capture, not the step
        self.tolerant = False
        self.failed: Optional[str] = None
        self._previous: Optional[str] = None
        self._checked: Dict[Tuple[int, int], bool] = {}

    def __enter__(self) -> "Capture":
        by_name = dict(self.model.named_modules())
        busy = [m.name for m in self.modules if id(by_name[m.name]) in _ACTIVE]
        if busy:
            raise UsageError(f"{busy[0]} is already being captured (one capture of a module at a time)")
        for index, m in enumerate(self.modules):
            _ACTIVE[id(by_name[m.name])] = (self, index)
        self._previous = self.model.config._attn_implementation
        self.model.set_attn_implementation(BACKEND)
        return self

    def _stop(self, problem: str) -> None:
        """Stops capturing (the model's calls go to SDPA from here on), `problem` kept."""
        self.failed = self.failed or problem
        self._release()

    def _release(self) -> None:
        for key in [k for k, (c, _) in _ACTIVE.items() if c is self]:
            del _ACTIVE[key]

    def __exit__(self, *exc: Any) -> None:
        self._release()
        if self._previous is not None and self._previous != BACKEND:
            self.model.set_attn_implementation(self._previous)

    @_python_errors
    def result(self, label: Optional[str] = None) -> Result:
        """The metrics of every forward pass inside the block, as `asa.analyze` returns
        them (the CLI's tables; `.write(folder)` writes its files)."""
        import transformers

        if self.failed is not None:
            raise UsageError(f"the capture stopped: {self.failed}")
        model_class = type(self.model).__name__
        device = self._device or "cpu"
        return Result(self._native.result(label or self.label, model_class, transformers.__version__, device))

    def _refuse(self, module: _Module, problem: str) -> None:
        raise UsageError(f"{module.name}: {problem}")

    def _attend(self, index, module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs):
        import torch

        m = self.modules[index]
        self._check_call(m, module, query, key, attention_mask, dropout, is_causal, kwargs)
        softcap = kwargs.get("softcap")
        if (softcap or None) != m.softcap:
            self._refuse(m, f"soft-capping {softcap} where its config says {m.softcap}")
        sinks = kwargs.get("s_aux")
        if (sinks is not None) != m.sinks:
            self._refuse(m, "sink logits (s_aux) where the module has none, or none where it has them")
        if scaling is None:
            scaling = getattr(module, "scaling", None) or query.shape[-1] ** -0.5
        dtype = query.dtype
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            self._refuse(m, f"{dtype} attention (the kernels take float32, bfloat16 and float16)")
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        self._device = self._device or str(query.device)
        if self._torch_path(m, query):
            out = attention_blocks(
                self._native, index, m.keys, m.size, query.detach(), key.detach(), value.detach(), float(scaling), softcap, sinks
            )
        else:
            work = torch.float32 if dtype == torch.float16 else dtype
            q, k, v = (t.detach().to(work).contiguous() for t in (query, key, value))
            out = torch.empty((*q.shape[:3], v.shape[3]), dtype=work)
            s = None if sinks is None else sinks.detach().to(torch.float32).contiguous()
            self._native.attend(
                index, _host(q), _host(k), _host(v), float(scaling), _host(out), None if s is None else _host(s)
            )
        if grad:
            # the statistics are the kernels'; the output that gradients flow through is
            # the module's own (SDPA, or its eager attention), equal within float tolerance
            return _fallback(module, query, key, value, attention_mask, dropout, scaling, True, kwargs)
        return out.to(dtype).transpose(1, 2).contiguous(), None

    def _torch_path(self, m: _Module, query: Any) -> bool:
        """Whether this call's blocks are torch's: `path="torch"`, tensors off the CPU, or a
        bidirectional layer (the tiles are causal)."""
        if self.path == "torch" or m.keys == "bidirectional":
            return True
        if self.path == "tiles" and query.device.type != "cpu":
            raise UsageError(f"path='tiles' runs on the CPU; the tensors are on {query.device} (path='auto' or 'torch')")
        return query.device.type != "cpu"

    def _check_call(self, m, module, query, key, attention_mask, dropout, is_causal, kwargs) -> None:
        """Refuses what the kernels cannot honour, naming the module; checks the mask's
        pattern against the keys the module was declared to see."""
        if dropout and module.training:
            self._refuse(m, f"attention dropout {dropout} in training mode (call model.eval())")
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        if causal == (m.keys == "bidirectional"):
            said = "causal" if causal else "bidirectional"
            self._refuse(m, f"a {said} call of a module declared {m.keys}")
        if query.shape[2] != key.shape[2]:
            self._refuse(m, f"{query.shape[2]} queries against {key.shape[2]} keys: a decoding step with a cache (generate); a capture takes whole forward passes, model(input_ids)")
        import torch

        unknown = sorted(
            k
            for k, v in kwargs.items()
            if v is not None
            and k not in ("softcap", "s_aux", "sliding_window")
            and (k in _REFUSED or (isinstance(v, torch.Tensor) and k not in _TENSORS_READ_ELSEWHERE))
        )
        if unknown:
            self._refuse(m, f"attention arguments the backend does not honour: {', '.join(unknown)}")
        window = kwargs.get("sliding_window")
        if window and m.keys != "bidirectional" and (m.keys != "sliding" or int(window) != m.size):
            self._refuse(m, f"a sliding window of {window} keys where it was declared {m.keys} {m.size}")
        if attention_mask is None:
            if m.keys not in ("causal", "bidirectional") or m.size:
                self._refuse(m, f"no mask for a layer declared {m.keys} of {m.size}")
            return
        if not isinstance(attention_mask, _Mask):
            shape = tuple(getattr(attention_mask, "shape", ()))
            self._refuse(m, f"an attention mask the backend did not make ({type(attention_mask).__name__} {shape})")
        if attention_mask.padded():
            self._refuse(m, "padded sequences are not captured yet (one length per batch, no padding)")
        self._check_pattern(m, attention_mask, query.shape[2])

    def _check_pattern(self, m: _Module, mask: _Mask, t: int) -> None:
        """The mask's pattern must be the module's keys: each query i sees exactly the keys
        first(i) ..= i."""
        import torch

        key = (id(mask), m.number)
        if self._checked.get(key):
            return
        first, last, count = mask.rows()
        i = torch.arange(t)
        expected_first, expected_last = _key_range(m.keys, m.size, i, t)
        good = (first == expected_first) & (last == expected_last) & (count == expected_last - expected_first + 1)
        if not bool(good.all()):
            bad = int((~good).nonzero()[0])
            words = m.keys if not m.size else f"{m.keys} of {m.size}"
            self._refuse(
                m,
                f"its mask lets query {bad} see {int(count[bad])} keys from {int(first[bad])} to {int(last[bad])}, not the {words} keys it was declared (a pattern the backend cannot honour)",
            )
        self._checked[key] = True


def _host(t: Any) -> Tuple[int, List[int], str]:
    """A C-contiguous CPU tensor as the native capture reads it."""
    import torch

    return t.data_ptr(), list(t.shape), "BF16" if t.dtype == torch.bfloat16 else "F32"


@_python_errors
def capture(
    model: Any,
    metrics: Optional[Iterable[str]] = None,
    min_query: int = 1,
    map_size: int = 256,
    layer: Optional[int] = None,
    label: str = "model",
    path: str = "auto",
    stack: Optional[str] = None,
) -> Capture:
    """A context in which `model`'s attention calls go through the "asa" backend: each
    forward pass inside it is computed by the kernels of `asa-analyze analyze` (the model's
    outputs are unchanged within float tolerance) while every metric is reduced; forward
    passes pool like the windows of a run (each pass of the same length). After the block,
    the model's attention implementation is restored and `result()` returns an
    `asa.Result` with the CLI's tables.

    model: a transformers model (every module whose forward calls transformers' attention
        interface is captured, its layer 1 + the first integer of its qualified name).
    metrics: metric names; default `analyze`'s set without nll (the capture sees attention
        calls, not logits).
    min_query, map_size, layer: as `analyze`'s (`layer`: the heatmap's, 1-based).
    label: the tables' `model` column.
    stack: the stack of attention modules to capture in a model that has several (a VLM's
        `vision_tower` and `language_model`, an encoder and a decoder): its name (the first
        component of its modules' prefix that the other stacks do not share) or prefix; the
        other stacks run as SDPA runs them. A model of one stack needs none.
    path: "auto" (CPU tensors through the Rust tiles, read in place; tensors on any other
        device through torch on that device, a query block at a time, each block's tensors
        reduced by the same Rust accumulators), "tiles" or "torch" to force one.

    Refused with a `UsageError` naming the module: what the kernels cannot honour (so far:
    bidirectional layers, padding, a mask pattern other than causal, sliding window or chunks,
    attention biases).
    """
    if path not in ("auto", "tiles", "torch"):
        raise UsageError(f"path {path!r}: one of 'auto', 'tiles', 'torch'")
    register()
    if not _attention_modules(model):
        raise UsageError(f"{type(model).__name__} has no module whose forward calls transformers' attention interface")
    stack_name, modules = _chosen_stack(model, stack)
    native = _native.NativeCapture(
        modules,
        stack=stack_name or None,
        metrics=None if metrics is None else list(metrics),
        min_query=min_query,
        map_size=map_size,
        layer=layer,
    )
    return Capture(model, native, modules, label, path)


if "transformers" in sys.modules:  # a model may name the backend before any capture
    try:
        register()
    except ImportError:
        pass
