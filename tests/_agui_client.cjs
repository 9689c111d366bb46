// One conversation with the AG-UI endpoint through @ag-ui/client's HttpAgent (node 20):
// a first run that ends on an approval (interrupt), its resume, which ends waiting for the
// frontend tool pick_color, and the run with that tool's result. Prints what the client
// saw as one JSON object on standard output.
// usage: NODE_PATH=<dir with @ag-ui/client> node _agui_client.cjs URL TOKEN THREAD
const { HttpAgent, buildResumeArray } = require("@ag-ui/client");

const [url, token, threadId] = process.argv.slice(2);
const PICK = {
  name: "pick_color",
  description: "Ask the user to pick a colour",
  parameters: { type: "object", properties: { options: { type: "array", items: { type: "string" } } } },
};

async function run(agent, params) {
  const seen = { events: [], finished: null, errors: [] };
  const subscriber = {
    onEvent: ({ event }) => { seen.events.push(event); },
    onRunFinishedEvent: (finished) => {
      seen.finished = { outcome: finished.outcome, result: finished.result,
        pendingToolCallIds: finished.pendingToolCallIds, interrupts: finished.interrupts };
    },
    onRunErrorEvent: ({ event }) => { seen.errors.push(event); },
  };
  try {
    const done = await agent.runAgent(params, subscriber);
    seen.result = done.result === undefined ? null : done.result;
  } catch (error) {
    seen.rejected = { message: String(error && error.message), status: error.status, payload: error.payload };
  }
  seen.pendingInterrupts = agent.pendingInterrupts;
  return seen;
}

(async () => {
  const agent = new HttpAgent({ url, threadId, headers: { Authorization: `Bearer ${token}` },
    initialState: { theme: "dark" } });
  agent.addMessage({ id: "u1", role: "user", content: "the Q3 report" });
  const runs = [await run(agent, { tools: [PICK] })];
  const asked = agent.pendingInterrupts.map((each) => each.id);
  const answers = Object.fromEntries(asked.map((id) => [id, { status: "resolved", payload: { approved: true } }]));
  runs.push(await run(agent, { tools: [PICK], resume: buildResumeArray(agent.pendingInterrupts, answers) }));
  for (const call of (runs[1].finished && runs[1].finished.pendingToolCallIds) || []) {
    agent.addMessage({ id: `tm-${call}`, role: "tool", toolCallId: call, content: "blue" });
  }
  runs.push(await run(agent, { tools: [PICK] }));
  process.stdout.write(JSON.stringify({ runs, messages: agent.messages, state: agent.state }));
})().catch((error) => { console.error("FATAL", error); process.exit(1); });
