// The client against a real node (started by clients/js/js_test.go, which
// sets A2_URL, A2_FOLD_WASM and A2_WASM_EXEC): run with go test ./clients/js.
import { test, before, afterEach } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const { A2_URL: base, A2_FOLD_WASM: wasm, A2_WASM_EXEC: wasmExec } = process.env;
if (!base || !wasm || !wasmExec) throw new Error("run through go test ./clients/js (A2_URL, A2_FOLD_WASM, A2_WASM_EXEC)");
await import(wasmExec);
const { loadFold, createAgentClient, A2Error } = await import("../src/index.js");

let client;
let n = 0;
// Every session a test opens is closed after it, passed or failed, so the
// process ends (its live streams would keep it alive).
const opened = new Set();
const session = (id) => {
  const s = client.session(id);
  opened.add(s);
  return s;
};
afterEach(() => {
  for (const s of opened) s.close();
  opened.clear();
});
before(async () => {
  const fold = await loadFold(readFileSync(wasm));
  client = createAgentClient({ api: `${base}/v1/agents/assistant`, fold, newID: () => `js-${process.pid}-${++n}` });
});

const text = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
const idle = (s) => s.status === "idle" && !s.active && s.inbox.items.length === 0;
const release = (gate) => fetch(`${base}/v1/test/gates/${gate}`, { method: "POST" });
async function open(s) {
  for (let i = 0; i < 200 && s.connection !== "open"; i++) await new Promise((r) => setTimeout(r, 25));
  assert.equal(s.connection, "open");
}

test("a message shows at once, is persisted and confirmed, and its answer streams in", { timeout: 60000 }, async () => {
  const s = session(`t1-${process.pid}`);
  await open(s);
  const pushed = s.sendMessage("hello there");
  // Before any answer of the node: the view shows it, the confirmed state not.
  assert.ok(JSON.stringify(s.state).includes("hello there"), "the view shows the message at once");
  assert.ok(!JSON.stringify(s.confirmed).includes("hello there"), "the confirmed state waits for the node");
  const events = await pushed;
  assert.equal(events.length, 1);
  assert.equal(events[0].type, "ai.control.requested");
  await pushed.confirmed;
  const st = await s.waitFor((v) => idle(v) && v.messages.length === 2);
  assert.equal(text(st.messages[0]), "hello there");
  assert.equal(text(st.messages[1]), "Hello from the node.");
  s.close();
});

test("the queue is edited, reordered and emptied, and a stop keeps what streamed, while a turn runs", { timeout: 60000 }, async () => {
  const s = session(`t2-${process.pid}`);
  await open(s);
  await s.sendMessage("hold on");
  await s.waitFor((v) => v.status === "streaming" && v.messages.length === 2 && text(v.messages[1]).length > 0);
  const [first] = await s.sendMessage("first queued");
  const [second] = await s.sendMessage("second queued");
  await s.waitFor((v) => v.inbox.items.length === 2);
  s.queue.move({ inputId: second.id, beforeId: first.id });
  assert.deepEqual(s.state.inbox.items.map((i) => i.id), [second.id, first.id], "the move shows at once");
  await s.queue.edit({ id: first.id, role: "user", parts: [{ type: "text", text: "first, edited" }] }).confirmed;
  await s.queue.remove(second.id).confirmed;
  await s.waitFor((v) => v.inbox.items.length === 1);
  const stopped = s.stop();
  await stopped.confirmed;
  const st = await s.waitFor((v) => idle(v) && v.messages.length === 4);
  assert.equal(text(st.messages[0]), "hold on");
  assert.ok(text(st.messages[1]).length > 0 && !text(st.messages[1]).endsWith("until released."), `the stopped answer keeps what streamed: ${text(st.messages[1])}`);
  assert.equal(text(st.messages[2]), "first, edited");
  assert.equal(text(st.messages[3]), "Answered.");
  await release("hold");
  s.close();
});

