// murmurd console: the card, the tasks (live from GET /stream), one task (live from
// GET /tasks/{id}/stream, its trace events from GET /tasks/{id}/trace), reply, cancel, new task.
// Every string from the daemon is untrusted (model, tool and peer text): it reaches the page
// through textContent only, never as markup.
//
// Access (docs/console.md): when the daemon answers 401 the page asks for a bearer token, keeps
// it in sessionStorage (this tab only; never localStorage, never the URL), sends it as
// `Authorization: Bearer` on its fetch calls, and opens each EventSource with a short-lived
// stream ticket minted for that one stream (POST /auth/stream-ticket); a ticket that expired
// before a reconnection is refused (401), and the page mints a new one and resumes with ?after=.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const TERMINAL = new Set(["completed", "failed", "canceled", "rejected"]);
  const RECONNECT_MS = 2000;
  const TOKEN_KEY = "murmurd.console.token";
  const TRACE_SHOWN = 300; // characters of one trace event's fields shown
  const tasks = new Map(); // id -> {id, state, label, order, question, since, who}
  const AGE_TICK_MS = 15000; // how often the list's "waiting 3m" ages are redrawn
  let newest = 0; // the order given to the next task that appears
  let current = null; // the open task: {id, source, seen, lastId, closed, turnEnded, answer}
  let title = "murmurd";
  let rpcId = 0;
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let watch = null; // the watch stream's EventSource
  let watchLastId = "";

  // -- helpers -------------------------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function stateName(value) {
    // A2A 1.0 spells states TASK_STATE_INPUT_REQUIRED; the upstream frames input-required.
    if (typeof value !== "string") return "unknown";
    return value.startsWith("TASK_STATE_") ? value.slice(11).toLowerCase().replace(/_/g, "-") : value;
  }

  function partsText(parts) {
    return (Array.isArray(parts) ? parts : []).map((part) => {
      if (part && typeof part.text === "string") return part.text;
      if (part && part.data !== undefined) return JSON.stringify(part.data);
      return part && (part.file || part.url || part.raw) ? "[file]" : "";
    }).join("");
  }

  function contentText(content) {
    return typeof content === "string" ? content : JSON.stringify(content);
  }

  function messageId() {
    return "console-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2);
  }

  // -- access ------------------------------------------------------------------------------

  class Locked extends Error {}

  function authHeaders(extra) {
    return Object.assign(token ? {authorization: "Bearer " + token} : {}, extra || {});
  }

  function needToken(message) {
    // The daemon refused the credential (none, unknown, expired, revoked): forget it, stop the
    // streams, ask for one.
    token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    if (watch) watch.close();
    watch = null;
    if (current && current.source) current.source.close();
    $("login-message").textContent = message || "This daemon requires a bearer token.";
    $("login").hidden = false;
    $("forget-token").hidden = true;
    setConnection("locked", "token required");
    throw new Locked(message || "a bearer token is required");
  }

  async function authedFetch(url, init) {
    const response = await fetch(url, Object.assign({}, init, {headers: authHeaders((init || {}).headers)}));
    if (response.status === 401) {
      let detail = "";
      try { detail = (await response.json()).error.message; } catch (error) { /* not JSON */ }
      needToken(detail);
    }
    return response;
  }

  async function rpc(method, params) {
    const response = await authedFetch("/", {
      method: "POST",
      headers: {"content-type": "application/json"},
      body: JSON.stringify({jsonrpc: "2.0", id: ++rpcId, method, params}),
    });
    const body = await response.json();
    if (body.error) throw new Error(body.error.message || "request failed");
    return body.result;
  }

  async function streamUrl(path, shownPath, after) {
    // The URL of a GET stream: with a token, a ticket minted for exactly `path` (the decoded
    // path the daemon routes); never the token itself.
    const query = new URLSearchParams();
    if (after) query.set("after", after);
    if (token) {
      const response = await authedFetch("/auth/stream-ticket", {
        method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify({path}),
      });
      const body = await response.json();
      if (!response.ok) throw new Error((body.error && body.error.message) || "no stream ticket");
      query.set("ticket", body.ticket);
    }
    const text = query.toString();
    return shownPath + (text ? "?" + text : "");
  }

  function quietly(promise) {
    // A refusal that asked for the token is already on screen; anything else is shown.
    return promise.catch((error) => { if (!(error instanceof Locked)) showError(error); });
  }

  function showError(error) {
    const box = $("task-error");
    box.textContent = String(error && error.message ? error.message : error);
    box.hidden = false;
  }

  function setConnection(state, text) {
    const node = $("connection");
    node.dataset.state = state;
    node.textContent = text;
  }

  // -- the card ------------------------------------------------------------------------------

  async function loadCard() {
    const response = await fetch("/.well-known/agent-card.json");
    const card = await response.json();
    title = String(card.name || "murmurd");
    $("card-name").textContent = title;
    $("card-version").textContent = card.version ? "v" + card.version : "";
    $("card-description").textContent = card.description || "";
    const tools = $("card-tools");
    tools.replaceChildren(...((card.capabilities && card.capabilities.tools) || []).map((t) => el("li", "", String(t))));
    // Each artifact once: a tool is also an A2A skill on the card; Skills lists only the others.
    const toolNames = new Set(((card.capabilities && card.capabilities.tools) || []).map(String));
    const others = (card.skills || []).filter((s) => !toolNames.has(String(s.name || s.id)));
    $("card-skills-box").hidden = others.length === 0;
    const skills = $("card-skills");
    skills.replaceChildren(...others.map((s) => {
      const item = el("li", "", String(s.name || s.id));
      if (s.description) item.title = String(s.description);
      return item;
    }));
    renderList();
  }

  // -- the task list -------------------------------------------------------------------------

  function upsert(id, state, label) {
    if (typeof id !== "string") return;
    let task = tasks.get(id);
    if (!task) {
      task = {id, state, label: "", order: ++newest};
      tasks.set(id, task);
    }
    if (state) task.state = state;
    if (label && !task.label) task.label = label;
  }

  function firstUserText(task) {
    const first = (task.history || []).find((m) => m.role === "ROLE_USER");
    return first ? partsText(first.parts) : "";
  }

  function summarize(task) {
    // What the list shows beside the state: the question a waiting task asks, since when, who sent it.
    const known = tasks.get(task.id);
    if (!known) return;
    const status = task.status || {};
    const origin = (task.metadata && task.metadata.murmurd) || {};
    known.question = stateName(status.state) === "input-required" && status.message ? partsText(status.message.parts) : "";
    known.since = Date.parse(status.timestamp || "") || known.since || Date.now();
    known.who = String(origin.principal || origin.origin || "");
  }

  async function labelFromTask(id) {
    try {
      const task = await rpc("GetTask", {id});
      upsert(id, stateName(task.status && task.status.state), firstUserText(task));
      summarize(task);
      renderList();
    } catch (error) {
      // gone already (retention) or refused: the row keeps showing the id
    }
  }

  function age(since) {
    const seconds = Math.max(0, Math.round((Date.now() - since) / 1000));
    if (seconds < 60) return seconds + "s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + "m";
    const hours = Math.floor(minutes / 60);
    return hours < 24 ? hours + "h " + (minutes % 60) + "m" : Math.floor(hours / 24) + "d " + (hours % 24) + "h";
  }

  async function refreshList() {
    const result = await rpc("ListTasks", {pageSize: 100});
    const listed = result.tasks || [];
    // The store lists newest first: keep that order, below any task seen live since.
    listed.slice().reverse().forEach((task) => {
      const known = tasks.get(task.id);
      upsert(task.id, stateName(task.status && task.status.state), firstUserText(task));
      summarize(task);
      if (!known) tasks.get(task.id).order = ++newest;
    });
    renderList();
  }

  function renderList() {
    const filter = $("state-filter").value;
    const shown = [...tasks.values()].filter((t) => !filter || t.state === filter).sort((a, b) => b.order - a.order);
    const focused = document.activeElement && document.activeElement.closest
      ? document.activeElement.closest("#task-list li") : null;
    const focusedId = focused ? focused.dataset.taskId : null;
    $("task-list").replaceChildren(...shown.map((task) => {
      const item = el("li", task.state);
      item.dataset.taskId = task.id;
      item.dataset.state = task.state;
      // The row is a button: reachable with Tab, opened with Enter or Space, its focus visible.
      const open = el("button", "task-open");
      open.type = "button";
      open.title = task.id;
      if (current && current.id === task.id) {
        item.classList.add("selected");
        open.setAttribute("aria-current", "true");
      }
      const line = el("span", "task-line");
      line.append(el("span", "badge " + task.state, task.state), el("span", "task-label", task.label || task.id));
      open.append(line);
      if (task.state === "input-required") {
        const meta = el("span", "task-meta");
        meta.append(el("span", "task-question", task.question ? "asks: " + task.question : "waits for input"),
                    el("span", "task-waited", "waiting " + age(task.since || Date.now())),
                    el("span", "task-who", task.who ? "from " + task.who : ""));
        open.append(meta);
      }
      open.addEventListener("click", () => openTask(task.id));
      item.append(open);
      return item;
    }));
    if (focusedId) {
      const again = document.querySelector(`#task-list li[data-task-id="${CSS.escape(focusedId)}"] button`);
      if (again) again.focus();
    }
    $("tasks-empty").hidden = tasks.size > 0;
    const waiting = [...tasks.values()].filter((t) => t.state === "input-required").length;
    const count = $("waiting-count");
    count.hidden = waiting === 0;
    count.textContent = waiting + " waiting";
    document.title = (waiting ? "(" + waiting + ") " : "") + title + " · murmurd console";
  }

  async function connectWatch() {
    if (watch) watch.close();
    let url;
    try {
      url = await streamUrl("/stream", "/stream", watchLastId);
    } catch (error) {
      if (error instanceof Locked) return;
      setConnection("reconnecting", "reconnecting…");
      setTimeout(connectWatch, RECONNECT_MS);
      return;
    }
    const source = new EventSource(url);
    watch = source;
    source.addEventListener("open", () => {
      setConnection("live", "live");
      quietly(refreshList());  // (re)connected: catch up on what happened meanwhile
      if (current) quietly(refreshTask(current));
    });
    source.addEventListener("status", (event) => {
      if (event.lastEventId) watchLastId = event.lastEventId;
      const frame = JSON.parse(event.data);
      const known = tasks.has(frame.id);
      const state = stateName(frame.status && frame.status.state);
      upsert(frame.id, state);
      renderList();
      // someone else's new task: show what it asks; a task that starts waiting: its question and since when
      if (!known || state === "input-required") labelFromTask(frame.id);
    });
    source.addEventListener("gap", () => quietly(refreshList()));
    source.addEventListener("error", () => {
      if (watch !== source) return;
      setConnection("reconnecting", "reconnecting…");
      if (source.readyState === EventSource.CLOSED) {
        // refused outright (a 503, or a 401 for a ticket that expired before this reconnection):
        // mint a fresh ticket and retry ourselves
        setTimeout(() => { if (watch === source) connectWatch(); }, RECONNECT_MS);
      }
    });
  }

  // -- one task ------------------------------------------------------------------------------

  function setState(view, state, message) {
    view.state = state;
    const badge = $("task-state");
    badge.textContent = state;
    badge.className = "badge " + state;
    $("task-status-message").textContent = message || "";
    $("reply").hidden = state !== "input-required";
    $("cancel-task").hidden = TERMINAL.has(state);
    upsert(view.id, state);
    renderList();
  }

  async function refreshTask(view) {
    const task = await rpc("GetTask", {id: view.id});
    if (current !== view) return;
    const state = stateName(task.status && task.status.state);
    const message = task.status && task.status.message ? partsText(task.status.message.parts) : "";
    // The questions the task asked, each where it was asked: before the reply that answered it
    // (remembered from when this page saw it waiting), and the open one at the end.
    const history = task.history || [];
    if (state === "input-required" && message && !view.questions.some((q) => q.at === history.length)) {
      view.questions.push({at: history.length, text: message});
    }
    const items = [];
    history.forEach((m, index) => {
      view.questions.filter((q) => q.at === index).forEach((q) => items.push(questionItem(q.text)));
      const item = el("li", m.role === "ROLE_USER" ? "user" : "agent");
      item.append(el("span", "role", m.role === "ROLE_USER" ? "user" : "agent"), el("span", "text", partsText(m.parts)));
      items.push(item);
    });
    view.questions.filter((q) => q.at >= history.length).forEach((q) => items.push(questionItem(q.text)));
    $("task-messages").replaceChildren(...items);
    upsert(view.id, state, firstUserText(task));
    summarize(task);
    if (!view.streamState) setState(view, state, message);
    quietly(loadTrace(view));  // beside, not before, the stream: it must not hold the answer up
  }

  function questionItem(text) {
    const item = el("li", "agent question");
    item.append(el("span", "role", "asks"), el("span", "text", text));
    return item;
  }

  function traceLine(event) {
    const rest = Object.assign({}, event);
    ["event_type", "session_id", "timestamp", "task_id"].forEach((key) => delete rest[key]);
    let fields = JSON.stringify(rest);
    if (fields.length > TRACE_SHOWN) fields = fields.slice(0, TRACE_SHOWN) + "…";
    const item = el("li");
    const time = typeof event.timestamp === "number" ? new Date(event.timestamp).toISOString().slice(11, 23) : "";
    item.append(el("span", "trace-time", time), el("span", "trace-type", String(event.event_type)),
                el("span", "trace-fields", fields === "{}" ? "" : fields));
    return item;
  }

  async function loadTrace(view) {
    // Trace events are for operator credentials (403 for a peer's): the box shows them or says so.
    const response = await authedFetch("/tasks/" + encodeURIComponent(view.id) + "/trace");
    if (current !== view) return;
    if (response.status === 403) {
      $("trace-box").hidden = true;
      $("trace-note").hidden = false;
      return;
    }
    if (!response.ok) return;  // gone (retention) or unreadable: nothing to show
    const body = await response.json();
    if (current !== view) return;
    const events = Array.isArray(body.events) ? body.events : [];
    $("trace-note").hidden = true;
    $("trace-box").hidden = false;
    $("trace-count").textContent = String(events.length) + (body.truncated ? "+" : "");
    $("task-trace").replaceChildren(...events.map(traceLine));
  }

  function fresh(view, event) {
    // Each event once, however often a reconnection replays it. A frame without an id (the
    // closing status of a task whose events left the buffer) keeps the previous lastEventId.
    const id = event.lastEventId;
    const previous = event.target.previousId || "";
    event.target.previousId = id;
    if (!id || id === previous) return true;
    if (view.seen.has(id)) return false;
    view.seen.add(id);
    view.lastId = id;
    return true;
  }

  function appendAnswer(view, text) {
    if (view.turnEnded && view.answer) text = "\n" + text;
    view.turnEnded = false;
    view.answer += text;
    $("task-answer").textContent = view.answer;
  }

  async function connectTaskStream(view) {
    let url;
    try {
      url = await streamUrl("/tasks/" + view.id + "/stream", "/tasks/" + encodeURIComponent(view.id) + "/stream",
                            view.lastId);
    } catch (error) {
      if (error instanceof Locked) return;
      setTimeout(() => { if (current === view && !view.closed) connectTaskStream(view); }, RECONNECT_MS);
      return;
    }
    if (current !== view || view.closed) return;
    const source = new EventSource(url);
    view.source = source;
    source.addEventListener("gap", () => view.seen.clear());  // ids restart with a new daemon
    source.addEventListener("text", (event) => {
      if (!fresh(view, event)) return;
      const frame = JSON.parse(event.data);
      if (frame.source === "tool") return;  // a tool's live output, not the answer
      if (frame.text) appendAnswer(view, String(frame.text));
      if (frame.final) view.turnEnded = true;
    });
    source.addEventListener("thinking", (event) => {
      if (!fresh(view, event)) return;
      const frame = JSON.parse(event.data);
      $("thinking-box").hidden = false;
      $("task-thinking").textContent += String(frame.text || "");
    });
    source.addEventListener("artifact", (event) => {
      if (!fresh(view, event)) return;
      const artifact = JSON.parse(event.data).artifact || {};
      const item = el("li");
      item.append(el("span", "tool-name", String(artifact.tool_name || "artifact")),
                  el("span", "tool-content", contentText(artifact.content)));
      $("task-artifacts").append(item);
    });
    source.addEventListener("error", (event) => {
      if (event.data === undefined) {  // the connection's error, not an `error` frame
        if (source.readyState === EventSource.CLOSED && !view.closed && current === view) {
          setTimeout(() => { if (current === view && !view.closed) connectTaskStream(view); }, RECONNECT_MS);
        }
        return;
      }
      if (!fresh(view, event)) return;
      showError(JSON.parse(event.data).message || event.data);
    });
    source.addEventListener("status", (event) => {
      if (!fresh(view, event)) return;
      const frame = JSON.parse(event.data);
      const status = frame.status || {};
      const state = stateName(status.state);
      view.streamState = state;
      setState(view, state, typeof status.message === "string" ? status.message : "");
      if (state === "completed" && typeof status.response === "string") {
        // the stored answer replaces what the turns streamed: the console shows what tasks/get returns
        view.answer = status.response;
        $("task-answer").textContent = view.answer;
      }
      if (frame.final) {
        view.closed = true;
        source.close();
      }
      quietly(refreshTask(view));
    });
  }

  async function openTask(id) {
    if (current && current.source) current.source.close();
    const view = {id, source: null, seen: new Set(), lastId: "", closed: false, turnEnded: false, answer: "",
                  streamState: "", questions: []};
    current = view;
    $("task-pane").hidden = false;
    $("empty-pane").hidden = true;
    $("task-id").textContent = id;
    $("task-answer").textContent = "";
    $("task-thinking").textContent = "";
    $("thinking-box").hidden = true;
    $("task-artifacts").replaceChildren();
    $("task-messages").replaceChildren();
    $("task-error").hidden = true;
    $("task-trace").replaceChildren();
    $("trace-box").hidden = true;
    $("trace-note").hidden = true;
    $("reply-text").value = "";
    renderList();
    try {
      await refreshTask(view);
    } catch (error) {
      if (error instanceof Locked) return;
      showError(error);
    }
    if (current === view) connectTaskStream(view);
  }

  // -- actions -------------------------------------------------------------------------------

  $("new-task").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("new-task-text").value;
    try {
      const task = await rpc("message/send", {message: {messageId: messageId(), role: "user", parts: [{text}]}});
      $("new-task-text").value = "";
      upsert(task.id, stateName(task.status && task.status.state), text);
      renderList();
      openTask(task.id);
    } catch (error) {
      if (!(error instanceof Locked)) showError(error);
    }
  });

  $("reply").addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!current) return;
    const text = $("reply-text").value;
    try {
      await rpc("message/send", {message: {messageId: messageId(), role: "user", parts: [{text}], taskId: current.id}});
      $("reply-text").value = "";
      $("reply").hidden = true;
    } catch (error) {
      if (!(error instanceof Locked)) showError(error);
    }
  });

  // Cancel asks first (a canceled task cannot be resumed); the dialog is modal and keyboard-first.
  $("cancel-task").addEventListener("click", () => { if (current) $("cancel-dialog").showModal(); });
  $("cancel-keep").addEventListener("click", () => $("cancel-dialog").close());
  $("cancel-confirm").addEventListener("click", async () => {
    $("cancel-dialog").close();
    if (!current) return;
    try {
      await rpc("tasks/cancel", {id: current.id});
    } catch (error) {
      if (!(error instanceof Locked)) showError(error);
    }
  });

  $("state-filter").addEventListener("change", renderList);

  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    token = $("login-token").value.trim();
    $("login-token").value = "";
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("login").hidden = true;
    start();
  });

  $("forget-token").addEventListener("click", () => {
    quietly(Promise.resolve().then(() => needToken("Token forgotten. Enter a bearer token to go on.")));
    tasks.clear();
    current = null;
    $("task-pane").hidden = true;
    $("empty-pane").hidden = false;
    renderList();
  });

  async function start() {
    // The task list first: a 401 here asks for the token before any stream opens.
    try {
      await refreshList();
    } catch (error) {
      if (error instanceof Locked) return;
      showError(error);
    }
    $("forget-token").hidden = !token;
    connectWatch();
    if (current) openTask(current.id);
  }

  loadCard().catch(showError);
  setInterval(() => { if ([...tasks.values()].some((t) => t.state === "input-required")) renderList(); }, AGE_TICK_MS);
  start();
})();
