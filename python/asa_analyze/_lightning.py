"""`LightningAttentionStats`: the Lightning twin of `asa_analyze.callbacks.AttentionStats`
(imported from there only when asked for, so that Lightning is needed only by its users)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

try:
    from lightning.pytorch import Callback
except ImportError:  # the older package name
    from pytorch_lightning import Callback  # type: ignore[no-redef]

from ._callback_common import _hf_model, _Results, _Schedule
from .monitor import DEFAULT_METRICS


class LightningAttentionStats(_Results, Callback):  # type: ignore[misc]
    """A `lightning.pytorch.Callback`: every `every` optimizer steps (`trainer.global_step`),
    the attention of the transformers model the LightningModule trains, on `probe`,
    analysed in the background and logged to every logger of the Trainer
    (`logger.log_metrics(values, step=analysed step)`, keys `attn/<metric>/layer_03`), and
    kept in `series`.

    model: picks the transformers model out of the LightningModule (default: the module
        itself if it is one, else its one child that is). The other arguments are those of
        `AttentionStats`; `tokenizer` (a fast tokenizer or a tokenizer.json) is needed for a
        text probe.
    """

    def __init__(
        self,
        probe: Any,
        every: int = 100,
        metrics: Sequence[str] = DEFAULT_METRICS,
        per_head: bool = False,
        out: Optional[Any] = None,
        label: str = "model",
        threads: Optional[int] = 1,
        tokenizer: Optional[Any] = None,
        model: Optional[Callable[[Any], Any]] = None,
        **analyze_options: Any,
    ) -> None:
        super().__init__()
        self._schedule = _Schedule(probe, every, metrics, per_head, out, label, threads, analyze_options)
        self._tokenizer = tokenizer
        self._pick = model or _hf_model

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._schedule.use_tokenizer(self._tokenizer)
        self._schedule.monitor.check_probe(self._pick(pl_module).config)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        # every rank asks (a sharded model is gathered by all); rank 0 analyses and logs
        step = trainer.global_step
        if step > 0 and step != getattr(self, "_last_step", None):
            # once per optimizer step (gradient accumulation repeats a global step)
            self._last_step = step
            self._schedule.monitor(self._pick(pl_module), step)
        self._log(trainer, self._schedule.ready())

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._log(trainer, self._schedule.finish())

    def _log(self, trainer: Any, done: List[Tuple[Dict[str, float], int]]) -> None:
        """Hands each finished analysis to the Trainer's loggers at its own step."""
        for values, step in done:
            for logger in trainer.loggers:
                logger.log_metrics(values, step=step)
