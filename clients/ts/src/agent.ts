/**
 * The agent's side of the agent protocol: a Brain served over WebSocket, as the Python SDK's `serve`.
 *
 * brisvox opens one link per call to the agent's URL (the agent file's `[agent_link] url`),
 * sends `session.start` and reads `ready` (the brain's tools).  One Brain instance serves one call;
 * a link reopened for the same call (`resume`) is served by the same instance, with the same memory
 * of idempotency keys, so a side effect runs once per key across the reopen.
 */

import WebSocket, { WebSocketServer } from "ws";
import type { AddressInfo } from "node:net";

import {
  type AgentMessage,
  type CallEvent,
  encode,
  finiteOnly,
  type JsonObject,
  type JsonValue,
  parseServerMessage,
  ProtocolError,
  MAX_MESSAGE_BYTES,
  type ProtocolErrorMessage,
  type ServerMessage,
  type SessionStart,
  type ToolCallRequest,
  type TurnRequest,
  type UiEvent,
} from "./protocol.js";
import { type Tool, ToolError } from "./tools.js";

/** Misuse of the client or a link that cannot carry a message: the message says which. */
export class AgentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AgentError";
  }
}

/** Where the client's warnings and errors go (tool arguments and results never do). */
export interface Logger {
  warn(message: string, error?: unknown): void;
  error(message: string, error?: unknown): void;
}

interface Link {
  send(message: AgentMessage): Promise<void>;
}

/** The link each serving brain sends on (none: the brain serves no call now). */
const LINKS = new WeakMap<Brain, Link>();

/**
 * Logic for one call.  Override `tools()` (the remote tools, declared with `readOnly`/`sideEffect`)
 * and `onEvent` (the call's facts); the commands (`sayLine`, `updateContext`, `setTools`, `end`,
 * `transfer`) go to the call.  `resume = true` asks the server to reopen a lost link.
 */
export class Brain {
  /** The server reopens a lost link (a `session.start` with `resume: true`, served by this instance). */
  resume = false;
  /**
   * The brain answers the caller's turns itself (`ready.answers_turns`): the call runs no model of its
   * own while the brain answers, and asks with `onTurnRequest`; a reply whose first line is late is
   * answered by the agent file's model instead (docs/AGENT_PROTOCOL.md, "Brain mode").
   */
  answersTurns = false;
  /** The call's `session.start` (the latest one, after a reopen). */
  session: SessionStart | null = null;

  /** The brain's tools (read once per link, for `ready`). */
  tools(): Tool[] {
    return [];
  }

  /** One fact of the call (user turns, transcripts, what was heard, tool outcomes, call end), in order. */
  onEvent(_event: CallEvent): void | Promise<void> {}

  /** The server refused a frame of ours, or the call could not carry out a command (`error.command`). */
  onError(_error: ProtocolErrorMessage): void | Promise<void> {}

  /** An app event from the caller's screen (RTVI `ui-event`). */
  onUiEvent(_event: UiEvent): void | Promise<void> {}

  /** The call asks for the reply to the caller's turn (only with `answersTurns`): answer with `replyLine`, the last `final`. */
  onTurnRequest(_request: TurnRequest): void | Promise<void> {
    throw new AgentError(`${this.constructor.name} sets answersTurns but does not override onTurnRequest`);
  }

  /** A piece of the reply to the `turn.request` `requestId`; `final` ends the reply (`text` may then be empty). */
  replyLine(requestId: string, text: string, options: { final?: boolean } = {}): Promise<void> {
    if (!this.answersTurns) {
      return Promise.reject(new AgentError("reply_line: the brain does not answer the turns (answersTurns is false)"));
    }
    return this.command({ type: "say", text, reply_to: requestId, final: options.final ?? false });
  }

  /** Speak `text` as a bot line; with `interrupt`, cutting what the bot says now. */
  sayLine(text: string, options: { interrupt?: boolean } = {}): Promise<void> {
    return this.command({ type: "say", text, interrupt: options.interrupt ?? false });
  }

  /** Add a note to the model's context. */
  updateContext(note: string): Promise<void> {
    return this.command({ type: "context.update", note });
  }

