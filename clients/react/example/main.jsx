// A small React app over useAgent (docs/clients.md): one session of one
// agent on the node that serves the page. npm run build bundles it into
// dist/app.js; clients/browser's tests run it in Chromium.
import { createRoot } from "react-dom/client";
import { StrictMode } from "react";
import { App } from "./App.jsx";

const q = new URLSearchParams(location.search);
const agent = q.get("agent") ?? "assistant";
const session = q.get("session") ?? `react-${crypto.randomUUID().slice(0, 8)}`;
createRoot(document.getElementById("root")).render(
  <StrictMode>
    <App api={`/v1/agents/${encodeURIComponent(agent)}`} id={session} />
  </StrictMode>,
);
