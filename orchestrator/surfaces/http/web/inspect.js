// The inspector: a session's event log (live, filterable), its sub-agent sessions, and the
// conversation as it was at any index (folded on the server: GET .../state?through=INDEX).

import { ApiError, follow, get, sessionPath, setApiKey } from "./api.js";
import { el, Renderer } from "./render.js";

const $ = (id) => document.getElementById(id);
const sessionId = decodeURIComponent(location.pathname.split("/").pop());
const sub = new URLSearchParams(location.search).get("sub") || "";
const query = (extra = {}) => {
  const params = new URLSearchParams(extra);
  if (sub) params.set("sub", sub);
  const text = params.toString();
  return text ? `?${text}` : "";
};

const events = [];
let last = 0;
let selected = 0;
let loading = null;
let again = false;
let stream = null;

async function start() {
  try {
    await loadLog();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return askForKey(error.message);
    $("app").hidden = false;
    $("connection").textContent = error.message;
    return;
  }
  $("key-form").hidden = true;
  $("app").hidden = false;
  $("session-name").textContent = sub ? `${sessionId}/${sub}` : sessionId;
  $("chat-link").href = `/#${encodeURIComponent(sessionId)}`;
  await loadSubagents();
  await replayTo(last);
  stream = follow(sessionId, {
    lastId: () => null, // only a trigger: the log itself is read from the store
    onEvent: () => refresh(),
    onState: (state) => ($("connection").textContent = state === "live" ? "live" : state),
  });
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
  start();
});

// -- the log ---------------------------------------------------------------------------------------

async function loadLog() {
  for (;;) {
    const page = await get(sessionPath(sessionId, "/log") + query({ after: String(last), limit: "1000" }));
    for (const event of page.events) addEvent(event);
    if (page.events.length === 0 || last >= page.last) break;
  }
  $("replay").max = String(last);
  $("log-count").textContent = `${events.length} events`;
}

/** Read what was appended since; one read at a time, another after it when asked meanwhile. */
async function refresh() {
  if (loading) {
    again = true;
    return;
  }
  loading = (async () => {
    do {
      again = false;
      const before = last;
      await loadLog();
      await loadSubagents();
      if (last !== before && $("follow").checked) await replayTo(last);
    } while (again);
  })();
  try {
    await loading;
  } finally {
    loading = null;
  }
}

function addEvent(event) {
  events.push(event);
  last = Math.max(last, event.index);
  const filter = $("type-filter");
  if (![...filter.options].some((o) => o.value === event.type)) {
    filter.append(el("option", { value: event.type, text: event.type }));
  }
  const payload = JSON.stringify(event.payload, null, 2);
  const summary = el("summary", { text: brief(event) });
  const details = el("details", {}, summary, el("pre", { text: payload }));
  const row = el(
    "tr",
    { "data-index": event.index, "data-type": event.type, onclick: (e) => {
      if (e.target.closest("details")) return;
      $("follow").checked = false;
      replayTo(event.index);
    } },
    el("td", { className: "index", text: String(event.index) }),
    el("td", { className: "type", text: event.type }),
    el("td", { text: new Date(event.at * 1000).toLocaleTimeString() }),
    el("td", {}, details),
  );
  if (event.type === "ai.control.decided" && event.payload.outcome === "rejected") {
    summary.className = "rejected";
  }
  row.hidden = Boolean(filter.value) && filter.value !== event.type;
  row.classList.toggle("after", event.index > selected);
  $("log-body").append(row);
}

function brief(event) {
  const p = event.payload || {};
  if (event.type === "ai.control.decided") {
    return `${p.commandId}: ${p.outcome}${p.reason ? ` (${p.reason})` : ""}`;
  }
  if (event.type === "ai.input") return `${p.role || "user"}: ${p.text || ""}`.slice(0, 80);
  if (event.type === "ai.stream") return `${(p.parts || []).length} parts`;
  if (event.type === "ai.nested") return `${p.callId} #${p.seq}: ${(p.actions || []).length} actions`;
  if (p.name) return String(p.name);
  const keys = Object.keys(p);
  return keys.length ? keys.slice(0, 4).join(", ") : "—";
}

$("type-filter").addEventListener("change", () => {
  const wanted = $("type-filter").value;
  for (const row of $("log-body").rows) row.hidden = Boolean(wanted) && row.dataset.type !== wanted;
});

async function loadSubagents() {
  const list = await get(sessionPath(sessionId, "/subagents") + query());
  $("subagents-box").hidden = list.items.length === 0;
  $("subagents").replaceChildren(
    ...list.items.map((item) =>
      el("li", {}, el("a", { href: `/inspect/${encodeURIComponent(sessionId)}?sub=${encodeURIComponent(item.sub)}`, text: `${item.session} (${item.lastIndex} events)` })),
    ),
  );
}

// -- replay ----------------------------------------------------------------------------------------

const renderer = new Renderer({ approval: () => null, messageTools: null });
let replaying = 0;

async function replayTo(index) {
  index = Math.max(0, Math.min(index, last));
  selected = index;
  $("replay").value = String(index);
  $("replay-index").textContent = String(index);
  for (const row of $("log-body").rows) {
    const at = Number(row.dataset.index);
    row.classList.toggle("after", at > index);
    row.classList.toggle("selected", at === index);
  }
  const ticket = ++replaying;
  const snapshot = await get(sessionPath(sessionId, "/state") + query({ through: String(index) }));
  if (ticket !== replaying) return; // a later step won
  const view = $("replay-view");
  renderer.run(view, { messages: snapshot.state.messages, error: snapshot.state.error || null }, []);
  view.dataset.index = String(index);
}

$("replay").addEventListener("input", () => {
  $("follow").checked = Number($("replay").value) >= last;
  replayTo(Number($("replay").value));
});
$("step-back").addEventListener("click", () => {
  $("follow").checked = false;
  replayTo(selected - 1);
});
$("step-forward").addEventListener("click", () => replayTo(selected + 1));
$("follow").addEventListener("change", () => {
  if ($("follow").checked) replayTo(last);
});

window.addEventListener("pagehide", () => stream && stream.close());
start();
