"""The "asa" attention backend registered with transformers: its attention function (the
open capture's kernels for a captured module, what SDPA computes otherwise) and its mask
function (the arguments transformers builds a mask from, kept, so that a capture reads the
mask's pattern and the fallback makes the SDPA or eager mask once)."""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple

#: The name the backend is registered under (`attn_implementation="asa"`).
BACKEND = "asa"

# id(module) -> (the capture, the module's index among its layers), while a capture is open
_ACTIVE: Dict[int, Tuple[Any, int]] = {}

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

    def spans(self) -> Optional[List[Tuple[int, int]]]:
        """Each sequence's tokens `(start, len)` in a padded batch (none without padding),
        from the 2-D padding mask as transformers prepares it; a ValueError says which
        sequence's tokens are not one run of positions (a packed or holed mask)."""
        if not self.padded():
            return None
        import torch
        from transformers.masking_utils import prepare_padding_mask

        a = self.args
        mask = prepare_padding_mask(a["attention_mask"], int(a["kv_length"]), int(a.get("kv_offset", 0) or 0))
        mask = mask.to("cpu", dtype=torch.bool)
        held = mask.sum(dim=1)
        start = mask.float().argmax(dim=1)
        spans = []
        for b, (s, n) in enumerate(zip(start.tolist(), held.tolist())):
            if n and not bool(mask[b, s : s + n].all()):
                raise ValueError(f"sequence {b}'s tokens are not one run of positions (a packed or holed padding mask)")
            spans.append((int(s), int(n)))
        return spans

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


def _fallback_rows(module, query, key, value, mask: _Mask, rows: slice, dropout, scaling, kwargs):
    """`_fallback`'s output `[b, rows, heads, d']` for the queries `rows` alone (rows are
    independent: the same values as those rows of the whole call's)."""
    eager = kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None
    made = mask.made("eager" if eager else "sdpa")
    sub = None if made is None else made[:, :, rows, :]
    return _fallback(module, query[:, :, rows], key, value, sub, dropout, scaling, False, kwargs)[0]


if "transformers" in sys.modules:  # a model may name the backend before any capture
    try:
        register()
    except ImportError:
        pass
