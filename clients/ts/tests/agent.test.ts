import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { WebSocket } from "ws";

import {
  AgentError,
  type AgentServer,
  BoundedSender,
  Brain,
  type CallEvent,
  type JsonObject,
  type Logger,
  type ProtocolErrorMessage,
  readOnly,
  serve,
  sideEffect,
  type Tool,
  ToolError,
  type TurnRequest,
  type UiEvent,
} from "../src/index.js";

/** Records what the client logs (a test asserts what reached the operator). */
class Log implements Logger {
  readonly lines: string[] = [];
  warn(message: string): void {
    this.lines.push(`warn ${message}`);
  }
  error(message: string, error?: unknown): void {
    this.lines.push(`error ${message} ${error instanceof Error ? error.message : ""}`);
  }
}

/** The brisvox server's side of one link, played by the test. */
class FakeServer {
  readonly frames: JsonObject[] = [];
  private waiters: (() => void)[] = [];

  private constructor(readonly ws: WebSocket) {
    ws.on("message", (data) => {
      this.frames.push(JSON.parse(String(data)) as JsonObject);
      for (const wake of this.waiters.splice(0)) wake();
    });
  }

  static async open(url: string): Promise<FakeServer> {
    const ws = new WebSocket(url);
    await new Promise((resolve, reject) => {
      ws.once("open", resolve);
      ws.once("error", reject);
    });
    return new FakeServer(ws);
  }

  send(message: JsonObject): void {
    this.ws.send(JSON.stringify(message));
  }

  start(callId = "c1", resume = false): void {
    this.send({ type: "session.start", v: 1, call_id: callId, agent: "shop", transport: "websocket",
      parameters: { encoding: "pcm16" }, resume });
  }

