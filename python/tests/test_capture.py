"""`asa.capture` and the "asa" attention backend (issue 64): a transformers model analysed
from its own forward pass.

- Architectures outside the families asa-analyze reads from checkpoints (tiny random models
  built by transformers, tests/fixtures/capture/, written by tools/make_capture_fixtures.py)
  give first_token, entropy, weight_sum, max_logit and key_received per attention layer
  within 1e-6 + 1e-5|y| of transformers' float64 eager attentions, and the logits of
  transformers' own SDPA forward;
- the capture of a family's transformers model and `analyze` of its checkpoint give the same
  tables;
- forward passes pool like windows; gradients flow as SDPA's; what the kernels cannot honour
  is refused naming the module.
"""

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import asa_analyze as asa  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests" / "fixtures" / "capture"
MODELS = ROOT / "tests" / "fixtures" / "models"
# where the torch path's forward passes run: ASA_TEST_DEVICE=cuda runs the torch-path tests
# on a GPU (benches/gpu_session.sh capture); the tiles run on the CPU whatever it says
DEVICE = torch.device(os.environ.get("ASA_TEST_DEVICE", "cpu"))
FIVE = ["first_token", "entropy", "weight_sum", "max_logit", "key_received"]
# every metric an attention call gives (analyze's set without nll, with block_map)
FAMILY_METRICS = [
    "first_token", "weight_sum", "entropy", "qk_mean", "head_total", "heatmap", "query_profile",
    "sink_mass", "sink_rate", "max_logit", "key_received", "distance_profile", "head_role", "block_map",
]
# one model of one stack each (the VLM's two stacks have a test of their own)
ARCHITECTURES = sorted(
    p.name for p in CAPTURE.iterdir() if (p / "reference.json").exists() and json.loads((p / "reference.json").read_text())["kind"] != "vlm"
)


def close(got, want, what, atol=1e-6, rtol=1e-5):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    bad = np.abs(got - want) > atol + rtol * np.abs(want)
    assert not bad.any(), f"{what}: {got[bad][:4]} where the reference has {want[bad][:4]}"


def value(frame, **where):
    rows = frame
    for column, v in where.items():
        rows = rows.filter(pl.col(column).is_null() if v is None else pl.col(column) == v)
    assert rows.height == 1, (where, rows)
    return rows["value"][0]


def assert_same_tables(got, want, what, skip=("tokens",), noise=1.0):
    """Every table of `want` (a Result) is in `got` with the same rows in the same order
    (one writer makes both) and its numbers within f32 noise (2e-6 + 2e-5|y|, times
    `noise` for a model whose f32 forward is noisier)."""
    for table, frame in want.tables.items():
        if table in skip:
            continue
        have = got.tables[table]
        assert have.shape == frame.shape, (what, table, have.shape, frame.shape)
        for column in frame.columns:
            if frame[column].dtype.is_float():
                w, h = frame[column].to_numpy(), have[column].to_numpy()
                both_nan = np.isnan(w) & np.isnan(h)
                close(h[~both_nan], w[~both_nan], f"{what} {table}.{column}", atol=2e-6 * noise, rtol=2e-5 * noise)
            else:
                assert have[column].to_list() == frame[column].to_list(), (what, table, column)


def on(path):
    """Where a path's forward passes run: the torch path's on DEVICE, the tiles' on the CPU."""
    return DEVICE if path == "torch" else torch.device("cpu")


def load(folder, kind="lm", device="cpu", **kwargs):
    from transformers import AutoModel, AutoModelForCausalLM

    cls = AutoModelForCausalLM if kind == "lm" else AutoModel
    try:
        model = cls.from_pretrained(folder, experts_implementation="eager", **kwargs)
    except (TypeError, ValueError):
        model = cls.from_pretrained(folder, **kwargs)
    return model.to(device).eval()


def forward(model, ref, **kwargs):
    """The model's output on the reference's inputs (on the model's device): logits, or last
    hidden states, on the CPU."""
    inputs = {k: torch.tensor(v, device=model.device) for k, v in ref["inputs"].items()}
    if ref["kind"] == "lm":
        return model(**inputs, use_cache=False, **kwargs).logits.cpu()
    return model(**inputs, **kwargs).last_hidden_state.cpu()


