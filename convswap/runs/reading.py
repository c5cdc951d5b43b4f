"""Reading a model: both readouts of one query, each alphabet's surface resolved once, one record per prompt.

Readouts.  A logit backend gets a first-token readout when the plan's readout
is `first_token` or `both` and the prompt's alphabet has a resolved surface;
an alphabet without one (`NoFirstTokenReadout`, `SurfaceRefused`, or a server that refuses
logprobs) records the reason in `first_token_refused` and is generated and
parsed instead.  A served or API model is read through its server's
log-probabilities (`convswap.readout.logprobs`): an exact readout counts as a
local model's does; a bounded one (a top-k list) is scored by first token only
when the mass rule scores its bounds, and is otherwise kept beside the
generation it is then scored by, with the verdict in `first_token_refused`.  A
generation is made when the plan's readout is `generate` or `both`, when the
backend has no first-token readout, or when the first token was refused or is
not scored.  `readout` names the readout the record is scored on: `first_token`
whenever one is scored, else `generate`.

Scoring.  `answer_slot` is the first-token slot (readout `first_token`) or the
parsed slot; `correct[key]` is whether it equals each of the prompt's keys.  A
generation that does not parse is not scored: `answer_slot` is None, every
`correct` entry is False, and `parse_status` says why, so an analysis tells a
parse failure (answer_slot None) from a wrong answer (answer_slot set, correct
False).  `parse_status` is the generation's status when a generation was made
(a generation stopped by a content filter is `refused`, whatever its text), and
`ok` for a first-token-only record, whose restricted argmax always names a slot.

Pixel answers.  A prompt under a visual protocol is drawn (`Backend.draw`), its
image kept and parsed (`convswap.runs.pixel_answers`); the record's
readout is `pixels`, its `pixels` part holds the image's hash and size, the
protocol's declaration hash, the parse and the outcome, and its parse status
is `ok` for a correct or incorrect answer, else the unscored outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from convswap import __version__
from convswap.calibration.surfaces import (
    MIN_CANDIDATE_MASS,
    NoFirstTokenReadout,
    SurfaceRefused,
    probe_query,
    resolve_logprob_surface,
    resolve_surface,
    surface_candidates,
)
from convswap.core import (
    UNSCORED_OUTCOMES,
    FirstTokenReadout,
    Generation,
    PixelAnswer,
    Prompt,
    Record,
    RecordExtra,
    Surface,
    score_answer,
)
from convswap.plans.plan import Plan
from convswap.readout.base import ACKNOWLEDGEMENT, DEFAULT_MAX_NEW_TOKENS, MEMORIZE_INSTRUCTION, Backend, Drawing, Query
from convswap.readout.first_token import first_token_readout
from convswap.readout.logprobs import REFUSE, LogprobsRefused, logprob_readout, scored_by_first_token
from convswap.readout.parse import parse_generation
from convswap.runs.pixel_answers import pixel_answer
from convswap.runs.protocol_reader import read_image


@dataclass(frozen=True)
class RecordContext:
    plan: Plan
    plan_hash: str
    model: str
    quant: str | None
    backend: Backend
    shard: tuple[int, int]
    image_sha256: str
    vocabulary_owner: dict | None = None  # the model whose vocabulary drew the stimuli, when not this one
    folder: Path | None = None  # the log folder, which keeps the images of pixel answers


class Reader:
    """Both readouts of one query, with each alphabet's surface resolved once per run."""

    def __init__(
        self,
        backend: Backend,
        readout: str,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        readers: Mapping[str, Backend] | None = None,
    ) -> None:
        """readers: the reader model of each protocol read by its reader alone (the fallback route), by name."""
        self.backend = backend
        self.readers = dict(readers or {})
        self.max_new_tokens = max_new_tokens
        readable = backend.has_logits or backend.has_logprobs
        self.want_first_token = readable and readout in ("first_token", "both")
        self.want_generation = readout in ("generate", "both") or not readable
        self._surfaces: dict[tuple[str, ...], Surface | str] = {}

    def refusals(self) -> dict[tuple[str, ...], str]:
        return {alphabet: found for alphabet, found in self._surfaces.items() if isinstance(found, str)}

    def surface(self, prompt: Prompt) -> Surface | str:
        """The prompt's surface in its own slot order, or why its alphabet has no first-token readout."""
        canonical = prompt.alphabet if prompt.output == "integer" else tuple(sorted(prompt.alphabet))
        if canonical not in self._surfaces:
            resolve = resolve_surface if self.backend.has_logits else resolve_logprob_surface
            try:
                probes = [probe_query(canonical, prompt.output)]
                self._surfaces[canonical] = resolve(self.backend, canonical, probes)
            except (NoFirstTokenReadout, SurfaceRefused, LogprobsRefused) as refusal:
                self._surfaces[canonical] = str(refusal)
        found = self._surfaces[canonical]
        if isinstance(found, str) or found.alphabet == prompt.alphabet:
            return found
        if not found.token_ids:  # candidates matched by text follow the prompt's own alphabet
            return replace(found, alphabet=prompt.alphabet)
        token_of = dict(zip(found.alphabet, found.token_ids, strict=True))
        return replace(found, alphabet=prompt.alphabet, token_ids=tuple(token_of[a] for a in prompt.alphabet))

    def read(self, query: Query, context: RecordContext) -> list[Record]:
        """One record per prompt of the query, in order: text prompts read, protocol prompts drawn."""
        protocols = context.plan.protocols
        drawn = [prompt for prompt in query.prompts if prompt.convention in protocols]
        if not drawn:
            return self._read_text(query, context)
        spoken = tuple(prompt for prompt in query.prompts if prompt.convention not in protocols)
        records: dict[str, Record] = {}
        if spoken:
            for record in self._read_text(replace(query, prompts=spoken), context):
                records[record.convention] = record
        chosen = tuple(protocols[prompt.convention] for prompt in drawn)
        for record in self._draw(replace(query, prompts=tuple(drawn), protocols=chosen), context):
            records[record.convention] = record
        return [records[prompt.convention] for prompt in query.prompts]

    def _draw(self, query: Query, context: RecordContext) -> list[Record]:
        assert query.trial is not None and context.folder is not None  # the runner asks with both
        drawings = self.backend.draw(query)
        records = []
        for prompt, drawing in zip(query.prompts, drawings, strict=True):
            protocol = context.plan.protocols[prompt.convention]
            reading = None
            if drawing.image is not None and not protocol.pipeline:
                reading = read_image(self.readers[protocol.name], protocol, prompt, drawing.image.convert("RGB"))
                if reading.error is not None:  # as a drawing whose request failed: a rerun draws and reads again
                    drawing = Drawing(None, f"the reader's request failed: {reading.error}", api_error=True,
                                      asked_size=drawing.asked_size, seed=drawing.seed, batch=drawing.batch)  # fmt: skip
            answer, slot = pixel_answer(protocol, drawing, prompt, query.trial, query.image, context.folder,
                                        context.shard, reading)  # fmt: skip
            records.append(build_pixel_record(context, query, prompt, answer, slot, api_error=drawing.api_error))
        return records

    def _read_text(self, query: Query, context: RecordContext) -> list[Record]:
        surfaces = [self.surface(p) if self.want_first_token else None for p in query.prompts]
        first_tokens: list[FirstTokenReadout | None] = [None] * len(query.prompts)
        if any(isinstance(s, Surface) for s in surfaces):
            if self.backend.has_logits:
                logits = self.backend.next_token_logits(query)
                for i, surface in enumerate(surfaces):
                    if isinstance(surface, Surface):
                        first_tokens[i] = first_token_readout(logits[i], surface, self.backend.decode_token)
            else:
                self._read_logprobs(query, surfaces, first_tokens)
        generations: list[Generation | None] = [None] * len(query.prompts)
        asked = [
            i
            for i, (s, first_token) in enumerate(zip(surfaces, first_tokens, strict=True))
            if self.want_generation or isinstance(s, str) or not scored_by_first_token(first_token)
        ]
        if asked:
            asked_query = replace(query, prompts=tuple(query.prompts[i] for i in asked))
            answers = self.backend.generate(asked_query, self.max_new_tokens)
            for i, generation in zip(asked, answers, strict=True):
                generations[i] = generation
        return [
            build_record(context, query, prompt, first_token, surface, generation)
            for prompt, first_token, surface, generation in zip(
                query.prompts, first_tokens, surfaces, generations, strict=True
            )
        ]

    def _read_logprobs(
        self, query: Query, surfaces: list[Surface | str | None], first_tokens: list[FirstTokenReadout | None]
    ) -> None:
        """First-token readouts from the server's log-probabilities; a refusal from the server (a reasoning model's
        400) refuses the readout of these prompts with its reason, and they are generated instead."""
        readable = [i for i, surface in enumerate(surfaces) if isinstance(surface, Surface)]
        chosen = [surfaces[i] for i in readable]
        ids = tuple(dict.fromkeys(i for surface in chosen if isinstance(surface, Surface) for i in surface.token_ids))
        asked = replace(query, prompts=tuple(query.prompts[i] for i in readable))
        try:
            evidence = self.backend.first_token_logprobs(asked, ids)
        except LogprobsRefused as refusal:
            for i in readable:
                surfaces[i] = str(refusal)
            return
        for i, found in zip(readable, evidence, strict=True):
            surface = surfaces[i]
            assert isinstance(surface, Surface)
            candidates = surface_candidates(self.backend, surface)
            first_tokens[i] = logprob_readout(found, surface, candidates, MIN_CANDIDATE_MASS)


