/**
 * The parity check's Node side (tests/clients/test_ts_protocol.py): reads a JSON array of frames on
 * stdin, `{"side": "agent" | "server", "text": "..."}` or `{"side": ..., "base64": "..."}` (raw bytes),
 * and prints one JSON array: per frame `{"message": ...}` (parsed, defaults filled) or
 * `{"code": ..., "field": ...}` (refused).  `{"side": "encode", "message": {...}}` asks for the frame the
 * client sends for an agent message instead: `{"frame": "..."}` or the refusal.
 */

import { type AgentMessage, encode, parseAgentMessage, parseServerMessage, ProtocolError } from "../src/index.js";

interface Frame {
  side: "agent" | "server" | "encode";
  text?: string;
  base64?: string;
  message?: AgentMessage;
}

function one(frame: Frame): unknown {
  if (frame.side === "encode") {
    try {
      return { frame: encode(frame.message as AgentMessage) };
    } catch (exc) {
      if (exc instanceof ProtocolError) return { code: exc.code, field: exc.field };
      return { crash: String(exc) };
    }
  }
  const data = frame.base64 !== undefined ? new Uint8Array(Buffer.from(frame.base64, "base64")) : (frame.text ?? "");
  try {
    return { message: frame.side === "agent" ? parseAgentMessage(data) : parseServerMessage(data) };
  } catch (exc) {
    if (exc instanceof ProtocolError) return { code: exc.code, field: exc.field };
    return { crash: String(exc) };
  }
}

const chunks: Buffer[] = [];
process.stdin.on("data", (chunk: Buffer) => chunks.push(chunk));
process.stdin.on("end", () => {
  const frames = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Frame[];
  process.stdout.write(JSON.stringify(frames.map(one)));
});
