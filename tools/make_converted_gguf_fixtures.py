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
tiny model's is cut to it (the converter asserts it fits). The converter's vocabulary
readers want what the tiny tokenizers lack, and get it in forms that keep every token id
(the tests feed the references' ids, so the model is the same whatever the strings):
Gemma 2's and Phi-3's a SentencePiece tokenizer.model (`SENTENCEPIECE`: tokenizer.json's
own pieces under their own ids), GLM's its special tokens (`GLM_SPECIAL`, in place of the
last merged pieces). And where the converter reads a config.json key that transformers'
AutoConfig drops from its dict (`KEEP_CONFIG_KEYS`: GPT-NeoX's `rotary_pct`, which
transformers 5 keeps only as rope_parameters.partial_rotary_factor), its hparams keep the
config.json keys the dict lacks (a shim in the child process, as the pre-tokenizer one).
Each family the converter cannot convert is listed with its reason in
tests/fixtures/gguf/converted/README.md; the Rust tests (crates/asa-analysis/tests/library/converted_gguf.rs) check
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
    "llama_gqa", "qwen2", "qwen2_window", "mistral", "mixtral", "gemma2", "gemma2_like_2b", "gemma3",
    "gemma3_like_1b", "gpt_oss", "olmo2",
    "olmo3", "phi3", "qwen3", "qwen3_moe", "qwen3_moe_like_30b", "gpt2", "gpt2_like_124m", "gpt_neox", "smollm3", "llama4_text", "deepseek_v3",
    "glm4_moe", "granitemoehybrid", "lfm2", "falcon_h1", "qwen3_next", "qwen3_next_like_80b",
    "cohere2",
]

# why the converter stops on a tiny checkpoint, beside its own last words
WHY_NOT = {
    "qwen3_moe": "it maps no dense MLP in a Qwen MoE model (the checkpoint's layer 0, `mlp_only_layers`); llama.cpp's qwen3moe loader has none either: it requires the router and experts in every layer. `qwen3_moe_like_30b` (every layer MoE, renormalised, as Qwen3-30B-A3B) converts and gives its model, tested",
    "qwen3_next": "as Qwen3-MoE's (with `--no-mtp`: the checkpoint has no multi-token-prediction head); llama.cpp's qwen3next graph has a dense branch, but its loader requires the router and experts in every layer. `qwen3_next_like_80b` (every layer MoE, as Qwen3-Next-80B-A3B) converts and gives its model, tested",
}

# converted, but not the checkpoint's model: what the converter leaves out, llama.cpp reads
# as its defaults (the Rust tests check the others against the float64 references)
NOT_THE_MODEL = {
    "qwen2_window": "the sliding window (`use_sliding_window`, `max_window_layers`) is not written and llama.cpp's qwen2 has none: every layer full (the file gives the float64 reference of that model, `qwen2_window_gguf`, tested)",
    "gemma2": "`query_pre_attn_scalar` 12 is not written: llama.cpp's gemma2 scales q.k by head_dim^-1/2 (8) except in the 27B model (the file gives the float64 reference of that model, `gemma2_gguf`, tested; `gemma2_like_2b`, whose scalar is its head_dim as in Gemma 2 2B and 9B, gives its own, tested)",
    "gemma3": "neither `query_pre_attn_scalar` 12 nor a `sliding_window_pattern` is written: llama.cpp's gemma3 scales q.k by head_dim^-1/2 (8) and fixes every 6th layer global, where the checkpoint's `layer_types` make every 2nd (the file gives the float64 reference of that model, `gemma3_gguf`, tested; `gemma3_like_1b` gives its own, tested)",
    "llama4_text": "`attention_chunk_size` 8, `floor_scale` 4 and `attn_scale` 0.5 are not written: llama.cpp's llama4 fixes 8192, 8192 and 0.1 (the file gives the float64 reference of that model, `llama4_text_gguf`, tested)",
    "gpt2": "`feed_forward_length` is written as 4 x n_embd (128), the checkpoint's `n_inner` (64) ignored: the tensors do not fit it, and the file is refused naming the tensor, as llama.cpp's loader refuses it (`gpt2_like_124m`, `n_inner` null as openai-community/gpt2, gives its model, tested)",
    "gpt_oss": "`swiglu_limit` (1) is not written: llama.cpp's gpt-oss fixes 7; nor is YaRN's `truncate` (false): ggml rounds the correction range (the file gives the float64 reference of that model, `gpt_oss_gguf`, tested)",
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
    "gpt2_like_124m": lambda c: c.setdefault("n_ctx", c["n_positions"]),
    # EleutherAI/pythia: rotary_pct
    "gpt_neox": lambda c: c.setdefault("rotary_pct", (c.get("rope_parameters") or {}).get("partial_rotary_factor", 1.0)),
    # Cohere2's converter reads `rotary_pct`, which Cohere2Config has not (it rotates every
    # dimension of a head): 1.0, the same model
    "cohere2": lambda c: c.setdefault("rotary_pct", 1.0),
}


# the converter's options a family's checkpoint needs: Qwen3-Next's converter asserts a
# multi-token-prediction head unless told there is none, GLM-4.5's counts one more block
# for it (`num_nextn_predict_layers`, 1 by Glm4MoeConfig's default); the tiny checkpoints
# have none
FLAGS = {"qwen3_next": ["--no-mtp"], "qwen3_next_like_80b": ["--no-mtp"], "glm4_moe": ["--no-mtp"]}

