"""Build it yourself: the learner writes a mechanism, and labkit runs it for real.

An exercise sits in a story notebook as a skeleton (a function or a class with its signature, a
docstring with a worked example, and a body that raises ``NotImplementedError``), a hint, a check
cell and a solution the learner opens only when they choose. The check cell runs the learner's
code on the same interface labkit's own implementation uses, says in one sentence what it got
right or wrong, and hands on what the rest of the notebook runs: the learner's mechanism once it
is written, labkit's reference until then, so *Run All* works with the skeleton left in place.

    mine = lab.exercises.mine_or_reference(my_loop, reference=lab.exercises.reference_loop,
                                          what="agent loop")
    # Your agent loop is still the skeleton: this run uses labkit's reference in its place.

Two names every exercise shares (``common``): ``mine_or_reference``, the learner's code or
labkit's reference with one line saying so, and ``Verdict``, the check's one sentence. The
exercises: the stateless agent loop (``loop``, notebook 01), the rendered-token append
(``append``, 02) and the connection cache (``cache``, 03, run inside a real server).
"""

from labkit.analysis.exercises.append import check_append, reference_append, rollout_conversation
from labkit.analysis.exercises.cache import ReferenceCache, cache_probe, check_connection_cache
from labkit.analysis.exercises.common import Verdict, is_skeleton, mine_or_reference
from labkit.analysis.exercises.loop import check_loop, probe_loop, reference_loop

__all__ = [
    "ReferenceCache",
    "Verdict",
    "cache_probe",
    "check_append",
    "check_connection_cache",
    "check_loop",
    "is_skeleton",
    "mine_or_reference",
    "probe_loop",
    "reference_append",
    "reference_loop",
    "rollout_conversation",
]
