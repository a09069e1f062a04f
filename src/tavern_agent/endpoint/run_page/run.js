// The run page: renders a run's journal events as `tavern-agent runs show` does, and
// keeps following them while the run is running (server-sent events from ./events).
"use strict";
(function () {
  const head = document.querySelector("[data-run]");
  if (!head) return;
  const runId = head.dataset.run;
  const timeline = document.getElementById("timeline");
  const statusEl = document.getElementById("status");
  const liveEl = document.getElementById("live");
  const TERMINAL = {run_completed: "completed", run_partial_success: "partial_success",
                    run_failed: "failed", run_cancelled: "cancelled"};
  const depth = {};     // invocation id -> nesting level of a child invocation
  const agentOf = {};   // invocation id -> agent id
  const callInv = {};   // call id -> invocation id
  const callItem = {};  // call id -> the <li> of its request, where its result goes
  let lastSeq = 0;

  function short(value, limit) {
    let text = typeof value === "string" ? value : JSON.stringify(value);
    text = (text || "").split(/\s+/).join(" ").trim();
    return text.length <= limit ? text : text.slice(0, limit - 1) + "…";
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function full(label, value) {
    const box = el("details", "full");
    box.appendChild(el("summary", null, label));
    const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    box.appendChild(el("pre", null, text));
    return box;
  }

  function argumentsOf(p) {
    const data = p.arguments;
    if (data && typeof data === "object" && "raw" in data) return data.raw;
    return data === undefined ? "" : data;
  }

  function detail(kind, p) {
    if (kind === "tool_call_requested") return `${p.name} ${short(argumentsOf(p), 70)}`;
    if (kind === "tool_result_stored") {
      const r = p.result || {};
      return (r.isError ? `[${r.errorCode}] ` : "") + short(r.content, 100);
    }
    if (kind === "model_response_stored") {
      return `round ${p.round}, ${p.calls === undefined ? (p.message.calls || []).length : p.calls}`
        + ` call(s) ${short(p.message.text || "", 60)}`;
    }
    if (kind === "commit_confirmed" || kind === "commit_requested") {
      return `floor ${p.floor ?? ""} ${p.path || ""}`.trim();
    }
    if (kind in TERMINAL || kind === "reminder_added") {
      const rest = Object.assign({}, p);
      delete rest.text;
      return short(rest, 120);
    }
    if (kind === "task_started" || kind === "task_finished") {
      return `${p.taskId} ${p.agentId} → ${p.invocationId ?? ""} ${p.status || ""}`;
    }
    if (kind === "handoff_accepted") {
      return `to ${p.agentId} (${p.toInvocationId}, depth ${p.depth})`;
    }
    if (kind === "tool_call_completed" || kind === "tool_call_failed") {
      return `${p.name}: ${kind === "tool_call_failed" ? p.errorCode + ": " : ""}`
        + short(p.message || "", 100);
    }
    return "";
  }

  function render(event) {
    if (event.seq <= lastSeq) return;  // a reconnect replays from the start
    lastSeq = event.seq;
    const kind = event.type;
    const p = event.payload || {};
    if (kind === "invocation_started" && p.kind === "child") {
      depth[p.invocationId] = (depth[p.parentInvocationId || ""] || 0) + 1;
      agentOf[p.invocationId] = p.agentId || "";
    }
    if (kind === "tool_call_requested") callInv[p.callId] = p.invocationId;
    let owner = p.invocationId || callInv[p.callId || ""] || "";
    if (kind === "task_started") owner = p.parentInvocationId;
    const nest = depth[owner] || 0;

    const li = el("li", `event ${kind} level-${event.level}`);
    li.dataset.type = kind;
    li.dataset.seq = event.seq;
    li.style.marginLeft = `${nest * 1.5}em`;
    const line = el("div", "line");
    line.appendChild(el("span", "seq", String(event.seq)));
    line.appendChild(el("span", "time", (event.timestamp || "").slice(11, 23)));
    if (nest) line.appendChild(el("span", "agent", `[${agentOf[owner]}]`));
    line.appendChild(el("span", "kind", kind));
    line.appendChild(el("span", "detail", detail(kind, p)));
    li.appendChild(line);

    if (kind === "tool_call_requested") {
      li.dataset.call = p.callId;
      li.appendChild(full("arguments", argumentsOf(p)));
      callItem[p.callId] = li;
    } else if (kind === "tool_result_stored") {
      const r = p.result || {};
      if (r.isError) li.classList.add("error");
      li.dataset.call = p.callId;
      li.appendChild(full("result", r.content || ""));
      if (r.structured !== undefined && r.structured !== null) {
        li.appendChild(full("structured", r.structured));
      }
    } else if (kind === "model_response_stored" && (p.message.text || "").trim()) {
      li.appendChild(full("text", p.message.text));
    } else if (kind === "tool_call_failed") {
      li.classList.add("error");
    }
    if (kind in TERMINAL) {
      statusEl.textContent = TERMINAL[kind];
      statusEl.className = `status ${TERMINAL[kind]}`;
    }
    timeline.appendChild(li);
  }

  const source = new EventSource(`/runs/${encodeURIComponent(runId)}/events`);
  liveEl.textContent = "following…";
  source.onmessage = (message) => render(JSON.parse(message.data));
  source.addEventListener("end", () => {
    source.close();
    liveEl.textContent = "";
    document.body.dataset.ended = "true";
  });
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) liveEl.textContent = "disconnected";
  };
})();
