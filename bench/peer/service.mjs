// The bench suite's peer (cmd/node's BenchmarkPeerTurn): A2's durable
// 3-step turn as a Restate virtual object, one object per session. Each
// step is a durable ctx.run, journaled by the Restate server before the
// next one starts, as A2 persists each of its steps: the model step that
// asks for the calculator, the calculator, and the continuation; the
// object keeps the session's turn count in its durable state.
//
//	node service.mjs PORT
import * as restate from "@restatedev/restate-sdk";

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) throw new Error("usage: node service.mjs PORT");

const session = restate.object({
  name: "session",
  handlers: {
    turn: async (ctx, input) => {
      const text = typeof input?.text === "string" ? input.text : "";
      const step = await ctx.run("model step", () => ({
        text: "let me check",
        toolCalls: [{ id: `call-${text.length}`, name: "calculator", input: { expression: "6*7" } }],
      }));
      const call = step.toolCalls[0];
      const result = await ctx.run("tool", () => ({ toolCallId: call.id, output: { result: 6 * 7 } }));
      const answer = await ctx.run("continuation", () => ({ text: `the answer is forty two (${result.output.result})` }));
      const turns = ((await ctx.get("turns")) ?? 0) + 1;
      ctx.set("turns", turns);
      return { turns, text: `${step.text} ${answer.text}` };
    },
  },
});

restate.serve({ services: [session], port });
