"""Printing audit results: one row per check, then each failure's raw output beside its stored score."""

from __future__ import annotations

from collections.abc import Sequence

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


def format_report(results: Sequence[CheckResult]) -> str:
    width = max(len(result.name) for result in results)
    lines = [f"{'check':<{width}}  {'checked':>8}  {'failures':>8}  verdict", "-" * (width + 30)]
    for result in results:
        verdict = "pass" if result.passed else "FAIL"
        lines.append(f"{result.name:<{width}}  {result.checked:>8}  {len(result.failures):>8}  {verdict}")
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
