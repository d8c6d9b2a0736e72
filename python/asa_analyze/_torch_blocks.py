"""The capture's torch path: a module's attention computed by torch on the device its
tensors sit on, a block of queries against the keys they see at a time (never [T, T]), each
block reduced on that device to the row table the Rust accumulators pool (the layout of
`crates/asa-kernels/src/row_table.rs`, the sums of the CPU's row pass), which
alone (with its key sums, and the weights of the few blocks holding a query heatmap or
query_profile reads) crosses to the host.

Distances: t = i - j in a causal layer; t = |i - j| in a bidirectional one (keys on both
sides of a query share its bands)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

# the most logits a block holds (64 MB in float32); a block has at least one query
BLOCK_LOGITS = 1 << 24

# the row table's fixed columns (kernels/row_columns.rs)
FIRST, SUM, ENTROPY, SINK_MASS, QK_SUM, QK_ABS_SUM, BANDS = range(7)


def visible_keys(keys: str, size: int, i: Any, j: Any) -> Any:
    """Whether query i sees key j (broadcast index tensors), as KeyWindow has it:
    `causal`, `sliding` (the last `size` keys), `chunked` (chunks of `size`),
    `bidirectional` (every key; within `size` on either side when `size` > 0)."""
    if keys == "bidirectional":
        return (i - j).abs() <= size if size else (i >= 0) & (j >= 0)
    seen = j <= i
    if keys == "sliding":
        return seen & (j > i - size)
    if keys == "chunked":
        return seen & (j >= i - i % size)
    return seen


def block_keys(keys: str, size: int, start: int, end: int, t: int) -> int:
    """The keys a block of queries `start .. end` spans, `0 .. block_keys` (KeyWindow's)."""
    if keys == "bidirectional":
        return t if not size else min(t, end + size)
    return end


def row_table(weights, raw, max_logit, sink_mass, i, visible, layout: Dict[str, Any], t: int, bidirectional: bool):
    """The row table `[b * h * n, width]` (float32, on the block's device) of a block's
    weights `[b, h, n, keys]` (0 where invisible), raw q.k, row maxima and sink mass; `i`
    the block's query positions `[n, 1]`, `visible` `[n, keys]`, `t` the sequences'
    length (the key blocks span the capture's `positions`)."""
    import torch

    b, h, n, keys = weights.shape
    w = weights
    table = torch.zeros((b, h, n, layout["width"]), dtype=torch.float32, device=w.device)
    table[..., FIRST] = w[..., 0]
    # softmax weights (with or without a sink) are never negative: max(w, 0) is w
    mass = w.sum(-1)
    table[..., SUM] = mass
    # entropy of the weights renormalised, ln T - sum w ln w / T (0 ln 0 = 0); NaN without mass
    entropy = torch.log(mass) - torch.special.xlogy(w, w).sum(-1) / mass
    table[..., ENTROPY] = torch.where(mass > 0, entropy, torch.full_like(entropy, float("nan")))
    if sink_mass is not None:
        table[..., SINK_MASS] = sink_mass
    qk = raw * visible
    table[..., QK_SUM] = qk.sum(-1)
    table[..., QK_ABS_SUM] = qk.abs().sum(-1)
    if layout["bands"]:
        _bands(table, w, i, layout["bands"], t, bidirectional)
    if layout["max_logit_column"] is not None:
        table[..., layout["max_logit_column"]] = max_logit
    if layout["key_blocks"]:
        g, c, p = layout["key_blocks"], layout["key_block_column"], layout["positions"]
        # block of position j: ceil((j + 1) G / T) - 1 (KeyBlocks::block_of), T positions
        of = (((torch.arange(keys, device=w.device) + 1) * g + p - 1) // p - 1).expand(b, h, n, keys)
        seen = torch.where(visible, w, torch.zeros_like(w))
        table[..., c : c + g] = torch.zeros((b, h, n, g), dtype=w.dtype, device=w.device).scatter_add_(3, of, seen)
        table[..., c + g : c + 2 * g] = torch.zeros((b, h, n, g), dtype=w.dtype, device=w.device).scatter_reduce_(
            3, of, seen, reduce="amax", include_self=True
        )
    return table.reshape(b * h * n, -1)


def _bands(table, w, i, bands, t: int, bidirectional: bool) -> None:
    """The band columns: a_i0 of queries past key 0, then per distance range [lo, hi) the
    weight of the keys at distance t = i - j (|i - j| both sides when `bidirectional`) in
    it, key 0 of a query past it left out; from one float64 running sum over the keys."""
    import torch

    b, h, n, keys = w.shape
    past = (i[:, 0] > 0)
    first = torch.where(past, w[..., 0], torch.zeros_like(w[..., 0]))
    table[..., BANDS] = first
    # before[k] = sum of the weights of keys j < k
    before = torch.nn.functional.pad(w.double().cumsum(-1), (1, 0))
    q = i[:, 0]

    def span(a, z):
        """sum over keys a <= j < z (clipped to the block's keys) of each row."""
        a, z = a.clamp(0, keys), z.clamp(0, keys)
        z = torch.maximum(a, z)
        idx = lambda x: x.view(1, 1, n, 1).expand(b, h, n, 1)  # noqa: E731
        return (before.gather(-1, idx(z)) - before.gather(-1, idx(a)))[..., 0]

    for k, (lo, hi) in enumerate(bands):
        hi = min(hi, t + 1)  # an open band's end (usize::MAX) as a distance torch holds
        a, z = q - hi + 1, q - lo + 1
        total = span(a, z)
        # key 0 of a query past it is its own band, out of its distance band
        holds_first = past & (a <= 0) & (z > 0)
        total = total - torch.where(holds_first, w[..., 0].double(), torch.zeros_like(total))
        if bidirectional:
            total = total + span(q + max(lo, 1), q + hi)
        table[..., BANDS + 1 + k] = total.float()


def attention_blocks(native: Any, index: int, keys: str, size: int, q, k, v, scale: float, softcap: Optional[float], sinks, spans=None) -> Any:
    """Module `index`'s attention `[b, heads, t, d']` (float32, on q's device) of q
    `[b, heads, t, d]`, k `[b, kv, t, d]` and v `[b, kv, t, d']`, its blocks reduced for `native` (the
    capture): the logits `scale` q.k (soft-capped by `softcap`), a softmax over the visible
    keys (and the per-head sink logits `sinks` `[heads]`). In a padded batch (`spans`: each
    sequence's tokens `(start, len)`) each group of sequences the capture names is computed
    on its tokens alone, its positions from 0; padded rows are 0."""
    import torch

    b, h, t, d = q.shape
    kv = k.shape[1]
    kind = "BF16" if q.dtype == torch.bfloat16 else "F32"
    layout = native.begin_blocks(index, [b, h, t, d], kv, kind, spans)
    out = torch.zeros((b, h, t, v.shape[-1]), dtype=torch.float32, device=q.device)
    sink = None if sinks is None else sinks.detach().to(q.device, torch.float32).view(1, h, 1, 1)
    for group, (first, count, start, length) in enumerate(layout["groups"]):
        part = lambda x: x[first : first + count, :, start : start + length]  # noqa: E731
        out[first : first + count, :, start : start + length] = _group_blocks(
            native, index, group, layout, keys, size, part(q), part(k), part(v), scale, softcap, sink
        )
    native.end_blocks(index)
    return out


def _group_blocks(native, index: int, group: int, layout, keys: str, size: int, q, k, v, scale: float, softcap, sink) -> Any:
    """The attention `[b, heads, t, d']` of one group of sequences of `t` tokens, its blocks
    handed to `native` as block `group`'s."""
    import torch

    b, h, t, _ = q.shape
    rep = h // k.shape[1]
    bidirectional = keys == "bidirectional"
    out = torch.empty((b, h, t, v.shape[-1]), dtype=torch.float32, device=q.device)
    n = max(1, min(t, BLOCK_LOGITS // max(1, b * h * t)))
    for start in range(0, t, n):
        end = min(t, start + n)
        span = block_keys(keys, size, start, end, t)
        qb = q[:, :, start:end].float()
        kb = k[:, :, :span].float().repeat_interleave(rep, dim=1)
        vb = v[:, :, :span].float().repeat_interleave(rep, dim=1)
        raw = qb @ kb.transpose(-1, -2)
        i = torch.arange(start, end, device=q.device)[:, None]
        j = torch.arange(span, device=q.device)[None, :]
        visible = visible_keys(keys, size, i, j)
        scaled = raw * scale
        logits = scaled if not softcap else torch.tanh(scaled / softcap) * softcap
        masked = logits.masked_fill(~visible, float("-inf"))
        if sink is not None:
            full = torch.softmax(torch.cat([masked, sink.expand(b, h, end - start, 1)], dim=-1), dim=-1)
            weights, sink_mass = full[..., :-1], full[..., -1]
        else:
            weights, sink_mass = torch.softmax(masked, dim=-1), None
        out[:, :, start:end] = weights @ vb
        # the largest logit before any soft-cap (the capped one follows: tanh is monotone)
        uncapped = masked if not softcap else scaled.masked_fill(~visible, float("-inf"))
        max_logit = uncapped.amax(dim=-1) if layout["max_logit_column"] is not None else None
        table = row_table(weights, raw, max_logit, sink_mass, i, visible, layout, t, bidirectional)
        host = lambda x: None if x is None else x.to("cpu", torch.float32).contiguous()  # noqa: E731
        key_sums = None
        if layout["key_sums_from"] is not None:
            skip = min(end - start, max(0, layout["key_sums_from"] - start))
            key_sums = weights[:, :, skip:].sum(2)
        held = [host(table), host(key_sums)]
        # the weights cross only for a block holding a query they are read for (heatmap's
        # corner, query_profile's query): never a layer's whole map
        if any(lo < end and start < hi for lo, hi in layout["weight_rows"]):
            held += [host(weights), host(sink_mass)]
        else:
            held += [None, None]
        native.block(index, group, start, end - start, *[None if x is None else _host(x) for x in held])
    return out


def _host(t: Any) -> Tuple[int, List[int], str]:
    """A C-contiguous CPU tensor as the native capture reads it."""
    import torch

    return t.data_ptr(), list(t.shape), "BF16" if t.dtype == torch.bfloat16 else "F32"