# families whose converter reads a config.json key that transformers' AutoConfig drops:
# GPT-NeoX's `rotary_pct` (`HUB_FORM`), which GPTNeoXConfig of transformers 5 keeps only as
# rope_parameters.partial_rotary_factor; the hparams keep the config.json keys its dict lacks
KEEP_CONFIG_KEYS = {"gpt_neox"}


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
    # CohereTokenizer adds `<SEP>` and `<CLS>` by default: its own `<unk>` instead
    config.update({key: unk for key in MORE_SPECIAL.get(folder.name, [])})
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


# tokenizer classes with more default special tokens than the others
MORE_SPECIAL = {"cohere2": ["sep_token", "cls_token"]}


# families whose converter reads the vocabulary from a SentencePiece tokenizer.model only
# (the tiny checkpoints have tokenizer.json), with the tokenizer_config.json keys it reads
SENTENCEPIECE = {"gemma2": {}, "gemma2_like_2b": {}, "phi3": {"tokenizer_class": "LlamaTokenizer"}}


def sentencepiece_model(folder: Path, config_keys: dict) -> None:
    """A SentencePiece BPE tokenizer.model of tokenizer.json's vocabulary: the same pieces
    under the same ids (so the same vocabulary size), `<unk>` unknown, the other added
    tokens control, each merged piece scored by its merge's rank (SentencePiece BPE merges
    the highest score first), the rest 0; and `config_keys` added to tokenizer_config.json."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    tok = json.loads((folder / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    merges = tok["model"].get("merges", [])
    rank = {}
    for i, merge in enumerate(merges):
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        rank.setdefault(a + b, i)
    added = {t["id"]: t["content"] for t in tok.get("added_tokens", [])}
    proto = pb.ModelProto()
    proto.trainer_spec.model_type = pb.TrainerSpec.BPE
    proto.trainer_spec.vocab_size = len(vocab)
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = True
    for piece, i in sorted(vocab.items(), key=lambda kv: kv[1]):
        assert i == len(proto.pieces), f"{folder.name}: tokenizer.json ids are not 0..n"
        p = proto.pieces.add(piece=piece, score=-float(rank[piece]) if piece in rank else 0.0)
        if i in added:
            p.type = pb.ModelProto.SentencePiece.UNKNOWN if added[i] == "<unk>" else pb.ModelProto.SentencePiece.CONTROL
    (folder / "tokenizer.model").write_bytes(proto.SerializeToString())
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    (path).write_text(json.dumps({**config, **config_keys}))


# GLM's special tokens, which its converter looks up in the tokenizer (bos, eot, unk, eom)
GLM_SPECIAL = ["[gMASK]", "<|user|>", "<|endoftext|>", "<|observation|>"]


def glm_special_tokens(folder: Path) -> None:
    """GLM's special tokens as tokenizer.json's added tokens, in place of its last merged
    pieces (ids vocab - 4 .. vocab - 1; their merges, which no other merge builds on,
    dropped): the vocabulary keeps its size and every other id."""
    path = folder / "tokenizer.json"
    tok = json.loads(path.read_text())
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    pieces = {i: t for t, i in vocab.items()}
    last = range(len(vocab) - len(GLM_SPECIAL), len(vocab))
    gone = {pieces[i] for i in last}
    made = {"".join(m.split(" ", 1) if isinstance(m, str) else m): m for m in merges}
    assert gone <= set(made), f"{folder.name}: the last pieces are not all merged ones"
    kept = [m for m in merges if "".join(m.split(" ", 1) if isinstance(m, str) else m) not in gone]
    assert not any(p in gone for m in kept for p in (m.split(" ", 1) if isinstance(m, str) else m))
    for i, special in zip(last, GLM_SPECIAL):
        del vocab[pieces[i]]
        vocab[special] = i
        tok["added_tokens"].append(dict(id=i, content=special, single_word=False, lstrip=False,
                                        rstrip=False, normalized=False, special=True))
    tok["model"]["merges"] = kept
    path.write_text(json.dumps(tok))


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
    if name == "glm4_moe":
        glm_special_tokens(folder)
    if name in SENTENCEPIECE:
        sentencepiece_model(folder, SENTENCEPIECE[name])
    return folder


# run in a child process: the converter, its unrecognised pre-tokenizers written as gpt-2
RUN = r"""
import sys
from pathlib import Path
llama_cpp, model, out, keep, *flags = sys.argv[1:]
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
if keep == "keep":
    import json
    loaded = base.ModelBase.load_hparams
    def load_hparams(dir_model, is_mistral_format):
        config = loaded(dir_model, is_mistral_format)
        for key, value in json.loads((Path(dir_model) / "config.json").read_text()).items():
            config.setdefault(key, value)
        return config
    base.ModelBase.load_hparams = staticmethod(load_hparams)
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
            [sys.executable, "-c", RUN, str(llama_cpp), str(folder), str(out),
             "keep" if name in KEEP_CONFIG_KEYS else "-", *FLAGS.get(name, [])],
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
            "`tests/fixtures/models/<name>/`. `crates/asa-analysis/tests/library/converted_gguf.rs` checks each against the",
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
