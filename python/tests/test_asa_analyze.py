"""The Python package against the CLI (issue 27): the same run gives the same tables, in
DataFrames (through Arrow) and written by Result.write; Hub ids from a cache laid out as
huggingface_hub lays it out; bad input raises AsaError subclasses with the CLI's line;
Ctrl-C in a running analysis raises KeyboardInterrupt and writes nothing. The numbers
themselves are checked against float64 references by the Rust tests."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import asa_analyze as asa

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "models"
BIN = Path(os.environ.get("ASA_ANALYZE_BIN", ROOT / "target" / "release" / "asa-analyze"))
SMALL = dict(seq_len=16, num_seqs=3, progress=False)
SMALL_ARGS = ("--seq-len", "16", "--num-seqs", "3")


# a script's long analysis that says "started" once it runs and "interrupted" when Ctrl-C
# stops it with KeyboardInterrupt
LONG_RUN_UNTIL_CTRL_C = f"""
class Tell(asa._progress._Progress):
    def started(self, label, tokens):
        print("started", flush=True)
try:
    asa._native.analyze([("m", {str(FIXTURES / 'llama_gqa')!r})], seq_len=64, num_seqs=20000,
                        batch_size=1, events=Tell())
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def cli(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX")}
    out = subprocess.run([str(BIN), *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out


def assert_frame_equal_values(frame, want, name):
    """`frame` holds `want`'s columns and values (numbers to 1e-15 relative, NaN equal)."""
    assert frame.columns == want.columns and frame.height == want.height, name
    for col in frame.columns:
        got, exp = frame[col], want[col]
        if got.dtype.is_numeric() and exp.dtype.is_numeric():
            assert np.allclose(got.cast(pl.Float64).to_numpy(), exp.cast(pl.Float64).to_numpy(),
                               rtol=1e-15, atol=0, equal_nan=True), (name, col)
        else:
            assert got.cast(pl.Utf8).fill_null("").to_list() == exp.cast(pl.Utf8).fill_null("").to_list(), (name, col)


def test_frames_and_written_tables_equal_the_clis(tmp_path):
    models = {"sink": FIXTURES / "sink", "asa": FIXTURES / "affine_scaled"}
    res = asa.analyze(models, **SMALL)
    cli("analyze", *(f"{k}={v}" for k, v in models.items()), *SMALL_ARGS, "--quiet", "--out", "cli", cwd=tmp_path)
    written = res.write(tmp_path / "py")
    assert written and all(p.exists() for p in written)
    names = sorted(p.name for p in (tmp_path / "cli").glob("*.csv"))
    assert names and names == sorted(p.name for p in (tmp_path / "py").glob("*.csv"))
    for name in names:
        # the files: byte for byte what the CLI writes
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
        # the frames: the tables' values, as polars reads the CLI's CSV
        frame = getattr(res, name[: -len(".csv")])
        assert isinstance(frame, pl.DataFrame)
        want = pl.read_csv(tmp_path / "cli" / name, infer_schema_length=None)
        assert_frame_equal_values(frame, want, name)
    assert res.run["models"][0]["model"] == "sink" and res.run["models"][1]["variant"] == "affine_scaled"
    assert "attention (" in repr(res) and "'sink'" in repr(res)
    with pytest.raises(AttributeError, match="no table 'nope'"):
        res.nope


def test_the_run_record_is_typed_as_run_json_is_written():
    # issue 55 item 5: Result.run is a RunRecord (TypedDict) whose keys are run.json's: every
    # required key is there, and no key is outside the type (a model record likewise), for a
    # run from a folder and one of a model in memory (its host copy record included)
    folder = FIXTURES / "llama_gqa"
    runs = [asa.analyze(str(folder), **SMALL),
            asa.analyze({"m": (json.loads((folder / "config.json").read_text()),
                               read_safetensors(folder))}, tokenizer=str(folder / "tokenizer.json"), **SMALL)]
    for res in runs:
        for record, typed in [(res.run, asa.RunRecord)] + [(m, asa.ModelRecord) for m in res.run["models"]]:
            assert typed.__required_keys__ <= set(record), typed.__required_keys__ - set(record)
            assert set(record) <= typed.__required_keys__ | typed.__optional_keys__, \
                set(record) - typed.__required_keys__ - typed.__optional_keys__


def test_corpora_as_texts_and_token_ids(tmp_path):
    ids = np.array([[(7 * s + 3 * i) % 60 + 2 for i in range(16)] for s in range(3)])
    by_array = asa.analyze(FIXTURES / "llama_gqa", corpus=ids, bos="never", **SMALL)
    path = tmp_path / "ids.json"
    path.write_text(json.dumps(ids.tolist()))
    by_file = asa.analyze(FIXTURES / "llama_gqa", corpus=path, bos="never", **SMALL)
    assert by_array.attention.equals(by_file.attention)
    texts = ["to be or not to be that is the question " * 4, "whether tis nobler in the mind " * 6]
    res = asa.entropy(FIXTURES / "llama_gqa", corpus=texts, seq_len=8, num_seqs=2, progress=False)
    assert set(res.attention["metric"].unique()) == {"entropy"}


def test_document_windows_as_the_cli(tmp_path):
    texts = [f"document {i} " + "the cat sat on the mat and then it ran away " * (3 + i) for i in range(4)]
    res = asa.analyze({"sink": FIXTURES / "sink"}, corpus=texts, seq_len=16, num_seqs=3, windows="documents", progress=False)
    assert "one per document" in res.run["models"][0]["corpus"]
    with pytest.raises(asa.UsageError, match="unknown window mode"):
        asa.analyze({"sink": FIXTURES / "sink"}, windows="sampled", **SMALL)


def test_the_induction_probe_as_the_cli(tmp_path):
    # the engineered checkpoint's heads on the probe (tests/it/head_roles.rs checks the values
    # against tools/make_induction_fixtures.py's float64 reference; here: the CLI's tables)
    args = dict(seq_len=21, num_seqs=4, seed=3)
    res = asa.analyze({"hr": FIXTURES / "head_roles"}, probe="induction", progress=False, **args)
    cli("analyze", f"hr={FIXTURES / 'head_roles'}", "--probe", "induction", "--seq-len", "21",
        "--num-seqs", "4", "--seed", "3", "--quiet", "--out", "o", cwd=tmp_path)
    assert_frame_equal_values(res.head_roles, pl.read_csv(tmp_path / "o" / "head_roles.csv"), "head_roles")
    assert res.head_roles["role"].to_list()[4] == "induction"
    assert res.run["models"][0]["probe"] == {"probe": "induction", "copy_len": 10, "seed": 3}
    with pytest.raises(asa.UsageError, match="seq_len must be odd"):
        asa.analyze(FIXTURES / "head_roles", probe="induction", seq_len=20, num_seqs=1, progress=False)
    with pytest.raises(asa.UsageError, match="unknown probe `nope`"):
        asa.analyze(FIXTURES / "head_roles", probe="nope", seq_len=21, num_seqs=1, progress=False)


def test_block_map_and_head_role_options_as_the_cli(tmp_path):
    # block_map and head_roles with non-default --map-size and --role-* (issue 39): the
    # frames equal the tables the CLI writes for the same run, read from its files
    opts = dict(map_size=5, role_sink=0.3, role_local_window=4, role_local=0.6, role_prev=0.2,
                role_induction=0.25)
    metrics = ["first_token", "distance_profile", "block_map", "induction_score", "head_role"]
    args = dict(seq_len=21, num_seqs=3, seed=2)
    res = asa.analyze({"hr": FIXTURES / "head_roles"}, probe="induction", metrics=metrics,
                      progress=False, **args, **opts)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in opts.items()]
    cli("analyze", f"hr={FIXTURES / 'head_roles'}", "--probe", "induction", "--seq-len", "21",
        "--num-seqs", "3", "--seed", "2", "--metrics", ",".join(metrics), *flags, "--quiet",
        "--out", "o", cwd=tmp_path)
    assert_frame_equal_values(res.block_map, pl.read_parquet(tmp_path / "o" / "block_map.parquet"), "block_map")
    assert_frame_equal_values(res.head_roles, pl.read_csv(tmp_path / "o" / "head_roles.csv"), "head_roles")
    # 5 x 5 blocks of 21 positions: query block a holds [floor(21a/5), floor(21(a+1)/5))
    assert sorted(res.block_map["q_lo"].unique().to_list()) == [21 * a // 5 for a in range(5)]
    assert json.loads((tmp_path / "o" / "run.json").read_text())["options"]["roles"] == res.run["options"]["roles"]
    assert res.run["options"]["map_size"] == 5 and res.run["options"]["roles"]["local_window"] == 4


def test_every_run_option_is_declared_once_for_the_cli_python_and_the_stubs(tmp_path):
    # issue 66 item 3: the options' one declaration (RUN_OPTIONS) makes the CLI's flags, the
    # package's keyword arguments and the stubs; each states the same names and defaults
    import inspect
    from asa_analyze import _stubs
    declared = asa._native.run_options()
    assert len(declared) >= 33
    params = inspect.signature(asa.analyze).parameters
    help_text = " ".join(cli("analyze", "--help", cwd=tmp_path).stdout.split())
    for name, kind, default, _help in declared:
        flag = "--" + name.replace("_", "-")
        assert f"{flag} " in help_text or help_text.endswith(flag), name
        param = params[name]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY, name
        if default is not None and kind != "bool":
            after = help_text.split(f"{flag} <", 1)[1]
            assert f"[default: {default}]" in after.split(" --", 1)[0], name
            assert str(param.default) == default, (name, param.default, default)
        else:
            assert param.default in (None, False), name
    # the stubs' block is the one the declaration makes
    stubs = _stubs.STUBS.read_text()
    assert _stubs.stubs_text(stubs) == stubs, "python -m asa_analyze._stubs"
    assert all(f"    {name}: Optional[" in stubs for name, *_ in declared)


def test_run_options_take_every_setting_and_name_python_s_keyword(tmp_path):
    small = dict(seq_len=16, num_seqs=2, progress=False)
    # every RunSpec setting, among them the dtype: bf16 as `--dtype bf16`
    f32 = asa.analyze(FIXTURES / "sink", **small)
    bf16 = asa.analyze(FIXTURES / "sink", dtype="bf16", **small)
    cli("analyze", f"sink={FIXTURES / 'sink'}", "--seq-len", "16", "--num-seqs", "2", "--dtype", "bf16",
        "--quiet", "--out", "o", cwd=tmp_path)
    assert_frame_equal_values(bf16.attention, pl.read_csv(tmp_path / "o" / "attention.csv"), "attention")
    entropy = [r.attention.filter(pl.col("metric") == "entropy")["value"].to_numpy() for r in (f32, bf16)]
    assert 0 < abs(entropy[0] - entropy[1]).max() < 0.05, abs(entropy[0] - entropy[1]).max()
    res = asa.analyze(FIXTURES / "sink", min_query=3, bins=7, entropy_of="softmax", layer=1,
                      allow_nonfinite=True, bands=[1, 5], **small)
    options = res.run["options"]
    assert (options["min_query"], options["bins"], options["entropy_of"], options["layer"]) == (3, 7, "softmax", 1)
    assert (options["allow_nonfinite"], options["bands"]) == (True, [1, 5])
    # an option's error names it as Python spells it, with .option always set
    with pytest.raises(asa.UsageError, match="^map_size must be at least 1") as err:
        asa.analyze(FIXTURES / "head_roles", map_size=0, metrics=["block_map"], **small)
    assert (err.value.option, err.value.path) == ("map_size", None)
    with pytest.raises(asa.UsageError, match="^map_size sets block_map's side: add block_map to metrics") as err:
        asa.analyze(FIXTURES / "head_roles", map_size=8, **small)
    assert err.value.option == "map_size"
    with pytest.raises(asa.UsageError, match="^seq_len must be a whole number >= 0, got `-1`") as err:
        asa.analyze(FIXTURES / "sink", seq_len=-1, num_seqs=2, progress=False)
    assert err.value.option == "seq_len"
    with pytest.raises(asa.UsageError, match="^bins 1000001 is more than") as err:
        asa.analyze(FIXTURES / "sink", bins=1_000_001, **small)
    assert err.value.option == "bins"
    with pytest.raises(asa.UsageError, match="^dtype ") as err:
        asa.analyze(FIXTURES / "sink", dtype="f64", **small)
    assert err.value.option == "dtype"
    with pytest.raises(asa.UsageError) as err:
        asa.analyze(FIXTURES / "sink", allow_nonfinite=1, **small)
    assert err.value.option == "allow_nonfinite"
    with pytest.raises(TypeError, match="unexpected keyword argument 'seqlen'"):
        asa.analyze(FIXTURES / "sink", seqlen=16, num_seqs=2, progress=False)


def test_hub_ids_from_a_huggingface_cache(tmp_path, monkeypatch):
    repo = tmp_path / "hub" / "models--EleutherAI--pythia-tiny"
    shutil.copytree(FIXTURES / "qwen2", repo / "snapshots" / "abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert asa.inspect("EleutherAI/pythia-tiny")["architecture"] == "qwen2"
    res = asa.analyze("EleutherAI/pythia-tiny", **SMALL)
    assert res.attention["model"].unique().to_list() == ["EleutherAI/pythia-tiny"]
    with pytest.raises(asa.InputError, match="huggingface-cli download nobody/nothing"):
        asa.inspect("nobody/nothing")


def test_bad_input_raises_asa_errors_with_the_clis_line(tmp_path):
    with pytest.raises(asa.InputError) as err:
        asa.analyze(tmp_path / "missing", **SMALL)
    assert isinstance(err.value, ValueError) and isinstance(err.value, asa.AsaError)
    assert "\n" not in str(err.value)
    with pytest.raises(asa.UsageError, match="unknown metric `nope`"):
        asa.analyze(FIXTURES / "sink", metrics=["nope"], **SMALL)
    with pytest.raises(asa.UsageError, match="--bins|--seq-len|at least"):
        asa.analyze(FIXTURES / "sink", seq_len=16, num_seqs=3, batch_size=0, progress=False)
    with pytest.raises(asa.InputError, match="not a partial result"):
        asa.merge([tmp_path])
    # issue 55 item 3: the input an error is about is its type (subclasses of InputError)
    bad = tmp_path / "bad"
    shutil.copytree(FIXTURES / "sink", bad)
    config = json.loads((bad / "config.json").read_text())
    config["num_hidden_layers"] = 0
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(asa.CheckpointError, match="num_hidden_layers 0 must be at least 1") as err:
        asa.analyze(bad, **SMALL)
    assert (Path(err.value.path).name, err.value.option) == ("config.json", None)
    assert (err.value.problem, err.value.key, err.value.tensor) == ("out_of_range", "num_hidden_layers", None)
    # issue 66: a missing tensor or a wrong shape is a typed problem: .tensor names it
    config["num_hidden_layers"] = 2
    config["intermediate_size"] = 48
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(asa.CheckpointError, match="has shape") as err:
        asa.analyze(bad, **SMALL)
    assert (err.value.tensor, Path(err.value.path).name) == ("model.layers.0.mlp.gate_proj.weight", "model.safetensors")
    assert (err.value.option, err.value.problem) == (None, "shape")
    assert err.value.key is None
    # a setting the loader does not implement is typed too: .key names it
    config["intermediate_size"] = 64
    config["attention_variant"] = "magic"
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(asa.CheckpointError, match="attention_variant `magic` is not implemented") as err:
        asa.analyze(bad, **SMALL)
    assert (err.value.key, err.value.tensor, Path(err.value.path).name) == ("attention_variant", None, "config.json")
    assert err.value.problem == "unsupported"
    del config["attention_variant"]
    # a parser's refusal is about the same input: a CheckpointError naming the file
    (bad / "config.json").write_text("{")
    with pytest.raises(asa.CheckpointError, match="invalid config.json") as err:
        asa.analyze(bad, **SMALL)
    assert (Path(err.value.path).name, err.value.problem) == ("config.json", None)
    # an error raised in Python names neither
    with pytest.raises(asa.UsageError) as err:
        asa.analyze(FIXTURES / "sink", corpus=[[0, 1.5]], **SMALL)
    assert (err.value.path, err.value.option) == (None, None)
    log = tmp_path / "log.csv"
    log.write_text("step,loss\n1,2.0\n")
    with pytest.raises(asa.TrainingLogError, match="grad_norm"):
        asa.grad_stats(log)
    assert all(issubclass(e, asa.InputError) for e in
               (asa.CheckpointError, asa.CorpusError, asa.TableError, asa.TrainingLogError))


def test_ctrl_c_stops_a_run_with_keyboard_interrupt(tmp_path):
    script = f"""
import sys, asa_analyze as asa
{LONG_RUN_UNTIL_CTRL_C}
sys.exit(3)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stdout.readline().strip() == "started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "interrupted" in out, (proc.returncode, out)
    assert not any(tmp_path.iterdir())


def test_ctrl_c_after_a_write_still_raises_keyboard_interrupt(tmp_path):
    # issue 37: Result.write() installs no signal handler. Before, the first write started the
    # library's signal thread and a later Ctrl-C ended the interpreter (exit 130) instead of
    # raising KeyboardInterrupt.
    script = f"""
import signal, sys, asa_analyze as asa
res = asa.analyze({{"m": {str(FIXTURES / 'llama_gqa')!r}}}, seq_len=16, num_seqs=2, progress=False)
res.write("written")
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
{LONG_RUN_UNTIL_CTRL_C}
again = asa.analyze({{"m": {str(FIXTURES / 'llama_gqa')!r}}}, seq_len=16, num_seqs=2, progress=False)
print("alive", again.attention.height > 0, flush=True)
sys.exit(3)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stdout.readline().strip() == "started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "interrupted" in out and "alive True" in out, (proc.returncode, out)
    # the one write, whole, and nothing else: no staging folder, no partial output
    assert [p.name for p in tmp_path.iterdir()] == ["written"]
    assert sorted(p.name for p in (tmp_path / "written").iterdir() if p.name.startswith("."))  == []
    assert (tmp_path / "written" / "run.json").is_file()


def test_two_runs_in_two_threads_cancelling_one_leaves_the_other(tmp_path):
    import threading

    model = FIXTURES / "llama_gqa"
    started = threading.Event()

    class Tell(asa._progress._Quiet):
        def started(self, label, tokens):
            started.set()

    token = asa.CancelToken()
    outcome = {}

    def long_run():
        try:
            asa._native.analyze([("m", str(model))], seq_len=64, num_seqs=20000, events=Tell(), cancel=token)
            outcome["long"] = "finished"
        except asa.Cancelled:
            outcome["long"] = "cancelled"

    def short_run():
        outcome["short"] = asa.analyze({"m": model}, seq_len=16, num_seqs=3, progress=False)

    first = threading.Thread(target=long_run)
    first.start()
    assert started.wait(60)
    second = threading.Thread(target=short_run)
    second.start()
    token.cancel()
    first.join(60)
    second.join(120)
    assert token.cancelled and outcome["long"] == "cancelled", outcome
    res = outcome["short"]
    cli("analyze", f"m={model}", *SMALL_ARGS, "--quiet", "--out", "cli", cwd=tmp_path)
    names = sorted(p.name for p in (tmp_path / "cli").glob("*.csv"))
    assert names
    for name in names:
        frame = getattr(res, name[: -len(".csv")])
        want = pl.read_csv(tmp_path / "cli" / name, infer_schema_length=None)
        assert_frame_equal_values(frame, want, name)


def test_import_leaves_polars_for_the_first_frame():
    code = "import sys, asa_analyze; assert 'polars' not in sys.modules; asa_analyze.inspect"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_variant_overrides_detection_as_the_cli_does(tmp_path):
    model = tmp_path / "obo"
    shutil.copytree(FIXTURES / "off_by_one", model)
    config = json.loads((model / "config.json").read_text())
    del config["attention_variant"]
    (model / "config.json").write_text(json.dumps(config))
    detected = asa.analyze({"obo": model}, **SMALL)
    assert detected.run["models"][0]["variant"] == "softmax"
    res = asa.analyze({"obo": model}, variant="off_by_one", **SMALL)
    assert res.run["models"][0]["variant_source"] == "--variant"
    cli("analyze", f"obo={model}", "--variant", "off_by_one", *SMALL_ARGS, "--out", "r", "--quiet", cwd=tmp_path)
    want = pl.read_csv(tmp_path / "r" / "attention.csv")
    sink = res.attention.filter(pl.col("metric") == "sink_mass")
    assert sink.height > 0 and sink.height == want.filter(pl.col("metric") == "sink_mass").height
    assert np.allclose(res.attention["value"].to_numpy(), want["value"].to_numpy(), rtol=1e-12, equal_nan=True)
    with pytest.raises(asa.UsageError, match="unknown attention variant `magic`"):
        asa.analyze({"obo": model}, variant="magic", **SMALL)


def test_log_statistics_and_figures_equal_the_clis(tmp_path):
    log = tmp_path / "run.csv"
    rows = ["step,loss,grad_norm"] + [f"{s},{3 - s / 300:.4f},{1 + (s % 7) / 10 + (5 if s in (50, 120) else 0):.3f}" for s in range(200)]
    log.write_text("\n".join(rows) + "\n")
    stats = asa.grad_stats({"base": log}, steps="0..200")
    cli("grad-stats", f"base={log}", "--steps", "0..200", "--out", "g", "--quiet", cwd=tmp_path)
    want = pl.read_csv(tmp_path / "g" / "grad_stats.csv")
    assert stats.columns == want.columns and stats.height == want.height == 1
    assert np.allclose(stats["mean"].to_numpy(), want["mean"].to_numpy(), rtol=1e-15)
    found = asa.spikes(log, k=[6, 9])
    cli("spikes", str(log), "--k", "6,9", "--out", "s", "--quiet", cwd=tmp_path)
    assert found["spikes"]["count"].to_list() == pl.read_csv(tmp_path / "s" / "spikes.csv")["count"].to_list()
    assert sorted(found["spike_steps"]["step"].unique().to_list()) == [50, 120]
    with pytest.raises(asa.UsageError, match="--k takes non-negative numbers"):
        asa.spikes(log, k=[-1])
    curve = asa.curves({"base": log}, ema=0.9, steps="10..150")
    cli("curves", f"base={log}", "--ema", "0.9", "--steps", "10..150", "--out", "c", "--quiet", cwd=tmp_path)
    want = pl.read_csv(tmp_path / "c" / "curves.csv")
    assert curve.columns == want.columns and curve.height == want.height == 2 * 140
    assert np.allclose(curve["smoothed"].to_numpy(), want["smoothed"].to_numpy(), rtol=1e-12)
    with pytest.warns(UserWarning, match="grad_norm"):
        only_loss = tmp_path / "loss.csv"
        only_loss.write_text("step,loss\n0,3.0\n1,2.5\n")
        assert asa.curves(only_loss)["metric"].unique().to_list() == ["loss"]
    with pytest.raises(asa.UsageError, match="--ema takes a smoothing weight"):
        asa.curves(log, ema=1.5)
    res = asa.analyze({"sink": FIXTURES / "sink"}, **SMALL)
    res.write(tmp_path / "res")
    files = asa.figures(tmp_path / "res", tmp_path / "fig")
    assert any(p.suffix == ".png" for p in files) and all(p.exists() for p in files)
    with pytest.raises(asa.InputError, match="not a results folder"):
        asa.figures(tmp_path / "nowhere", tmp_path / "fig2")


def test_tables_equal_the_clis(tmp_path):
    lm = ROOT / "tests" / "fixtures" / "lm_eval"
    runs = {
        "1B/baseline": {"checkpoint": FIXTURES / "llama_gqa", "lm_eval": lm / "baseline.json"},
        "1B/asa": {"checkpoint": FIXTURES / "affine_scaled", "lm_eval": [lm / "asa.json"]},
    }
    got = asa.tables(runs, accuracy={"piqa": "acc_norm"})
    cli("tables", "--checkpoint", f"1B/baseline={FIXTURES / 'llama_gqa'}", "--checkpoint",
        f"1B/asa={FIXTURES / 'affine_scaled'}", "--lm-eval", f"1B/baseline={lm / 'baseline.json'}",
        "--lm-eval", f"1B/asa={lm / 'asa.json'}", "--accuracy", "piqa=acc_norm", "--out", "t", "--quiet", cwd=tmp_path)
    want = pl.read_csv(tmp_path / "t" / "paper_tables.csv", infer_schema_length=None)
    assert got.frame.columns == want.columns and got.frame.height == want.height
    assert np.allclose(got.frame["value"].to_numpy(), want["value"].to_numpy(), rtol=1e-15, equal_nan=True)
    assert got.markdown[1] == (tmp_path / "t" / "table1.md").read_text()
    assert got.latex[1] == (tmp_path / "t" / "table1.tex").read_text()
    assert "| 1B | Baseline |" in repr(got) and got._repr_markdown_() == repr(got)
    with pytest.raises(asa.UsageError, match="unknown task `mmlu`"):
        asa.tables(runs, accuracy={"mmlu": "acc"})


def read_safetensors(folder):
    """A checkpoint folder's tensors as numpy arrays, read with the format's own layout (an
    8-byte header length, a JSON header, the data): no safetensors package needed."""
    state = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        raw = file.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + n])
        for name, info in header.items():
            if name == "__metadata__":
                continue
            assert info["dtype"] == "F32", name
            lo, hi = info["data_offsets"]
            state[name] = np.frombuffer(raw[8 + n + lo : 8 + n + hi], dtype="<f4").reshape(info["shape"])
    return state


def test_a_model_in_memory_gives_the_tables_of_its_checkpoint():
    # a (config, state_dict) pair, as a trainer holds it: the tables of the folder it came
    # from, value for value (the Rust tests check the same bit for bit, bf16 included)
    ids = np.random.default_rng(0).integers(0, 50, size=(3, 16)).tolist()
    for name in ["llama_gqa", "sink", "affine_scaled"]:
        folder = FIXTURES / name
        config = json.loads((folder / "config.json").read_text())
        state = read_safetensors(folder)
        from_folder = asa.analyze({"m": folder}, corpus=ids, **SMALL)
        from_memory = asa.analyze({"m": (config, state)}, corpus=ids, **SMALL)
        # the folder's tokenizer.json gives the first window's text (the tokens table); a
        # (config, state_dict) pair has no tokenizer, so no text: every other table is equal
        assert "tokens" in from_folder.tables and "tokens" not in from_memory.tables, name
        assert set(from_memory.tables) == set(from_folder.tables) - {"tokens"}, name
        for table, frame in from_memory.tables.items():
            assert from_folder.tables[table].equals(frame), (name, table)
        # inspect says of it what it says of the folder, but where it came from
        from_memory, from_folder = asa.inspect((config, state)), asa.inspect(folder)
        assert from_memory.pop("checkpoint") == "<memory>/model" and from_folder.pop("checkpoint") == str(folder)
        assert from_memory == from_folder, name
    # a text corpus with a model in memory reads the tokenizer it is given
    text = asa.analyze((config, state), tokenizer=FIXTURES / "llama_gqa" / "tokenizer.json", **SMALL)
    assert text.run["models"][0]["model"] == "model"


def test_a_state_dict_that_does_not_fit_raises_naming_the_tensor():
    folder = FIXTURES / "llama_gqa"
    config = json.loads((folder / "config.json").read_text())
    state = read_safetensors(folder)
    ids = [[1, 2, 3, 4] * 4] * 2
    missing = dict(state)
    del missing["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(asa.AsaError, match="model.layers.1.self_attn.k_proj.weight"):
        asa.analyze({"m": (config, missing)}, corpus=ids, **SMALL)
    ints = dict(state)
    ints["model.norm.weight"] = np.ones(ints["model.norm.weight"].shape, dtype=np.int64)
    with pytest.raises(asa.UsageError, match="model.norm.weight.*int64"):
        asa.analyze({"m": (config, ints)}, corpus=ids, **SMALL)


def test_monitor_analyses_snapshots_in_the_background_with_their_steps(tmp_path):
    # a training loop changing the weights in place every step: each analysed step's rows
    # are those of a direct analysis of the weights as they were at that step
    folder = FIXTURES / "llama_gqa"
    config = json.loads((folder / "config.json").read_text())
    state = {k: v.copy() for k, v in read_safetensors(folder).items()}
    ids = np.random.default_rng(1).integers(0, 50, size=(2, 16))
    logged = []
    mon = asa.Monitor(probe=ids, every=2, log=lambda values, step: logged.append((step, values)))
    want = {}
    for step in range(6):
        state["model.layers.0.self_attn.q_proj.weight"] *= 1.5  # training moves the weights
        if step % 2 == 0:
            want[step] = asa.analyze({"model": (config, state)}, corpus=ids, seq_len=16, num_seqs=2,
                                     metrics=list(asa.monitor.DEFAULT_METRICS), progress=False).attention
        assert mon((config, state), step) == (step % 2 == 0)
        mon.wait()  # one at a time here: none skipped
    series = mon.series
    assert sorted(set(series["step"].to_list())) == [0, 2, 4] and mon.skipped == 0
    for step, frame in want.items():
        got = series.filter(pl.col("step") == step).drop("step")
        assert got.equals(frame), step
    # the values change with the weights, and the loggers got them with their steps
    first = [series.filter((pl.col("step") == s) & (pl.col("metric") == "entropy") & (pl.col("layer") == 1)
                           & pl.col("head").is_null() & (pl.col("stat") == "mean"))["value"][0] for s in (0, 4)]
    assert first[0] != first[1]
    assert [s for s, _ in logged] == [0, 2, 4] and "attn/entropy/layer_01" in logged[0][1]
    # a request while an analysis runs is skipped and counted, never waited for
    slow = asa.Monitor(probe=np.tile(ids, (400, 4)), every=1)
    assert slow((config, state), 10) is True
    assert slow((config, state), 11) is False and slow.skipped == 1
    slow.wait()
    out = mon.write(tmp_path / "series")
    assert pl.read_csv(out).height == series.height


def test_a_monitor_handed_what_it_cannot_read_warns_once_and_turns_off():
    # issue 53: never an exception into the training loop; a DDP-style wrapper is unwrapped
    torch = pytest.importorskip("torch")
    mon = asa.Monitor(probe=[[1, 2, 3, 4]], every=1)
    with pytest.warns(UserWarning, match="turned off at step 0: cannot read a Linear"):
        assert mon(torch.nn.Linear(2, 2), 0) is False
    assert mon.disabled and mon(torch.nn.Linear(2, 2), 1) is False
    # a probe longer than the model's positions, found at a request: off too, no exception
    folder = FIXTURES / "llama_gqa"
    config = json.loads((folder / "config.json").read_text())
    state = read_safetensors(folder)
    long = asa.Monitor(probe=np.ones((1, config["max_position_embeddings"] + 1), dtype=np.int64), every=1)
    with pytest.warns(UserWarning, match="turned off at step 3: probe: .* exceed the model's max_position_embeddings"):
        assert long((config, state), 3) is False
    assert long.disabled and long.series.height == 0

    class Wrapper(torch.nn.Module):  # DistributedDataParallel's shape: the model as .module
        def __init__(self, module):
            super().__init__()
            self.module = module

    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    ok = asa.Monitor(probe=[[1, 2, 3, 4]], every=1)
    assert ok(Wrapper(model), 0) is True
    ok.wait()
    # torch.compile's wrapper (`_orig_mod`) inside a DDP-style one
    assert ok(Wrapper(torch.compile(model)), 1) is True
    ok.wait()
    assert set(ok.series["step"].to_list()) == {0, 1} and ok.gathers[0]["bytes"] > 0
    assert not ok.disabled


def test_bad_inputs_raise_python_exceptions_never_a_panic_or_a_truncation():
    # issue 54: asa.report([]) panicked (PanicException escapes `except Exception`); a float
    # token id was truncated (3.7 -> 3) and analysed
    with pytest.raises(asa.UsageError, match="report needs at least one results folder"):
        asa.report([])
    folder = FIXTURES / "llama_gqa"
    for bad in ([[1, 2, 3.7, 4]], [[1, True, 3, 4]], np.array([[1.0, 2.0, 3.0, 4.0]])):
        with pytest.raises(asa.UsageError, match="token ids must be integers; row 0, position"):
            asa.analyze(str(folder), corpus=bad, seq_len=4, num_seqs=1, progress=False)
    assert issubclass(asa.UsageError, ValueError) and issubclass(asa.AsaError, Exception)


def test_the_docs_list_exactly_the_librarys_checkpoint_problems():
    # issue 66: CHECKPOINT_PROBLEMS comes from Rust's CheckpointProblem (its variants' names);
    # the three places that name the problems for a reader list exactly these, in its order
    import re
    from asa_analyze import _errors
    names = list(asa.CHECKPOINT_PROBLEMS)
    assert len(names) == 15 and {"missing_tensor", "out_of_range", "non_finite"} <= set(names)
    stub = (ROOT / "python" / "asa_analyze" / "_native.pyi").read_text()
    docs = (ROOT / "docs" / "python.md").read_text()
    places = [("_errors.py", _errors.__doc__, "lists them):"),
              ("_native.pyi", stub, "`CHECKPOINT_PROBLEMS`):"),
              ("docs/python.md", docs, "lists them):")]
    for where, text, marker in places:
        listed = text.split(marker, 1)[1].split("None", 1)[0]
        assert re.findall(r"`([a-z_]+)`", listed) == names, where


def test_windows_past_the_memory_limit_raise_an_input_error_before_any_work():
    # issue 54: `--seq-len 1000001` under a memory limit aborted the process; from Python an
    # abort kills the interpreter. Windows whose hidden states alone pass what the process
    # may take (here `ulimit -v`, 768 MiB) are refused before a weight is read.
    script = f"""
import resource
import asa_analyze as asa
resource.setrlimit(resource.RLIMIT_AS, (768 << 20, 768 << 20))
try:
    asa.analyze({str(FIXTURES / 'llama_gqa')!r}, seq_len=4_000_000, num_seqs=1, progress=False)
except asa.InputError as e:
    print("refused:", e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout and "GiB of memory available" in out.stdout, out.stdout + out.stderr


def test_a_damaged_parquet_page_raises_an_input_error_not_an_abort():
    # issue 54, the fuzz hour's one Python defect: a page header of attention.parquet
    # claiming -37 values made polars' level decoder reserve 2^61 bytes and the interpreter
    # abort (status 134). The table's counts are checked before polars decodes it.
    damaged = ROOT / "tests" / "fixtures" / "damaged" / "negative_page_values"
    script = f"""
import asa_analyze as asa
try:
    asa.report({str(damaged)!r})
except asa.TableError as e:
    print("refused:", e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout and "attention.parquet" in out.stdout, out.stdout + out.stderr
    assert "values -37, outside 0..=16" in out.stdout, out.stdout


def test_a_config_claiming_two_billion_layers_raises_an_input_error_not_an_abort():
    # issue 54, the second fuzz hour's Python harness: a model in memory whose config says
    # num_hidden_layers 2**31 laid out every layer's structures (154 GB) and the interpreter
    # aborted (status 134); the count is refused before anything is laid out
    folder = FIXTURES / "llama_gqa"
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 2**31
    script = f"""
import json
import asa_analyze as asa
from safetensors.numpy import load_file
from pathlib import Path
state = {{}}
for shard in sorted(Path({str(folder)!r}).glob("*.safetensors")):
    state.update(load_file(shard))
try:
    asa.analyze({{"m": (json.loads({json.dumps(json.dumps(config))}), state)}}, seq_len=8, num_seqs=1,
                progress=False)
except asa.CheckpointError as e:
    print("refused:", e.problem, e.key, e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("refused: out_of_range num_hidden_layers "), out.stdout + out.stderr[-2000:]
    assert "num_hidden_layers 2147483648 must be at most 65536" in out.stdout, out.stdout


def test_numbers_out_of_range_and_odd_models_are_value_errors_naming_the_argument():
    # issue 54, found by python/tests/fuzz_entry_points.py: a negative or too large number
    # raised the OverflowError of PyO3's conversion (not a ValueError); threads=2**31 started
    # two billion threads; a config that is a list raised AttributeError; a step past the
    # series' i64 was accepted
    folder = str(FIXTURES / "llama_gqa")
    small = dict(seq_len=16, num_seqs=1, progress=False)
    # (issue 66: a run option's value is read by the CLI's own parser, which names it)
    for name, value in [("seq_len", -1), ("batch_size", 2**64), ("seed", -1), ("map_size", 2**70)]:
        with pytest.raises(asa.UsageError, match=f"^{name} must be a whole number") as err:
            asa.analyze(folder, **{**small, name: value})
        assert err.value.option == name
    with pytest.raises(asa.UsageError, match="threads 2147483648 is more than 4096"):
        asa.analyze(folder, threads=2**31, **small)
    with pytest.raises(asa.UsageError, match="argument 'ddof'"):
        asa.grad_stats(ROOT / "tests" / "fixtures" / "logs" / "noisy.csv", ddof=-1)
    state = read_safetensors(FIXTURES / "llama_gqa")
    for config in ([], None, 3):
        with pytest.raises(asa.UsageError, match="its config is a"):
            asa.analyze({"m": (config, state)}, **small)
    monitor = asa.Monitor(probe=[[1, 2, 3, 4]], every=1)
    for step, error in [(2**63, ValueError), (-1, ValueError), (True, TypeError), ("3", TypeError)]:
        with pytest.raises(error, match="step"):
            monitor.request({"m": ({}, {})}, step)


def test_a_run_on_threads_of_its_own_gives_the_same_tables():
    # threads= caps a run (beside a training loop) without changing a value; a model on the
    # host needs no host copy, and run.json says none
    folder = FIXTURES / "llama_gqa"
    config = json.loads((folder / "config.json").read_text())
    state = read_safetensors(folder)
    ids = np.random.default_rng(3).integers(0, 50, size=(2, 16))
    whole = asa.analyze({"m": (config, state)}, corpus=ids, seq_len=16, num_seqs=2, progress=False)
    one = asa.analyze({"m": (config, state)}, corpus=ids, seq_len=16, num_seqs=2, progress=False, threads=1)
    for name, frame in whole.tables.items():
        assert one.tables[name].equals(frame), name
    assert "host_copy" not in one.run["models"][0]
    with pytest.raises(asa.UsageError, match="threads must be at least 1"):
        asa.analyze({"m": (config, state)}, corpus=ids, seq_len=16, num_seqs=2, progress=False, threads=0)


def test_the_monitor_checks_its_probe_at_construction_and_its_ids_at_the_first_request():
    # issue 65 item 4: floats, ragged rows, negative ids and a wrong shape raise at once,
    # naming the probe; ids past the vocabulary raise once, at the first request
    for bad, words in [
        (np.array([[0.5, 1.5]]), "must be integers, not float64"),
        ([[1, 2], [3]], "rows differ in length"),
        ([[1, -2]], "token id -2 is negative"),
        ([1, 2, 3], r"\[sequences, tokens\], not of shape \[3\]"),
        ([[True, False]], "must be integers, not bool"),
    ]:
        with pytest.raises(asa.UsageError, match=words):
            asa.Monitor(probe=bad)
    assert asa.Monitor(probe=["a text"]).probe == ["a text"] and asa.Monitor().probe is None
    folder = FIXTURES / "llama_gqa"
    config = json.loads((folder / "config.json").read_text())
    state = read_safetensors(folder)
    vocab = config["vocab_size"]
    mon = asa.Monitor(probe=[[1, 2, vocab]], every=1)
    with pytest.raises(asa.UsageError, match=f"token id {vocab} is past the model's vocabulary of {vocab} ids"):
        mon((config, state), 0)
    assert mon.disabled and mon((config, state), 1) is False, "raised once, then off"
    fine = asa.Monitor(probe=[[1, 2, vocab - 1, 3]], every=1)
    assert fine((config, state), 0) is True
    fine.wait()
    assert fine.series.height > 0
