// The conversation drawn from a view: messages by sequence, each assistant's parts by part sequence,
// one role heading per message, a sub-agent's run inside its delegate call (any depth, collapsible).
//
// Elements are kept by message and part id and updated in place, so a delta changes one text node,
// an open <details> stays open and a half-typed denial reason survives the next mutation. Every
// piece of model or tool text goes in with textContent: nothing a model or a tool says is HTML.

const STATE_LABELS = {
  running: "running",
  "awaiting-confirmation": "awaiting confirmation",
  done: "done",
  error: "error",
  cancelled: "cancelled",
};

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name === "className") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

/** Text as paragraphs, with lines that start with "|" (a table) kept in a monospaced block. */
function fillText(node, text) {
  if (node._text === text) return;
  const old = node._text || "";
  const blocks = splitBlocks(text);
  const oldBlocks = node._blocks || [];
  // Grow in place while the text only grew: the last block gets longer, new blocks are added.
  if (text.startsWith(old) && node.childNodes.length === oldBlocks.length) {
    for (let i = 0; i < blocks.length; i++) {
      const block = blocks[i];
      const existing = node.childNodes[i];
      if (existing && oldBlocks[i] && oldBlocks[i].table === block.table) setText(existing, block.text);
      else {
        while (node.childNodes.length > i) node.lastChild.remove();
        node.append(blockNode(block));
      }
    }
  } else {
    node.replaceChildren(...blocks.map(blockNode));
  }
  node._text = text;
  node._blocks = blocks;
}

function blockNode(block) {
  return el(block.table ? "pre" : "p", { className: block.table ? "table" : "para", text: block.text });
}

function splitBlocks(text) {
  const blocks = [];
  for (const line of text.split("\n")) {
    const table = line.trimStart().startsWith("|");
    const last = blocks[blocks.length - 1];
    if (last && last.table === table) last.text += "\n" + line;
    else blocks.push({ table, text: line });
  }
  return blocks;
}

function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/**
 * Draws runs into containers. `hooks.approval(part, path)` builds the controls of a pending
 * approval; `hooks.messageTools(message)` the controls of a top-level message (fork).
 */
export class Renderer {
  constructor(hooks) {
    this.hooks = hooks;
    this.open = new Map(); // <details> state by key, kept across redraws
    this.agents = new Map(); // a nested run's agent name, by its path
  }

  run(container, run, path) {
    if (!container._cache) container._cache = new Map();
    const cache = container._cache;
    const seen = new Set();
    let previous = null;
    for (const message of run.messages) {
      const key = message.id;
      seen.add(key);
      let node = cache.get(key);
      if (!node) {
        node = this.newMessage(message, path);
        cache.set(key, node);
      }
      this.message(node, message, path);
      const want = previous ? previous.nextSibling : container.firstChild;
      if (want !== node) container.insertBefore(node, want);
      previous = node;
    }
    for (const [key, node] of cache) {
      if (!seen.has(key)) {
        node.remove();
        cache.delete(key);
      }
    }
    // The run's error: the one visible error for a failure (no second notice elsewhere).
    let error = container._error;
    if (run.error) {
      if (!error) {
        error = container._error = el("div", { className: "run-error", role: "alert" });
      }
      setText(error, `Error${run.error.code ? ` (${run.error.code})` : ""}: ${run.error.message}`);
      if (error.parentNode !== container || error.nextSibling) container.append(error);
    } else if (error) {
      error.remove();
      container._error = null;
    }
  }

  newMessage(message, path) {
    const role = message.role;
    const heading = el("h3", { className: "role", text: role === "user" ? (path.length ? "Task" : "You") : role === "assistant" ? this.agents.get(path.join("/")) || "Assistant" : "System" });
    const body = el("div", { className: "parts" });
    const node = el("article", { className: `message ${role}`, "data-message-id": message.id }, heading, body);
    node._body = body;
    if (path.length === 0 && this.hooks.messageTools) {
      const tools = this.hooks.messageTools(message);
      if (tools) node.append(tools);
    }
    return node;
  }

