/**
 * The agent protocol, v1 (docs/AGENT_PROTOCOL.md): the messages between a brisvox call and an agent process.
 *
 * Pure: no sockets, no timers.  The shapes and rules are those of the Python reference
 * (`brisvox.sdk.protocol`, pydantic models with `extra="forbid"`), in pydantic's strict mode:
 * a number is not read from a string, `1.0` is not a string, and so on.  `parseServerMessage` /
 * `parseAgentMessage` turn a frame into a message with its defaults filled, or throw a
 * `ProtocolError` whose `code` says why and whose `field` names the bad field (dotted, e.g.
 * `tools.0.name`), in the order the Python parser reports them: the first bad declared field,
 * then the first unknown key.  They throw nothing else for any input.
 */

export const PROTOCOL_VERSION = 1;
/** A frame over this many bytes is refused (`too_large`) before it is parsed. */
export const MAX_MESSAGE_BYTES = 1 << 20;

/** Why a frame was refused: the `code` of a ProtocolError and of an `error` message. */
export enum ErrorCode {
  TooLarge = "too_large",
  NotJson = "not_json",
  NotObject = "not_object",
  BadField = "bad_field",
  Version = "version",
  /** A valid message at a moment it has no meaning (a result for no call). */
  Unexpected = "unexpected",
  /** A valid v1 command this server does not apply (a server before the commands were applied). */
  NotSupported = "not_supported",
  // A valid command the call could not carry out (the error's `command` names it):
  /** Too many commands (or bot lines) waiting. */
  Busy = "busy",
  /** The call ended first. */
  CallEnded = "call_ended",
  /** The caller spoke over the farewell: the call goes on. */
  CalledOff = "called_off",
  /** tools.set named a tool the call does not have. */
  UnknownTool = "unknown_tool",
  /** transfer (or end with a farewell) on a call without a phone carrier. */
  NoCarrier = "no_carrier",
  /** The carrier refused or did not answer the transfer. */
  CarrierFailed = "carrier_failed",
  /** ui.command on a call without a screen (not an RTVI call). */
  NoScreen = "no_screen",
  /** ui.command naming an action the call's UI contract does not declare. */
  Undeclared = "undeclared",
  /** say: a newer turn (a barge-in, an interrupting say) came before a word of the line was said. */
  Overtaken = "overtaken",
}

/** A frame that is not a valid message: `code` says why, `field` names the bad field ("" for the whole frame). */
export class ProtocolError extends Error {
  readonly code: ErrorCode;
  readonly field: string;
  /** What was wrong, without the field. */
  readonly reason: string;

  constructor(code: ErrorCode, field: string, reason: string) {
    super(field ? `${field}: ${reason}` : reason);
    this.name = "ProtocolError";
    this.code = code;
    this.field = field;
    this.reason = reason;
  }
}

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

// --- agent -> server ----------------------------------------------------------------------------

export type RemoteToolKind = "read_only" | "side_effect";

/** A tool the agent offers: the server registers it next to the agent file's tools. */
export interface RemoteToolSpec {
  /** `[A-Za-z0-9_-]{1,64}` */
  name: string;
  /** At most 4096 characters: what the model reads. */
  description: string;
  /** The arguments' JSON Schema (checked by the server's tool registry). */
  parameters: JsonObject;
  /** Default `read_only`. */
  kind?: RemoteToolKind;
  /** Seconds, 0 < t <= 120; default 5. */
  timeout?: number;
  /** Default false: an identical SideEffect call later in the same turn is refused as a repeat. */
  repeatable?: boolean;
}

/** The agent's answer to `session.start`: its tools, and whether a lost link should be reopened. */
export interface Ready {
  type: "ready";
  v: 1;
  tools?: RemoteToolSpec[];
  resume?: boolean;
  /** The agent answers the caller's turns itself: the server sends a `turn.request` for each reply instead of running its model. */
  answers_turns?: boolean;
}

/** The outcome of one `tool.call`: `result` (any JSON) when `ok`, else `error` (read by the model). */
export interface ToolResult {
  type: "tool.result";
  id: string;
  ok: boolean;
  result?: JsonValue;
  error?: string;
}

