/**
 * Remote tools: declared with a JSON Schema for their arguments, run by the agent, called by
 * the model through the server (`tool.call` / `tool.result`).
 *
 * A declaration is checked where it is made (`readOnly(...)` / `sideEffect(...)` throw an
 * AgentToolError naming the bad field), never on a call's first turn.
 */

import { checkToolSpec, type JsonObject, type JsonValue, ProtocolError, type RemoteToolSpec,
  type SessionStart } from "./protocol.js";

/** Thrown by a tool: the model reads the message as the tool's failure (`tool_failed`). */
export class ToolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ToolError";
  }
}

/** A declaration the server would refuse: `field` names the bad field. */
export class ToolDeclarationError extends Error {
  constructor(readonly tool: string, readonly field: string, reason: string) {
    super(`tool ${JSON.stringify(tool)}: ${field ? `${field}: ` : ""}${reason}`);
    this.name = "ToolDeclarationError";
  }
}

/** What a running tool knows of its call. */
export interface ToolContext {
  /** The call's `session.start`. */
  session: SessionStart;
  /** The server's id of this request. */
  requestId: string;
  /** The model's id of the call. */
  callId: string;
  /** The engine's epoch (turn) of the call. */
  turn: number;
  /** `session/epoch/call_id`: the client runs a tool once per key (a repeat gets the first answer). */
  idempotencyKey: string;
  /** Seconds the server waits (a side effect past it still reaches the model, as a late note). */
  timeout: number;
  /** Aborted when the call is over; for a ReadOnly tool also at its timeout (the server has moved on). */
  signal: AbortSignal;
}

export interface ToolOptions<A> {
  /** `[A-Za-z0-9_-]{1,64}` */
  name: string;
  /** What the model reads (at most 4096 characters). */
  description: string;
  /** The arguments' JSON Schema; default: no arguments. */
  parameters?: JsonObject;
  /** Seconds, 0 < t <= 120 (default 5). */
  timeout?: number;
  /** An identical SideEffect call in the same turn runs again (default false: refused as a repeat). */
  repeatable?: boolean;
  /**
   * Turns the arguments (already checked by the server against `parameters`) into `A`; what it
   * throws is answered to the model as invalid arguments.  Default: the arguments as they are.
   */
  parse?: (args: JsonObject) => A;
  /** The tool's work: its JSON result (or nothing); a ToolError is the failure the model reads. */
  run: (args: A, ctx: ToolContext) => Promise<JsonValue | void> | JsonValue | void;
}

/** A declared tool: its `spec` (as sent in `ready`) and how to call it. */
export interface Tool {
  readonly spec: RemoteToolSpec;
  call(args: JsonObject, ctx: ToolContext): Promise<unknown>;
}

const NO_ARGUMENTS: JsonObject = { type: "object", properties: {} };

function declareTool<A>(kind: RemoteToolSpec["kind"], options: ToolOptions<A>): Tool {
  const name = typeof options?.name === "string" ? options.name : "?";
  if (typeof options?.run !== "function") throw new ToolDeclarationError(name, "run", "expected a function");
  if (options.parse !== undefined && typeof options.parse !== "function") {
    throw new ToolDeclarationError(name, "parse", "expected a function");
  }
  const declared: RemoteToolSpec = {
    name: options.name,
    description: options.description,
    parameters: options.parameters ?? NO_ARGUMENTS,
    kind,
    timeout: options.timeout ?? 5.0,
    repeatable: options.repeatable ?? false,
  };
  let spec: RemoteToolSpec;
  try {
    spec = checkToolSpec(declared, "");
  } catch (exc) {
    if (exc instanceof ProtocolError) throw new ToolDeclarationError(name, exc.field, exc.reason);
    throw exc;
  }
  const { parse, run } = options;
  return {
    spec,
    async call(args: JsonObject, ctx: ToolContext): Promise<unknown> {
      let parsed: A;
      try {
        parsed = parse === undefined ? (args as A) : parse(args);
      } catch (exc) {
        throw new ToolError(`invalid arguments: ${exc instanceof Error ? exc.message : String(exc)}`);
      }
      return await run(parsed, ctx);
    },
  };
}

/** A tool without side effects: dropped at its timeout or when the caller interrupts. */
export function readOnly<A = JsonObject>(options: ToolOptions<A>): Tool {
  return declareTool("read_only", options);
}

/** A tool that changes the world: never cancelled by the engine, run once per idempotency key. */
export function sideEffect<A = JsonObject>(options: ToolOptions<A>): Tool {
  return declareTool("side_effect", options);
}
