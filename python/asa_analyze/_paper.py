"""`tables`: the paper's Tables 1-3 from a training campaign (`PaperTables`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from . import _native
from ._errors import _python_errors
from ._types import PathLike

if TYPE_CHECKING:
    import polars as pl


class PaperTables:
    """The paper's Tables 1-3: `.frame` (one row per table x size x method x column, as
    `paper_tables.csv`), `.markdown` and `.latex` ({table number: text}); a notebook shows
    the Markdown."""

    def __init__(self, frame: "pl.DataFrame", texts: List[Any]) -> None:
        self.frame = frame
        self.markdown: Dict[int, str] = {n: md for n, md, _ in texts}
        self.latex: Dict[int, str] = {n: tex for n, _, tex in texts}

    def __repr__(self) -> str:
        return "\n".join(self.markdown.values())

    def _repr_markdown_(self) -> str:
        return self.__repr__()


@_python_errors
def tables(
    runs: Optional[Mapping[str, Mapping[str, Any]]] = None,
    manifest: Optional[PathLike] = None,
    table3: Optional[Sequence[str]] = None,
    loss_window: Optional[int] = None,
    loss_metric: Optional[str] = None,
    accuracy: Optional[Mapping[str, str]] = None,
) -> PaperTables:
    """The paper's Tables 1-3, as `asa-analyze tables`.

    runs: {"SIZE/METHOD": {"checkpoint": ..., "log": ..., "results": ..., "lm_eval": ...}}
        (any of the four; lm_eval a path or a list), e.g. {"1B/asa": {"lm_eval": "eval.json"}};
        and/or manifest: a TOML or JSON manifest. table3: Table 3's methods in order;
        loss_window: final-loss window in steps (default 100); accuracy: {task: metric}.
    """
    inputs = []
    for key, given in (runs or {}).items():
        for kind, value in given.items():
            values = value if isinstance(value, (list, tuple)) else [value]
            inputs.extend((kind, f"{key}={os.fspath(v)}") for v in values)
    frames, texts = _native.tables(
        inputs,
        manifest=None if manifest is None else os.fspath(manifest),
        table3=list(table3 or []),
        loss_window=loss_window,
        loss_metric=loss_metric,
        accuracy=[f"{k}={v}" for k, v in (accuracy or {}).items()],
    )
    return PaperTables(frames[0][1], texts)
