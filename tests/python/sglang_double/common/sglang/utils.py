"""Double of python/sglang/utils.py's TypeBasedDispatcher (sgl-project/sglang 0053d823, lines
603-646), the table Scheduler.init_request_dispatcher builds of (request type, bound handler)
pairs: an exact type match first, then a per-type cache, then the first isinstance match in
registration order (cached), then the fallback, else ValueError("Invalid object: ...").
`+=` adds only types not present yet and clears the cache. Written anew from that source."""

from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple, Type


class TypeBasedDispatcher:
    def __init__(self, mapping: List[Tuple[Type[Any], Callable[[Any], Any]]]) -> None:
        self._mapping: "OrderedDict[Type[Any], Callable[[Any], Any]]" = OrderedDict(mapping)
        self._mro_cache: Dict[Type[Any], Optional[Callable[[Any], Any]]] = {}
        self._fallback_fn: Optional[Callable[[Any], Any]] = None

    def add_fallback_fn(self, fallback_fn: Callable[[Any], Any]) -> None:
        self._fallback_fn = fallback_fn

    def __iadd__(self, other: "TypeBasedDispatcher") -> "TypeBasedDispatcher":
        for ty, fn in other._mapping.items():
            if ty not in self._mapping:
                self._mapping[ty] = fn
        self._mro_cache.clear()
        return self

    def __call__(self, obj: Any) -> Any:
        fn = self._mapping.get(type(obj))
        if fn is not None:
            return fn(obj)
        cached = self._mro_cache.get(type(obj))
        if cached is not None:
            return cached(obj)
        for ty, candidate in self._mapping.items():
            if isinstance(obj, ty):
                self._mro_cache[type(obj)] = candidate
                return candidate(obj)
        self._mro_cache[type(obj)] = None
        if self._fallback_fn is not None:
            return self._fallback_fn(obj)
        raise ValueError(f"Invalid object: {obj}")
