"""Double of the vLLM package (tests/python/vllm_double/README.md): only the modules wtx's vLLM
integration touches. `__version__` is the release whose contract the modules mirror."""

__version__ = "0.33.0.dev0+double"
