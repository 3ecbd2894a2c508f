"""Deprecated: the ES tasks moved to :mod:`evotensor.es.tasks` (problems know nothing of families).

Names are still reachable here for one release, with a ``DeprecationWarning``.
"""

from evotensor.problems._moved_tasks import forward_to_es_tasks

__getattr__ = forward_to_es_tasks(__name__)
