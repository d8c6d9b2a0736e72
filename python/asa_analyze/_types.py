"""The argument types the public functions share."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence, Union

PathLike = Union[str, "os.PathLike[str]"]
Models = Union[PathLike, Any, Mapping[str, Any], Sequence[Any]]
