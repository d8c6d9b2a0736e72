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

from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import _native
from ._backend import _ACTIVE, BACKEND, _fallback, _fallback_rows, _Mask, register
from ._errors import _python_errors
from ._modules import _attention_modules, _chosen_stacks, _key_range, _Module
from ._native import UsageError
from ._analysis import _with_run_options
from ._result import Result
from ._torch_blocks import _host, attention_blocks

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


class _Stack:
    """One stack of attention modules being captured: its name (empty for a model of one
    stack), its native capture and its modules in layer order."""

    def __init__(self, name: str, native: Any, modules: List[_Module]) -> None:
        self.name = name
        self.native = native
        self.modules = modules


class Capture:
    """An open capture (see `capture`): `result()` gives what its forward passes' attention
    calls pooled."""

    def __init__(self, model: Any, stacks: List[_Stack], label: str, path: str) -> None:
        self.model = model
        self.stacks = stacks
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
        busy = [m.name for st in self.stacks for m in st.modules if id(by_name[m.name]) in _ACTIVE]
        if busy:
            raise UsageError(f"{busy[0]} is already being captured (one capture of a module at a time)")
        for s, st in enumerate(self.stacks):
            for index, m in enumerate(st.modules):
                _ACTIVE[id(by_name[m.name])] = (self, (s, index))
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
        label = label or self.label
        if len(self.stacks) == 1:
            return Result(self.stacks[0].native.result(label, model_class, transformers.__version__, device))
        natives = [st.native for st in self.stacks]
        return Result(_native.NativeCapture.stacked_result(natives, label, model_class, transformers.__version__, device))

    def _place(self, rank: int, world: int) -> None:
        """Places this process's sequences among those of `world` data-parallel ranks."""
        for st in self.stacks:
            st.native.place(rank, world)

    def _state(self) -> List[Optional[bytes]]:
        """Each stack's pooled state (None for a stack not called), for `_merge_state`."""
        states = []
        for st in self.stacks:
            try:
                states.append(st.native.state())
            except UsageError:  # nothing captured in this stack
                states.append(None)
        return states

    def _merge_state(self, states: List[Optional[bytes]]) -> None:
        """Folds in another rank's `_state()`."""
        for st, state in zip(self.stacks, states):
            if state is not None:
                st.native.merge_state(state)

    def _refuse(self, module: _Module, problem: str) -> None:
        raise UsageError(f"{module.name}: {problem}")

    def _attend(self, at, module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs):
        import torch

        stack, index = at
        native = self.stacks[stack].native
        m = self.stacks[stack].modules[index]
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
        spans = self._spans(m, attention_mask)
        if self._torch_path(m, query):
            out = attention_blocks(
                native, index, m.keys, m.size, query.detach(), key.detach(), value.detach(), float(scaling), softcap, sinks, spans
            )
        else:
            work = torch.float32 if dtype == torch.float16 else dtype
            q, k, v = (t.detach().to(work).contiguous() for t in (query, key, value))
            out = torch.empty((*q.shape[:3], v.shape[3]), dtype=work)
            s = None if sinks is None else sinks.detach().to(torch.float32).contiguous()
            native.attend(
                index, _host(q), _host(k), _host(v), float(scaling), _host(out), None if s is None else _host(s), spans
            )
        if grad:
            # the statistics are the kernels'; the output that gradients flow through is
            # the module's own (SDPA, or its eager attention), equal within float tolerance
            return _fallback(module, query, key, value, attention_mask, dropout, scaling, True, kwargs)
        out = out.to(dtype).transpose(1, 2)
        if spans is not None:
            self._padded_rows(out, spans, module, query, key, value, attention_mask, dropout, scaling, kwargs)
        return out.contiguous(), None

    def _spans(self, m: _Module, attention_mask: Any) -> Optional[List[Tuple[int, int]]]:
        """Each sequence's tokens `(start, len)` in a padded batch (none without padding);
        a mask whose tokens are not one run per sequence is refused."""
        if not isinstance(attention_mask, _Mask):
            return None
        try:
            return attention_mask.spans()
        except ValueError as e:
            self._refuse(m, f"{e}")
            return None

    def _padded_rows(self, out, spans, module, query, key, value, attention_mask, dropout, scaling, kwargs) -> None:
        """Fills the padded queries' rows of `out` `[b, t, heads, d']` with what the module
        computes for them (they are no queries of the statistics; the model's outputs stay
        SDPA's at every position): the rows before the latest first token and from the
        earliest end, each computed once for the batch."""
        import torch

        t = out.shape[1]
        starts = [s for s, _ in spans]
        ends = [s + n for s, n in spans]
        for lo, hi in ((0, max(starts)), (min(ends), t)):
            if lo >= hi:
                continue
            rows = _fallback_rows(module, query, key, value, attention_mask, slice(lo, hi), dropout, scaling, kwargs)
            i = torch.arange(lo, hi, device=out.device)
            padded = torch.stack([(i < s) | (i >= e) for s, e in zip(starts, ends)])[:, :, None, None]
            out[:, lo:hi] = torch.where(padded, rows.to(out.dtype), out[:, lo:hi])

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


