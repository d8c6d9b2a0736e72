"""GGUF files written by llama.cpp's own converter (issue 65 item 5), for the tiny
transformers checkpoints of tests/fixtures/models/.

The converter is `convert_hf_to_gguf.py` of the llama.cpp vendored in the llama-cpp-python
sdist on PyPI (fetched with `pip download --no-deps --no-binary llama-cpp-python
llama-cpp-python==VERSION` into ~/.cache/asa-tools/, or given with --llama-cpp DIR), run
unchanged on each checkpoint folder with `--outtype f32`, its own gguf-py on the path, in
this interpreter (transformers 5, which made the checkpoints; the converter's own pin,
transformers 4.57.6, converts fewer of them: it reads their configs with its older
defaults). One thing is set around it: the tiny checkpoints' tokenizers are not among the pre-tokenizers
the converter recognises by hash (it refuses them), so an unrecognised one is written as
`gpt-2` (`tokenizer.ggml.pre`: how llama.cpp splits text, which no attention metric reads).
And the converter reads some config.json keys in the form the Hub's checkpoints have them,
not as transformers 5 saves the tiny ones: the copy it converts gets them as the Hub has
them (`HUB_FORM`: the same model, the keys it already has, named as the converter reads
them; without, the converter writes a different model: Granite's layers all Mamba,
DeepSeek-V3's routing as softmax), and a tokenizer whose vocabulary is larger than the
tiny model's is cut to it (the converter asserts it fits).
Each family the converter cannot convert is listed with its reason in
tests/fixtures/gguf/converted/README.md; the Rust tests (tests/it/converted_gguf.rs) check
every written file against the checkpoint's float64 references.

    python tools/make_converted_gguf_fixtures.py [--llama-cpp DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
OUT = ROOT / "tests" / "fixtures" / "gguf" / "converted"
VERSION = "0.3.36"
CACHE = Path.home() / ".cache" / "asa-tools" / f"llama-cpp-python-{VERSION}"
# the families asa-analyze reads (one checkpoint each, the variants' folders beside them)
FAMILIES = [
    "llama_gqa", "qwen2", "qwen2_window", "mistral", "mixtral", "gemma2", "gemma3", "gpt_oss", "olmo2",
    "olmo3", "phi3", "qwen3", "qwen3_moe", "gpt2", "gpt_neox", "smollm3", "llama4_text", "deepseek_v3",
    "glm4_moe", "granitemoehybrid", "lfm2", "falcon_h1", "qwen3_next",
]

# why the converter stops on a tiny checkpoint, beside its own last words
WHY_NOT = {
    "gemma2": "it reads Gemma 2's vocabulary from a SentencePiece tokenizer.model only; the checkpoint has tokenizer.json",
    "phi3": "it reads Phi-3's vocabulary from a SentencePiece tokenizer.model only; the checkpoint has tokenizer.json",
    "qwen3_moe": "it maps no dense MLP in a Qwen MoE model (the checkpoint's layer 0, `mlp_only_layers`; llama.cpp's loader has none either)",
    "qwen3_next": "as Qwen3-MoE's (with `--no-mtp`: the checkpoint has no multi-token-prediction head)",
    "gpt_neox": "it reads `rotary_pct` through transformers' AutoConfig, which in transformers 5 keeps it only as `rope_parameters.partial_rotary_factor`",
    "glm4_moe": "it looks GLM's special tokens (`[gMASK]`) up in the tokenizer; the checkpoint's has none",
}

# converted, but not the checkpoint's model: what the converter leaves out, llama.cpp reads
# as its defaults (the Rust tests check the others against the float64 references)
NOT_THE_MODEL = {
    "qwen2_window": "the sliding window (`use_sliding_window`, `max_window_layers`) is not written: every layer full",
    "gemma3": "no `sliding_window_pattern` is written and llama.cpp's gemma3 fixes every 6th layer global; the checkpoint's `layer_types` make every 2nd",
    "llama4_text": "`attention_chunk_size` 8, `floor_scale` 4 and `attn_scale` 0.5 are not written: llama.cpp's llama4 fixes 8192, 8192 and 0.1 (the file gives the float64 reference of that model, `llama4_text_gguf`, tested)",
    "gpt2": "`feed_forward_length` is written as 4 x n_embd (128), the checkpoint's `n_inner` (64) ignored: the tensors do not fit it (refused, naming the tensor)",
    "gpt_oss": "written as `gpt-oss`, an architecture asa-analyze reads from checkpoints only (refused, naming it)",
}


def granite_layer_types(config):
    """ibm-granite's names: `mamba` and `attention` (transformers 5 saves `linear_attention`
    and `full_attention`, which the converter does not read as attention)."""
    names = {"linear_attention": "mamba", "full_attention": "attention"}
    config["layer_types"] = [names.get(t, t) for t in config["layer_types"]]


# config.json keys as the Hub's checkpoints of each family have them
HUB_FORM = {
    "granitemoehybrid": granite_layer_types,
    # deepseek-ai/DeepSeek-V3: sigmoid scores (DeepseekV3Config has no such key: always)
    "deepseek_v3": lambda c: c.update(scoring_func="sigmoid", topk_method="noaux_tc"),
    # openai-community/gpt2: n_ctx beside n_positions
    "gpt2": lambda c: c.setdefault("n_ctx", c["n_positions"]),
    # EleutherAI/pythia: rotary_pct
    "gpt_neox": lambda c: c.setdefault("rotary_pct", (c.get("rope_parameters") or {}).get("partial_rotary_factor", 1.0)),
}


# the converter's options a family's checkpoint needs: Qwen3-Next's converter asserts a
# multi-token-prediction head unless told there is none (the tiny checkpoint has none)
FLAGS = {"qwen3_next": ["--no-mtp"]}


def cut_vocabulary(folder: Path, vocab_size: int) -> None:
    """tokenizer.json's BPE vocabulary, merges and added tokens below `vocab_size`."""
    path = folder / "tokenizer.json"
    if not path.exists():
        return
    tok = json.loads(path.read_text())
    model = tok.get("model", {})
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or max(vocab.values(), default=0) < vocab_size:
        return
    kept = {t: i for t, i in vocab.items() if i < vocab_size}
    model["vocab"] = kept

    def keeps(merge):
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        return a in kept and b in kept and a + b in kept

    model["merges"] = [m for m in model.get("merges", []) if keeps(m)]
    tok["added_tokens"] = [t for t in tok.get("added_tokens", []) if t["id"] < vocab_size]
    path.write_text(json.dumps(tok))


