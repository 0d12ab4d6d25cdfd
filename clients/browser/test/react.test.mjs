// The React example (clients/react/example, over useAgent) in headless
// Chromium, served beside the node on one origin. Run with
// go test -run TestThePlaygroundInABrowser ./cmd/node.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { front, idle, launch, openPage, release, screenshot, serverState, shown } from "../lib.mjs";

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const messagesOnPage = (page) => page.$$eval(".message", (ms) => ms.map((m) => ({ role: m.getAttribute("data-role"), text: m.textContent })));
async function settled(page, id, cond) {
  for (let i = 0; i < 600; i++) {
    const s = (await serverState(id)).state;
    const want = shown(s).map(({ role, text }) => ({ role, text }));
    if (cond(s) && JSON.stringify(await messagesOnPage(page)) === JSON.stringify(want)) return s;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`the React page and the node's state of ${id} did not agree: ${JSON.stringify(await messagesOnPage(page))}`);
}

test("useAgent: send, stop and approve in the React example, as the node has them", { timeout: 90000 }, async () => {
  const id = `react-${process.pid}`;
  const page = await openPage(browser, `${front}/example/index.html?session=${id}`);
  await page.locator("[data-testid=connection]", { hasText: "open" }).waitFor();
  await page.fill("input[aria-label=message]", "hello from React");
  await page.click("button[type=submit]");
  let s = await settled(page, id, (s) => idle(s) && s.messages.length === 2);
  assert.equal(shown(s)[1].text, "Hello from the node.");
  // Stop during a held turn keeps what the page showed.
  await page.fill("input[aria-label=message]", "halt me please");
  await page.click("button[type=submit]");
  s = await settled(page, id, (s) => s.status === "streaming" && s.messages.length === 4 && shown(s)[3].text !== "");
  const seen = (await messagesOnPage(page))[3].text;
  await page.click("text=Stop");
  s = await settled(page, id, idle);
  assert.equal(shown(s)[3].text, seen);
  await release("halt");
  // An approval.
  await page.fill("input[aria-label=message]", "confirm it");
  await page.click("button[type=submit]");
  await page.locator("text=Approve").waitFor();
  await screenshot(page, "react-approval");
  await page.click("text=Approve");
  s = await settled(page, id, (s) => idle(s) && s.messages.length === 6);
  assert.equal(shown(s)[5].tools[0], "c1:output-available");
  assert.deepEqual(page.errors, []);
  await page.context().close();
});
