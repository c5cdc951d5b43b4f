"""Which shard of the trials this process runs, as the launcher that started it says."""

from __future__ import annotations

import os
from collections.abc import Sequence

from convswap.core import ConvswapError

# The variables `accelerate launch` leaves for each process (torchrun's, then MPI's), read directly:
# accelerate's own reader imports torch, which a simulated or API run never needs.
RANK_VARIABLES = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")


def _int_from_env(names: Sequence[str], default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            try:
                return int(value)
            except ValueError as error:
                raise ConvswapError(f"environment variable {name}={value!r} is not an integer") from error
    return default


def launcher_shard() -> tuple[int, int]:
    """(process index, process count) as `accelerate launch` sets them; (0, 1) for a plain run."""
    return _int_from_env(RANK_VARIABLES, 0), _int_from_env(WORLD_SIZE_VARIABLES, 1)


def local_rank() -> int:
    return _int_from_env(LOCAL_RANK_VARIABLES, 0)