@_python_errors
def capture(
    model: Any,
    *,
    label: str = "model",
    path: str = "auto",
    stack: Optional[str] = None,
    seq_len: Optional[int] = None,
    **options: Any,
) -> Capture:
    """A context in which `model`'s attention calls go through the "asa" backend: each
    forward pass inside it is computed by the kernels of `asa-analyze analyze` (the model's
    outputs are unchanged within float tolerance) while every metric is reduced; forward
    passes pool like the windows of a run. After the block,
    the model's attention implementation is restored and `result()` returns an
    `asa.Result` with the CLI's tables.

    model: a transformers model (every module whose forward calls transformers' attention
        interface is captured, its layer 1 + the first integer of its qualified name).
    options: the run options of the metrics' reduction, as `analyze`'s (listed below):
        `metrics` (default `analyze`'s set without nll: the capture sees attention calls,
        not logits), `layer` (the heatmap's, 1-based), `min_query`, `map_size`, `bins`, ...;
        one about windows, weights or devices (`batch_size`, `dtype`) is refused naming it.
    seq_len: the most tokens a sequence holds (positions 0 .. seq_len - 1 of the tables);
        default the first forward pass's length. Sequences may be shorter: a padded
        batch's (left or right padding: its padded positions are neither keys nor queries,
        each sequence's positions count from its first token) or a shorter pass's; each
        position's statistics are over the sequences that hold it.
    label: the tables' `model` column.
    stack: in a model of several stacks of attention modules (a VLM's `vision_tower` and
        `language_model`), the one to capture, by name (the first component of its modules'
        prefix that the other stacks do not share) or prefix; the others run as SDPA runs
        them. Without it every stack is captured, each apart (its own positions and heads),
        and the tables keep them apart by a `stack` column after `model`.
    path: "auto" (CPU tensors through the Rust tiles, read in place; tensors on any other
        device through torch on that device, a query block at a time, each block's tensors
        reduced by the same Rust accumulators), "tiles" or "torch" to force one.

    Refused with a `UsageError` naming the module: what the kernels cannot honour (a mask
    pattern other than causal, sliding window or chunks, or bidirectional; packed or holed
    padding; attention biases).
    """
    if path not in ("auto", "tiles", "torch"):
        raise UsageError(f"path {path!r}: one of 'auto', 'tiles', 'torch'")
    register()
    if not _attention_modules(model):
        raise UsageError(f"{type(model).__name__} has no module whose forward calls transformers' attention interface")
    chosen = _chosen_stacks(model, stack)
    layer = options.get("layer")
    if layer is not None and not any(m.number + 1 == layer for _, modules in chosen for m in modules):
        held = sorted({m.number + 1 for _, modules in chosen for m in modules})
        raise UsageError(f"layer {layer} has no captured attention module (layers: {', '.join(map(str, held))})")
    stacks = []
    for name, modules in chosen:
        # the heatmap's layer, in the stacks that have it (else each stack's default)
        own = {**options, "layer": layer if any(m.number + 1 == layer for m in modules) else None}
        native = _native.NativeCapture(modules, stack=name or None, seq_len=seq_len, **own)
        stacks.append(_Stack(name, native, modules))
    return Capture(model, stacks, label, path)


_with_run_options(capture, _native.capture_options())
