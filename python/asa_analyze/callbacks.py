"""Attention statistics while a model trains, as callbacks of the Hugging Face `Trainer` and
of Lightning: every `every` steps a snapshot of the weights is analysed on a fixed probe
batch on a background thread (see `asa_analyze.Monitor`), and each analysed step's values
go to the trainer's own loggers (TensorBoard, wandb, MLflow, CSV, ...) under
`attn/<metric>/layer_03`, logged at the step whose weights were analysed.

In a distributed job (torchrun / accelerate / Lightning's ddp) the callbacks run on every
rank, so that the ranks gather sharded weights together (see `asa_analyze.Monitor`); rank 0
analyses, logs and writes `out`.

    from asa_analyze.callbacks import AttentionStats
    trainer = Trainer(model, args, train_dataset=ds,
                      callbacks=[AttentionStats(probe=ids, every=100, out="runs/attn")])

    from asa_analyze.callbacks import LightningAttentionStats   # imports Lightning
    pl.Trainer(callbacks=[LightningAttentionStats(probe=ids, every=100)])

`probe` is token ids (a 2-D array or a list of lists) or texts (tokenized by the trainer's
tokenizer as the CLI tokenizes a corpus: its tokenizer.json). The series of every analysed
step is `callback.series` (the `attention_series` table) and, with `out`, written there as
`attention_series.csv` when training ends (`asa-analyze figures` draws it). A failing
analysis warns once and never stops training.

transformers is imported with this module; Lightning only when `LightningAttentionStats` is
asked for.
"""

from __future__ import annotations

import copy
import os
import queue
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _distributed
from .monitor import DEFAULT_METRICS, Monitor, _is_ids

__all__ = ["AttentionStats", "LightningAttentionStats"]


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


def _transformers_callback() -> type:
    from transformers import TrainerCallback

    return TrainerCallback


class AttentionStats(_Results, _transformers_callback()):  # type: ignore[misc]
    """A `transformers.TrainerCallback`: every `every` optimizer steps (and at each evaluation
    with `at_evaluate`), the model's attention on `probe`, analysed in the background, logged
    through the Trainer's loggers at the analysed step (keys `attn/<metric>/layer_03`;
    TensorBoard shows them as `train/attn/...`, as it shows `train/loss`) and kept in
    `series`.

    metrics: registry names (default first_token, sink_rate, entropy, max_logit, qk_mean,
        weight_sum). per_head: log each head's value too. out: a folder for
        attention_series.csv at the end of training. threads: the analysis' threads.
        Other keywords go to `asa_analyze.analyze` (seq_len, num_seqs, ...).
    """

    def __init__(
        self,
        probe: Any,
        every: int = 100,
        metrics: Sequence[str] = DEFAULT_METRICS,
        per_head: bool = False,
        at_evaluate: bool = False,
        out: Optional[Any] = None,
        label: str = "model",
        threads: Optional[int] = 1,
        tokenizer: Optional[Any] = None,
        **analyze_options: Any,
    ) -> None:
        self._schedule = _Schedule(probe, every, metrics, per_head, out, label, threads, analyze_options)
        self._schedule.monitor.tokenizer = tokenizer
        self.at_evaluate = at_evaluate
        self._handler: Any = None

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None, **kwargs: Any
    ) -> None:
        # the Trainer's CallbackHandler calls every callback's events; its on_log reaches
        # every logger callback (TensorBoard, wandb, ...), as Trainer.log does
        self._handler = _calling_handler()
        self._schedule.use_tokenizer(processing_class or kwargs.get("tokenizer"))
        if model is not None:
            self._schedule.monitor.check_probe(_distributed.unwrap(model).config)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        # every rank asks (a sharded model is gathered by all); rank 0 analyses and logs
        self._schedule.monitor(model, state.global_step)
        if state.max_steps and state.global_step >= state.max_steps:
            # the last step: its analysis is logged before the loggers close at train end
            self._log(args, state, control, self._schedule.finish())
        else:
            self._log(args, state, control, self._schedule.ready())

    def on_evaluate(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.at_evaluate:
            self._schedule.monitor.request(model, state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._log(args, state, control, self._schedule.finish())

    def _log(self, args: Any, state: Any, control: Any, done: List[Tuple[Dict[str, float], int]]) -> None:
        """Hands each finished analysis to the Trainer's loggers at its own step, and to
        `state.log_history` as Trainer.log would."""
        for values, step in done:
            state.log_history.append({**values, "step": step})
            if self._handler is None:
                continue
            at_step = copy.copy(state)
            at_step.global_step = step
            # a copy of control: on_log clears should_log, which the Trainer may have set
            # for its own logging of this step
            self._handler.on_log(args, at_step, copy.copy(control), dict(values))


def _calling_handler() -> Any:
    """The transformers CallbackHandler whose call_event is calling this callback's event."""
    from transformers.trainer_callback import CallbackHandler

    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, CallbackHandler):
            return owner
        frame = frame.f_back
    return None


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


def __getattr__(name: str) -> Any:
    if name == "LightningAttentionStats":
        from ._lightning import LightningAttentionStats

        return LightningAttentionStats
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
