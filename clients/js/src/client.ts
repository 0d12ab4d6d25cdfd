// A2's client for JavaScript: one agent's sessions over a node's HTTP API
// (docs/http.md), each a live optimistic AIState folded by the fold's
// module, with actions that fill in protocol identities (the reference's
// createAgentClient and useAgent's session result).
import type { Action, AIState, Event, Fold, UIMessage } from "./fold.js";

export type AgentClientOptions = {
  /** The agent's base URL: http://127.0.0.1:8080/v1/agents/assistant */
  api: string;
  /** The fold's module (loadFold). */
  fold: Fold;
  /** The fetch to use (default globalThis.fetch, read per request). */
  fetch?: typeof fetch;
  /** Reconnect delays of the live stream, in ms: from min doubling to max (default 250 to 5,000). */
  reconnect?: { minMs?: number; maxMs?: number };
  /** Fresh caller IDs (default crypto.randomUUID). */
  newID?: () => string;
};

/** What a push resolves to: the persisted events; `confirmed` resolves when the stream delivers them back. */
export type PushResult = Promise<Event[]> & { confirmed: Promise<void> };

export type Connection = "connecting" | "open" | "reconnecting" | "closed";

/** A session's copy: its view, its connection and its actions. */
export interface AgentSession {
  readonly id: string;
  /** The optimistic state: confirmed events, then the pending commands. */
  readonly state: AIState;
  /** The confirmed state alone. */
  readonly confirmed: AIState;
  /** The last log index folded. */
  readonly index: number;
  readonly connection: Connection;
  /** 'starting', 'compacting', 'thinking', or null (protocol.Indicator). */
  readonly indicator: string | null;
  /** Calls listener after every change; returns the unsubscribe. */
  subscribe(listener: () => void): () => void;
  /** Resolves once the view satisfies cond (or rejects after timeoutMs). */
  waitFor(cond: (s: AIState) => boolean, timeoutMs?: number): Promise<AIState>;
  /** Pushes events as they are (commands show in the view at once). */
  push(events: Event[]): PushResult;
  sendMessage(message: string | UIMessage, options?: { generate?: boolean }): PushResult;
  steer(text: string): PushResult;
  stop(): PushResult;
  approve(approvalId: string): PushResult;
  deny(approvalId: string, options?: { reason?: string }): PushResult;
  respond(inputId: string, value: unknown): PushResult;
  retry(): PushResult;
  pause(options: { when: "now" | "after-turn" }): PushResult;
  resume(): PushResult;
  queue: {
    edit(message: UIMessage): PushResult;
    move(options: { inputId: string; beforeId: string | null }): PushResult;
    remove(inputId: string): PushResult;
    sendNow(inputId: string): PushResult;
  };
  /** Drops the live stream's connection and opens a new one from the last index (no gap, no duplicate). */
  reconnect(): void;
  close(): void;
}

export interface AgentClient {
  /** The session of this ID (one copy per ID while it is open). */
  session(id: string): AgentSession;
}

/** An error answer of the node: its status and its code (docs/http.md, Errors). */
export class A2Error extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code?: string,
  ) {
    super(message);
    this.name = "A2Error";
  }
}

export function createAgentClient(options: AgentClientOptions): AgentClient {
  if (!options?.api) throw new TypeError("createAgentClient: api (the agent's URL) is required");
  if (!options.fold) throw new TypeError("createAgentClient: fold (loadFold's) is required");
  const sessions = new Map<string, Session>();
  return {
    session(id: string): AgentSession {
      if (typeof id !== "string" || id === "") throw new TypeError("session: the ID is a nonempty string");
      let s = sessions.get(id);
      if (!s || s.closed) {
        s = new Session(id, options, () => sessions.delete(id));
        sessions.set(id, s);
      }
      return s;
    },
  };
}

