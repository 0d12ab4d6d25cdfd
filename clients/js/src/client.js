// A2's client for JavaScript: one agent's sessions over a node's HTTP API
// (docs/http.md), each a live optimistic AIState folded by the fold's
// module, with actions that fill in protocol identities (the reference's
// createAgentClient and useAgent's session result). Plain JavaScript with
// JSDoc types (tsc checks them and writes types/).

import { loadFold } from "./fold.js";

/** @typedef {import("./fold.js").Action} Action */
/** @typedef {import("./fold.js").AIState} AIState */
/** @typedef {import("./fold.js").Event} Event */
/** @typedef {import("./fold.js").Fold} Fold */
/** @typedef {import("./fold.js").UIMessage} UIMessage */

/**
 * @typedef {object} AgentClientOptions
 * @property {string} api The agent's base URL: http://127.0.0.1:8080/v1/agents/assistant
 * @property {Fold | Promise<Fold>} [fold] The fold's module (loadFold); default: loaded from the node that serves api (/fold.wasm, once per page).
 * @property {number} [gcTime] How long, in ms, a session no component retains stays open (default 60,000).
 * @property {number} [keepEvents] How many of the latest confirmed events a session keeps in its events (default 500).
 * @property {typeof fetch} [fetch] The fetch to use (default globalThis.fetch, read per request).
 * @property {{ minMs?: number, maxMs?: number }} [reconnect] Reconnect delays of the live stream, in ms: from min doubling to max (default 250 to 5,000).
 * @property {() => string} [newID] Fresh caller IDs (default crypto.randomUUID).
 */

/**
 * What a push resolves to: the persisted events; `confirmed` resolves when
 * the stream delivers them back.
 * @typedef {Promise<Event[]> & { confirmed: Promise<void> }} PushResult
 */

/** @typedef {"connecting" | "open" | "reconnecting" | "closed"} Connection */

/**
 * @typedef {object} AgentClient
 * @property {(id: string) => Session} session The session of this ID (one copy per ID while it is open).
 * @property {string} api The agent's base URL, absolute.
 */

/**
 * What a session shows at one moment; the same object until it changes
 * (useSyncExternalStore's snapshot).
 * @typedef {object} Snapshot
 * @property {AIState} state The optimistic state.
 * @property {AIState} confirmed The confirmed state.
 * @property {number} index The last log index folded.
 * @property {Connection} connection
 * @property {string | null} indicator
 * @property {boolean} hydrated Whether the state has come from the node.
 * @property {Event[]} events The confirmed events folded since the session hydrated, the latest keepEvents of them.
 * @property {Event[]} history Earlier events loaded by loadHistory, oldest first, ending at the hydrated index.
 * @property {boolean} historyComplete Whether history reaches the log's first event.
 */

/** An error answer of the node: its status and its code (docs/http.md, Errors). */
export class A2Error extends Error {
  /**
   * @param {string} message
   * @param {number} status
   * @param {string} [code]
   */
  constructor(message, status, code) {
    super(message);
    this.name = "A2Error";
    this.status = status;
    this.code = code;
  }
}

/**
 * @param {AgentClientOptions} options
 * @returns {AgentClient}
 */
