"""The matcher's corpus and generated commands, run by the real bash and dash.

A command the matcher allows must run nothing outside the approved prefixes under either
shell; every "deny" case must really do something outside them (so the oracle is shown
to see it); every "refuse" case is harmless here. Each command runs four times: in bash
and dash, once with every program succeeding and once with every program failing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memq.producers.terminal import is_command_allowed
from tests.producers.shell_sandbox import SHELLS, ShellSandbox
from tests.producers.terminal_corpus import PREFIXES, Case, of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> ShellSandbox:
    return ShellSandbox(tmp_path_factory.mktemp("shells") / "root")


def violations(sandbox: ShellSandbox, command: str) -> Iterator[str]:
    """What each run did outside the prefixes, run by run."""
    for shell in SHELLS:
        for programs_fail in (False, True):
            run = sandbox.run(shell, command, programs_fail=programs_fail)
            outcome = "failing" if programs_fail else "succeeding"
            for found in run.violations(PREFIXES):
                yield f"{shell}, programs {outcome}: {found}"


@pytest.mark.parametrize("case", of("allow"), ids=lambda c: c.id)
def test_allowed_commands_run_nothing_else(case: Case, sandbox: ShellSandbox) -> None:
    assert is_command_allowed(case.command, PREFIXES)
    assert list(violations(sandbox, case.command)) == []


@pytest.mark.parametrize("case", of("deny"), ids=lambda c: c.id)
def test_denied_commands_are_real_bypasses(case: Case, sandbox: ShellSandbox) -> None:
    assert not is_command_allowed(case.command, PREFIXES)
    assert next(violations(sandbox, case.command), None) is not None


@pytest.mark.parametrize("case", of("refuse"), ids=lambda c: c.id)
def test_cautious_refusals_are_harmless_here(case: Case, sandbox: ShellSandbox) -> None:
    assert not is_command_allowed(case.command, PREFIXES)
    assert list(violations(sandbox, case.command)) == []


# Generated commands: approved and forbidden commands joined by operators, comments,
# redirections, here-documents and the characters that change how the rest of a line is
# read (quotes, #, backslash); free mixtures of all of these; and the corpus's allowed
# commands with some of these pieces inserted anywhere.
APPROVED = ("ls", "ls -la", "git status", "git status -s", "echo hi", "echo 'a b'",
            'echo "Done!"', "cat file.txt", "grep -n foo file.txt", "wc -l", "sort",
            "head -1", "echo a#b", "cat <<'EOF'\nrm -rf ~\nEOF\n")
FORBIDDEN = ("rm -rf ~", "curl x", "sh", "id", "git push", "FOO=1 ls", "$(id)", "`id`",
             "> out", "exec ls", "{ id; }", "(id)", "~/x", "*", "cat <<EOF\n$(id)\nEOF\n")
JOINERS = (" ", "\t", ";", " ; ", "&&", " && ", "||", " || ", "|", " | ", "|&", " & ", "\n",
           "\n\n", "\r\n", " \\\n", " # note\n", " #'\n", ' #"\n', "#", " #", "'", '"',
           "\\", " 2>&1 | ", " >/dev/null\n", " 2>/dev/null; ", " &>/dev/null\n",
           " &>/dev/null ", " <<'EOF'\n", " <<EOF\n", "\nEOF\n", "EOF", " <<< ", " >&2 ",
           " 2>", " {", "} ", "!", "=", "\u00a0", "é")
commands = st.sampled_from(APPROVED * 3 + FORBIDDEN)
joiners = st.sampled_from(JOINERS)
composed = st.lists(st.tuples(commands, joiners), min_size=1, max_size=5).map(
    lambda parts: "".join(c + j for c, j in parts))
mixed = st.lists(st.sampled_from(APPROVED + FORBIDDEN + JOINERS), min_size=1, max_size=8).map(
    "".join)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    command = draw(st.sampled_from([case.command for case in of("allow")]))
    for piece in draw(st.lists(st.sampled_from(JOINERS + FORBIDDEN), min_size=1, max_size=3)):
        at = draw(st.integers(0, len(command)))
        command = command[:at] + piece + command[at:]
    return command


EXAMPLES = int(os.environ.get("MEMQ_MATCHER_EXAMPLES", "400"))
"""How many generated commands a run tries (more for a longer search)."""


@given(command=st.one_of(composed, mixed, mutated()))
@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
def test_generated_commands_the_matcher_allows_run_nothing_else(
        command: str, sandbox: ShellSandbox) -> None:
    allowed = is_command_allowed(command, PREFIXES)
    event("allowed" if allowed else "refused")  # shown by --hypothesis-show-statistics
    if allowed:
        assert list(violations(sandbox, command)) == []