def special_tokens_held(folder: Path) -> None:
    """A tokenizer_config.json naming the tokenizer's own `<unk>`, `<s>` and `</s>` as its
    special tokens: without one, transformers' tokenizer classes add their defaults
    (`<|endoftext|>`, Gemma's `<bos>` ...) past the tiny vocabulary, which the converter
    refuses."""
    path = folder / "tokenizer.json"
    if not path.exists() or (folder / "tokenizer_config.json").exists():
        return
    added = {t["id"]: t["content"] for t in json.loads(path.read_text()).get("added_tokens", [])}
    if not {0, 1, 2} <= set(added):
        return
    unk, bos, eos = added[0], added[1], added[2]
    config = dict(unk_token=unk, bos_token=bos, eos_token=eos, pad_token=unk, mask_token=unk)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def prepared(name: str, work: Path) -> Path:
    """A copy of the checkpoint as the converter reads it (`HUB_FORM`, the vocabulary)."""
    folder = work / name
    shutil.copytree(MODELS / name, folder)
    config = json.loads((folder / "config.json").read_text())
    if name in HUB_FORM:
        HUB_FORM[name](config)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    text = config.get("text_config", config)
    cut_vocabulary(folder, text["vocab_size"])
    special_tokens_held(folder)
    return folder


# run in a child process: the converter, its unrecognised pre-tokenizers written as gpt-2
RUN = r"""
import sys
from pathlib import Path
llama_cpp, model, out, *flags = sys.argv[1:]
sys.argv = ["convert_hf_to_gguf.py", model, "--outfile", out, "--outtype", "f32", *flags]
sys.path.insert(0, llama_cpp)
import conversion.base as base
recognised = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return recognised(self, tokenizer)
    except NotImplementedError:
        return "gpt-2"
base.TextModel.get_vocab_base_pre = pre
import runpy
runpy.run_path(str(Path(llama_cpp) / "convert_hf_to_gguf.py"), run_name="__main__")
"""


def llama_cpp_dir(given: str | None) -> Path:
    """The vendored llama.cpp of the sdist: `given`, or the cached sdist (fetched once)."""
    if given:
        return Path(given)
    vendored = CACHE / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if not vendored.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
             f"llama-cpp-python=={VERSION}", "-d", str(CACHE)],
            check=True,
        )
        with tarfile.open(CACHE / f"llama_cpp_python-{VERSION}.tar.gz") as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name and "/vendor/llama.cpp/ggml/" not in m.name]
            tar.extractall(CACHE, members=members, filter="data")
    return vendored


def convert(llama_cpp: Path, name: str) -> str | None:
    """Writes OUT/name.gguf; the converter's last words when it fails."""
    out = OUT / f"{name}.gguf"
    out.unlink(missing_ok=True)
    env = {"PYTHONPATH": str(llama_cpp / "gguf-py"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    with tempfile.TemporaryDirectory() as work:
        folder = prepared(name, Path(work))
        proc = subprocess.run(
            [sys.executable, "-c", RUN, str(llama_cpp), str(folder), str(out), *FLAGS.get(name, [])],
            capture_output=True, text=True, env=env,
        )
    if proc.returncode != 0:
        out.unlink(missing_ok=True)
        lines = [l.replace(str(folder), "<checkpoint>") for l in proc.stderr.strip().splitlines() if l.strip()]
        return lines[-1][:300] if lines else f"exit {proc.returncode}"
    return None


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--llama-cpp", help="the vendored llama.cpp folder of the sdist")
    args.add_argument("--only", nargs="*", help="these families alone")
    a = args.parse_args()
    llama_cpp = llama_cpp_dir(a.llama_cpp)
    OUT.mkdir(parents=True, exist_ok=True)
    failed = {}
    for name in a.only or FAMILIES:
        why = convert(llama_cpp, name)
        if why is None:
            print(f"{name}: {(OUT / f'{name}.gguf').stat().st_size} bytes")
        else:
            failed[name] = why
            print(f"{name}: not converted: {why}")
    if not a.only:
        lines = [
            "# GGUF files written by llama.cpp's own converter",
            "",
            f"Written by `tools/make_converted_gguf_fixtures.py` with `convert_hf_to_gguf.py` of the llama.cpp",
            f"vendored in llama-cpp-python {VERSION} (PyPI sdist), `--outtype f32`, from",
            "`tests/fixtures/models/<name>/`. `tests/it/converted_gguf.rs` checks each against the",
            "checkpoint's float64 references.",
            "",
            "The converter does not convert:",
            "",
        ]
        lines += [f"- `{n}`: {WHY_NOT.get(n, 'the converter stops')} (`{why}`)" for n, why in failed.items()]
        lines += ["", "Converted, but not the checkpoint's model:", ""]
        lines += [f"- `{n}`: {why}" for n, why in NOT_THE_MODEL.items()]
        (OUT / "README.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
