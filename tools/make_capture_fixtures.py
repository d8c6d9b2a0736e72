"""Float64 references for `asa.capture` (the "asa" attention backend) on transformers
architectures outside the families asa-analyze reads from checkpoints.

For each architecture below: a tiny random model built by transformers itself
(`AutoConfig.for_model`, `AutoModelForCausalLM.from_config`, weights N(0, 0.25^2) so that
attention is far from uniform), saved in float32 to tests/fixtures/capture/<name>/ with
`save_pretrained`, then loaded back, run in float64 with transformers' own eager attention
(`output_attentions=True`) on the fixed token ids, and reduced with numpy to the metrics the
capture must reproduce, per attention layer:

- first_token: mean of a_i0 over sequences, heads and queries i >= 1 that see key 0;
- entropy: mean over the same cells of -sum_j a_ij ln a_ij;
- weight_sum: mean over sequences and queries i >= 1 of the mean over heads of sum_j a_ij;
- max_logit (per head): the largest scaled q.k over queries i >= 1 and their visible keys,
  from the q and k transformers hands its eager attention (the eager weights are checked to
  be the softmax of exactly those logits);
- key_received (mean over heads): per key j, the sum over visible queries i >= max(j, 1) of
  a_ij, mean over sequences and heads ("sum"), and that divided by the number of those
  queries ("mean").

Also the float32 logits (an encoder's or a vision tower's last hidden states) of
transformers' SDPA forward, which the capture's forward must give. Bidirectional layers
(encoders, vision towers) count every visible query i >= 1 for key_received.
Written: tests/fixtures/capture/<name>/{config.json, model.safetensors, reference.json}, and
then padded.json of a few (make_padded_capture_fixtures.py).
Deterministic; run from anywhere:

    python tools/make_capture_fixtures.py
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "capture"
T, B, VOCAB, MIN_QUERY = 24, 2, 96, 1
SEED = 2026

# small shapes every config below accepts; per-architecture extras after
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    tie_word_embeddings=False,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)

# encoders and vision towers: their own small shapes
ENCODER = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
               num_attention_heads=4, max_position_embeddings=64, pad_token_id=0)
VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              image_size=32, patch_size=8, num_channels=3)

# a VLM: a CLIP vision tower whose 17 features (16 patches and the class token) take the
# places of the image tokens (id 95) in a Llama language model's input
IMAGE_TOKEN, IMAGE_TOKENS = 95, 17
VLM = dict(
    vision_config=dict(model_type="clip_vision_model", **VISION, projection_dim=16),
    text_config=dict(model_type="llama", **{k: v for k, v in COMMON.items() if not k.endswith("token_id")}),
    image_token_index=IMAGE_TOKEN,
    vision_feature_select_strategy="full",
    vision_feature_layer=-1,
)

# name -> (model_type, extra config keys, kind: "lm" a causal LM on token ids, "encoder" a
# bidirectional model on token ids, "vision" a vision tower on pixel values, "vlm" a vision
# tower and a causal LM on both)
ARCHITECTURES = {
    "starcoder2": ("starcoder2", dict(sliding_window=6, use_bias=True)),
    "helium": ("helium", dict(head_dim=8)),
    "stablelm": ("stablelm", dict(partial_rotary_factor=0.5, use_qkv_bias=True, qk_layernorm=True)),
    "olmoe": ("olmoe", dict(num_experts=4, num_experts_per_tok=2)),
    "cohere": ("cohere", dict(use_qk_norm=False, logit_scale=0.5)),
    "cohere2": ("cohere2", dict(sliding_window=6, layer_types=["sliding_attention", "full_attention"], logit_scale=0.5)),
    "exaone4": ("exaone4", dict(sliding_window=6, layer_types=["sliding_attention", "full_attention"], head_dim=8)),
    "glm": ("glm", dict(head_dim=8, partial_rotary_factor=0.5)),
    "glm4": ("glm4", dict(head_dim=8, partial_rotary_factor=0.5)),
    "phi": ("phi", dict(partial_rotary_factor=0.5, qk_layernorm=False)),
    "persimmon": ("persimmon", dict(partial_rotary_factor=0.5, qk_layernorm=True)),
    "nemotron": ("nemotron", dict(head_dim=8, partial_rotary_factor=0.5)),
    "granite": ("granite", dict(attention_multiplier=0.3, embedding_multiplier=2.0, residual_multiplier=0.5, logits_scaling=2.0)),
    "qwen2_moe": ("qwen2_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24)),
    "ernie4_5": ("ernie4_5", dict(head_dim=8)),
    "seed_oss": ("seed_oss", dict(head_dim=8)),
    "apertus": ("apertus", dict(head_dim=8)),
    "arcee": ("arcee", dict(head_dim=8)),
    "hunyuan_v1_dense": ("hunyuan_v1_dense", dict(head_dim=8)),
    "olmo": ("olmo", dict()),
    "gemma": ("gemma", dict(head_dim=8)),
    "ministral": ("ministral", dict(head_dim=8, sliding_window=6, layer_types=["sliding_attention", "full_attention"])),
    "mistral3_text": ("ministral3", dict(head_dim=8)),
    "bitnet": ("bitnet", dict(head_dim=8)),
    "jetmoe": ("jetmoe", dict(num_local_experts=4, num_experts_per_tok=2, kv_channels=8)),
    "jamba": ("jamba", dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                            num_experts=2, num_experts_per_tok=1, mamba_d_state=4, mamba_d_conv=2, mamba_expand=2,
                            mamba_dt_rank=4, use_mamba_kernels=False)),
    "falcon": ("falcon", dict(new_decoder_architecture=True, num_kv_heads=2, alibi=False, parallel_attn=True)),
    "gpt_bigcode": ("gpt_bigcode", dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, multi_query=True)),
    "gptj": ("gptj", dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4)),
    "codegen": ("codegen", dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, n_ctx=64, rotary_dim=4)),
    "opt": ("opt", dict(ffn_dim=48, word_embed_proj_dim=32)),
    "biogpt": ("biogpt", dict()),
    "xglm": ("xglm", dict(d_model=32, ffn_dim=48, num_layers=2, attention_heads=4)),
    "gpt_neo": ("gpt_neo", dict(num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]], window_size=6)),
    "bert": ("bert", dict(**ENCODER, kind="encoder")),
    "roberta": ("roberta", dict(**ENCODER, kind="encoder")),
    "electra": ("electra", dict(**ENCODER, embedding_size=32, kind="encoder")),
    "modernbert": ("modernbert", dict(**ENCODER, global_attn_every_n_layers=2, local_attention=8, kind="encoder")),
    "vit": ("vit", dict(**VISION, kind="vision")),
    "dinov2_with_registers": ("dinov2_with_registers", dict(**VISION, num_register_tokens=4, kind="vision")),
    "siglip_vision": ("siglip_vision_model", dict(**VISION, kind="vision")),
    "clip_vision": ("clip_vision_model", dict(**VISION, projection_dim=16, kind="vision")),
    "llava": ("llava", dict(**VLM, kind="vlm")),
}


def ids():
    """The token ids every text model reads: B sequences of T, BOS first."""
    rng = np.random.default_rng(SEED)
    x = rng.integers(3, VOCAB, size=(B, T))
    x[:, 0] = 1
    return torch.tensor(x, dtype=torch.long)


def pixels():
    """The images every vision tower reads: B of 3 x 32 x 32, N(0, 1)."""
    rng = np.random.default_rng(SEED)
    return torch.tensor(rng.standard_normal((B, 3, 32, 32)), dtype=torch.float32)


def inputs(kind):
    if kind == "vlm":
        # BOS, the image's tokens, then text (no id of the image token)
        x = ids()
        x[:, 1 : 1 + IMAGE_TOKENS] = IMAGE_TOKEN
        x[:, 1 + IMAGE_TOKENS :] = x[:, 1 + IMAGE_TOKENS :] % (IMAGE_TOKEN - 3) + 3
        return {"input_ids": x, "pixel_values": pixels()}
    return {"pixel_values": pixels()} if kind == "vision" else {"input_ids": ids()}


def auto_class(kind):
    from transformers import AutoModel

    from transformers import AutoModelForImageTextToText

    return {"lm": AutoModelForCausalLM, "vlm": AutoModelForImageTextToText}.get(kind, AutoModel)


class Recorder:
    """A float64 reference attention ("ref64"): each call runs the module's own eager
    attention (transformers' `eager_attention_forward` of its modeling file) and records q,
    k, the scaling, the eager mask's visible pairs (of the first sequence, and `[b, t, t]`
    of every sequence where there is a mask) and the weights it returned."""

    def __init__(self):
        self.calls = []

    def __call__(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward")
        out, weights = eager(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
        if scaling is None:
            scaling = getattr(module, "scaling", query.shape[-1] ** -0.5)
        causal = kwargs.get("is_causal")
        causal = getattr(module, "is_causal", True) if causal is None else causal
        t = query.shape[-2]
        rows = None
        if attention_mask is not None:
            m = attention_mask[:, 0, :, : key.shape[-2]]
            rows = ((m == 0) if m.dtype != torch.bool else m).numpy()
            visible = torch.from_numpy(rows[0])
        elif causal:
            visible = torch.ones((t, t), dtype=torch.bool).tril()
        else:
            visible = torch.ones((t, t), dtype=torch.bool)
        self.calls.append(
            dict(
                name=type(module).__name__,
                module=module,
                layer_idx=getattr(module, "layer_idx", None),
                q=query.detach().numpy(),
                k=key.detach().numpy(),
                scaling=float(scaling),
                softcap=kwargs.get("softcap"),
                visible=visible.numpy(),
                visible_rows=rows,
                causal=bool(causal),
                weights=weights.detach().numpy(),
            )
        )
        return out, weights


def metrics(call):
    """The layer's reference metrics from one recorded call (numpy float64)."""
    q, k, a = call["q"], call["k"], call["weights"]
    b, h, t, d = q.shape
    kr = np.repeat(k, h // k.shape[1], axis=1)
    logits = np.einsum("bhid,bhjd->bhij", q, kr) * call["scaling"]
    visible = call["visible"]
    # transformers' eager attention takes its softmax in float32 even for a float64 model:
    # the weights are the float64 softmax of its float64 logits over the visible keys,
    # checked to be what the eager attention returned within float32 rounding
    capped = logits if not call["softcap"] else np.tanh(logits / call["softcap"]) * call["softcap"]
    masked = np.where(visible, capped, -np.inf)
    e = np.exp(masked - masked.max(-1, keepdims=True))
    soft = e / e.sum(-1, keepdims=True)
    err = np.abs(soft - a).max()
    assert err < 1e-6, (call["name"], "eager weights are not the softmax of q.k", err)
    a = soft
    mq = MIN_QUERY
    sees_first = visible[mq:, 0]
    first = a[:, :, mq:, 0][:, :, sees_first]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(a > 0, a * np.log(a), 0.0).sum(-1)[:, :, mq:]
    ws = a.sum(-1).mean(1)[:, mq:]
    max_logit = np.where(visible[None, None, mq:, :], logits[:, :, mq:, :], -np.inf).max(axis=(0, 2, 3))
    recv_sum, recv_mean = [], []
    for j in range(t):
        # the queries i >= min_query that see key j (causal: i >= j too)
        rows = [i for i in range(max(j, mq) if call["causal"] else mq, t) if visible[i, j]]
        s = a[:, :, rows, j].sum(-1) if rows else np.zeros((b, h))
        recv_sum.append(s.mean())
        recv_mean.append(s.mean() / len(rows) if rows else float("nan"))
    return dict(
        first_token=float(first.mean()),
        entropy=float(ent.mean()),
        weight_sum=float(ws.mean()),
        max_logit=[float(x) for x in max_logit],
        key_received_sum=[float(x) for x in recv_sum],
        key_received_mean=[None if np.isnan(x) else float(x) for x in recv_mean],
        visible_first=[int(np.argmax(visible[i])) for i in range(t)],
        visible_last=[int(t - 1 - np.argmax(visible[i][::-1])) for i in range(t)],
        causal=call["causal"],
    )


def build(name, model_type, extra):
    """The model, saved in float32 under OUT/name; None with the reason when transformers
    cannot build it."""
    torch.manual_seed(SEED)
    extra = dict(extra)
    kind = extra.pop("kind", "lm")
    try:
        config = AutoConfig.for_model(model_type, **({**COMMON, **extra} if kind == "lm" else extra))
        model = auto_class(kind).from_config(config, attn_implementation="eager").float()
    except Exception as e:  # an architecture this transformers does not build so
        return None, f"{type(e).__name__}: {str(e)[:160]}"
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.25)
            elif "norm" in pname or "ln" in pname or pname.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    folder = OUT / name
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder, safe_serialization=True)
    for extra_file in ("generation_config.json",):
        (folder / extra_file).unlink(missing_ok=True)
    return folder, None


