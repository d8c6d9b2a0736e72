"""`analyze`, `entropy`, `inspect` and `merge`: the Rust analysis run in-process."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Dict, Iterable, Optional

from . import _native
from ._corpus import _corpus
from ._errors import _python_errors
from ._memory_models import _held, _in_memory, _models
from ._native import CancelToken
from ._progress import _Progress, _Quiet
from ._result import Result
from ._types import Models, PathLike


@_python_errors
def analyze(
    models: Models,
    corpus: Any = None,
    seq_len: int = 1024,
    num_seqs: int = 10,
    bos: str = "auto",
    metrics: Optional[Iterable[str]] = None,
    windows: str = "packed",
    variant: Optional[str] = None,
    device: str = "auto",
    batch_size: int = 1,
    seed: int = 0,
    progress: bool = True,
    cancel: Optional[CancelToken] = None,
    tokenizer: Optional[PathLike] = None,
    threads: Optional[int] = None,
    probe: Optional[str] = None,
    map_size: int = 256,
    role_sink: float = 0.5,
    role_local_window: int = 16,
    role_local: float = 0.5,
    role_prev: float = 0.4,
    role_induction: float = 0.4,
) -> Result:
    """Every attention metric of `models` in one pass, as `asa-analyze analyze`.

    models: a path or Hub id, a list of them, or a {label: path} dict. A model held in
        memory stands where a path would: a transformers model, or a `(config, state_dict)`
        pair (config a dict or a transformers config; tensors torch or numpy, float32,
        float16, bfloat16 or float64), analysed as the checkpoint `save_pretrained` would
        write of it, without writing it (CPU tensors are read in place).
    tokenizer: a tokenizer.json for a text corpus (a model in memory has none of its own;
        token ids need none).
    corpus: a text or token-id file, a list of texts, or token ids (a 2-D numpy array or a
        list of lists); default the built-in generated prose (`seed`).
    probe: "induction" for the built-in induction probe instead of a corpus, as
        `--probe induction`: windows of BOS, L random token ids (from `seed`) and the same L
        again, `seq_len` = 2L + 1 (odd); induction_score joins the default metrics and
        `head_roles` gets its column.
    metrics: metric names (e.g. ["first_token", "entropy"]); default the `analyze` set.
        "block_map" (not a default) adds the `block_map` frame: per (layer, head, and the
        mean over heads) the mean and max attention weight of each cell of a G x G grid of
        query x key blocks, G = min(`map_size`, `seq_len`) (`--map-size`, default 256).
    map_size: block_map's side G, as `--map-size`.
    role_sink, role_local_window, role_local, role_prev, role_induction: the thresholds of
        the `head_role` metric (a default; the `head_roles` frame), as `--role-sink` (0.5),
        `--role-local-window` (16 keys), `--role-local` (0.5), `--role-prev` (0.4) and
        `--role-induction` (0.4); docs/head-roles.md says
        where each rule comes from.
    windows: "packed" (documents joined with EOS, cut into consecutive windows) or
        "documents" (each window the start of its own document).
    variant: analyse every model as this attention variant ("off_by_one", "sink", ...)
        whatever its config.json names; default the detected one (`.run["models"]` says
        how each was detected).
    progress: a tqdm bar (a plain one without tqdm); False for none.
    cancel: a `CancelToken` whose `cancel()` (from any thread) stops this run at its next
        query block, raising `Cancelled` with nothing returned or written.
    threads: run on this many threads of a pool of its own (beside a training loop, so as
        not to take every core from it); default every core.

    A model in memory on a GPU is copied to the host once; run.json's model record says what
    that copy cost (`.run["models"][i]["host_copy"]`: device, tensors, bytes, seconds).
    """
    pairs, memory = _models(models)
    with tempfile.TemporaryDirectory(prefix="asa-analyze-") as tmp:
        native = _native.analyze(
            pairs,
            metrics=None if metrics is None else list(metrics),
            corpus=_corpus(corpus, tmp),
            probe=probe,
            seq_len=seq_len,
            num_seqs=num_seqs,
            bos=bos,
            windows=windows,
            variant=variant,
            device=device,
            batch_size=batch_size,
            seed=seed,
            events=_Progress() if progress else _Quiet(),
            cancel=cancel,
            memory=memory,
            tokenizer=None if tokenizer is None else os.fspath(tokenizer),
            threads=threads,
            map_size=map_size,
            role_sink=role_sink,
            role_local_window=role_local_window,
            role_local=role_local,
            role_prev=role_prev,
            role_induction=role_induction,
        )
    return Result(native)


@_python_errors
def entropy(models: Models, **kwargs: Any) -> Result:
    """Attention entropy per layer and head, as `asa-analyze entropy` (the arguments of
    `analyze`)."""
    return analyze(models, metrics=["entropy"], **kwargs)


@_python_errors
def inspect(model: Any) -> Dict[str, Any]:
    """What `asa-analyze inspect --json` says of a checkpoint (folder, GGUF file or Hub id),
    or of a model held in memory (a transformers model or a `(config, state_dict)` pair:
    what it says of the checkpoint `save_pretrained` would write)."""
    if _in_memory(model):
        return json.loads(_native.inspect("", memory=_held("model", model)))
    return json.loads(_native.inspect(os.fspath(model)))


@_python_errors
def merge(partials: Iterable[PathLike]) -> Result:
    """The tables of one run from the partial results of `asa-analyze analyze --shard K/N`
    (every shard, each once, of one run)."""
    return Result(_native.merge([os.fspath(p) for p in partials]))
