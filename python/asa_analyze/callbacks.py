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
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _distributed
from ._callback_common import _Results, _Schedule
from .monitor import DEFAULT_METRICS

__all__ = ["AttentionStats", "LightningAttentionStats"]


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


def __getattr__(name: str) -> Any:
    if name == "LightningAttentionStats":
        from ._lightning import LightningAttentionStats

        return LightningAttentionStats
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
