// The fold: protocol/ compiled to WebAssembly (clients/wasm), loaded once
// per page. docs/clients.md describes the module's functions.

/** A session's state as the fold makes it (protocol.AIState, docs/protocol.md §5). */
export type AIState = {
  messages: UIMessage[];
  inbox: { paused: boolean; items: Array<{ id: string; [k: string]: unknown }> };
  active: null | { turnId: string; phase: string; responseMessageId?: string; failed?: boolean; [k: string]: unknown };
  status: string;
  [k: string]: unknown;
};

/** A message as the AI SDK shapes it (UIMessage). */
export type UIMessage = { id: string; role: string; parts: Array<{ type: string; [k: string]: unknown }>; [k: string]: unknown };

/** An event of a session's log (docs/protocol.md §2). */
export type Event = { id: string; type: string; payload: unknown; index?: number; session?: string; time?: number };

/** The actions the fold builds commands for (protocol.Actions). */
export type Action =
  | "sendMessage"
  | "send"
  | "steer"
  | "stop"
  | "approve"
  | "deny"
  | "respond"
  | "retry"
  | "pause"
  | "resume"
  | "queueEdit"
  | "queueMove"
  | "queueRemove"
  | "queueSendNow";

/** The fold's module, its errors thrown. */
export interface Fold {
  open(): number;
  /** Folds confirmed events; throws the fold's error (the state keeps the events before it). */
  apply(h: number, events: Event[]): void;
  /** Replaces the confirmed state (a session hydrated from GET …/state). */
  restore(h: number, state: unknown): void;
  push(h: number, event: Event): void;
  fail(h: number, id: string): void;
  state(h: number): AIState;
  view(h: number): AIState;
  indicator(h: number): string | null;
  act(h: number, action: Action, args: Record<string, unknown>, newID: () => string): Event[];
  close(h: number): void;
  fold(events: Event[]): AIState;
}

type Raw = Record<string, (...args: unknown[]) => unknown>;

/**
 * Loads the fold's module. Go's wasm_exec.js must have set globalThis.Go
 * (a script tag in a page; an import in Node.js). `module` is the
 * module's bytes, or its URL (fetched).
 */
export async function loadFold(module: ArrayBuffer | Uint8Array | URL | string): Promise<Fold> {
  const Go = (globalThis as unknown as { Go?: new () => { importObject: WebAssembly.Imports; run(i: WebAssembly.Instance): Promise<void> } }).Go;
  if (!Go) throw new Error("loadFold: globalThis.Go is missing: load Go's wasm_exec.js first");
  const go = new Go();
  let instance: WebAssembly.Instance;
  if (typeof module === "string" || module instanceof URL) {
    const res = await fetch(module);
    if (!res.ok) throw new Error(`loadFold: ${String(module)}: HTTP ${res.status}`);
    ({ instance } = await WebAssembly.instantiate(await res.arrayBuffer(), go.importObject));
  } else {
    ({ instance } = await WebAssembly.instantiate(module as BufferSource, go.importObject));
  }
  void go.run(instance);
  const raw = (globalThis as unknown as { A2Fold?: Raw }).A2Fold;
  if (!raw) throw new Error("loadFold: the module did not set A2Fold");
  return wrap(raw);
}

// wrap gives the module's functions their types, parsing and encoding
// JSON, and throws what they return as errors.
function wrap(raw: Raw): Fold {
  const call = (name: string, ...args: unknown[]): unknown => {
    const v = raw[name]!(...args);
    if (v instanceof Error) throw v;
    return v;
  };
  const check = (v: unknown) => {
    if (typeof v === "string" && v !== "") throw new Error(v);
  };
  return {
    open: () => call("open") as number,
    apply: (h, events) => check(call("apply", h, JSON.stringify(events))),
    restore: (h, state) => check(call("restore", h, JSON.stringify(state))),
    push: (h, event) => check(call("push", h, JSON.stringify(event))),
    fail: (h, id) => void call("fail", h, id),
    state: (h) => JSON.parse(call("state", h) as string) as AIState,
    view: (h) => JSON.parse(call("view", h) as string) as AIState,
    indicator: (h) => (call("indicator", h) as string) || null,
    act: (h, action, args, newID) => JSON.parse(call("act", h, action, JSON.stringify(args), newID) as string) as Event[],
    close: (h) => void call("close", h),
    fold: (events) => JSON.parse(call("fold", JSON.stringify(events)) as string) as AIState,
  };
}
