// tavern-agent for SillyTavern: lends SillyTavern's function tools to the agent of
// `tavern-agent serve`, and shows the agent's runs as they happen.
//
// Connected to serve's extension host (its URL and token, set in the panel), it registers
// every function tool SillyTavern's ToolManager knows (not the stealth ones, and only those
// whose shouldRegister() says so) as the agent's extension tools `extension/sillytavern:<name>`,
// keeps that list in sync, and runs each call through ToolManager.invokeFunctionTool, the
// way SillyTavern runs its own tool calls. SillyTavern 1.12 has no ToolManager: there the
// tools are collected through the LLM_FUNCTION_TOOL_REGISTER event and called through
// LLM_FUNCTION_TOOL_CALL, as its openai.js does. The serve token is sent to serve only.

const MODULE = "tavern-agent";
const EXTENSION_ID = "sillytavern";
const SYNC_MS = 1000; // tools are compared this often: SillyTavern has no event for them
const RUNS_MS = 1000; // serve's running runs are looked for this often
const RECONNECT_MS = 3000;
const UNAVAILABLE = "tool.unavailable"; // the host answers: unavailable, no action was taken

const $id = (id) => document.getElementById(id);
const context = () => globalThis.SillyTavern.getContext();

const agent = {
  client: null, // the tavernAgent client while connected
  wanted: false, // the user asked to be connected
  lent: new Map(), // SillyTavern tool name -> {signature, toolId}
  refused: new Map(), // tool name -> {why, signature}: serve refused it; not offered again unchanged
  syncing: Promise.resolve(),
  followed: new Set(), // run ids already shown
  reconnect: null,
};

// ------------------------------------------------------------------ settings and panel

function settings() {
  const all = context().extensionSettings;
  const mine = all[MODULE] || (all[MODULE] = {});
  for (const key of ["url", "token", "endpoint"]) {
    if (typeof mine[key] !== "string") mine[key] = "";
  }
  return mine;
}

const PANEL = `
<div class="tavern-agent-settings">
  <div class="inline-drawer">
    <div class="inline-drawer-toggle inline-drawer-header">
      <b>tavern-agent</b>
      <div class="inline-drawer-icon fa-solid fa-circle-chevron-down down"></div>
    </div>
    <div class="inline-drawer-content">
      <label for="tavern_agent_url">serve URL (extension host)</label>
      <input id="tavern_agent_url" class="text_pole" type="url" placeholder="http://127.0.0.1:8787">
      <label for="tavern_agent_token">Token (printed by serve)</label>
      <input id="tavern_agent_token" class="text_pole" type="password" autocomplete="off">
      <label for="tavern_agent_endpoint">Agent endpoint (for runs; default: the Custom source's URL)</label>
      <input id="tavern_agent_endpoint" class="text_pole" type="url" placeholder="http://127.0.0.1:8788">
      <div class="tavern-agent-row">
        <div id="tavern_agent_connect" class="menu_button">Connect</div>
        <div id="tavern_agent_disconnect" class="menu_button">Disconnect</div>
      </div>
      <div id="tavern_agent_state" class="tavern-agent-state" data-state="disconnected">not connected</div>
      <div id="tavern_agent_tools" class="tavern-agent-tools"></div>
      <div id="tavern_agent_runs_note" class="tavern-agent-tools"></div>
      <div id="tavern_agent_run" class="tavern-agent-run"></div>
    </div>
  </div>
</div>`;

function addPanel() {
  const host = $id("extensions_settings2") || $id("extensions_settings");
  host.insertAdjacentHTML("beforeend", PANEL);
  for (const key of ["url", "token", "endpoint"]) {
    const input = $id(`tavern_agent_${key}`);
    input.value = settings()[key];
    input.addEventListener("input", () => {
      settings()[key] = input.value.trim();
      context().saveSettingsDebounced();
    });
  }
  $id("tavern_agent_connect").addEventListener("click", () => {
    agent.wanted = true;
    connect();
  });
  $id("tavern_agent_disconnect").addEventListener("click", () => {
    agent.wanted = false;
    disconnect("disconnected by you");
  });
}