  /** Offer only the tools `names` to the model (a call to another is answered `unknown_tool`). */
  setTools(names: string[]): Promise<void> {
    return this.command({ type: "tools.set", names });
  }

  /** End the call once the bot is silent (after `farewell`, when given). */
  end(options: { farewell?: string } = {}): Promise<void> {
    return this.command(options.farewell ? { type: "end", farewell: options.farewell } : { type: "end" });
  }

  /** Send a typed UI action to the caller's screen (RTVI `ui-command`). */
  sendUiCommand(command: string, payload: JsonObject = {}): Promise<void> {
    return this.command({ type: "ui.command", command, payload });
  }

  /** Send the caller's page a free-form message (RTVI `server-message`, the page's `onServerMessage`). */
  sendServerMessage(data: JsonValue): Promise<void> {
    return this.command({ type: "ui.message", data });
  }

  /** Transfer the call through its carrier (`to`: an E.164 number or a sip: URI). */
  transfer(to: string): Promise<void> {
    return this.command({ type: "transfer", to });
  }

  private async command(message: AgentMessage): Promise<void> {
    const link = LINKS.get(this);
    if (link === undefined) throw new AgentError(`${message.type}: the brain is not serving a call`);
    await link.send(message);
  }
}

/** What `serve` takes: where to listen and how long and how much each step may take. */
export interface ServeOptions {
  host?: string;
  port?: number;
  /** Seconds a frame may take to be written before the link is dropped (default 2, as the server). */
  writeTimeout?: number;
  /** Frames waiting to be written; past it a send is refused with an AgentError (default 256). */
  queueLimit?: number;
  /** Seconds to wait for `session.start` on a new connection (default 5). */
  startTimeout?: number;
  /** Idempotency keys (with their results) remembered per call, oldest forgotten first (default 1024). */
  rememberedKeys?: number;
  /** Seconds a call whose link was lost stays remembered for its reopen (brains with `resume`; default 30). */
  resumeGrace?: number;
  /** Calls remembered at once (running or waiting for a reopen; default 1024): a new call past it is refused. */
  maxCalls?: number;
  logger?: Logger;
}

/** A listening agent process: `port` is the bound port, `close()` ends every link and the listener. */
export interface AgentServer {
  readonly port: number;
  readonly url: string;
  close(): Promise<void>;
}

/**
 * A send queue with a bound and a deadline: at most `limit` frames waiting (a further send is
 * refused: overflow policy "reject the new frame"), each written within `timeoutMs` or the link is
 * dropped (`onStall`) and the send rejected.
 */
export class BoundedSender {
  private waiting = 0;

  constructor(
    private readonly write: (frame: string, done: (error?: Error) => void) => void,
    private readonly limit: number,
    private readonly timeoutMs: number,
    private readonly onStall: () => void,
  ) {}

  get pending(): number {
    return this.waiting;
  }

  send(frame: string, what: string): Promise<void> {
    if (this.waiting >= this.limit) {
      return Promise.reject(new AgentError(`${what}: not sent, ${this.limit} frames are already waiting to be written`));
    }
    this.waiting += 1;
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      const finish = (error?: Error): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.waiting -= 1;
        if (error === undefined) resolve();
        else reject(error);
      };
      const timer = setTimeout(() => {
        finish(new AgentError(`${what}: not written within ${this.timeoutMs / 1000} s; the link is dropped`));
        this.onStall();
      }, this.timeoutMs);
      try {
        this.write(frame, (error) => finish(error ? new AgentError(`${what}: not sent (${error.message})`) : undefined));
      } catch (error) {
        finish(new AgentError(`${what}: not sent (${(error as Error).message})`));
      }
    });
  }
}

type Answer = { ok: true; result?: JsonValue } | { ok: false; error: string };

/** One call: its brain and what it remembers across a reopened link. */
class CallState {
  readonly answers = new Map<string, Promise<Answer>>(); // by idempotency key, oldest first
  readonly controller = new AbortController();
  link: Session | null = null;
  forget: NodeJS.Timeout | null = null;
  ended = false;

