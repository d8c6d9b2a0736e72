"""What the transformers and Lightning callbacks share (`callbacks.AttentionStats`,
`_lightning.LightningAttentionStats`): the schedule of a `Monitor` whose analyses wait for
the training thread, the properties both show, and the transformers model a module holds."""

from __future__ import annotations

import os
import queue
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _distributed
from .monitor import Monitor, _is_ids


class _Schedule:
    """What both callbacks share: a `Monitor` whose finished analyses wait in a queue until
    the training thread hands them to the loggers, and the series written at the end."""

    def __init__(
        self,
        probe: Any,
        every: int,
        metrics: Sequence[str],
        per_head: bool,
        out: Optional[Any],
        label: str,
        threads: Optional[int],
        options: Dict[str, Any],
    ) -> None:
        self.finished: "queue.SimpleQueue[Tuple[Dict[str, float], int]]" = queue.SimpleQueue()
        self.monitor = Monitor(
            probe=probe,
            every=every,
            metrics=metrics,
            label=label,
            log=lambda values, step: self.finished.put((values, step)),
            per_head=per_head,
            threads=threads,
            **options,
        )
        self.out = out
        self._tokenizer_dir: Optional[tempfile.TemporaryDirectory] = None

    def use_tokenizer(self, tokenizer: Any) -> None:
        """A text probe is tokenized by `tokenizer` (a fast transformers tokenizer, or the path
        of a tokenizer.json); token ids need none."""
        if _is_ids(self.monitor.probe) or self.monitor.tokenizer is not None:
            return
        if tokenizer is None:
            raise ValueError("a text probe needs a tokenizer: pass the Trainer a processing_class, "
                             "or the callback tokenizer= (a tokenizer.json), or token ids")
        if isinstance(tokenizer, (str, os.PathLike)):
            self.monitor.tokenizer = tokenizer
            return
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError("a text probe needs a fast tokenizer (one with a tokenizer.json); "
                             "pass token ids instead")
        self._tokenizer_dir = tempfile.TemporaryDirectory(prefix="asa-probe-tokenizer-")
        path = Path(self._tokenizer_dir.name) / "tokenizer.json"
        path.write_text(backend.to_str())
        self.monitor.tokenizer = path

    def ready(self) -> List[Tuple[Dict[str, float], int]]:
        """The analyses finished since the last call: (values, analysed step)."""
        done = []
        while True:
            try:
                done.append(self.finished.get_nowait())
            except queue.Empty:
                return done

    def finish(self) -> List[Tuple[Dict[str, float], int]]:
        """Waits for the analysis in flight, writes the series to `out`, and returns what is
        left to log."""
        self.monitor.wait()
        ranks = _distributed.world()
        if self.out is not None and (ranks is None or ranks[0] == 0):
            self.monitor.write(self.out)
        return self.ready()


class _Results:
    """What both callbacks show of their `_schedule`: the series and the skip count."""

    _schedule: _Schedule

    @property
    def series(self) -> Any:
        """The `attention_series` table of the steps analysed so far."""
        return self._schedule.monitor.series

    @property
    def skipped(self) -> int:
        """Requests skipped because an analysis was still running."""
        return self._schedule.monitor.skipped


def _hf_model(module: Any) -> Any:
    """The transformers model a LightningModule trains: itself when it is one (it has a
    `config` and `state_dict`), else its one submodule that is."""
    if hasattr(module, "config") and hasattr(module, "state_dict") and hasattr(module.config, "to_dict"):
        return module
    found = [m for m in module.children() if hasattr(m, "config") and hasattr(getattr(m, "config"), "to_dict")]
    if len(found) != 1:
        raise ValueError(
            "LightningAttentionStats: the LightningModule holds "
            f"{len(found)} transformers models; pass model=lambda module: module.<the one>"
        )
    return found[0]
