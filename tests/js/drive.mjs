// Drives a served capsule with the official JavaScript A2A SDK (@a2a-js/sdk), as a Node client
// would: the card, a blocking send, a stream, get, list (no filter, as the SDK sends it), a
// cancel, and an input-required reply. Prints one JSON object: what the SDK returned at each step.
// Usage: node drive.mjs BASE_URL (tests/test_js_sdk.py runs it against a real murmurd).
import { ClientFactory } from "@a2a-js/sdk/client";
import { Role, TaskState } from "@a2a-js/sdk";

const base = process.argv[2];
const out = { steps: [] };
const step = (name, value) => out.steps.push({ name, value });
let n = 0;
const message = (text, extra = {}) => ({
  messageId: `js-${Date.now()}-${n++}`, role: Role.ROLE_USER, parts: [{ content: { $case: "text", value: text } }],
  contextId: "", taskId: "", metadata: undefined, extensions: [], referenceTaskIds: [], ...extra,
});
const request = (msg, blocking = true) => ({
  tenant: "", message: msg, metadata: undefined,
  configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: !blocking },
});
const text = (parts) => (parts || []).map((p) => (p.content && p.content.$case === "text" ? p.content.value : "")).join("");
const stateName = (s) => TaskState[s];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(client, id, states, deadlineMs = 60000) {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const task = await client.getTask({ tenant: "", id, historyLength: undefined });
    if (states.includes(stateName(task.status.state))) return task;
    if (Date.now() > end) throw new Error(`task ${id} stayed ${stateName(task.status.state)}`);
    await sleep(50);
  }
}

try {
  const client = await new ClientFactory().createFromUrl(base);
  const card = await client.getAgentCard();
  step("card", { name: card.name, interfaces: card.supportedInterfaces.map((i) => [i.protocolBinding, i.protocolVersion]) });

  const sent = await client.sendMessage(request(message("hello from node")));
  const task = sent.$case === "task" ? sent.value : sent;
  step("send", { id: task.id, contextId: task.contextId, state: stateName(task.status.state),
    answer: text((task.artifacts || [])[0]?.parts) });

  const frames = [];
  let streamed = "";
  let streamId = null;
  for await (const event of client.sendMessageStream(request(message("streamed from node")))) {
    const kind = event.payload?.$case;
    frames.push(kind);
    const value = event.payload?.value;
    if (kind === "task") streamId = value.id;
    if (kind === "artifactUpdate" && value.artifact.name === "result") {
      streamId = value.taskId;
      streamed = value.append ? streamed + text(value.artifact.parts) : text(value.artifact.parts);
    }
    if (kind === "statusUpdate") streamId = value.taskId;
  }
  const stored = await client.getTask({ tenant: "", id: streamId, historyLength: undefined });
  step("stream", { frames, streamed, stored: text(stored.artifacts[0].parts), state: stateName(stored.status.state) });

  const got = await client.getTask({ tenant: "", id: task.id, historyLength: 0 });
  step("get", { id: got.id, state: stateName(got.status.state) });

  // listTasks with no filter: the SDK's JSON encoder writes the unset status as "UNRECOGNIZED"
  const sentBodies = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = (url, init) => {
    if (init && typeof init.body === "string") sentBodies.push(JSON.parse(init.body));
    return realFetch(url, init);
  };
  let listed;
  try {
    listed = await client.listTasks({});
  } finally {
    globalThis.fetch = realFetch;
  }
  const listRequest = sentBodies.find((b) => b.method === "ListTasks");
  step("list", { ids: listed.tasks.map((t) => t.id), sentStatus: listRequest ? listRequest.params.status ?? null : "not seen" });
  let invalid;
  try {
    await client.listTasks({ tenant: "", contextId: "", status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: "",
      pageSize: 100000, historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: undefined });
  } catch (err) {
    invalid = String(err && err.message);
  }
  step("list-invalid", { error: invalid });

  const hanging = await client.sendMessage(request(message("mode:hang"), false));
  const hangTask = hanging.$case === "task" ? hanging.value : hanging;
  await waitFor(client, hangTask.id, ["TASK_STATE_WORKING"]);
  const canceled = await client.cancelTask({ tenant: "", id: hangTask.id, metadata: undefined });
  step("cancel", { id: canceled.id, state: stateName(canceled.status.state) });

  const asking = await client.sendMessage(request(message("mode:ask"), false));
  const askTask = asking.$case === "task" ? asking.value : asking;
  const waiting = await waitFor(client, askTask.id, ["TASK_STATE_INPUT_REQUIRED"]);
  const replied = await client.sendMessage(request(message("yes, go on", { taskId: askTask.id, contextId: waiting.contextId })));
  const answered = replied.$case === "task" ? replied.value : replied;
  step("reply", { id: answered.id, state: stateName(answered.status.state), answer: text((answered.artifacts || [])[0]?.parts) });
} catch (err) {
  out.error = String(err && err.stack ? err.stack : err);
}
process.stdout.write(JSON.stringify(out) + "\n");