def test_there_are_architectures_to_check():
    assert len(ARCHITECTURES) >= 25, ARCHITECTURES


@pytest.mark.parametrize("path", ["tiles", "torch"])
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_capture_matches_transformers_float64_eager_attention(name, path):
    # both paths: the Rust tiles on CPU tensors, and torch's query blocks (what a GPU runs)
    folder = CAPTURE / name
    ref = json.loads((folder / "reference.json").read_text())
    model = load(folder, ref["kind"], on(path))
    with torch.no_grad(), asa.capture(model, metrics=FIVE, label=name, path=path) as cap:
        logits = forward(model, ref)
    # the model's outputs through the backend are SDPA's (f32 tolerance)
    close(logits.reshape(-1)[:: ref["logits_stride"]].numpy(), ref["logits_sdpa_f32"], f"{name} logits", atol=1e-4)
    res = cap.result()
    assert model.config._attn_implementation == "sdpa", "the implementation is restored after the block"
    record = res.run["models"][0]
    assert record["architecture"] == ref["model_class"] and record["capture"]["model_class"] == ref["model_class"]
    assert len(record["capture"]["modules"]) == len(ref["layers"])
    for k, want in enumerate(ref["layers"]):
        module = record["capture"]["modules"][k]
        l = want["layer"]
        assert module["layer"] == l, (name, module, l)
        # the declared keys are those transformers' mask gave (every query's first and last)
        first, last = want["visible_first"], want["visible_last"]
        assert module["keys"].startswith("bidirectional") == (not want["causal"]), (name, module)
        if want["causal"]:
            assert module["keys"].startswith("sliding") == any(f > 0 for f in first), (name, module)
        else:
            full = all(f == 0 for f in first) and all(x == len(last) - 1 for x in last)
            assert (module["keys"] == "bidirectional") == full, (name, module)
    check_layers(res, ref["layers"], name)


def check_layers(res, layers, name):
    """first_token, entropy, weight_sum, max_logit (per head) and key_received (per key, over
    heads) of every reference layer, within 1e-6 + 1e-5|y|."""
    att, recv = res.attention, res.key_received
    for want in layers:
        l = want["layer"]
        close(value(att, metric="first_token", layer=l, head=None, stat="mean"), want["first_token"], f"{name} L{l} first_token")
        close(value(att, metric="entropy", layer=l, head=None, stat="mean"), want["entropy"], f"{name} L{l} entropy")
        close(value(att, metric="weight_sum", layer=l, head=None, stat="mean"), want["weight_sum"], f"{name} L{l} weight_sum")
        heads = att.filter((pl.col("metric") == "max_logit") & (pl.col("layer") == l) & pl.col("head").is_not_null() & (pl.col("stat") == "max")).sort("head")
        close(heads["value"].to_numpy(), want["max_logit"], f"{name} L{l} max_logit")
        for stat in ("sum", "mean"):
            rows = recv.filter((pl.col("layer") == l) & pl.col("head").is_null() & (pl.col("stat") == stat) & (pl.col("key_hi") == pl.col("key_lo") + 1)).sort("key_lo")
            want_stat = [np.nan if v is None else v for v in want[f"key_received_{stat}"]]
            got = rows["value"].to_numpy()
            assert len(got) == len(want_stat), (name, stat, len(got))
            keep = ~np.isnan(np.asarray(want_stat, dtype=np.float64))
            close(got[keep], np.asarray(want_stat)[keep], f"{name} L{l} key_received {stat}")