export function createAgentClient(options) {
  if (!options?.api || typeof options.api !== "string") throw new TypeError("createAgentClient: api (the agent's URL) is required");
  const loc = /** @type {{ location?: { href: string } }} */ (/** @type {unknown} */ (globalThis)).location;
  /** @type {URL} */
  let api;
  try {
    api = new URL(options.api, loc?.href);
  } catch {
    throw new TypeError(`createAgentClient: api ${JSON.stringify(options.api)} is not a URL`);
  }
  const fold = options.fold ?? loadFold(new URL("/fold.wasm", api));
  options = { ...options, api: api.href, fold };
  /** @type {Map<string, Session>} */
  const sessions = new Map();
  return {
    api: api.href,
    session(id) {
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

/** A session's copy: its view, its connection and its actions. */
export class Session {
  /** @type {AgentClientOptions} */ #o;
  /** @type {Fold | null} */ #fold = null;
  /** @type {Promise<Fold>} */ #ready;
  #h = 0;
  /** @type {Snapshot | null} */ #snapshot = null;
  #hydrated = false;
  #hydratedAt = 0;
  /** @type {Event[]} */ #events = [];
  /** @type {Event[]} */ #history = [];
  #historyComplete = false;
  #retained = 0;
  /** @type {ReturnType<typeof setTimeout> | undefined} */ #gc;
  /** @type {Set<() => void>} */ #listeners = new Set();
  /** @type {Map<string, () => void>} pushed event ID -> confirmed */ #waiting = new Map();
  /** @type {Map<string, number>} pushed event ID -> its index, once persisted and still waiting */ #persistedAt = new Map();
  #index = 0;
  /** @type {Connection} */ #connection = "connecting";
  /** @type {AbortController | null} */ #abort = null;
  /** @type {number} */ #delay;
  /** @type {() => void} */ #onClose;
  closed = false;

  /**
   * @param {string} id
   * @param {AgentClientOptions} o
   * @param {() => void} onClose
   */
  constructor(id, o, onClose) {
    this.id = id;
    this.#o = o;
    this.#ready = Promise.resolve(/** @type {Fold | Promise<Fold>} */ (o.fold)).then((fold) => {
      this.#fold = fold;
      this.#h = fold.open();
      return fold;
    });
    // A failed load is each action's error, and the stream's, said once.
    this.#ready.catch((err) => console.error("a2 client: the fold did not load", err));
    this.#delay = o.reconnect?.minMs ?? 250;
    this.#onClose = onClose;
    void this.#run();
  }

  /**
   * What the session shows now, made once per change: the same object
   * until the next change.
   * @returns {Snapshot}
   */
  get snapshot() {
    if (!this.#snapshot) {
      const f = this.#fold;
      this.#snapshot = Object.freeze({
        state: f ? f.view(this.#h) : emptyState(),
        confirmed: f ? f.state(this.#h) : emptyState(),
        index: this.#index,
        connection: this.#connection,
        indicator: f ? f.indicator(this.#h) : null,
        hydrated: this.#hydrated,
        events: this.#events,
        history: this.#history,
        historyComplete: this.#historyComplete,
      });
    }
    return this.#snapshot;
  }
  /** The optimistic state: confirmed events, then the pending commands. */
  get state() {
    return this.snapshot.state;
  }
  /** The confirmed state alone. */
  get confirmed() {
    return this.snapshot.confirmed;
  }
  /** The last log index folded. */
  get index() {
    return this.#index;
  }
  /** @returns {Connection} */
  get connection() {
    return this.#connection;
  }
  /** 'starting', 'compacting', 'thinking', or null (protocol.Indicator). */
  get indicator() {
    return this.snapshot.indicator;
  }
  /** Whether the state has come from the node. */
  get hydrated() {
    return this.#hydrated;
  }
  /** The confirmed events folded since the session hydrated (the latest keepEvents). */
  get events() {
    return this.#events;
  }
  /** Earlier events loaded by loadHistory, oldest first. */
  get history() {
    return this.#history;
  }

  /**
   * Loads the page of the log just before what history holds (before the
   * hydrated index at first), up to limit events (1 to 1,000). Resolves
   * to how many it loaded; 0 once history reaches the log's start.
   * @param {{ limit?: number }} [options]
   * @returns {Promise<number>}
   */
  async loadHistory(options = {}) {
    const limit = options.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new RangeError("loadHistory: limit is an integer from 1 to 1,000");
    if (!this.#hydrated) await this.waitFor(() => this.#hydrated);
    const first = this.#history[0];
    const end = first ? (first.index ?? 1) - 1 : this.#hydratedAt;
    if (end <= 0) {
      this.#historyComplete = true;
      this.#changed();
      return 0;
    }
    const after = Math.max(0, end - limit);
    const res = await this.#fetch()(this.#url(`/events?after=${after}&limit=${end - after}`));
    if (!res.ok) throw await errorOf(res);
    const body = /** @type {{ events: Event[] }} */ (await res.json());
    const page = body.events.filter((ev) => (ev.index ?? 0) <= end);
    this.#history = [...page, ...this.#history];
    this.#historyComplete = after === 0;
    this.#changed();
    return page.length;
  }

  /**
   * Keeps the session open while retained: the client closes a session
   * gcTime after its last release (useAgent retains it while mounted).
   * @returns {() => void} the release
   */
  retain() {
    this.#retained++;
    clearTimeout(this.#gc);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.#retained === 0 && !this.closed) {
        this.#gc = setTimeout(() => {
          if (this.#retained === 0) this.close();
        }, this.#o.gcTime ?? 60000);
      }
    };
  }

  /**
   * Calls listener after every change; returns the unsubscribe.
   * @param {() => void} listener
   * @returns {() => void}
   */
  subscribe(listener) {
    this.#listeners.add(listener);
    return () => void this.#listeners.delete(listener);
  }

  /**
   * Resolves once the view satisfies cond (or rejects after timeoutMs).
   * @param {(s: AIState) => boolean} cond
   * @param {number} [timeoutMs]
   * @returns {Promise<AIState>}
   */
  waitFor(cond, timeoutMs = 30000) {
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

  // Something changed: a new snapshot, then the listeners.
  #changed() {
    if (!this.closed) this.#snapshot = null;
    this.#emit();
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

  /** @param {string} path */
  #url(path) {
    return `${this.#o.api.replace(/\/+$/, "")}/sessions/${encodeURIComponent(this.id)}${path}`;
  }

  /** @returns {typeof fetch} */
  #fetch() {
    return this.#o.fetch ?? globalThis.fetch;
  }

  // The live stream: hydrate from the state, then follow the log from its
  // index, reconnecting from the last index seen.
  async #run() {
    try {
      const fold = await this.#ready;
      if (this.closed) return;
      const res = await this.#fetch()(this.#url("/state"));
      if (!res.ok) throw await errorOf(res);
      const body = /** @type {{ index: number, state: unknown }} */ (await res.json());
      if (this.closed) return;
      fold.restore(this.#h, body.state);
      this.#index = body.index;
      this.#hydrated = true;
      this.#hydratedAt = body.index;
      this.#confirmPassed();
      this.#changed();
    } catch {
      if (this.closed) return;
      this.#connection = "reconnecting";
      this.#changed();
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
        this.#changed();
        await this.#read(res.body);
      } catch {
        // the connection dropped, or was dropped by reconnect()
      }
      if (this.closed) break;
      this.#connection = "reconnecting";
      this.#changed();
      await sleep(this.#nextDelay());
    }
  }

  #nextDelay() {
    const d = this.#delay;
    this.#delay = Math.min(d * 2, this.#o.reconnect?.maxMs ?? 5000);
    return d;
  }

  /**
   * Folds the server-sent events of one connection, each event once (an
   * index at or below the last folded one is skipped).
   * @param {ReadableStream<Uint8Array>} body
   */
  async #read(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    let data = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let nl;
      /** @type {Event[]} */
      const batch = [];
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (data !== "") {
            const ev = /** @type {Event} */ (JSON.parse(data));
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

  /** @param {Event[]} events */
  #apply(events) {
    try {
      this.#fold?.apply(this.#h, events);
    } catch (err) {
      console.error("a2 client: the fold refused an event", err);
    }
    const keep = this.#o.keepEvents ?? 500;
    this.#events = [...this.#events, ...events].slice(-keep);
    for (const ev of events) {
      this.#index = Math.max(this.#index, ev.index ?? 0);
      const confirm = this.#waiting.get(ev.id);
      if (confirm) {
        this.#waiting.delete(ev.id);
        this.#persistedAt.delete(ev.id);
        confirm();
      }
    }
    this.#changed();
  }

  // Confirms the pushed events the session's index has passed without the
  // stream carrying them: a push persisted before the state the session
  // hydrated from was read (an action made before the fold loaded races
  // the hydration). A command is decided in the batch it is appended in, so
  // the hydrated state holds its decision too: its optimistic display goes,
  // as its receipt would have taken it. Returns whether any was confirmed.
  #confirmPassed() {
    let any = false;
    for (const [id, index] of this.#persistedAt) {
      if (!this.#hydrated || index > this.#index) continue;
      this.#persistedAt.delete(id);
      const confirm = this.#waiting.get(id);
      if (!confirm) continue;
      this.#waiting.delete(id);
      this.#fold?.fail(this.#h, id); // not a failure: the confirmed state has it
      confirm();
      any = true;
    }
    return any;
  }

  /**
   * Pushes events as they are (commands show in the view at once).
   * @param {Event[]} events
   * @returns {PushResult}
   */
  push(events) {
    if (!this.#fold) {
      return later(this.#ready, () => this.push(events));
    }
    for (const ev of events) this.#fold.push(this.#h, ev);
    if (events.length > 0) this.#changed();
    const confirmations = events.map((ev) => new Promise((resolve) => this.#waiting.set(ev.id, () => resolve(undefined))));
    const persisted = (async () => {
      if (events.length === 0) return [];
      try {
        const res = await this.#fetch()(this.#url("/events"), {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ events: events.map(({ id, type, payload }) => ({ id, type, payload })) }),
        });
        if (!res.ok) throw await errorOf(res);
        const body = /** @type {{ events: Event[] }} */ (await res.json());
        for (const ev of body.events) {
          if (this.#waiting.has(ev.id) && ev.index) this.#persistedAt.set(ev.id, ev.index);
        }
        if (this.#confirmPassed()) this.#changed();
        return body.events;
      } catch (err) {
        for (const ev of events) {
          this.#fold?.fail(this.#h, ev.id);
          this.#waiting.delete(ev.id);
          this.#persistedAt.delete(ev.id);
        }
        this.#changed();
        throw err;
      }
    })();
    const result = /** @type {PushResult} */ (persisted);
    result.confirmed = Promise.all(confirmations).then(() => undefined);
    return result;
  }

  /**
   * @param {Action} action
   * @param {Record<string, unknown>} [args]
   * @returns {PushResult}
   */
  #act(action, args = {}) {
    if (!this.#fold) return later(this.#ready, () => this.#act(action, args));
    const newID = this.#o.newID ?? (() => globalThis.crypto.randomUUID());
    /** @type {Event[]} */
    let events;
    try {
      events = this.#fold.act(this.#h, action, args, newID);
    } catch (err) {
      const failed = /** @type {PushResult} */ (Promise.reject(err));
      failed.confirmed = failed.then(() => undefined);
      failed.confirmed.catch(() => {});
      return failed;
    }
    return this.push(events);
  }

  /**
   * Queues a string (one text part) or a UIMessage.
   * @param {string | UIMessage} message
   * @param {{ generate?: boolean }} [options]
   */
  sendMessage(message, options = {}) {
    return typeof message === "string"
      ? this.#act("sendMessage", { text: message, generate: options.generate })
      : this.#act("send", { message, generate: options.generate });
  }
  /** Steers the active turn after its current step, or sends when idle. @param {string} text */
  steer(text) {
    return this.#act("steer", { text });
  }
  /** Stops the active turn at the frontier the view shows. */
  stop() {
    return this.#act("stop");
  }
  /** @param {string} approvalId */
  approve(approvalId) {
    return this.#act("approve", { approvalId });
  }
  /**
   * @param {string} approvalId
   * @param {{ reason?: string }} [options]
   */
  deny(approvalId, options = {}) {
    return this.#act("deny", { approvalId, reason: options.reason });
  }
  /**
   * @param {string} inputId
   * @param {unknown} value
   */
  respond(inputId, value) {
    return this.#act("respond", { inputId, value });
  }
  /** Retries the failed response with a fresh retryId. */
  retry() {
    return this.#act("retry");
  }
  /** @param {{ when: "now" | "after-turn" }} options */
  pause(options) {
    return this.#act("pause", { when: options?.when });
  }
  resume() {
    return this.#act("resume");
  }
  queue = {
    /** @param {UIMessage} message */
    edit: (message) => this.#act("queueEdit", { message }),
    /** @param {{ inputId: string, beforeId: string | null }} o */
    move: (o) => this.#act("queueMove", { inputId: o.inputId, beforeId: o.beforeId }),
    /** @param {string} inputId */
    remove: (inputId) => this.#act("queueRemove", { inputId }),
    /** @param {string} inputId */
    sendNow: (inputId) => this.#act("queueSendNow", { inputId }),
  };

  /** Drops the live stream's connection and opens a new one from the last index (no gap, no duplicate). */
  reconnect() {
    this.#abort?.abort();
  }

  close() {
    if (this.closed) return;
    // The last snapshot stays readable: the fold forgets the session.
    const last = this.snapshot;
    this.closed = true;
    this.#connection = "closed";
    this.#snapshot = Object.freeze({ ...last, connection: this.#connection });
    this.#abort?.abort();
    clearTimeout(this.#gc);
    if (this.#fold) this.#fold.close(this.#h);
    else void this.#ready.then((f) => f.close(this.#h), () => {});
    this.#onClose();
    this.#emit();
    this.#listeners.clear();
  }
}

/**
 * @param {Response} res
 * @returns {Promise<A2Error>}
 */
async function errorOf(res) {
  /** @type {string | undefined} */
  let code;
  let message = `HTTP ${res.status}`;
  try {
    const body = /** @type {{ error?: { code?: string, message?: string } }} */ (await res.json());
    code = body.error?.code;
    if (body.error?.message) message = `${message}: ${body.error.message}`;
  } catch {
    // not JSON
  }
  return new A2Error(message, res.status, code);
}

/**
 * The PushResult of a push made once the fold has loaded.
 * @param {Promise<Fold>} ready
 * @param {() => PushResult} run
 * @returns {PushResult}
 */
function later(ready, run) {
  const inner = ready.then(() => ({ r: run() }));
  const result = /** @type {PushResult} */ (inner.then(({ r }) => r));
  result.confirmed = inner.then(({ r }) => r.confirmed);
  result.confirmed.catch(() => {});
  return result;
}

/**
 * The state of a session with no events (protocol.NewAIState), shown until
 * the fold loads.
 * @returns {AIState}
 */
function emptyState() {
  return {
    messages: [],
    inbox: { paused: false, items: [] },
    active: null,
    status: "idle",
    starting: false,
    receipt: null,
    pendingQueueCommands: [],
    session: { status: "new" },
    pendingApprovals: {},
    pendingInputs: {},
    tools: {},
    compaction: null,
    modelMetadata: {},
    usage: {},
    error: null,
    activeGeneration: null,
    responseOwners: {},
  };
}

/** @param {number} ms */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
