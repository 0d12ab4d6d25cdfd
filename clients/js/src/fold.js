// The fold: protocol/ compiled to WebAssembly (clients/wasm), loaded once
// per page. docs/clients.md describes the module's functions. Plain
// JavaScript with JSDoc types (tsc checks them and writes types/): a page
// loads it as it is, with no build.

/**
 * A session's state as the fold makes it (protocol.AIState, docs/protocol.md §5).
 * @typedef {{
 *   messages: UIMessage[],
 *   inbox: { paused: boolean, items: Array<{ id: string, [k: string]: unknown }> },
 *   active: null | { turnId: string, phase: string, responseMessageId?: string, failed?: boolean, [k: string]: unknown },
 *   status: string,
 *   [k: string]: unknown,
 * }} AIState
 */

/**
 * A message as the AI SDK shapes it (UIMessage).
 * @typedef {{ id: string, role: string, parts: Array<{ type: string, [k: string]: unknown }>, [k: string]: unknown }} UIMessage
 */

/**
 * An event of a session's log (docs/protocol.md §2).
 * @typedef {{ id: string, type: string, payload: unknown, index?: number, session?: string, time?: number }} Event
 */

/**
 * The actions the fold builds commands for (protocol.Actions).
 * @typedef {"sendMessage" | "send" | "steer" | "stop" | "approve" | "deny" | "respond" | "retry" | "pause" | "resume" | "queueEdit" | "queueMove" | "queueRemove" | "queueSendNow"} Action
 */

/**
 * The fold's module, its errors thrown.
 * @typedef {{
 *   open(): number,
 *   apply(h: number, events: Event[]): void,
 *   restore(h: number, state: unknown): void,
 *   push(h: number, event: Event): void,
 *   fail(h: number, id: string): void,
 *   state(h: number): AIState,
 *   view(h: number): AIState,
 *   indicator(h: number): string | null,
 *   act(h: number, action: Action, args: Record<string, unknown>, newID: () => string): Event[],
 *   close(h: number): void,
 *   fold(events: Event[]): AIState,
 * }} Fold
 */

/** @type {Map<string, Promise<Fold>>} the modules loaded from a URL, once per page */
const loaded = new Map();

/**
 * Loads the fold's module. `module` is the module's bytes, or its URL
 * (fetched once per page: a second call with the same URL shares the
 * module). Go's wasm_exec.js must set globalThis.Go first: a page loads
 * it with a script tag, or loadFold imports it from beside a module's
 * URL (/wasm_exec.js beside a node's /fold.wasm); Node.js imports it.
 * @param {ArrayBuffer | Uint8Array | URL | string} module
 * @returns {Promise<Fold>}
 */
export function loadFold(module) {
  if (typeof module !== "string" && !(module instanceof URL)) return instantiate(module);
  const loc = /** @type {{ location?: { href: string } }} */ (/** @type {unknown} */ (globalThis)).location;
  const url = new URL(module, loc?.href);
  let p = loaded.get(url.href);
  if (!p) {
    p = (async () => {
      if (!goOf()) await import(new URL("wasm_exec.js", url).href);
      const res = await fetch(url);
      if (!res.ok) throw new Error(`loadFold: ${url.href}: HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`);
      return instantiate(await res.arrayBuffer());
    })();
    loaded.set(url.href, p);
    // A failed load is tried again by the next call.
    p.catch(() => loaded.delete(url.href));
  }
  return p;
}

const goOf = () =>
  /** @type {{ Go?: new () => { importObject: WebAssembly.Imports, run(i: WebAssembly.Instance): Promise<void> } }} */ (
    /** @type {unknown} */ (globalThis)
  ).Go;

/**
 * @param {ArrayBuffer | Uint8Array} bytes
 * @returns {Promise<Fold>}
 */
async function instantiate(bytes) {
  const Go = goOf();
  if (!Go) throw new Error("loadFold: globalThis.Go is missing: load Go's wasm_exec.js first");
  const go = new Go();
  const { instance } = await WebAssembly.instantiate(/** @type {BufferSource} */ (bytes), go.importObject);
  void go.run(instance);
  const raw = /** @type {{ A2Fold?: Raw }} */ (/** @type {unknown} */ (globalThis)).A2Fold;
  if (!raw) throw new Error("loadFold: the module did not set A2Fold");
  return wrap(raw);
}

/** @typedef {Record<string, (...args: unknown[]) => unknown>} Raw */

/**
 * wrap gives the module's functions their types, parsing and encoding
 * JSON, and throws what they return as errors.
 * @param {Raw} raw
 * @returns {Fold}
 */
function wrap(raw) {
  /** @type {(name: string, ...args: unknown[]) => unknown} */
  const call = (name, ...args) => {
    const f = raw[name];
    if (!f) throw new Error(`the fold's module has no ${name}`);
    const v = f(...args);
    if (v instanceof Error) throw v;
    return v;
  };
  /** @param {unknown} v */
  const check = (v) => {
    if (typeof v === "string" && v !== "") throw new Error(v);
  };
  return {
    open: () => /** @type {number} */ (call("open")),
    apply: (h, events) => check(call("apply", h, JSON.stringify(events))),
    restore: (h, state) => check(call("restore", h, JSON.stringify(state))),
    push: (h, event) => check(call("push", h, JSON.stringify(event))),
    fail: (h, id) => void call("fail", h, id),
    state: (h) => /** @type {AIState} */ (JSON.parse(/** @type {string} */ (call("state", h)))),
    view: (h) => /** @type {AIState} */ (JSON.parse(/** @type {string} */ (call("view", h)))),
    indicator: (h) => /** @type {string} */ (call("indicator", h)) || null,
    act: (h, action, args, newID) => /** @type {Event[]} */ (JSON.parse(/** @type {string} */ (call("act", h, action, JSON.stringify(args), newID)))),
    close: (h) => void call("close", h),
    fold: (events) => /** @type {AIState} */ (JSON.parse(/** @type {string} */ (call("fold", JSON.stringify(events))))),
  };
}
