// The node's playground (docs/clients.md): one session of one agent, with
// every action, beside its live event log. Its logic is the JavaScript
// client's (/client/); this file only draws the session and wires the
// buttons. The page's address names the session (#/agent/session), so a
// second tab on that address follows the same session.
import { createAgentClient } from "/client/index.js";

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const el = {
  agent: /** @type {HTMLSelectElement} */ ($("agent")),
  session: /** @type {HTMLInputElement} */ ($("session")),
  recent: $("recent"),
  token: /** @type {HTMLInputElement} */ ($("token")),
  connection: $("connection"),
  status: $("status"),
  indicator: $("indicator"),
  error: $("error"),
  messages: $("messages"),
  inbox: $("inbox"),
  text: /** @type {HTMLTextAreaElement} */ ($("text")),
  events: $("events"),
  logCount: $("log-count"),
  earlier: /** @type {HTMLButtonElement} */ ($("earlier")),
};
const buttons = Object.fromEntries(
  ["stop", "pause-now", "pause-after", "resume", "retry", "send", "steer"].map((id) => [id, /** @type {HTMLButtonElement} */ ($(id))]),
);

// h makes an element: attributes (on* are listeners), then children
// (strings become text: nothing a session holds is read as HTML).
function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) e.append(c instanceof Node ? c : String(c));
  return e;
}

const textOf = (m) => (m?.parts ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
const json = (v) => (v === undefined ? "" : typeof v === "string" ? v : JSON.stringify(v, null, 1));

let token = sessionStorage.getItem("a2.token") ?? "";
el.token.value = token;
el.token.addEventListener("change", () => {
  token = el.token.value.trim();
  sessionStorage.setItem("a2.token", token);
  void start();
});
/** @type {typeof fetch} */
const authFetch = (input, init = {}) => {
  if (!token) return fetch(input, init);
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};

function showError(err) {
  el.error.textContent = String(err?.message ?? err);
  el.error.classList.remove("hidden");
}
el.error.addEventListener("click", () => el.error.classList.add("hidden"));

// Every action reports its failure on the page, and its result is not awaited.
const run = (p) => {
  Promise.resolve(p).catch(showError);
};

/** @type {Map<string, ReturnType<typeof createAgentClient>>} */
const clients = new Map();
let session = null;
let unsubscribe = () => {};

function route() {
  const [, agent, id] = location.hash.match(/^#\/([^/]+)\/(.+)$/) ?? [];
  return agent && id ? { agent: decodeURIComponent(agent), id: decodeURIComponent(id) } : null;
}

const newSessionID = () => `play-${crypto.randomUUID().slice(0, 8)}`;

function remember(agent, id) {
  const key = `a2.recent.${agent}`;
  const list = [id, ...JSON.parse(localStorage.getItem(key) ?? "[]").filter((x) => x !== id)].slice(0, 20);
  localStorage.setItem(key, JSON.stringify(list));
  el.recent.replaceChildren(...list.map((x) => h("option", { value: x })));
}

async function start() {
  let agents = [];
  try {
    const res = await authFetch("/v1/agents");
    const body = await res.json();
    if (!res.ok) throw new Error(`${res.status}: ${body?.error?.message ?? "the node refused to list its agents"}${res.status === 401 ? " (set a token)" : ""}`);
    agents = body.agents.map((a) => a.name);
  } catch (err) {
    showError(err);
    return;
  }
  el.agent.replaceChildren(...agents.map((a) => h("option", { value: a }, a)));
  const r = route();
  if (!r || !agents.includes(r.agent)) {
    if (agents.length === 0) return showError("this node serves no agent");
    location.replace(`#/${encodeURIComponent(agents[0])}/${encodeURIComponent(r?.id ?? newSessionID())}`);
  }
  openRoute();
}

function openRoute() {
  const r = route();
  if (!r) return;
  if (session && session.id === r.id && el.agent.value === r.agent && !session.closed) return;
  el.agent.value = r.agent;
  el.session.value = r.id;
  remember(r.agent, r.id);
  unsubscribe();
  session?.close();
  let client = clients.get(r.agent);
  if (!client) {
    client = createAgentClient({ api: `/v1/agents/${encodeURIComponent(r.agent)}`, fetch: authFetch });
    clients.set(r.agent, client);
  }
  session = client.session(r.id);
  last = {};
  editing = null;
  unsubscribe = session.subscribe(render);
  document.title = `${r.id} · A2 playground`;
  render();
}

window.addEventListener("hashchange", openRoute);
$("pick").addEventListener("submit", (e) => {
  e.preventDefault();
  const id = el.session.value.trim();
  if (id) location.hash = `#/${encodeURIComponent(el.agent.value)}/${encodeURIComponent(id)}`;
});
$("new").addEventListener("click", () => {
  location.hash = `#/${encodeURIComponent(el.agent.value)}/${encodeURIComponent(newSessionID())}`;
});

// The composer: Send queues (or starts) a message; Steer steers the running turn.
$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = el.text.value.trim();
  if (!text || !session) return;
  el.text.value = "";
  run(session.sendMessage(text));
});
el.text.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
buttons.steer.addEventListener("click", () => {
  const text = el.text.value.trim();
  if (!text || !session) return;
  el.text.value = "";
  run(session.steer(text));
});
buttons.stop.addEventListener("click", () => run(session?.stop()));
buttons["pause-now"].addEventListener("click", () => run(session?.pause({ when: "now" })));
buttons["pause-after"].addEventListener("click", () => run(session?.pause({ when: "after-turn" })));
buttons.resume.addEventListener("click", () => run(session?.resume()));
buttons.retry.addEventListener("click", () => run(session?.retry()));
el.earlier.addEventListener("click", () => run(session?.loadHistory({ limit: 200 })));

