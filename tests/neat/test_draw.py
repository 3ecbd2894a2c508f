"""Network drawings and run plots (evotensor.neat.draw) on random genomes
(tests/neat/reference_network.py) and synthetic histories."""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from tests.neat.reference_network import genome_dicts

from evotensor.core.checks import ArgumentError
from evotensor.neat import GenomeSpec, genome_from_dict, genome_to_dict
from evotensor.neat.draw import (
    NEGATIVE,
    POSITIVE,
    draw,
    network_levels,
    plot_fitness,
    plot_species,
    species_sizes,
)
from evotensor.neat.export import network_graph

FF = GenomeSpec(3, 2, max_nodes=14, max_conns=36)
REC = GenomeSpec(3, 2, max_nodes=14, max_conns=36, feed_forward=False)
PNG = b"\x89PNG\r\n\x1a\n"


def edge_lines(fig: Figure):
    return [line for ax in fig.axes for line in ax.lines if (line.get_gid() or "").startswith("edge ")]


def check_drawing(spec, gdict, fig):
    genome = genome_from_dict(spec, gdict)
    conns = genome_to_dict(spec, genome)["connections"]  # the stored (float32) weights
    lines = edge_lines(fig)
    assert len(lines) == len(conns)  # enabled + disabled
    by_pair = {line.get_gid()[5:]: line for line in lines}
    assert set(by_pair) == {f"{a}->{b}" for a, b in conns}
    for (a, b), c in conns.items():
        line = by_pair[f"{a}->{b}"]
        assert line.get_linestyle() == ("-" if c["enabled"] else "--")
        assert line.get_color() == (NEGATIVE if c["weight"] < 0 else POSITIVE)
    widths = sorted((abs(c["weight"]), by_pair[f"{a}->{b}"].get_linewidth()) for (a, b), c in conns.items())
    assert all(w0 <= w1 + 1e-12 for (_, w0), (_, w1) in zip(widths, widths[1:]))  # width grows with |w|
    levels = network_levels(spec, genome)
    assert all(levels[k] == 0 for k in range(-1, -spec.num_inputs - 1, -1))
    last = max(levels.values())
    assert all(levels[k] == last for k in range(spec.num_outputs)) and last >= 1
    hidden = [k for k in network_graph(spec, genome).nodes if k >= spec.num_outputs]
    assert all(1 <= levels[k] < last for k in hidden)
    return levels


@settings(max_examples=10)
@given(genome_dicts(FF))
def test_draw_feedforward(tmp_path_factory, gdict):
    path = tmp_path_factory.mktemp("ff") / "net.png"
    fig = draw(FF, genome_from_dict(FF, gdict), path, show_functions=True, title="ff")
    assert isinstance(fig, Figure)
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 2000
    levels = check_drawing(FF, gdict, fig)
    # feedforward layout: every connection from an input or hidden node into a hidden node goes
    # right (outputs sit in the last column even where they feed hidden nodes)
    for a, b in gdict["connections"]:
        if b >= FF.num_outputs and not 0 <= a < FF.num_outputs:
            assert levels[a] < levels[b]


@settings(max_examples=10)
@given(genome_dicts(REC, recurrent=True))
def test_draw_recurrent(tmp_path_factory, gdict):
    path = tmp_path_factory.mktemp("rec") / "net.png"
    fig = draw(REC, genome_from_dict(REC, gdict), path)
    assert path.read_bytes().startswith(PNG)
    levels = check_drawing(REC, gdict, fig)
    # breadth-first columns: a hidden node reached from the inputs sits one column after its
    # nearest predecessor
    reach = {k: 0 for k in range(-1, -REC.num_inputs - 1, -1)}
    frontier = list(reach)
    while frontier:
        nxt = [b for a, b in gdict["connections"] if a in frontier and b not in reach]
        for b in nxt:
            reach.setdefault(b, min(reach[a] for a, bb in gdict["connections"] if bb == b and a in reach) + 1)
        frontier = list(dict.fromkeys(nxt))
    for k, d in reach.items():
        if k >= REC.num_outputs:
            assert levels[k] == d


