"""Double of python/sglang/version.py on main after the scheduler_components move (a
development version; the stored files carry no release number)."""
__version__ = "0.5.13.dev0"