  /** The first frame (from index `from`) that `match` accepts, waiting up to 2 s. */
  async next(match: (f: JsonObject) => boolean, from = 0): Promise<JsonObject> {
    const deadline = Date.now() + 2000;
    for (;;) {
      const found = this.frames.slice(from).find(match);
      if (found !== undefined) return found;
      if (Date.now() > deadline) assert.fail(`no such frame; got ${JSON.stringify(this.frames)}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  result(id: string): Promise<JsonObject> {
    return this.next((f) => f.type === "tool.result" && f.id === id);
  }

  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    await new Promise((resolve) => {
      this.ws.once("close", resolve);
      this.ws.close();
    });
  }
}

const DAY: JsonObject = { type: "object", properties: { day: { type: "string" } }, required: ["day"] };

class Desk extends Brain {
  static made: Desk[] = [];
  booked: string[] = [];
  events: CallEvent[] = [];
  errors: ProtocolErrorMessage[] = [];
  uiEvents: UiEvent[] = [];
  release: Promise<void> = Promise.resolve();

  constructor() {
    super();
    Desk.made.push(this);
  }

  override tools(): Tool[] {
    return [
      readOnly({
        name: "opening_hours",
        description: "When the shop is open on a day.",
        parameters: DAY,
        run: (args) => {
          if (args.day === "sunday") throw new ToolError("closed on sundays");
          if (args.day === "bug") throw new Error("a bug in the tool");
          return { day: args.day as string, hours: "nine to five" };
        },
      }),
      sideEffect({
        name: "book",
        description: "Book a visit.",
        parameters: DAY,
        run: async (args) => {
          await this.release;
          this.booked.push(args.day as string);
          return "booked";
        },
      }),
    ];
  }

  override onEvent(event: CallEvent): void {
    this.events.push(event);
  }

  override onError(error: ProtocolErrorMessage): void {
    this.errors.push(error);
  }

  override onUiEvent(event: UiEvent): void {
    this.uiEvents.push(event);
  }
}

const open: (AgentServer | FakeServer)[] = [];

async function served(factory: () => Brain = () => new Desk(), log = new Log()): Promise<AgentServer> {
  const server = await serve(factory, { logger: log, resumeGrace: 5, startTimeout: 0.3 });
  open.push(server);
  return server;
}

async function link(server: AgentServer): Promise<FakeServer> {
  const fake = await FakeServer.open(server.url);
  open.push(fake);
  return fake;
}

afterEach(async () => {
  for (const item of open.splice(0).reverse()) await item.close();
  Desk.made = [];
});

function call(id: string, name: string, args: JsonObject, key = `c1/1/${id}`): JsonObject {
  return { type: "tool.call", id, name, arguments: args, idempotency_key: key, timeout: 5 };
}

test("the brain's tools are declared in ready and answer tool calls over the link", async () => {
  const fake = await link(await served());
  fake.start();
  const ready = await fake.next((f) => f.type === "ready");
  assert.deepEqual(ready, {
    type: "ready", v: 1, resume: false, tools: [
      { name: "opening_hours", description: "When the shop is open on a day.", parameters: DAY, kind: "read_only",
        timeout: 5, repeatable: false },
      { name: "book", description: "Book a visit.", parameters: DAY, kind: "side_effect", timeout: 5,
        repeatable: false },
    ],
  });
  assert.equal(Desk.made[0]?.session?.parameters.encoding, "pcm16");
  fake.send(call("r1", "opening_hours", { day: "monday" }));
  fake.send(call("r2", "opening_hours", { day: "sunday" }));
  fake.send(call("r3", "nope", {}));
  assert.deepEqual(await fake.result("r1"), { type: "tool.result", id: "r1", ok: true,
    result: { day: "monday", hours: "nine to five" } });
  assert.deepEqual(await fake.result("r2"), { type: "tool.result", id: "r2", ok: false, error: "closed on sundays" });
  assert.deepEqual(await fake.result("r3"), { type: "tool.result", id: "r3", ok: false, error: "unknown_tool" });
});

test("a tool's bug is logged with its error and answered to the model as a plain failure", async () => {
  const log = new Log();
  const fake = await link(await served(() => new Desk(), log));
  fake.start();
  fake.send(call("r1", "opening_hours", { day: "bug" }));
  assert.deepEqual(await fake.result("r1"), { type: "tool.result", id: "r1", ok: false, error: "the tool failed" });
  assert.deepEqual(log.lines, ["error call c1: tool opening_hours failed a bug in the tool"]);
});

test("a side effect asked twice with one idempotency key runs once and answers both requests", async () => {
  let release = (): void => {};
  const fake = await link(await served(() => {
    const desk = new Desk();
    desk.release = new Promise((resolve) => (release = resolve));
    return desk;
  }));
  fake.start();
  await fake.next((f) => f.type === "ready");
  fake.send(call("r1", "book", { day: "monday" }, "c1/2/t2.0"));
  fake.send(call("r2", "book", { day: "monday" }, "c1/2/t2.0"));
  fake.send(call("r3", "book", { day: "friday" }, "c1/2/t2.1"));
  await new Promise((resolve) => setTimeout(resolve, 50));
  release();
  for (const id of ["r1", "r2", "r3"]) assert.equal((await fake.result(id)).result, "booked");
  fake.send(call("r4", "book", { day: "monday" }, "c1/2/t2.0")); // later: the remembered answer
  assert.equal((await fake.result("r4")).result, "booked");
  assert.deepEqual(Desk.made[0]?.booked, ["monday", "friday"]);
});

test("events reach onEvent in order and call_ended forgets the call", async () => {
  const server = await served();
  const fake = await link(server);
  fake.start();
  await fake.next((f) => f.type === "ready");
  fake.send({ type: "event", kind: "user_turn", turn: 1, text: "hi" });
  fake.send({ type: "event", kind: "tool_settled", turn: 1, tool: "book", outcome: "ok" });
  fake.send({ type: "event", kind: "call_ended" });
  await fake.close();
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(Desk.made[0]?.events, [
    { type: "event", kind: "user_turn", turn: 1, text: "hi" },
    { type: "event", kind: "tool_settled", turn: 1, tool: "book", outcome: "ok" },
    { type: "event", kind: "call_ended" },
  ]);
  const again = await link(server);
  again.start("c1", true); // the call is over: a "reopen" gets a new brain
  await again.next((f) => f.type === "ready");
  assert.equal(Desk.made.length, 2);
});

test("the commands go out as their v1 frames, and refusals and screen events reach the brain", async () => {
  const fake = await link(await served());
  fake.start();
  await fake.next((f) => f.type === "ready");
  const desk = Desk.made[0] as Desk;
  await desk.sayLine("One moment.", { interrupt: true });
  await desk.updateContext("The caller is a member.");
  await desk.setTools(["book"]);
  await desk.transfer("+15551234567");
  await desk.sendUiCommand("show_map", { center: [1.5, 2] });
  await desk.sendServerMessage({ progress: [1, null] });
  await desk.end({ farewell: "Goodbye." });
  await desk.end();
  await fake.next((f) => f.type === "end" && f.farewell === undefined);
  assert.deepEqual(fake.frames.slice(1), [
    { type: "say", text: "One moment.", interrupt: true },
    { type: "context.update", note: "The caller is a member." },
    { type: "tools.set", names: ["book"] },
    { type: "transfer", to: "+15551234567" },
    { type: "ui.command", command: "show_map", payload: { center: [1.5, 2] } },
    { type: "ui.message", data: { progress: [1, null] } },
    { type: "end", farewell: "Goodbye." },
    { type: "end" },
  ]);
  await assert.rejects(desk.sayLine(""), /text: a line needs text/);
  await assert.rejects(desk.sendUiCommand("Show Map"), /command: expected a string matching/);
  fake.send({ type: "error", code: "not_supported", field: "type", message: "say is not applied" });
  fake.send({ type: "error", code: "no_carrier", message: "no phone line", command: "transfer" });
  fake.send({ type: "ui.event", event: "confirm_answered", payload: { answer: "yes" } });
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(desk.errors, [
    { type: "error", code: "not_supported", field: "type", message: "say is not applied" },
    { type: "error", code: "no_carrier", field: "", message: "no phone line", command: "transfer" },
  ]);
  assert.deepEqual(desk.uiEvents, [{ type: "ui.event", event: "confirm_answered", payload: { answer: "yes" } }]);
});

test("a brain that answers the turns says so in ready and replies to a turn.request with its lines and end", async () => {
  class Answering extends Brain {
    override answersTurns = true;
    override async onTurnRequest(request: TurnRequest): Promise<void> {
      await this.replyLine(request.id, `You said: ${request.text}`);
      await this.replyLine(request.id, "", { final: true });
    }
  }
  const fake = await link(await served(() => new Answering()));
  fake.start();
  const ready = await fake.next((f) => f.type === "ready");
  assert.equal(ready.answers_turns, true);
  fake.send({ type: "turn.request", id: "t1", turn: 2, text: "hello" });
  await fake.next((f) => f.type === "say" && f.final === true);
  assert.deepEqual(fake.frames.slice(1), [
    { type: "say", text: "You said: hello", reply_to: "t1", final: false },
    { type: "say", text: "", reply_to: "t1", final: true },
  ]);
  await assert.rejects(new Desk().replyLine("t1", "x"), /answersTurns is false/);
});

test("a brain that serves no call refuses a command, naming it", async () => {
  await assert.rejects(new Desk().sayLine("Hello."), (e: unknown) =>
    e instanceof AgentError && e.message === "say: the brain is not serving a call");
});

test("a reopened link of a resumable call is served by the same brain, and a side effect runs once", async () => {
  let release = (): void => {};
  class Steady extends Desk {
    override resume = true;
  }
  const server = await served(() => {
    const desk = new Steady();
    desk.release = new Promise((resolve) => (release = resolve));
    return desk;
  });
  const first = await link(server);
  first.start();
  assert.equal((await first.next((f) => f.type === "ready")).resume, true);
  first.send(call("r1", "book", { day: "monday" }, "c1/3/t3.0"));
  await new Promise((resolve) => setTimeout(resolve, 50));
  await first.close(); // lost while the side effect runs
  release();
  const second = await link(server);
  second.start("c1", true);
  await second.next((f) => f.type === "ready");
  second.send(call("r9", "book", { day: "monday" }, "c1/3/t3.0")); // the server retries the same key
  assert.equal((await second.result("r9")).result, "booked");
  assert.equal(Desk.made.length, 1);
  assert.deepEqual(Desk.made[0]?.booked, ["monday"]);
  assert.equal(Desk.made[0]?.session?.resume, true);
});

test("a brain whose tools cannot be declared closes its link, logged naming the tool", async () => {
  const log = new Log();
  class Twice extends Desk {
    override tools(): Tool[] {
      return [...super.tools(), ...super.tools()];
    }
  }
  const fake = await link(await served(() => new Twice(), log));
  const closed = new Promise((resolve) => fake.ws.once("close", (code) => resolve(code)));
  fake.start();
  assert.equal(await closed, 1011);
  assert.deepEqual(log.lines, [
    "error call c1: the brain's tools cannot be declared; the link is closed tool opening_hours is declared twice"]);
  assert.deepEqual(fake.frames, []);
});

test("a link that sends no session.start is closed after the start timeout and logged", async () => {
  const log = new Log();
  const fake = await link(await served(() => new Desk(), log));
  const closed = new Promise((resolve) => fake.ws.once("close", resolve));
  await closed;
  assert.deepEqual(log.lines, ["warn a link sent no session.start within 0.3 s; closed"]);
  assert.equal(Desk.made.length, 0);
});

test("a frame that is not a v1 message is logged naming its field and the link stays open", async () => {
  const log = new Log();
  const fake = await link(await served(() => new Desk(), log));
  fake.start();
  await fake.next((f) => f.type === "ready");
  fake.send({ type: "tool.call", id: "r1", name: "book" });
  fake.send(call("r2", "opening_hours", { day: "monday" }));
  assert.equal((await fake.result("r2")).ok, true);
  assert.deepEqual(log.lines, ["warn the server sent a frame that is not a v1 message (bad_field: arguments: missing)"]);
});

test("a bounded sender refuses past its limit and drops a link whose write does not finish in time", async () => {
  const stalled: string[] = [];
  let dropped = 0;
  const sender = new BoundedSender((frame) => stalled.push(frame), 2, 50, () => (dropped += 1));
  const one = sender.send("a", "say");
  const two = sender.send("b", "say");
  await assert.rejects(sender.send("c", "end"), /end: not sent, 2 frames are already waiting to be written/);
  await assert.rejects(one, /say: not written within 0.05 s; the link is dropped/);
  await assert.rejects(two, AgentError);
  assert.equal(dropped, 2);
  assert.equal(sender.pending, 0);
  assert.deepEqual(stalled, ["a", "b"]);
});

test("serve names a bad option", async () => {
  await assert.rejects(serve(() => new Desk(), { writeTimeout: -1 }), /serve: writeTimeout must be a positive number/);
  await assert.rejects(serve(() => new Desk(), { port: 70000 }), /serve: port must be an integer from 0 to 65535/);
});
