"""murmurd: run murmur capsules (WebAssembly agents) and serve them over A2A."""

__version__ = "0.1.0"