test("a tool call waits for approval and runs once approved", { timeout: 60000 }, async () => {
  const s = session(`t3-${process.pid}`);
  await open(s);
  await s.sendMessage("guard the door");
  const waiting = await s.waitFor((v) => v.messages.some((m) => m.parts.some((p) => p.state === "approval-requested")));
  const part = waiting.messages.flatMap((m) => m.parts).find((p) => p.state === "approval-requested");
  await s.approve(part.approval.id).confirmed;
  const st = await s.waitFor((v) => idle(v) && v.messages.length === 2 && text(v.messages[1]).includes("The door is open."));
  const done = st.messages[1].parts.find((p) => p.toolCallId === "g1");
  assert.equal(done.state, "output-available");
  assert.equal(done.output, "opened");
  s.close();
});

test("a dropped stream reconnects from the last index, with no gap and no duplicate", { timeout: 60000 }, async () => {
  const id = `t4-${process.pid}`;
  const s = session(id);
  await open(s);
  await s.sendMessage("hello one").confirmed;
  await s.waitFor((v) => idle(v) && v.messages.length === 2);
  s.reconnect();
  await s.sendMessage("hello two").confirmed;
  const st = await s.waitFor((v) => idle(v) && v.messages.length === 4);
  assert.equal(new Set(st.messages.map((m) => m.id)).size, 4);
  const server = await (await fetch(`${base}/v1/agents/assistant/sessions/${id}/state`)).json();
  await s.waitFor(() => s.index >= server.index);
  assert.equal(s.index, server.index);
  assert.deepEqual(s.confirmed.messages, server.state.messages);
  s.close();
});

test("bad input gets a clear error and changes nothing", { timeout: 60000 }, async () => {
  assert.throws(() => createAgentClient({}), TypeError);
  assert.throws(() => client.session(""), TypeError);
  const s = session(`t5-${process.pid}`);
  await open(s);
  // Nothing to address: an empty push.
  assert.deepEqual(await s.stop(), []);
  assert.deepEqual(await s.retry(), []);
  // An action the fold cannot build.
  await assert.rejects(s.approve(""), /approvalId is required/);
  await assert.rejects(s.pause({ when: "later" }), /when/);
  // A push the node refuses: an A2Error, and the view rolls back.
  const before = JSON.stringify(s.state);
  const refused = s.push([{ id: `bad-${process.pid}`, type: "ai.control.requested", payload: { action: "teleport" } }]);
  await assert.rejects(refused, (err) => err instanceof A2Error && err.status === 400);
  assert.equal(JSON.stringify(s.state), before);
  s.close();
});

test("a snapshot is the same object until something changes; events and history hold the log", { timeout: 60000 }, async () => {
  const id = `t6-${process.pid}`;
  const s = session(id);
  await open(s);
  assert.equal(s.hydrated, true);
  await s.sendMessage("hello first").confirmed;
  await s.waitFor((v) => idle(v) && v.messages.length === 2);
  const a = s.snapshot;
  assert.equal(s.snapshot, a, "no change: the same snapshot");
  await s.sendMessage("hello second").confirmed;
  await s.waitFor((v) => idle(v) && v.messages.length === 4);
  assert.notEqual(s.snapshot, a, "a change: a new snapshot");
  assert.equal(s.snapshot.state.messages.length, 4);
  // Every confirmed event since hydration, in order, ending at the index.
  const server = await (await fetch(`${base}/v1/agents/assistant/sessions/${id}/events?after=0&limit=1000`)).json();
  await s.waitFor(() => s.index >= server.events.at(-1).index);
  assert.deepEqual(s.events.map((e) => e.index), server.events.map((e) => e.index));
  // A second copy hydrates at the end; its history loads the earlier log in pages.
  const other = createAgentClient({ api: `${base}/v1/agents/assistant`, fold: loadFold(readFileSync(wasm)) }).session(id);
  opened.add(other);
  await other.waitFor(() => other.hydrated && other.index === s.index);
  assert.deepEqual(other.events, []);
  let pages = 0;
  while ((await other.loadHistory({ limit: 3 })) > 0) pages++;
  assert.equal(pages, Math.ceil(server.events.length / 3));
  assert.equal(other.snapshot.historyComplete, true);
  assert.deepEqual(other.history.map((e) => e.id), server.events.map((e) => e.id));
  await assert.rejects(other.loadHistory({ limit: 0 }), RangeError);
});

