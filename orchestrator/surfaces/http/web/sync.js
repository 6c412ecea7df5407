// One linear copy of a session, kept current by mutations (seed build-a-chat-ui.md).
//
// subscribe first and buffer, then load the snapshot, apply the buffer, then merge live: every
// mutation carries the log index it came from, and those the snapshot already holds are dropped.
// Deltas append to the current text part (or tool input); a part is replaced whole by its id, a
// message by its id and revision. Nested runs (sub-agents) are addressed by `path`, the delegate
// call ids from the top level down. The Python twin is orchestrator/core/mutations.py ClientView.

import { follow, get, sessionPath } from "./api.js";

/** An empty view. */
export function emptyView() {
  return {
    messages: [],
    status: "idle",
    error: null,
    queued: [],
    paused: false,
    executing: false,
    turn: null,
    lastTurn: null,
    interactions: new Map(),
    indicator: null,
    base: 0,
    index: 0,
  };
}

/** The view of a `{index, state}` snapshot (GET .../state, or the SSE `snapshot` event). */
export function viewOf(snapshot) {
  const state = snapshot.state;
  const view = emptyView();
  view.messages = state.messages || [];
  view.status = state.status || "idle";
  view.error = state.error || null;
  view.queued = (state.inbox && state.inbox.items) || [];
  view.paused = Boolean(state.inbox && state.inbox.paused);
  view.turn = state.active || null;
  view.executing = Boolean(view.turn && view.turn.phase !== "paused");
  view.lastTurn = state.lastTurn || null;
  for (const interaction of state.interactions || []) {
    if (!interaction.path) view.interactions.set(interaction.id, interaction);
  }
  view.base = view.index = snapshot.index;
  return view;
}

function runAt(view, path) {
  let run = view;
  for (const callId of path) {
    const part = findToolPart(run.messages, callId);
    if (part === null) return null;
    if (!part.agent) part.agent = { messages: [], status: "streaming" };
    run = part.agent;
  }
  return run;
}

function findToolPart(messages, callId) {
  for (let i = messages.length - 1; i >= 0; i--) {
    for (const part of messages[i].parts) {
      if (part.type === "tool" && part.id === callId) return part;
    }
  }
  return null;
}

function findMessage(messages, id) {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].id === id) return i;
  return -1;
}

/** Merge one mutation into `view` (in place); false when the snapshot already held it. */
export function apply(view, mutation) {
  const index = mutation.index || 0;
  if (index <= view.base) return false;
  view.index = Math.max(view.index, index);
  switch (mutation.type) {
    case "turn":
      view.turn = mutation.turn;
      view.lastTurn = mutation.lastTurn;
      view.executing = Boolean(view.turn && view.turn.phase !== "paused");
      return true;
    case "interaction":
      view.interactions.set(mutation.interaction.id, mutation.interaction);
      return true;
    case "info": {
      const info = mutation.info;
      view.queued = info.queued;
      view.paused = info.paused;
      view.executing = info.executing;
      view.turn = info.turn;
      view.lastTurn = info.lastTurn;
      view.indicator = info.indicator || null;
      return true;
    }
    case "app":
      return true;
    default:
      break;
  }
  const run = runAt(view, mutation.path || []);
  if (run === null) return true;
  const messages = run.messages;
  switch (mutation.type) {
    case "status":
      run.status = mutation.status;
      run.error = mutation.error || null;
      break;
    case "truncate":
      messages.length = Math.min(messages.length, mutation.length);
      break;
    case "message": {
      const at = findMessage(messages, mutation.message.id);
      if (at < 0) messages.push(mutation.message);
      else if ((mutation.message.revision || 0) >= (messages[at].revision || 0)) messages[at] = mutation.message;
      break;
    }
    case "part":
    case "delta": {
      const at = findMessage(messages, mutation.messageId);
      if (at < 0) break;
      const message = messages[at];
      const parts = message.parts;
      if (mutation.type === "part") {
        const part = mutation.part;
        const old = parts.findIndex((p) => p.id === part.id);
        if (old < 0) parts.push(part);
        else {
          if (part.type === "tool" && !part.agent && parts[old].agent) part.agent = parts[old].agent;
          parts[old] = part;
        }
      } else {
        const part = parts.find((p) => p.id === mutation.partId);
        if (part === undefined) {
          if (mutation.kind === "text") parts.push({ type: "text", id: mutation.partId, text: mutation.delta });
        } else if (mutation.kind === "tool_input") {
          part.inputText = (part.inputText || "") + mutation.delta;
        } else {
          part.text = (part.text || "") + mutation.delta;
        }
      }
      message.revision = mutation.revision === undefined ? message.revision : mutation.revision;
      break;
    }
    default:
      break;
  }
  return true;
}

/**
 * Keep `onChange(view)` informed of a session: subscribe and buffer, load the snapshot, apply the
 * buffer, then live mutations. Reconnects resume with Last-Event-ID. Returns {close, drop, view}.
 */
export function openSession(sessionId, { onChange, onConnection, onRefused }) {
  let view = null;
  let ready = false;
  const buffered = [];

  function handle(event) {
    if (event.event === "snapshot") {
      if (view === null || event.data.index >= view.index) view = viewOf(event.data);
    } else if (event.event === "mutations") {
      for (const mutation of event.data.mutations) apply(view, mutation);
    }
  }

  const stream = follow(sessionId, {
    lastId: () => (view === null ? null : view.index),
    onEvent(event) {
      if (!ready) {
        buffered.push(event);
        return;
      }
      handle(event);
      onChange(view);
    },
    onState(state, error) {
      if (state === "refused" && onRefused) onRefused(error);
      else if (onConnection) onConnection(state);
    },
  });

  const loaded = (async () => {
    const snapshot = await get(sessionPath(sessionId, "/state"));
    view = viewOf(snapshot);
    for (const event of buffered) handle(event);
    buffered.length = 0;
    ready = true;
    onChange(view);
  })();

  return {
    loaded,
    view: () => view,
    close: () => stream.close(),
    drop: () => stream.drop(),
  };
}
