"""Printing an audit-model result: per alphabet, the surfaces and the probes; then one verdict per readout."""

from __future__ import annotations

from collections.abc import Sequence

from convswap.audits.model_audit import AlphabetAudit, Probe
from convswap.readout.base import ModelInfo


def _probe_row(probe: Probe) -> str:
    top = ", ".join(f"{t.text!r} {t.prob:.2f}" for t in probe.top) or "-"
    first = "-" if probe.first_token_slot is None else str(probe.first_token_slot)
    generation = probe.generation
    reasoning = f", {generation.reasoning_tokens} reasoning" if generation.reasoning_tokens else ""
    text = f"{generation.text!r} ({generation.finish_reason}{reasoning})"
    parsed = f"{probe.parsed.slot if probe.parsed.slot is not None else '-'} {probe.parsed.status}"
    return f"    {probe.answer:>8}  {top:<44}  {first:>5}  {text:<28}  {parsed}"


def format_alphabet(audit: AlphabetAudit) -> list[str]:
    lines = [f"{audit.alphabet.name}: {' '.join(audit.alphabet.answers)}"]
    for variant, ids in audit.first_tokens.items():
        mark = "  shared first token" if variant in audit.shared else ""
        mass = f"mean candidate mass {audit.masses[variant]:.3f}" if variant in audit.masses else ""
        lines.append(f"  {variant:<18} first tokens {list(ids)}  {mass}{mark}")
    lines.append(f"    {'answer':>8}  {'top first tokens':<44}  {'first':>5}  {'generated':<28}  parsed")
    lines.extend(_probe_row(probe) for probe in audit.probes)
    agree, both = audit.agreement
    if both:
        lines.append(f"  first-token and generated readouts agree on {agree}/{both} probes")
    return lines


def format_model_audit(info: ModelInfo, budget: int, audits: Sequence[AlphabetAudit]) -> str:
    lines = [f"model {info.spec} (backend {info.backend}, revision {info.revision}); generation budget {budget} tokens"]
    for audit in audits:
        lines.append("")
        lines.extend(format_alphabet(audit))
    width = max(len(audit.alphabet.name) for audit in audits)
    lines += ["", f"{'alphabet':<{width}}  {'readout':<11}  verdict", "-" * (width + 40)]
    for audit in audits:
        for verdict in (audit.first_token, audit.generate):
            lines.append(f"{audit.alphabet.name:<{width}}  {verdict.readout:<11}  {verdict}")
    return "\n".join(lines)
