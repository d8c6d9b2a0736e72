"""Training callbacks against a real training run (issue 38): a transformers Trainer and a
Lightning Trainer train a tiny Llama on the CPU with the callback every 10 steps and a
checkpoint saved at the same steps; the values each logger received, at the analysed step,
equal the CLI's analysis of the checkpoint saved at that step. TensorBoard's event files are
read back with tensorboard's own reader, Lightning's CSV logger file with polars. Also the
bad input of live models (meta tensors, a probe too long, an analysis that fails) and the
peak memory of a bf16 model analysed from memory."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

torch = pytest.importorskip("torch", reason="the callback tests need torch (CI installs it)")
transformers = pytest.importorskip("transformers")

import asa_analyze as asa
from asa_analyze.callbacks import AttentionStats

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("ASA_ANALYZE_BIN", ROOT / "target" / "release" / "asa-analyze"))
METRICS = ("first_token", "sink_rate", "entropy", "max_logit", "qk_mean", "weight_sum")
STEPS = (10, 20, 30)
SEQ = 16


def tiny_llama(seed=0):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    )
    return transformers.LlamaForCausalLM(config)


def training_rows(n, seed=1):
    ids = np.random.default_rng(seed).integers(3, 64, size=(n, SEQ))
    return [{"input_ids": torch.tensor(r), "labels": torch.tensor(r)} for r in ids]


def probe_ids():
    return np.random.default_rng(7).integers(3, 64, size=(2, SEQ))


def cli_layer_means(checkpoint, probe, tmp):
    """`{"attn/<metric>/layer_NN": value}` of the layer means (and `{"attn/<metric>": value}`
    of the whole-model ones) in the CLI's analysis of `checkpoint` on the probe ids (read
    from its attention.csv)."""
    corpus = tmp / "probe.npy"
    np.save(corpus, probe.astype(np.int64))
    out = tmp / f"cli-{checkpoint.name}"
    run = subprocess.run(
        [str(BIN), "analyze", str(checkpoint), "--corpus", str(corpus), "--seq-len", str(SEQ),
         "--num-seqs", str(len(probe)), "--metrics", ",".join(METRICS), "--out", str(out), "-q"],
        capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr
    att = pl.read_csv(out / "attention.csv")
    rows = att.filter((pl.col("stat") == "mean") & pl.col("head").is_null())
    means = {f"attn/{r['metric']}" + ("" if r["layer"] is None else f"/layer_{r['layer']:02d}"): r["value"]
             for r in rows.iter_rows(named=True)}
    assert {k.split("/")[1] for k in means} >= set(METRICS)
    return means, att


def assert_logged(got, want, where):
    assert set(want) <= set(got), (where, sorted(set(want) - set(got)))
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-6), (where, key)


def test_trainer_callback_logs_the_analysis_of_each_saved_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    probe = probe_ids()
    stats = AttentionStats(probe=probe, every=10, out=tmp_path / "attn")
    tb = tmp_path / "tb"
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=30, per_device_train_batch_size=2,
        learning_rate=1e-2, save_strategy="steps", save_steps=10, logging_steps=10,
        report_to=["tensorboard"], use_cpu=True, seed=0, disable_tqdm=True,
    )
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(tb)
    try:
        trainer = transformers.Trainer(
            model=tiny_llama(), args=args, train_dataset=training_rows(60), callbacks=[stats]
        )
        if hasattr(trainer.args, "logging_dir"):
            trainer.args.logging_dir = str(tb)
        trainer.train()
    finally:
        os.environ.pop("TENSORBOARD_LOGGING_DIR", None)

    analysed = sorted(set(stats.series["step"].to_list()))
    # at most one analysis in flight: a step is analysed or counted as skipped, never lost
    assert len(analysed) + stats.skipped == len(STEPS) and set(analysed) <= set(STEPS)
    assert analysed, "no step was analysed"
    history = {h["step"]: h for h in trainer.state.log_history if any(k.startswith("attn/") for k in h)}
    assert sorted(history) == analysed

    board = {}  # tag -> {step: value}, from every event file the logger wrote
    for path in sorted(tb.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            board.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    assert board, f"no TensorBoard scalars under {tb}"

    for step in analysed:
        want, att = cli_layer_means(tmp_path / "run" / f"checkpoint-{step}", probe, tmp_path)
        assert_logged(history[step], want, f"log_history step {step}")
        # the TensorBoard logger got them at the analysed step ("train/" as for the loss)
        assert_logged({k[len("train/"):]: v[step] for k, v in board.items()
                       if k.startswith("train/attn/") and step in v}, want, f"TensorBoard step {step}")
        # the series rows are the CLI's rows
        got = stats.series.filter(pl.col("step") == step)
        assert got.height == att.height
        assert np.allclose(got["value"].to_numpy(), att["value"].cast(pl.Float64).to_numpy(),
                           rtol=1e-6, atol=1e-6, equal_nan=True)
    written = pl.read_csv(tmp_path / "attn" / "attention_series.csv")
    assert sorted(set(written["step"].to_list())) == analysed


def test_lightning_callback_logs_the_analysis_of_each_saved_step(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import CSVLogger

    from asa_analyze.callbacks import LightningAttentionStats

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = tiny_llama()

        def training_step(self, batch, _):
            return self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    class SaveAtSteps(lightning.Callback):
        """save_pretrained at the steps the attention callback analyses (after it, so both
        see the same weights)."""

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.global_step in STEPS and not (tmp_path / f"step-{trainer.global_step}").exists():
                module.model.save_pretrained(tmp_path / f"step-{trainer.global_step}")

    probe = probe_ids()
    stats = LightningAttentionStats(probe=probe, every=10)
    loader = torch.utils.data.DataLoader(training_rows(60), batch_size=2)
    trainer = lightning.Trainer(
        max_steps=30, accelerator="cpu", logger=CSVLogger(tmp_path, name="csv"), log_every_n_steps=10,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[stats, SaveAtSteps()],
    )
    trainer.fit(Module(), loader)

    analysed = sorted(set(stats.series["step"].to_list()))
    assert analysed and len(analysed) + stats.skipped == len(STEPS) and set(analysed) <= set(STEPS)
    logged = pl.read_csv(next(tmp_path.rglob("metrics.csv")))
    for step in analysed:
        want, _ = cli_layer_means(tmp_path / f"step-{step}", probe, tmp_path)
        rows = logged.filter(pl.col("step") == step)
        got = {k: v for r in rows.iter_rows(named=True) for k, v in r.items() if k.startswith("attn/") and v is not None}
        assert_logged(got, want, f"CSV logger step {step}")


def quiet_trainer(tmp_path, stats, steps):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=steps, per_device_train_batch_size=2,
        save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
    )
    return transformers.Trainer(model=tiny_llama(), args=args, train_dataset=training_rows(2 * steps),
                                callbacks=[stats])


def test_a_failing_analysis_warns_once_and_training_goes_on(tmp_path):
    # an analysis option no analysis can take (map_size 0): every analysis fails, training
    # does not
    stats = AttentionStats(probe=probe_ids(), every=5, metrics=["block_map"], map_size=0)
    trainer = quiet_trainer(tmp_path, stats, 15)
    with pytest.warns(UserWarning, match="analysis of step 5 failed.*map.size") as caught:
        trainer.train()
    assert trainer.state.global_step == 15
    assert sum("asa_analyze" in str(w.message) for w in caught) == 1
    assert stats.series.height == 0


def test_probe_ids_past_the_vocabulary_are_refused_before_training(tmp_path):
    # issue 65 item 4: the probe is checked against the model before training goes on
    stats = AttentionStats(probe=np.full((2, SEQ), 100), every=5)
    trainer = quiet_trainer(tmp_path, stats, 5)
    with pytest.raises(asa.UsageError, match="probe: token id 100 is past the model's vocabulary of 64 ids"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_a_probe_longer_than_the_models_positions_is_refused_before_training(tmp_path):
    stats = AttentionStats(probe=np.full((1, 200), 5), every=5)
    trainer = quiet_trainer(tmp_path, stats, 5)
    with pytest.raises(asa.UsageError, match="probe: 200 tokens per sequence exceed the model's max_position_embeddings 64"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_a_model_on_the_meta_device_is_refused_naming_the_tensor():
    with torch.device("meta"):
        model = tiny_llama()
    with pytest.raises(asa.UsageError, match="model.embed_tokens.weight.*meta device"):
        asa.analyze(model, corpus=probe_ids(), seq_len=SEQ, num_seqs=2, progress=False)


PEAK_RSS = """
import json, sys, numpy as np, torch, transformers, asa_analyze as asa
def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key))
cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=256)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16)
ids = np.random.default_rng(0).integers(3, 32000, size=(1, 64))
open("/proc/self/clear_refs", "w").write("5")  # VmHWM from here
before = status("VmRSS:")
if sys.argv[1] == "f32-copy":  # what a handover through float32 arrays would hold
    model = (cfg.to_dict(), {k: v.float().numpy() for k, v in model.state_dict().items()})
