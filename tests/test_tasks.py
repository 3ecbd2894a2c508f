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


def test_registry_discovers_each_familys_tasks_module():
    from evotensor.tasks import all_tasks, task_modules

    assert task_modules() == (
        "evotensor.es.tasks",
        "evotensor.gp.tasks",
        "evotensor.neat.tasks",
        "evotensor.qd.tasks",
    )
    families = {name.split("-")[0] for name in all_tasks()}
    assert {"es", "sr", "qd", "neat"} <= families  # (other tests may register tasks of their own)


def test_moved_task_modules_still_answer_with_a_deprecation_warning():
    import importlib

    from evotensor.es import tasks as es_tasks

    for old in ("evotensor.problems.es_tasks", "evotensor.problems.classic_tasks"):
        module = importlib.import_module(old)
        with pytest.warns(DeprecationWarning, match="moved to evotensor.es.tasks"):
            assert module.build_classic is es_tasks.build_classic
        with pytest.raises(AttributeError):
            module.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    "helper, value, ok",
    [
        ("positive_int_option", 3, 3),
        ("positive_int_option", 0, None),
        ("positive_int_option", True, None),
        ("positive_int_option", 2.0, None),
        ("positive_float_option", 0.5, 0.5),
        ("positive_float_option", 2, 2.0),
        ("positive_float_option", float("inf"), None),
        ("positive_float_option", -1.0, None),
        ("hidden_sizes_option", "32,16", (32, 16)),
        ("hidden_sizes_option", 8, (8,)),
        ("hidden_sizes_option", [4, 4], (4, 4)),
        ("hidden_sizes_option", "a,b", None),
        ("hidden_sizes_option", [4, 0], None),
    ],
)
def test_option_helpers_accept_good_values_and_name_the_option_otherwise(helper, value, ok):
    import evotensor.tasks as tasks

    fn = getattr(tasks, helper)
    name = "hidden" if helper == "hidden_sizes_option" else "width"
    if ok is None:
        with pytest.raises(ValueError, match=f"option {name} must be"):
            fn({name: value}, name)
    else:
        assert fn({name: value}, name) == ok