@pytest.mark.parametrize("path", ["tiles", "torch"])
def test_both_stacks_of_a_vlm_are_captured_apart_in_one_forward(path, tmp_path):
    # LLaVA (a CLIP vision tower whose features take the image tokens' places in a Llama
    # language model): one forward with an image captures every stack, each against its
    # float64 reference; the tables keep them apart by a `stack` column after `model`, and a
    # reader of the written folder (the report) sees each stack as a model of its own
    from transformers import AutoModelForImageTextToText

    folder = CAPTURE / "llava"
    ref = json.loads((folder / "reference.json").read_text())
    model = AutoModelForImageTextToText.from_pretrained(folder).to(on(path)).eval()
    inputs = {k: torch.tensor(v, device=model.device) for k, v in ref["inputs"].items()}
    with torch.no_grad(), asa.capture(model, metrics=FIVE, path=path) as cap:
        logits = model(**inputs, use_cache=False).logits.cpu()
    close(logits.reshape(-1)[:: ref["logits_stride"]].numpy(), ref["logits_sdpa_f32"], "llava logits", atol=1e-4)
    res = cap.result()
    records = res.run["models"]
    assert [m["capture"]["stack"] for m in records] == ["language_model", "vision_tower"]
    assert [len(m["capture"]["modules"]) for m in records] == [2, 2]
    for name, frame in res.tables.items():
        assert frame.columns[:2] == ["model", "stack"], (name, frame.columns)
    for stack in ("vision_tower", "language_model"):
        part = type("Part", (), {})()
        for table in ("attention", "key_received"):
            setattr(part, table, res.tables[table].filter(pl.col("stack") == stack).drop("stack"))
        check_layers(part, [l for l in ref["layers"] if l["stack"] == stack], f"llava {stack}")
    res.write(tmp_path)
    assert pl.read_csv(tmp_path / "attention.csv").columns[:2] == ["model", "stack"]
    import base64
    import gzip
    import re

    html = asa.report(tmp_path).html
    data = re.search(r'<script id="report-data" type="application/octet-stream">([^<]*)</script>', html).group(1)
    data = gzip.decompress(base64.b64decode(data))
    assert b'"model/vision_tower"' in data and b'"model/language_model"' in data
    # one stack named: its tables alone, no stack column
    with torch.no_grad(), asa.capture(model, metrics=FIVE, stack="vision_tower") as one:
        model(**inputs, use_cache=False)
    alone = one.result()
    assert "stack" not in alone.attention.columns
    want = res.attention.filter(pl.col("stack") == "vision_tower").drop("stack")
    assert alone.attention["value"].to_list() == want["value"].to_list()


PADDED = sorted(p.parent.name for p in CAPTURE.glob("*/padded.json"))


@pytest.mark.parametrize("path", ["tiles", "torch"])
@pytest.mark.parametrize("name", PADDED)
def test_a_padded_batch_matches_transformers_float64_eager_attention(name, path):
    # a whole sequence, a left-padded and a right-padded one (tools/make_padded_capture_
    # fixtures.py): padded positions are neither keys nor queries, each sequence's positions
    # count from its first token, each key's statistics are over the sequences that hold it;
    # the model's outputs are SDPA's at every position, padded ones included
    folder = CAPTURE / name
    ref = json.loads((folder / "padded.json").read_text())
    model = load(folder, ref["kind"], on(path))
    with torch.no_grad(), asa.capture(model, metrics=FIVE, label=name, path=path) as cap:
        logits = forward(model, ref)
    close(logits.reshape(-1)[:: ref["logits_stride"]].numpy(), ref["logits_sdpa_f32"], f"{name} logits", atol=1e-4)
    res = cap.result()
    check_layers(res, ref["layers"], name)
    corpus = res.run["models"][0]["corpus"]
    assert "3 sequences of 13 to 24 tokens (54 tokens" in corpus, corpus


def test_passes_of_different_lengths_pool_as_one_padded_batch():
    # the padded batch's sequences, each alone in a pass of its own length (seq_len set to
    # the longest), give the padded batch's tables
    folder = CAPTURE / "cohere2"
    ref = json.loads((folder / "padded.json").read_text())
    model = load(folder)
    ids = torch.tensor(ref["inputs"]["input_ids"])
    with torch.no_grad(), asa.capture(model, metrics=FAMILY_METRICS, map_size=5) as padded:
        model(input_ids=ids, attention_mask=torch.tensor(ref["inputs"]["attention_mask"]), use_cache=False)
    with torch.no_grad(), asa.capture(model, metrics=FAMILY_METRICS, map_size=5, seq_len=24) as alone:
        for b, (s, n) in enumerate(ref["spans"]):
            model(input_ids=ids[b : b + 1, s : s + n], use_cache=False)
    got, want = alone.result(), padded.result()
    assert_same_tables(got, want, "passes of 24, 17 and 13 tokens")
    # a pass longer than the capture's sequences is refused, naming seq_len
    with pytest.raises(asa.UsageError, match=r"a sequence of 25 tokens in a capture of 24-token sequences .*seq_len=N"):
        with torch.no_grad(), asa.capture(model, metrics=["first_token"]):
            model(input_ids=ids, use_cache=False)
            model(input_ids=torch.cat([ids, ids[:, :1]], dim=1), use_cache=False)


