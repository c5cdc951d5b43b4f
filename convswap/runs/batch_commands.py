"""`convswap batch status` and `convswap batch cancel`: the provider batches a `run --batch` submitted."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from convswap.readout.api_common import ApiBackend
    from convswap.runs.batch import BatchState


def register(subparsers: argparse._SubParsersAction) -> None:
    batch = subparsers.add_parser(
        "batch",
        help="the provider batches of `convswap run --batch`: their state, or cancel them",
        description="Every `convswap run --batch` keeps the batches it submitted in batches.json beside its logs. "
        "These commands read those files under LOGDIR and ask the provider (with the API key of the model's "
        "backend) about each batch.",
    )
    actions = batch.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = actions.add_parser(
        "status",
        help="each batch's state and counts",
        description="Print each batch under LOGDIR: collected, or its state at the provider and its counts.",
    )
    status.add_argument(
        "logdir", type=Path, metavar="LOGDIR", help="a run folder: OUT, OUT/<experiment> or a model folder"
    )
    status.set_defaults(handler=status_command)
    cancel = actions.add_parser(
        "cancel",
        help="cancel the live batches",
        description="Cancel every batch under LOGDIR that has not finished. The next `convswap run --batch` "
        "collects what each batch answered before it stopped; its other requests are pending again.",
    )
    cancel.add_argument(
        "logdir", type=Path, metavar="LOGDIR", help="a run folder: OUT, OUT/<experiment> or a model folder"
    )
    cancel.set_defaults(handler=cancel_command)


def status_command(args: argparse.Namespace) -> int:
    from convswap.runs.batch import describe_batches

    lines = list(describe_batches(args.logdir, _backend))
    print("\n".join(lines) if lines else f"no batches under {args.logdir}")
    return 0


def cancel_command(args: argparse.Namespace) -> int:
    from convswap.runs.batch import cancel_batches

    lines = list(cancel_batches(args.logdir, _backend))
    print("\n".join(lines) if lines else f"no live batches under {args.logdir}")
    return 0


def _backend(state: BatchState) -> ApiBackend:
    """The backend a state file's batches were submitted through, at the endpoint they were submitted to."""
    from convswap.readout.api_common import ApiBackend
    from convswap.readout.registry import load_backend

    backend = load_backend(state.model, base_url=state.endpoint)
    assert isinstance(backend, ApiBackend)  # only API backends submit batches
    return backend
