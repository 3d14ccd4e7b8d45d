"""``Failure``: a loader's exception, stored or published so that waiters raise it.

Rule: no I/O. A failure travels between processes pickled (in the key's meta under
``ERROR_TTL`` or as the hand-off, in a ``FAILED`` wake-up), and processes of two versions
share one Redis during a rolling deploy: so it pickles under the name it always had,
``stampede.core.envelope.Failure`` (that module keeps the name importable), whichever module
defines it.
"""

from __future__ import annotations

import pickle
from typing import Any

from ..exceptions import LoaderError


class Failure:
    """A loader's exception, stored or published so that waiters raise it instead of retrying.

    The original exception travels when it pickles; otherwise a ``LoaderError`` naming its
    type and message stands in for it.
    """

    __slots__ = ("exception", "handoff")

    def __init__(self, exception: BaseException, handoff: bool = False) -> None:
        self.exception = exception
        #: Kept only for the waiters of the fill that failed, not served to new callers.
        self.handoff = handoff

    @classmethod
    def of(cls, exception: BaseException) -> Failure:
        try:
            pickle.loads(pickle.dumps(exception))
        except Exception:
            return cls(LoaderError(type(exception).__qualname__, str(exception)))
        return cls(exception)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Failure, (self.exception, self.handoff))

    def __repr__(self) -> str:
        return f"Failure({self.exception!r})"

    def raise_(self) -> None:
        raise self.exception


#: The name pickles carry (see the module's rule): the bytes of a stored or published failure
#: are those every earlier version writes and reads.
Failure.__module__ = "stampede.core.envelope"
