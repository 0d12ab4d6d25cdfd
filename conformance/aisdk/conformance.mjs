// The AI SDK conformance suite: it drives turns on an A2 node in test mode
// (node --script conformance/aisdk/script.json) through the chat route with
// the ai package's own DefaultChatTransport, and checks with the package's
// own code that
//   - every chunk passes uiMessageChunkSchema (the transport parses each),
//   - the chunks of each response, rebuilt with readUIMessageStream, equal
//     the message A2 folded (GET .../state),
//   - every message of the session passes validateUIMessages and
//     convertToModelMessages accepts them.
// Usage: node conformance.mjs http://127.0.0.1:PORT
// It prints one line per check and exits 1 when any failed; a difference
// is printed as the two messages side by side.
import { readFileSync } from 'node:fs';
import {
  DefaultChatTransport,
  readUIMessageStream,
  validateUIMessages,
  convertToModelMessages,
  uiMessageChunkSchema,
} from 'ai';
import { safeValidateTypes } from '@ai-sdk/provider-utils';

const base = process.argv[2];
if (!base) {
  console.error('usage: node conformance.mjs http://127.0.0.1:PORT');
  process.exit(2);
}
const agent = 'assistant';
const api = `${base}/v1/agents/${agent}/chat`;
const version = JSON.parse(readFileSync(new URL('./node_modules/ai/package.json', import.meta.url))).version;
console.log(`ai@${version} against ${base}`);

let failures = 0;
const fail = (name, why) => {
  failures++;
  console.log(`FAIL ${name}: ${why}`);
};
const pass = name => console.log(`ok   ${name}`);

// sortKeys gives a value whose JSON does not depend on key order.
function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.keys(v).sort().map(k => [k, sortKeys(v[k])]));
  }
  return v;
}
const norm = v => sortKeys(JSON.parse(JSON.stringify(v ?? null)));

function sideBySide(a, b) {
  const x = JSON.stringify(a, null, 1).split('\n');
  const y = JSON.stringify(b, null, 1).split('\n');
  const w = Math.max(...x.map(l => l.length), 30);
  const out = [`${'rebuilt from the chunks'.padEnd(w)} | A2's folded message`];
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const l = x[i] ?? '', r = y[i] ?? '';
    out.push(`${l.padEnd(w)} ${l === r ? '|' : '≠'} ${r}`);
  }
  return out.join('\n');
}

async function getState(chatId) {
  const r = await fetch(`${base}/v1/agents/${agent}/sessions/${chatId}/state`);
  if (!r.ok) throw new Error(`state: ${r.status} ${await r.text()}`);
  return (await r.json()).state;
}

async function push(chatId, payload, id) {
  const r = await fetch(`${base}/v1/agents/${agent}/sessions/${chatId}/events`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ events: [{ id, type: 'ai.control.requested', payload }] }),
  });
  if (!r.ok) throw new Error(`push ${payload.action}: ${r.status} ${await r.text()}`);
}

async function release(gate) {
  const r = await fetch(`${base}/v1/test/gates/${gate}`, { method: 'POST' });
  if (!r.ok) throw new Error(`gate ${gate}: ${r.status}`);
}

async function waitFor(chatId, pred, what) {
  for (let i = 0; i < 500; i++) {
    const s = await getState(chatId);
    if (pred(s)) return s;
    await new Promise(r => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// collect reads a chunk stream to its end (or until the abort signal
// fires), checking each chunk against the SDK's chunk schema.
async function collect(name, stream, onChunk) {
  const chunks = [];
  const reader = stream.getReader();
  for (;;) {
    let r;
    try {
      r = await reader.read();
    } catch (e) {
      if (e?.name === 'AbortError') break;
      throw e;
    }
    if (r.done) break;
    const v = await safeValidateTypes({ value: r.value, schema: uiMessageChunkSchema });
    if (!v.success) fail(name, `chunk ${JSON.stringify(r.value)} fails the chunk schema: ${v.error.message}`);
    chunks.push(r.value);
    if (process.env.DEBUG) console.log(name, JSON.stringify(r.value));
    if (onChunk && (await onChunk(r.value, chunks)) === 'stop') {
      await reader.cancel().catch(() => {});
      break;
    }
  }
  return chunks;
}

// rebuild builds the message from chunks with readUIMessageStream.
async function rebuild(chunks, message) {
  const errors = [];
  const stream = new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(ch);
      c.close();
    },
  });
  let last;
  // message: the client's copy the stream continues (useChat after an
  // approval answer); undefined rebuilds from empty.
  for await (const m of readUIMessageStream({ message: message && structuredClone(message), stream, onError: e => errors.push(e) })) last = m;
  return { message: last, errors };
}

