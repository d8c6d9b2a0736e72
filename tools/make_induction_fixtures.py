#!/usr/bin/env python3
"""Independent float64 reference for induction_score and head_role (SPEC section 4), and the
engineered head-role checkpoint.

Writes, relative to the repository root (the parent of this file's folder):

  tests/fixtures/models/head_roles/               a 2-layer Llama checkpoint whose heads were
                                                  set by hand (below): a sink, a previous-token,
                                                  a local, an induction head and uniform ones
  tests/fixtures/reference/<name>.induction.json  for llama_gqa, sink, affine_scaled, head_roles

Run from anywhere with torch and numpy (make_fixtures.py's float64 forward is imported; the
fixtures' checkpoints are read as committed):

    python tools/make_induction_fixtures.py            # writes the checkpoint and the JSON files
    python tools/make_induction_fixtures.py --check    # recomputes, compares, writes nothing

The probe (`asa-analyze analyze --probe induction`), rebuilt here from its documented rule
(crates/asa-analysis/src/corpus/induction.rs), not from the crate: the ids drawn from are 0 .. vocab_size - 1 less
the special ids (config.json's bos/eos_token_id and every tokenizer.json added token marked
special); one splitmix64 generator seeded with the seed; a draw is ids[next() % len(ids)];
each window is [BOS] + x_1..x_L + x_1..x_L (L draws), seq_len = 2L + 1.

Scores per (layer, head), from the float64 attention weights a [B, H, T, T] (effective weights:
sink column dropped, alpha p + beta for Affine-Scaled), min_query = 1:
  induction_score  mean over b and i in L+1 .. 2L of a[b, h, i, i-L+1]
  first_token      mean over b and i in 1 .. T-1 of a[b, h, i, 0]
  prev_token       mean over b and i in 1 .. T-1 of a[b, h, i, i-1], key 0 left out (query 1: 0)
  local_mass[w]    mean over b and i in 1 .. T-1 of sum of a[b, h, i, j], max(1, i-w+1) <= j <= i
  roles_<w>[_without_induction]  the roles below with local window w (without: as a run
                   without the induction score would name them)
  tl_stripe        TransformerLens' induction score, pattern.diagonal(offset=1-L).mean(): also
                   queries L-1 and L (for the record; not what asa-analyze reports)
Every score is computed twice, vectorised and with plain loops (math.fsum), agreeing to 1e-12;
for the softmax fixtures the weights are also taken from transformers' own eager attention in
float64 (make_fixtures.hf_forward) and must agree to 1e-10.

Roles (docs/head-roles.md): candidates sink (first_token >= sink), induction (score >=
induction), previous_token (prev_token >= prev), local (local_mass[w] >= local); local is
dropped when previous_token is a candidate and w >= 2, or induction is and L - 1 < w; one
candidate: its role; none or several: mixed.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (the float64 forward and transformers reference)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
REFS = os.path.join(ROOT, "tests", "fixtures", "reference")
TORCH64 = torch.float64

MIN_QUERY = 1
WINDOWS = [16, 4]  # local_mass windows written
THRESHOLDS = {"sink": 0.5, "local": 0.5, "prev": 0.4, "induction": 0.4}

# fixture: (variant, softmax (checked against transformers), probes [(seq_len, num_seqs, seed)])
FIXTURES = {
    "llama_gqa": ("softmax", True, [(21, 3, 5), (41, 2, 11)]),
    "sink": ("sink", False, [(21, 3, 5), (41, 2, 11)]),
    "affine_scaled": ("affine_scaled", False, [(21, 3, 5), (41, 2, 11)]),
    "head_roles": ("softmax", True, [(21, 4, 3)]),
}
# the engineered checkpoint's roles with --role-local-window 4: [layer][head]
HEAD_ROLES_WANT = [["sink", "previous_token", "local", "mixed"],
                   ["induction", "sink", "previous_token", "mixed"]]
HEAD_ROLES_WINDOW = 4


# ----------------------------------------------------------------------------
# The probe
# ----------------------------------------------------------------------------
MASK64 = (1 << 64) - 1


def splitmix64(state):
    """An endless splitmix64 stream from `state`."""
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        yield z ^ (z >> 31)


def special_ids(model_dir, cfg):
    ids = {cfg.get("bos_token_id"), cfg.get("eos_token_id")}
    tok = os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(tok):
        with open(tok) as f:
            ids |= {t["id"] for t in json.load(f).get("added_tokens", []) if t.get("special")}
    return sorted(i for i in ids if i is not None and i < cfg["vocab_size"])


def probe_windows(seed, drawn_from, bos, copy_len, num_seqs):
    rng = splitmix64(seed)
    draw = lambda: drawn_from[next(rng) % len(drawn_from)]  # noqa: E731
    out = []
    for _ in range(num_seqs):
        first = bos if bos is not None else draw()
        copy = [draw() for _ in range(copy_len)]
        out.append([first] + copy + copy)
    return out


# ----------------------------------------------------------------------------
# Scores
# ----------------------------------------------------------------------------
def scores_numpy(a, L):
    """a [B, H, T, T] float64 numpy -> dict of [H] arrays."""
    B, H, T, _ = a.shape
    q = np.arange(MIN_QUERY, T)
    second = np.arange(L + 1, 2 * L + 1)
    out = {
        "induction_score": a[:, :, second, second - L + 1].mean(axis=(0, 2)),
        "tl_stripe": np.diagonal(a, offset=1 - L, axis1=2, axis2=3).mean(axis=(0, 2)),
        "first_token": a[:, :, q, 0].mean(axis=(0, 2)),
        "prev_token": np.where(q - 1 >= 1, a[:, :, q, q - 1], 0.0).mean(axis=(0, 2)),
    }
    j = np.arange(T)
    for w in WINDOWS:
        inside = (j[None, :] <= q[:, None]) & (j[None, :] > q[:, None] - w) & (j[None, :] >= 1)
        out[f"local_mass_{w}"] = (a[:, :, q, :] * inside).sum(-1).mean(axis=(0, 2))
    return out


def scores_loops(a, L):
    """The same with plain loops and math.fsum."""
    B, H, T, _ = a.shape
    out = {k: [] for k in ["induction_score", "tl_stripe", "first_token", "prev_token"]
           + [f"local_mass_{w}" for w in WINDOWS]}
    for h in range(H):
        ind = [a[b, h, i, i - L + 1] for b in range(B) for i in range(L + 1, 2 * L + 1)]
        tl = [a[b, h, i, i - L + 1] for b in range(B) for i in range(L - 1, T)]
        first = [a[b, h, i, 0] for b in range(B) for i in range(MIN_QUERY, T)]
        prev = [a[b, h, i, i - 1] if i >= 2 else 0.0 for b in range(B) for i in range(MIN_QUERY, T)]
        out["induction_score"].append(math.fsum(ind) / len(ind))
        out["tl_stripe"].append(math.fsum(tl) / len(tl))
        out["first_token"].append(math.fsum(first) / len(first))
        out["prev_token"].append(math.fsum(prev) / len(prev))
        for w in WINDOWS:
            rows = [math.fsum(a[b, h, i, j] for j in range(max(1, i - w + 1), i + 1))
                    for b in range(B) for i in range(MIN_QUERY, T)]
            out[f"local_mass_{w}"].append(math.fsum(rows) / len(rows))
    return {k: np.array(v) for k, v in out.items()}


def classify(s, t, w, L):
    """The role of scores `s` (induction_score None: not computed)."""
    sink = s["first_token"] >= t["sink"]
    induction = s["induction_score"] is not None and s["induction_score"] >= t["induction"]
    prev = s["prev_token"] >= t["prev"]
    inside = (prev and w >= 2) or (induction and L - 1 < w)
    local = s[f"local_mass_{w}"] >= t["local"] and not inside
    on = [r for r, c in [("sink", sink), ("induction", induction),
                         ("previous_token", prev), ("local", local)] if c]
    return on[0] if len(on) == 1 else "mixed"


# ----------------------------------------------------------------------------
# The engineered checkpoint
# ----------------------------------------------------------------------------
HR_VOCAB = 26  # 0 BOS, 1 EOS, 2..25 the 24 ids the probe draws
HR_HIDDEN = 56  # 0: a constant direction u, 1: BOS, 2..25: the token, 26..49: the previous token
HR_HEADS = 4
HR_HEAD_DIM = 32
HR_THETA = 1e9  # pairs k >= 4 turn by < 0.11 rad over 20 positions: content matching survives
PREV0 = 26


def hr_config():
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": HR_VOCAB,
        "hidden_size": HR_HIDDEN,
        "intermediate_size": 4,
        "num_hidden_layers": 2,
        "num_attention_heads": HR_HEADS,
        "num_key_value_heads": HR_HEADS,
        "head_dim": HR_HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": HR_THETA},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": None,
        "dtype": "float32",
    }


def hr_weights():
    """Heads by hand. RoPE pair k is head dims (k, k + 16) at inv_freq theta^(-k/16); q.k of
    two constant vectors in pair k is |q||k| cos(phi_k - phi_q - (i - j) theta_k).
    Layer 1: h0 sink (q from u, k from the BOS flag, slowest pair), h1 previous token (pairs
    0 and 1 peaked at distance 1; its values copy the token into dims 26..49), h2 local (pair 2
    peaked at distance 0, decaying over ~6 keys), h3 uniform (q = k = 0).
    Layer 2: h0 induction (q reads the token, k the previous token copied by layer 1's h1,
    one slot per id in the slow pairs), h1 sink, h2 previous token, h3 uniform as in layer 1."""
    inv = HR_THETA ** (-np.arange(0, HR_HEAD_DIM, 2) / HR_HEAD_DIM)
    D, half, Hd = HR_HIDDEN, HR_HEAD_DIM // 2, HR_HEADS * HR_HEAD_DIM
    sd = {}
    emb = np.zeros((HR_VOCAB, D))
    emb[:, 0] = 1.0
    emb[0, 1] = 1.0
    for t in range(2, HR_VOCAB):
        emb[t, t] = 1.0
    sd["model.embed_tokens.weight"] = emb

    def pair(w, head, k, angle, gain, col):
        w[head * HR_HEAD_DIM + k, col] += gain * math.cos(angle)
        w[head * HR_HEAD_DIM + k + half, col] += gain * math.sin(angle)

    def sink(q, kk, head):
        pair(q, head, half - 1, 0.0, 1.2, 0)
        pair(kk, head, half - 1, 0.0, 1.2, 1)

    def prev(q, kk, head):
        for k, gain in [(0, 1.45), (1, 2.1)]:
            pair(q, head, k, 0.0, gain, 0)
            pair(kk, head, k, inv[k], gain, 0)  # phi_k - phi_q = theta_k: peak at distance 1

    slow = [k for k in range(4, half)] + [k + half for k in range(4, half)]
    for layer in range(2):
        p = f"model.layers.{layer}."
        q, kk, v, o = (np.zeros((Hd, D)), np.zeros((Hd, D)), np.zeros((Hd, D)), np.zeros((D, Hd)))
        if layer == 0:
            sink(q, kk, 0)
            prev(q, kk, 1)
            for t in range(2, HR_VOCAB):  # h1's values: the token, written to the copy dims
                v[1 * HR_HEAD_DIM + (t - 2), t] = 1.0
                o[PREV0 + (t - 2), 1 * HR_HEAD_DIM + (t - 2)] = 0.25
            pair(q, 2, 2, 0.0, 3.0, 0)
            pair(kk, 2, 2, 0.0, 3.0, 0)
        else:
            for t in range(2, HR_VOCAB):
                q[slow[t - 2], t] = 1.6
                kk[slow[t - 2], PREV0 + (t - 2)] = 1.6
            sink(q, kk, 1)
            prev(q, kk, 2)
        sd[p + "self_attn.q_proj.weight"] = q
        sd[p + "self_attn.k_proj.weight"] = kk
        sd[p + "self_attn.v_proj.weight"] = v
        sd[p + "self_attn.o_proj.weight"] = o
        sd[p + "input_layernorm.weight"] = np.ones(D)
        sd[p + "post_attention_layernorm.weight"] = np.ones(D)
        for name, shape in [("gate_proj", (4, D)), ("up_proj", (4, D)), ("down_proj", (D, 4))]:
            sd[p + f"mlp.{name}.weight"] = np.zeros(shape)
    sd["model.norm.weight"] = np.ones(D)
    return {k: torch.tensor(v, dtype=torch.float32).contiguous() for k, v in sd.items()}


def write_head_roles(check):
    d = os.path.join(MODELS, "head_roles")
    weights = hr_weights()
    if check:
        stored = mf.load_state(d)
        for k, v in weights.items():
            assert torch.equal(stored[k], v.to(TORCH64)), k
        return
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hr_config(), f, indent=2)
        f.write("\n")
    save_file(weights, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


# ----------------------------------------------------------------------------
# References
# ----------------------------------------------------------------------------
def patterns(name, variant, softmax, ids):
    d = os.path.join(MODELS, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    sd = mf.load_state(d)
    affine = cfg.get("affine_scaled") if variant == "affine_scaled" else None
    _, caps = mf.own_forward(sd, cfg, ids, variant, affine=affine)
    pats = [c["pattern"] for c in caps]
    if softmax:
        inv64, _ = mf.rope_inv_freq(cfg)
        _, _, attn = mf.hf_forward(d, mf.LlamaForCausalLM, ids, inv64, precise=True)
        worst = max((x - y).abs().max().item() for x, y in zip(attn, pats))
        assert worst < 1e-10, (name, worst)
        print(f"  {name}: own float64 forward = transformers' eager float64 to {worst:.1e}")
    return [p.numpy() for p in pats]


def reference(name, variant, softmax, probes):
    d = os.path.join(MODELS, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    excluded = special_ids(d, cfg)
    drawn_from = [i for i in range(cfg["vocab_size"]) if i not in excluded]
    runs = []
    for seq_len, num_seqs, seed in probes:
        L = (seq_len - 1) // 2
        windows = probe_windows(seed, drawn_from, cfg["bos_token_id"], L, num_seqs)
        ids = torch.tensor(windows, dtype=torch.int64)
        per_layer = []
        for a in patterns(name, variant, softmax, ids):
            vec, loop = scores_numpy(a, L), scores_loops(a, L)
            for k in vec:
                assert np.abs(vec[k] - loop[k]).max() < 1e-12, (name, k)
            per_layer.append(vec)
        run = {"seq_len": seq_len, "copy_len": L, "num_seqs": num_seqs, "seed": seed,
               "min_query": MIN_QUERY, "windows": windows}
        for k in per_layer[0]:
            run[k] = [[float(x) for x in layer[k]] for layer in per_layer]
        for w in WINDOWS:
            for suffix, known in [("", True), ("_without_induction", False)]:
                run[f"roles_{w}{suffix}"] = [
                    [classify({k: (layer[k][h] if known or k != "induction_score" else None)
                               for k in layer}, THRESHOLDS, w, L)
                     for h in range(len(layer["first_token"]))] for layer in per_layer]
        runs.append(run)
    return {"model": name, "variant": variant, "excluded_ids": excluded,
            "drawn_from": len(drawn_from), "thresholds": THRESHOLDS, "probes": runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="recompute and compare; write nothing")
    args = ap.parse_args()
    torch.set_num_threads(1)
    write_head_roles(args.check)
    for name, (variant, softmax, probes) in FIXTURES.items():
        ref = reference(name, variant, softmax, probes)
        if name == "head_roles":
            got = ref["probes"][0][f"roles_{HEAD_ROLES_WINDOW}"]
            assert got == HEAD_ROLES_WANT, got
        text = json.dumps(ref, indent=1) + "\n"
        path = os.path.join(REFS, f"{name}.induction.json")
        if args.check:
            with open(path) as f:
                assert f.read() == text, f"{path} differs"
        else:
            with open(path, "w") as f:
                f.write(text)
        for run in ref["probes"]:
            best = max(max(layer) for layer in run["induction_score"])
            print(f"{name} L={run['copy_len']}: best induction_score {best:.4f}, "
                  f"roles (w={WINDOWS[1]}) {run[f'roles_{WINDOWS[1]}']}")
    print("checked" if args.check else "written")


if __name__ == "__main__":
    main()
