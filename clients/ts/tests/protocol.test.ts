import assert from "node:assert/strict";
import { test } from "node:test";

import {
  encode,
  ErrorCode,
  MAX_MESSAGE_BYTES,
  parseAgentMessage,
  parseServerMessage,
  ProtocolError,
  readOnly,
  sideEffect,
  ToolDeclarationError,
} from "../src/index.js";

function refused(run: () => unknown): ProtocolError {
  try {
    run();
  } catch (exc) {
    assert.ok(exc instanceof ProtocolError, `not a ProtocolError: ${String(exc)}`);
    return exc;
  }
  assert.fail("accepted");
}

test("a server frame parses into its message with the defaults filled", () => {
  assert.deepEqual(
    parseServerMessage('{"type":"session.start","v":1,"call_id":"c","agent":"a","transport":"websocket"}'),
    { type: "session.start", v: 1, call_id: "c", agent: "a", transport: "websocket", parameters: {}, resume: false },
  );
  assert.deepEqual(parseServerMessage('{"type":"event","kind":"user_turn","turn":3,"text":"hi","tool":null}'),
    { type: "event", kind: "user_turn", turn: 3, text: "hi" });
  assert.deepEqual(
    parseServerMessage('{"type":"tool.call","id":"r1","name":"x","arguments":{"a":[1]},"idempotency_key":"c/1/t",' +
      '"timeout":5}'),
    { type: "tool.call", id: "r1", name: "x", arguments: { a: [1] }, idempotency_key: "c/1/t", timeout: 5 },
  );
  assert.deepEqual(parseServerMessage('{"type":"error","code":"not_supported"}'),
    { type: "error", code: "not_supported", field: "", message: "" });
});

test("a bad frame is refused with its code and the field it names", () => {
  const cases: [string | Uint8Array, ErrorCode, string][] = [
    ['{"type":"tool.result","id":"a","ok":"yes"}', ErrorCode.BadField, "ok"],
    ['{"type":"ready","v":1,"tools":[{"name":"a b","description":"d","parameters":{}}]}', ErrorCode.BadField,
      "tools.0.name"],
    ['{"type":"ready","v":1,"tools":[{"name":"a","description":"d","parameters":{},"timeout":0}]}',
      ErrorCode.BadField, "tools.0.timeout"],
    ['{"type":"say","text":"hi","loud":true}', ErrorCode.BadField, "loud"],
    ['{"type":"say"}', ErrorCode.BadField, "text"],
    ['{"type":"nope"}', ErrorCode.BadField, "type"],
    ['{"text":"hi"}', ErrorCode.BadField, "type"],
    ['{"type":"ready","v":2}', ErrorCode.Version, "v"],
    ["[1]", ErrorCode.NotObject, ""],
    ["{", ErrorCode.NotJson, ""],
    [new Uint8Array([0xff]), ErrorCode.NotJson, ""],
    ['{"type":"tool.result","id":"a","ok":true,"result":NaN}', ErrorCode.NotJson, ""],
    [" ".repeat(MAX_MESSAGE_BYTES + 1), ErrorCode.TooLarge, ""],
  ];
  for (const [frame, code, field] of cases) {
    const error = refused(() => parseAgentMessage(frame));
    assert.deepEqual([error.code, error.field], [code, field], String(frame).slice(0, 80));
  }
  const error = refused(() => parseServerMessage('{"type":"session.start","v":1,"call_id":"c","agent":"a",' +
    '"transport":"t","parameters":{"k":1}}'));
  assert.equal(error.message, "parameters.k: expected a string");
});

test("a frame over the limit counts bytes, not characters", () => {
  const text = "é".repeat(MAX_MESSAGE_BYTES / 2 + 10); // half as many characters as bytes
  assert.equal(refused(() => parseAgentMessage(`{"type":"say","text":"${text}"}`)).code, ErrorCode.TooLarge);
});

test("encode refuses a command the server would refuse, naming the field and the message", () => {
  assert.equal(encode({ type: "say", text: "Hi.", interrupt: true }), '{"type":"say","text":"Hi.","interrupt":true}');
  const empty = refused(() => encode({ type: "say", text: "" }));
  assert.equal(empty.field, "text");
  assert.match(empty.message, /^text: a line needs text \(in a say message\)$/);
  assert.equal(encode({ type: "say", text: "", reply_to: "t1", final: true }),
    '{"type":"say","text":"","reply_to":"t1","final":true}');
  assert.equal(refused(() => encode({ type: "say", text: "Hi.", final: true })).field, "final");
  assert.equal(refused(() => encode({ type: "say", text: "Hi.", reply_to: "t1", interrupt: true })).field, "interrupt");
  assert.equal(refused(() => encode({ type: "tools.set", names: ["ok", "not ok"] })).field, "names.1");
  const nan = refused(() => encode({ type: "tool.result", id: "r1", ok: true, result: Number.NaN }));
  assert.equal(nan.code, ErrorCode.NotJson);
});

test("a tool declaration the server would refuse throws where it is declared, naming the field", () => {
  const run = (): string => "x";
  assert.throws(() => readOnly({ name: "has space", description: "d", run }),
    (e: unknown) => e instanceof ToolDeclarationError && e.field === "name" && /tool "has space": name:/.test(e.message));
  assert.throws(() => sideEffect({ name: "slow", description: "d", timeout: 121, run }),
    (e: unknown) => e instanceof ToolDeclarationError && e.field === "timeout");
  assert.throws(() => readOnly({ name: "long", description: "d".repeat(4097), run }),
    (e: unknown) => e instanceof ToolDeclarationError && e.field === "description");
  assert.throws(() => readOnly({ name: "norun", description: "d" } as never),
    (e: unknown) => e instanceof ToolDeclarationError && e.field === "run");
  const ok = sideEffect({ name: "book", description: "Book.", run });
  assert.deepEqual(ok.spec, { name: "book", description: "Book.", parameters: { type: "object", properties: {} },
    kind: "side_effect", timeout: 5, repeatable: false });
});
