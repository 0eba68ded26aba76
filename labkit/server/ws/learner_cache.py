"""A connection cache a learner wrote, run behind a guard (``labkit serve --connection-cache``).

``labkit serve --connection-cache FILE.py:ClassName`` loads the learner's class once, at start
(``load_class``: a file that does not load or a class that is not there is one sentence). Every
WebSocket connection of a design with the connection cache then asks an instance of it, through
``GuardedCache``, the three questions labkit's own ``ConnectionCache`` answers: ``serve``,
``keep`` and ``failed``, with the same arguments.

The guard keeps labkit's own cache beside the learner's, in step with it (the *fallback*), and
checks every call into the learner's code:

- it must return within ``LEARNER_CALL_DEADLINE_S`` (an endless loop is stopped there:
  ``call_within``);
- it must not raise;
- ``serve`` must return None or an entry ``keep`` gave this very connection, the one whose id
  it was asked for (never another connection's, never another response's), as it was given:
  not changed since (``fingerprint``, taken when it is kept and compared when it is served).

The learner is handed its own copy of each entry (``handed``: the entry and its lists and dicts,
not the items in them), so what its code does to an entry's attributes or history list never
reaches the fallback's.

The first call that breaks one of those is the connection's *fault*: the connection drops the
learner's instance and goes on with the fallback, which holds everything it was given, so
no conversation is lost and none is served wrong. The fault is one sentence (``CacheFault``);
the WebSocket loop puts it in the next response's trace (the hydration span's
``cache_fault`` detail), where the learner's check reads it.

    >>> class Forgetful:
    ...     def serve(self, previous_response_id): raise KeyError(previous_response_id)
    ...     def keep(self, lane, entry): pass
    ...     def failed(self, lane, previous_response_id): pass
    >>> cache = GuardedCache(Forgetful, ids=lambda entry: entry, kinds=str)
    >>> cache.keep("a", "resp_1"); cache.serve("resp_1")  # the fault: the fallback answers
    'resp_1'
    >>> cache.fault.method, cache.fault.problem, cache.yours
    ('serve', "raised KeyError: 'resp_1'", False)
"""

from __future__ import annotations

import copy
import importlib.util
import sys
import threading
import weakref
from collections.abc import Callable, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from labkit.connection_cache import ConnectionCache, Lane, response_id
from labkit.deadline import alarm, interrupts_here
from labkit.limits import LEARNER_CALL_DEADLINE_S
from labkit.server.wscore.conversation import Conversation

Entry = TypeVar("Entry")
METHODS = ("serve", "keep", "failed")


class LearnerCacheError(ValueError):
    """``--connection-cache`` names something that cannot be used: one sentence."""


class TooSlow(BaseException):
    """A learner's call ran past its deadline. A BaseException, so that the learner's own
    ``except Exception`` cannot swallow it."""


@dataclass(frozen=True)
class CacheFault:
    """The first thing a learner's cache got wrong on a connection: which method, what, when.

    >>> print(CacheFault("C", "keep", "raised X", 3).sentence)
    C.keep raised X, on create 3 of its connection; labkit's cache served that connection from then on.
    """

    owner: str
    method: str
    problem: str
    create: int  # the connection's creates started so far

    @property
    def sentence(self) -> str:
        return (
            f"{self.owner}.{self.method} {self.problem}, on create {self.create} of its connection; "
            "labkit's cache served that connection from then on."
        )


