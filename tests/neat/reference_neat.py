"""Slow, obviously-correct pure-Python references for NEAT crossover and distance, on the plain
dicts of ``genome_to_dict`` (``{"nodes": {key: {...}}, "connections": {(in, out): {...}}}``),
plus a generator of random related genome pairs. Test helpers only.

The formulas are written from their published descriptions (neat-python 2.1's
``DefaultGenome.distance`` / ``configure_crossover``, Stanley & Miikkulainen 2002, TensorNEAT's
``DefaultDistance``), one gene at a time with dicts and sets.
"""

from __future__ import annotations

import re

import numpy as np

from evotensor.neat import GenomeSpec, genome_from_dict, genome_to_dict


def default_node_distance(spec: GenomeSpec, n1: dict, n2: dict) -> float:
    """neat-python's node gene distance before the weight coefficient."""
    d = sum(abs(n1[name] - n2[name]) for name in spec.node_gene.float_names)
    d += float(n1["activation"] != n2["activation"]) + float(n1["aggregation"] != n2["aggregation"])
    return d


def default_conn_distance(spec: GenomeSpec, c1: dict, c2: dict) -> float:
    return sum(abs(c1[name] - c2[name]) for name in spec.conn_gene.float_names)


def _coefficients(mode, c_d, c_w, c_e):
    c_d = 1.0 if c_d is None else c_d
    c_w = {"neat-python": 0.5, "paper": 0.4, "tensorneat": 0.4}[mode] if c_w is None else c_w
    c_e = c_d if c_e in (None, "auto") else c_e
    return c_d, c_w, c_e


def ref_distance(
    spec: GenomeSpec,
    a: dict,
    b: dict,
    mode: str = "neat-python",
    c_d: float | None = None,
    c_w: float | None = None,
    c_e: float | str | None = None,
    include_nodes: bool = True,
    enable_penalty: float = 1.0,
    threshold: int = 20,
    node_distance=default_node_distance,
    conn_distance=default_conn_distance,
) -> float:
    """The compatibility distance of two genome dicts in one of the three modes."""
    c_d, c_w, c_e = _coefficients(mode, c_d, c_w, c_e)
    if mode == "tensorneat":
        return _ref_tensorneat(spec, a, b, c_d, c_w, include_nodes, node_distance, conn_distance)

    # connection genes by innovation number
    by_inn_a = {g["innovation"]: (pair, g) for pair, g in a["connections"].items()}
    by_inn_b = {g["innovation"]: (pair, g) for pair, g in b["connections"].items()}
    max_a = max(by_inn_a) if by_inn_a else -1
    max_b = max(by_inn_b) if by_inn_b else -1
    matching, excess, disjoint = [], 0, 0
    for inn in set(by_inn_a) | set(by_inn_b):
        ga, gb = by_inn_a.get(inn), by_inn_b.get(inn)
        if ga is not None and gb is not None and ga[0] == gb[0]:
            matching.append((ga[1], gb[1]))
            continue
        if ga is not None:
            if inn > max_b:
                excess += 1
            else:
                disjoint += 1
        if gb is not None:
            if inn > max_a:
                excess += 1
            else:
                disjoint += 1
    n_conns = max(len(by_inn_a), len(by_inn_b))

    if mode == "paper":
        n = n_conns
        if n < threshold:
            n = 1
        n = max(n, 1)
        w_bar = sum(conn_distance(spec, x, y) for x, y in matching) / len(matching) if matching else 0.0
        return c_e * excess / n + c_d * disjoint / n + c_w * w_bar

    node_term = 0.0
    if include_nodes and (a["nodes"] or b["nodes"]):
        disjoint_nodes = sum(1 for k in b["nodes"] if k not in a["nodes"])
        homologous = 0.0
        for k, n1 in a["nodes"].items():
            n2 = b["nodes"].get(k)
            if n2 is None:
                disjoint_nodes += 1
            else:
                homologous += c_w * node_distance(spec, n1, n2)
        node_term = (homologous + c_d * disjoint_nodes) / max(len(a["nodes"]), len(b["nodes"]))
    conn_term = 0.0
    if n_conns > 0:
        homologous = 0.0
        for x, y in matching:
            d = conn_distance(spec, x, y)
            if x["enabled"] != y["enabled"]:
                d += enable_penalty
            homologous += c_w * d
        conn_term = (homologous + c_d * disjoint + c_e * excess) / n_conns
    return node_term + conn_term


