"""A run's progress: a tqdm bar (a plain one without tqdm), or nothing."""

from __future__ import annotations

import sys
import warnings
from typing import Any


class _Progress:
    """A run's progress on a tqdm bar when tqdm is installed, else a plain line on stderr."""

    def __init__(self) -> None:
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover - depends on the environment
            tqdm = None
        self._tqdm = tqdm
        self._bar: Any = None
        self._label = ""
        self._total = 0

    def started(self, label: str, tokens: int) -> None:
        self._label, self._total = label, tokens
        if self._tqdm is not None:
            self._bar = self._tqdm(total=tokens, desc=label, unit="tok", leave=False)

    def advance(self, tokens: int) -> None:
        if self._bar is not None:
            self._bar.update(tokens - self._bar.n)
        elif self._total:
            print(f"\r{self._label}: {100 * tokens // self._total:3d}%", end="", file=sys.stderr, flush=True)

    def finished(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._total:
            print(file=sys.stderr)

    def note(self, text: str) -> None:
        warnings.warn(text, stacklevel=2)


class _Quiet(_Progress):
    def __init__(self) -> None:
        self._tqdm, self._bar, self._total = None, None, 0

    def started(self, label: str, tokens: int) -> None:
        pass

    def advance(self, tokens: int) -> None:
        pass

    def finished(self) -> None:
        pass
