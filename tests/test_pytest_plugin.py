"""The pytest plugin, used as a user's suite uses it (pytest's ``pytester``, in process).

A user's test asks for ``semsim_runner``; a world that breaks an invariant
fails the test with the invariant, a case file and a replay command that
replays the same failure; a scenario becomes a test with ``scenario_test``;
the options are checked; the Hypothesis profiles are semsim's own.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from semsim.cli.main import main
from semsim.explore.examples import fuzz_examples
from semsim.scenarios.registry import every_scenario
from semsim.testing import profiles
from tests.installed import install_entry_points

pytest_plugins = ["pytester"]

#: The README's example world: with seed 1 the reference breaks capacity_returns (finding F4).
WORLD = """
from semsim.harness.run import HolderSpec, LeaseSpec, WorldConfig
from semsim.world.faults import Eviction, FaultPlan
from semsim.world.workload import Workload

CONFIG = WorldConfig(
    holder=HolderSpec(limit=8, leases=LeaseSpec(provisioning="strict", permits_per_lease=4)),
    workload=Workload(clients=4, items_per_minute=20, until_ms=120_000),
    duration_ms=180_000,
)
FAULTS = FaultPlan(reply_loss=0.05, evictions=(Eviction("holder:acct", 60_000),))
"""


@pytest.fixture
def forget_user_modules(tmp_path: Path) -> Iterator[None]:
    """Drop the modules a test imported from its own files (under ``tmp_path``) once it is done.

    Hypothesis mines constants from every local module in ``sys.modules``, so a
    user module left behind would change what later derandomized tests draw.
    """
    yield
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def _suite(pytester: pytest.Pytester, body: str) -> None:
    pytester.makepyfile(test_user=textwrap.dedent(WORLD) + textwrap.dedent(body))


def test_a_world_that_holds_passes_and_is_returned_to_assert_on(pytester: pytest.Pytester) -> None:
    _suite(
        pytester,
        """
        def test_tolerated(semsim_runner):
            run = semsim_runner.run(CONFIG, FAULTS, seed=1, tolerated=frozenset({"F4"}))
            assert run.result.outcome == "completed"
            assert run.trace.of_kind("grant_reclaimed") is not None
        """,
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_violation_fails_the_test_with_its_invariant_case_and_a_replay_that_replays_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    _suite(
        pytester,
        """
        def test_untolerated(semsim_runner):
            semsim_runner.run(CONFIG, FAULTS)
        """,
    )
    out = pytester.path / "cases"
    result = pytester.runpytest("-p", "no:cacheprovider", "--semsim-seed", "1", "--semsim-out", str(out))
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "SemsimFailure: invariant violated: capacity_returns at t=267000 ms: acct:" in text
    assert "known finding F4 (docs/FINDINGS.md): tolerated=frozenset({'F4'}) accepts it" in text
    replay = re.search(r"replay: (semsim fuzz --replay \S+ --trace \S+)", text)
    assert replay is not None, text
    (case,) = out.glob("*.json")
    assert case.name == "test_untolerated-capacity_returns_F4.json"
    assert "seed 1" in text
    # The printed command replays the same failure: the same invariant, exit 1.
    capsys.readouterr()
    argv = replay.group(1).split()[1:]
    assert main(argv) == 1
    assert "capacity_returns" in capsys.readouterr().out


USER_INVARIANT = """
from semsim.check.checker import Checker, Violated


class MaxGrant(Checker):
    name = "max_grant"

    def on_round(self, round):
        for reply in round.replies:
            for grant in reply.grants:
                if grant.permits > 1:
                    raise Violated(f"{grant.grant_id} grants {grant.permits} permits")
