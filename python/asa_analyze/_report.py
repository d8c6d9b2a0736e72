"""`report` (the HTML page, `Report`) and `figures` (the paper's figures) of results folders."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Sequence, Union

from . import _native
from ._errors import _python_errors
from ._native import UsageError
from ._types import PathLike


class Report:
    """An HTML report (`asa-analyze report`): `.html` the page's text, `.path` the file it
    was written to (if any); a notebook shows it inline (in a sandboxed frame)."""

    def __init__(self, html: str, path: Optional[Path]) -> None:
        self.html = html
        self.path = path

    def write(self, path: PathLike) -> Path:
        """Writes the page to `path` (whole: through a temporary file beside it)."""
        import stat

        target = Path(path)
        if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode):
            raise IsADirectoryError(
                f"{target}: the report's destination exists and is not a regular file (a folder, device, "
                "FIFO, socket or link): name a new .html file"
            )
        # created exclusively (O_CREAT | O_EXCL): a planted link or FIFO is never opened through
        for attempt in range(16):
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{attempt}.tmp")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"{target}: no free temporary name beside it")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.html)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.path = target
        return target

    def _repr_html_(self) -> str:
        import html

        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" sandbox="allow-scripts" '
                'style="width: 100%; height: 900px; border: 0"></iframe>')

    def __repr__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"<asa_analyze.Report{where}: {len(self.html) / 1e6:.1f} MB>"


@_python_errors
def report(results: Union[PathLike, Sequence[PathLike]], out: Optional[PathLike] = None) -> Report:
    """The self-contained HTML report of results folders, as `asa-analyze report` writes it
    (written to `out` when given); shown inline in a notebook."""
    if isinstance(results, (str, os.PathLike)):
        results = [results]
    results = [os.fspath(r) for r in results]
    if not results:
        raise UsageError("report needs at least one results folder")
    page = Report(_native.report(results), None)
    if out is not None:
        page.write(out)
    return page


@_python_errors
def figures(results: Union[PathLike, Sequence[PathLike]], out: PathLike) -> List[Path]:
    """Every paper figure the tables of `results` (folders written by `analyze`, the log
    commands or `Result.write`) allow, PNG + SVG, into `out`, as `asa-analyze figures`."""
    if isinstance(results, (str, os.PathLike)):
        results = [results]
    return [Path(p) for p in _native.figures([os.fspath(r) for r in results], os.fspath(out))]
