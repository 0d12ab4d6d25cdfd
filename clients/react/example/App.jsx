import { useState } from "react";
import { useAgent } from "../src/index.js";

const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");

export function App({ api, id }) {
  const agent = useAgent({ api, id });
  const [draft, setDraft] = useState("");
  const [error, setError] = useState(null);
  const act = (p) => p.catch((err) => setError(String(err.message ?? err)));
  const approvals = agent.messages.flatMap((m) => m.parts).filter((p) => p.state === "approval-requested");
  return (
    <main>
      <h1>
        {id} <small data-testid="status">{agent.status}</small> <small data-testid="connection">{agent.connection}</small>
      </h1>
      {error && <p role="alert">{error}</p>}
      {agent.messages.map((m) => (
        <div key={m.id} className={`message ${m.role}`} data-role={m.role}>
          {textOf(m)}
        </div>
      ))}
      {agent.indicator && <p data-testid="indicator">{agent.indicator}…</p>}
      {approvals.map((p) => (
        <p key={p.approval.id}>
          {p.type.replace(/^tool-/, "")} asks to run{" "}
          <button onClick={() => act(agent.approve(p.approval))}>Approve</button>{" "}
          <button onClick={() => act(agent.deny(p.approval, { reason: "no" }))}>Deny</button>
        </p>
      ))}
      {agent.state.inbox.items.length > 0 && <p data-testid="queued">{agent.state.inbox.items.length} queued</p>}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (!draft.trim()) return;
          act(agent.sendMessage(draft.trim()));
          setDraft("");
        }}
      >
        <input aria-label="message" value={draft} onChange={(e) => setDraft(e.target.value)} placeholder="Message" />
        <button type="submit">Send</button>
        <button type="button" disabled={!agent.state.active} onClick={() => act(agent.stop())}>
          Stop
        </button>
      </form>
    </main>
  );
}
