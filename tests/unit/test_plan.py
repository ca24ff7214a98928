from levelfield.plan import plan_trials, trial_key
from levelfield.policy import PRESETS
from levelfield.tasks import load_dataset, load_task

from ..conftest import MakeTask


def _tasks(make_task: MakeTask):  # type: ignore[no-untyped-def]
    for name in ("a", "b", "c"):
        root = make_task(name)
    return load_dataset(root.parent).tasks


def test_plan_covers_the_design_once_each(make_task: MakeTask) -> None:
    tasks = _tasks(make_task)
    policies = [PRESETS["strict"], PRESETS["uncapped"]]
    trials = plan_trials(tasks, ["oracle", "nop"], policies, repeats=3)
    assert len(trials) == 3 * 2 * 2 * 3 == len({t.key for t in trials})


def test_keys_are_deterministic_and_order_is_seeded(make_task: MakeTask) -> None:
    tasks = _tasks(make_task)
    policies = [PRESETS["strict"], PRESETS["headroom"]]
    one = plan_trials(tasks, ["oracle"], policies, repeats=4, seed=7)
    two = plan_trials(tasks[::-1], ["oracle"], policies[::-1], repeats=4, seed=7)
    other = plan_trials(tasks, ["oracle"], policies, repeats=4, seed=8)
    assert [t.key for t in one] == [t.key for t in two]  # option order does not matter
    assert [t.key for t in one] != [t.key for t in other]
    assert one[0].key == trial_key(
        one[0].task.name, "oracle", one[0].policy.name, one[0].repeat, "default"
    )


def test_configurations_are_interleaved_not_blocked(make_task: MakeTask) -> None:
    tasks = _tasks(make_task)
    trials = plan_trials(
        tasks, ["oracle"], [PRESETS["strict"], PRESETS["uncapped"]], repeats=10, seed=1
    )
    first_half = {t.policy.name for t in trials[: len(trials) // 2]}
    assert first_half == {"strict", "uncapped"}


def test_a_window_is_a_new_set_of_trials(make_task: MakeTask) -> None:
    tasks = _tasks(make_task)
    day = plan_trials(tasks, ["oracle"], [PRESETS["strict"]], window="day")
    night = plan_trials(tasks, ["oracle"], [PRESETS["strict"]], window="night")
    assert not {t.key for t in day} & {t.key for t in night}


def test_disclosing_limits_is_a_factor_that_keeps_old_keys(make_task: MakeTask) -> None:
    from levelfield.disclosure import disclosure_env, disclosure_sentence

    tasks = [load_task(make_task("a")), load_task(make_task("b"))]
    plain = plan_trials(tasks, ["oracle"], [PRESETS["strict"]])
    both = plan_trials(tasks, ["oracle"], [PRESETS["strict"]], disclosure_levels=(False, True))
    assert {t.key for t in plain} < {t.key for t in both} and len(both) == 4
    disclosed = [t for t in both if t.limits_disclosed]
    assert len(disclosed) == 2
    env = disclosure_env(disclosed[0].limits)
    assert env["LEVELFIELD_MEMORY_CEILING_BYTES"] == str(64 << 20)
    assert env["LEVELFIELD_CPU_CEILING"] == "1" and "LEVELFIELD_PIDS_MAX" in env
    assert "64 MiB of memory" in disclosure_sentence(disclosed[0].limits)
    uncapped = plan_trials(tasks[:1], ["oracle"], [PRESETS["uncapped"]], disclosure_levels=(True,))
    assert "LEVELFIELD_MEMORY_CEILING_BYTES" not in disclosure_env(uncapped[0].limits)