@pytest.mark.parametrize("path", ["tiles", "torch"])
@pytest.mark.parametrize("name", ["cohere2", "olmoe", "starcoder2", "bert", "vit"])
def test_a_bf16_model_is_captured_within_bf16_tolerance(name, path):
    # SPEC's bf16 tolerance (atol 1e-2, rtol 2e-2) against the float64 reference
    ref = json.loads((CAPTURE / name / "reference.json").read_text())
    model = load(CAPTURE / name, ref["kind"], on(path), dtype=torch.bfloat16)
    with torch.no_grad(), asa.capture(model, metrics=FIVE, path=path) as cap:
        forward(model, ref)
    res = cap.result()
    assert res.run["dtype"] == "bf16"
    for want in ref["layers"]:
        l = want["layer"]
        for metric in ("first_token", "entropy", "weight_sum"):
            got = value(res.attention, metric=metric, layer=l, head=None, stat="mean")
            close(got, want[metric], f"{name} bf16 L{l} {metric}", atol=1e-2, rtol=2e-2)


def test_sliding_layers_are_declared_as_transformers_masks_them():
    # cohere2, exaone4, ministral: layer 1 slides over 6 keys, layer 2 is full (layer_types);
    # starcoder2: every layer slides
    for name, kinds in {
        "cohere2": ["sliding window of 6 keys", "causal"],
        "exaone4": ["sliding window of 6 keys", "causal"],
        "ministral": ["sliding window of 6 keys", "causal"],
        "starcoder2": ["sliding window of 6 keys", "sliding window of 6 keys"],
    }.items():
        ref = json.loads((CAPTURE / name / "reference.json").read_text())
        model = load(CAPTURE / name)
        with torch.no_grad(), asa.capture(model, metrics=["first_token"]) as cap:
            forward(model, ref)
        modules = cap.result().run["models"][0]["capture"]["modules"]
        assert [m["keys"] for m in modules] == kinds, (name, modules)


def family_ids(vocab, b=3, t=16):
    return np.random.default_rng(7).integers(3, vocab, size=(b, t)).tolist()


@pytest.mark.parametrize("family", [
    "llama_gqa", "qwen2", "qwen2_window", "mistral", "gemma2", "gemma3", "gpt_oss", "olmo2", "phi3",
    "qwen3", "qwen3_moe", "mixtral", "olmo3", "gpt2", "gpt_neox", "smollm3", "llama4_text",
    "deepseek_v3", "glm4_moe", "granitemoehybrid", "lfm2", "falcon_h1", "qwen3_next", "cohere2",
])
def test_capture_of_a_family_equals_analyze_of_its_checkpoint(family):
    folder = MODELS / family
    config = json.loads((folder / "config.json").read_text())
    vocab = config.get("vocab_size") or config["text_config"]["vocab_size"]
    ids = family_ids(vocab, t=20 if family in ("mistral", "phi3") else 16)
    t = len(ids[0])
    model = load(folder, dtype=torch.float32)
    metrics = FAMILY_METRICS
    with torch.no_grad(), asa.capture(model, metrics=metrics) as cap:
        model(input_ids=torch.tensor(ids), use_cache=False)
    captured = cap.result()
    analysed = asa.analyze({"model": folder}, corpus=ids, seq_len=t, num_seqs=len(ids), metrics=metrics, bos="never", progress=False)
    # the two hybrids whose float32 forward is noisier (as crates/asa-analysis/tests/library/conformance.rs bounds them)
    assert_same_tables(captured, analysed, family, noise={"qwen3_next": 5.0, "falcon_h1": 2.0}.get(family, 1.0))


