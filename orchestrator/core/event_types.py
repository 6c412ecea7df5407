"""Troupe's built-in event types. These names are permanent: they are in every stored log.

Commands (submitted by a client or the server; the event id is the command id, and for a new
input also the message id) are followed by an ``ai.control.decided`` that says whether they
were applied. Lifecycle events are written only by the session's executor.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CHILD_STARTED",
    "COMMAND_TYPES",
    "COMPACTION",
    "DECIDED",
    "HANDLER_FINISHED",
    "HANDLER_SCHEDULED",
    "INPUT",
    "INPUT_ADMITTED",
    "INPUT_EDIT",
    "INPUT_MOVE",
    "INPUT_REMOVE",
    "INPUT_SEND_NOW",
    "INTERACTION_REQUESTED",
    "MODEL_METADATA_REQUESTED",
    "MODEL_METADATA_RESOLVED",
    "NESTED",
    "PAUSE",
    "RESPOND",
    "RESUME",
    "SESSION_RESET",
    "STEP_FAILED",
    "STEP_FINISHED",
    "STEP_STARTED",
    "STEP_SUPERSEDED",
    "STREAM",
    "TOOL_FAILED",
    "TOOL_FINISHED",
    "TOOL_RESET",
    "TOOL_STARTED",
    "TURN_FINISHED",
    "TURN_PHASE",
    "TURN_RETRY",
    "TURN_STARTED",
    "TURN_STOP",
]

# -- commands --------------------------------------------------------------------------------
INPUT: Final = "ai.input"
"""A new input into the durable inbox: ``{role, text, generate, steer?}``; id = message id."""
INPUT_EDIT: Final = "ai.input.edit"
"""Replace a pending input's content: ``{inputId, role, text}``."""
INPUT_MOVE: Final = "ai.input.move"
"""Move a pending input: ``{inputId, beforeId}`` (``beforeId: null`` = to the end)."""
INPUT_REMOVE: Final = "ai.input.remove"
"""Remove a pending input: ``{inputId}`` (its submission stays in the log)."""
INPUT_SEND_NOW: Final = "ai.input.send_now"
"""Hand a queued input off to the observed turn: ``{inputId, turnId}``."""
TURN_STOP: Final = "ai.turn.stop"
"""End the observed turn now: ``{turnId, cancelQueued}``."""
TURN_RETRY: Final = "ai.turn.retry"
"""Resume from the last finished tool call: ``{}``."""
PAUSE: Final = "ai.control.pause"
"""Close admission (``after-turn``) or also cancel current work (``now``): ``{when}``."""
RESUME: Final = "ai.control.resume"
"""Reopen admission and resume retained work: ``{}``."""
RESPOND: Final = "ai.interaction.respond"
"""Answer an approval: ``{interactionId, approved, reason?}``."""

SESSION_RESET: Final = "ai.session.reset"
"""Start a new conversation: ``{}``. The active turn ends as ``stopped`` first; then the
conversation, the inbox, the approvals and the compaction start empty. The log keeps everything
before it (``state(through=)`` still reads it); the turn and step counters, the usage, the pause
and the contract's app state carry on."""

COMMAND_TYPES: Final = frozenset(
    {
        INPUT,
        INPUT_EDIT,
        INPUT_MOVE,
        INPUT_REMOVE,
        INPUT_SEND_NOW,
        TURN_STOP,
        TURN_RETRY,
        PAUSE,
        RESUME,
        RESPOND,
        SESSION_RESET,
    }
)

DECIDED: Final = "ai.control.decided"
"""A command's application: ``{commandId, outcome: applied|rejected, reason?}``."""

# -- lifecycle (server-written) -----------------------------------------------------------------
INPUT_ADMITTED: Final = "ai.input.admitted"
"""Passive (non-generating) inputs entered the conversation without a turn: ``{inputIds}``."""
TURN_STARTED: Final = "ai.turn.started"
"""A turn began: ``{turnId, inputIds, messageId, retry}``; its inputs enter the messages."""
TURN_PHASE: Final = "ai.turn.phase"
"""The active turn's phase changed (``pausing``/``paused``/``generating``): ``{turnId, phase}``."""
TURN_FINISHED: Final = "ai.turn.finished"
"""A turn ended: ``{turnId, outcome, error?, code?}``; outcome in completed / failed / stopped /
superseded / handed-off."""
STEP_STARTED: Final = "ai.step.started"
"""A model step began: ``{turnId, stepId, turnStep, sessionStep, model}``."""
STREAM: Final = "ai.stream"
"""A flush of the running step's stream parts ``{stepId, parts}``, or a running tool's
preliminary output ``{callId, parts}``."""
STEP_FINISHED: Final = "ai.step.finished"
"""A model step completed: ``{stepId, finishReason, usage?, estimate?, toolCalls: [{id, name}]}``."""
STEP_FAILED: Final = "ai.step.failed"
"""A model step failed: ``{stepId, error, code?}`` (the turn fails with it)."""
STEP_SUPERSEDED: Final = "ai.step.superseded"
"""A step was cut off: ``{stepId, reason, restart}``; ``restart`` replays the same position."""
TOOL_STARTED: Final = "ai.tool.started"
"""A tool call began running: ``{callId, name, attempt}``."""
TOOL_FINISHED: Final = "ai.tool.finished"
"""A tool call returned: ``{callId, output}``."""
TOOL_RESET: Final = "ai.tool.reset"
"""A started call goes back to pending and will run again (``rerun`` policy): ``{callId, reason}``."""
TOOL_FAILED: Final = "ai.tool.failed"
"""A tool call failed, was denied, cancelled or interrupted: ``{callId, error, code?}``."""
INTERACTION_REQUESTED: Final = "ai.interaction.requested"
"""A call waits for approval: ``{interactionId, callId, name, prompt}``."""
CHILD_STARTED: Final = "ai.child.started"
"""A delegate call started its sub-agent session: ``{callId, sessionId, agent}``."""
NESTED: Final = "ai.nested"
"""A batch from a sub-agent, applied under its call: ``{callId, seq, actions}``."""
COMPACTION: Final = "ai.compaction"
"""A compaction changed status: ``{id, status, summary?, through?, inputTokens?, thresholdTokens?, usage?,
error?}``; a stop or a superseded step marks a running one interrupted in the fold."""
MODEL_METADATA_REQUESTED: Final = "ai.model.metadata.requested"
"""The first generation with a model in this session asked for its limits: ``{model, catalogName}``."""
MODEL_METADATA_RESOLVED: Final = "ai.model.metadata.resolved"
"""A model's limits lookup landed: ``{model, status: resolved|unavailable, contextWindow?, maxOutputTokens?}``."""
HANDLER_SCHEDULED: Final = "ai.handler.scheduled"
"""The app event just before it has a handler to run: ``{eventId, eventType}`` (same batch)."""
HANDLER_FINISHED: Final = "ai.handler.finished"
"""An app event's handler ended: ``{eventId, outcome: completed|failed, error?}`` (never runs again)."""
