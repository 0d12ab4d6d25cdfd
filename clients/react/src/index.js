// useAgent: one A2 agent session in React (docs/clients.md): its live
// optimistic AIState and actions that fill in protocol identities, over
// @a2-runtime/client. Plain JavaScript with JSDoc types (tsc checks them
// and writes types/).
import { useEffect, useMemo, useSyncExternalStore } from "react";
import { createAgentClient } from "@a2-runtime/client";

/** @typedef {import("@a2-runtime/client").AgentClient} AgentClient */
/** @typedef {import("@a2-runtime/client").AIState} AIState */
/** @typedef {import("@a2-runtime/client").Event} Event */
/** @typedef {import("@a2-runtime/client").PushResult} PushResult */
/** @typedef {import("@a2-runtime/client").Session} Session */
/** @typedef {import("@a2-runtime/client").Snapshot} Snapshot */
/** @typedef {import("@a2-runtime/client").UIMessage} UIMessage */

/**
 * @typedef {{ id: string } & ({ api: string, client?: undefined } | { client: AgentClient, api?: undefined })} UseAgentOptions
 */

/**
 * What useAgent returns: the session's snapshot (state, index,
 * connection, indicator, hydrated, events, history), its messages and
 * status, and its actions. Actions are rebuilt every render.
 * @typedef {Snapshot & {
 *   session: Session,
 *   messages: UIMessage[],
 *   status: string,
 *   push: (events: Event[]) => PushResult,
 *   reconnect: () => void,
 *   loadHistory: (options?: { limit?: number }) => Promise<number>,
 *   sendMessage: (message: string | UIMessage, options?: { generate?: boolean }) => PushResult,
 *   steer: (message: string) => PushResult,
 *   stop: () => PushResult,
 *   approve: (approval: string | { id: string }) => PushResult,
 *   deny: (approval: string | { id: string }, options?: { reason?: string }) => PushResult,
 *   respond: (input: string | { id: string }, value: unknown) => PushResult,
 *   retry: () => PushResult,
 *   pause: (options: { when: "now" | "after-turn" }) => PushResult,
 *   resume: () => PushResult,
 *   queue: {
 *     edit: (message: UIMessage) => PushResult,
 *     move: (o: { inputId: string, beforeId: string | null }) => PushResult,
 *     remove: (inputId: string) => PushResult,
 *     sendNow: (inputId: string) => PushResult,
 *   },
 * }} UseAgentResult
 */

/** @type {Map<string, AgentClient>} one shared client per route for the page's lifetime */
const shared = new Map();

/**
 * The shared client of a route (the api form of useAgent).
 * @param {string} api
 * @returns {AgentClient}
 */
export function clientFor(api) {
  let c = shared.get(api);
  if (!c) {
    c = createAgentClient({ api });
    shared.set(api, c);
  }
  return c;
}

/** @param {string | { id: string }} x */
const idOf = (x) => (typeof x === "string" ? x : x?.id);

/**
 * One agent session in React: its live optimistic AIState and actions
 * that fill in protocol identities. Keep one options form per call site.
 * @param {UseAgentOptions} options
 * @returns {UseAgentResult}
 */
export function useAgent(options) {
  const { id, api, client: given } = options;
  if (typeof id !== "string" || id === "") throw new TypeError("useAgent: id (the session's ID) is a nonempty string");
  if (!given && typeof api !== "string") throw new TypeError("useAgent: api (the agent's URL) or client is required");
  const client = given ?? clientFor(/** @type {string} */ (api));
  const session = useMemo(() => client.session(id), [client, id]);
  // Retained while mounted: the client closes it gcTime after the last
  // component lets go (a remount in between keeps it).
  useEffect(() => session.retain(), [session]);
  const snap = useSyncExternalStore(
    (onChange) => session.subscribe(onChange),
    () => session.snapshot,
    () => session.snapshot,
  );
  return {
    ...snap,
    session,
    messages: snap.state.messages,
    status: snap.state.status,
    push: (events) => session.push(events),
    reconnect: () => session.reconnect(),
    loadHistory: (o) => session.loadHistory(o),
    sendMessage: (message, o) => session.sendMessage(message, o),
    steer: (message) => session.steer(message),
    stop: () => session.stop(),
    approve: (approval) => session.approve(idOf(approval)),
    deny: (approval, o) => session.deny(idOf(approval), o),
    respond: (input, value) => session.respond(idOf(input), value),
    retry: () => session.retry(),
    pause: (o) => session.pause(o),
    resume: () => session.resume(),
    queue: session.queue,
  };
}