  constructor(readonly callId: string, readonly brain: Brain) {}
}

const MAX_ERROR_CHARS = 4096;

function cut(text: string): string {
  return [...text].slice(0, MAX_ERROR_CHARS).join("");
}

class Session {
  private readonly sender: BoundedSender;
  private events: Promise<void> = Promise.resolve();
  private call: CallState | null = null;
  private tools = new Map<string, Tool>(); // read once, when the link opens (what ready declared)

  constructor(private readonly agent: Agent, private readonly ws: WebSocket) {
    this.sender = new BoundedSender(
      (frame, done) => ws.send(frame, done),
      agent.options.queueLimit,
      agent.options.writeTimeout * 1000,
      () => ws.terminate(),
    );
  }

  async send(message: AgentMessage): Promise<void> {
    if (this.ws.readyState !== WebSocket.OPEN) throw new AgentError(`${message.type}: the link is closed`);
    await this.sender.send(encode(message), message.type);
  }

  start(): void {
    const timer = setTimeout(() => {
      this.agent.log.warn(`a link sent no session.start within ${this.agent.options.startTimeout} s; closed`);
      this.ws.terminate();
    }, this.agent.options.startTimeout * 1000);
    this.ws.on("message", (data, isBinary) => {
      const frame = isBinary ? bytes(data) : bytes(data).toString("utf8");
      let message;
      try {
        message = parseServerMessage(frame);
      } catch (exc) {
        this.agent.log.warn(`the server sent a frame that is not a v1 message (${describe(exc)})`);
        return;
      }
      if (this.call === null) {
        if (message.type !== "session.start") {
          this.agent.log.warn(`expected session.start, got ${message.type}; the link is closed`);
          this.ws.close(1002, "expected session.start");
          return;
        }
        clearTimeout(timer);
        this.open(message);
        return;
      }
      this.handle(message);
    });
    this.ws.on("close", () => {
      clearTimeout(timer);
      this.closed();
    });
    this.ws.on("error", (error) => this.agent.log.warn("a link failed", error));
  }

  private open(start: SessionStart): void {
    const call = this.agent.attach(start, this);
    if (call === null) {
      this.ws.close(1013, "too many calls");
      return;
    }
    this.call = call;
    const brain = call.brain;
    let frame: AgentMessage;
    try {
      const tools = this.agent.toolsOf(brain);
      frame = { type: "ready", v: 1, tools: tools.map((t) => t.spec), resume: brain.resume,
        ...(brain.answersTurns ? { answers_turns: true } : {}) };
      this.tools = new Map(tools.map((t) => [t.spec.name, t]));
      encode(frame); // a bad declaration is named here, before anything is sent
    } catch (exc) {
      this.agent.log.error(`call ${start.call_id}: the brain's tools cannot be declared; the link is closed`, exc);
      this.ws.close(1011, "bad tool declarations");
      return;
    }
    LINKS.set(brain, this);
    this.send(frame).catch((exc) => this.agent.log.warn(`call ${start.call_id}: ready not sent`, exc));
  }

  private handle(message: ServerMessage): void {
    const call = this.call as CallState;
    switch (message.type) {
      case "tool.call":
        this.answer(call, message).catch((exc) => this.agent.log.error(`call ${call.callId}: a tool call failed`, exc));
        return;
      case "event":
        if (message.kind === "call_ended") call.ended = true;
        this.events = this.events.then(() => this.deliver(call, message));
        return;
      case "error":
        this.agent.log.warn(`call ${call.callId}: the server refused ${message.command ?? "a frame"}: ${message.code}` +
          (message.field ? ` (${message.field})` : ""));
        this.events = this.events.then(() => guarded(this.agent.log, "onError", () => call.brain.onError(message)));
        return;
      case "ui.event":
        this.events = this.events.then(() => guarded(this.agent.log, "onUiEvent", () => call.brain.onUiEvent(message)));
        return;
      case "turn.request":
        this.events = this.events.then(() =>
          guarded(this.agent.log, "onTurnRequest", () => call.brain.onTurnRequest(message)));
        return;
      case "session.start":
        this.agent.log.warn(`call ${call.callId}: a second session.start on one link is ignored`);
        return;
    }
  }

