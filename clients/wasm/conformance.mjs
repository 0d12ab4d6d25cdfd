// The fold's conformance in JavaScript: loads the WebAssembly build of
// protocol/ (A2Fold) with Go's wasm_exec.js, folds the log of every fold
// golden of protocol/testfolds and compares the state with the golden's,
// then measures the module's load and its folding speed. Prints one JSON
// line; exits 1 on a difference.
//
//   node conformance.mjs <wasm_exec.js> <fold.wasm> <testfolds dir> [--bench]
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";

const [wasmExec, wasmFile, dir, bench] = process.argv.slice(2);
await import(wasmExec);
const bytes = readFileSync(wasmFile);
const t0 = performance.now();
const go = new globalThis.Go();
const { instance } = await WebAssembly.instantiate(bytes, go.importObject);
go.run(instance);
const loadMs = performance.now() - t0;
// The module returns an Error where a call fails (a Go function cannot
// throw into JavaScript): the client's wrapper throws it.
const A2Fold = new Proxy(globalThis.A2Fold, {
  get: (raw, name) => (...args) => {
    const v = raw[name](...args);
    if (v instanceof Error) throw v;
    return v;
  },
});

// Deep equality of parsed JSON.
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a), kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && same(a[k], b[k]));
}

const failures = [];
let transcripts = 0, events = 0;
const logs = [];
for (const f of readdirSync(dir).filter((n) => n.endsWith(".json")).sort()) {
  const g = JSON.parse(readFileSync(join(dir, f), "utf8"));
  const log = JSON.stringify(g.events);
  logs.push(log);
  transcripts++;
  events += g.events.length;
  // Whole, and event by event through a session handle: the same state.
  let whole;
  try {
    whole = JSON.parse(A2Fold.fold(log));
  } catch (err) {
    failures.push(`${f}: fold: ${err.message}`);
    continue;
  }
  const h = A2Fold.open();
  for (const ev of g.events) {
    const err = A2Fold.apply(h, JSON.stringify([ev]));
    if (err) failures.push(`${f}: event ${ev.index}: ${err}`);
  }
  const stepwise = JSON.parse(A2Fold.state(h));
  A2Fold.close(h);
  if (!same(whole, g.state)) failures.push(`${f}: the state differs from the golden's`);
  if (!same(stepwise, g.state)) failures.push(`${f}: the state folded event by event differs from the golden's`);
}
// The optimistic view and the actions, on a fresh session: an action's
// command, pushed, shows at once in the view (not in the state); a failed
// push rolls it back; its receipt retires it; bad arguments throw.
{
  const h = A2Fold.open();
  let n = 0;
  const newID = () => `c${++n}`;
  const created = JSON.stringify([{ id: "created", type: "ai.session.created", session: "s1", index: 1, payload: {} }]);
  const err0 = A2Fold.apply(h, created);
  if (err0) failures.push(`act: the session's creation: ${err0}`);
  const evs = JSON.parse(A2Fold.act(h, "sendMessage", JSON.stringify({ text: "hello there" }), newID));
  const cmd = evs[0];
  if (evs.length !== 1 || cmd.type !== "ai.control.requested" || cmd.id !== "c1" || cmd.payload.action !== "send" || cmd.payload.message.parts[0].text !== "hello there") {
    failures.push(`act sendMessage: ${JSON.stringify(evs)}`);
  }
  const before = A2Fold.state(h);
  const pushErr = A2Fold.push(h, JSON.stringify(cmd));
  if (pushErr) failures.push(`push: ${pushErr}`);
  if (!A2Fold.view(h).includes("hello there") || A2Fold.state(h) !== before) failures.push("a pushed send does not show in the view alone");
  A2Fold.fail(h, "c1");
  if (A2Fold.view(h) !== before) failures.push("a failed push does not roll the view back");
  A2Fold.push(h, JSON.stringify(cmd));
  const confirmed = [{ ...cmd, session: "s1", index: 2 }, { id: "d1", type: "ai.control.decided", session: "s1", index: 3, payload: { commandId: "c1", outcome: "rejected", reason: "test" } }];
  const err1 = A2Fold.apply(h, JSON.stringify(confirmed));
  if (err1) failures.push(`the receipt: ${err1}`);
  if (A2Fold.view(h) !== A2Fold.state(h)) failures.push("the receipt does not retire the pending command");
  if (JSON.parse(A2Fold.act(h, "retry", "", newID)).length !== 0) failures.push("retry with nothing failed made a command");
  for (const [action, args] of [["approve", "{}"], ["pause", '{"when":"later"}'], ["teleport", "{}"], ["steer", "not json"]]) {
    let threw = false;
    try {
      A2Fold.act(h, action, args, newID);
    } catch {
      threw = true;
    }
    if (!threw) failures.push(`act ${action} ${args} did not throw`);
  }
  if (!A2Fold.push(h, "{")) failures.push("a push that is not JSON was accepted");
  A2Fold.close(h);
  let closed = false;
  try {
    A2Fold.view(h);
  } catch {
    closed = true;
  }
  if (!closed) failures.push("a closed session still answers");
}

// A refused event: an error, and the state as before it.
const bad = A2Fold.open();
const refused = A2Fold.apply(bad, "[{\"type\":\"ai.session.created\"");
if (!refused) failures.push("a log that is not JSON was accepted");
A2Fold.close(bad);

// Speed (--bench): every golden log folded again and again for about two
// seconds.
let eventsPerSec = 0;
if (bench === "--bench") {
  let folded = 0;
  const t1 = performance.now();
  while (performance.now() - t1 < 2000) {
    for (const log of logs) A2Fold.fold(log);
    folded += events;
  }
  eventsPerSec = Math.round(folded / ((performance.now() - t1) / 1000));
}
console.log(JSON.stringify({ transcripts, events, failures, bytes: bytes.length, loadMs: Math.round(loadMs * 10) / 10, eventsPerSec }));
process.exit(failures.length ? 1 : 0);
