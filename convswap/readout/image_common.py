"""What the image-answering API backends share: one request per guidance prompt, replies cached, images by content.

`ImageAnswers.draw` sends, for each prompt of a query, one request holding the source image and the prompt's text
(a visual protocol's guidance prompt), through the text backends' one path (`ApiBackend._reply`): the same bounded
concurrency, retries with backoff, Ctrl-C and key scrubbing.  A request is keyed in the response cache by what
decides its answer: the endpoint and model, the prompt, the sha256 of the source PNG and every option sent (size,
input fidelity, ...).  Its reply is stored as a `DrawnReply`, whose image is the sha256 of the bytes that came back,
kept once in the cache's image table however many requests drew it.

How a reply becomes a `Drawing`:
- an image that decodes (PNG as asked, or any format Pillow reads) is the answer, at the size it came back
  (the run resizes it to the source's resolution before parsing);
- a content-policy refusal, a blocked candidate, or a reply without an image is a generation failure whose reason
  (and any text the model wrote instead) the record keeps; it is a reply, cached, so never sent again;
- a reply that breaks the endpoint's wire format, in whatever field (a body that is not JSON, an image that is not
  base64, bytes that do not decode as an image, an image above convswap.images.MAX_IMAGE_PIXELS), is malformed:
  an `api_error`, neither cached nor kept, which a rerun sends again;
- a request that failed for good (retries spent) is an `api_error` too.
"""

from __future__ import annotations

import json
import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from convswap.core import ConvswapError, Generation, sha256_hex
from convswap.images import ImageTooLarge, UnreadableImage, decode_image
from convswap.readout.api_common import ApiBackend, MalformedReply, RequestFailed, png_bytes, scrub
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS, Drawing, Query

Size = tuple[int, int]


@dataclass(frozen=True)
class DrawnReply:
    """A reply to one image request as the cache keeps it.

    image_sha256: the image that came back (bytes in the cache's image table), None when none did.
    text: text the model wrote beside or instead of an image.  refusal: why no image came back (a content-policy
    refusal, a blocked finish reason, a reply without an image part).  served_model: the model the reply names.
    """

    image_sha256: str | None
    text: str | None = None
    refusal: str | None = None
    served_model: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, reply: str) -> DrawnReply:
        return cls(**json.loads(reply))


def closest_size(source: Size, sizes: Sequence[Size]) -> Size:
    """The size among `sizes` whose aspect ratio is closest to the source's (on a log scale, so 2:1 and 1:2 are
    equally far from 1:1); the first of equals."""
    ratio = math.log(source[0] / source[1])
    return min(sizes, key=lambda size: abs(math.log(size[0] / size[1]) - ratio))


def without_image(reason: str, text: str | None) -> str:
    """A generation failure's reason, with the text the model wrote instead of an image (kept whole)."""
    return f"{reason}; the model wrote: {text!r}" if text else reason