/**
 * Speak a bot line (with `interrupt`, cutting what the bot says now).  With `reply_to`: a piece of
 * the reply to that `turn.request`, `final` ending it (its `text` may then be empty).  The server
 * refuses an empty `text` that ends nothing, `final` without `reply_to` and `interrupt` with it.
 */
export interface Say {
  type: "say";
  text: string;
  interrupt?: boolean;
  reply_to?: string;
  final?: boolean;
}

/** A note added to the model's context. */
export interface ContextUpdate {
  type: "context.update";
  note: string;
}

/** Narrow the tools offered to the model to `names`. */
export interface ToolsSet {
  type: "tools.set";
  names: string[];
}

/** End the call once the bot is silent (after `farewell`, when given). */
export interface End {
  type: "end";
  farewell?: string;
}

/** Transfer the call through its carrier (`to`: an E.164 number or a sip: URI). */
export interface Transfer {
  type: "transfer";
  to: string;
}

/** A typed UI action for the caller's screen (RTVI `ui-command`): `command` names it, `payload` its fields. */
export interface UiCommand {
  type: "ui.command";
  /** `[a-z][a-z0-9_]{0,63}` */
  command: string;
  payload: JsonObject;
}

/** A free-form message for the caller's page (RTVI `server-message`, the JS client's `onServerMessage`). */
export interface UiMessage {
  type: "ui.message";
  data?: JsonValue;
}

export type AgentMessage = Ready | ToolResult | Say | ContextUpdate | ToolsSet | End | Transfer | UiCommand | UiMessage;

// --- server -> agent ----------------------------------------------------------------------------

/** The first frame of a link. `parameters` is what the transport knows of the caller. */
export interface SessionStart {
  type: "session.start";
  v: 1;
  call_id: string;
  agent: string;
  transport: string;
  parameters: { [key: string]: string };
  resume: boolean;
}

/** The event kinds a v1 server sends (a later server may send more: `kind` stays a string). */
export type EventKind =
  | "turn_started"
  | "transcript"
  | "user_turn"
  | "bot_heard"
  | "bot_done"
  | "tool_settled"
  | "call_ended";

/** One fact of the call; `turn` is the engine's epoch of the fact. */
export interface CallEvent {
  type: "event";
  kind: EventKind | (string & {});
  turn?: number;
  text?: string;
  tool?: string;
  outcome?: string;
}

/** The model called one of the agent's tools. */
export interface ToolCallRequest {
  type: "tool.call";
  id: string;
  name: string;
  arguments: JsonObject;
  /** `session/epoch/call_id`: a side effect should run once per key. */
  idempotency_key: string;
  timeout: number;
}

/** A frame of the agent's was refused (`field` names what), or a command the call could not carry out (`command`). */
export interface ProtocolErrorMessage {
  type: "error";
  code: ErrorCode | (string & {});
  field: string;
  message: string;
  /** The `type` of the command the call could not carry out. */
  command?: string;
}

/** An app event from the caller's screen (RTVI `ui-event`): `event` names it, `payload` is what the screen sent. */
export interface UiEvent {
  type: "ui.event";
  event: string;
  payload?: JsonValue;
}

/** The call asks an agent that answers the turns for its reply: `say` lines naming `id` in `reply_to`, the last `final`. */
export interface TurnRequest {
  type: "turn.request";
  id: string;
  /** The engine's epoch of the caller's turn being answered. */
  turn?: number;
  /** The caller's words of that turn. */
  text: string;
}

export type ServerMessage = SessionStart | CallEvent | ToolCallRequest | ProtocolErrorMessage | UiEvent | TurnRequest;

// --- the validators -----------------------------------------------------------------------------

type Check = (value: unknown, at: string) => unknown;

interface Field {
  check: Check;
  /** Absent: the field is required.  A function: the default (a fresh value each time). */
  default?: () => unknown;
  /** A null value is the same as an absent one (Python's `X | None = None`: dropped on encoding). */
  nullable?: boolean;
}

