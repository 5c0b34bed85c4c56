"""The agent's version, as installed (used in User-Agent and in every body we send)."""

from importlib import metadata

try:
    VERSION = metadata.version("moonin-agent")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    VERSION = "0.0.0+source"