def _ref_tensorneat(spec, a, b, c_d, c_w, include_nodes, node_distance, conn_distance):
    def part(genes_a: dict, genes_b: dict, dist) -> float:
        count = max(len(genes_a), len(genes_b))
        if count == 0:
            return 0.0
        shared = set(genes_a) & set(genes_b)
        non_homologous = len(genes_a) + len(genes_b) - 2 * len(shared)
        homologous = sum(dist(spec, genes_a[k], genes_b[k]) for k in shared)
        return (c_d * non_homologous + c_w * homologous) / count

    ng = spec.node_gene
    pin = {name: 0.0 for name in ng.float_names}
    pin.update(activation=ng.activation.options[0], aggregation=ng.aggregation.options[0])
    pins = {-1 - i: dict(pin) for i in range(spec.num_inputs)}
    total = 0.0
    if include_nodes:
        total += part({**pins, **a["nodes"]}, {**pins, **b["nodes"]}, node_distance)
    return total + part(a["connections"], b["connections"], conn_distance)


def ref_crossover_genes(fitter: dict, other: dict) -> dict:
    """neat-python's alignment: the child's genes are exactly the fitter parent's; for each, the pair
    ``(fitter's gene, other's homologous gene or None)``. Connections are homologous when innovation
    number and ``(in, out)`` agree; nodes when keys agree."""
    other_by_inn = {g["innovation"]: (pair, g) for pair, g in other["connections"].items()}
    conns = {}
    for pair, g in fitter["connections"].items():
        o = other_by_inn.get(g["innovation"])
        conns[pair] = (g, o[1] if o is not None and o[0] == pair else None)
    nodes = {k: (n, other["nodes"].get(k)) for k, n in fitter["nodes"].items()}
    return {"nodes": nodes, "connections": conns}


def ref_union_candidates(fitter: dict, other: dict) -> dict:
    """The paper's equal-fitness crossover: ``matching`` genes (always inherited), the fitter
    parent's unmatched genes and the other parent's eligible unmatched genes (neither its innovation
    number nor its pair held by the fitter parent), each inherited with probability 1/2."""
    genes = ref_crossover_genes(fitter, other)
    matching = {p for p, (_, o) in genes["connections"].items() if o is not None}
    fitter_only = set(fitter["connections"]) - matching
    f_innov = {g["innovation"] for g in fitter["connections"].values()}
    other_only = {
        p
        for p, g in other["connections"].items()
        if g["innovation"] not in f_innov and p not in fitter["connections"]
    }
    return {"matching": matching, "fitter_only": fitter_only, "other_only": other_only}


def ref_has_cycle(edges) -> bool:
    """Depth-first search for a directed cycle."""
    graph: dict = {}
    for u, v in edges:
        graph.setdefault(u, set()).add(v)

    def reaches(start, goal, seen):
        for nxt in graph.get(start, ()):
            if nxt == goal:
                return True
            if nxt not in seen:
                seen.add(nxt)
                if reaches(nxt, goal, seen):
                    return True
        return False

    return any(reaches(u, u, set()) for u in graph)


