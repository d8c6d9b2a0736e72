#!/usr/bin/env python3
"""Seeds the coverage-guided fuzz targets' corpora (fuzz/corpus/<target>.tar.xz, each
holding the folder <target>/; replacing what a campaign grew) from the test
fixtures, and from tables and a shard's partial result the release binary writes from the
Qwen2 fixture (`cargo build --release` first). Inputs are laid out as each target reads
them (fuzz/fuzz_targets/*.rs): a table's first byte picks its schema, a partial's run.json
and states table are joined by a two-byte length.

    python3 tools/make_fuzz_corpus.py     # then tools/fuzz_campaign.sh, and commit fuzz/corpus/
"""
import hashlib
import pathlib
import re
import shutil
import struct
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
OUT = ROOT / "fuzz" / "corpus"
CORPUS = pathlib.Path(tempfile.mkdtemp())  # the seeds' folders, packed into OUT at the end
BIN = ROOT / "target" / "release" / "asa-analyze"


def schemas():
    """The declared tables' names, in SCHEMAS order (a table input's first byte)."""
    text = (ROOT / "crates/asa-tables/src/schema.rs").read_text()
    body = text.split("pub const SCHEMAS")[1].split("= [")[1].split("];")[0]
    consts = re.findall(r"&([A-Z_]+)", body)
    names = {c: re.search(rf"pub const {c}: TableSchema = TableSchema {{\s*name: \"(\w+)\"", text).group(1) for c in consts}
    return [names[c] for c in consts]


def seed(target, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def files(pattern):
    return sorted(p for p in FIX.glob(pattern) if p.is_file())


def table(path, names):
    """A table input: its schema's index (one past them: undeclared), then the file."""
    stem = path.stem
    pick = names.index(stem) if stem in names else len(names)
    return bytes([pick]) + path.read_bytes()


def main():
    seeds()
    OUT.mkdir(parents=True, exist_ok=True)
    for folder in sorted(CORPUS.iterdir()):
        subprocess.run(["tar", "-cJf", str(OUT / f"{folder.name}.tar.xz"), "-C", str(CORPUS), folder.name], check=True)
    shutil.rmtree(CORPUS)


def seeds():
    for p in files("gguf/*.gguf") + files("gguf/converted/*.gguf") + files("gguf/bad/*.gguf"):
        seed("gguf", p.read_bytes())
    for name in ["qwen2", "gpt2", "qwen3", "mixtral"]:
        seed("safetensors", (FIX / "models" / name / "model.safetensors").read_bytes())
    for p in files("models/*/model.safetensors.index.json"):
        seed("weight_index", p.read_bytes())
    for p in files("models/*/config.json"):
        seed("config", p.read_bytes())
    for p in {hashlib.sha1(p.read_bytes()).hexdigest(): p for p in files("models/*/tokenizer.json") + files("gguf/*.json")}.values():
        seed("tokenizer", p.read_bytes())
    names = schemas()
    for p in files("tables/*/*.csv"):
        seed("table_csv", table(p, names))
    for p in files("logs/*.csv") + files("logs/*.tsv") + files("logs/bad/*.csv") + files("tables/full/attention_series.csv"):
        seed("log_csv", p.read_bytes())
    for p in files("logs/*.jsonl") + files("logs/bad/*.jsonl"):
        seed("log_jsonl", p.read_bytes())
    for p in files("logs/**/*tfevents*"):
        seed("log_tfevents", p.read_bytes())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        model = FIX / "models" / "qwen2"
        run = [str(BIN), "analyze", str(model), "--probe", "induction", "--seq-len", "9"]
        subprocess.run(run + ["--format", "parquet", "--out", str(tmp / "pq")], check=True, capture_output=True)
        for p in sorted((tmp / "pq").glob("*.parquet")):
            seed("table_parquet", table(p, names))
        for k in range(2):
            out = tmp / f"shard{k}"
            subprocess.run(run + ["--shard", f"{k}/2", "--out", str(out)], check=True, capture_output=True)
            seed("partial", join((out / "run.json").read_bytes(), (out / "partial.parquet").read_bytes()))
    seed("manifest", b"\x00" + MANIFEST_TOML.encode())
    seed("manifest", b"\x01" + MANIFEST_JSON.encode())


def join(a, b):
    return struct.pack("<H", len(a)) + a + b


MANIFEST_TOML = """loss_window = 100
table3 = ["linear_clipping", "sigmoid"]
accuracy = { piqa = "acc_norm" }
[[run]]
size = "1B"
method = "affine_scaled"
checkpoint = "ckpt/1b-asa"
log = "log.csv"
results = "results/1b"
lm_eval = ["eval/1b-asa.json"]
[[run]]
size = "135M"
method = "baseline"
log = "log.csv"
"""

MANIFEST_JSON = """{"loss_window": 50, "run": [{"size": "0.5B", "method": "sink", "log": "log.jsonl"},
{"size": "0.5B", "method": "gated", "checkpoint": "config.json"}]}"""

if __name__ == "__main__":
    main()
