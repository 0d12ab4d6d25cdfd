// The playground (/ on a node) in headless Chromium: every action through
// its buttons, and what the page shows checked against the node's state
// after each. Run with go test -run TestThePlaygroundInABrowser ./cmd/node.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { agrees, until, base, idle, inboxOf, inboxOnPage, launch, onPage, openPage, release, screenshot, serverState, shown } from "../lib.mjs";

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const run = `${process.pid}`;
async function playground(id, viewport) {
  const page = await openPage(browser, `${base}/#/assistant/${id}`, viewport);
  await page.locator("#connection", { hasText: "open" }).waitFor();
  return page;
}
async function send(page, text) {
  await page.fill("#text", text);
  await page.click("#send");
}
const noErrors = (page) => assert.deepEqual(page.errors, [], "the page logged no error");

test("send: the message shows at once, then the answer, as the node has them; the event log is the node's log", { timeout: 90000 }, async () => {
  const id = `pw-send-${run}`;
  const page = await playground(id);
  assert.equal(await page.inputValue("#session"), id);
  await send(page, "hello there");
  // At once, before the node answers anything: the page shows it.
  await page.locator("#inbox .item, #messages article.user", { hasText: "hello there" }).first().waitFor({ timeout: 2000 });
  const server = await agrees(page, id, (s) => idle(s) && s.messages.length === 2);
  assert.equal(shown(server.state)[1].text, "Hello from the node.");
  // The log: one line per event, in order, ending at the node's index.
  const res = await (await fetch(`${base}/v1/agents/assistant/sessions/${id}/events?after=0&limit=1000`)).json();
  const log = await page.$$eval("#events li", (lis) => lis.map((li) => [Number(li.dataset.index), li.dataset.type]));
  assert.deepEqual(log, res.events.map((e) => [e.index, e.type]));
  await screenshot(page, "send");
  noErrors(page);
  await page.context().close();
});

test("a second tab on the same session stays in step, and loads the log from its start", { timeout: 90000 }, async () => {
  const id = `pw-tabs-${run}`;
  const a = await playground(id);
  await send(a, "hello from tab one");
  await agrees(a, id, (s) => idle(s) && s.messages.length === 2);
  const b = await playground(id);
  await send(b, "think it over, tab two");
  const server = await agrees(b, id, (s) => idle(s) && s.messages.length === 4);
  await agrees(a, id, (s) => idle(s) && s.messages.length === 4);
  assert.deepEqual(await onPage(a), await onPage(b));
  // The reasoning shows in both.
  for (const p of [a, b]) await p.locator(".part-reasoning", { hasText: "Let me think about it." }).waitFor();
  // Tab two hydrated after the first turn: its log begins there, and
  // "Load earlier" brings the rest.
  const res = await (await fetch(`${base}/v1/agents/assistant/sessions/${id}/events?after=0&limit=1000`)).json();
  assert.ok((await b.$$eval("#events li", (lis) => lis.length)) < res.events.length);
  await b.click("#earlier");
  await b.waitForFunction((n) => document.querySelectorAll("#events li").length === n, res.events.length);
  const log = await b.$$eval("#events li", (lis) => lis.map((li) => Number(li.dataset.index)));
  assert.deepEqual(log, res.events.map((e) => e.index));
  assert.equal(server.index, res.events.at(-1).index);
  await screenshot(b, "second-tab");
  noErrors(a);
  noErrors(b);
  await a.context().close();
  await b.context().close();
});

test("steer during a scripted turn: the steering joins the turn after its step", { timeout: 90000 }, async () => {
  const id = `pw-steer-${run}`;
  const page = await playground(id);
  await send(page, "steer me somewhere");
  await agrees(page, id, (s) => s.status === "streaming" && s.messages.length === 2 && shown(s)[1].text !== "");
  assert.equal(await page.isDisabled("#steer"), false, "Steer is offered while a turn runs");
  await page.fill("#text", "go left instead");
  await page.click("#steer");
  // The node queues it for after the step; the page shows it after the
  // response at once, and keeps it there through the receipt (R-OPT-05).
  await page.locator("#messages article.user", { hasText: "go left instead" }).waitFor({ timeout: 2000 });
  const queued = await until(id, (s) => s.inbox.items.length === 1 && s.pendingQueueCommands.length === 0);
  assert.ok(queued.state.inbox.items[0].afterStepOf, "a steer waits for the step to end");
  assert.deepEqual((await onPage(page)).map((m) => m.text), [...shown(queued.state).map((m) => m.text), "go left instead"]);
  await screenshot(page, "steer-queued");
  await release("steer");
  const server = await agrees(page, id, idle);
  const all = JSON.stringify(shown(server.state));
  assert.ok(all.includes("go left instead"), `the steering is in the conversation: ${all}`);
  assert.ok(all.includes("Heading north"), "the steered turn's first step stays");
  noErrors(page);
  await page.context().close();
});