  private async deliver(call: CallState, event: CallEvent): Promise<void> {
    await guarded(this.agent.log, "onEvent", () => call.brain.onEvent(event));
  }

  private async answer(call: CallState, request: ToolCallRequest): Promise<void> {
    let answer = call.answers.get(request.idempotency_key);
    if (answer === undefined) {
      answer = this.agent.run(call, this.tools.get(request.name), request);
      call.answers.set(request.idempotency_key, answer);
      while (call.answers.size > this.agent.options.rememberedKeys) {
        const oldest = call.answers.keys().next().value as string;
        call.answers.delete(oldest);
      }
    }
    const settled = await answer;
    try {
      await this.send({ type: "tool.result", id: request.id, ...settled });
    } catch (exc) {
      if (exc instanceof ProtocolError && settled.ok) { // a result over the frame limit
        this.agent.log.error(`call ${call.callId}: the result of ${request.name} cannot be sent`, exc);
        await this.send({ type: "tool.result", id: request.id, ok: false, error: "the tool's result is too large" })
          .catch((again) => this.agent.log.warn(`call ${call.callId}: tool.result not sent`, again));
        return;
      }
      // The link that asked is gone: the answer stays remembered for a retry with the same key.
      this.agent.log.warn(`call ${call.callId}: the result of ${request.name} was not sent`, exc);
    }
  }

  private closed(): void {
    const call = this.call;
    if (call === null) return;
    if (call.link === this) call.link = null;
    if (LINKS.get(call.brain) === this) LINKS.delete(call.brain);
    const keep = call.brain.resume && !call.ended;
    void this.events.then(() => this.agent.detach(call, keep));
  }
}

