// What the browser tests share: Chromium, the node's state, and what a
// page shows of a session, made comparable with it. Run the tests with
// go test -run TestThePlaygroundInABrowser ./cmd/node (it sets the
// environment below).
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

export const { A2_URL: base, A2_FRONT_URL: front, A2_CHROMIUM: executablePath, A2_SCREENSHOTS: shots } = process.env;
if (!base || !front || !executablePath || !shots) {
  throw new Error("run through go test -run TestThePlaygroundInABrowser ./cmd/node (A2_URL, A2_FRONT_URL, A2_CHROMIUM, A2_SCREENSHOTS)");
}
mkdirSync(shots, { recursive: true });

/** Launches headless Chromium; the caller closes it. */
export function launch() {
  // The sandbox needs user namespaces a container or root may not have;
  // the pages are our own, on loopback.
  return chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
}

/**
 * A page that fails the test on any error it logs or throws (a refused
 * script, a policy violation, an uncaught exception).
 */
export async function openPage(browser, url, viewport = { width: 1280, height: 800 }) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (err) => errors.push(`uncaught: ${err.message}`));
  page.on("console", (msg) => {
    if (msg.type() === "error") errors.push(`console: ${msg.text()}`);
  });
  page.errors = errors;
  await page.goto(url);
  return page;
}

/** Keeps a screenshot of the page as a test artefact (name.png). */
export async function screenshot(page, name) {
  const file = join(shots, `${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

/** The node's state of a session of an agent (the assistant by default). */
export async function serverState(id, agent = "assistant") {
  const res = await fetch(`${base}/v1/agents/${agent}/sessions/${encodeURIComponent(id)}/state`);
  assert.equal(res.status, 200, `GET state of ${id}`);
  return res.json();
}

/** Releases a gate of the script model. */
export async function release(gate) {
  const res = await fetch(`${base}/v1/test/gates/${gate}`, { method: "POST" });
  assert.ok(res.ok, `release ${gate}: ${res.status}`);
}

const textOf = (parts) => parts.filter((p) => p.type === "text").map((p) => p.text).join("");

/**
 * What the playground shows of a message, from the state: its role, its
 * text, what steered it, its tool calls with their states.
 */
export function shown(state) {
  return state.messages.map((m) => ({
    id: m.id,
    role: m.role,
    text: textOf(m.parts),
    steering: m.parts.filter((p) => p.type === "steering-message").map((p) => textOf(p.parts ?? [])),
    tools: m.parts.filter((p) => p.type === "dynamic-tool" || p.type.startsWith("tool-")).map((p) => `${p.toolCallId}:${p.state}`),
    compaction: m.parts.filter((p) => p.type === "data-a2-compaction").map((p) => `${p.data?.status}:${p.data?.summary ?? ""}`),
  }));
}

/** The same, read from the playground's page. */
export function onPage(page) {
  return page.$$eval("#messages article.message", (articles) =>
    articles.map((a) => ({
      id: a.getAttribute("data-message-id"),
      role: a.getAttribute("data-role"),
      text: [...a.querySelectorAll(":scope > .part-text")].map((e) => e.textContent).join(""),
      steering: [...a.querySelectorAll(":scope > .part-steering")].map((e) => e.textContent.replace(/^↪ /, "")),
      tools: [...a.querySelectorAll(":scope > .tool")].map((e) => `${e.getAttribute("data-tool-call")}:${e.getAttribute("data-state")}`),
      compaction: [...a.querySelectorAll(":scope > .part-compaction")].map((e) => `${e.getAttribute("data-compaction")}:${e.querySelector(".summary")?.textContent ?? ""}`),
    })),
  );
}

/**
 * Waits until the page shows what the node's state holds, and returns
 * that state: the page and the server agree.
 */
export async function agrees(page, id, cond = () => true, { timeoutMs = 30000, agent = "assistant" } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    const server = await serverState(id, agent);
    const pageShows = await onPage(page);
    last = { server: shown(server.state), page: pageShows, status: server.state.status };
    if (cond(server.state) && JSON.stringify(last.server) === JSON.stringify(last.page)) return server;
    if (Date.now() > deadline) {
      assert.deepEqual(last.page, last.server, `the page and the node's state of ${id} differ (status ${last.status})`);
      assert.fail(`the condition on ${id} did not hold: ${JSON.stringify(server.state).slice(0, 800)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Waits until the node's state of a session satisfies cond, and returns it. */
export async function until(id, cond, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const server = await serverState(id);
    if (cond(server.state)) return server;
    if (Date.now() > deadline) assert.fail(`the condition on ${id} did not hold: ${JSON.stringify(server.state).slice(0, 800)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The inbox as the page shows it: [id, text] per item, in order. */
export function inboxOnPage(page) {
  return page.$$eval("#inbox .item", (items) => items.map((i) => [i.getAttribute("data-inbox-id"), i.querySelector(".body .text").textContent]));
}

export const inboxOf = (state) => state.inbox.items.map((i) => [i.id, textOf(i.message.parts)]);
export const idle = (s) => s.status === "idle" && !s.active && s.inbox.items.length === 0;
