// The session API as the pages use it: the caller's key, JSON requests, and the SSE mutation stream.
//
// The key lives in sessionStorage (this tab, until it closes) and goes out as a bearer token; it is
// never put in a URL. EventSource cannot send a header, so the stream is read with fetch.

const KEY = "troupe.apiKey";

export function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field;
  }
}

function headers(extra = {}) {
  const out = { ...extra };
  const key = apiKey();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

/** A JSON request; rejects with an ApiError carrying the server's message. */
export async function request(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "content-type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, `the server cannot be reached (${error.message})`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = data && data.error ? data.error : { message: text || response.statusText };
    throw new ApiError(response.status, error.message, error.field);
  }
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body === undefined ? {} : body);

/** A fresh id for a command or an input (commands are idempotent by id). */
export function newId(prefix) {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return `${prefix}-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

export function sessionPath(sessionId, rest = "") {
  return `/api/sessions/${encodeURIComponent(sessionId)}${rest}`;
}

/**
 * Follow a session's SSE stream: onEvent({event, id, data}) for every event, in order.
 *
 * After the stream drops, it reconnects with Last-Event-ID = lastId() (the newest index the
 * client has merged), so the server sends exactly what is missing. close() ends it for good.
 */
export function follow(sessionId, { onEvent, lastId, onState }) {
  let controller = null;
  let closed = false;
  let delay = 250;

  async function once() {
    controller = new AbortController();
    const extra = { accept: "text/event-stream" };
    const last = lastId();
    if (last !== null && last !== undefined) extra["Last-Event-ID"] = String(last);
    const response = await fetch(sessionPath(sessionId, "/events"), {
      headers: headers(extra),
      signal: controller.signal,
      cache: "no-store",
    });
    if (!response.ok) {
      const text = await response.text();
      throw new ApiError(response.status, text);
    }
    onState("live");
    delay = 250;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const event = parseBlock(block);
        if (event !== null) onEvent(event);
      }
    }
  }

  (async () => {
    while (!closed) {
      try {
        await once();
      } catch (error) {
        if (closed) return;
        if (error instanceof ApiError && (error.status === 401 || error.status === 404)) {
          onState("refused", error);
          return;
        }
      }
      if (closed) return;
      onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 5000);
    }
  })();

  return {
    close() {
      closed = true;
      if (controller) controller.abort();
    },
    // Drop the connection as a network failure would (tests; a laptop waking up).
    drop() {
      if (controller) controller.abort();
    },
  };
}

function parseBlock(block) {
  let event = "message";
  let id = null;
  const data = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") event = value;
    else if (name === "id") id = value;
    else if (name === "data") data.push(value);
  }
  if (data.length === 0) return null;
  return { event, id, data: JSON.parse(data.join("\n")) };
}