"""


def test_a_users_invariant_fails_the_test_and_its_case_replays_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], forget_user_modules: None
) -> None:
    _suite(
        pytester,
        USER_INVARIANT
        + textwrap.dedent(
            """
        def test_run(semsim_runner):
            semsim_runner.run(CONFIG, FAULTS, seed=1, tolerated=frozenset({"F4"}), invariants=[MaxGrant])

        def test_fuzz(semsim_runner):
            semsim_runner.fuzz(runs=3, invariants=[MaxGrant])

        def test_local_class(semsim_runner):
            class Local(MaxGrant):
                name = "local"
            semsim_runner.run(CONFIG, FAULTS, invariants=[Local])
        """
        ),
    )
    out = pytester.path / "cases"
    result = pytester.runpytest("-p", "no:cacheprovider", "--semsim-out", str(out))
    result.assert_outcomes(failed=3)
    text = result.stdout.str()
    assert "invariant violated: max_grant at t=" in text
    assert (
        "judged by: exact_accounting against the literal model, "
        "exact_queue against the literal queue model, safety, liveness, max_grant" in text
    )
    assert "broke max_grant" in text  # the campaign's
    assert "define it at the top level of a module" in text
    cases = sorted(out.glob("*.json"))
    assert [case.name for case in cases] == ["test_fuzz-max_grant.json", "test_run-max_grant.json"]
    for case in cases:
        assert json.loads(case.read_text(encoding="utf-8"))["invariants"] == ["test_user:MaxGrant"]
        capsys.readouterr()
        assert main(["fuzz", "--replay", str(case)]) == 1
        assert "VIOLATED max_grant" in capsys.readouterr().out


def test_check_false_returns_a_failed_run_for_a_test_that_expects_one(pytester: pytest.Pytester) -> None:
    _suite(
        pytester,
        """
        def test_expects_the_finding(semsim_runner):
            run = semsim_runner.run(CONFIG, FAULTS, seed=1, check=False)
            assert (run.result.invariant, run.result.finding) == ("capacity_returns", "F4")
        """,
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert not (pytester.path / "semsim-failures").exists()


def test_a_callers_error_is_raised_as_it_is_and_saves_no_case(pytester: pytest.Pytester) -> None:
    """A world the runner cannot run (another design's, a bad argument) is the test's own error,
    not a crash of the model: nothing is saved, and the message says what to call instead."""
    _suite(
        pytester,
        """
        import attrs
        import pytest
        from semsim.world.design import DesignSpec

        def test_gate_world(semsim_runner):
            with pytest.raises(ValueError, match="semsim_runner.scenario tells a design's story"):
                semsim_runner.run(attrs.evolve(CONFIG, design=DesignSpec(name="gate")))

        def test_bad_arguments(semsim_runner):
            with pytest.raises(TypeError, match="full_checks must be True or False"):
                semsim_runner.run(CONFIG, FAULTS, full_checks="yes")
            with pytest.raises(ValueError, match="tolerated names 'F99'"):
                semsim_runner.run(CONFIG, FAULTS, tolerated=frozenset({"F99"}))
        """,
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    assert not (pytester.path / "semsim-failures").exists()


def test_a_variant_failure_names_the_variant_and_its_judges_and_no_reference_replay(
    pytester: pytest.Pytester,
) -> None:
    _suite(
        pytester,
        """
        from semsim.world.variant import Variant
        from tests.test_variants import OverAdmittingHolder

        def test_variant(semsim_runner):
            variant = Variant("over", holder=OverAdmittingHolder, model=None)
            semsim_runner.run(CONFIG, FAULTS, variant=variant)
        """,
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--semsim-out", str(pytester.path / "cases"))
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "variant over, judged by: safety, liveness" in text
    assert "semsim fuzz --replay" not in text
    assert "run_world(..., variant=) with variant 'over'" in text


def test_a_scenario_becomes_a_test_and_a_failing_check_lists_what_was_unmet(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        stories=textwrap.dedent(
            """
            import attrs
            from semsim.scenarios import SCENARIOS

            def told_wrong():
                '''A story whose check expects what never happens.'''
                base = SCENARIOS["late-claim-not-found"]
                return attrs.evolve(base, name="told-wrong", check=lambda run: ["a grant for 99 permits"])
            """
        )
    )
    pytester.makepyfile(
        test_stories=textwrap.dedent(
            """
            from semsim.testing import scenario_test

            test_builtin = scenario_test("late-claim-not-found")
            test_wrong = scenario_test("stories:told_wrong")
            """
        )
    )
    pytester.syspathinsert()
    result = pytester.runpytest("-p", "no:cacheprovider", "--semsim-out", str(pytester.path / "cases"))
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert "scenario told-wrong, seed" in text
    assert "FAILED: a grant for 99 permits" in text
    assert re.search(r"replay: semsim run stories:told_wrong --seed \d+ --trace out.jsonl", text), text
    assert len(list((pytester.path / "cases").glob("test_wrong-expectations.json"))) == 1


DESIGN_STORY = """
from semsim.check.checker import Checker, Violated
from semsim.scenarios import SCENARIOS


class NeverOverCap(Checker):
    name = "never_over_cap"

    def on_api(self, call):
        if call.change == "start" and call.in_flight > call.limit:
            raise Violated(f"{call.in_flight} calls for {call.account}, cap {call.limit}")


def test_gate(semsim_runner):
    semsim_runner.scenario(SCENARIOS["gate-fails-open"], invariants=[NeverOverCap])
"""


def test_a_design_story_a_teams_invariant_breaks_names_it_and_its_case_replays_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], forget_user_modules: None
) -> None:
    """The gate's run has no world to report from: the failure once named the violation and then
    said the invariants held, and saved a case that expected nothing."""
    pytester.makepyfile(test_user=DESIGN_STORY)
    out = pytester.path / "cases"
    result = pytester.runpytest("-p", "no:cacheprovider", "--semsim-out", str(out))
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "FAILED: invariant never_over_cap violated" in text
    assert "invariants held" not in text
    (case,) = out.glob("*.json")
    assert case.name == "test_gate-never_over_cap.json"
    assert json.loads(case.read_text(encoding="utf-8"))["expect"]["invariant"] == "never_over_cap"
    assert f"replay: semsim fuzz --replay {case.relative_to(pytester.path)}" in text
    capsys.readouterr()
    assert main(["fuzz", "--replay", str(case)]) == 1
    assert "VIOLATED never_over_cap" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--semsim-seed", "-1", "a seed is a decimal integer"),
        ("--semsim-seed", "1.0", "a seed is a decimal integer"),
        ("--semsim-runs", "0", "runs are a decimal integer from 1"),
        ("--semsim-out", "", "an empty directory name"),
    ],
)
def test_a_bad_option_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, option: str, value: str, says: str
) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", f"{option}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert option in result.stderr.str()
    assert says in result.stderr.str()


def test_the_runs_option_reaches_a_campaign(pytester: pytest.Pytester) -> None:
    _suite(
        pytester,
        """
        def test_fuzz(semsim_runner):
            assert semsim_runner.runs == 3
            result = semsim_runner.fuzz(fixes="all")
            assert result.runs == 3
        """,
    )
    pytester.runpytest("-p", "no:cacheprovider", "--semsim-runs", "3").assert_outcomes(passed=1)


@pytest.mark.parametrize("on_ci_service", [False, True], ids=["local", "CI=true"])
@pytest.mark.parametrize(
    ("name", "examples"), [("semsim-ci", 150), ("semsim-dev", 500), ("semsim-nightly", 5_000)]
)
def test_the_profiles_are_semsims_own(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    examples: int,
    on_ci_service: bool,
) -> None:
    # In a process of its own: loading a profile is global, and would outlive an inline run.
    # Under CI=true Hypothesis loads its own "ci" profile at import; ours must not inherit it.
    if on_ci_service:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(
        test_profile=textwrap.dedent(
            f"""
            from hypothesis import settings

            def test_loaded():
                assert settings().max_examples == {examples}
                assert settings().deadline is None
                assert settings().derandomize == {name == "semsim-ci"}
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--hypothesis-profile={name}")
    result.assert_outcomes(passed=1)
    assert set(profiles.PROFILES) == {"semsim-ci", "semsim-dev", "semsim-nightly"}


def test_the_plugin_is_the_installed_pytest11_entry_point() -> None:
    from importlib import metadata

    (entry,) = [e for e in metadata.entry_points(group="pytest11") if e.name == "semsim"]
    assert entry.value == "semsim.testing.plugin"


def _stories(path: Path, body: str) -> None:
    """A user's module of scenarios, built on semsim's own worlds."""
    imports = "import attrs\nfrom semsim.scenarios import SCENARIOS\n"
    path.write_text(imports + textwrap.dedent(body), encoding="utf-8")


@pytest.mark.usefixtures("forget_user_modules")
def test_scenario_commands_find_a_module_function_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _stories(
        tmp_path / "mystories.py",
        """
        def mine():
            '''My story, told with a built-in world.'''
            return attrs.evolve(SCENARIOS["late-claim-not-found"], name="mine")

        NOT_A_SCENARIO = 3
        """,
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "mystories:mine"]) == 0
    assert "scenario mine" in capsys.readouterr().out
    for reference, says in [
        ("mystories:missing", "mystories has no attribute 'missing'"),
        ("mystories:NOT_A_SCENARIO", "is a int, not a Scenario"),
        ("nosuchmodule:x", "cannot import 'nosuchmodule'"),
        ("no-such-story", "unknown scenario 'no-such-story'"),
    ]:
        assert main(["run", reference]) == 2
        err = capsys.readouterr().err
        assert says in err, err
        assert "Traceback" not in err


