// tavern-agent page client: register plain functions as agent tools.
//
//   const agent = await tavernAgent.connect("ws://127.0.0.1:PORT/ext/ws", token);
//   await agent.tools.register(
//     {extensionId: "weather", name: "forecast", description: "Forecast for a city.",
//      inputSchema: {type: "object", properties: {city: {type: "string"}},
//                    required: ["city"], additionalProperties: false},
//      contexts: ["chat", "session"]},
//     async (args, ctx) => ({city: args.city, sky: "clear"}));
//
// execute(args, ctx) gets ctx = {runId, invocationId, callId, target, signal}; the
// signal aborts when the run is cancelled or the call times out. Return plain JSON
// (undefined becomes null); a throw becomes an error result, and a throw of an error whose
// code is "tool.unavailable" tells the agent the tool is gone and no action was taken.
// Registrations belong to this connection and vanish when the page closes or reloads.
(function (global) {
  "use strict";
  const SUBPROTOCOL = "tavern-agent.v1";

  function wsUrl(url) {
    const u = new URL(url, global.location ? global.location.href : undefined);
    if (u.protocol === "http:") u.protocol = "ws:";
    if (u.protocol === "https:") u.protocol = "wss:";
    if (u.pathname === "/" || u.pathname === "") u.pathname = "/ext/ws";
    return u.toString();
  }

  class AgentError extends Error {
    constructor(code, message) {
      super(message);
      this.name = "AgentError";
      this.code = code;
    }
  }

  class Client {
    constructor(ws) {
      this.ws = ws;
      this.nextId = 1;
      this.waiting = new Map();
      this.executors = new Map();
      this.running = new Map();
      this.closed = new Promise((resolve) => ws.addEventListener("close", resolve));
      ws.addEventListener("message", (event) => this.onMessage(event.data));
      ws.addEventListener("close", () => {
        for (const {reject} of this.waiting.values()) {
          reject(new AgentError("extension.tool_disconnected", "connection closed"));
        }
        this.waiting.clear();
        for (const controller of this.running.values()) controller.abort("disconnected");
        this.running.clear();
      });
      const self = this;
      this.tools = {
        async register(def, execute) {
          if (typeof execute !== "function") throw new TypeError("execute must be a function");
          const {toolId} = await self.request({type: "register", tool: def});
          self.executors.set(toolId, execute);
          return toolId;
        },
        async setEnabled(toolId, on) {
          await self.request({type: "set_enabled", toolId, enabled: !!on});
        },
        async unregister(toolId) {
          await self.request({type: "unregister", toolId});
          self.executors.delete(toolId);
        },
        list() {
          return self.request({type: "list"});
        },
      };
    }

    send(message) {
      this.ws.send(JSON.stringify(message));
    }

    request(message) {
      const id = this.nextId++;
      return new Promise((resolve, reject) => {
        this.waiting.set(id, {resolve, reject});
        this.send({...message, id});
      });
    }

    close() {
      this.ws.close();
    }

    onMessage(data) {
      const message = JSON.parse(data);
      if (message.type === "ack") {
        const entry = this.waiting.get(message.id);
        if (!entry) return;
        this.waiting.delete(message.id);
        if (message.ok) entry.resolve(message.result);
        else entry.reject(new AgentError(message.code, message.message));
      } else if (message.type === "call") {
        this.run(message);
      } else if (message.type === "cancel") {
        const controller = this.running.get(message.callId);
        if (controller) controller.abort(message.reason);
      }
    }

    run(message) {
      const {callId, toolId, arguments: args, context} = message;
      const execute = this.executors.get(toolId);
      const controller = new AbortController();
      this.running.set(callId, controller);
      const ctx = {...context, signal: controller.signal};
      Promise.resolve()
        .then(() => {
          if (!execute) throw new Error(`${toolId} has no function on this page`);
          return execute(args, ctx);
        })
        .then(
          (value) => {
            let text;
            try {
              text = JSON.stringify({type: "resolve", callId, ok: true,
                                     result: value === undefined ? null : value});
            } catch (err) {
              text = JSON.stringify({type: "resolve", callId, ok: false,
                error: {message: `returned a value that is not plain JSON (${err.message})`}});
            }
            if (this.ws.readyState === 1) this.ws.send(text);
          },
          (err) => {
            const text = err && err.message ? err.message : String(err);
            if (this.ws.readyState === 1) {
              const unavailable = !!err && err.code === "tool.unavailable";
              this.send({type: "resolve", callId, ok: false, unavailable,
                         error: {message: text, name: err && err.name}});
            }
          })
        .finally(() => this.running.delete(callId));
    }
  }

  function connect(url, token) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(wsUrl(url), [SUBPROTOCOL, "token." + token]);
      ws.addEventListener("open", () => resolve(new Client(ws)), {once: true});
      ws.addEventListener("error", () => reject(new AgentError(
        "extension.host_unavailable", "could not connect (bad token, origin or address)")),
        {once: true});
    });
  }

  global.tavernAgent = {connect, AgentError};
})(globalThis);