function bytes(data: WebSocket.RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

function describe(exc: unknown): string {
  return exc instanceof ProtocolError ? `${exc.code}: ${exc.message}` : String(exc);
}

async function guarded(log: Logger, what: string, run: () => void | Promise<void>): Promise<void> {
  try {
    await run();
  } catch (exc) {
    log.error(`the brain's ${what} failed`, exc);
  }
}

type Options = Required<Omit<ServeOptions, "host" | "port" | "logger">>;

class Agent {
  readonly calls = new Map<string, CallState>();
  readonly sessions = new Set<WebSocket>();

  constructor(readonly factory: () => Brain, readonly options: Options, readonly log: Logger) {}

  attach(start: SessionStart, session: Session): CallState | null {
    let call = start.resume ? this.calls.get(start.call_id) : undefined;
    if (call === undefined) {
      const old = this.calls.get(start.call_id);
      if (old !== undefined) this.drop(old); // a new call with a known id: the old one is over
      if (this.calls.size >= this.options.maxCalls) {
        this.log.warn(`call ${start.call_id} refused: ${this.options.maxCalls} calls are remembered already`);
        return null;
      }
      call = new CallState(start.call_id, this.factory());
      this.calls.set(start.call_id, call);
    }
    if (call.forget !== null) clearTimeout(call.forget);
    call.forget = null;
    call.link = session;
    call.brain.session = start;
    return call;
  }

  detach(call: CallState, keep: boolean): void {
    if (call.link !== null || this.calls.get(call.callId) !== call) return; // reopened meanwhile, or dropped
    if (!keep) {
      this.drop(call);
      return;
    }
    call.forget = setTimeout(() => this.drop(call), this.options.resumeGrace * 1000);
  }

  drop(call: CallState): void {
    if (call.forget !== null) clearTimeout(call.forget);
    call.forget = null;
    call.controller.abort(new AgentError("the call is over"));
    if (this.calls.get(call.callId) === call) this.calls.delete(call.callId);
  }

  toolsOf(brain: Brain): Tool[] {
    const tools = brain.tools();
    const seen = new Set<string>();
    for (const tool of tools) {
      if (seen.has(tool.spec.name)) throw new AgentError(`tool ${tool.spec.name} is declared twice`);
      seen.add(tool.spec.name);
    }
    return tools;
  }

  async run(call: CallState, tool: Tool | undefined, request: ToolCallRequest): Promise<Answer> {
    if (tool === undefined) return { ok: false, error: "unknown_tool" };
    const [, epoch, modelCallId] = request.idempotency_key.split("/");
    const signals = [call.controller.signal];
    if (tool.spec.kind !== "side_effect") {
      // The server drops a ReadOnly call at its timeout: nothing would read a later answer.
      signals.push(AbortSignal.timeout(request.timeout * 1000));
    }
    const ctx = {
      session: call.brain.session as SessionStart,
      requestId: request.id,
      callId: modelCallId ?? request.id,
      turn: epoch !== undefined && /^\d+$/.test(epoch) ? Number(epoch) : 0,
      idempotencyKey: request.idempotency_key,
      timeout: request.timeout,
      signal: AbortSignal.any(signals),
    };
    let result: unknown;
    try {
      result = await tool.call(request.arguments as JsonObject, ctx);
    } catch (exc) {
      if (exc instanceof ToolError) return { ok: false, error: cut(exc.message) };
      // A bug in the tool: logged with its stack (never its arguments); the model reads a failure.
      this.log.error(`call ${call.callId}: tool ${request.name} failed`, exc);
      return { ok: false, error: "the tool failed" };
    }
    if (result === undefined) return { ok: true };
    try {
      JSON.stringify(result, finiteOnly);
    } catch (exc) {
      this.log.error(`call ${call.callId}: tool ${request.name} returned a value that is not JSON`, exc);
      return { ok: false, error: "the tool's result is not JSON" };
    }
    return { ok: true, result: result as JsonValue };
  }
}

const CONSOLE: Logger = {
  warn: (message, error) => (error === undefined ? console.warn(message) : console.warn(message, error)),
  error: (message, error) => (error === undefined ? console.error(message) : console.error(message, error)),
};

function positive(name: string, value: number | undefined, fallback: number): number {
  const chosen = value ?? fallback;
  if (typeof chosen !== "number" || !Number.isFinite(chosen) || chosen <= 0) {
    throw new AgentError(`serve: ${name} must be a positive number, got ${String(value)}`);
  }
  return chosen;
}

/** Serve `factory` (one Brain per call) on `host:port` (default 127.0.0.1, a free port). */
export async function serve(factory: () => Brain, options: ServeOptions = {}): Promise<AgentServer> {
  if (typeof factory !== "function") throw new AgentError("serve: factory must be a function returning a Brain");
  const port = options.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new AgentError(`serve: port must be an integer from 0 to 65535, got ${String(options.port)}`);
  }
  const agent = new Agent(factory, {
    writeTimeout: positive("writeTimeout", options.writeTimeout, 2),
    queueLimit: positive("queueLimit", options.queueLimit, 256),
    startTimeout: positive("startTimeout", options.startTimeout, 5),
    rememberedKeys: positive("rememberedKeys", options.rememberedKeys, 1024),
    resumeGrace: positive("resumeGrace", options.resumeGrace, 30),
    maxCalls: positive("maxCalls", options.maxCalls, 1024),
  }, options.logger ?? CONSOLE);
  const host = options.host ?? "127.0.0.1";
  const wss = new WebSocketServer({ host, port, maxPayload: MAX_MESSAGE_BYTES });
  await new Promise<void>((resolve, reject) => {
    wss.once("listening", resolve);
    wss.once("error", reject);
  });
  wss.on("error", (error) => agent.log.error("the agent server failed", error));
  wss.on("connection", (ws) => {
    agent.sessions.add(ws);
    ws.on("close", () => agent.sessions.delete(ws));
    new Session(agent, ws).start();
  });
  const bound = (wss.address() as AddressInfo).port;
  return {
    port: bound,
    url: `ws://${host.includes(":") ? `[${host}]` : host}:${bound}`,
    close: async () => {
      for (const ws of agent.sessions) ws.terminate();
      for (const call of [...agent.calls.values()]) agent.drop(call);
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