def mass_refusal(first_token: FirstTokenReadout) -> str:
    """Why a bounded readout is not scored: the mass rule's verdict on its bounds, in one line."""
    bounds = f"between {first_token.candidate_mass:.3f} and {first_token.candidate_mass_upper:.3f}"
    if first_token.mass_verdict == REFUSE:
        return f"candidate mass {bounds}, under {MIN_CANDIDATE_MASS} for sure ({first_token.source}): refused"
    if first_token.slot is None and not first_token.tie:
        return f"the {first_token.source} bounds do not decide the restricted argmax (candidate mass {bounds}): undetermined"
    return f"candidate mass {bounds}, on both sides of {MIN_CANDIDATE_MASS} ({first_token.source}): undetermined"


def build_record(
    context: RecordContext,
    query: Query,
    prompt: Prompt,
    first_token: FirstTokenReadout | None,
    surface: Surface | str | None,
    generation: Generation | None,
) -> Record:
    parsed = parse_generation(generation, prompt) if generation is not None else None
    answer_slot: int | None
    scored = scored_by_first_token(first_token)
    refused = surface if isinstance(surface, str) else None
    if first_token is not None and not scored:
        refused = mass_refusal(first_token)
    if first_token is not None and scored:
        answer_slot = first_token.slot
    else:
        assert parsed is not None  # the reader generates for every prompt it has no first-token readout of
        answer_slot = parsed.slot
    cached = query.condition == "cached"
    extra = RecordExtra(
        memorize_instruction=MEMORIZE_INSTRUCTION if cached else None,
        surface=surface if isinstance(surface, Surface) else None,
        vocabulary_of=context.vocabulary_owner,
    )
    return _record(
        context,
        query,
        prompt,
        readout="first_token" if scored else "generate",
        first_token=first_token,
        first_token_refused=refused,
        generation=generation,
        parsed_slot=parsed.slot if parsed is not None else None,
        parse_status=parsed.status if parsed is not None else "ok",
        answer_slot=answer_slot,
        extra=extra,
    )