async function send(chatId, messages, opts = {}) {
  const transport = new DefaultChatTransport({ api });
  const stream = await transport.sendMessages({
    chatId,
    messages,
    trigger: opts.trigger ?? 'submit-message',
    messageId: opts.messageId,
    abortSignal: opts.signal,
  });
  return collect(opts.name, stream, opts.onChunk);
}

// check compares the rebuilt response with A2's, and validates the
// session's messages with the SDK.
async function check(name, chunks, chatId, { expectErrors = [], continuing } = {}) {
  const { message, errors } = await rebuild(chunks, continuing);
  const got = errors.map(e => String(e?.message ?? e));
  for (const e of got) {
    if (!expectErrors.some(x => e.includes(x))) fail(name, `readUIMessageStream reported: ${e}`);
  }
  for (const x of expectErrors) {
    if (!got.some(e => e.includes(x))) fail(name, `expected the stream to report "${x}", it reported ${JSON.stringify(got)}`);
  }
  if (chunks.filter(c => c.type === 'start').length !== 1) fail(name, `want exactly one start chunk, got ${chunks.filter(c => c.type === 'start').length}`);
  if (chunks.at(-1)?.type !== 'finish') fail(name, `the stream does not end with finish: ${JSON.stringify(chunks.at(-1))}`);
  const s = await getState(chatId);
  const folded = s.messages.find(m => m.id === message?.id);
  if (!folded) {
    fail(name, `A2 has no message ${message?.id}; its messages: ${s.messages.map(m => m.id).join(', ')}`);
  } else if (JSON.stringify(norm(message)) !== JSON.stringify(norm(folded))) {
    fail(name, `the rebuilt message differs from A2's:\n${sideBySide(norm(message), norm(folded))}`);
  } else {
    pass(`${name}: the chunks rebuild A2's message (${folded.parts.length} parts)`);
  }
  try {
    await validateUIMessages({ messages: s.messages });
    await convertToModelMessages(s.messages);
    pass(`${name}: validateUIMessages and convertToModelMessages accept the session's ${s.messages.length} messages`);
  } catch (e) {
    fail(name, `the SDK refuses A2's messages: ${e.message}\n${JSON.stringify(s.messages, null, 1)}`);
  }
  return { message, state: s };
}

// Event IDs are unique across the store, as useChat's generated message IDs
// are: each chat gets its own.
const user = (id, text) => ({ id: `${id}-${Math.random().toString(36).slice(2, 10)}`, role: 'user', parts: [{ type: 'text', text }] });

