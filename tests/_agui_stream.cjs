// One run of a thread through @ag-ui/client's HttpAgent (node 20) that tells, on a line of
// its own ("first <event>"), the moment the first TEXT_MESSAGE_CONTENT reaches the client,
// and when the run is over prints every event and the messages the client built as JSON.
// usage: NODE_PATH=<dir with @ag-ui/client> node _agui_stream.cjs URL TOKEN THREAD
const { HttpAgent } = require("@ag-ui/client");

const [url, token, threadId] = process.argv.slice(2);

(async () => {
  const agent = new HttpAgent({ url, threadId, headers: { Authorization: `Bearer ${token}` } });
  agent.addMessage({ id: "u1", role: "user", content: "tell me a story" });
  const events = [];
  const onEvent = ({ event }) => {
    events.push(event);
    if (event.type === "TEXT_MESSAGE_CONTENT" && events.filter((e) => e.type === event.type).length === 1) {
      process.stdout.write(`first ${JSON.stringify(event)}\n`);
    }
  };
  await agent.runAgent({ tools: [] }, { onEvent });
  process.stdout.write(`${JSON.stringify({ events, messages: agent.messages })}\n`);
})().catch((error) => { console.error("FATAL", error); process.exit(1); });
