// Reads a Troupe /api/chat response with the AI SDK's own client code and prints what it assembled.
//
//   node read-stream.mjs < response.sse
//       Parse captured SSE bytes from stdin.
//   node read-stream.mjs --url URL --body JSON [--message JSON] [--header "Name: value"]...
//       POST the body to the live server and parse its response. --message is the assistant
//       message a continued response extends (what useChat passes after an approval).
//   node read-stream.mjs --chat --url URL --script JSON [--header "Name: value"]...
//       Drive the AI SDK's own Chat (AbstractChat, the class behind useChat) with
//       DefaultChatTransport against the server. The script is a list of steps:
//       {"send": "text"} | {"approve": true|false, "reason"?: "..."} | {"regenerate": true}.
//
// Parsing uses the package's public functions: parseJsonEventStream({stream, schema:
// uiMessageChunkSchema}) then readUIMessageStream({stream}). A chunk that does not match ai's
// schema fails the run (exit 1), as it would fail useChat.
//
// Prints JSON: {message, chunks, errors, status?, headers?} (or {messages, status, error} for --chat).

import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from "ai";

function parseArgs(argv) {
  const args = { headers: {} };
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i];
    if (name === "--chat") args.chat = true;
    else if (name === "--header") {
      const [key, ...rest] = argv[++i].split(":");
      args.headers[key.trim()] = rest.join(":").trim();
    } else if (name.startsWith("--")) args[name.slice(2)] = argv[++i];
    else throw new Error(`unknown argument ${name}`);
  }
  return args;
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return new Blob(chunks).stream();
}

async function assemble(body, message) {
  const chunks = [];
  const errors = [];
  const parsed = parseJsonEventStream({ stream: body, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(result, controller) {
        if (!result.success) {
          throw new Error(`a chunk does not match uiMessageChunkSchema: ${result.error}\n${result.rawValue ?? ""}`);
        }
        chunks.push(result.value);
        controller.enqueue(result.value);
      },
    }),
  );
  let last;
  for await (const snapshot of readUIMessageStream({
    message,
    stream: parsed,
    onError: (error) => errors.push(String(error?.message ?? error)),
    terminateOnError: false,
  })) {
    last = snapshot;
  }
  return { message: last ?? message ?? null, chunks, errors };
}

class State {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) {
    this.messages = this.messages.concat(message);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  }
  snapshot(value) {
    return structuredClone(value);
  }
}

class Chat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new State() });
  }
}

async function runChat(args) {
  const script = JSON.parse(args.script);
  let finished = () => {};
  let nextFinish = () => new Promise((resolve) => (finished = resolve));
  const errors = [];
  const chat = new Chat({
    id: args.id,
    transport: new DefaultChatTransport({ api: args.url, headers: args.headers }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onError: (error) => errors.push(String(error?.message ?? error)),
    onFinish: () => finished(),
  });
  for (const step of script) {
    if (step.send !== undefined) {
      await chat.sendMessage({ text: step.send });
    } else if (step.approve !== undefined) {
      const pending = chat.lastMessage.parts.find((p) => p.state === "approval-requested");
      if (!pending) throw new Error("no approval was requested");
      const done = nextFinish();
      await chat.addToolApprovalResponse({ id: pending.approval.id, approved: step.approve, reason: step.reason });
      await done; // sendAutomaticallyWhen sends the answer; wait for that response to finish
    } else if (step.regenerate) {
      await chat.regenerate();
    }
  }
  return { messages: chat.messages, status: chat.status, error: chat.error?.message ?? null, errors };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (args.chat) {
    console.log(JSON.stringify(await runChat(args)));
    return;
  }
  if (args.url) {
    const response = await fetch(args.url, {
      method: "POST",
      headers: { "content-type": "application/json", ...args.headers },
      body: args.body,
    });
    const headers = Object.fromEntries(response.headers.entries());
    if (!response.ok) {
      console.log(JSON.stringify({ status: response.status, headers, body: await response.text() }));
      return;
    }
    const message = args.message ? JSON.parse(args.message) : undefined;
    const result = await assemble(response.body, message);
    console.log(JSON.stringify({ ...result, status: response.status, headers }));
    return;
  }
  console.log(JSON.stringify(await assemble(await readStdin(), undefined)));
}

main().catch((error) => {
  console.error(error?.stack ?? String(error));
  process.exit(1);
});
