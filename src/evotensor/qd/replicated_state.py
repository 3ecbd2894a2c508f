"""The device-mesh layout of a search archive whose state is small: whole on every device.

Density Descent Search's reservoir and Discount Model Search's model have no cells to split; on a
mesh (``evotensor.run(..., mesh=)``, through :meth:`MAPElites.on_mesh
<evotensor.qd.map_elites.MAPElites.on_mesh>`) every device keeps the whole state and computes on
it, so a checkpoint holds it as it is.
"""

from __future__ import annotations

import copy
from typing import Any

from evotensor.core.mesh import POPULATION_AXIS, check_mesh, place, replicated_shardings


class ReplicatedState:
    """Mixin: ``on_mesh``, ``state_shardings``, ``portable`` and ``pad`` for a state kept whole on
    every device of a mesh.

    Attributes:
        mesh: the mesh (None until :meth:`on_mesh`).
    """

    mesh = None

    def on_mesh(self, mesh: Any, axis: str = POPULATION_AXIS) -> Any:
        """This archive for a run on ``mesh`` (the population split over ``axis``): its state whole
        on every device."""
        twin = copy.copy(self)
        twin.mesh = check_mesh(mesh, axis)
        return twin

    def state_shardings(self, state: Any) -> Any:
        """Every leaf replicated over the mesh."""
        return replicated_shardings(state, self.mesh)

    def portable(self, state: Any) -> Any:
        """The state as a checkpoint holds it (it is never padded)."""
        return state

    def pad(self, state: Any) -> Any:
        """A restored state laid out on the mesh (whole on every device)."""
        return place(state, self.state_shardings(state))
