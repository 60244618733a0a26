/**
 * @brisvox/agent: attach a Node process to brisvox calls over the agent protocol (docs/AGENT_PROTOCOL.md).
 *
 * `serve(() => new MyBrain(), { port })` listens for the server's links; a Brain's `tools()` are
 * the remote tools the model may call, `onEvent` follows the call, and its commands
 * (`sayLine`, `updateContext`, `setTools`, `end`, `transfer`) go to the call.
 */

export { AgentError, type AgentServer, Brain, BoundedSender, type Logger, serve, type ServeOptions } from "./agent.js";
export * from "./protocol.js";
export { readOnly, sideEffect, type Tool, type ToolContext, ToolDeclarationError, ToolError,
  type ToolOptions } from "./tools.js";