@pytest.mark.parametrize("block_logits", [None, 200])
@pytest.mark.parametrize("family", ["gemma2", "gpt_oss", "qwen2_window"])
def test_the_torch_path_gives_the_tables_of_the_tiles(family, block_logits, monkeypatch):
    # soft-caps, sinks, sliding windows: every table of the torch path's blocks (what a GPU
    # runs) equals the Rust tiles' within f32 noise, and the model's logits too
    # blocks of a few queries (200 logits: 1 query at a time for 3 x 4 heads x 16 keys): the
    # bands, key sums and the few blocks whose weights cross are placed by their queries
    if block_logits is not None:
        monkeypatch.setattr("asa_analyze._torch_blocks.BLOCK_LOGITS", block_logits)
    folder = MODELS / family
    ids = torch.tensor(family_ids(64))
    model = load(folder, dtype=torch.float32)
    results, logits = {}, {}
    for path in ("tiles", "torch"):
        model.to(on(path))
        with torch.no_grad(), asa.capture(model, metrics=FAMILY_METRICS, path=path) as cap:
            logits[path] = model(input_ids=ids.to(model.device), use_cache=False).logits.cpu().numpy()
        results[path] = cap.result()
    close(logits["torch"], logits["tiles"], f"{family} logits", atol=1e-5)
    kernels = results["torch"].run["models"][0]["kernels"]
    assert list(kernels) == ["materialised blocks, torch on the model's device"], kernels
    assert_same_tables(results["torch"], results["tiles"], family)


def test_a_vlms_language_stack_is_captured_apart_and_equals_its_checkpoint():
    # Gemma 3's image-text model: a SigLIP tower and the language model, two stacks; named,
    # the language stack is captured (the tower runs as SDPA runs it) and gives the tables
    # `analyze` gives of the multimodal checkpoint's text model
    from transformers import Gemma3ForConditionalGeneration

    folder = MODELS / "gemma3_multimodal"
    model = Gemma3ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    ids = family_ids(json.loads((folder / "config.json").read_text())["text_config"]["vocab_size"])
    with pytest.raises(asa.UsageError, match="no stack 'audio'"):
        asa.capture(model, stack="audio")
    # every stack captured, a text-only forward: the tower is never called, so the result is
    # the language stack's alone (no stack column: one model)
    with torch.no_grad(), asa.capture(model, metrics=FAMILY_METRICS) as every:
        model(input_ids=torch.tensor(ids), use_cache=False)
    assert [m["capture"]["stack"] for m in every.result().run["models"]] == ["language_model"]
    with torch.no_grad(), asa.capture(model, metrics=FAMILY_METRICS, stack="language_model") as cap:
        model(input_ids=torch.tensor(ids), use_cache=False)
    captured = cap.result()
    record = captured.run["models"][0]["capture"]
    assert record["stack"] == "language_model"
    assert [m["name"] for m in record["modules"]] == [f"model.language_model.layers.{l}.self_attn" for l in (0, 1)]
    analysed = asa.analyze({"model": folder}, corpus=ids, seq_len=len(ids[0]), num_seqs=len(ids), metrics=FAMILY_METRICS, bos="never", progress=False)
    assert_same_tables(captured, analysed, "gemma3 VLM")
    assert_same_tables(every.result(), analysed, "gemma3 VLM, every stack")


def test_a_vlms_vision_stack_is_its_vision_tower():
    # the other stack of Gemma 3's image-text model: captured inside the VLM (image features
    # through the model), it gives the tables of its SigLIP tower captured alone (a class
    # checked against float64 above); the tower is bidirectional
    from transformers import Gemma3ForConditionalGeneration

    model = Gemma3ForConditionalGeneration.from_pretrained(MODELS / "gemma3_multimodal", dtype=torch.float32).eval()
    size = model.config.vision_config.image_size
    pixels = torch.randn((2, 3, size, size), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), asa.capture(model, stack="vision_tower", metrics=FIVE) as inside:
        model.model.get_image_features(pixel_values=pixels)
    with torch.no_grad(), asa.capture(model.model.vision_tower, metrics=FIVE) as alone:
        model.model.vision_tower(pixel_values=pixels)
    got, want = inside.result(), alone.result()
    modules = got.run["models"][0]["capture"]["modules"]
    assert got.run["models"][0]["capture"]["stack"] == "vision_tower"
    assert [m["keys"] for m in modules] == ["bidirectional"] * len(modules)
    assert_same_tables(got, want, "gemma3 vision stack")


