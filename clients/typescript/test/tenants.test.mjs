// A tenant's credentials: `narratoria up --tenants acme,globex` writes
// <data-dir>/tenants/<name>.creds; a tenant's game server uses the subjects
// as a single game does and reaches only its own sessions.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Client, NotInFlightError, PermissionError } from "../dist/index.js";
import { connectWith, queue, startUp, waitFor } from "./helpers.mjs";

let sys;
let acmeNc;
let globexNc;
let acme;
let globex;

before(async () => {
  sys = await startUp(["--tenants", "acme,globex"]);
  acmeNc = await connectWith(sys.url, sys.creds("acme"));
  globexNc = await connectWith(sys.url, sys.creds("globex"));
  acme = new Client(acmeNc);
  globex = new Client(globexNc);
});

after(async () => {
  await acmeNc?.close();
  await globexNc?.close();
  await sys?.stop();
});

test("a tenant narrates, submits and watches its sessions; another tenant's session of the same name sees none of it", async () => {
  const mine = queue();
  const theirs = [];
  const wa = await acme.watch("s1", (u) => u.kind === "narration" && mine.push(u.narration));
  const wg = await globex.watch("s1", (u) => theirs.push(u));
  try {
    const n = await acme.narrate({ sessionId: "s1", text: "I roll to pick the lock" });
    assert.ok(n.text.length > 0);
    assert.equal((await mine.next(10000, "acme's narration")).promptId, n.promptId);
    const id = await acme.submit({ sessionId: "s1", text: "I look around" });
    assert.equal((await mine.next(30000, "the submitted prompt's narration")).promptId, id);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(theirs, [], "globex's s1 saw nothing of acme's");
  } finally {
    wa.stop();
    wg.stop();
  }
});

test("plan control, approvals and resets reach the tenant's own plans only", async () => {
  const narrated = queue();
  const w = await acme.watch("t1", (u) => u.kind === "narration" && narrated.push(u.narration));
  try {
    // tarry, a test skill, lingers a few seconds: long enough to look at its plan.
    await acme.submit({ sessionId: "t1", text: "I tarry by the well" });
    const [plan] = await waitFor(async () => {
      const ps = await acme.listPlans("t1");
      return ps.length > 0 && ps;
    }, 15000, "acme's plan in flight");
    const st = await acme.planStatus(plan.planId);
    assert.equal(st.planId, plan.planId);
    assert.ok(st.tools.some((t) => t.skill === "tarry"), JSON.stringify(st.tools));

    assert.ok(!(await globex.listPlans()).some((p) => p.planId === plan.planId), "globex does not list it");
    await assert.rejects(globex.planStatus(plan.planId), NotInFlightError, "to globex it is no plan at all");
    await assert.rejects(globex.cancel(plan.planId), NotInFlightError);

    await acme.cancel(plan.planId, { by: "test", reason: "enough" });
    const n = await narrated.next(20000, "the cancelled prompt's narration");
    assert.equal(n.cancelled, true);
  } finally {
    w.stop();
  }
  // A decision on a plan not in flight is refused at the door, for either
  // tenant: nothing is kept for it.
  await assert.rejects(acme.approve(crypto.randomUUID(), "gate", { by: "gm" }), /not in flight/);
  await assert.rejects(globex.deny(crypto.randomUUID(), "gate"), /not in flight/);
  const r = await acme.resetSession("t1", { clearState: true });
  assert.equal(r.clearedState, true);
});

test("a tenant's account has no grant on the asset store: assetObject says so", async () => {
  await assert.rejects(acme.assetObject(`sha256-${"0".repeat(64)}`, { timeoutMs: 3000 }), PermissionError);
});
