export { loadFold } from "./fold.js";
export type { Action, AIState, Event, Fold, UIMessage } from "./fold.js";
export { A2Error, createAgentClient } from "./client.js";
export type { AgentClient, AgentClientOptions, AgentSession, Connection, PushResult } from "./client.js";