  message(node, message, path) {
    // Mutations change the view in place, so every redraw walks the parts (a few dozen at most);
    // an unchanged part costs a comparison.
    const body = node._body;
    if (!body._cache) body._cache = new Map();
    const cache = body._cache;
    const seen = new Set();
    let previous = null;
    for (const part of message.parts) {
      seen.add(part.id);
      let child = cache.get(part.id);
      if (!child || child._type !== part.type) {
        if (child) child.remove();
        child = this.newPart(part, path);
        cache.set(part.id, child);
      }
      this.part(child, part, path);
      const want = previous ? previous.nextSibling : body.firstChild;
      if (want !== child) body.insertBefore(child, want);
      previous = child;
    }
    for (const [key, child] of cache) {
      if (!seen.has(key)) {
        child.remove();
        cache.delete(key);
      }
    }
  }

  newPart(part, path) {
    let node;
    if (part.type === "text") node = el("div", { className: "part text" });
    else if (part.type === "reasoning") {
      node = el("details", { className: "part reasoning" }, el("summary", { text: "Reasoning" }));
      node._text = el("div", { className: "reasoning-text" });
      node.append(node._text);
    } else if (part.type === "tool") node = this.newTool(part, path);
    else if (part.type === "compaction") node = el("div", { className: "part compaction" });
    else node = el("div", { className: "part data" });
    node._type = part.type;
    node.dataset.partId = part.id;
    return node;
  }

  part(node, part, path) {
    switch (part.type) {
      case "text":
        fillText(node, part.text);
        break;
      case "reasoning":
        setText(node._text, part.text);
        break;
      case "tool":
        this.tool(node, part, path);
        break;
      case "compaction":
        setText(node, `Conversation compacted (${part.status})${part.summary ? `: ${part.summary}` : ""}`);
        break;
      default:
        setText(node, `${part.name || part.type}: ${pretty(part.data)}`);
    }
  }

  newTool(part, path) {
    const name = el("span", { className: "tool-name", text: part.name });
    const state = el("span", { className: "tool-state", role: "status" });
    const head = el("div", { className: "tool-head" }, el("span", { className: "tool-icon", "aria-hidden": "true", text: "⚙" }), name, state);
    const input = el("pre", { className: "tool-input" });
    const inputBox = el("details", { className: "tool-io" }, el("summary", { text: "Input" }), input);
    const output = el("pre", { className: "tool-output" });
    const outputBox = el("details", { className: "tool-io" }, el("summary", { text: "Output" }), output);
    const error = el("div", { className: "tool-error" });
    const slot = el("div", { className: "tool-approval" });
    const node = el("div", { className: "part tool", "data-call-id": part.id }, head, inputBox, outputBox, error, slot);
    Object.assign(node, { _state: state, _input: input, _inputBox: inputBox, _output: output, _outputBox: outputBox, _error: error, _slot: slot });
    const key = [...path, part.id].join("/");
    if (part.name.startsWith("delegate_to_")) {
      const agentName = part.name.slice("delegate_to_".length);
      this.agents.set(key, agentName);
      const summary = el("summary", { className: "nested-summary" });
      const runBox = el("div", { className: "nested-run" });
      const nested = el("details", { className: "nested", "data-nested-for": part.id }, summary, runBox);
      nested.open = this.open.has(key) ? this.open.get(key) : true;
      nested.addEventListener("toggle", () => this.open.set(key, nested.open));
      Object.assign(node, { _nested: nested, _nestedSummary: summary, _runBox: runBox, _agentName: agentName });
      node.insertBefore(nested, error);
    }
    return node;
  }

  tool(node, part, path) {
    node.dataset.state = part.state;
    setText(node._state, STATE_LABELS[part.state] || part.state);
    const inputText = part.inputText !== undefined && part.inputText !== null ? part.inputText : pretty(part.input);
    setText(node._input, inputText);
    const hasOutput = part.output !== undefined && part.output !== null;
    node._outputBox.hidden = !hasOutput;
    if (hasOutput) setText(node._output, pretty(part.output));
    node._error.hidden = !part.error;
    setText(node._error, part.error || "");
    if (node._nested) {
      const status = part.agent ? part.agent.status : "starting";
      setText(node._nestedSummary, `${node._agentName} (sub-agent) — ${part.state === "running" ? status : STATE_LABELS[part.state]}`);
      if (part.agent) this.run(node._runBox, part.agent, [...path, part.id]);
    }
    // A pending approval: its controls, built once and kept while it waits.
    if (part.state === "awaiting-confirmation") {
      if (!node._slot.firstChild) {
        const controls = this.hooks.approval(part, path);
        if (controls) node._slot.append(controls);
      }
    } else if (node._slot.firstChild) {
      node._slot.replaceChildren();
    }
  }
}