class ImageAnswers(ApiBackend):
    """An API backend that answers in pixels: `draw` one image per prompt.

    Subclasses build the cache-keyed request of one prompt (`_image_request`, one function per endpoint, JSON-able,
    the source image named by its sha256), send it with the source's bytes (`_send_image`, keeping any image that
    came back with `_keep`) and say which size they ask for (`_asked_size`).
    """

    endpoint_kind: str  # which endpoint the requests go to, part of every cache key ("images.edit", ...)

    def draw(self, query: Query) -> list[Drawing]:
        source = png_bytes(query.image)
        size = self._asked_size(query.image.size)
        return list(self._pool.map(lambda request: self._drawing(request, source, size), self.image_requests(query)))

    def image_requests(self, query: Query) -> list[dict[str, Any]]:
        """The cache-keyed requests `draw` sends for a query, in prompt order."""
        source = png_bytes(query.image)
        size = self._asked_size(query.image.size)
        return [self._image_request(text, sha256_hex(source), size) for text in query.texts]

    @abstractmethod
    def batch_image_request(self, request: dict[str, Any], source: bytes) -> dict[str, Any]:
        """What a batch line carries for one image request: the body `_send_image` sends."""

    def remember_drawn(self, key: str, reply: str) -> str | None:
        """Keep a batch's reply to an image request (the provider's response body) as `draw` would have kept it,
        its image once by content; what keeps it from being read, else None."""
        try:
            drawn = self._batch_drawn(reply)
        except MalformedReply as error:
            return f"not a reply of {self.endpoint_kind}: {error}"
        except ValueError as error:
            return f"not a reply of {self.endpoint_kind} ({type(error).__name__})"
        self._cache.put(key, self.api, self.model, drawn.to_json())
        return None

    @abstractmethod
    def _batch_drawn(self, reply: str) -> DrawnReply:
        """A batch's reply to an image request, read as `_send_image` reads the SDK's."""

    def cached_drawing(self, request: dict[str, Any], size: Size | None) -> Drawing | None:
        """The drawing of a request from the cache alone, as `draw` reads it; None when it is not cached, or cached
        with an image that cannot be read (an older version kept such replies: `draw` asks them again)."""
        reply = self._cache.get(self.cache_key(request))
        drawing = None if reply is None else self._read_drawing(DrawnReply.from_json(reply), size)
        return drawing if isinstance(drawing, Drawing) else None

    def failed_drawing(self, reason: str, size: Size | None) -> Drawing:
        """A request that failed for good, as `draw` records one (an api_error a rerun sends again)."""
        return Drawing(None, failure=f"{self.spec}: {scrub(reason, self._secrets)}", api_error=True, asked_size=size)

    def asked_size(self, source: Size) -> Size | None:
        return self._asked_size(source)

    def _drawing(self, request: dict[str, Any], source: bytes, size: Size | None) -> Drawing:
        read: list[Drawing] = []  # the drawing of the reply `_reply` returns, decoded once, by the check it makes

        def unreadable(reply: str) -> str | None:
            drawing = self._read_drawing(DrawnReply.from_json(reply), size)
            if isinstance(drawing, str):
                return drawing
            read.append(drawing)
            return None

        try:
            self._reply(request, lambda: self._send_image(request, source).to_json(), unreadable)
        except RequestFailed as failed:
            return Drawing(None, failure=self._failed(failed), api_error=True, asked_size=size)
        return read[-1]

    def _read_drawing(self, reply: DrawnReply, size: Size | None) -> Drawing | str:
        """The drawing of a stored reply, or why its image cannot be read (a reply that is asked again)."""
        if reply.served_model:
            self._served_model = reply.served_model
        if reply.image_sha256 is None:
            return Drawing(None, failure=reply.refusal or "no image came back", asked_size=size)
        data = self._cache.get_image(reply.image_sha256)
        if data is None:
            raise ConvswapError(f"the API response cache {self._cache.path} lost image {reply.image_sha256}")
        try:
            drawn = decode_image(data, _came_back(data))
        except (UnreadableImage, ImageTooLarge) as error:
            return str(error)
        return Drawing(drawn if drawn.mode == "RGB" else drawn.convert("RGB"), asked_size=size)

    def _keep(self, data: bytes) -> str:
        """Keep an image that came back in the cache, once by content; its sha256.  Bytes that are no image within
        the pixel limit break the wire format: MalformedReply, and nothing is kept."""
        try:
            decode_image(data, _came_back(data))
        except (UnreadableImage, ImageTooLarge) as error:
            raise MalformedReply(str(error)) from None
        return self._cache.put_image(data)

    @abstractmethod
    def _image_request(self, prompt: str, image_sha256: str, size: Size | None) -> dict[str, Any]:
        """The JSON-able request of one prompt: endpoint, model, prompt, source image hash and every option."""

    @abstractmethod
    def _send_image(self, request: dict[str, Any], source: bytes) -> DrawnReply:
        """Send one request with the source PNG through the SDK; a content-policy refusal is a reply, not an error."""

    @abstractmethod
    def _asked_size(self, source: Size) -> Size | None:
        """The output size asked for a source of this size, None where the endpoint takes none."""


def _came_back(data: bytes) -> str:
    return f"the image that came back ({len(data):,} bytes)"


class ImageOnly(ImageAnswers):
    """A model that answers in pixels only: asked for text it refuses before any request."""

    interfaces = frozenset({"image"})

    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        raise ConvswapError(f"{self.spec} answers in pixels only (a visual protocol); a text convention needs a "
                            "model that answers in text")  # fmt: skip
