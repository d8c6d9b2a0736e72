"""Python exceptions at the package's boundary: a number out of its parameter's range is a
`UsageError` (a ValueError) naming the parameter, not the OverflowError of PyO3's
conversion; every `AsaError` has `path`, `option`, `tensor`, `key` and `problem` (the library
sets them on what it raises; one raised here in Python names none). A `CheckpointError`'s
`problem` says what is wrong with the checkpoint as a word to match (`asa.CHECKPOINT_PROBLEMS`
lists them): `not_a_checkpoint`, `missing_file`, `missing_tensor`, `shape`, `tensor_data`,
`unused_tensors`, `missing_key`, `wrong_type`, `out_of_range`, `inconsistent`, `unsupported`,
`unimplemented`, `no_attention`, `damaged`, `non_finite`; None for a file a parser refused."""

from __future__ import annotations

import functools
from typing import Any

from ._native import AsaError, UsageError

AsaError.path = None
AsaError.option = None
AsaError.tensor = None
AsaError.key = None
AsaError.problem = None


def _python_errors(fn: Any) -> Any:
    """`fn` with a number out of its parameter's range raised as a `UsageError` (a
    ValueError) naming the parameter, not the OverflowError of the conversion to Rust."""

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OverflowError as e:
            notes = " ".join(getattr(e, "__notes__", []))
            where = notes.replace("while processing ", "argument ") if notes else "a number"
            raise UsageError(f"{where}: {e} (out of the range its option holds)") from None

    return checked
