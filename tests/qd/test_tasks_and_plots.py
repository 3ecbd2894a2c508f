"""The QD tasks (evotensor.qd.tasks) and archive pictures (evotensor.qd.plots)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.qd import CVTArchive, GridArchive
from evotensor.qd.plots import archive_heatmap, archive_image, plot_qd_history
from evotensor.tasks import get_task


def run_and_resume(task, run_dir, first, total, chunk):
    """``(first run, resumed run)``: ``first`` generations into ``run_dir``, then resumed to ``total``;
    the resumed state is asserted equal, bit for bit, to one uninterrupted run of ``total``."""
    options = dict(chunk_size=chunk, progress=False, decoder=task.decoder)
    full = evotensor.run(task.strategy, task.problem, total, jax.random.key(0), **options)
    options["run_dir"] = run_dir
    start = evotensor.run(task.strategy, task.problem, first, jax.random.key(0), **options)
    resumed = evotensor.run(task.strategy, task.problem, total, jax.random.key(0), resume=True, **options)
    for a, b in zip(
        jax.tree_util.tree_leaves(resumed.state), jax.tree_util.tree_leaves(full.state), strict=True
    ):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):  # ME-ES keeps its noise key
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
    return start, resumed


def test_qd_arm_task_runs_reports_and_resumes_bit_identically(tmp_path):
    task = get_task("qd-arm").build({"joints": 6, "cells": 16, "pop": 64, "generations": 12})
    assert task.problem.num_dims == 6 and task.strategy.archive.num_cells == 256
    first, resumed = run_and_resume(task, tmp_path, 8, 12, 4)
    assert first.history["coverage"][-1] > 0
    text = task.report(resumed, tmp_path)
    stats = task.strategy.archive.stats(resumed.state.archive)
    assert f"{int(stats['num_elites'])} of 256 cells" in text
    assert (tmp_path / "archive.png").stat().st_size > 0 and (tmp_path / "qd.png").stat().st_size > 0


def test_qd_novelty_task_searches_a_proximity_archive_and_reports_the_grid(tmp_path):
    from evotensor.qd import ProximityArchive

    cfg = {"joints": 6, "cells": 16, "capacity": 300, "pop": 64, "novelty_threshold": 0.05}
    task = get_task("qd-novelty").build(cfg)
    assert isinstance(task.strategy.archive, ProximityArchive) and task.strategy.archive.local_competition
    first, resumed = run_and_resume(task, tmp_path, 5, 10, 5)
    search = resumed.state.archive
    n = int(search.occupied.sum())
    assert 64 < n <= 300 and first.history["coverage"][-1] > 0
    measures = np.asarray(search.measures)[:n]
    text = task.report(resumed, tmp_path)
    assert f"novelty archive: {n} of 300 rows" in text and "of 256 cells" in text
    # every stored elite is at least as novel as the threshold was when it entered: no two coincide
    gaps = np.sqrt(((measures[:, None] - measures[None]) ** 2).sum(-1)) + np.eye(n)
    assert gaps.min() > 0
    with pytest.raises(ValueError, match="local_competition"):
        get_task("qd-novelty").build({"local_competition": "yes"})


def test_qd_dns_task_keeps_a_full_population_and_resumes(tmp_path):
    from evotensor.qd import DNSArchive

    cfg = {"joints": 6, "cells": 16, "capacity": 100, "pop": 64}
    task = get_task("qd-dns").build(cfg)
    assert isinstance(task.strategy.archive, DNSArchive) and task.strategy.archive.k_neighbors == 3
    first, resumed = run_and_resume(task, tmp_path, 3, 6, 3)
    assert int(resumed.state.archive.occupied.sum()) == 100 and first.history["coverage"][-1] > 0
    assert "DNS population: 100 of 100" in task.report(resumed, tmp_path)


def test_qd_mees_task_adds_one_offspring_per_generation_and_resumes(tmp_path):
    task = get_task("qd-mees").build({"joints": 6, "cells": 16, "pop": 21, "generations": 12})
    emitter = task.strategy.emitters[0]
    assert emitter.num_samples == 20 and task.strategy.population_size == 21
    with pytest.raises(ValueError, match="pop"):
        get_task("qd-mees").build({"pop": 2})
    first, resumed = run_and_resume(task, tmp_path, 8, 12, 4)
    # only the offspring enter the grid: at most one new elite per generation
    added = np.asarray(resumed.history["added"])
    assert added.max() == 1 and 0 < int(resumed.state.archive.occupied.sum()) <= 12
    text = task.report(resumed, tmp_path)
    assert "ME-ES: 12 gradient steps of 20 samples, 0 skipped" in text
    with pytest.raises(Exception, match="mode"):
        get_task("qd-mees").build({"mode": "both"})


def test_qd_cma_mega_task_fills_the_grid_from_the_gradients(tmp_path):
    task = get_task("qd-cma-mega").build({"dims": 10, "cells": 20, "generations": 30})
    assert task.strategy.population_size == 36
    first, resumed = run_and_resume(task, tmp_path, 20, 30, 10)
    assert resumed.history["coverage"][-1] > first.history["coverage"][0] > 0
    assert "of 400 cells" in task.report(resumed, tmp_path)
    maega = get_task("qd-cma-mega").build({"dims": 10, "cells": 20, "learning_rate": 0.01, "emitters": 2})
    assert maega.strategy.archive.learning_rate == 0.01 and maega.strategy.result_archive is not None
    (group,) = maega.strategy.emitters
    assert group.n == 2 and group.emitter.cma.ranker.name == "imp"
    assert maega.strategy.population_size == 72


def test_qd_multitask_arm_task_runs_reports_and_resumes_bit_identically(tmp_path):
    cfg = {
        "joints": 5,
        "tasks": 200,
        "cvt_samples": 4000,
        "pop": 40,
        "tournament_sizes": "1,20",
        "variation": "iso_dd",
    }
    task = get_task("qd-multitask-arm").build(cfg)
    assert task.strategy.archive.num_cells == 200 and task.strategy.tournament_sizes == (1, 20)
    first, resumed = run_and_resume(task, tmp_path, 10, 20, 5)
    assert first.history["coverage"][-1] > 0.1
    assert int(resumed.state.pulls.sum()) == int(np.sum(resumed.history["tournament_size"] > 0)) > 10
    text = task.report(resumed, tmp_path)
    assert "of 200 cells" in text and "tournament size: generations (mean reward): 1: " in text
    assert (tmp_path / "archive.png").stat().st_size > 0
    assert get_task("qd-multitask-arm").build(
        {"tasks": 30, "cvt_samples": 900}
    ).strategy.tournament_sizes == (1, 10, 50, 100, 500)
    for option, value in (("variation", "gauss"), ("tournament_sizes", "1,x")):
        with pytest.raises(ValueError, match=f"option {option}"):
            get_task("qd-multitask-arm").build({"tasks": 30, "cvt_samples": 900, option: value})


def test_qd_omg_mega_task_runs_and_resumes_bit_identically(tmp_path):
    task = get_task("qd-omg-mega").build({"dims": 20, "cells": 20, "pop": 8})
    emitter = task.strategy.emitters[0]
    assert emitter.sigma_g == pytest.approx(10**0.5) and emitter.batch_size == 8 and emitter.measure_dim == 2
    first, resumed = run_and_resume(task, tmp_path, 10, 20, 5)
    assert resumed.history["coverage"][-1] > first.history["coverage"][0] > 0
    assert "of 400 cells" in task.report(resumed, tmp_path)


def test_qd_noisy_arm_task_runs_me_ls_reports_its_corrected_archive_and_resumes(tmp_path):
    from evotensor.qd import LowSpreadArchive

    task = get_task("qd-noisy-arm").build({"joints": 4, "cells": 8, "pop": 16, "samples": 3, "reevals": 4})
    assert isinstance(task.strategy.archive, LowSpreadArchive) and task.strategy.population_size == 48
    first, resumed = run_and_resume(task, tmp_path, 6, 12, 3)
    assert first.history["coverage"][-1] > 0 and np.all(np.isfinite(first.history["spread_mean"]))
    text = task.report(resumed, tmp_path)
    assert "of 64 cells" in text and "corrected by 4 re-evaluations (medians): " in text
    assert (tmp_path / "archive.png").stat().st_size > 0
    plain = get_task("qd-noisy-arm").build({"samples": 1})
    assert isinstance(plain.strategy.archive, GridArchive) and "corrected" not in plain.report(
        evotensor.run(plain.strategy, plain.problem, 2, jax.random.key(0), progress=False), None
    )
    with pytest.raises(ValueError, match="option reevals"):
        get_task("qd-noisy-arm").build({"reevals": -1})


def test_qd_cma_mae_task_reports_the_result_archive():
    task = get_task("qd-cma-mae").build({"dims": 6, "cells": 10, "emitters": 2, "pop": 8})
    assert task.strategy.population_size == 16 and task.strategy.archive.learning_rate == 0.01
    result = evotensor.run(task.strategy, task.problem, 30, jax.random.key(1), progress=False)
    archive, state = task.strategy.reported_archive(result.state)
    assert archive is task.strategy.result_archive
    assert float(result.history["qd_score"][-1]) == pytest.approx(float(archive.stats(state)["qd_score"]))
    assert "coverage" in task.report(result, None)
    with pytest.raises(ValueError, match="option cells"):
        get_task("qd-cma-mae").build({"cells": "1,2,3"})


def test_grid_image_is_the_objective_per_cell():
    archive = GridArchive(solution_dim=1, dims=(4, 3), ranges=[(0, 4), (0, 3)])
    measures = np.array([[0.5, 0.5], [3.5, 2.5], [1.5, 0.5]], np.float32)
    state, _ = archive.add(archive.init(), np.zeros((3, 1)), np.array([1.0, 2.0, 3.0]), measures)
    image, extent = archive_image(archive, state)
    assert image.shape == (3, 4) and extent == (0, 4, 0, 3)  # rows: measure 1 (origin lower)
    assert image[0, 0] == 1.0 and image[2, 3] == 2.0 and image[0, 1] == 3.0
    assert np.isnan(image).sum() == 12 - 3


def test_cvt_image_pixels_follow_the_archive_cells(tmp_path):
    archive = CVTArchive(
        solution_dim=1, centroids=np.array([[0.25, 0.5], [0.75, 0.5]]), ranges=[(0, 1), (0, 1)]
    )
    state, _ = archive.add(archive.init(), np.zeros((1, 1)), np.array([5.0]), np.array([[0.1, 0.1]]))
    image, _ = archive_image(archive, state, resolution=10)
    assert np.all(image[:, :5] == 5.0) and np.all(np.isnan(image[:, 5:]))  # left half is cell 0
    archive_heatmap(archive, state, tmp_path / "cvt.png", title="cvt")
    assert (tmp_path / "cvt.png").stat().st_size > 0
    plot_qd_history({"coverage": np.linspace(0, 1, 5), "qd_score": np.arange(5.0)}, tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 0
    three = GridArchive(solution_dim=1, dims=(2, 2, 2), ranges=[(0, 1)] * 3)
    with pytest.raises(ValueError, match="needs 2 measures"):
        archive_image(three, three.init())
    assert jnp.all(archive.index_of(jnp.array([[0.49, 0.0], [0.51, 1.0]])) == jnp.array([0, 1]))


def test_qd_brax_task_runs_a_short_hopper_search(tmp_path):
    task = get_task("qd-brax").build(
        {"env": "hopper_uni", "episode_length": 5, "hidden": "4", "pop": 8, "cells": 8}
    )
    assert task.strategy.archive.num_cells == 8 and task.strategy.archive.measure_dim == 1
    result = evotensor.run(
        task.strategy, task.problem, 2, jax.random.key(0), decoder=task.decoder, progress=False
    )
    assert result.history["num_elites"][-1] >= 1
    # the archive holds finite elites with descriptors in range (also what the slow
    # tests/problems/test_qd_control.py::test_hopper_map_elites_end_to_end asserts)
    state = result.state.archive
    occupied = np.asarray(state.occupied)
    assert occupied.sum() >= 1
    assert np.all(np.isfinite(np.asarray(state.objective)[occupied]))
    measures = np.asarray(state.measures)[occupied]
    ((low, high),) = task.problem.descriptor_ranges
    assert (low, high) == (0.0, 1.0) and np.all((measures >= low) & (measures <= high))
    assert np.isfinite(result.best_fitness)
    assert "coverage" in task.report(result, tmp_path) and (tmp_path / "qd.png").exists()
    low = get_task("qd-brax").build(
        {
            "env": "hopper_uni",
            "episode_length": 5,
            "hidden": "4",
            "pop": 4,
            "cells": 8,
            "samples": 2,
            "reevals": 2,
        }
    )
    result = evotensor.run(
        low.strategy, low.problem, 2, jax.random.key(0), decoder=low.decoder, progress=False
    )
    assert low.strategy.population_size == 8 and "corrected by 2 re-evaluations" in low.report(result, None)
    with pytest.raises(ValueError, match="task"):
        get_task("qd-brax").build({"env": "cartpole"})
    with pytest.raises(ValueError, match="emitter"):
        get_task("qd-brax").build({"env": "hopper_uni", "emitter": "cma"})


def test_qd_brax_task_runs_pga_me_and_resumes_bit_identically(tmp_path):
    from evotensor.qd import IsoLineEmitter, PolicyGradientEmitter

    cfg = {"env": "hopper_uni", "episode_length": 6, "hidden": "4", "pop": 6, "cells": 8, "emitter": "pga"}
    cfg |= {"pg_steps": 2, "critic_steps": 4, "buffer": 500, "critic_hidden": "8", "transitions_batch": 16}
    task = get_task("qd-brax").build(cfg)
    pg, ga = task.strategy.emitters
    assert isinstance(pg, PolicyGradientEmitter) and isinstance(ga, IsoLineEmitter)
    assert (pg.batch_size, ga.batch_size, pg.iterations, pg.learner.buffer.capacity) == (3, 3, 2, 500)
    assert task.problem.transitions
    first_rows = np.concatenate([pg.initial_solutions, ga.initial_solutions])
    assert len(np.unique(first_rows[:, -1])) == 6  # six independent initial policies (a weight)
    first, resumed = run_and_resume(task, tmp_path, 2, 4, 2)
    assert int(resumed.state.emitters[0].td3.buffer.size) > int(first.state.emitters[0].td3.buffer.size) > 0
    assert "coverage" in task.report(resumed, tmp_path)


def test_qd_brax_task_runs_dcrl_me_and_resumes_bit_identically(tmp_path):
    from evotensor.qd import DCRLEmitter, IsoLineEmitter

    cfg = {"env": "hopper_uni", "episode_length": 6, "hidden": "4", "pop": 8, "cells": 8, "emitter": "dcrl"}
    cfg |= {"pg_steps": 2, "critic_steps": 4, "buffer": 500, "critic_hidden": "8", "transitions_batch": 16}
    task = get_task("qd-brax").build(cfg)
    dc, ga = task.strategy.emitters
    assert isinstance(dc, DCRLEmitter) and isinstance(ga, IsoLineEmitter)
    assert (dc.dcrl_batch_size, dc.ai_batch_size, ga.batch_size, dc.iterations) == (2, 2, 4, 2)
    assert dc.learner.lengthscale == 0.1 and task.problem.transitions
    # QDax's example environment: rewards offset by the task's 0.9 and clipped at 0, fitness too
    assert task.problem.offset_rewards and dc.learner.reward_offset == 0.0
    first, resumed = run_and_resume(task, tmp_path, 2, 4, 2)
    assert int(resumed.state.emitters[0].td3.buffer.size) > int(first.state.emitters[0].td3.buffer.size) > 0
    assert bool(resumed.state.emitters[0].aimed)
    # QDax's DCRL-ME defaults where the options are left out
    task = get_task("qd-brax").build({"env": "hopper_uni", "emitter": "dcrl", "buffer": 1000})
    dc = task.strategy.emitters[0]
    assert (dc.num_pg_training_steps, dc.iterations, dc.learner.batch_size) == (150, 1500, 100)
    assert dc.batch_size == 128 and task.strategy.population_size == 256
    with pytest.raises(ValueError, match="lengthscale"):
        get_task("qd-brax").build({"env": "hopper_uni", "emitter": "dcrl", "lengthscale": -1.0})


@pytest.mark.slow  # a second brax compile; ME-ES itself is tested on the arm in test_mees.py
def test_qd_brax_task_runs_me_es_on_the_policy_parameters():
    task = get_task("qd-brax").build(
        {"env": "hopper_uni", "episode_length": 5, "hidden": "4", "pop": 8, "cells": 8, "emitter": "mees"}
    )
    emitter = task.strategy.emitters[0]
    # a population of exactly pop: the offspring, 6 mirrored samples, one evaluate-only copy
    assert emitter.num_samples == 6 and emitter.batch_size == 8 and emitter.insert_mask.sum() == 1
    result = evotensor.run(
        task.strategy, task.problem, 3, jax.random.key(0), decoder=task.decoder, progress=False
    )
    assert 1 <= result.history["num_elites"][-1] <= 3 and max(result.history["added"]) == 1
    state = result.state.emitters[0]
    assert int(state.step) == 3 and np.all(np.isfinite(np.asarray(state.offspring)))


def test_qd_mome_task_runs_reports_and_resumes_bit_identically(tmp_path):
    from evotensor.qd import MOMEArchive

    cfg = {"dims": 8, "cells": 8, "front_size": 6, "pop": 32, "crossover_fraction": 0.5}
    task = get_task("qd-mome").build(cfg)
    archive = task.strategy.archive
    assert isinstance(archive, MOMEArchive) and archive.front_size == 6 and archive.num_cells == 8
    # hypervolumes from the box's worst values: every stored solution counts
    np.testing.assert_allclose(archive.reference_point, [low for low, _ in task.problem.fitness_range])
    first, resumed = run_and_resume(task, tmp_path, 6, 12, 3)
    assert resumed.history["moqd_score"][-1] >= first.history["moqd_score"][-1] > 0
    text = task.report(resumed, tmp_path)
    stats = archive.stats(resumed.state.archive)
    assert f"{int(stats['num_elites'])} solutions in" in text and "MOQD score" in text
    for picture in ("archive.png", "fronts.png", "qd.png"):
        assert (tmp_path / picture).stat().st_size > 0
    with pytest.raises(Exception, match="truncation"):
        get_task("qd-mome").build({"truncation": "oldest"})