def load_class(spec: str) -> type:
    """The class ``FILE.py:ClassName`` names, loaded from its file; a ``LearnerCacheError`` otherwise.

    >>> try:
    ...     load_class("no-colon")
    ... except LearnerCacheError as refused:
    ...     print(refused)
    --connection-cache takes FILE.py:ClassName, not 'no-colon'
    """
    path_text, _, name = spec.rpartition(":")
    if not path_text or not name.isidentifier():
        raise LearnerCacheError(f"--connection-cache takes FILE.py:ClassName, not {spec!r}")
    path = Path(path_text)
    if not path.is_file():
        raise LearnerCacheError(f"--connection-cache: no file {path_text}")
    module_name = f"labkit_learner_cache_{abs(hash(str(path.resolve())))}"
    try:
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise LearnerCacheError(f"--connection-cache: {path_text} is not a Python file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module  # a dataclass in the file looks its module up
        module_spec.loader.exec_module(module)
    except LearnerCacheError:
        raise
    except BaseException as exc:  # a file that does not load, however: one sentence
        sys.modules.pop(module_name, None)
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise LearnerCacheError(
            f"--connection-cache: {path_text} does not load{where}: {type(exc).__name__}: {exc}"
        ) from None
    found = getattr(module, name, None)
    if not isinstance(found, type):
        classes = sorted(
            k for k, v in vars(module).items() if isinstance(v, type) and v.__module__ == module_name
        )
        defined = f"; it defines {', '.join(classes)}" if classes else "; it defines no class"
        raise LearnerCacheError(f"--connection-cache: {path_text} has no class {name}{defined}")
    missing = [method for method in METHODS if not callable(getattr(found, method, None))]
    if missing:
        raise LearnerCacheError(
            f"--connection-cache: {name} has no method {', '.join(missing)} (a connection cache has "
            "serve, keep and failed)"
        )
    return found


# ---------------------------------------------------------------- an entry as it was kept

Fingerprint = dict[str, tuple[int, int | None, int | None]]


def handed(entry: Entry) -> Entry:
    """The learner's own copy of ``entry``: a new object whose lists and dicts are copies too (the
    items in them are shared: no text is copied), so that nothing the learner's code does to its
    attributes or its history list reaches labkit's cache, which keeps the entry itself.

    >>> from types import SimpleNamespace
    >>> kept = SimpleNamespace(items=[{"role": "user"}]); theirs = handed(kept)
    >>> theirs.items.clear(); len(kept.items), theirs.items is kept.items
    (1, False)
    """
    if not hasattr(entry, "__dict__"):
        return entry  # a value without attributes (a test's str): nothing in it can change
    twin = copy.copy(entry)
    for name, value in list(vars(twin).items()):
        if isinstance(value, list | dict):
            setattr(twin, name, copy.copy(value))
    return twin


def fingerprint(entry: object) -> Fingerprint:
    """What an entry holds, cheaply: per attribute, which object it is, its size, and for a list
    which members it holds, by identity. It reads no text (one pass over the history's items, the
    cost of copying the list), so an item edited in place is not seen; anything else is.

    >>> from types import SimpleNamespace
    >>> entry = SimpleNamespace(items=[{"role": "user"}], model="m")
    >>> kept = fingerprint(entry); del entry.items[:]
    >>> changed(kept, fingerprint(entry))
    'its items: 1 when it was kept, 0 when it was served'
    """
    parts: Fingerprint = {}
    for name, value in getattr(entry, "__dict__", {}).items():
        size = len(value) if isinstance(value, Sized) else None
        members = hash(tuple(map(id, value))) if isinstance(value, list) else None
        parts[name] = (id(value), size, members)
    return parts


def changed(kept: Fingerprint, now: Fingerprint) -> str | None:
    """What changed between two fingerprints of an entry, in a few words; None if nothing did
    (an attribute the learner added is no change to what the server reads).

    >>> changed({"items": (1, 2, 3)}, {"items": (4, 2, 3)})
    'its items were replaced'
    """
    for name, (identity, size, members) in kept.items():
        if name not in now:
            return f"its {name} were deleted"
        identity_now, size_now, members_now = now[name]
        if identity_now != identity:
            return f"its {name} were replaced"
        if size_now != size:
            return f"its {name}: {size:,} when it was kept, {size_now:,} when it was served"
        if members_now != members:
            return f"its {name} were changed in place"
    return None


# ---------------------------------------------------------------- the deadline


def call_within(seconds: float, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or ``TooSlow`` once ``seconds`` have passed.

    In the main thread on POSIX (the server's event loop) a SIGALRM interrupts ``fn`` itself.
    Elsewhere (Windows, a server run in a thread) ``fn`` runs in a thread of its own that is
    abandoned past the deadline: the caller then never calls that object again.

    >>> call_within(0.5, sum, [1, 2])
    3
    >>> def endless():
    ...     while True: pass
    >>> call_within(0.05, endless)
    Traceback (most recent call last):
    ...
    labkit.server.ws.learner_cache.TooSlow
    """
    if interrupts_here():
        try:
            with alarm(seconds, TooSlow):
                return fn(*args)
        except TooSlow:
            raise
    result: list[Any] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn(*args))
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    worker = threading.Thread(target=run, name="labkit-learner-cache", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TooSlow
    if error:
        raise error[0]
    return result[0]


# ---------------------------------------------------------------- the guard


class GuardedCache(Generic[Entry]):
    """One connection's cache: the learner's instance, checked, with labkit's own beside it.

    It answers as ``ConnectionCache`` does (``serve``, ``keep``, ``failed``, ``enabled``, ``len``).
    ``ids`` reads an entry's response id, ``kinds`` is the type an entry has (a ``Conversation``
    in the server). ``fault`` is the connection's first fault, ``take_fault`` hands it over once.
    """

    enabled = True

    def __init__(
        self,
        learner_class: type,
        *,
        ids: Callable[[Entry], object] = response_id,
        kinds: type = Conversation,
        deadline_s: float = LEARNER_CALL_DEADLINE_S,
    ) -> None:
        self.owner = learner_class.__name__
        self.fallback: ConnectionCache[Entry] = ConnectionCache(ids=ids)
        self._id, self._kinds, self.deadline_s = ids, kinds, deadline_s
        # The learner's copy of every entry this connection kept, by id, while the learner holds it,
        # and each one's fingerprint when it was kept.
        self._kept: weakref.WeakValueDictionary[object, Any] = weakref.WeakValueDictionary()
        self._strong: dict[object, Any] = {}  # entries that cannot be weakly referenced (tests' str)
        self._prints: dict[object, Fingerprint] = {}
        self.creates = 0
        self.fault: CacheFault | None = None
        self._reported = False
        self.learner: Any = None
        self.learner = self._call("__init__", learner_class)

    @property
    def yours(self) -> bool:
        """Whether the learner's cache still answers (no fault yet)."""
        return self.learner is not None

    def __len__(self) -> int:
        return len(self.fallback)

    def take_fault(self) -> CacheFault | None:
        """The fault, the first time it is asked for after it happened; None otherwise."""
        if self.fault is None or self._reported:
            return None
        self._reported = True
        return self.fault

    def serve(self, previous_response_id: object) -> Entry | None:
        """The learner's answer, checked; the fallback's after a fault."""
        self.creates += 1
        answer = self.fallback.serve(previous_response_id)
        if self.learner is None or not isinstance(previous_response_id, str):
            return answer
        done, theirs = self._ask("serve", previous_response_id)
        if not done:
            return answer
        if theirs is None:
            return None
        problem = self._wrong_entry(theirs, previous_response_id)
        if problem is not None:
            self._fail("serve", problem)
            return answer
        return theirs  # type: ignore[no-any-return]

    def keep(self, lane: Lane, conversation: Entry) -> None:
        self.fallback.keep(lane, conversation)
        if self.learner is None:
            return
        theirs, key = handed(conversation), self._id(conversation)
        try:
            self._kept[key] = theirs
        except TypeError:
            self._strong[key] = theirs
        for gone in [k for k in self._prints if k not in self._kept and k not in self._strong]:
            del self._prints[gone]  # the learner let go of it: it can never be served again
        self._prints[key] = fingerprint(theirs)  # before the learner's keep: it may change it there
        self._ask("keep", lane, theirs)

    def failed(self, lane: Lane, previous_response_id: object) -> None:
        self.fallback.failed(lane, previous_response_id)
        if self.learner is not None:
            self._ask("failed", lane, previous_response_id)

    def _wrong_entry(self, theirs: object, asked: str) -> str | None:
        if not isinstance(theirs, self._kinds):
            shown = repr(theirs)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return f"returned a {type(theirs).__name__} ({shown}), not an entry keep was given, or None"
        given = self._id(theirs)  # type: ignore[arg-type]
        if given != asked:
            return f"was asked for {asked} and returned the entry of {given}"
        mine = self._kept.get(given, self._strong.get(given))
        if mine is not theirs:
            return (
                f"returned an entry for {asked} that this connection never kept (another connection's: "
                "are the entries kept on the class instead of on self?)"
            )
        what = changed(self._prints.get(given, {}), fingerprint(theirs))
        if what is not None:
            return (
                f"returned an entry changed since keep was given it ({what}; the next turn is built "
                "from it, so keep it as it is)"
            )
        return None

    def _ask(self, method: str, *args: Any) -> tuple[bool, Any]:
        """``(True, answer)`` from the learner's method, or ``(False, None)`` after a fault."""
        try:
            fn = getattr(self.learner, method)
        except Exception as exc:
            self._fail(method, f"could not be found: {type(exc).__name__}: {exc}")
            return False, None
        answer = self._call(method, fn, *args)
        return self.learner is not None, answer

    def _call(self, method: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return call_within(self.deadline_s, fn, *args)
        except TooSlow:
            self._fail(method, f"did not return within {self.deadline_s:g} s and was stopped")
        except BaseException as exc:  # whatever the learner's code raised, even SystemExit
            text = str(exc)
            text = text if len(text) <= 120 else text[:117] + "..."
            self._fail(method, f"raised {type(exc).__name__}" + (f": {text}" if text else ""))
        return None

    def _fail(self, method: str, problem: str) -> None:
        if self.fault is None:
            self.fault = CacheFault(self.owner, method, problem, self.creates)
        self.learner = None  # never asked again: a stopped or faulty object is not trusted