test("the queue: reordered, edited, removed and sent now, while a turn runs", { timeout: 90000 }, async () => {
  const id = `pw-queue-${run}`;
  const page = await playground(id);
  await send(page, "queue behind this one");
  await agrees(page, id, (s) => s.status === "streaming" && s.messages.length === 2);
  await send(page, "first queued");
  await send(page, "second queued");
  let server = await agrees(page, id, (s) => s.inbox.items.length === 2 && s.pendingQueueCommands.length === 0);
  assert.deepEqual(await inboxOnPage(page), inboxOf(server.state));
  const [first, second] = server.state.inbox.items.map((i) => i.id);
  // Move the first down: the page shows the new order at once, and the node agrees.
  await page.click(`[data-inbox-id="${first}"] [data-op=down]`);
  assert.deepEqual((await inboxOnPage(page)).map(([i]) => i), [second, first], "the move shows at once");
  server = await agrees(page, id, (s) => s.inbox.items[0]?.id === second);
  assert.deepEqual(await inboxOnPage(page), inboxOf(server.state));
  // Edit it.
  await page.click(`[data-inbox-id="${first}"] [data-op=edit]`);
  await page.fill(`[data-inbox-id="${first}"] textarea`, "first, edited");
  await page.click(`[data-inbox-id="${first}"] [data-op=save]`);
  server = await agrees(page, id, (s) => inboxOf(s).some(([, t]) => t === "first, edited"));
  assert.deepEqual(await inboxOnPage(page), inboxOf(server.state));
  await screenshot(page, "queue-edited");
  // Remove the other.
  await page.click(`[data-inbox-id="${second}"] [data-op=remove]`);
  server = await agrees(page, id, (s) => s.inbox.items.length === 1);
  assert.deepEqual(await inboxOnPage(page), [[first, "first, edited"]]);
  // Send it now: it goes where steering would, after the running step,
  // and shows after the response at once (R-INBOX-11, R-OPT-05).
  await page.click(`[data-inbox-id="${first}"] [data-op=send-now]`);
  await page.locator("#messages article.user", { hasText: "first, edited" }).waitFor({ timeout: 2000 });
  server = await until(id, (s) => s.inbox.items[0]?.afterStepOf && s.pendingQueueCommands.length === 0);
  assert.deepEqual((await onPage(page)).map((m) => m.text), [...shown(server.state).map((m) => m.text), "first, edited"]);
  await screenshot(page, "queue-send-now");
  // The step ends, and the turn hands off to it.
  await release("queue");
  server = await agrees(page, id, (s) => idle(s) && s.messages.length === 4);
  const msgs = shown(server.state);
  assert.equal(msgs[1].text, "Working through the queue, slowly.");
  assert.equal(msgs[2].text, "first, edited");
  assert.equal(msgs[3].text, "Answered.");
  await release("queue");
  noErrors(page);
  await page.context().close();
});

test("stop keeps exactly what the page showed", { timeout: 90000 }, async () => {
  const id = `pw-stop-${run}`;
  const page = await playground(id);
  await send(page, "stop me when you can");
  // The turn holds after its first chunk; the page shows what the node has.
  await agrees(page, id, (s) => s.status === "streaming" && s.messages.length === 2 && shown(s)[1].text !== "");
  const seen = (await onPage(page))[1].text;
  await screenshot(page, "before-stop");
  await page.click("#stop");
  const server = await agrees(page, id, idle);
  assert.equal(shown(server.state)[1].text, seen, "the stopped answer is what the page showed");
  await release("stop");
  noErrors(page);
  await page.context().close();
});

