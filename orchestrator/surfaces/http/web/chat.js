// The web chat: one session at a time, kept by sync.js, drawn by render.js, driven by the session API.

import { ApiError, get, newId, post, sessionPath, setApiKey } from "./api.js";
import { el, Renderer } from "./render.js";
import { openSession } from "./sync.js";

const $ = (id) => document.getElementById(id);

let current = null; // {id, sync, renderer}
let frame = 0;

// -- the API key -----------------------------------------------------------------------------------

async function start() {
  try {
    await refreshSessions();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return askForKey(error.message);
    throw error;
  }
  $("key-form").hidden = true;
  $("app").hidden = false;
  const wanted = decodeURIComponent(location.hash.slice(1));
  await switchTo(wanted || (await createSession()));
}

function askForKey(message) {
  $("app").hidden = true;
  $("key-form").hidden = false;
  $("key-error").textContent = message && $("key-input").value ? message : "";
  $("key-input").focus();
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setApiKey($("key-input").value.trim());
  start().catch(showError);
});

// -- sessions --------------------------------------------------------------------------------------

async function refreshSessions() {
  const list = await get("/api/sessions?limit=100");
  const ul = $("session-list");
  ul.replaceChildren(
    ...list.items.map((row) => {
      const button = el("button", { type: "button", className: "session", text: row.id, onclick: () => switchTo(row.id).catch(showError) });
      if (current && current.id === row.id) button.setAttribute("aria-current", "true");
      return el("li", {}, button);
    }),
  );
}

async function createSession() {
  const created = await post("/api/sessions", {});
  return created.id;
}

$("new-session").addEventListener("click", async () => {
  try {
    await switchTo(await createSession());
  } catch (error) {
    showError(error);
  }
});

/** Switch in the seed's order: unsubscribe, clear, then initialise the new session. */
async function switchTo(sessionId) {
  if (current !== null) {
    current.sync.close();
    current = null;
  }
  $("transcript").replaceChildren();
  $("transcript")._cache = null;
  $("transcript")._error = null;
  $("queue-list").replaceChildren();
  queueNodes.clear();
  notice("");
  history.replaceState(null, "", `#${encodeURIComponent(sessionId)}`);
  $("inspect-link").href = `/inspect/${encodeURIComponent(sessionId)}`;
  const renderer = new Renderer({ approval: approvalControls, messageTools });
  const session = { id: sessionId, renderer, sync: null };
  current = session;
  session.sync = openSession(sessionId, {
    onChange: () => schedule(),
    onConnection: (state) => {
      if (current === session) $("connection").textContent = state === "live" ? "live" : "reconnecting…";
    },
    onRefused: (error) => {
      if (current === session) showError(error);
    },
  });
  await refreshSessions();
  await session.sync.loaded;
}

// -- drawing ---------------------------------------------------------------------------------------

function schedule() {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    draw();
  });
}

function draw() {
  if (current === null) return;
  const view = current.sync.view();
  if (view === null) return;
  const transcript = $("transcript");
  const atBottom = transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 40;
  current.renderer.run(transcript, view, []);
  if (atBottom) transcript.scrollTop = transcript.scrollHeight;
  drawQueue(view);
  updateControls();
  document.body.dataset.index = String(view.index);
  document.body.dataset.executing = String(view.executing);
}

function updateControls() {
  const view = current && current.sync.view();
  const text = $("input").value.trim();
  const executing = Boolean(view && view.executing);
  $("send").disabled = text === "";
  $("send").textContent = executing ? "Queue" : "Send";
  $("steer").disabled = !executing || text === "";
  $("stop").disabled = !executing;
  $("retry").disabled = executing || !view || view.messages.length === 0;
  $("pause-after").disabled = !view || view.paused;
  $("pause-now").disabled = !view || view.paused;
  $("resume").disabled = !view || !view.paused;
}

// -- the queue -------------------------------------------------------------------------------------

const queueNodes = new Map();

function drawQueue(view) {
  const items = view.queued.filter((item) => item.role === "user" || item.role === undefined);
  $("queue").hidden = items.length === 0;
  const list = $("queue-list");
  const seen = new Set();
  let previous = null;
  items.forEach((item, position) => {
    seen.add(item.id);
    let node = queueNodes.get(item.id);
    if (!node) {
      node = queueItem(item);
      queueNodes.set(item.id, node);
    }
    if (!node._dirty && node._text.value !== item.text) node._text.value = item.text;
    node._up.disabled = position === 0;
    node._down.disabled = position === items.length - 1;
    node._ids = { before: position > 0 ? items[position - 1].id : null, afterNext: position + 2 < items.length ? items[position + 2].id : null };
    const want = previous ? previous.nextSibling : list.firstChild;
    if (want !== node) list.insertBefore(node, want);
    previous = node;
  });
  for (const [id, node] of queueNodes) {
    if (!seen.has(id)) {
      node.remove();
      queueNodes.delete(id);
    }
  }
}

