import pytest

from evotensor.tasks import Task, all_tasks, get_task, register_task


def test_classic_tasks_are_registered_and_build():
    tasks = all_tasks()
    for name in ("es-sphere", "es-rastrigin", "es-rosenbrock", "es-ackley"):
        assert name in tasks and tasks[name].description
    built = get_task("es-rastrigin").build({"dims": 5, "seed": 2})
    assert isinstance(built, Task) and built.problem.num_dims == 5 and built.generations > 0
    assert built.strategy.num_dims == 5


def test_seed_changes_the_initial_mean_deterministically():
    spec = get_task("es-sphere")
    a, b, c = (spec.build({"seed": s, "strategy": "simple_es"}) for s in (1, 1, 2))
    state = [t.strategy._mean_init for t in (a, b, c)]
    assert (state[0] == state[1]).all() and not (state[0] == state[2]).all()


def test_unknown_task_and_option_errors():
    with pytest.raises(KeyError, match="known tasks: .*es-sphere"):
        get_task("nope")
    with pytest.raises(ValueError, match="no option"):
        get_task("es-sphere").build({"colour": "red"})


def test_duplicate_registration_is_refused():
    @register_task("test-duplicate", "a test task")
    def build(cfg):
        raise AssertionError("never built")

    with pytest.raises(ValueError, match="registered twice"):

        @register_task("test-duplicate", "again")
        def build_again(cfg):
            raise AssertionError("never built")