class Session implements AgentSession {
  readonly #o: AgentClientOptions;
  readonly #fold: Fold;
  readonly #h: number;
  readonly #listeners = new Set<() => void>();
  readonly #waiting = new Map<string, () => void>(); // pushed event ID -> confirmed
  #index = 0;
  #connection: Connection = "connecting";
  #abort: AbortController | null = null;
  #delay: number;
  #onClose: () => void;
  closed = false;

  constructor(
    readonly id: string,
    o: AgentClientOptions,
    onClose: () => void,
  ) {
    this.#o = o;
    this.#fold = o.fold;
    this.#h = this.#fold.open();
    this.#delay = o.reconnect?.minMs ?? 250;
    this.#onClose = onClose;
    void this.#run();
  }

  get state(): AIState {
    return this.#fold.view(this.#h);
  }
  get confirmed(): AIState {
    return this.#fold.state(this.#h);
  }
  get index(): number {
    return this.#index;
  }
  get connection(): Connection {
    return this.#connection;
  }
  get indicator(): string | null {
    return this.#fold.indicator(this.#h);
  }

  subscribe(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  waitFor(cond: (s: AIState) => boolean, timeoutMs = 30000): Promise<AIState> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const s = this.state;
        if (!cond(s)) return false;
        unsubscribe();
        clearTimeout(timer);
        resolve(s);
        return true;
      };
      const unsubscribe = this.subscribe(() => void check());
      const timer = setTimeout(() => {
        unsubscribe();
        reject(new Error(`waitFor: not within ${timeoutMs} ms; the state: ${JSON.stringify(this.state).slice(0, 500)}`));
      }, timeoutMs);
      check();
    });
  }

  #emit() {
    for (const l of [...this.#listeners]) {
      try {
        l();
      } catch (err) {
        console.error("a2 client: a listener threw", err);
      }
    }
  }

  #url(path: string): string {
    return `${this.#o.api.replace(/\/+$/, "")}/sessions/${encodeURIComponent(this.id)}${path}`;
  }

  #fetch(): typeof fetch {
    return this.#o.fetch ?? globalThis.fetch;
  }

  // The live stream: hydrate from the state, then follow the log from its
  // index, reconnecting from the last index seen.
  async #run() {
    try {
      const res = await this.#fetch()(this.#url("/state"));
      if (!res.ok) throw await errorOf(res);
      const body = (await res.json()) as { index: number; state: unknown };
      this.#fold.restore(this.#h, body.state);
      this.#index = body.index;
      this.#emit();
    } catch (err) {
      if (this.closed) return;
      this.#connection = "reconnecting";
      this.#emit();
      await sleep(this.#nextDelay());
      if (!this.closed) void this.#run();
      return;
    }
    while (!this.closed) {
      this.#abort = new AbortController();
      try {
        const res = await this.#fetch()(this.#url(`/stream?after=${this.#index}`), {
          headers: { Accept: "text/event-stream", "Last-Event-ID": String(this.#index) },
          signal: this.#abort.signal,
        });
        if (!res.ok || !res.body) throw await errorOf(res);
        this.#connection = "open";
        this.#delay = this.#o.reconnect?.minMs ?? 250;
        this.#emit();
        await this.#read(res.body);
      } catch {
        // the connection dropped, or was dropped by reconnect()
      }
      if (this.closed) break;
      this.#connection = "reconnecting";
      this.#emit();
      await sleep(this.#nextDelay());
    }
  }

  #nextDelay(): number {
    const d = this.#delay;
    this.#delay = Math.min(d * 2, this.#o.reconnect?.maxMs ?? 5000);
    return d;
  }

  // #read folds the server-sent events of one connection, each event once
  // (an index at or below the last folded one is skipped).
  async #read(body: ReadableStream<Uint8Array>) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    let data = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      const batch: Event[] = [];
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (data !== "") {
            const ev = JSON.parse(data) as Event;
            if ((ev.index ?? 0) > this.#index) batch.push(ev);
          }
          data = "";
        } else if (line.startsWith("data:")) {
          data += line.slice(5).trimStart();
        }
      }
      if (batch.length > 0) this.#apply(batch);
    }
  }

  #apply(events: Event[]) {
    try {
      this.#fold.apply(this.#h, events);
    } catch (err) {
      console.error("a2 client: the fold refused an event", err);
    }
    for (const ev of events) {
      this.#index = Math.max(this.#index, ev.index ?? 0);
      const confirm = this.#waiting.get(ev.id);
      if (confirm) {
        this.#waiting.delete(ev.id);
        confirm();
      }
    }
    this.#emit();
  }

  push(events: Event[]): PushResult {
    for (const ev of events) this.#fold.push(this.#h, ev);
    if (events.length > 0) this.#emit();
    const confirmations = events.map((ev) => new Promise<void>((resolve) => this.#waiting.set(ev.id, resolve)));
    const persisted = (async () => {
      if (events.length === 0) return [];
      try {
        const res = await this.#fetch()(this.#url("/events"), {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ events: events.map(({ id, type, payload }) => ({ id, type, payload })) }),
        });
        if (!res.ok) throw await errorOf(res);
        const body = (await res.json()) as { events: Event[] };
        return body.events;
      } catch (err) {
        for (const ev of events) {
          this.#fold.fail(this.#h, ev.id);
          this.#waiting.delete(ev.id);
        }
        this.#emit();
        throw err;
      }
    })();
    const result = persisted as PushResult;
    result.confirmed = Promise.all(confirmations).then(() => undefined);
    return result;
  }

  #act(action: Action, args: Record<string, unknown> = {}): PushResult {
    const newID = this.#o.newID ?? (() => globalThis.crypto.randomUUID());
    let events: Event[];
    try {
      events = this.#fold.act(this.#h, action, args, newID);
    } catch (err) {
      const failed = Promise.reject(err) as PushResult;
      failed.confirmed = failed.then(() => undefined);
      failed.confirmed.catch(() => {});
      return failed;
    }
    return this.push(events);
  }

  sendMessage(message: string | UIMessage, options: { generate?: boolean } = {}): PushResult {
    return typeof message === "string"
      ? this.#act("sendMessage", { text: message, generate: options.generate })
      : this.#act("send", { message, generate: options.generate });
  }
  steer(text: string) {
    return this.#act("steer", { text });
  }
  stop() {
    return this.#act("stop");
  }
  approve(approvalId: string) {
    return this.#act("approve", { approvalId });
  }
  deny(approvalId: string, options: { reason?: string } = {}) {
    return this.#act("deny", { approvalId, reason: options.reason });
  }
  respond(inputId: string, value: unknown) {
    return this.#act("respond", { inputId, value });
  }
  retry() {
    return this.#act("retry");
  }
  pause(options: { when: "now" | "after-turn" }) {
    return this.#act("pause", { when: options?.when });
  }
  resume() {
    return this.#act("resume");
  }
  readonly queue = {
    edit: (message: UIMessage) => this.#act("queueEdit", { message }),
    move: (o: { inputId: string; beforeId: string | null }) => this.#act("queueMove", { inputId: o.inputId, beforeId: o.beforeId }),
    remove: (inputId: string) => this.#act("queueRemove", { inputId }),
    sendNow: (inputId: string) => this.#act("queueSendNow", { inputId }),
  };

  reconnect() {
    this.#abort?.abort();
  }

  close() {
    if (this.closed) return;
    this.closed = true;
    this.#connection = "closed";
    this.#abort?.abort();
    this.#fold.close(this.#h);
    this.#onClose();
    this.#emit();
    this.#listeners.clear();
  }
}

async function errorOf(res: Response): Promise<A2Error> {
  let code: string | undefined;
  let message = `HTTP ${res.status}`;
  try {
    const body = (await res.json()) as { error?: { code?: string; message?: string } };
    code = body.error?.code;
    if (body.error?.message) message = `${message}: ${body.error.message}`;
  } catch {
    // not JSON
  }
  return new A2Error(message, res.status, code);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