function showState(state, text) {
  const node = $id("tavern_agent_state");
  node.dataset.state = state;
  node.textContent = text;
}

function showTools() {
  const lent = [...agent.lent.keys()].sort();
  const refused = [...agent.refused].map(([name, r]) => `${name} (refused: ${r.why})`);
  const text = agent.client
    ? `Lent to the agent: ${lent.length ? lent.join(", ") : "no tools"}`
      + (refused.length ? `. Not lent: ${refused.join("; ")}` : "")
    : "";
  $id("tavern_agent_tools").textContent = text;
  if (agent.client) {
    const where = settings().url;
    showState("connected", `connected to ${where}; ${lent.length} tool(s) lent`);
  }
}

// ------------------------------------------------------------------ the connection

function loadClient(base) {
  if (globalThis.tavernAgent) return Promise.resolve(globalThis.tavernAgent);
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = new URL("/ext/tavern-agent.js", base).href;
    script.onload = () => resolve(globalThis.tavernAgent);
    script.onerror = () => {
      script.remove();
      reject(new Error(`cannot load ${script.src}; is serve running there?`));
    };
    document.head.appendChild(script);
  });
}

async function connect() {
  clearTimeout(agent.reconnect);
  disconnect(null);
  const {url, token} = settings();
  if (!url || !token) {
    showState("disconnected", "Enter serve's URL and token, then Connect.");
    return;
  }
  showState("connecting", `connecting to ${url}…`);
  let client;
  try {
    const lib = await loadClient(url);
    client = await lib.connect(url, token);
  } catch (error) {
    showState("disconnected", `not connected: ${error.message}`);
    retry();
    return;
  }
  if (!agent.wanted) {
    client.close();
    return;
  }
  agent.client = client;
  client.closed.then(() => {
    if (agent.client !== client) return;
    agent.client = null;
    agent.lent.clear();
    showTools();
    showState("disconnected", "serve closed the connection; retrying");
    retry();
  });
  showTools();
  await sync();
}

function disconnect(reason) {
  const client = agent.client;
  agent.client = null;
  agent.lent.clear();
  agent.refused.clear();
  if (client) client.close();
  if (reason) {
    showState("disconnected", reason);
    showTools();
  }
}

function retry() {
  clearTimeout(agent.reconnect);
  if (agent.wanted) agent.reconnect = setTimeout(connect, RECONNECT_MS);
}

// ------------------------------------------------------------------ the tools

function nameOf(tool) {
  return tool.toFunctionOpenAI().function.name;
}

/** SillyTavern 1.12: tools are announced per request, on LLM_FUNCTION_TOOL_REGISTER. */
const legacy = () => !context().ToolManager;

function schemaOf(parameters) {
  return parameters && parameters.type === "object" ? parameters : {type: "object", properties: {}};
}

async function legacyOffered() {
  const offered = new Map();
  const {eventSource, eventTypes} = context();
  const registerFunctionTool = (name, description, parameters) => {
    offered.set(name, {description: description || name, parameters: schemaOf(parameters)});
  };
  const announce = {type: "normal", data: {}, registerFunctionTool};
  await eventSource.emit(eventTypes.LLM_FUNCTION_TOOL_REGISTER, announce);
  return offered;
}

/** A call as SillyTavern 1.12 makes it, but a listener's throw reaches the agent. */
async function legacyInvoke(name, args) {
  const {eventSource, eventTypes} = context();
  const call = {name, arguments: JSON.stringify(args)};
  // emit() would log and swallow a listener's error; the listeners are called the same way.
  for (const listener of (eventSource.events[eventTypes.LLM_FUNCTION_TOOL_CALL] || []).slice()) {
    await listener.call(eventSource, call);
  }
  return `${name} ran (SillyTavern 1.12 tools return no result).`;
}