def test_forward_passes_pool_like_the_sequences_of_one_batch():
    folder = CAPTURE / "cohere2"
    ref = json.loads((folder / "reference.json").read_text())
    model = load(folder)
    ids = torch.tensor(ref["inputs"]["input_ids"])
    with torch.no_grad(), asa.capture(model) as whole:
        model(input_ids=ids, use_cache=False)
    with torch.no_grad(), asa.capture(model) as parts:
        for row in ids:  # one sequence a pass, and a third pass of the first again
            model(input_ids=row[None], use_cache=False)
    with torch.no_grad(), asa.capture(model) as three:
        model(input_ids=ids, use_cache=False)
        model(input_ids=ids[:1], use_cache=False)
    a, b = whole.result(), parts.result()
    assert a.run["models"][0]["capture"]["forward_passes"] == 1
    assert b.run["models"][0]["capture"]["forward_passes"] == 2
    for table, frame in a.tables.items():
        got = b.tables[table]
        assert got.shape == frame.shape, table
        for col in frame.columns:
            if frame[col].dtype.is_float():
                assert np.allclose(got[col].to_numpy(), frame[col].to_numpy(), rtol=1e-12, atol=1e-15, equal_nan=True), (table, col)
            else:
                assert got[col].to_list() == frame[col].to_list(), (table, col)
    # three sequences: the std over sequences now has three
    assert "3 sequences" in three.result().run["models"][0]["corpus"]


def test_outside_a_capture_the_backend_is_sdpa_and_gradients_flow_inside():
    folder = CAPTURE / "cohere2"
    ref = json.loads((folder / "reference.json").read_text())
    ids = torch.tensor(ref["inputs"]["input_ids"])
    asa.register()
    sdpa = load(folder)
    backend = load(folder, attn_implementation="asa")
    assert backend.config._attn_implementation == "asa"
    with torch.no_grad():
        close(backend(input_ids=ids).logits.numpy(), sdpa(input_ids=ids).logits.numpy(), "asa outside a capture", atol=1e-5)
    # in grad mode the statistics are the kernels' and gradients those of SDPA's forward
    with asa.capture(backend, metrics=["first_token"]) as cap:
        loss = backend(input_ids=ids, use_cache=False).logits.logsumexp(-1).mean()
    loss.backward()
    loss_sdpa = sdpa(input_ids=ids, use_cache=False).logits.logsumexp(-1).mean()
    loss_sdpa.backward()
    close(loss.item(), loss_sdpa.item(), "loss", atol=1e-5)
    for (name, p), q in zip(backend.named_parameters(), sdpa.parameters()):
        close(p.grad.numpy(), q.grad.numpy(), f"grad {name}", atol=1e-5, rtol=1e-4)
    ft = cap.result().attention.filter(pl.col("metric") == "first_token")
    close(ft.filter(pl.col("layer") == 1)["value"][0], ref["layers"][0]["first_token"], "first_token in grad mode")


def test_what_the_kernels_cannot_honour_is_refused_naming_the_module():
    model = load(CAPTURE / "helium")
    holed = dict(input_ids=torch.tensor([[1, 5, 6, 7], [1, 0, 6, 7]]), attention_mask=torch.tensor([[1, 1, 1, 1], [1, 0, 1, 1]]))
    with pytest.raises(asa.UsageError, match="model.layers.0.self_attn: sequence 1's tokens are not one run of positions"):
        with torch.no_grad(), asa.capture(model):
            model(**holed, use_cache=False)
    assert model.config._attn_implementation == "sdpa", "restored after a refusal too"
    with torch.no_grad(), asa.capture(model) as cap:
        model(input_ids=torch.tensor([[1, 5, 6, 7]]), use_cache=False)
        model(input_ids=torch.tensor([[1, 5, 6]]), use_cache=False)
        with pytest.raises(asa.UsageError, match="a sequence of 5 tokens in a capture of 4-token sequences"):
            model(input_ids=torch.tensor([[1, 5, 6, 7, 8]]), use_cache=False)
    with pytest.raises(asa.UsageError, match="1 queries against 5 keys: a decoding step with a cache"):
        with torch.no_grad(), asa.capture(model):
            model.generate(torch.tensor([[1, 5, 6, 7]]), max_new_tokens=2, do_sample=False)
    with pytest.raises(asa.UsageError, match="model.layers.0.self_attn is already being captured"):
        with asa.capture(model), asa.capture(model):
            pass
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(asa.UsageError, match="nothing was captured"):
        with asa.capture(model) as empty:
            pass
        empty.result()
    with pytest.raises(asa.UsageError, match="nll is not computed from attention calls"):
        asa.capture(model, metrics=["nll"])