test("actions made before the fold loads wait for it", { timeout: 60000 }, async () => {
  let loadNow;
  const gate = new Promise((r) => (loadNow = r));
  const slow = createAgentClient({ api: `${base}/v1/agents/assistant`, fold: gate.then(() => loadFold(readFileSync(wasm))) });
  const s = slow.session(`t7-${process.pid}`);
  opened.add(s);
  assert.equal(s.hydrated, false);
  assert.deepEqual(s.state.messages, [], "an empty state until the fold loads");
  const sent = s.sendMessage("hello early");
  loadNow();
  const [ev] = await sent;
  assert.equal(ev.type, "ai.control.requested");
  await sent.confirmed;
  const st = await s.waitFor((v) => idle(v) && v.messages.length === 2);
  assert.equal(text(st.messages[0]), "hello early");
});

test("an action persisted before the session hydrates is confirmed by the state it hydrates from", { timeout: 60000 }, async () => {
  // The state is read only once the push was answered: the hydrated index
  // is past the pushed event, which the stream (from that index) never
  // carries.
  let pushed;
  const pushAnswered = new Promise((r) => (pushed = r));
  const fetchAfterPush = async (url, init) => {
    if (String(url).endsWith("/state")) await pushAnswered;
    const res = await fetch(url, init);
    if (init?.method === "POST") pushed();
    return res;
  };
  let loadNow;
  const gate = new Promise((r) => (loadNow = r));
  const c = createAgentClient({ api: `${base}/v1/agents/assistant`, fold: gate.then(() => loadFold(readFileSync(wasm))), fetch: fetchAfterPush });
  const s = c.session(`t7b-${process.pid}`);
  opened.add(s);
  const sent = s.sendMessage("hello before hydration");
  loadNow();
  const [ev] = await sent;
  await s.waitFor(() => s.hydrated);
  assert.ok(s.snapshot.confirmed.messages.length >= 1, "the hydrated state holds the message");
  let confirmed = false;
  await Promise.race([sent.confirmed.then(() => (confirmed = true)), new Promise((r) => setTimeout(r, 10000))]);
  assert.equal(confirmed, true, `the push of ${ev.id} was not confirmed within 10 s of the hydration that holds it`);
  const st = await s.waitFor((v) => idle(v) && v.messages.length === 2);
  assert.equal(text(st.messages[0]), "hello before hydration", "the message shows once, not again as pending");
});

test("a session no one retains closes after gcTime; a retained one stays open", { timeout: 60000 }, async () => {
  const c = createAgentClient({ api: `${base}/v1/agents/assistant`, fold: loadFold(readFileSync(wasm)), gcTime: 50 });
  const kept = c.session(`t8a-${process.pid}`);
  const dropped = c.session(`t8b-${process.pid}`);
  opened.add(kept).add(dropped);
  const keep = kept.retain();
  const release = dropped.retain();
  const second = dropped.retain();
  release();
  release(); // twice is once
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(dropped.closed, false, "still retained once");
  second();
  for (let i = 0; i < 100 && !dropped.closed; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(dropped.closed, true);
  assert.equal(dropped.connection, "closed");
  assert.equal(dropped.state.status, "idle", "a closed session's last state stays readable");
  assert.equal(kept.closed, false);
  assert.notEqual(c.session(`t8b-${process.pid}`), dropped, "a closed session is opened anew");
  keep();
});
