// The staleness test: the committed src/generated/ is what gen-types.mjs
// makes from docs/schemas/, and a schema changed without regenerating
// fails it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { defaultOut, defaultSchemas, generate, stale } from "../scripts/gen-types.mjs";
import { tempDir } from "./helpers.mjs";

test("the generated types match docs/schemas (run npm run gen when this fails)", () => {
  assert.deepEqual(stale(generate(defaultSchemas), defaultOut), []);
});

test("a schema changed and not regenerated fails the check, naming the file", () => {
  const dir = tempDir("narratoria-ts-schemas");
  cpSync(defaultSchemas, dir, { recursive: true });
  const f = join(dir, "narration.schema.json");
  const s = JSON.parse(readFileSync(f, "utf8"));
  s.properties.mood = { description: "How the narration feels.", type: "string" };
  writeFileSync(f, JSON.stringify(s, null, 2));
  assert.deepEqual(stale(generate(dir), defaultOut), ["narration.ts: differs from its schema's"]);

  // A new schema file, and a schema gone.
  writeFileSync(join(dir, "weather.schema.json"), JSON.stringify({
    $schema: "https://json-schema.org/draft/2020-12/schema", $id: "https://narratoria.dev/schemas/weather.schema.json",
    type: "object", properties: { rain: { type: "boolean" } },
  }));
  const problems = stale(generate(dir), defaultOut);
  assert.ok(problems.includes("weather.ts: missing"), problems.join("; "));
  assert.ok(problems.includes("index.ts: differs from its schema's"), problems.join("; "));
  rmSync(join(dir, "approval.schema.json"));
  assert.ok(stale(generate(dir), defaultOut).includes("approval.ts: no schema makes it"));
});

test("the generator refuses a construct it does not understand, naming where", () => {
  const dir = tempDir("narratoria-ts-schemas");
  cpSync(defaultSchemas, dir, { recursive: true });
  const f = join(dir, "progress.schema.json");
  const s = JSON.parse(readFileSync(f, "utf8"));
  s.properties.planId.patternProperties = { "^x": { type: "string" } };
  writeFileSync(f, JSON.stringify(s));
  assert.throws(() => generate(dir), /progress\.schema\.json\/properties\/planId: keyword "patternProperties" is not understood/);
});

test("the generated types read as the schemas say", () => {
  const files = generate(defaultSchemas);
  const narration = files.get("narration.ts");
  assert.match(narration, /export interface Narration \{/);
  assert.match(narration, /\n  text: string;/, "required: no ?");
  assert.match(narration, /\n  cancelled\?: boolean;/, "optional");
  assert.match(narration, /\n  assets: Asset\[\] \| null;/, "a $ref into another schema, and null");
  assert.match(narration, /import type \{ Asset \} from "\.\/execution-result\.js";/);
  const event = files.get("event.ts");
  assert.match(event, /export type ProtocolEvent =\n  \| ProtocolEventLog\n/, "if/then variants as a union");
  assert.match(event, /export interface ProtocolEventDone \{\n  type: "done";/);
  assert.match(files.get("control-reply.ts"), /code\?: "unknown_plan" \| "plan_finished" \| "unknown_tool" \| "not_awaiting_approval" \| "not_in_flight";/);
  assert.match(files.get("plan-status.ts"), /state: "pending" \| "running" \| "retrying"/);
});
