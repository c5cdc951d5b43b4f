"""convswap: convention-swap experiments on vision-language models."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("convswap")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
