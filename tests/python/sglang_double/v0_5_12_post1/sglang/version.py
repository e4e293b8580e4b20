"""Double of python/sglang/version.py at v0.5.12.post1."""
__version__ = "0.5.12.post1"
