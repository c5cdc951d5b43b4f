"""The small protocol every backend implements.

A backend reads one image and several question texts in one condition.  It
receives all the texts of one image at once so that it can encode the image
prefix once and share it (the transformers backend does; API backends send
each request whole).  A backend states the interfaces it answers in
(`interfaces`): text (`generate`, and the first-token readout of logit
backends), and image (`draw`: one image per prompt of the query, the pixel
answer to a visual protocol's guidance prompt).  Logit backends also expose their tokenizer so that token
surfaces can be resolved by measurement (`convswap.calibration.surfaces`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only in annotations: `convswap --help` need not import them
    import numpy as np
    from PIL import Image

    from convswap.protocols import Protocol
    from convswap.readout.logprobs import FirstTokenLogprobs

from convswap.core import Condition, ConvswapError, Generation, Interface, Prompt, Trial

# The cached condition: the image and this instruction form one user turn, the
# acknowledgement is the assistant's reply, and every question continues as a
# new text-only user turn.  Both strings are logged with each cached record.
MEMORIZE_INSTRUCTION = "Memorize this image. You will be asked questions about it afterwards."
ACKNOWLEDGEMENT = "OK."

DEFAULT_MAX_NEW_TOKENS = 16
DEFAULT_DTYPE = "float32"  # weight dtype of a local model when none is asked for


def check_max_new_tokens(max_new_tokens: int) -> None:
    """Refuse a generation budget that leaves no room for an answer."""
    if max_new_tokens < 1:
        raise ConvswapError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")


# Weight quantizations a local model can be loaded with (bitsandbytes).
QUANTIZATIONS = ("4bit", "8bit")
# How a local image editor's parts may wait on the CPU for their turn on the GPU (accelerate's hooks).
OFFLOADS = ("model", "sequential")
# About how many pixels a local image editor draws when none are asked for: a megapixel, what they are trained at.
DEFAULT_IMAGE_PIXELS = 1024 * 1024


@dataclass(frozen=True)
class ModelInfo:
    """What the logs record about the model actually read."""

    spec: str
    backend: str
    revision: str  # resolved hub revision, or a sha256 of config and weights
    quant: str | None = None
    dtype: str | None = None  # the weights' dtype (a quantized model's compute dtype)
    # What else decides the numbers: library versions, device kind, attention implementation.
    environment: dict[str, str | None] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Query:
    """Every question asked about one image in one condition.

    Backends read `prompts[i].text`; the image prefix (and, in the cached
    condition, the acknowledgement turn) is shared by all of them.  `trial` is
    the stimulus the prompts were rendered from: real models never see it; the
    simulated observer uses it where it cannot perceive the image itself (the
    object's cell in a photograph).  `protocols` are the declarations of the
    protocols its prompts are drawn under (`draw`): an image model reads only
    each prompt's text; the simulated observer paints with the declaration.
    """

    image: Image.Image = field(compare=False)
    prompts: tuple[Prompt, ...]
    condition: Condition
    trial: Trial | None = None
    protocols: tuple[Protocol, ...] = ()

    @property
    def texts(self) -> list[str]:
        return [prompt.text for prompt in self.prompts]


@dataclass(frozen=True)
class Drawing:
    """One pixel answer: the image that came back, or None with the reason none did (a refusal, an error, an
    empty reply), which the record keeps as a generation failure.

    api_error: no image came back because the request failed for good (retries spent, the server unreachable): the
    unit is an `api_error`, which a rerun sends again, not an answer of the model's.  asked_size: the (width,
    height) the backend asked the model for, where it asks for one.  seed: the generator seed a local image model
    drew it with, where the backend seeds one (an API model's sampling is the provider's).  batch: the conventions
    whose prompts were drawn in the same call as this one, in call order, where several were (`--image-batch`).
    """

    image: Image.Image | None = field(compare=False)
    failure: str | None = None
    api_error: bool = False
    asked_size: tuple[int, int] | None = None
    seed: int | None = None
    batch: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if (self.image is None) == (self.failure is None):
            raise ConvswapError("a drawing holds either an image or the reason no image came back")
        if self.api_error and self.image is not None:
            raise ConvswapError("a drawing whose request failed holds no image")


class LogitsUnavailable(ConvswapError):
    """Raised by backends with no first-token distribution (API models)."""


class Backend(ABC):
    """One model behind one small interface."""

    spec: str
    has_logits: bool = False
    # A served or API model: no logits, but the server's log-probabilities of the first answer token
    # (`first_token_logprobs`), exact or bounded (`convswap.readout.logprobs`).
    has_logprobs: bool = False
    # How many queries a runner may have in flight at once.  A local model reads
    # one at a time; an API backend bounds its own requests, so the runner can
    # overlap trials up to that bound.
    parallel_queries: int = 1
    # Whether info().revision is known before the first answer.  An API model's is
    # the model the server says it served, which only its first reply names.
    revision_known_at_load: bool = True
    # The interfaces it answers in: "text" (generate, and logits where it has them), "image" (draw).
    interfaces: frozenset[Interface] = frozenset({"text"})

    @abstractmethod
    def info(self) -> ModelInfo: ...

    @abstractmethod
    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        """Greedy generation for each prompt of the query, in order."""

    def draw(self, query: Query) -> list[Drawing]:
        """One pixel answer per prompt of the query (each a protocol's guidance prompt), in order; only a backend
        whose `interfaces` hold "image" answers in pixels."""
        raise ConvswapError(f"{self.spec} answers in text only; it cannot draw an answer")

    def cancel(self) -> None:
        """Start no more work (Ctrl-C).  A backend that works only in its caller's thread has nothing to stop."""
        return None

    def deferred_failure(self) -> str | None:
        """A failure the backend held back so that the answers already come could be recorded (an API response
        cache that could not be written), which stops the run once they are; None when there is none."""
        return None

    def next_token_logits(self, query: Query) -> np.ndarray:
        """Full-vocabulary logits of the first answer token, shape [len(query.prompts), vocab], float32."""
        raise LogitsUnavailable(f"{self.spec} exposes no first-token distribution")

    def first_token_logprobs(self, query: Query, token_ids: tuple[int, ...]) -> list[FirstTokenLogprobs]:
        """What the server says of each prompt's first answer token, asking for `token_ids` exactly where it can.

        Raises LogprobsRefused (convswap.readout.logprobs) when the server will not say.
        """
        raise LogitsUnavailable(f"{self.spec} exposes no first-token log-probabilities")

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` as it would appear as the start of the answer (no special tokens)."""
        raise LogitsUnavailable(f"{self.spec} exposes no tokenizer")

    def decode_token(self, token_id: int) -> str:
        raise LogitsUnavailable(f"{self.spec} exposes no tokenizer")

    def token_spelling(self, token_id: int) -> str:
        """The token as its vocabulary spells it ('▁', 'Ġ'); backends without one spell it as it decodes."""
        return self.decode_token(token_id)

    def show_token(self, token_id: int) -> str:
        """A token for a report, never invisible: its text, or its spelling when the text is empty: '▁' (29871)."""
        return f"{self.decode_token(token_id) or self.token_spelling(token_id)!r} ({token_id})"


class OwnTokenizer:
    """encode, decode_token and token_spelling by the model's own tokenizer (`self.tokenizer`), for a backend that
    loads it: a local model, or a served one whose tokenizer is loaded beside the server.  Listed before Backend
    among the bases, so that these replace its defaults."""

    tokenizer: Any

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode_token(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def token_spelling(self, token_id: int) -> str:
        return self.tokenizer.convert_ids_to_tokens(token_id)
