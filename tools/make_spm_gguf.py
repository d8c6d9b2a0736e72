#!/usr/bin/env python3
"""A GGUF file with a SentencePiece (`tokenizer.ggml.model = llama`) tokenizer, and the ids
SentencePiece itself gives for a set of texts: the independent reference for asa-analyze's
GGUF SentencePiece tokenizer (Llama 2, Mistral, TinyLlama and Gemma GGUFs carry one).

Writes tests/fixtures/gguf/spm_tokenizer.gguf (tokenizer metadata only, no tensors) and
tests/fixtures/gguf/spm_tokenizer.json ({"texts": [...], "ids": [[...], ...]}).

The model is a small SentencePiece BPE trained here on seeded made-up English, with Llama 2's
settings: byte fallback, identity normalisation, no whitespace clean-up, a dummy "▁" prefix,
digits split. Tokens, scores and types go into the GGUF the way llama.cpp's converter
(convert_hf_to_gguf.py, _create_vocab_sentencepiece) writes them: type 2 unknown, 3 control,
5 unused, 6 byte, 1 the rest.

Reference ids: `sp.encode(text)` for texts without control tokens. A text with a control
token in it is cut there, as llama.cpp does: each plain part is encoded on its own (so each
gets its "▁" prefix) and the control token's id stands between them.

Run:  ~/.cache/asa-tools/bin/python tools/make_spm_gguf.py
Needs sentencepiece, gguf, numpy (tools/requirements.txt); deterministic (one thread).
"""

import io
import json
import os
import random

import gguf
import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")

WORDS = (
    "the of and to in is was that for on with as by at from his her they which this be had "
    "not are but were have one all their there been has when who will more no if out so said "
    "what up its about into than them can only other new some could time these two may then "
    "do first any my now such like our over man me even most made after also did many before "
    "must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old "
    "year off come since against go came right used take three attention head layer token "
    "softmax query key value weight entropy sink gradient norm spike model training loss"
).split()


def training_text(seed=0, lines=4000):
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        n = rng.randint(4, 14)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.insert(rng.randint(0, n), str(rng.randint(0, 2025)))
        if rng.random() < 0.2:
            words[0] = words[0].capitalize()
        out.append(" ".join(words) + rng.choice([".", ",", "!", "?", ";", ""]))
    return out


TEXTS = [
    " ".join(training_text(seed=1, lines=40)),
    "the attention of the model",
    "The first token takes most of the weight.",
    "In 1603, the year 2025 had 12 layers",
    "  two leading spaces and  double  spaces ",
    "tabs\tand\nnew lines\n\nhere",
    "unseen letters: \u00fcber caf\u00e9 \u4e2d\u6587 \U0001F600 and \u00c6",
    "gradientnormspike softmaxquerykey",
    "",
    " ",
    "a",
    "<s>",
    "before</s>after the sink",
    "x<s> y",
]


def main():
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text()),
        model_writer=buf,
        model_type="bpe",
        vocab_size=1000,
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    n = sp.get_piece_size()
    tokens, scores, types = [], [], []
    for i in range(n):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)

    control = {tokens[i]: i for i in range(n) if types[i] == gguf.TokenType.CONTROL}

    def reference(text):
        # llama.cpp: control tokens cut the text; every plain part is tokenized on its own
        ids, rest = [], text
        while rest:
            hits = [(rest.find(t), t) for t in control if t in rest]
            if not hits:
                ids += sp.encode(rest)
                break
            at, tok = min(hits)
            if at > 0:
                ids += sp.encode(rest[:at])
            ids.append(control[tok])
            rest = rest[at + len(tok):]
        return ids

    ids = [reference(t) for t in TEXTS]

    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "spm_tokenizer.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("asa-analyze fixture: SentencePiece BPE tokenizer")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([float(s) for s in scores])
    w.add_token_types([int(t) for t in types])
    w.add_unk_token_id(sp.unk_id())
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    with open(os.path.join(OUT, "spm_tokenizer.json"), "w") as f:
        json.dump({"vocab_size": n, "texts": TEXTS, "ids": ids}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {n} pieces) and {len(TEXTS)} reference texts")
    for t, i in zip(TEXTS, ids):
        print(repr(t), [sp.id_to_piece(x) for x in i])


if __name__ == "__main__":
    main()