def build_pixel_record(
    context: RecordContext,
    query: Query,
    prompt: Prompt,
    answer: PixelAnswer,
    slot: int | None,
    api_error: bool = False,
) -> Record:
    """The record of one pixel answer: scored when its outcome is correct or incorrect.  A request that failed for
    good (`api_error`) brought no image, a generation failure, and its status says so, so that a rerun sends it
    again."""
    unscored = answer.outcome in UNSCORED_OUTCOMES
    return _record(
        context,
        query,
        prompt,
        readout="pixels",
        first_token=None,
        first_token_refused=None,
        generation=None,
        parsed_slot=slot,
        parse_status="api_error" if api_error else answer.outcome if unscored else "ok",
        answer_slot=None if unscored else slot,
        extra=RecordExtra(vocabulary_of=context.vocabulary_owner),
        pixels=answer,
    )


def _record(
    context: RecordContext, query: Query, prompt: Prompt, *, answer_slot: int | None, **readouts: Any
) -> Record:
    """A record of one prompt: what every record carries, and the readouts given."""
    assert query.trial is not None  # the runner asks every query with its trial
    info = context.backend.info()
    cached = query.condition == "cached"
    return Record(
        experiment=context.plan.id,
        plan_hash=context.plan_hash,
        package_version=__version__,
        model=context.model,
        model_revision=info.revision,
        quant=context.quant,
        backend=info.backend,
        condition=query.condition,
        convention=prompt.convention,
        task=prompt.task,
        trial_id=prompt.trial_id,
        referents=query.trial.referents,
        slots=prompt.slots,
        glosses=prompt.glosses,
        keys=dict(prompt.keys),
        prompt=prompt.text,
        prompt_sha256=prompt.sha256,
        acknowledgement=ACKNOWLEDGEMENT if cached else None,
        image_sha256=context.image_sha256,
        alphabet=prompt.alphabet,
        answer_slot=answer_slot,
        correct=score_answer(answer_slot, dict(prompt.keys)),
        trial=query.trial,
        timestamp=datetime.now(UTC).isoformat(timespec="milliseconds"),
        shard=context.shard,
        dtype=info.dtype,
        environment=dict(info.environment),
        **readouts,
    )
