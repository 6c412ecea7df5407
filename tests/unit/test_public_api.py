"""The public API of DESIGN.md §6: every fixed name imports from ``orchestrator``, without Ray."""

from __future__ import annotations

import subprocess
import sys

FIXED = (
    "session_reducer resumable parse_part parse_action SessionState AgentMessage TextPart ReasoningPart "
    "ToolPart NestedRun SessionError open_store Contract Reducer Agent tool ToolContext ScriptedModel "
    "OpenAIChatModel Runtime"
).split()


def test_every_fixed_name_imports_and_only_runtime_brings_ray() -> None:
    code = (
        "import sys, orchestrator\n"
        f"names = {FIXED!r}\n"
        "for name in names[:-1]:\n"
        "    getattr(orchestrator, name)\n"
        "assert 'ray' not in sys.modules, 'importing the core pulled in Ray'\n"
        "from orchestrator import Runtime\n"
        "assert Runtime.__module__ == 'actors.runtime' and 'ray' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_the_fixed_names_are_in_all() -> None:
    import orchestrator

    assert set(FIXED) <= set(orchestrator.__all__)


def test_approval_helpers_and_the_turn_result_import_from_orchestrator() -> None:
    from orchestrator import PendingApproval, TurnOutcome, pending_approvals
    from orchestrator.core.approvals import pending_approvals as defined

    assert pending_approvals is defined and PendingApproval.__name__ == "PendingApproval"
    assert TurnOutcome("t-1", "completed", "hi").success