def random_pair(spec: GenomeSpec, seed: int, p_alt_innovation: float = 0.15):
    """Two related random genome dicts (float32-exact values): both start from one base genome, then
    each drops and adds hidden nodes and connections, perturbs attributes and flips enabled flags.
    Innovation numbers are global per ``(in, out)`` pair, except that with ``p_alt_innovation`` a
    genome uses a second number for a pair (as when the same link was added in two generations).
    Feedforward specs get acyclic genomes (a global node order)."""
    rng = np.random.default_rng(seed)
    n_in, n_out = spec.num_inputs, spec.num_outputs
    ng, cg = spec.node_gene, spec.conn_gene
    max_hidden = spec.max_nodes - spec.num_io
    pool = (n_out + rng.choice(40, size=min(max_hidden + 3, 40), replace=False)).tolist()
    inputs = [-1 - i for i in range(n_in)]
    non_inputs = list(range(n_out)) + pool
    rank = {k: r for r, k in enumerate(rng.permutation(non_inputs).tolist())}
    rank.update({k: -1 for k in inputs})
    pairs = [
        (u, v)
        for u in inputs + non_inputs
        for v in non_inputs
        if (rank[u] < rank[v] if spec.feed_forward else True)
    ]
    main = {p: int(i) for p, i in zip(pairs, rng.permutation(len(pairs)))}
    alt = {p: int(i) + len(pairs) for p, i in zip(pairs, rng.permutation(len(pairs)))}

    def node_gene():
        gene = {name: float(np.round(rng.normal(), 2)) for name in ng.float_names}
        gene["activation"] = ng.activation.options[rng.integers(len(ng.activation.options))]
        gene["aggregation"] = ng.aggregation.options[rng.integers(len(ng.aggregation.options))]
        return gene

    def conn_gene(pair):
        gene = {name: float(np.round(rng.normal(), 2)) for name in cg.float_names}
        gene["enabled"] = bool(rng.random() < 0.7)
        gene["innovation"] = alt[pair] if rng.random() < p_alt_innovation else main[pair]
        return gene

    def build(hidden, conn_prob, base=None):
        nodes = {k: node_gene() for k in list(range(n_out)) + hidden}
        if base is not None:
            for k in nodes:
                if k in base["nodes"] and rng.random() < 0.7:
                    nodes[k] = dict(base["nodes"][k]) if rng.random() < 0.5 else _perturb(base["nodes"][k])
        keys = set(inputs) | set(nodes)
        usable = [p for p in pairs if p[0] in keys and p[1] in keys]
        conns = {}
        for p in rng.permutation(len(usable)).tolist():
            pair = usable[p]
            if len(conns) >= spec.max_conns:
                break
            if base is not None and pair in base["connections"] and rng.random() < 0.8:
                g = dict(base["connections"][pair])
                if rng.random() < 0.5:
                    g = _perturb(g)
                if rng.random() < 0.2:
                    g["enabled"] = not g["enabled"]
                conns[pair] = g
            elif rng.random() < conn_prob:
                conns[pair] = conn_gene(pair)
        return {"nodes": nodes, "connections": conns}

    def _perturb(gene):
        gene = dict(gene)
        for name in gene:
            if isinstance(gene[name], float) and rng.random() < 0.5:
                gene[name] = float(np.round(gene[name] + rng.normal(), 2))
        return gene

    def pick_hidden(k):
        return sorted(rng.choice(pool, size=min(k, max_hidden), replace=False).tolist())

    base = build(pick_hidden(rng.integers(0, max_hidden + 1)), float(rng.uniform(0.1, 0.6)))
    out = []
    for _ in range(2):
        hidden = [k for k in base["nodes"] if k >= n_out and rng.random() < 0.8]
        extra = [k for k in pool if k not in hidden and rng.random() < 0.15]
        hidden = sorted(hidden + extra)[:max_hidden]
        g = build(hidden, float(rng.uniform(0.05, 0.4)), base)
        out.append(genome_to_dict(spec, genome_from_dict(spec, g)))
    return out[0], out[1]


def array_sizes(fn, *args):
    """Element counts of every array in jitted ``fn``'s StableHLO and compiled (optimized) HLO, and
    the compiled function."""
    lowered = fn.lower(*args)
    compiled = lowered.compile()
    texts = [lowered.as_text(), compiled.as_text()]
    sizes = []
    for text in texts:
        for dims in re.findall(r"tensor<((?:\d+x)+)[a-z]", text):
            sizes.append(int(np.prod([int(d) for d in dims.rstrip("x").split("x")])))
        for dims in re.findall(r"\b(?:f32|s32|pred|u32|f64|s64|u8|s8|u64)\[([0-9,]+)\]", text):
            sizes.append(int(np.prod([int(d) for d in dims.split(",")])))
    return sizes, compiled
