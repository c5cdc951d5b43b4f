"""A protocol's reader: the fallback parser, a text model that reads the generated image alone.

ProVisE's fallback route (its sections 2.2 and 2.3): when no pipeline of registered operations can recover the
answer, a declared auxiliary model reads the generated image under the protocol's evidence contract and answers one
of the options.  It receives the generated image and its declared prompt over the contract's fields (the options,
K, the layout, the colour) and nothing else: never the source image or the question, so it cannot answer the item
itself.  Its answer is read as an integer answer is read from a text model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from convswap.core import Prompt
from convswap.protocols import ProtocolParse

if TYPE_CHECKING:
    from PIL import Image

    from convswap.protocols import Protocol
    from convswap.readout.base import Backend

READER_MAX_NEW_TOKENS = 16  # an option's number


def reader_prompt(protocol: Protocol, prompt: Prompt) -> Prompt:
    """The prompt a reader reads one generated image with: its declared prompt over the evidence contract's fields,
    ending in the integer answer instruction; the slots and keys are the protocol prompt's."""
    from convswap.instructions import integer_answer
    from convswap.protocols.layouts import layout_sentence

    assert protocol.reader is not None
    values = {
        "options": ", ".join(f"{slot}={referent}" for slot, referent in enumerate(prompt.slots, start=1)),
        "k": str(prompt.k),
        "color": protocol.color_hex,
        "layout": layout_sentence(protocol.layout, prompt.k, ()) if protocol.layout else "",
    }
    text = f"{protocol.reader.prompt.format_map(values)} {integer_answer(prompt.k)}"
    alphabet = tuple(str(slot) for slot in range(1, prompt.k + 1))
    return Prompt(prompt.trial_id, protocol.name, prompt.task, text, prompt.slots, alphabet, prompt.keys, "integer")


@dataclass(frozen=True)
class Reading:
    """What a reader made of one image: the option slot it answered (None: no option), its text, or why no answer
    came (a request that failed for good)."""

    slot: int | None
    text: str | None
    error: str | None = None


def read_image(reader: Backend, protocol: Protocol, prompt: Prompt, generated: Image.Image) -> Reading:
    """The reader's answer for one generated image: the image alone and the reader prompt, nothing of the source."""
    from convswap.readout.base import Query

    asked = reader_prompt(protocol, prompt)
    generation = reader.generate(Query(generated, (asked,), "visible"), max_new_tokens=READER_MAX_NEW_TOKENS)[0]
    if generation.error:
        return Reading(None, None, generation.error)
    return Reading(slot_of_answer(protocol, prompt, generation.text), generation.text)


def slot_of_answer(protocol: Protocol, prompt: Prompt, text: str | None) -> int | None:
    """The option a reader's text answers, as the integer answer of a text prompt is parsed; None for none."""
    from convswap.core import Generation
    from convswap.readout.parse import parse_answer

    return parse_answer(Generation(text=text, finish_reason="stop"), reader_prompt(protocol, prompt)).slot


def reader_parse(slot: int | None, text: str | None) -> ProtocolParse:
    """A reading as a protocol parse: ok with the option's slot, or noncompliance when the reader found no option
    in the image (ProVisE's appendix C.7: the parser ran and found no recoverable evidence)."""
    if slot is not None:
        return ProtocolParse("ok", slot)
    return ProtocolParse("protocol_noncompliance", None, (), f"the reader answered {text!r}, none of the options")


def load_readers(protocols: Mapping[str, Protocol]) -> dict[str, Backend]:
    """The reader model of every protocol read by its reader alone (no pipeline), loaded once per spec."""
    from convswap.readout.registry import load_backend

    loaded: dict[str, Backend] = {}
    readers = {}
    for name, protocol in protocols.items():
        if protocol.reader is not None and not protocol.pipeline:
            spec = protocol.reader.model
            if spec not in loaded:
                loaded[spec] = load_backend(spec)
            readers[name] = loaded[spec]
    return readers
