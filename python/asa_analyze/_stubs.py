"""The run options' block of `_native.pyi`, made from their one declaration
(`_native.run_options()`, the CLI's flags): `python -m asa_analyze._stubs` rewrites it, and
the package's tests check the stubs hold what it makes."""

from __future__ import annotations

from pathlib import Path

from . import _native
from ._analysis import python_words

STUBS = Path(__file__).with_name("_native.pyi")
BEGIN = "# the run's options, as declared once (python -m asa_analyze._stubs writes this block)\n"
END = "# end of the run's options\n"
# an option's kind as a stub types it
TYPES = {"PathLike": "Union[str, PathLike[str]]"}


def run_options_block() -> str:
    """`class RunOptions(TypedDict, total=False)` with every option and its type."""
    lines = [BEGIN, "class RunOptions(TypedDict, total=False):\n"]
    for name, kind, _default, help_text in _native.run_options():
        lines.append(f"    {name}: Optional[{TYPES.get(kind, kind)}]\n")
        lines.append(f'    """{python_words(help_text)}."""\n')
    lines.append(END)
    return "".join(lines)


def stubs_text(text: str) -> str:
    """`text` (the stubs) with its run options' block made anew."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + run_options_block() + tail


if __name__ == "__main__":
    STUBS.write_text(stubs_text(STUBS.read_text()))
