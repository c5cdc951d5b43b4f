"""Printing audit results: one row per check, then each failure's raw output beside its stored score."""

from __future__ import annotations

from collections.abc import Sequence

from convswap.analysis.loading import LogFolder
from convswap.audits.checks import CheckFailure, CheckResult
from convswap.core import canonical_json

FAILURES_SHOWN_PER_CHECK = 20


def raw_output(failure: CheckFailure) -> str:
    """What the model produced, by every readout the record holds."""
    record = failure.record
    unreadable = record.unreadable_parts()
    # A readout that does not load is shown as logged: it is still what the model produced.
    parts = [
        f"{name} as logged: {canonical_json(part.to_json())}"
        for name, part in unreadable.items()
        if name in ("first_token", "generation")
    ]
    if record.first_token is not None and "first_token" not in unreadable:
        top = ", ".join(f"{score.text!r}:{score.prob:.2f}" for score in record.first_token.top[:3])
        parts.append(f"first tokens {top} (candidate mass {record.first_token.candidate_mass:.2f})")
    if record.generation is not None and "generation" not in unreadable:
        parts.append(f"text={record.generation.text!r} finish={record.generation.finish_reason}")
    if record.pixels is not None and "pixels" not in unreadable:
        drawn = record.pixels
        parts.append(f"image={drawn.image_name or 'none (' + str(drawn.failure) + ')'} outcome={drawn.outcome}")
    return "; ".join(parts) or "no raw output stored"


def format_failure(failure: CheckFailure) -> str:
    record = failure.record
    stored = (
        f"answer_slot={record.answer_slot} keys={record.keys} correct={record.correct} status={record.parse_status}"
    )
    where = f"{record.model} {record.condition} {record.convention} {record.trial_id}"
    return f"    {where}: {failure.reason}\n      raw: {raw_output(failure)}\n      stored: {stored}"


def verdict_text(result: CheckResult) -> str:
    """The verdict with why a check did not run and the rule it applies: `too few: every group has fewer than 20
    scored records (fails at p < 0.001)`."""
    reason = f": {result.reason}" if result.reason else ""
    rule = f" ({result.threshold})" if result.threshold else ""
    return f"{result.verdict}{reason}{rule}"


def format_report(results: Sequence[CheckResult]) -> str:
    width = max(len(result.name) for result in results)
    lines = [f"{'check':<{width}}  {'checked':>8}  {'failures':>8}  verdict", "-" * (width + 30)]
    for result in results:
        lines.append(f"{result.name:<{width}}  {result.checked:>8}  {len(result.failures):>8}  {verdict_text(result)}")
    for result in results:
        if result.notes:
            lines.append(f"\n{result.name}: {result.description}")
            lines.extend(f"    {note}" for note in result.notes)
        if result.failures:
            lines.append(f"\n{result.name} failures ({len(result.failures)}):")
            lines.extend(format_failure(failure) for failure in result.failures[:FAILURES_SHOWN_PER_CHECK])
            hidden = len(result.failures) - FAILURES_SHOWN_PER_CHECK
            if hidden > 0:
                lines.append(f"    ... and {hidden} more")
    return "\n".join(lines)


def format_folder_problems(folder: LogFolder) -> str:
    """The records the reader refused, those with a part that does not load, and the units it found missing, each
    named; empty when there are none."""
    lines = []
    if folder.refused:
        lines.append(f"\nrefused records ({len(folder.refused)}), in no check:")
        lines.extend(f"    {line}" for line in folder.refused[:FAILURES_SHOWN_PER_CHECK])
        hidden = len(folder.refused) - FAILURES_SHOWN_PER_CHECK
        if hidden > 0:
            lines.append(f"    ... and {hidden} more")
    _, unreadable = folder.readable()
    if unreadable:
        lines.append(f"\nrecords with a part that does not load ({len(unreadable)}):")
        lines.extend(f"    {line}" for line in unreadable[:FAILURES_SHOWN_PER_CHECK])
    if folder.missing:
        lines.append(f"\nmissing units ({len(folder.missing)} run(s)):")
        lines.extend(f"    {line}" for line in folder.missing)
    return "".join(line + "\n" for line in lines)
