// A2's client for JavaScript (docs/clients.md).
export { loadFold } from "./fold.js";
export { A2Error, createAgentClient, Session } from "./client.js";
/** @typedef {import("./fold.js").Action} Action */
/** @typedef {import("./fold.js").AIState} AIState */
/** @typedef {import("./fold.js").Event} Event */
/** @typedef {import("./fold.js").Fold} Fold */
/** @typedef {import("./fold.js").UIMessage} UIMessage */
/** @typedef {import("./client.js").AgentClient} AgentClient */
/** @typedef {import("./client.js").AgentClientOptions} AgentClientOptions */
/** @typedef {import("./client.js").Connection} Connection */
/** @typedef {import("./client.js").PushResult} PushResult */
/** @typedef {import("./client.js").Snapshot} Snapshot */