/** The tools SillyTavern would offer a model now: not stealth, and shouldRegister() true. */
async function offeredTools() {
  if (legacy()) return legacyOffered();
  const offered = new Map();
  for (const tool of context().ToolManager.tools) {
    if (tool.stealth) continue;
    let register = false;
    try {
      register = await tool.shouldRegister();
    } catch (error) {
      console.warn(`[${MODULE}] shouldRegister of a tool failed`, error);
    }
    if (!register) continue;
    const fn = tool.toFunctionOpenAI().function;
    const description = fn.description || tool.displayName || fn.name;
    offered.set(fn.name, {description, parameters: schemaOf(fn.parameters)});
  }
  return offered;
}

function sync() {
  agent.syncing = agent.syncing.then(syncNow).catch((error) => {
    console.warn(`[${MODULE}] tool sync failed`, error);
  });
  return agent.syncing;
}

async function syncNow() {
  const client = agent.client;
  if (!client) return;
  const offered = await offeredTools();
  for (const [name, entry] of [...agent.lent]) {
    const now = offered.get(name);
    if (now && JSON.stringify(now) === entry.signature) continue;
    agent.lent.delete(name);
    try {
      await client.tools.unregister(entry.toolId);
    } catch (error) {
      console.warn(`[${MODULE}] could not withdraw ${name}`, error);
    }
  }
  for (const name of [...agent.refused.keys()]) {
    if (!offered.has(name)) agent.refused.delete(name);
  }
  for (const [name, tool] of offered) {
    const signature = JSON.stringify(tool);
    if (agent.lent.has(name) || (agent.refused.get(name) || {}).signature === signature) continue;
    const definition = {
      extensionId: EXTENSION_ID,
      name,
      description: tool.description,
      inputSchema: tool.parameters,
      contexts: ["chat"],
    };
    try {
      const toolId = await client.tools.register(definition, (args, ctx) => invoke(name, args, ctx));
      agent.lent.set(name, {signature, toolId});
      agent.refused.delete(name);
    } catch (error) {
      agent.refused.set(name, {why: error.message, signature});
    }
  }
  if (agent.client === client) showTools();
}

/** One call from the agent, run as SillyTavern runs a model's tool call. */
async function invoke(name, args, ctx) {
  const manager = context().ToolManager;
  let offered = false;
  try {
    if (manager) {
      const tool = manager.tools.find((t) => nameOf(t) === name);
      offered = !!tool && !tool.stealth && await tool.shouldRegister();
    } else {
      offered = (await legacyOffered()).has(name);
    }
  } catch {
    offered = false;
  }
  if (!offered) {
    sync();
    const error = new Error(`${name} is no longer offered by SillyTavern`);
    error.code = UNAVAILABLE;
    throw error;
  }
  if (ctx && ctx.runId) followRun(ctx.runId);
  if (!manager) return legacyInvoke(name, args);
  const result = await manager.invokeFunctionTool(name, args);
  if (result instanceof Error) throw result; // ToolManager returns, not throws, its errors
  if (typeof result === "string") {
    const text = result.trim();
    if (text.startsWith("{") || text.startsWith("[")) {
      try {
        return JSON.parse(text);
      } catch {
        return result;
      }
    }
  }
  return result;
}

// ------------------------------------------------------------------ the runs

/**
 * The agent endpoint's origin (its run page), or "" when the runs cannot be shown. It must
 * be on serve's host: the token goes to serve only, never to the Custom source's URL when
 * that is another server.
 */
function endpointBase() {
  const given = settings().endpoint || (context().chatCompletionSettings || {}).custom_url || "";
  let endpoint;
  let serve;
  try {
    endpoint = new URL(given);
    serve = new URL(settings().url);
  } catch {
    showRunsNote("Runs are shown once the agent endpoint's URL is set.");
    return "";
  }
  if (endpoint.hostname !== serve.hostname) {
    showRunsNote(`Runs are not shown: the agent endpoint (${endpoint.host}) is not on serve's host.`);
    return "";
  }
  showRunsNote("");
  return endpoint.origin;
}

function showRunsNote(text) {
  const note = $id("tavern_agent_runs_note");
  if (note && note.textContent !== text) note.textContent = text;
}

function authorization() {
  return {Authorization: `Bearer ${settings().token}`};
}

