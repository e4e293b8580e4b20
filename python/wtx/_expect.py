"""The trainer's expected version, hashed as the weights leave (private to the wtx package).

A sender that knows the engine ranks' manifests can name the version a full update of what it
sends must commit (wtx.expected_version); a commit of anything else aborts with
E_VERSION_MISMATCH. Computing it before the send costs a pass over every byte on the critical
path; `SendHasher` instead hands each (name, tensor) to a wtx.ExpectedVersionBuilder on a thread
of its own as the sender takes it, so the piece is hashed while it (and the next) goes out, and
every byte is read once by the hash. `version()` waits for the last piece and returns the
version (raising what the hashing raised: a source given twice, a wrong shape, a missing
source).

The sender must not change a tensor after handing it over (a trainer sends weights it holds
still for the update). Tensors on another device are copied to the host on the hashing thread.
"""

import queue
import threading
from typing import Any, Iterable, Iterator, List, Optional, Tuple

import torch

from . import Error, ExpectedVersionBuilder, Manifest

_DONE = object()


def _manifests(manifests: Iterable[Any]) -> List[Manifest]:
    return [m if isinstance(m, Manifest) else Manifest.from_json(m) for m in manifests]


class SendHasher:
    """Hashes the pieces a sender sends into the version they make, on a background thread.

    take(name, tensor) for each piece as it leaves (non-blocking); version() once the send is
    over (it raises what the hashing raised, a bad manifest included, so that a sender can finish
    the send before it raises). close() stops the thread without a version (the send failed)."""

    def __init__(self, manifests: Iterable[Any]) -> None:
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._error: Optional[BaseException] = None
        self._builder: Optional[ExpectedVersionBuilder] = None
        try:  # a bad manifest is raised by version(), after the send: the engines get it all
            self._builder = ExpectedVersionBuilder(_manifests(manifests))
        except BaseException as e:
            self._error = e
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="wtx-expected-version",
                                        daemon=True)
        self._thread.start()

    def take(self, name: str, tensor: torch.Tensor) -> None:
        """Hands one piece over (hashed on the thread, in the order taken)."""
        if self._closed:
            raise Error("INVALID_ARGUMENT", f"take('{name}'): the hasher is closed")
        self._queue.put((name, tensor))

    def version(self) -> str:
        """The expected version of every piece taken: waits for the hashing to end."""
        self._stop()
        if self._error is not None:
            raise self._error
        assert self._builder is not None, "built, or the error is raised above"
        return str(self._builder.finish()["version"])

    def close(self) -> None:
        """Stops the hashing (idempotent); no version."""
        self._stop()

    def _stop(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(_DONE)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if self._error is not None or self._builder is None:
                continue  # drain: the first error is the one reported
            name, tensor = item
            try:
                self._builder.add(name, tensor.detach().to("cpu").contiguous())
            except BaseException as e:
                self._error = e


def hashed_as_sent(items: Iterable[Tuple[str, torch.Tensor]],
                   hasher: SendHasher) -> Iterator[Tuple[str, torch.Tensor]]:
    """`items`, each handed to `hasher` as the sender takes it."""
    for name, tensor in items:
        hasher.take(name, tensor)
        yield name, tensor


class HashingSource:
    """A trainer's weight source (vLLM's WeightSource: metadata() and iteration) whose pieces
    go to the armed SendHasher as the inner trainer engine iterates it; everything else is the
    source's own."""

    def __init__(self, source: Any) -> None:
        self._source = source
        self.hasher: Optional[SendHasher] = None

    def __iter__(self) -> Iterator[Tuple[str, torch.Tensor]]:
        if self.hasher is None:
            return iter(self._source)
        return hashed_as_sent(self._source, self.hasher)

    def __len__(self) -> int:
        return len(self._source)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)