function bad(at: string, message: string): ProtocolError {
  return new ProtocolError(ErrorCode.BadField, at, message);
}

function join(at: string, key: string | number): string {
  return at ? `${at}.${key}` : String(key);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Characters as Python counts them (code points, not UTF-16 units). */
function length(text: string): number {
  return [...text].length;
}

function str(rules: { min?: number; max?: number; pattern?: RegExp } = {}): Check {
  return (value, at) => {
    if (typeof value !== "string") throw bad(at, "expected a string");
    const n = rules.min !== undefined || rules.max !== undefined ? length(value) : 0;
    if (rules.min !== undefined && n < rules.min) throw bad(at, `expected at least ${rules.min} character(s)`);
    if (rules.max !== undefined && n > rules.max) throw bad(at, `expected at most ${rules.max} characters`);
    if (rules.pattern !== undefined && !rules.pattern.test(value)) {
      throw bad(at, `expected a string matching ${rules.pattern.source}`);
    }
    return value;
  };
}

function bool(): Check {
  return (value, at) => {
    if (typeof value !== "boolean") throw bad(at, "expected true or false");
    return value;
  };
}

function int(): Check {
  return (value, at) => {
    if (typeof value !== "number" || !Number.isInteger(value)) throw bad(at, "expected an integer");
    return value;
  };
}

function float(rules: { gt?: number; le?: number } = {}): Check {
  return (value, at) => {
    if (typeof value !== "number") throw bad(at, "expected a number");
    if (rules.gt !== undefined && !(value > rules.gt)) throw bad(at, `expected a number greater than ${rules.gt}`);
    if (rules.le !== undefined && !(value <= rules.le)) throw bad(at, `expected a number at most ${rules.le}`);
    return value;
  };
}

function literal(...allowed: (string | number)[]): Check {
  return (value, at) => {
    if (!allowed.some((a) => a === value)) {
      throw bad(at, `expected ${allowed.map((a) => JSON.stringify(a)).join(" or ")}`);
    }
    return value;
  };
}

function anyJson(): Check {
  return (value) => value;
}

function object(): Check {
  return (value, at) => {
    if (!isObject(value)) throw bad(at, "expected an object");
    return value;
  };
}

function mapOf(item: Check): Check {
  return (value, at) => {
    if (!isObject(value)) throw bad(at, "expected an object");
    const out: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value)) out[key] = item(v, join(at, key));
    return out;
  };
}

function list(item: Check, max: number): Check {
  return (value, at) => {
    if (!Array.isArray(value)) throw bad(at, "expected an array");
    const out = value.map((v, i) => item(v, join(at, i)));
    if (out.length > max) throw bad(at, `expected at most ${max} items`);
    return out;
  };
}

function model(fields: Record<string, Field>): Check {
  return (value, at) => {
    if (!isObject(value)) throw bad(at, "expected an object");
    const out: Record<string, unknown> = {};
    for (const [name, field] of Object.entries(fields)) {
      const given = Object.prototype.hasOwnProperty.call(value, name) ? value[name] : undefined;
      if (given === undefined || (given === null && field.nullable === true)) {
        if (field.default === undefined) throw bad(join(at, name), "missing");
        const fallback = field.default();
        if (fallback !== undefined) out[name] = fallback;
        continue;
      }
      out[name] = field.check(given, join(at, name));
    }
    for (const key of Object.keys(value)) {
      if (!Object.prototype.hasOwnProperty.call(fields, key)) throw bad(join(at, key), "unknown field");
    }
    return out;
  };
}

const required = (check: Check): Field => ({ check });
const withDefault = (check: Check, value: () => unknown): Field => ({ check, default: value });
const optional = (check: Check): Field => ({ check, default: () => undefined, nullable: true });

const NAME = /^[A-Za-z0-9_-]{1,64}$/;
const UI_NAME = /^[a-z][a-z0-9_]{0,63}$/;