def test_draw_options_and_self_loops(tmp_path):
    spec = REC
    gdict = {
        "nodes": {
            0: {"bias": 0.0, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
            1: {"bias": 0.0, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
            5: {"bias": 0.0, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
            6: {"bias": 0.0, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
        },
        "connections": {
            (-1, 5): {"innovation": 10, "enabled": True, "weight": 1.0},
            (5, 5): {"innovation": 11, "enabled": True, "weight": -0.5},  # self-loop
            (5, 0): {"innovation": 12, "enabled": False, "weight": 2.0},
            (0, 5): {"innovation": 13, "enabled": True, "weight": 0.25},  # back edge
            (-2, 6): {"innovation": 14, "enabled": True, "weight": 1.0},  # 6 feeds no output
            (-3, 1): {"innovation": 15, "enabled": True, "weight": -3.0},
        },
    }
    genome = genome_from_dict(spec, gdict)
    fig = draw(spec, genome, node_names={-1: "x", 0: "out"})
    check_drawing(spec, gdict, fig)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "x" in texts and "out" in texts and "5" in texts
    loop = {line.get_gid(): line for line in edge_lines(fig)}["edge 5->5"]
    assert len(loop.get_xydata()) > 10  # a loop, not a segment
    assert {line.get_gid() for line in edge_lines(draw(spec, genome, show_disabled=False))} == {
        "edge -1->5",
        "edge 5->5",
        "edge 0->5",
        "edge -2->6",
        "edge -3->1",
    }
    # pruning follows enabled connections (5 -> 0 is disabled, so 5 and 6 feed no output)
    pruned = {line.get_gid() for line in edge_lines(draw(spec, genome, prune_unused=True))}
    assert pruned == {"edge -3->1"}
    # into an existing axes
    outer = Figure()
    ax = outer.add_subplot()
    assert draw(spec, genome, ax=ax) is outer and len(edge_lines(outer)) == 6
    with pytest.raises(ArgumentError, match="one genome"):
        draw(spec, jax.tree_util.tree_map(lambda a: a[None], genome))
    with pytest.raises(ArgumentError, match="node_names"):
        draw(spec, genome, node_names=["x"])


def test_draw_minimal_genome(tmp_path):
    spec = GenomeSpec(1, 1, max_nodes=4, max_conns=4, initial_connection="none")
    genome = spec.initial(jax.random.key(0), 1)[0]
    fig = draw(spec, genome, tmp_path / "empty.png")
    assert edge_lines(fig) == [] and (tmp_path / "empty.png").read_bytes().startswith(PNG)


# ---------------------------------------------------------------------------------------------
# run plots


def test_plot_species_from_num_species(tmp_path):
    history = {"num_species": np.array([1, 2, 4, 4, 3]), "best_fitness": np.arange(5.0)}
    fig = plot_species(history, tmp_path / "species.png")
    (line,) = fig.axes[0].lines
    assert np.array_equal(line.get_ydata(), [1, 2, 4, 4, 3])
    assert (tmp_path / "species.png").read_bytes().startswith(PNG)
    assert species_sizes(history) is None
    with pytest.raises(ArgumentError, match="num_species"):
        plot_species({"best_fitness": np.zeros(3)})


def test_plot_species_stacked_sizes_follow_species_keys(tmp_path):
    # slot 1 is reused: species 2 dies after generation 2, species 3 takes the slot
    sizes = np.array([[10, 0], [6, 4], [5, 5], [7, 3]])
    keys = np.array([[1, 0], [1, 2], [1, 2], [1, 3]])
    result = types.SimpleNamespace(
        history={"species_sizes": sizes, "species_keys": keys, "num_species": [1, 2, 2, 2]}
    )
    per = species_sizes(result)
    assert list(per) == [1, 2, 3]
    assert per[2].tolist() == [0, 4, 5, 0] and per[3].tolist() == [0, 0, 0, 3]
    fig = plot_species(result, tmp_path / "s.png")
    assert len([c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]) == 3
    # without keys: one band per slot in use
    assert list(species_sizes({"species_sizes": sizes})) == [0, 1]


def test_plot_fitness(tmp_path):
    g = np.arange(6.0)
    history = {
        "best_fitness": g,
        "generation_best": g - 0.5,
        "generation_mean": g - 1.0,
        "generation_std": np.full(6, 0.2),
    }
    fig = plot_fitness(history, tmp_path / "fitness.png")
    assert len(fig.axes[0].lines) == 3 and len(fig.axes[0].collections) == 1  # the std band
    assert (tmp_path / "fitness.png").read_bytes().startswith(PNG)
    assert len(plot_fitness({"best_fitness": g}).axes[0].lines) == 1
    with pytest.raises(ArgumentError, match="best_fitness"):
        plot_fitness({"num_species": g})


def test_task_report_writes_pictures(tmp_path):
    from evotensor.tasks import get_task

    task = get_task("neat-xor").build({"pop": 8, "generations": 1, "seed": 0})
    spec = task.strategy.spec
    best = spec.initial(jax.random.key(1), 1)[0]
    result = types.SimpleNamespace(
        best_genotype=best,
        best_fitness=2.5,
        history={"num_species": np.array([1, 2]), "best_fitness": np.array([2.0, 2.5])},
    )
    text = task.report(result, tmp_path)
    assert "wrote best_network.png best_network.json species.png" in text
    for name in ("best_network.png", "species.png"):
        assert (tmp_path / name).read_bytes().startswith(PNG)
    assert '"network_type": "feedforward"' in (tmp_path / "best_network.json").read_text()