asa.analyze(model, corpus=ids, seq_len=64, num_seqs=1, progress=False, metrics=["entropy"])
print(json.dumps({"extra": status("VmHWM:") - before,
                  "bf16": sum(p.numel() * 2 for p in model.parameters()) if sys.argv[1] == "in-place" else None}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's VmHWM reset")
def test_a_bf16_model_in_memory_holds_no_second_float32_copy(tmp_path):
    # the analysis computes in float32, so one float32 copy of the bf16 weights (2x their
    # bytes) is made, as for a bf16 checkpoint on disk; handing the tensors over through
    # float32 arrays would hold a second one (measured: 2.4x in place, 4.5x through f32)
    def extra(mode):
        out = subprocess.run([sys.executable, "-c", PEAK_RSS, mode], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    in_place = extra("in-place")
    cap = 3 * in_place["bf16"]
    assert in_place["extra"] < cap, (in_place, cap)
    assert extra("f32-copy")["extra"] > cap  # the cap tells the two apart


@pytest.mark.parametrize(
    "name",
    ["smollm3", "olmo3", "llama4_text", "glm4_moe", "deepseek_v3", "qwen3_moe", "mixtral", "lfm2", "qwen3_next", "granitemoehybrid", "falcon_h1", "cohere2"],
)
def test_a_transformers_model_of_each_family_gives_the_tables_of_its_checkpoint(name):
    # issue 52: the model object transformers loads from a fixture folder (its MoE experts
    # fused in memory, its config as `to_dict` gives it) analysed from memory: every table
    # of the folder itself, value for value (the folder's are checked against float64)
    folder = ROOT / "tests" / "fixtures" / "models" / name
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = np.random.default_rng(1).integers(0, 64, size=(2, SEQ)).tolist()
    small = dict(seq_len=SEQ, num_seqs=2, progress=False)
    from_folder = asa.analyze({"m": folder}, corpus=ids, **small)
    from_memory = asa.analyze({"m": model}, corpus=ids, **small)
    assert set(from_memory.tables) == set(from_folder.tables) - {"tokens"}, name
    for table, frame in from_memory.tables.items():
        assert from_folder.tables[table].equals(frame), (name, table)