def test_the_monitor_captures_the_training_batch_and_training_is_unchanged():
    # issue 64 item 6: every 2 steps the step's own forward goes through the backend; the
    # model trains exactly as without it (gradients are SDPA's) and each captured step's
    # rows are those of a capture of that step's weights and batch
    from transformers import AutoModelForCausalLM

    folder = MODELS / "llama_gqa"
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    batches = [(torch.tensor(family_ids(vocab, b=2, t=16)) + step) % vocab for step in range(5)]

    def train(monitor):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        weights = {}
        for step, ids in enumerate(batches):
            weights[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            context = monitor.capture(model, step) if monitor is not None else torch.enable_grad()
            with context:
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        return model, weights

    mon = asa.Monitor(every=2, metrics=FIVE)
    watched, weights = train(mon)
    plain, _ = train(None)
    for (name, a), b in zip(watched.named_parameters(), plain.parameters()):
        close(a.detach().numpy(), b.detach().numpy(), f"{name} after 5 steps", atol=1e-6, rtol=1e-5)
    series = mon.series
    assert sorted(set(series["step"].to_list())) == [0, 2, 4] and not mon.disabled
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    model.load_state_dict(weights[2])
    with torch.no_grad(), asa.capture(model, metrics=FIVE) as cap:
        model(input_ids=batches[2], use_cache=False)
    want = cap.result().attention.sort(["metric", "layer", "head", "stat"], nulls_last=True)
    got = series.filter(pl.col("step") == 2).sort(["metric", "layer", "head", "stat"], nulls_last=True)
    assert got.height == want.height
    # in grad mode the layers after the first read SDPA's outputs: f32 noise apart
    close(got["value"].to_numpy(), want["value"].to_numpy(), "step 2's rows")
    # a model the capture cannot honour: one warning, off, the step goes on through SDPA
    bad = asa.Monitor(every=1, metrics=FIVE)
    holed = dict(input_ids=torch.tensor([[1, 5, 6, 7], [1, 0, 6, 7]]), attention_mask=torch.tensor([[1, 1, 1, 1], [1, 0, 1, 1]]))
    with pytest.warns(UserWarning, match="turned off at step 0: .*not one run of positions"):
        with bad.capture(watched, 0):
            out = watched(**holed, use_cache=False).logits
    assert bad.disabled and out.shape[:2] == (2, 4)
    with bad.capture(watched, 1) as nothing:
        assert nothing is None


@pytest.mark.parametrize("name", ["bert", "modernbert", "vit"])
def test_bidirectional_distance_bands_cover_every_key_once(name):
    # keys on both sides share a query's bands (t = |i - j|): with the first band, they sum
    # to the weight sum, 1 for a softmax, per layer and head
    ref = json.loads((CAPTURE / name / "reference.json").read_text())
    model = load(CAPTURE / name, ref["kind"])
    with torch.no_grad(), asa.capture(model, metrics=["distance_profile", "weight_sum"]) as cap:
        forward(model, ref)
    bands = cap.result().distance_profile
    totals = bands.group_by(["layer", "head"]).agg(pl.col("value").sum())
    close(totals["value"].to_numpy(), np.ones(totals.height), f"{name} bands", atol=1e-6)
    assert bands["band"].unique().len() >= 3


def test_a_captures_result_writes_the_files_analyze_writes(tmp_path):
    folder = MODELS / "llama_gqa"
    ids = family_ids(json.loads((folder / "config.json").read_text())["vocab_size"])
    model = load(folder, dtype=torch.float32)
    with torch.no_grad(), asa.capture(model) as cap:
        model(input_ids=torch.tensor(ids), use_cache=False)
    written = {p.name for p in cap.result().write(tmp_path / "capture")}
    analysed = asa.analyze({"model": folder}, corpus=ids, seq_len=len(ids[0]), num_seqs=len(ids), bos="never", progress=False)
    # analyze's files but nll's (a capture sees attention calls, not logits) and the tokens'
    expected = {p.name for p in analysed.write(tmp_path / "analyze")} - {"nll_position.csv", "nll_bins.csv", "tokens.csv"}
    assert written == expected, (written ^ expected)
    record = json.loads((tmp_path / "capture" / "run.json").read_text())
    assert record["command"] == "python capture"
    assert record["models"][0]["capture"]["model_class"] == "LlamaForCausalLM"
    assert record["models"][0]["capture"]["transformers_version"] == transformers.__version__


def test_a_forward_pass_in_another_thread_is_captured():
    # a capture opened in one thread and fed from another (a serving or data thread)
    import threading

    ref = json.loads((CAPTURE / "cohere2" / "reference.json").read_text())
    model = load(CAPTURE / "cohere2")
    with torch.no_grad(), asa.capture(model, metrics=FIVE) as cap:
        worker = threading.Thread(target=forward, args=(model, ref))
        worker.start()
        worker.join()
    got = value(cap.result().attention, metric="first_token", layer=1, head=None, stat="mean")
    close(got, ref["layers"][0]["first_token"], "first_token from another thread")


@pytest.mark.parametrize("name", ["bert", "modernbert", "dinov2_with_registers", "starcoder2"])
def test_the_torch_path_in_blocks_of_one_query_matches_float64(name, monkeypatch):
    # bidirectional and sliding layers a query at a time: each block's keys, bands and key
    # sums placed by its queries
    monkeypatch.setattr("asa_analyze._torch_blocks.BLOCK_LOGITS", 1)
    test_capture_matches_transformers_float64_eager_attention(name, "torch")


def test_a_capture_takes_the_run_options_of_the_reduction_as_analyze_does():
    # issue 66 item 3: the capture's options are the run options of the metrics' reduction
    # (their one declaration); the same settings give analyze's tables, and an option about
    # windows, weights or devices is refused naming it
    folder = MODELS / "llama_gqa"
    ids = family_ids(json.loads((folder / "config.json").read_text())["vocab_size"])
    settings = dict(metrics=["weight_sum", "entropy", "distance_profile"], bins=7, min_query=3,
                    entropy_of="softmax", bands=[1, 4])
    model = load(folder, dtype=torch.float32)
    with torch.no_grad(), asa.capture(model, **settings) as cap:
        model(input_ids=torch.tensor(ids), use_cache=False)
    captured = cap.result()
    analysed = asa.analyze({"model": folder}, corpus=ids, seq_len=len(ids[0]), num_seqs=len(ids), bos="never",
                           progress=False, **settings)
    assert captured.run["options"]["bins"] == 7 and captured.run["options"]["bands"] == [1, 4]
    assert_same_tables(captured, analysed, "llama_gqa")
    assert captured.weight_sum_hist.height != asa.analyze(
        {"model": folder}, corpus=ids, seq_len=len(ids[0]), num_seqs=len(ids), bos="never", progress=False,
        metrics=["weight_sum"]).weight_sum_hist.height
    for name, value in [("batch_size", 2), ("dtype", "bf16"), ("probe", "induction")]:
        with pytest.raises(asa.UsageError, match=f"^{name} does not apply to a capture") as err:
            asa.capture(model, **{name: value})
        assert err.value.option == name
    with pytest.raises(asa.UsageError, match="^bins must be at least 1") as err:
        asa.capture(model, bins=0)
    assert err.value.option == "bins"
    with pytest.raises(TypeError, match="unexpected keyword argument 'binz'"):
        asa.capture(model, binz=3)
