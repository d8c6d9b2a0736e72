"""Float64 references for `asa.capture` on padded batches (issue 64: padded positions are
neither keys nor queries).

For a few of the tiny models of tests/fixtures/capture/ (written by
make_capture_fixtures.py; causal decoders with full, sliding and absolute-position layers,
and encoders with global and local bidirectional layers): one batch of B = 3 rows of
T = 24 positions, the first whole, the second left-padded (7 pads, then 17 tokens), the
third right-padded (13 tokens, then 11 pads), with its 2-D attention mask. The model runs in
float64 with transformers' own eager attention (`output_attentions=True`) on that batch;
each sequence's weights are cut to its tokens (rows and keys; its positions counted from its
first token) and pooled with numpy:

- first_token: mean of a_i0 over every sequence, head and query i >= 1 that sees key 0;
- entropy: mean over every sequence, head and query i >= 1 of -sum_j a_ij ln a_ij;
- weight_sum: mean over every sequence's queries i >= 1 of the mean over heads of sum_j a_ij;
- max_logit (per head): the largest scaled q.k over queries i >= 1 and their visible keys;
- key_received (mean over heads): per key j, "sum": the weight it receives from the
  visible queries i >= max(j, 1) (i >= 1 both sides in a bidirectional layer), mean over
  the sequences that hold key j and the heads; "mean": the received weight over every
  such (sequence, head, query), divided by their number.

Also the float32 logits (an encoder's last hidden states) of transformers' SDPA forward on
the padded batch, at every position. Written: tests/fixtures/capture/<name>/padded.json.

    python tools/make_padded_capture_fixtures.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_capture_fixtures import Recorder  # noqa: E402  the same float64 recording attention

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "tests" / "fixtures" / "capture"
T, VOCAB, MIN_QUERY, SEED = 24, 96, 1, 2027
# (first token, tokens) of each row
SPANS = [(0, 24), (7, 17), (0, 13)]
NAMES = ["helium", "cohere2", "starcoder2", "opt", "gpt_bigcode", "bert", "modernbert"]


def batch():
    """The padded batch: token ids (padding 0, BOS 1 first in each sequence) and mask."""
    rng = np.random.default_rng(SEED)
    ids = np.zeros((len(SPANS), T), dtype=np.int64)
    mask = np.zeros((len(SPANS), T), dtype=np.int64)
    for b, (s, n) in enumerate(SPANS):
        ids[b, s : s + n] = rng.integers(3, VOCAB, size=n)
        ids[b, s] = 1
        mask[b, s : s + n] = 1
    return torch.tensor(ids), torch.tensor(mask)


def mask64(*args, **kwargs):
    """transformers' eager mask for the float64 model with float32's lowest value: its eager
    attention takes the softmax in float32, where float64's lowest is -inf, so a padded
    query (no key) would give NaN, which its zero weights then carry into every position;
    with float32's lowest a padded query's row is finite (uniform), as in a float32 model."""
    kwargs["dtype"] = torch.float32
    return eager_mask(*args, **kwargs).to(torch.float64)


def metrics(call):
    """The layer's metrics pooled over the sequences, each cut to its tokens."""
    q, k = call["q"], call["k"]
    b, h, t, d = q.shape
    kr = np.repeat(k, h // k.shape[1], axis=1)
    logits = np.einsum("bhid,bhjd->bhij", q, kr) * call["scaling"]
    capped = logits if not call["softcap"] else np.tanh(logits / call["softcap"]) * call["softcap"]
    first, ent, ws, ml = [], [], [], np.full(h, -np.inf)
    recv = np.zeros(t)
    held = np.zeros(t)
    seen = np.zeros(t)
    for s_b, (s, n) in enumerate(SPANS):
        vis = call["visible_rows"][s_b][s : s + n, s : s + n]
        lg, cp = logits[s_b, :, s : s + n, s : s + n], capped[s_b, :, s : s + n, s : s + n]
        masked = np.where(vis, cp, -np.inf)
        e = np.exp(masked - masked.max(-1, keepdims=True))
        a = e / e.sum(-1, keepdims=True)
        # the eager weights are this softmax, and nothing reached the padded keys
        eager = call["weights"][s_b][:, s : s + n, s : s + n]
        assert np.abs(eager - a).max() < 1e-6, "eager weights are not the softmax of q.k"
        rows = call["weights"][s_b][:, s : s + n]
        assert rows[..., :s].max(initial=0) == 0 and rows[..., s + n :].max(initial=0) == 0
        mq = MIN_QUERY
        sees_first = vis[mq:, 0]
        first.append(a[:, mq:, 0][:, sees_first].reshape(-1))
        with np.errstate(divide="ignore", invalid="ignore"):
            ent.append((-np.where(a > 0, a * np.log(a), 0.0).sum(-1)[:, mq:]).reshape(-1))
        ws.append(a.sum(-1).mean(0)[mq:])
        ml = np.maximum(ml, np.where(vis[None, mq:, :], lg[:, mq:, :], -np.inf).max(axis=(1, 2)))
        for j in range(n):
            rows = [i for i in range(max(j, mq) if call["causal"] else mq, n) if vis[i, j]]
            recv[j] += a[:, rows, j].sum() / h
            held[j] += 1
            seen[j] += len(rows)
    with np.errstate(divide="ignore", invalid="ignore"):
        recv_sum = recv / held
        recv_mean = recv / seen
    return dict(
        first_token=float(np.concatenate(first).mean()),
        entropy=float(np.concatenate(ent).mean()),
        weight_sum=float(np.concatenate(ws).mean()),
        max_logit=[float(x) for x in ml],
        key_received_sum=[None if np.isnan(x) else float(x) for x in recv_sum],
        key_received_mean=[None if not np.isfinite(x) else float(x) for x in recv_mean],
        causal=call["causal"],
    )


def reference(folder):
    ref = json.loads((folder / "reference.json").read_text())
    kind = ref["kind"]
    from transformers import AutoModel, AutoModelForCausalLM

    cls = AutoModelForCausalLM if kind == "lm" else AutoModel
    ids, mask = batch()
    extra = dict(use_cache=False) if kind == "lm" else {}
    out_of = lambda o: o.logits if kind == "lm" else o.last_hidden_state  # noqa: E731
    sdpa = cls.from_pretrained(folder, attn_implementation="sdpa").eval()
    with torch.no_grad():
        logits32 = out_of(sdpa(input_ids=ids, attention_mask=mask, **extra))
    recorder = Recorder()
    AttentionInterface.register("ref64pad", recorder)
    AttentionMaskInterface.register("ref64pad", mask64)
    model = cls.from_pretrained(folder, attn_implementation="ref64pad", dtype=torch.float64).eval()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, **extra, output_attentions=True)
    assert len(out.attentions) == len(recorder.calls)
    layers = [metrics(c) for c in recorder.calls]
    for k, (layer, call) in enumerate(zip(layers, recorder.calls)):
        layer["layer"] = (call["layer_idx"] if call["layer_idx"] is not None else k) + 1
    return dict(
        model_class=type(model).__name__,
        kind=kind,
        transformers_version=transformers.__version__,
        spans=SPANS,
        inputs=dict(input_ids=ids.tolist(), attention_mask=mask.tolist()),
        min_query=MIN_QUERY,
        layers=layers,
        logits_sdpa_f32=logits32.reshape(-1)[::7].tolist(),
        logits_stride=7,
    )


def main():
    for name in NAMES:
        folder = CAPTURE / name
        ref = reference(folder)
        (folder / "padded.json").write_text(json.dumps(ref, indent=1, allow_nan=False) + "\n")
        print(f"{name}: {ref['model_class']}, {len(ref['layers'])} attention layers")


if __name__ == "__main__":
    main()
