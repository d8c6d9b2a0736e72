"""`analyze`, `entropy`, `inspect` and `merge`: the Rust analysis run in-process."""

from __future__ import annotations

import inspect as _inspect
import json
import os
import re
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
    *,
    progress: bool = True,
    cancel: Optional[CancelToken] = None,
    threads: Optional[int] = None,
    **options: Any,
) -> Result:
    """Every attention metric of `models` in one pass, as `asa-analyze analyze`.

    models: a path or Hub id, a list of them, or a {label: path} dict. A model held in
        memory stands where a path would: a transformers model, or a `(config, state_dict)`
        pair (config a dict or a transformers config; tensors torch or numpy, float32,
        float16, bfloat16 or float64), analysed as the checkpoint `save_pretrained` would
        write of it, without writing it (CPU tensors are read in place).
    corpus: a text or token-id file, a list of texts, or token ids (a 2-D numpy array or a
        list of lists); default the built-in generated prose (`seed`). A model in memory has
        no tokenizer of its own: give `tokenizer` for a text corpus (token ids need none).
    progress: a tqdm bar (a plain one without tqdm); False for none.
    cancel: a `CancelToken` whose `cancel()` (from any thread) stops this run at its next
        query block, raising `Cancelled` with nothing returned or written.
    threads: run on this many threads of a pool of its own (beside a training loop, so as
        not to take every core from it); default every core.
    options: the run's options, every one of the CLI's (`map_size` is `--map-size`), with
        its defaults and checks; listed below. "block_map" among `metrics` (not a default)
        adds the `block_map` frame; `probe="induction"` adds induction_score and the
        `head_roles` column; docs/head-roles.md says where each role's rule comes from.

    A model in memory on a GPU is copied to the host once; run.json's model record says what
    that copy cost (`.run["models"][i]["host_copy"]`: device, tensors, bytes, seconds).
    """
    pairs, memory = _models(models)
    with tempfile.TemporaryDirectory(prefix="asa-analyze-") as tmp:
        native = _native.analyze(
            pairs,
            corpus=_corpus(corpus, tmp),
            events=_Progress() if progress else _Quiet(),
            cancel=cancel,
            memory=memory,
            threads=threads,
            **options,
        )
    return Result(native)


def python_words(text: str) -> str:
    """An option's help as Python reads it: the CLI's flags (`--seq-len`) as keywords."""
    return re.sub(r"--([a-z][a-z-]*)", lambda m: m.group(1).replace("-", "_"), text)


def _default(kind: str, text: Optional[str]) -> Any:
    """An option's default as Python holds it, from the CLI's text of it."""
    if kind == "bool":
        return False
    if text is None:
        return None
    return {"int": int, "float": float}.get(kind, str)(text)


def _with_run_options(fn: Any, names: Optional[Iterable[str]] = None) -> None:
    """`fn`'s signature and docstring with the run's options (`names` of them, default
    all), from their one declaration (`_native.run_options()`: the CLI's flags):
    keyword-only, each with its default."""
    params = [p for p in _inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD]
    lines = ["", "    Run options (keyword-only; the CLI's flags with underscores):", ""]
    chosen = None if names is None else set(names)
    for name, kind, default, help_text in _native.run_options():
        if chosen is not None and name not in chosen:
            continue
        value = _default(kind, default)
        params.append(_inspect.Parameter(name, _inspect.Parameter.KEYWORD_ONLY, default=value,
                                        annotation=f"Optional[{kind}]" if value is None else kind))
        shown = "" if value is None else f" (default {value!r})"
        lines.append(f"    {name}: {python_words(help_text)}{shown}.")
    fn.__signature__ = _inspect.signature(fn).replace(parameters=params)
    fn.__doc__ = (fn.__doc__ or "") + "\n".join(lines) + "\n"


_with_run_options(analyze)


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
