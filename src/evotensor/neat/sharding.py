"""Where NEAT's tensors live: one device, or a mesh with the population split along one axis.

:meth:`evotensor.neat.NEAT.on_mesh` returns the strategy with a :class:`MeshLayout`;
``evotensor.run(neat, problem, ..., mesh=mesh)`` calls it. ``NEAT.tell`` states, at a few points, how
its arrays are laid out (:class:`OneDevice`: nowhere, the default), and XLA's SPMD partitioner splits
the work accordingly. One generation on ``n`` devices, population ``P``:

* **genomes** (``Genome [P]``: node tables ``[P, max_nodes, ...]``, connection tables
  ``[P, max_conns, ...]``) are split along the population axis between generations
  (:meth:`MeshLayout.state_shardings`) and whenever ``tell`` builds a population: device ``d`` owns
  genomes ``d*P/n .. (d+1)*P/n - 1``;
* **evaluation**: the run loop hands the split genomes to the decoder, so each device builds the
  networks (:func:`~evotensor.neat.network.transform`) and runs the forward passes of its own
  genomes;
* **fitness** ``[P]``, the species state (``[max_species]`` slots and their representatives), the
  best genome and the counters are replicated: stagnation and the reproduction plan (spawn per
  species, elites, parents) need all of them and are small;
* **reproduction**: each device builds its own rows of the offspring (crossover, then mutation) and
  the offspring stays split. Any genome may parent any child, so the parents' genome tables are
  gathered once per generation (``P * (max_nodes + max_conns)`` rows, the size of the population
  itself); new node keys and innovation numbers are deduplicated over the whole generation (a sort
  of ``[P]``-sized keys), as on one device;
* **speciation** picks representatives anywhere in the new population, so it reads a gathered copy
  of it (a second gather per generation; a per-pick gather inside its loop would cost one gather per
  species); each distance column (one representative against every genome, ``[P]``) is computed by
  each device for its own genomes (:meth:`MeshLayout.own_rows`) and gathered (``P`` floats); the
  assignment works on the replicated ``[P, max_species]`` distances.

So each device holds the whole population only transiently, twice per generation, and does
``1/n`` of the evaluation, crossover, mutation and distance work. On CPU host devices that share a
machine's cores the collectives can cost more than the split saves; the layout is for devices with
their own compute (GPUs, hosts).

The result equals the one-device run of the same key bit for bit (tested on 4 devices and on 2
processes x 2 devices, with XLA's default compiler options): every float operation is per genome or
per gene, random numbers come from JAX's partitionable Threefry (the same numbers however the array
is split), and nothing sums floats across genomes except integer counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from evotensor.core.mesh import POPULATION_AXIS, auto_mesh, check_mesh

__all__ = ["MeshLayout", "OneDevice"]


class OneDevice:
    """The default layout: every array where XLA puts it (one device); each method returns its
    input unchanged."""

    def population(self, tree: Any) -> Any:
        """A population pytree (leading ``[P]`` axis), unchanged."""
        return tree

    def replicated(self, tree: Any) -> Any:
        """A pytree, unchanged."""
        return tree

    def state(self, state: Any) -> Any:
        """A ``NEATState``, unchanged."""
        return state

    def own_rows(self, fn: Callable[..., Any], population: Any, *args: Any) -> Any:
        """``fn(population, *args)``."""
        return fn(population, *args)

    def __repr__(self) -> str:
        return "OneDevice()"


class MeshLayout:
    """NEAT's layout on ``mesh``: genomes split along ``axis``, everything else replicated.

    Args:
        mesh: a ``jax.sharding.Mesh`` (one host's devices or every process's); explicit or auto
            axes (used as auto ones, :func:`~evotensor.core.mesh.auto_mesh`); other axes replicate.
        axis: the mesh axis that splits the population.
        population_size: checked to split evenly over ``axis``.

    Raises:
        ArgumentError: not a mesh, no such axis, or a population that does not split evenly.
    """

    def __init__(self, mesh: Mesh, axis: str = POPULATION_AXIS, population_size: int | None = None):
        # the same devices with Auto axes (as run() does): NEAT's generation is left to XLA's
        # partitioner between the layouts stated here, which explicit axes would refuse
        self.mesh = auto_mesh(check_mesh(mesh, axis, population_size))
        self.axis = axis
        self.split = NamedSharding(self.mesh, P(axis))
        self.whole = NamedSharding(self.mesh, P())

    def population(self, tree: Any) -> Any:
        """Every leaf of a population pytree (leading ``[P]`` axis) split along the axis."""
        return jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, self.split), tree)

    def replicated(self, tree: Any) -> Any:
        """Every leaf of ``tree`` whole on every device."""
        return jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, self.whole), tree)

    def own_rows(self, fn: Callable[..., Any], population: Any, *args: Any) -> Any:
        """``fn(population, *args)`` with each device applying ``fn`` to its own rows of a replicated
        ``population`` (leading ``[P]`` axis) and whole ``args``; ``fn``'s outputs have one row per
        genome (leading ``[rows]`` axis) and come back split along the axis.

        Inside ``shard_map``: the population enters replicated and each device slices its rows
        locally. A sharding constraint instead would let XLA keep the population split wherever
        it is used (such as inside speciation's loop, which also reads single genomes from it) and
        all-gather it for every such read.
        """
        n = int(self.mesh.shape[self.axis])
        rows = jax.tree_util.tree_leaves(population)[0].shape[0] // n

        def local(population, *args):
            start = jax.lax.axis_index(self.axis) * rows
            mine = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, start, rows), population)
            return fn(mine, *args)

        replicated = jax.tree_util.tree_map(lambda _: P(), (population, *args))
        # check_vma off: ``fn`` is any per-genome code (its loops mix per-device and shared values)
        mapped = jax.shard_map(
            local, mesh=self.mesh, in_specs=replicated, out_specs=P(self.axis), check_vma=False
        )
        return mapped(population, *args)

    def state_shardings(self, state: Any) -> Any:
        """A ``NEATState``'s shardings (same structure): ``population`` split, the rest replicated."""
        whole = jax.tree_util.tree_map(lambda _: self.whole, state)
        return whole.replace(population=jax.tree_util.tree_map(lambda _: self.split, state.population))

    def state(self, state: Any) -> Any:
        """A ``NEATState`` laid out as :meth:`state_shardings` says."""
        return jax.tree_util.tree_map(jax.lax.with_sharding_constraint, state, self.state_shardings(state))

    def __repr__(self) -> str:
        return f"MeshLayout({int(self.mesh.shape[self.axis])} devices along {self.axis!r})"
