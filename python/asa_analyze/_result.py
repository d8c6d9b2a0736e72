"""`Result`: an analysis's tables as polars DataFrames, its run record, and `write`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List

from ._types import PathLike, RunRecord

if TYPE_CHECKING:
    # polars is imported when the first frame is made (pyo3-polars), not here: `import
    # asa_analyze` stays fast
    import polars as pl


class Result:
    """An analysis' tables, one polars DataFrame per table of the CLI's `--out` folder
    under the same name (`.attention`, `.distance_profile`, `.head_roles`, `.heatmap`,
    `.nll_position`, `.block_map` when that metric ran, ...), and `.run`, the run.json
    record as a dict (typed as `RunRecord`)."""

    def __init__(self, native: Any) -> None:
        self._native = native
        self.tables: Dict[str, pl.DataFrame] = dict(native.tables())
        self.run: RunRecord = json.loads(native.record())

    def __getattr__(self, name: str) -> pl.DataFrame:
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(f"no table {name!r} in this result (tables: {', '.join(tables)})")

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self.tables))

    def write(self, dir: PathLike, format: str = "csv", figures: bool = False) -> List[Path]:
        """Writes the tables and run.json into `dir` as `asa-analyze analyze --out dir`
        does (atomically; `format` "csv" or "parquet"; the figures too when asked)."""
        return [Path(p) for p in self._native.write(os.fspath(dir), format, figures)]

    def __repr__(self) -> str:
        models = [m.get("model") for m in self.run.get("models", [])]
        tables = ", ".join(f"{n} ({t.height} rows)" for n, t in self.tables.items())
        return f"asa_analyze.Result(models={models}, tables: {tables})"
