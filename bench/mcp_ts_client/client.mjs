// One MCP client of bench/transport_latency.py, on the TypeScript SDK (@modelcontextprotocol/sdk),
// the SDK of Node-based agents: a streamable-HTTP session on <url>/mcp, tools listed once (so the
// SDK validates every structured result against its tool's output schema, as such agents do).
// Reads one JSON request per line on stdin ({"tool", "arguments"}), answers one JSON line each:
// {"ms": the callTool's own time, measured here, "error": null or the error code}.
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const client = new Client({ name: "bhgbrain-bench-ts", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(process.argv[2] + "/mcp")));
await client.listTools();
process.stdout.write(JSON.stringify({ ready: true }) + "\n");

for await (const line of createInterface({ input: process.stdin })) {
  const request = JSON.parse(line);
  const started = performance.now();
  let error = null;
  try {
    const result = await client.callTool({ name: request.tool, arguments: request.arguments });
    if (result.isError) error = JSON.parse(result.content[0].text).error?.code ?? "error result";
  } catch (exc) {
    error = String(exc?.message ?? exc).slice(0, 80);
  }
  process.stdout.write(JSON.stringify({ ms: performance.now() - started, error }) + "\n");
}
await client.close();