@pytest.mark.usefixtures("forget_user_modules")
def test_scenarios_registered_by_an_installed_package_are_listed_and_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _stories(
        tmp_path / "theirstories.py",
        """
        def theirs():
            base = SCENARIOS["late-claim-not-found"]
            return attrs.evolve(base, name="theirs", description="their story")

        ALL = [theirs]
        """,
    )
    install_entry_points(
        tmp_path, monkeypatch, "theirstories", "semsim.scenarios", {"theirs": "theirstories:ALL"}
    )
    assert main(["list"]) == 0
    assert re.search(r"^theirs +their story$", capsys.readouterr().out, re.MULTILINE)
    assert main(["run", "theirs"]) == 0
    assert "scenario theirs" in capsys.readouterr().out
    # `semsim fuzz` runs their world among its first examples, after semsim's own.
    known = every_scenario()
    assert list(known)[-1] == "theirs"
    assert fuzz_examples((), known)[-1].config == known["theirs"].config
    # A package registering a name semsim already has is refused, naming it.
    (tmp_path / "theirstories.py").write_text(
        "from semsim.scenarios import SCENARIOS\nALL = [SCENARIOS['late-claim-not-found']]\n",
        encoding="utf-8",
    )
    del sys.modules["theirstories"]
    assert main(["list"]) == 2
    assert "a scenario named 'late-claim-not-found' is already registered" in capsys.readouterr().err


