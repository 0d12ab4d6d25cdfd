// The reference agent loop of A2's external harness protocol
// (docs/harness.md, "External harnesses"): the smallest loop that speaks
// it, with no dependency (Node.js 18 or later). A run is a response: call
// the model, run the tools it asks for, call it again, until it stops;
// A2 answers each call, from its log or live. Pi's sidecar speaks the same
// protocol around Pi's own agent session.
//
//   node reference-loop.mjs
//
// It implements two tools of its own, run against the session's sandbox
// through A2: read_file (a text file) and run (a shell command).
//
// For A2's tests it also reads: REFLOOP_SYSTEM (its system prompt, put
// before the run's instructions), REFLOOP_EXIT_ON_RUN=n (exit at its n-th
// run, as a crash), REFLOOP_GARBAGE_ON_RUN=n (write a line that is not
// JSON at its n-th run), REFLOOP_MAX_CALLS (model calls per run, 8 by
// default).
import { createInterface } from "node:readline";

const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const env = process.env;
const maxCalls = Number(env.REFLOOP_MAX_CALLS || 8);

// Each run's answers queue until it takes them (several lines can arrive
// in one read, before a waiting run resumes).
const queues = new Map(); // run -> { items: [], waiter }
const ENDED = "the run ended";
let runs = 0;

function queue(run) {
  let q = queues.get(run);
  if (!q) queues.set(run, (q = { items: [], waiter: null }));
  return q;
}

function next(run) {
  const q = queue(run);
  if (q.items.length > 0) return Promise.resolve(q.items.shift());
  return new Promise((resolve, reject) => (q.waiter = { resolve, reject }));
}

// answer sends a call and waits for its answer of type want, skipping the
// live call's chunks (a loop could show them).
async function answer(run, message, want) {
  send({ ...message, run });
  for (;;) {
    const m = await next(run);
    if (m.type === want) return m;
    if (m.type === "refused") throw new Error("refused: " + m.message);
  }
}

async function respond(r) {
  const system = [env.REFLOOP_SYSTEM, r.instructions].filter(Boolean).join("\n\n");
  const messages = [...(r.messages || [])];
  for (let call = 1; call <= maxCalls; call++) {
    const res = await answer(r.run, { type: "model", call, system, messages, tools: r.tools || [] }, "model-result");
    messages.push({ role: "assistant", content: res.content || [] });
    const calls = (res.content || []).filter((p) => p.type === "tool-call" && !p.providerExecuted);
    if (res.finishReason !== "tool-calls" || calls.length === 0) {
      send({ type: "done", run: r.run });
      return;
    }
    const results = [];
    for (const c of calls) {
      const out = await answer(r.run, { type: "tool", toolCallId: c.toolCallId, toolName: c.toolName, input: c.input }, "tool-result");
      results.push({ type: "tool-result", toolCallId: c.toolCallId, toolName: c.toolName, output: out.output });
    }
    messages.push({ role: "tool", content: results });
  }
  send({ type: "error", run: r.run, message: `more than ${maxCalls} model calls` });
}

// The tools this loop implements: A2 runs them by sending execute, and
// serves the sandbox operations they ask for.
const loopTools = [
  {
    name: "read_file",
    description: "Reads a text file of the sandbox.",
    inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"], additionalProperties: false },
  },
  {
    name: "run",
    description: "Runs a shell command in the sandbox and returns its output and exit code.",
    inputSchema: {
      type: "object",
      properties: { command: { type: "string" }, timeout: { type: "number" } },
      required: ["command"],
      additionalProperties: false,
    },
  },
];

let sandboxIDs = 0;

// sandboxOp asks A2 for a sandbox operation of an execution; a command's
// output comes as sandbox-data before its result.
async function sandboxOp(run, op, fields, onData) {
  const id = ++sandboxIDs;
  send({ type: "sandbox", run, id, op, ...fields });
  for (;;) {
    const m = await next(run);
    if (m.id !== id) continue;
    if (m.type === "sandbox-data") {
      if (onData) onData(Buffer.from(m.data || "", "base64"));
      continue;
    }
    if (m.type === "sandbox-result") {
      if (m.code) throw new Error(`${m.code}: ${m.message}`);
      return m;
    }
  }
}

async function execute(x) {
  const input = x.input || {};
  if (x.toolName === "read_file") {
    const res = await sandboxOp(x.run, "read", { path: input.path });
    return Buffer.from(res.data || "", "base64").toString("utf8");
  }
  if (x.toolName === "run") {
    const chunks = [];
    const res = await sandboxOp(x.run, "exec", { command: input.command, timeout: input.timeout }, (b) => chunks.push(b));
    return Buffer.concat(chunks).toString("utf8") + `\n(exit code ${res.exitCode})`;
  }
  throw new Error(`no tool ${x.toolName}`);
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  const m = JSON.parse(line);
  if (m.type === "execute") {
    queue(m.run);
    execute(m)
      .then((text) => send({ type: "executed", run: m.run, output: { type: "text", value: text } }))
      .catch((err) => {
        if (err.message !== ENDED) send({ type: "executed", run: m.run, isError: true, output: { type: "error-text", value: String(err.message || err) } });
      })
      .finally(() => queues.delete(m.run));
    return;
  }
  if (m.type === "run") {
    runs++;
    if (Number(env.REFLOOP_EXIT_ON_RUN) === runs) process.exit(3);
    if (Number(env.REFLOOP_GARBAGE_ON_RUN) === runs) process.stdout.write("this is not the protocol\n");
    respond(m)
      .catch((err) => {
        if (err.message !== ENDED) send({ type: "error", run: m.run, message: String(err.message || err) });
      })
      .finally(() => queues.delete(m.run));
    queue(m.run);
    return;
  }
  const q = queue(m.run);
  if (m.type === "end") {
    if (q.waiter) q.waiter.reject(new Error(ENDED));
    queues.delete(m.run);
    return;
  }
  if (q.waiter) {
    const w = q.waiter;
    q.waiter = null;
    w.resolve(m);
  } else {
    q.items.push(m);
  }
});
lines.on("close", () => process.exit(0));

send({ type: "hello", protocol: 1, name: "reference", tools: loopTools });
