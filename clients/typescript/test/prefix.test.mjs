// A deployment with another subject prefix (nats.prefix): the client given
// that prefix narrates there; one left on the default finds nothing.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Client, NoRespondersError, TimeoutError } from "../dist/index.js";
import { connectWith, startUp } from "./helpers.mjs";

let sys;
let nc;

before(async () => {
  sys = await startUp([], { NARRATORIA_NATS_PREFIX: "mygame" });
  nc = await connectWith(sys.url, sys.creds());
});

after(async () => {
  await nc?.close();
  await sys?.stop();
});

test("the client honours the deployment's prefix", async () => {
  const c = new Client(nc, { prefix: "mygame" });
  const kinds = new Set();
  const w = await c.watch("p1", (u) => kinds.add(`${u.kind} ${u.subject.split(".")[0]}`));
  try {
    const n = await c.narrate({ sessionId: "p1", text: "I roll to pick the lock" });
    assert.ok(n.text.length > 0);
    assert.equal(await c.submit({ sessionId: "p1", promptId: "q-1", text: "I look around" }), "q-1");
    assert.ok((await c.listPlans("p1")).every((p) => p.sessionId === "p1"), "control answers under the prefix");
    assert.equal((await c.resetSession("p1")).clearedState, false);
    assert.ok(kinds.has("narration mygame") && kinds.has("progress mygame"), [...kinds].join(", "));
  } finally {
    w.stop();
  }
  const other = new Client(nc);
  await assert.rejects(other.listPlans(), NoRespondersError);
  const err = await other.narrate({ sessionId: "p1", text: "hi" }, { timeoutMs: 300 }).catch((e) => e);
  assert.ok(err instanceof TimeoutError && err.lastError instanceof NoRespondersError);
});