// What each section was last drawn from: a section is drawn again only
// when what it shows changed, so a field being typed in is not redrawn.
let last = {};
/** @type {null | { id: string, text: string }} the inbox item being edited */
let editing = null;

function render() {
  if (!session) return;
  const snap = session.snapshot;
  const st = snap.state;
  el.connection.textContent = snap.connection;
  el.connection.className = `badge ${snap.connection}`;
  el.status.textContent = st.status;
  el.status.className = `badge ${st.status}`;
  el.indicator.textContent = snap.indicator ?? "";
  el.indicator.classList.toggle("hidden", !snap.indicator);
  const active = st.active;
  const paused = st.inbox.paused || (active && active.phase !== "running");
  buttons.stop.disabled = !active;
  buttons["pause-now"].disabled = !!paused;
  buttons["pause-after"].disabled = !!paused;
  buttons.resume.disabled = !paused;
  buttons.retry.disabled = st.status !== "failed";
  buttons.steer.disabled = !active;
  if (last.messages !== st.messages || last.pending !== st.pendingQueueCommands) {
    last.messages = st.messages;
    last.pending = st.pendingQueueCommands;
    drawMessages(st, snap.confirmed, snap.hydrated);
  }
  const inboxKey = JSON.stringify([st.inbox, editing?.id]);
  if (last.inbox !== inboxKey) {
    last.inbox = inboxKey;
    drawInbox(st);
  }
  if (last.events !== snap.events || last.history !== snap.history || last.index !== snap.index) {
    last.events = snap.events;
    last.index = snap.index;
    last.history = snap.history;
    drawEvents(snap);
  }
}

function drawMessages(st, confirmed, hydrated) {
  // What the node has not admitted yet (a send starting, steering waiting
  // for the step) shows dashed.
  const admitted = new Set(confirmed.messages.map((m) => m.id));
  const box = el.messages;
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  if (st.messages.length === 0) {
    box.replaceChildren(h("p", { class: "empty" }, hydrated ? "No messages yet. Say something below." : "Loading…"));
    return;
  }
  box.replaceChildren(
    ...st.messages.map((m) =>
      h(
        "article",
        { class: `message ${m.role}${admitted.has(m.id) ? "" : " pending"}`, "data-message-id": m.id, "data-role": m.role, title: admitted.has(m.id) ? null : "not admitted yet" },
        h("div", { class: "role" }, admitted.has(m.id) ? m.role : `${m.role} · waiting`),
        ...m.parts.map(drawPart),
      ),
    ),
  );
  if (atBottom) box.scrollTop = box.scrollHeight;
}

function drawPart(p) {
  if (p.type === "text") return h("div", { class: "part-text" }, p.text);
  if (p.type === "reasoning") return p.text ? h("div", { class: "part-reasoning" }, p.text) : null;
  if (p.type === "steering-message") return h("div", { class: "part-steering", "data-steering": p.id }, "↪ ", textOf(p));
  if (p.type === "data-a2-compaction") {
    const d = p.data ?? {};
    return h(
      "div",
      { class: "part-compaction", "data-compaction": d.status },
      h("span", { class: "label" }, `Earlier conversation compacted (${d.status ?? "?"})`),
      d.summary ? h("div", { class: "summary" }, d.summary) : null,
    );
  }
  if (p.type === "step-start") return null;
  if (p.type === "file") return h("div", { class: "part-text" }, "📎 ", p.filename ?? p.mediaType ?? "file");
  if (p.type === "source-url") return h("div", {}, h("a", { href: p.url, rel: "noreferrer", target: "_blank" }, p.title ?? p.url));
  if (p.type === "dynamic-tool" || p.type.startsWith("tool-")) return drawTool(p);
  if (p.type.startsWith("data-")) return h("pre", { class: "part-data" }, `${p.type} ${json(p.data)}`);
  return null;
}