const TOOL_SPEC = model({
  name: required(str({ pattern: NAME })),
  description: required(str({ max: 4096 })),
  parameters: required(object()),
  kind: withDefault(literal("read_only", "side_effect"), () => "read_only"),
  timeout: withDefault(float({ gt: 0, le: 120 }), () => 5.0),
  repeatable: withDefault(bool(), () => false),
});

const AGENT_MESSAGES: Record<AgentMessage["type"], Check> = {
  ready: model({
    type: required(literal("ready")),
    v: required(literal(1)),
    tools: withDefault(list(TOOL_SPEC, 128), () => []),
    resume: withDefault(bool(), () => false),
    answers_turns: withDefault(bool(), () => false),
  }),
  "tool.result": model({
    type: required(literal("tool.result")),
    id: required(str({ min: 1, max: 128 })),
    ok: required(bool()),
    result: optional(anyJson()),
    error: withDefault(str({ max: 4096 }), () => ""),
  }),
  say: model({
    type: required(literal("say")),
    text: required(str({ max: 4096 })),
    interrupt: withDefault(bool(), () => false),
    reply_to: optional(str({ min: 1, max: 128 })),
    final: withDefault(bool(), () => false),
  }),
  "context.update": model({
    type: required(literal("context.update")),
    note: required(str({ min: 1, max: 16384 })),
  }),
  "tools.set": model({
    type: required(literal("tools.set")),
    names: required(list(str({ pattern: NAME }), 128)),
  }),
  end: model({
    type: required(literal("end")),
    farewell: withDefault(str({ max: 4096 }), () => ""),
  }),
  transfer: model({
    type: required(literal("transfer")),
    to: required(str({ min: 1, max: 256 })),
  }),
  "ui.command": model({
    type: required(literal("ui.command")),
    command: required(str({ pattern: UI_NAME })),
    payload: required(object()),
  }),
  "ui.message": model({
    type: required(literal("ui.message")),
    data: optional(anyJson()),
  }),
};

const SERVER_MESSAGES: Record<ServerMessage["type"], Check> = {
  "session.start": model({
    type: required(literal("session.start")),
    v: required(literal(1)),
    call_id: required(str()),
    agent: required(str()),
    transport: required(str()),
    parameters: withDefault(mapOf(str()), () => ({})),
    resume: withDefault(bool(), () => false),
  }),
  event: model({
    type: required(literal("event")),
    kind: required(str()),
    turn: optional(int()),
    text: optional(str()),
    tool: optional(str()),
    outcome: optional(str()),
  }),
  "tool.call": model({
    type: required(literal("tool.call")),
    id: required(str()),
    name: required(str()),
    arguments: required(object()),
    idempotency_key: required(str()),
    timeout: required(float()),
  }),
  error: model({
    type: required(literal("error")),
    code: required(str()),
    field: withDefault(str(), () => ""),
    message: withDefault(str(), () => ""),
    command: optional(str()),
  }),
  "ui.event": model({
    type: required(literal("ui.event")),
    event: required(str({ pattern: UI_NAME })),
    payload: optional(anyJson()),
  }),
  "turn.request": model({
    type: required(literal("turn.request")),
    id: required(str()),
    turn: optional(int()),
    text: withDefault(str(), () => ""),
  }),
};

/** The message types each side sends (what a v1 peer may receive). */
export const AGENT_MESSAGE_TYPES = Object.keys(AGENT_MESSAGES) as AgentMessage["type"][];
export const SERVER_MESSAGE_TYPES = Object.keys(SERVER_MESSAGES) as ServerMessage["type"][];

const UTF8 = new TextDecoder("utf-8", { fatal: true });

