/**
 * A shop's agent: two remote tools and the call's events, served for brisvox on 127.0.0.1.
 *
 *   node build-test/examples/shop.js [port]     (the agent file: [agent_link] url = "ws://127.0.0.1:<port>")
 *
 * It prints what it does as JSON lines (its port, each booking it makes, each event it gets), so a
 * test can watch it: tests/clients/test_ts_client.py runs it against `brisvox serve`.
 * BOOK_SECONDS: how long a booking takes (default 1).
 */

import { Brain, type CallEvent, type JsonObject, readOnly, serve, sideEffect, type Tool, ToolError }
  from "../src/index.js";

const DAY: JsonObject = {
  type: "object",
  properties: { day: { type: "string", description: "a day of the week" } },
  required: ["day"],
};

interface Day {
  day: string;
}

function parseDay(args: JsonObject): Day {
  if (typeof args.day !== "string") throw new Error("day must be a string");
  return { day: args.day };
}

function print(fact: JsonObject): void {
  process.stdout.write(`${JSON.stringify(fact)}\n`);
}

const bookSeconds = Number(process.env.BOOK_SECONDS ?? "1");

class Shop extends Brain {
  override resume = true;

  override tools(): Tool[] {
    return [
      readOnly<Day>({
        name: "opening_hours",
        description: "When the shop is open on a day.",
        parameters: DAY,
        timeout: 2,
        parse: parseDay,
        run: ({ day }) => {
          if (day === "sunday") throw new ToolError("closed on sundays");
          return `${day}: nine to five`;
        },
      }),
      sideEffect<Day>({
        name: "book",
        description: "Book a visit on a day (takes a moment).",
        parameters: DAY,
        timeout: 3,
        parse: parseDay,
        run: async ({ day }, ctx) => {
          await new Promise((resolve) => setTimeout(resolve, bookSeconds * 1000));
          print({ booked: day, key: ctx.idempotencyKey });
          return "booked";
        },
      }),
    ];
  }

  override onEvent(event: CallEvent): void {
    print({ event: event.kind, tool: event.tool ?? null, outcome: event.outcome ?? null, text: event.text ?? null });
  }
}

async function main(): Promise<void> {
  const server = await serve(() => new Shop(), { port: Number(process.argv[2] ?? "0") });
  print({ listening: server.port });
  const stop = (): void => {
    void server.close().then(() => process.exit(0));
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