def test_a_campaign_names_its_variant_so_its_cases_can(tmp_path: Path) -> None:
    from semsim.testing import SemsimRunner
    from semsim.world.variant import REFERENCE

    runner = SemsimRunner(out_dir=tmp_path, test_name="t", runs=1)
    with pytest.raises(TypeError, match="a campaign's variant is the name it is found by"):
        runner.fuzz(variant=REFERENCE)  # type: ignore[arg-type]
    assert runner.fuzz(variant="reference").runs == 1


CASES_SUITE = (
    USER_INVARIANT
    + """
from hypothesis import given, settings
from semsim.testing import cases, check_case


@settings(max_examples=4, deadline=None, database=None)
@given(cases(fixes="all"))
def test_every_fix(case):
    assert check_case(case) is not None


@settings(max_examples=30, deadline=None, database=None)
@given(cases(invariants=[MaxGrant]))
def test_their_promise(case):
    check_case(case, shrink_budget_events=1)
"""
)


def test_a_campaign_as_a_users_own_hypothesis_test(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], forget_user_modules: None
) -> None:
    pytester.makepyfile(test_cases=CASES_SUITE)
    out = pytester.path / "cases"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--semsim-out", str(out), "--hypothesis-show-statistics"
    )
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    # The coverage counters are Hypothesis events: the statistics show how often each came up.
    assert re.search(r"reached \w+", text), text
    assert "invariant violated: max_grant at t=" in text
    # The shrink stopped at its budget (one run's work), on the smallest case found by then.
    assert "(the shrink ran out of budget: the case is the smallest found so far)" in text
    (case,) = out.glob("test_their_promise-max_grant.json")
    assert json.loads(case.read_text(encoding="utf-8"))["invariants"] == ["test_cases:MaxGrant"]
    replay = re.search(r"replay: (semsim fuzz --replay \S+ --trace \S+)", text)
    assert replay is not None, text
    capsys.readouterr()
    assert main(replay.group(1).split()[1:]) == 1
    assert "VIOLATED max_grant" in capsys.readouterr().out


def test_a_campaign_takes_the_active_profile_and_hypothesis_seed_when_asked(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        "from hypothesis import settings\nsettings.register_profile('tiny', max_examples=2, database=None)\n"
    )
    pytester.makepyfile(
        test_profile=textwrap.dedent(
            """
            from semsim.explore.fuzz import campaign

            def test_profile(semsim_runner):
                seen, expected = [], []
                result = semsim_runner.fuzz(profile=True, on_run=lambda c, r, s: seen.append(r.case))
                assert result.runs == 2  # the profile's max_examples
                campaign(2, 7, on_run=lambda c, r, s: expected.append(r.case))  # --hypothesis-seed's
                assert seen == expected
                assert semsim_runner.fuzz(runs=1).runs == 1  # without profile=True: as always
            """
        )
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--hypothesis-profile=tiny", "--hypothesis-seed=7"
    )
    result.assert_outcomes(passed=1)