test("approve and deny a tool call", { timeout: 90000 }, async () => {
  for (const answer of ["approve", "deny"]) {
    const id = `pw-${answer}-${run}`;
    const page = await playground(id);
    await send(page, "confirm the door");
    await page.locator(`[data-${answer}]`).waitFor();
    await agrees(page, id, (s) => s.status === "awaiting-approval");
    if (answer === "approve") await screenshot(page, "approval");
    await page.click(`[data-${answer}]`);
    const server = await agrees(page, id, (s) => idle(s));
    const tool = shown(server.state)[1].tools[0];
    assert.equal(tool, answer === "approve" ? "c1:output-available" : "c1:output-denied");
    if (answer === "approve") assert.ok(shown(server.state)[1].text.includes("The door is open."));
    noErrors(page);
    await page.context().close();
  }
});

test("pause holds the queue; resume answers it", { timeout: 90000 }, async () => {
  const id = `pw-pause-${run}`;
  const page = await playground(id);
  await page.click("#pause-now");
  await agrees(page, id, (s) => s.inbox.paused && s.status === "paused");
  await page.locator("#status", { hasText: "paused" }).waitFor();
  assert.equal(await page.isDisabled("#resume"), false);
  await send(page, "hello while paused");
  const server = await agrees(page, id, (s) => s.inbox.items.length === 1 && s.pendingQueueCommands.length === 0);
  assert.deepEqual(await inboxOnPage(page), inboxOf(server.state));
  assert.equal(server.state.messages.length, 0);
  await page.click("#resume");
  const done = await agrees(page, id, (s) => idle(s) && s.messages.length === 2);
  assert.equal(shown(done.state)[1].text, "Hello from the node.");
  noErrors(page);
  await page.context().close();
});

test("usable at 1280x800 and on a phone: nothing wider than the screen, the composer in reach", { timeout: 90000 }, async () => {
  const id = `pw-layout-${run}`;
  for (const [name, viewport] of [
    ["desktop", { width: 1280, height: 800 }],
    ["phone", { width: 390, height: 844 }],
  ]) {
    const page = await playground(id, viewport);
    if (name === "desktop") {
      await send(page, "hello, show me around");
      await agrees(page, id, (s) => idle(s) && s.messages.length === 2);
      await send(page, "confirm the door");
      await agrees(page, id, (s) => s.status === "awaiting-approval");
    } else {
      await agrees(page, id, (s) => s.messages.length === 4);
    }
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= viewport.width, `${name}: the page is ${width} px wide on a ${viewport.width} px screen`);
    for (const sel of ["#send", "#text", "#stop", "[data-approve]"]) {
      await page.locator(sel).scrollIntoViewIfNeeded();
      const box = await page.locator(sel).boundingBox();
      assert.ok(box && box.x >= 0 && box.x + box.width <= viewport.width, `${name}: ${sel} is on screen: ${JSON.stringify(box)}`);
    }
    await page.evaluate(() => window.scrollTo(0, 0));
    await screenshot(page, `playground-${name}`);
    noErrors(page);
    await page.context().close();
  }
  const s = await serverState(id);
  assert.equal(s.state.status, "awaiting-approval");
});

test("a long conversation compacts itself, and the page shows the compaction part with its summary", { timeout: 90000 }, async () => {
  const id = `pw-compact-${run}`;
  const page = await openPage(browser, `${base}/#/compactor/${id}`);
  await page.locator("#connection", { hasText: "open" }).waitFor();
  assert.equal(await page.inputValue("#agent"), "compactor");
  let server;
  for (let turn = 1; turn <= 8; turn++) {
    await send(page, `hello number ${turn}, with enough words to make the prompt grow past the threshold`);
    server = await agrees(page, id, (s) => idle(s) && s.messages.length === 2 * turn, { agent: "compactor" });
    if (shown(server.state).some((m) => m.compaction.length > 0)) break;
  }
  const parts = shown(server.state).flatMap((m) => m.compaction);
  assert.ok(parts.length > 0, `no compaction in 8 turns: ${JSON.stringify(shown(server.state))}`);
  assert.ok(parts.every((c) => c.startsWith("completed:") && c.length > "completed:".length), `a completed compaction with its summary: ${parts}`);
  await page.locator(".part-compaction").first().scrollIntoViewIfNeeded();
  await screenshot(page, "compaction");
  noErrors(page);
  await page.context().close();
});
