"""evotensor.qd.centroids: grid centres against NumPy, nearest_centroid against a float64 brute force
(random, tied, far-from-origin, batched, non-finite), kmeans_centroids as Lloyd's k-means (blob
means, fixed point, CVT coverage, errors)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.qd.centroids import grid_centroids, kmeans_centroids, nearest_centroid

nearest = jax.jit(nearest_centroid, static_argnames="chunk_size")


def brute_force(points, centroids):
    """float64 squared distances ``[B, C]`` and the argmin with the lowest index on ties."""
    d = ((np.asarray(points, np.float64)[:, None, :] - np.asarray(centroids, np.float64)[None]) ** 2).sum(-1)
    first = np.array([np.flatnonzero(row == row.min())[0] for row in d], np.int64)
    return d, first


def assert_nearest(points, centroids, got):
    """``got`` is the brute-force argmin wherever float32 can separate the two best distances, and
    a centroid at the minimal distance (within float32 rounding) everywhere."""
    got = np.asarray(got)
    assert got.dtype == np.int32 and got.shape == (len(points),)
    if not len(points):
        return
    d, ref = brute_force(points, centroids)
    best = d.min(1)
    resolution = 1e-5 * best + 1e-12  # ~20 float32 ulps of the distance
    second = np.sort(d, axis=1)[:, 1] if d.shape[1] > 1 else np.full(len(d), np.inf)
    clear = second - best > resolution
    np.testing.assert_array_equal(got[clear], ref[clear])
    assert np.all(d[np.arange(len(d)), got] <= best + resolution)


def separated_centroids(r, num, dim, min_dist=1e-3):
    """``num`` float32 points in ``[-1, 1]^dim``, no two within ``min_dist``."""
    kept = []
    while len(kept) < num:
        c = r.uniform(-1, 1, dim).astype(np.float32)
        if all(np.sqrt(((c.astype(np.float64) - k) ** 2).sum()) >= min_dist for k in kept):
            kept.append(c)
    return np.stack(kept)


# grid_centroids


def test_grid_centroids_2d_by_hand():
    c = np.asarray(grid_centroids((2, 3), [(0.0, 1.0), (-3.0, 3.0)]))
    expected = [[0.25, -2], [0.25, 0], [0.25, 2], [0.75, -2], [0.75, 0], [0.75, 2]]
    assert c.dtype == np.float32 and c.shape == (6, 2)
    np.testing.assert_array_equal(c, np.array(expected, np.float32))


@pytest.mark.parametrize(
    "dims, ranges",
    [
        ((2, 1, 3), [(-1, 1), (0, 5), (10, 11.5)]),
        ((4, 3, 5), [(0.1, 0.7), (-2e3, 1e3), (-1e-3, 0)]),
        ((7,), [(0, 7)]),
    ],
)
def test_grid_centroids_row_k_is_centre_of_cell_unravel_k(dims, ranges):
    c = np.asarray(grid_centroids(dims, ranges))
    assert c.dtype == np.float32 and c.shape == (int(np.prod(dims)), len(dims))
    low, high = np.array(ranges, np.float64).T
    width = (high - low) / np.array(dims)
    for k in range(len(c)):
        cell = np.array(np.unravel_index(k, dims))
        assert np.ravel_multi_index(tuple(cell), dims) == k
        centre = low + (cell + 0.5) * width
        np.testing.assert_allclose(c[k], centre, rtol=1e-6, atol=1e-9)
        assert np.all((c[k] > low + cell * width) & (c[k] < low + (cell + 1) * width))


@pytest.mark.parametrize(
    "dims, ranges, error, name",
    [
        ((), [], ValueError, "dims"),
        ((2, 2), [(0, 1)], ValueError, "dims and ranges"),
        ((2, 0), [(0, 1), (0, 1)], ValueError, r"dims\[1\]"),
        ((2, 2.5), [(0, 1), (0, 1)], TypeError, r"dims\[1\]"),
        ((True, 2), [(0, 1), (0, 1)], TypeError, r"dims\[0\]"),
        ((2, 2), [(0, 1), (1, 1)], ValueError, r"ranges\[1\]"),
        ((2, 2), [(0, 1), (2, 1)], ValueError, r"ranges\[1\]"),
        ((2, 2), [(0, np.inf), (0, 1)], ValueError, r"ranges\[0\]"),
        ((2, 2), [(np.nan, 1), (0, 1)], ValueError, r"ranges\[0\]"),
        ((2, 2), [(0, 1), (0, 1, 2)], TypeError, r"ranges\[1\]"),
        ((2, 2), [(0, 1), ("a", "b")], TypeError, r"ranges\[1\]"),
        ((2,), 5, ValueError, "ranges"),
    ],
)
def test_grid_centroids_validation_names_the_argument(dims, ranges, error, name):
    with pytest.raises(error, match=name):
        grid_centroids(dims, ranges)


# nearest_centroid


# few distinct shapes (each one compiles): chunk sizes smaller than C (not dividing it), equal to it
# and larger than it; chunk_size 1 and dividing chunk sizes are in the tie test below
@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    num=st.sampled_from([7, 16]),
    dim=st.sampled_from([1, 3]),
    chunk_size=st.sampled_from([3, 7, 64]),
)
def test_nearest_centroid_matches_float64_brute_force(seed, num, dim, chunk_size):
    r = np.random.default_rng(seed)
    centroids = separated_centroids(r, num, dim)
    points = r.uniform(-1.5, 1.5, (12, dim)).astype(np.float32)
    # some points exactly on a centroid and some halfway between two (near ties)
    points[:2] = centroids[r.integers(num, size=2)]
    points[2:4] = (centroids[r.integers(num, size=2)] + centroids[r.integers(num, size=2)]) / 2
    got = nearest(jnp.asarray(points), jnp.asarray(centroids), chunk_size=chunk_size)
    assert_nearest(points, centroids, got)


@pytest.mark.parametrize("chunk_size", [1, 7, 16, 125, 4096])
def test_exact_ties_of_many_centroids_go_to_the_lowest_index(chunk_size):
    """A 5x5x5 grid of centroids (shuffled) and points on the half-spacing lattice: with dyadic
    coordinates every float32 distance is exact, so cell-centre points tie 8 ways, face points 4
    ways, edge points 2 ways, and the answer must be exactly the lowest tied index."""
    r = np.random.default_rng(0)
    grid = np.stack(np.meshgrid(*[np.arange(5) * 0.25] * 3, indexing="ij"), -1).reshape(-1, 3)
    centroids = grid[r.permutation(len(grid))].astype(np.float32)
    points = np.stack(np.meshgrid(*[np.arange(-1, 10) * 0.125] * 3, indexing="ij"), -1).reshape(-1, 3)
    points = points.astype(np.float32)
    d, ref = brute_force(points, centroids)
    assert np.max(np.sum(d == d.min(1, keepdims=True), axis=1)) == 8  # the ties are there
    got = nearest(jnp.asarray(points), jnp.asarray(centroids), chunk_size=chunk_size)
    np.testing.assert_array_equal(np.asarray(got), ref)


def test_duplicate_centroids_go_to_the_lowest_index():
    r = np.random.default_rng(1)
    base = separated_centroids(r, 6, 2)
    centroids = np.concatenate([base, base[::-1], base])  # copy j of base[i] at i, 11 - i, 12 + i
    points = r.uniform(-1, 1, (50, 2)).astype(np.float32)
    _, ref_base = brute_force(points, base)
    for chunk_size in (4, 64):
        got = np.asarray(nearest(jnp.asarray(points), jnp.asarray(centroids), chunk_size=chunk_size))
        np.testing.assert_array_equal(got, ref_base)


def test_exact_where_the_gemm_form_is_not():
    """Points and half the centroids near (1000, 1000), the other half near (-1000, -1000): the
    GEMM form's rounding error (~ |x|^2 eps, also after centring on the mean centroid) exceeds the
    gaps between distances, so a plain GEMM argmin is mostly wrong; the result must not be."""
    r = np.random.default_rng(2)
    centroids = np.concatenate([1000 + r.uniform(0, 1, (200, 2)), -1000 + r.uniform(0, 1, (200, 2))])
    centroids = centroids[r.permutation(400)].astype(np.float32)
    points = (1000 + r.uniform(0, 1, (300, 2))).astype(np.float32)
    _, ref = brute_force(points, centroids)
    x, c = jnp.asarray(points), jnp.asarray(centroids)
    gemm = jnp.sum(x * x, 1)[:, None] - 2 * jnp.dot(x, c.T, precision="highest") + jnp.sum(c * c, 1)[None]
    assert np.mean(np.asarray(jnp.argmin(gemm, axis=1)) == ref) < 0.5
    for chunk_size in (64, 4096):
        assert_nearest(points, centroids, nearest(x, c, chunk_size=chunk_size))


def test_empty_batch_and_single_centroid():
    c = jnp.asarray(np.random.default_rng(3).uniform(size=(9, 4)), jnp.float32)
    for chunk_size in (2, 4096):
        out = nearest(jnp.zeros((0, 4)), c, chunk_size=chunk_size)
        assert out.shape == (0,) and out.dtype == jnp.int32
    np.testing.assert_array_equal(nearest(jnp.ones((3, 4)), c[:1], chunk_size=2), [0, 0, 0])


def test_jit_and_vmap_over_point_sets_give_the_same_indices():
    r = np.random.default_rng(4)
    centroids = jnp.asarray(separated_centroids(r, 37, 3))
    point_sets = jnp.asarray(r.uniform(-1, 1, (5, 11, 3)), jnp.float32)
    one = functools.partial(nearest, centroids=centroids, chunk_size=8)
    separate = np.stack([np.asarray(one(p)) for p in point_sets])
    for p, got in zip(point_sets, separate):
        assert_nearest(np.asarray(p), np.asarray(centroids), got)
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(one))(point_sets)), separate)
    # centroid sets batched as well
    centroid_sets = jnp.asarray(r.uniform(-1, 1, (5, 20, 3)), jnp.float32)
    both = jax.jit(jax.vmap(functools.partial(nearest, chunk_size=6)))(point_sets, centroid_sets)
    for p, c, got in zip(point_sets, centroid_sets, np.asarray(both)):
        np.testing.assert_array_equal(got, np.asarray(nearest(p, c, chunk_size=6)))


def test_non_finite_points_get_an_index_in_range_and_leave_the_others_alone():
    r = np.random.default_rng(5)
    centroids = separated_centroids(r, 23, 3)
    points = r.uniform(-1, 1, (10, 3)).astype(np.float32)
    points[[1, 4, 5, 8], :] = [[np.nan, 0, 0], [np.inf, 1, 1], [-np.inf, np.inf, np.nan], [np.nan] * 3]
    finite = np.all(np.isfinite(points), axis=1)
    for chunk_size in (5, 4096):
        got = np.asarray(nearest(jnp.asarray(points), jnp.asarray(centroids), chunk_size=chunk_size))
        assert np.all((got >= 0) & (got < 23))
        assert_nearest(points[finite], centroids, got[finite])


def test_nearest_centroid_validation():
    with pytest.raises(ValueError, match="same D"):
        nearest_centroid(jnp.zeros((3, 2)), jnp.zeros((4, 3)))
    with pytest.raises(ValueError, match="C >= 1"):
        nearest_centroid(jnp.zeros((3, 2)), jnp.zeros((0, 2)))
    with pytest.raises(ValueError, match="chunk_size"):
        nearest_centroid(jnp.zeros((3, 2)), jnp.zeros((4, 2)), chunk_size=0)


# kmeans_centroids


def lloyd_step(samples, centroids):
    """One float64 Lloyd step: cluster sizes and the mean of the samples nearest to each centroid."""
    _, labels = brute_force(samples, centroids)
    counts = np.bincount(labels, minlength=len(centroids))
    means = np.stack([np.asarray(samples, np.float64)[labels == j].mean(0) for j in range(len(centroids))])
    return counts, means


@pytest.fixture(scope="module")
def cvt():
    ranges = [(-1.0, 3.0), (0.5, 2.5)]
    centroids, samples = kmeans_centroids(jax.random.key(0), 16, ranges, samples=5000, tol=0.0)
    return ranges, np.asarray(centroids), np.asarray(samples)


def test_kmeans_shapes_box_and_determinism(cvt):
    ranges, centroids, samples = cvt
    assert centroids.dtype == np.float32 and centroids.shape == (16, 2)
    assert samples.dtype == np.float32 and samples.shape == (5000, 2)
    low, high = np.array(ranges).T
    assert np.all((samples >= low) & (samples <= high)) and np.all((centroids > low) & (centroids < high))
    # the samples fill the box uniformly
    np.testing.assert_allclose(samples.mean(0), (low + high) / 2, atol=0.05)
    np.testing.assert_allclose(samples.std(0), (high - low) / np.sqrt(12), rtol=0.03)
    again, same_samples = kmeans_centroids(jax.random.key(0), 16, ranges, samples=5000, tol=0.0)
    np.testing.assert_array_equal(np.asarray(again), centroids)
    np.testing.assert_array_equal(np.asarray(same_samples), samples)
    other, _ = kmeans_centroids(jax.random.key(1), 16, ranges, samples=5000, tol=0.0)
    assert not np.allclose(np.asarray(other), centroids)


def test_kmeans_starts_from_distinct_samples(cvt):
    ranges, centroids, samples = cvt
    start, same_samples = kmeans_centroids(jax.random.key(0), 16, ranges, samples=5000, iterations=0)
    start = np.asarray(start)
    np.testing.assert_array_equal(np.asarray(same_samples), samples)
    rows = [np.flatnonzero(np.all(samples == c, axis=1)) for c in start]
    assert all(len(r) == 1 for r in rows) and len({int(r[0]) for r in rows}) == 16
    assert not np.allclose(start, centroids)  # and Lloyd's steps moved them


def test_kmeans_result_is_a_fixed_point_of_lloyd(cvt):
    _, centroids, samples = cvt
    counts, means = lloyd_step(samples, centroids)
    assert np.all(counts > 0)
    np.testing.assert_allclose(centroids, means, atol=1e-5)


def test_cvt_covers_the_box_with_balanced_cells(cvt):
    ranges, centroids, samples = cvt
    d, labels = brute_force(samples, centroids)
    side = np.sqrt(np.prod([high - low for low, high in ranges]) / 16)  # side of an average cell
    assert np.sqrt(d.min(1)).max() < 0.9 * side
    counts = np.bincount(labels, minlength=16)
    assert counts.min() > 0.6 * 5000 / 16 and counts.max() < 1.4 * 5000 / 16


def test_kmeans_recovers_separated_blob_means():
    r = np.random.default_rng(0)
    means = np.array([[-5, -5], [-5, 5], [5, -5], [5, 5]], np.float64)
    samples = np.concatenate([m + 0.3 * r.standard_normal((100, 2)) for m in means]).astype(np.float32)
    blob_means = samples.astype(np.float64).reshape(4, 100, 2).mean(1)
    recovered = 0
    for seed in range(6):
        centroids, used = kmeans_centroids(jax.random.key(seed), 4, [(-10, 10)] * 2, samples=samples, tol=0.0)
        np.testing.assert_array_equal(np.asarray(used), samples)
        centroids = np.asarray(centroids, np.float64)
        counts, lloyd_means = lloyd_step(samples, centroids)
        np.testing.assert_allclose(centroids, lloyd_means, atol=1e-4)  # every run converged
        blob = np.argmin(((centroids[:, None] - blob_means[None]) ** 2).sum(-1), axis=1)
        # random initial centres may start two in one blob (a local optimum, as in pyribs); from
        # one per blob, k-means must land on the blob means exactly
        if len(set(blob)) == 4:
            recovered += 1
            np.testing.assert_allclose(centroids, blob_means[blob], atol=1e-5)
            np.testing.assert_array_equal(counts, 100)
    assert recovered >= 3


def test_kmeans_errors_name_the_problem():
    ranges = [(0.0, 1.0), (0.0, 1.0)]
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"num_centroids \(6\) must be <= the number of samples \(5\)"):
        kmeans_centroids(key, 6, ranges, samples=5)
    with pytest.raises(ValueError, match=r"num_centroids \(4\) must be <= the number of samples \(3\)"):
        kmeans_centroids(key, 4, ranges, samples=np.zeros((3, 2)))
    # all samples equal: every cluster but the lowest-index one ends empty
    with pytest.raises(ValueError, match="2 of 3 clusters empty.*more samples"):
        kmeans_centroids(key, 3, ranges, samples=np.full((100, 2), 0.5))
    # two distinct points for three clusters: at least one stays empty whatever the start
    two_points = np.repeat(np.array([[0.1, 0.1], [0.9, 0.9]]), 50, axis=0)
    with pytest.raises(ValueError, match="1 of 3 clusters empty"):
        kmeans_centroids(key, 3, ranges, samples=two_points)
    for bad, error, name in [
        (dict(num_centroids=0), ValueError, "num_centroids"),
        (dict(num_centroids=2.0), TypeError, "num_centroids"),
        (dict(samples=0), ValueError, "samples"),
        (dict(samples=np.zeros((10, 3))), ValueError, r"samples .*\[n, 2\]"),
        (dict(samples=np.full((10, 2), np.nan)), ValueError, "finite"),
        (dict(samples=np.full((10, 2), 1e39)), ValueError, "finite"),
        (dict(samples=np.full((10, 2), "a")), TypeError, "samples"),
        (dict(iterations=-1), ValueError, "iterations"),
        (dict(tol=-1.0), ValueError, "tol"),
        (dict(ranges=[(0, 1), (1, 0)]), ValueError, r"ranges\[1\]"),
    ]:
        kwargs = dict(num_centroids=2, ranges=ranges, samples=20) | bad
        with pytest.raises(error, match=name):
            kmeans_centroids(key, **kwargs)