function drawTool(p) {
  const name = p.type === "dynamic-tool" ? p.toolName : p.type.slice(5);
  const approval = p.state === "approval-requested" ? p.approval?.id : null;
  return h(
    "div",
    { class: "tool", "data-tool-call": p.toolCallId, "data-state": p.state },
    h("span", { class: "name" }, name),
    h("span", { class: `state ${p.state}` }, p.state),
    p.input !== undefined ? h("pre", { class: "input" }, json(p.input)) : null,
    p.output !== undefined ? h("pre", { class: "output" }, "→ ", json(p.output)) : null,
    p.errorText ? h("pre", { class: "output error" }, "✗ ", p.errorText) : null,
    p.approval?.reason ? h("div", { class: "reason" }, p.approval.reason) : null,
    approval
      ? h(
          "div",
          { class: "actions" },
          h("button", { class: "primary", "data-approve": approval, onclick: () => run(session.approve(approval)) }, "Approve"),
          h("button", { "data-deny": approval, onclick: () => run(session.deny(approval, { reason: "denied in the playground" })) }, "Deny"),
        )
      : null,
  );
}

function drawInbox(st) {
  const items = st.inbox.items;
  if (items.length === 0 && !st.inbox.paused) {
    el.inbox.replaceChildren();
    return;
  }
  const head = h("h2", {}, `Queue (${items.length})`, st.inbox.paused ? " · paused" : "");
  el.inbox.replaceChildren(
    head,
    ...items.map((item, i) => {
      const kind = item.afterStepOf ? "steer" : item.generate === false ? "no reply" : "";
      if (editing?.id === item.id) {
        const area = h("textarea", { rows: 2, "aria-label": "edit queued message" });
        area.value = editing.text;
        area.addEventListener("input", () => editing && (editing.text = area.value));
        const save = () => {
          const text = area.value.trim();
          editing = null;
          if (text) run(session.queue.edit({ ...item.message, parts: [{ type: "text", text }] }));
          render();
        };
        queueMicrotask(() => area.focus());
        return h(
          "div",
          { class: "item", "data-inbox-id": item.id },
          h("div", { class: "body" }, area),
          h("div", { class: "ops" }, h("button", { class: "primary", "data-op": "save", onclick: save }, "Save"), h("button", { "data-op": "cancel", onclick: () => ((editing = null), render()) }, "Cancel")),
        );
      }
      const op = (name, label, title, f, disabled = false) => h("button", { "data-op": name, title, disabled, onclick: f }, label);
      return h(
        "div",
        { class: "item", "data-inbox-id": item.id },
        h("div", { class: "body" }, kind ? h("span", { class: "kind" }, kind) : null, h("span", { class: "text" }, textOf(item.message))),
        h(
          "div",
          { class: "ops" },
          op("up", "↑", "Move up", () => run(session.queue.move({ inputId: item.id, beforeId: items[i - 1].id })), i === 0),
          op("down", "↓", "Move down", () => run(session.queue.move({ inputId: item.id, beforeId: items[i + 2]?.id ?? null })), i === items.length - 1),
          op("edit", "Edit", "Edit", () => ((editing = { id: item.id, text: textOf(item.message) }), render())),
          op("send-now", "Send now", "Send it now: interrupts the running turn", () => run(session.queue.sendNow(item.id))),
          op("remove", "✕", "Remove", () => run(session.queue.remove(item.id))),
        ),
      );
    }),
  );
}

// One line per event: its index, its type, and what it says in brief.
function brief(ev) {
  const p = ev.payload ?? {};
  switch (ev.type) {
    case "ai.control.requested":
      return [p.action, textOf(p.message)].filter(Boolean).join(" ");
    case "ai.control.decided":
      return p.outcome ?? "";
    case "ai.generation.progress":
      return `${p.chunks?.length ?? 0} chunks`;
    case "ai.message.created":
      return `${p.message?.role ?? ""} ${textOf(p.message)}`;
    default:
      return p.reason ?? p.toolName ?? p.status ?? "";
  }
}

function drawEvents(snap) {
  const all = [...snap.history, ...snap.events];
  const shown = all.slice(-400);
  el.logCount.textContent = snap.hydrated ? `· last index ${snap.index}` : "";
  el.earlier.disabled = snap.historyComplete || (snap.history[0]?.index ?? snap.index - snap.events.length + 1) <= 1;
  const box = /** @type {HTMLElement} */ (document.getElementById("log"));
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  el.events.replaceChildren(
    ...shown.map((ev) => h("li", { "data-index": ev.index, "data-type": ev.type }, h("span", { class: "i" }, ev.index), h("span", { class: "t" }, ev.type.replace(/^ai\./, "")), h("span", { class: "d", title: brief(ev) }, brief(ev)))),
  );
  if (atBottom) box.scrollTop = box.scrollHeight;
}

if (matchMedia("(max-width: 800px)").matches) /** @type {HTMLDetailsElement} */ ($("log-box")).open = false;
void start();
