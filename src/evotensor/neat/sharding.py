"""Where NEAT's tensors live: one device, or a mesh with the population split along one axis.

:meth:`evotensor.neat.NEAT.on_mesh` returns the strategy with a :class:`MeshLayout`;
``evotensor.run(neat, problem, ..., mesh=mesh)`` calls it. ``NEAT.tell`` states, at a few points, how
its arrays are laid out (:class:`OneDevice`: nowhere, the default), and XLA's SPMD partitioner splits
the work accordingly. One generation on ``n`` devices, population ``P``:

* **genomes** (``Genome [P]``: node tables ``[P, max_nodes, ...]``, connection tables
  ``[P, max_conns, ...]``) are split along the population axis between generations
  (:meth:`MeshLayout.state_shardings`) and whenever ``tell`` builds a population: device ``d`` owns
  genomes ``d*P/n .. (d+1)*P/n - 1``;
* **evaluation**: the run loop hands the split genomes to the decoder, whose ``decode`` runs per
  device (:class:`PerDeviceDecoder`): each device builds the networks
  (:func:`~evotensor.neat.network.transform`) of its own genomes, and the problem runs their
  forward passes split;
* **fitness** ``[P]``, the species state (``[max_species]`` slots and their representatives), the
  best genome and the counters are replicated: stagnation and the reproduction plan (spawn per
  species, elites, parents) need all of them and are small;
* **reproduction**: each device builds its own rows of the offspring (crossover, then mutation) and
  the offspring stays split. Any genome may parent any child, so the parents' genome tables are
  gathered once per generation (:meth:`MeshLayout.gathered`: one all-gather of every table packed
  side by side, ``P * (max_nodes + max_conns)`` rows); new node keys and innovation numbers are
  deduplicated over the whole generation (a sort of ``[P]``-sized keys): the proposals are
  gathered once per numbering and sorted by every device (:meth:`MeshLayout.across_genomes`);
* **speciation** picks representatives anywhere in the new population, so it reads a gathered copy
  of it (a second packed gather per generation); its loop computes one distance column (one
  representative against every genome, ``[P]``) per species, on every device
  (:meth:`MeshLayout.everywhere`): splitting the column would cost a gather per iteration.

Every per-genome loop (building a network, crossover's and mutation's gene lookups, the cycle
checks and reachability searches) runs inside ``shard_map`` on the device's own genomes
(:meth:`MeshLayout.per_genome`), with its own trip count. Left to XLA's partitioner, a vmapped
``while_loop`` over split genomes all-reduces "is any genome still running?" at every iteration;
a compiled generation then held 68 collectives, 27 of them inside loops (neat-python mode, pop 40,
4 host devices); now 10, one inside a loop (the problem's own forward pass over the networks).

So each device holds the whole population only transiently, twice per generation, and does
``1/n`` of the evaluation, crossover and mutation work (and all of speciation's distance work). On
CPU host devices that share a machine's cores the collectives can cost more than the split saves;
the layout is for devices with their own compute (GPUs, hosts).

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
from evotensor.core.packing import all_gather_rows

__all__ = ["MeshLayout", "OneDevice", "PerDeviceDecoder"]


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

    def gathered(self, population: Any) -> Any:
        """A population pytree, unchanged."""
        return population

    def per_genome(self, fn: Callable[..., Any], *population: Any) -> Any:
        """``fn(*population)``."""
        return fn(*population)

    def across_genomes(self, fn: Callable[..., Any], population: Any, *shared: Any) -> Any:
        """``fn(population, *shared)``."""
        return fn(population, *shared)

    def everywhere(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``."""
        return fn(*args)

    def decoder(self, decoder: Any) -> Any:
        """``decoder``, unchanged."""
        return decoder

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
        # one device along the axis: the per-device programs are the plain ones (a shard_map of one
        # device only fences XLA's fusion)
        self.devices = int(self.mesh.shape[axis])

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

    def gathered(self, population: Any) -> Any:
        """A population pytree (leading ``[P]`` axis, split along the axis) whole on every device, in
        one all-gather: each device packs its rows of every leaf side by side (32-bit leaves
        bitcast to int32, booleans widened; bit for bit) and gathers the packed rows once, where
        a sharding constraint costs one all-gather per leaf (a genome has eight tables)."""
        split = jax.tree_util.tree_map(lambda _: P(self.axis), population)
        gather = lambda population: all_gather_rows(population, self.axis)  # noqa: E731
        return jax.shard_map(gather, mesh=self.mesh, in_specs=(split,), out_specs=P(), check_vma=False)(
            population
        )

    def across_genomes(self, fn: Callable[..., Any], population: Any, *shared: Any) -> Any:
        """``fn(population, *shared)`` for work that reads the whole population at once (a sort of
        every genome's proposals): ``population`` (leaves ``[P, ...]``, split) is gathered in one
        packed all-gather (:meth:`gathered`), every device computes ``fn`` whole on it and the
        replicated ``shared``, and keeps its own rows of each ``[P, ...]`` output (the rest of the
        outputs replicated). A sort of split keys left to XLA's partitioner gathers each key
        array on its own."""
        if self.devices == 1:
            return fn(population, *shared)
        rows = jax.tree_util.tree_leaves(population)[0].shape[0]
        per_row = lambda a: a.ndim > 0 and a.shape[0] == rows  # noqa: E731
        shapes = jax.eval_shape(fn, population, *shared)
        out_specs = jax.tree_util.tree_map(lambda a: P(self.axis) if per_row(a) else P(), shapes)
        n = int(self.mesh.shape[self.axis])

        def local(population, *shared):
            out = fn(all_gather_rows(population, self.axis), *shared)
            start = jax.lax.axis_index(self.axis) * (rows // n)
            own = lambda a: jax.lax.dynamic_slice_in_dim(a, start, rows // n) if per_row(a) else a  # noqa: E731
            return jax.tree_util.tree_map(own, out)

        in_specs = (
            jax.tree_util.tree_map(lambda _: P(self.axis), population),
            *jax.tree_util.tree_map(lambda _: P(), shared),
        )
        return jax.shard_map(local, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)(
            population, *shared
        )

    def per_genome(self, fn: Callable[..., Any], *population: Any) -> Any:
        """``fn(*population)`` computed by each device on its own rows: every leaf of ``population``
        and of ``fn``'s outputs has the leading ``[P]`` axis, split along the axis, and ``fn``'s rows
        are independent (row ``i`` of the output reads only row ``i`` of the inputs).

        Inside ``shard_map``, so each device runs ``fn``'s loops (a vmapped ``while_loop`` over the
        genomes, a search until every genome is done) over its own genomes with its own trip
        count. Left to XLA's partitioner, such a loop over a split batch asks every device "is
        any genome still running?" (an all-reduce) at every iteration, and a gather or scatter
        over flattened rows inside it becomes an all-gather per iteration.
        """
        if self.devices == 1:
            return fn(*population)
        split = jax.tree_util.tree_map(lambda _: P(self.axis), population)
        return jax.shard_map(fn, mesh=self.mesh, in_specs=split, out_specs=P(self.axis), check_vma=False)(
            *population
        )

    def everywhere(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on replicated ``args``, computed whole by every device with no
        communication (its result is replicated): for small per-genome work inside a sequential
        loop (speciation's distance columns), where splitting it would cost a gather per iteration.
        """
        if self.devices == 1:
            return fn(*args)
        whole = jax.tree_util.tree_map(lambda _: P(), args)
        return jax.shard_map(fn, mesh=self.mesh, in_specs=whole, out_specs=P(), check_vma=False)(*args)

    def decoder(self, decoder: Any) -> Any:
        """``decoder`` with its ``decode`` run per device (:meth:`per_genome`): each device builds
        the networks of its own genomes (:class:`PerDeviceDecoder`; a decoder already wrapped, from
        an earlier placement, is re-wrapped for this layout, not wrapped twice)."""
        if isinstance(decoder, PerDeviceDecoder):
            decoder = decoder.wrapped
        return PerDeviceDecoder(decoder, self)

    def state_shardings(self, state: Any) -> Any:
        """A ``NEATState``'s shardings (same structure): ``population`` split, the rest replicated."""
        whole = jax.tree_util.tree_map(lambda _: self.whole, state)
        return whole.replace(population=jax.tree_util.tree_map(lambda _: self.split, state.population))

    def state(self, state: Any) -> Any:
        """A ``NEATState`` laid out as :meth:`state_shardings` says."""
        return jax.tree_util.tree_map(jax.lax.with_sharding_constraint, state, self.state_shardings(state))

    def __repr__(self) -> str:
        return f"MeshLayout({int(self.mesh.shape[self.axis])} devices along {self.axis!r})"


class PerDeviceDecoder:
    """A decoder (``decode``: ``Genome [P]`` -> phenotypes ``[P]``, ``apply``) whose ``decode`` runs
    per device on a :class:`MeshLayout` (:meth:`MeshLayout.per_genome`); every other attribute is
    the wrapped decoder's.

    A phenotype pytree with a leaf that has no ``[P]`` axis (shared by every genome) cannot come
    back split: such a decoder is run as it is, left to XLA's partitioner (the same result).
    """

    def __init__(self, decoder: Any, layout: MeshLayout):
        self.wrapped = decoder
        self.layout = layout

    @property
    def apply(self) -> Any:
        return self.wrapped.apply

    def decode(self, genotypes: Any) -> Any:
        """``Genome [P]`` -> the wrapped decoder's phenotypes ``[P]``, built per device."""
        rows = jax.tree_util.tree_leaves(genotypes)[0].shape[0]
        shapes = jax.eval_shape(self.wrapped.decode, genotypes)
        split = rows % int(self.layout.mesh.shape[self.layout.axis]) == 0  # not a single genome's
        if not split or not all(
            leaf.ndim and leaf.shape[0] == rows for leaf in jax.tree_util.tree_leaves(shapes)
        ):
            return self.wrapped.decode(genotypes)
        return self.layout.per_genome(self.wrapped.decode, genotypes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["wrapped"], name)

    def __repr__(self) -> str:
        return repr(self.wrapped)