const scenarios = {
  async text() {
    const chunks = await send('c-text', [user('u1', 'plain please')], { name: 'text' });
    await check('text', chunks, 'c-text');
    const last = chunks.at(-1);
    if (last?.finishReason !== 'stop') fail('text', `finishReason ${last?.finishReason}, want stop`);
  },
  async tools() {
    const chunks = await send('c-tools', [user('u1', 'use tools')], { name: 'tools' });
    const { message } = await check('reasoning, parallel tool calls and tool errors', chunks, 'c-tools');
    const states = message.parts.filter(p => p.type.startsWith('tool-')).map(p => `${p.toolCallId}:${p.state}`);
    const want = ['t1:output-available', 't2:output-error', 't3:output-error'];
    if (JSON.stringify(states) !== JSON.stringify(want)) fail('tools', `tool parts ${states}, want ${want}`);
    if (!message.parts.some(p => p.type === 'reasoning')) fail('tools', 'no reasoning part');
  },
  async approval() {
    const chat = 'c-approval';
    const u = user('u1', 'approval needed');
    const first = await send(chat, [u], { name: 'approval' });
    const { message } = await check('approval requested', first, chat);
    if (first.at(-1)?.finishReason !== 'tool-calls') fail('approval', `finishReason ${first.at(-1)?.finishReason}, want tool-calls`);
    // What useChat's addToolApprovalResponse does, then sends.
    const answered = structuredClone(message);
    const part = answered.parts.find(p => p.state === 'approval-requested');
    if (!part) return fail('approval', 'no part waits for approval');
    part.state = 'approval-responded';
    part.approval = { ...part.approval, approved: true };
    const second = await send(chat, [u, answered], { name: 'approval answered' });
    // useChat continues its copy of the response (chat.ts makeRequest).
    const { message: done } = await check('approval answered', second, chat, { continuing: answered });
    const p = done.parts.find(x => x.toolCallId === part.toolCallId);
    if (p?.state !== 'output-available') fail('approval', `the approved call is ${p?.state}, want output-available`);
  },
  async retry() {
    const chat = 'c-retry';
    const u = user('u1', 'fail once');
    const first = await send(chat, [u], { name: 'provider error' });
    const { message } = await check('provider error', first, chat, { expectErrors: ['provider overloaded'] });
    // useChat's regenerate() drops the response and sends the rest.
    const second = await send(chat, [u], { name: 'retry', trigger: 'regenerate-message', messageId: message.id });
    const { message: after } = await check('retry after the provider error', second, chat);
    if (!after.parts.some(p => p.type === 'text' && p.text.includes('Recovered'))) fail('retry', 'the retried answer is missing');
    if (after.id !== message.id) fail('retry', `the retry answered in ${after.id}, not the failed response ${message.id}`);
  },
  async stop() {
    const chat = 'c-stop';
    let stopped = false;
    const chunks = await send(chat, [user('u1', 'stopme now')], {
      name: 'stop',
      async onChunk(c) {
        if (c.type === 'text-delta' && !stopped) {
          stopped = true;
          const s = await getState(chat);
          // The user saw entries 0..2 (start, start-step, text-start).
          await push(chat, { action: 'stop', turnId: s.active.turnId, lastSeenIndex: 2 }, `stop-${chat}-${Date.now()}`);
        }
      },
    });
    await release('stopgate');
    await check('stop at the seen index mid-stream', chunks, chat);
    if (chunks.at(-1)?.finishReason !== 'interrupted') fail('stop', `finishReason ${chunks.at(-1)?.finishReason}, want interrupted`);
    if (!chunks.some(c => c.type === 'reset-step')) fail('stop', 'the chunks past the seen index were not taken back');
  },
  async pause() {
    const chat = 'c-pause';
    let paused = false;
    const chunks = await send(chat, [user('u1', 'pauseme please')], {
      name: 'pause',
      async onChunk(c) {
        if (c.type === 'text-delta' && !paused) {
          paused = true;
          await push(chat, { action: 'pause', when: 'now' }, `pause-${chat}-${Date.now()}`);
          await waitFor(chat, s => s.status === 'paused', 'the pause');
          await push(chat, { action: 'resume' }, `resume-${chat}-${Date.now()}`);
        }
      },
    });
    await release('pausegate').catch(() => {});
    const { message } = await check('pause now, then resume', chunks, chat);
    if (message.parts.some(p => p.type === 'text' && p.text.includes('alpha'))) fail('pause', 'the superseded attempt is still in the message');
  },
  async reconnect() {
    const chat = 'c-reconnect';
    const ac = new AbortController();
    const before = await send(chat, [user('u1', 'reconnect me')], {
      name: 'reconnect',
      signal: ac.signal,
      onChunk: c => (c.type === 'text-delta' ? 'stop' : undefined),
    });
    ac.abort();
    if (!before.some(c => c.type === 'text-delta')) fail('reconnect', 'no text before the disconnect');
    const transport = new DefaultChatTransport({ api });
    const resumed = await transport.reconnectToStream({ chatId: chat });
    if (!resumed) return fail('reconnect', 'reconnectToStream found no active stream');
    const releasing = release('regate');
    const chunks = await collect('reconnect', resumed);
    await releasing;
    await check('reconnect after a disconnect mid-stream', chunks, chat);
    const idle = await new DefaultChatTransport({ api }).reconnectToStream({ chatId: chat });
    if (idle !== null) fail('reconnect', 'reconnectToStream on an idle session did not answer "no stream" (204)');
    else pass('reconnect: an idle session has no stream to resume (204)');
  },
};

const only = process.env.ONLY?.split(',');
for (const [name, run] of Object.entries(scenarios)) {
  if (only && !only.includes(name)) continue;
  try {
    await run();
  } catch (e) {
    fail(name, e?.stack ?? String(e));
  }
}
console.log(failures === 0 ? 'conformance: all checks passed' : `conformance: ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