def output(out, kind):
    """What a model's forward gives that the capture must not change: logits, or the last
    hidden states of an encoder or a vision tower."""
    return out.logits if kind in ("lm", "vlm") else out.last_hidden_state


def reference(folder, kind):
    recorder = Recorder()
    AttentionInterface.register("ref64", recorder)
    AttentionMaskInterface.register("ref64", eager_mask)
    cls = auto_class(kind)
    x = inputs(kind)
    extra = dict(use_cache=False) if kind in ("lm", "vlm") else {}
    sdpa = cls.from_pretrained(folder, attn_implementation="sdpa").eval()
    with torch.no_grad():
        logits32 = output(sdpa(**x, **extra), kind)
    try:
        model = cls.from_pretrained(
            folder, attn_implementation="ref64", dtype=torch.float64, experts_implementation="eager"
        ).eval()
    except (TypeError, ValueError):  # a model without experts
        model = cls.from_pretrained(folder, attn_implementation="ref64", dtype=torch.float64).eval()
    x64 = {k: (v.double() if v.is_floating_point() else v) for k, v in x.items()}
    with torch.no_grad():
        out = model(**x64, **extra, output_attentions=True)
    # a VLM's output holds its language model's attentions (its vision tower's calls come first)
    returned = recorder.calls[len(recorder.calls) - len(out.attentions) :] if kind == "vlm" else recorder.calls
    assert len(out.attentions) == len(returned), (len(out.attentions), len(recorder.calls))
    for att, call in zip(out.attentions, returned):
        assert np.array_equal(att.numpy(), call["weights"])
    final = output(out, kind)
    assert np.isfinite(final.numpy()).all()
    layers = [metrics(c) for c in recorder.calls]
    # each attention layer's decoder number (1-based): its module's layer_idx where it has
    # one (a hybrid's attention layers are not 1, 2, ...), else its place
    # a VLM's stacks: the component after `model.` of its modules' names (`vision_tower`,
    # `language_model`), each numbered from its own first layer
    names = {id(m): n for n, m in model.named_modules()}
    stacks = [names[id(c["module"])].split(".")[1] if kind == "vlm" else None for c in recorder.calls]
    for k, (layer, call, stack) in enumerate(zip(layers, recorder.calls, stacks)):
        place = sum(1 for s in stacks[:k] if s == stack)
        layer["layer"] = (call["layer_idx"] if call["layer_idx"] is not None else place) + 1
        if stack is not None:
            layer["stack"] = stack
    return dict(
        model_class=type(model).__name__,
        kind=kind,
        transformers_version=transformers.__version__,
        inputs={k: v.tolist() for k, v in x.items()},
        min_query=MIN_QUERY,
        layers=layers,
        logits_sdpa_f32=logits32.reshape(-1)[::7].tolist(),
        logits_stride=7,
        logits64_max_abs_diff_to_sdpa32=float((final.float() - logits32).abs().max()),
    )


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for name, (model_type, extra) in ARCHITECTURES.items():
        folder, why = build(name, model_type, extra)
        if folder is None:
            skipped.append((name, why))
            continue
        try:
            ref = reference(folder, dict(extra).get("kind", "lm"))
        except Exception as e:
            shutil.rmtree(folder, ignore_errors=True)
            skipped.append((name, f"reference: {type(e).__name__}: {str(e)[:200]}"))
            continue
        (folder / "reference.json").write_text(json.dumps(ref, indent=1, allow_nan=False) + "\n")
        size = sum(f.stat().st_size for f in folder.iterdir())
        written.append(name)
        print(f"{name}: {ref['model_class']}, {len(ref['layers'])} attention layers, {size} bytes; "
              f"float64 vs SDPA float32 logits {ref['logits64_max_abs_diff_to_sdpa32']:.1e}")
    for name, why in skipped:
        print(f"skipped {name}: {why}")
    print(f"{len(written)} written, {len(skipped)} skipped")
    # the padded batches' references of some of these models (their folders were rewritten)
    import make_padded_capture_fixtures

    make_padded_capture_fixtures.main()


if __name__ == "__main__":
    main()
