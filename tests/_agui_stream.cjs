// A thread's run through @ag-ui/client's HttpAgent (node 20) that tells, on a line of its
// own ("first <event>"), the moment the first TEXT_MESSAGE_CONTENT reaches the client, and
// when the run is over prints every event and the messages the client built as JSON.
// With "abort", the client goes (abortRun) at that first piece instead, then says so
// ("aborted <event types>") and sends the thread a second prompt, saying "started" when
// that run starts; the server learns that a client went at its next write, and until it
// has, the thread is running (409), so the client retries as a page would.
// usage: NODE_PATH=<dir with @ag-ui/client> node _agui_stream.cjs URL TOKEN THREAD [abort]
const { HttpAgent } = require("@ag-ui/client");

const [url, token, threadId, mode] = process.argv.slice(2);
const say = (line) => process.stdout.write(`${line}\n`);
const RETRY_MS = 20;
const RETRY_FOR_MS = 20000;

async function second(agent) {
  agent.addMessage({ id: "u2", role: "user", content: "tell me another" });
  const events = [];
  const onEvent = ({ event }) => {
    events.push(event);
    if (event.type === "RUN_STARTED") say("started");
  };
  for (const deadline = Date.now() + RETRY_FOR_MS; ;) {
    try {
      await agent.runAgent({ tools: [] }, { onEvent });
      return events;
    } catch (error) {
      if (error.status !== 409 || Date.now() > deadline) throw error;
      await new Promise((done) => setTimeout(done, RETRY_MS));
    }
  }
}

(async () => {
  const agent = new HttpAgent({ url, threadId, headers: { Authorization: `Bearer ${token}` } });
  agent.addMessage({ id: "u1", role: "user", content: "tell me a story" });
  let events = [];
  const onEvent = ({ event }) => {
    events.push(event);
    if (event.type === "TEXT_MESSAGE_CONTENT" && events.filter((e) => e.type === event.type).length === 1) {
      if (mode === "abort") agent.abortRun();
      else say(`first ${JSON.stringify(event)}`);
    }
  };
  await agent.runAgent({ tools: [] }, { onEvent });
  if (mode === "abort") {
    say(`aborted ${JSON.stringify(events.map((e) => e.type))}`);
    events = await second(agent);
  }
  say(JSON.stringify({ events, messages: agent.messages }));
})().catch((error) => { console.error("FATAL", error); process.exit(1); });