function load(frame: string | Uint8Array): Record<string, unknown> {
  const size = typeof frame === "string" ? Buffer.byteLength(frame, "utf8") : frame.byteLength;
  if (size > MAX_MESSAGE_BYTES) {
    throw new ProtocolError(ErrorCode.TooLarge, "", `message over ${MAX_MESSAGE_BYTES} bytes`);
  }
  let value: unknown;
  try {
    value = JSON.parse(typeof frame === "string" ? frame : UTF8.decode(frame));
  } catch (exc) {
    // Not UTF-8, not JSON (NaN and Infinity are not JSON either: JSON.parse refuses them).
    throw new ProtocolError(ErrorCode.NotJson, "", `not JSON (${(exc as Error).name})`);
  }
  if (!isObject(value)) throw new ProtocolError(ErrorCode.NotObject, "", "a message is a JSON object");
  // As Python compares (`v != 1`): true equals 1 there, and is left to the field's own check.
  const version = value.v === true ? 1 : value.v;
  if ("v" in value && version !== PROTOCOL_VERSION && (value.type === "ready" || value.type === "session.start")) {
    throw new ProtocolError(ErrorCode.Version, "v", `protocol version ${PROTOCOL_VERSION} only`);
  }
  return value;
}

function parse(table: Record<string, Check>, frame: string | Uint8Array): unknown {
  const value = load(frame);
  if (typeof value.type !== "string") throw bad("type", "missing or not a string");
  const check = Object.prototype.hasOwnProperty.call(table, value.type) ? table[value.type] : undefined;
  if (check === undefined) {
    throw bad("type", `unknown message type (expected one of ${Object.keys(table).join(", ")})`);
  }
  return check(value, "");
}

/** One frame the server sent, as its message (defaults filled); a ProtocolError for anything else. */
export function parseServerMessage(frame: string | Uint8Array): ServerMessage {
  return parse(SERVER_MESSAGES, frame) as ServerMessage;
}

/** One frame an agent sent (the server's side, and the client's check of what it sends). */
export function parseAgentMessage(frame: string | Uint8Array): AgentMessage {
  return parse(AGENT_MESSAGES, frame) as AgentMessage;
}

/**
 * Why the server refuses `say` as sent (null: a valid line or reply line): the rules between its
 * fields and the agent's mode (`ready.answers_turns`), as `brisvox.sdk.protocol.say_refusal`.
 */
export function sayRefusal(say: Say, answersTurns: boolean): ProtocolError | null {
  if (say.reply_to === undefined || say.reply_to === null) {
    if (say.final === true) return bad("final", "final ends a reply: it needs reply_to");
    if (!say.text) return bad("text", "a line needs text");
    return null;
  }
  if (!answersTurns) {
    return new ProtocolError(ErrorCode.Unexpected, "reply_to",
      "a reply needs answers_turns in ready: this agent does not answer the turns");
  }
  if (say.interrupt === true) return bad("interrupt", "a reply line cannot interrupt");
  if (!say.text && say.final !== true) return bad("text", "a reply line needs text unless it is final");
  return null;
}

/** A tool declaration checked as the server will check it (a ProtocolError naming the field). */
export function checkToolSpec(spec: RemoteToolSpec, at: string): RemoteToolSpec {
  return TOOL_SPEC(spec, at) as RemoteToolSpec;
}

/** A JSON.stringify replacer that refuses NaN and the infinities (JSON has no such numbers). */
export function finiteOnly(_key: string, value: unknown): unknown {
  if (typeof value === "number" && !Number.isFinite(value)) throw new RangeError(`${value} is not JSON`);
  return value;
}

/**
 * The frame of one message, checked first: a message the server would refuse throws a
 * ProtocolError naming the field (and a value that is not JSON, such as NaN, one naming the frame).
 */
export function encode(message: AgentMessage): string {
  let frame: string;
  try {
    frame = JSON.stringify(message, finiteOnly);
  } catch (exc) {
    throw new ProtocolError(ErrorCode.NotJson, "", `${message.type}: not JSON (${(exc as Error).message})`);
  }
  try {
    const parsed = parseAgentMessage(frame);
    // The rules between a say's fields (the mode's own rule is the brain's: it knows its mode).
    const refusal = parsed.type === "say" ? sayRefusal(parsed, true) : null;
    if (refusal !== null) throw refusal;
  } catch (exc) {
    const refused = exc as ProtocolError;
    throw new ProtocolError(refused.code, refused.field, `${refused.reason} (in a ${message.type} message)`);
  }
  return frame;
}
