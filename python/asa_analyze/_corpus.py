"""A corpus as the Rust side reads it: a file path, texts written to a file, or token ids
checked to be whole numbers."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from ._native import UsageError


def _corpus(corpus: Any, tmp: str) -> Optional[str]:
    """A corpus path as is; a list of texts as JSONL; token ids (a 2-D numpy array or a list
    of lists) as JSON: files the library reads as it reads the CLI's."""
    if corpus is None or isinstance(corpus, (str, os.PathLike)):
        return None if corpus is None else os.fspath(corpus)
    if hasattr(corpus, "tolist"):
        corpus = corpus.tolist()
    corpus = list(corpus)
    if all(isinstance(t, str) for t in corpus):
        path = os.path.join(tmp, "corpus.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for text in corpus:
                f.write(json.dumps({"text": text}) + "\n")
        return path
    path = os.path.join(tmp, "corpus.json")
    with open(path, "w") as f:
        json.dump([[_token_id(i, r, p) for p, i in enumerate(row)] for r, row in enumerate(corpus)], f)
    return path


def _token_id(value: Any, row: int, position: int) -> int:
    """A token id as an int; anything but an integer (3.7, "5", True) is refused, as the
    CLI refuses it, rather than truncated."""
    import numbers

    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    raise UsageError(
        f"corpus: token ids must be integers; row {row}, position {position} holds {value!r} "
        f"({type(value).__name__})"
    )