function queueItem(item) {
  const id = item.id;
  const text = el("input", { type: "text", className: "queue-text", "aria-label": "Queued message" });
  text.value = item.text;
  const node = el("li", { className: "queue-item", "data-input-id": id });
  text.addEventListener("input", () => (node._dirty = true));
  const send = (path, body, what) => command(what, () => post(sessionPath(current.id, path), { inputId: id, ...body }));
  const save = el("button", { type: "button", text: "Save", "aria-label": "Save the edited message", onclick: async () => {
    await send("/queue/edit", { text: text.value }, "Edit");
    node._dirty = false;
  } });
  const up = el("button", { type: "button", text: "↑", "aria-label": "Move up", onclick: () => send("/queue/move", { beforeId: node._ids.before }, "Move") });
  const down = el("button", { type: "button", text: "↓", "aria-label": "Move down", onclick: () => send("/queue/move", { beforeId: node._ids.afterNext }, "Move") });
  const remove = el("button", { type: "button", text: "Remove", "aria-label": "Remove from the queue", onclick: () => send("/queue/remove", {}, "Remove") });
  const now = el("button", { type: "button", text: "Send now", "aria-label": "Send now", onclick: () => {
    const view = current.sync.view();
    return send("/queue/send-now", { turnId: view && view.turn ? view.turn.id : null }, "Send now");
  } });
  node.append(text, save, up, down, remove, now);
  Object.assign(node, { _text: text, _up: up, _down: down, _dirty: false });
  return node;
}

// -- approvals and message tools ---------------------------------------------------------------------

function interactionId(part, path) {
  if (path.length === 0) {
    const view = current.sync.view();
    for (const interaction of view.interactions.values()) {
      if (interaction.callId === part.id && interaction.status === "pending") return interaction.id;
    }
  }
  return [...path, `${part.id}:approval`].join("/");
}

function approvalControls(part, path) {
  const reasonId = newId("reason");
  const reason = el("input", { type: "text", id: reasonId, className: "approval-reason" });
  const label = el("label", { for: reasonId, text: "Reason (optional)" });
  const answer = (approved) => async () => {
    approve.disabled = deny.disabled = true;
    status.textContent = "sent; waiting for the session…";
    const body = { interactionId: interactionId(part, path), approved, reason: reason.value.trim() || null };
    const ok = await command(approved ? "Approve" : "Deny", () => post(sessionPath(current.id, "/respond"), body));
    if (!ok) {
      approve.disabled = deny.disabled = false;
      status.textContent = "";
    }
  };
  const approve = el("button", { type: "button", className: "approve", text: "Approve", onclick: answer(true) });
  const deny = el("button", { type: "button", className: "deny", text: "Deny", onclick: answer(false) });
  const status = el("span", { className: "approval-status", role: "status" });
  const prompt = el("p", { className: "approval-prompt", text: part.prompt || `Allow ${part.name}?` });
  return el("div", { className: "approval", role: "group", "aria-label": `Approve ${part.name}` }, prompt, label, reason, approve, deny, status);
}

function messageTools(message) {
  if (message.role !== "user") return null;
  return el("button", { type: "button", className: "fork", text: "Fork from here", "aria-label": "Fork a new session from before this message", onclick: () => forkAt(message).catch(showError) });
}

/** A new session whose log is this one's up to just before `message` (its text back in the box). */
async function forkAt(message) {
  const source = current.id;
  let after = 0;
  let at = null;
  while (at === null) {
    const page = await get(`${sessionPath(source, "/log")}?after=${after}&limit=1000`);
    const found = page.events.find((event) => event.id === message.id);
    if (found) at = found.index - 1;
    else if (page.events.length === 0) throw new Error("this message is not in the session's log");
    else after = page.events[page.events.length - 1].index;
  }
  const forked = await post(sessionPath(source, "/fork"), { at });
  await switchTo(forked.id);
  const text = message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
  $("input").value = text;
  updateControls();
  notice(`Forked ${source} before this message into ${forked.id}.`);
}

// -- commands --------------------------------------------------------------------------------------

function notice(text) {
  $("notice").textContent = text;
}

function showError(error) {
  if (error instanceof ApiError && error.status === 401) return askForKey(error.message);
  notice(error.message || String(error));
}

/** Run a command; show its receipt when it is rejected. Returns whether it was applied. */
async function command(what, run) {
  try {
    const result = await run();
    const receipt = result && "commandId" in result ? result : result && result.receipt;
    if (receipt && receipt.outcome === "rejected") {
      notice(`${what} was rejected: ${receipt.reason}`);
      return false;
    }
    return result;
  } catch (error) {
    showError(error);
    return false;
  }
}

function path(rest) {
  return sessionPath(current.id, rest);
}

$("composer").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("input").value.trim();
  if (!text) return;
  $("input").value = "";
  updateControls();
  notice("");
  const ok = await command("Send", () => post(path("/messages"), { text, id: newId("msg") }));
  if (!ok) $("input").value = text;
  updateControls();
});

$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("input").addEventListener("input", updateControls);

$("steer").addEventListener("click", async () => {
  const text = $("input").value.trim();
  const view = current.sync.view();
  if (!text) return;
  $("input").value = "";
  updateControls();
  await command("Steer", () => post(path("/steer"), { text, id: newId("steer"), turnId: view && view.turn ? view.turn.id : null }));
});

$("stop").addEventListener("click", async () => {
  const result = await command("Stop", () => post(path("/stop"), {}));
  if (result && result.cancelledQueuedPrompts > 0) notice("Input that had not started was cancelled");
});
$("retry").addEventListener("click", () => command("Retry", () => post(path("/retry"), {})));
$("pause-after").addEventListener("click", () => command("Pause", () => post(path("/pause"), { when: "after-turn" })));
$("pause-now").addEventListener("click", () => command("Pause", () => post(path("/pause"), { when: "now" })));
$("resume").addEventListener("click", () => command("Resume", () => post(path("/resume"))));
$("reset").addEventListener("click", () => command("New conversation", () => post(path("/reset"), {})));

// A hook for tests and debugging: drop the stream as a network failure would.
window.troupe = { drop: () => current && current.sync.drop(), view: () => current && current.sync.view() };

start().catch(showError);