async function pollRuns() {
  if (!agent.client) return;
  const base = endpointBase();
  if (!base) return;
  try {
    const response = await fetch(`${base}/runs.json?running=1`, {headers: authorization()});
    if (!response.ok) return;
    for (const run of await response.json()) followRun(run.runId);
  } catch {
    // serve's endpoint is not up (or not on the allow list): the tools still work
  }
}

function followRun(runId) {
  const base = endpointBase();
  if (!base || agent.followed.has(runId)) return;
  agent.followed.add(runId);
  const view = new RunView(runId, base);
  streamEvents(`${base}/runs/${encodeURIComponent(runId)}/events`, (event) => view.add(event))
    .catch((error) => view.note(`stopped following: ${error.message}`));
}

async function streamEvents(url, onEvent) {
  const response = await fetch(url, {headers: authorization()});
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {done, value} = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, {stream: true});
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (/^event: end$/m.test(block)) return;
      const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6));
      if (data.length) onEvent(JSON.parse(data.join("\n")));
    }
  }
}

const TERMINAL = {run_completed: "completed", run_partial_success: "partial_success",
                  run_failed: "failed", run_cancelled: "cancelled"};

function oneLine(text, limit = 160) {
  const line = String(text ?? "").split(/\s+/).join(" ").trim();
  return line.length <= limit ? line : line.slice(0, limit - 1) + "…";
}

/** A run as the panel shows it: rounds, each call with its one-line outcome, commits. */
class RunView {
  constructor(runId, base) {
    const root = $id("tavern_agent_run");
    root.replaceChildren();
    const head = document.createElement("div");
    head.className = "tavern-agent-run-head";
    const title = document.createElement("span");
    title.textContent = `run ${runId}`;
    this.status = document.createElement("span");
    this.status.className = "tavern-agent-run-status";
    this.status.textContent = "running";
    const link = document.createElement("a");
    // ?key= is traded for a session cookie at once, and leaves the address.
    link.href = `${base}/runs/${encodeURIComponent(runId)}?key=${encodeURIComponent(settings().token)}`;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    link.textContent = "run page";
    head.append(title, this.status, link);
    this.list = document.createElement("ol");
    root.append(head, this.list);
    root.dataset.run = runId;
  }

  item(cls, text) {
    const li = document.createElement("li");
    li.className = cls;
    li.textContent = text;
    this.list.appendChild(li);
  }

  note(text) {
    this.item("note", text);
  }

  add(event) {
    const p = event.payload || {};
    const kind = event.type;
    if (kind === "model_response_stored") {
      const said = oneLine((p.message || {}).text || "", 80);
      this.item("round", `round ${p.round}: ${p.calls} call(s)${said ? " " + said : ""}`);
    } else if (kind === "tool_call_completed") {
      this.item("call ok", `✓ ${p.name}: ${oneLine(p.message)}`);
    } else if (kind === "tool_call_failed") {
      this.item("call failed", `✗ ${p.name}: ${p.errorCode}: ${oneLine(p.message)}`);
    } else if (kind === "commit_confirmed") {
      this.item("commit", `⇢ chat floor ${p.floor ?? ""} updated`);
    } else if (kind in TERMINAL) {
      const why = p.errorCode ? `: ${p.errorCode} ${oneLine(p.message || "")}` : "";
      this.status.textContent = TERMINAL[kind];
      this.item(`end ${TERMINAL[kind]}`, `${TERMINAL[kind]}${why}`);
    }
  }
}

// ------------------------------------------------------------------ start

function start() {
  addPanel();
  setInterval(sync, SYNC_MS);
  setInterval(pollRuns, RUNS_MS);
  const {url, token} = settings();
  if (url && token) {
    agent.wanted = true;
    connect();
  } else {
    showState("disconnected", "Enter serve's URL and token, then Connect.");
  }
}

const context0 = globalThis.SillyTavern && context();
if (context0 && (context0.ToolManager || (context0.eventTypes || {}).LLM_FUNCTION_TOOL_REGISTER)) {
  start();
} else {
  console.warn(`[${MODULE}] this SillyTavern has no function tools; tavern-agent needs 1.12.6 or later`);
}
