// Every call of the client against `narratoria up` (one game: its
// narratoria.creds), with the sample skills and the test skills.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { jetstream } from "@nats-io/jetstream";
import {
  AssetChangedError,
  AssetNotFoundError,
  AssetTooLargeError,
  Client,
  NarratoriaError,
  NoAssetObjectError,
  NoRespondersError,
  NotInFlightError,
  ServiceError,
  TimeoutError,
  ValidationError,
} from "../dist/index.js";
import { budget, connectWith, queue, startUp, uuid, waitFor } from "./helpers.mjs";

let sys;
let nc;
let c;
let js;

before(async () => {
  sys = await startUp();
  nc = await connectWith(sys.url, sys.creds());
  c = new Client(nc);
  js = jetstream(nc);
});

after(async () => {
  await nc?.close();
  await sys?.stop();
});

const session = (name) => `${name}-${Math.random().toString(36).slice(2, 8)}`;

// publishPlan publishes a plan of these tools on the session (as a planner
// would) and returns its ID.
async function publishPlan(sessionId, ...tools) {
  const id = uuid();
  await js.publish(`narratoria.plans.${sessionId}`, JSON.stringify({ requestId: id, tools }));
  return id;
}

const tool = (toolId, toolPath, more = {}) => ({ toolId, toolPath, retryPolicy: { maxRetries: 0 }, ...more });

// results follows the plans' results of a session.
function results(sessionId) {
  const q = queue();
  const sub = nc.subscribe(`narratoria.results.${sessionId}.*`, { callback: (err, m) => !err && q.push(m.json()) });
  return { next: (what) => q.next(20000, what), stop: () => sub.unsubscribe() };
}

describe("narrate and watch", () => {
  test("narrate returns the narration, and watch sees its narration, progress and script events", async () => {
    const s = session("w");
    const kinds = new Set();
    const seen = [];
    const w = await c.watch(s, (u) => {
      kinds.add(u.kind);
      seen.push(u);
    });
    try {
      const n = await c.narrate({ sessionId: s, text: "I roll to pick the lock" });
      assert.ok(n.text.length > 0, "the narration has text");
      assert.equal(n.sessionId, s);
      assert.ok(n.promptId, "the client gave the prompt an ID");
      assert.ok(n.planId);
      await waitFor(() => kinds.has("narration") && kinds.has("progress") && kinds.has("event"), 5000, "narration, progress and event updates");
      const ev = seen.find((u) => u.kind === "event");
      assert.equal(ev.sessionId, s);
      assert.equal(ev.planId, n.planId);
      assert.ok(ev.toolId);
      assert.equal(ev.event.version, "0");
      assert.equal(ev.attempt, 1, "the attempt header");
      const nu = seen.find((u) => u.kind === "narration");
      assert.equal(nu.narration.promptId, n.promptId);
      const pr = seen.find((u) => u.kind === "progress");
      assert.equal(pr.planId, n.planId);
      assert.equal(typeof pr.progress.state, "string");
    } finally {
      w.stop();
    }
  });

  test("a prompt the narrator would refuse is refused before it is sent", async () => {
    for (const [p, field] of [
      [{ sessionId: "a b", text: "x" }, "sessionId"],
      [{ sessionId: "s1", text: "   " }, "text"],
      [{ text: "no session" }, "sessionId"],
      [{ sessionId: "s1", text: "x", promptId: "p.1" }, "promptId"],
      [{ sessionId: "s1", text: "x".repeat(4001) }, "text"],
    ]) {
      await assert.rejects(c.narrate(p), (err) => err instanceof ValidationError && err.problems.some((q) => q.field === field),
        JSON.stringify(p).slice(0, 60));
      await assert.rejects(c.submit(p), ValidationError);
    }
  });

  test("watch of every session; a callback's error goes to onError; a bad session is refused", async () => {
    const s = session("all");
    const errors = [];
    const sessions = new Set();
    const w = await c.watch(undefined, (u) => {
      sessions.add(u.sessionId);
      if (u.kind === "narration") throw new Error("callback failed");
    }, { onError: (err, u) => errors.push([err.message, u.kind]) });
    try {
      await c.narrate({ sessionId: s, text: "I look around" });
      await waitFor(() => sessions.has(s) && errors.length > 0, 5000, "updates of every session");
      assert.deepEqual(errors[0], ["callback failed", "narration"]);
    } finally {
      w.stop();
    }
    await assert.rejects(c.watch("a b", () => {}), ValidationError);
  });
});

test("submit is durable and safe to retry: one prompt ID is stored and narrated once", async () => {
  const s = session("s");
  const got = queue();
  const w = await c.watch(s, (u) => u.kind === "narration" && got.push(u.narration));
  try {
    const p = { sessionId: s, promptId: "p-1", text: "I step forward" };
    assert.equal(await c.submit(p), "p-1");
    assert.equal(await c.submit(p), "p-1", "sent again with the same ID");
    const n = await got.next(30000, "the narration");
    assert.equal(n.promptId, "p-1");
    assert.ok(n.text.length > 0);
    await assert.rejects(got.next(700, "a second narration"), /none within/, "narrated once");
    const id = await c.submit({ sessionId: s, text: "I open the door" });
    assert.match(id, /^[0-9a-f-]{36}$/, "an ID is generated");
    assert.equal((await got.next(30000, "the second prompt's narration")).promptId, id);
  } finally {
    w.stop();
  }
});

describe("plan control", () => {
  test("status, list and cancel of a plan in flight; a finished plan's status from its result, its cancel a NotInFlightError", async () => {
    const s = session("c");
    const res = results(s);
    try {
      const planId = await publishPlan(s, tool("dig", "slow/run"), tool("after", "step/run", { dependencies: ["dig"] }));
      const st = await waitFor(async () => {
        const st = await c.planStatus(planId);
        return st.tools[0].state === "running" && st;
      }, 10000, "the slow tool running");
      assert.equal(st.planId, planId);
      assert.equal(st.sessionId, s);
      assert.equal(st.versions[0].version, 0);
      assert.deepEqual(st.tools.map((t) => t.toolId), ["dig", "after"]);
      assert.deepEqual(await c.listPlans(s), [{ planId, sessionId: s }]);
      assert.ok((await c.listPlans()).some((p) => p.planId === planId), "listed among every session's plans");
      await c.cancel(planId, { by: "test", reason: "enough" });
      const r = await res.next("the cancelled plan's result");
      assert.equal(r.planId, planId);
      assert.equal(r.failureReason, "cancelled");
      const fin = await waitFor(async () => {
        const st = await c.planStatus(planId);
        return st.result && st;
      }, 5000, "the plan's status from its result");
      assert.equal(fin.phase, "published");
      assert.equal(fin.result.state, "cancelled");
      const err = await c.cancel(planId).then(() => null, (e) => e);
      assert.ok(err instanceof NotInFlightError, `cancelling it again: ${err}`);
      assert.ok(err instanceof ServiceError && err instanceof NarratoriaError);
      assert.equal(err.code, "plan_finished");
      assert.equal(err.planId, planId);
      await assert.rejects(c.planStatus(uuid()), (e) => e instanceof NotInFlightError && e.code === "unknown_plan", "an unknown plan");
      assert.deepEqual(await c.listPlans(s), []);
      await assert.rejects(c.cancel("not a plan id!"), (e) => e instanceof ValidationError && e.problems[0].field === "planId");
      await assert.rejects(c.planStatus("x"), ValidationError);
      await assert.rejects(c.listPlans("a b"), ValidationError);
    } finally {
      res.stop();
    }
  });

  test("approve lets a waiting tool run; deny skips it and fails its dependents", async () => {
    const s = session("a");
    const res = results(s);
    try {
      let planId = await publishPlan(s, tool("gate", "step/run", { requiresApproval: true }));
      await waitFor(async () => (await c.planStatus(planId)).tools[0].state === "awaiting_approval", 10000, "the tool waiting");
      await c.approve(planId, "gate", { by: "gm", reason: "fine" });
      let r = await res.next("the approved plan's result");
      assert.equal(r.planId, planId);
      assert.equal(r.success, true, r.message);

      planId = await publishPlan(s, tool("gate", "step/run", { requiresApproval: true }), tool("next", "step/run", { dependencies: ["gate"] }));
      // Decisions are durable: one sent as soon as the plan is accepted (the
      // door refuses one for a plan not in flight yet), perhaps before the
      // tool waits, is applied when it does.
      await waitFor(async () => (await c.planStatus(planId)).planId === planId, 10000, "the second plan accepted");
      await c.deny(planId, "gate", { by: "gm", reason: "no" });
      r = await res.next("the denied plan's result");
      assert.equal(r.planId, planId);
      assert.equal(r.success, false);
      assert.equal(r.toolResults.find((t) => t.toolId === "gate").state, "skipped");
      await assert.rejects(c.approve("nope", "gate"), ValidationError);
      await assert.rejects(c.deny(planId, "a.b"), (e) => e instanceof ValidationError && e.problems[0].field === "toolId");
    } finally {
      res.stop();
    }
  });
});

test("resetSession makes the session's skills healthy again (health transitions come through watch)", async () => {
  const s = session("h");
  const health = queue();
  const w = await c.watch(s, (u) => u.kind === "health" && health.push(u));
  try {
    // Three failed attempts degrade a healthy skill (SPEC §7).
    await publishPlan(s, tool("b", "broken/run", { retryPolicy: { maxRetries: 3, backoffMs: 1 } }));
    const h = await health.next(20000, "a health transition of the broken skill");
    assert.equal(h.skill, "broken");
    assert.equal(h.health.skill, "broken");
    assert.notEqual(h.health.to, "healthy");
    const r = await c.resetSession(s, { clearState: true });
    assert.equal(r.clearedState, true);
    assert.ok(r.changedSkills >= 1, `changed ${r.changedSkills}`);
    const back = await health.next(5000, "the transition back to healthy");
    assert.equal(back.health.to, "healthy");
    assert.deepEqual(await c.resetSession(s), { changedSkills: 0, clearedState: false });
  } finally {
    w.stop();
  }
  await assert.rejects(c.resetSession("c 1"), (e) => e instanceof ValidationError && e.problems[0].field === "sessionId");
});

test("asset fetches a narration's picture from the object store and checks it by its hash", async () => {
  const n = await c.narrate({ sessionId: session("art"), text: "Draw the castle gate" });
  const a = (n.assets ?? []).find((x) => x.object);
  assert.ok(a, `a stored asset: ${JSON.stringify(n.assets)}`);
  const data = await c.asset(a);
  assert.equal(createHash("sha256").update(data).digest("hex"), a.sha256);
  assert.equal(data.length, a.size);
  assert.match(new TextDecoder().decode(data), /<svg/);
  const o = await c.assetObject(a.object);
  assert.equal(o.mediaType, "image/svg+xml");
  assert.deepEqual(Buffer.from(o.data), Buffer.from(data));

  await assert.rejects(c.asset({ ...a, sha256: "0".repeat(64) }), AssetChangedError, "a digest the content does not have");
  await assert.rejects(c.asset({ ...a, object: undefined }), NoAssetObjectError);
  await assert.rejects(c.assetObject(`sha256-${"0".repeat(64)}`), AssetNotFoundError);
  await assert.rejects(c.assetObject("pic.svg"), ValidationError);
  const small = new Client(nc, { assetMaxSize: data.length - 1 });
  await assert.rejects(small.asset(a), (e) => e instanceof AssetTooLargeError && e.size === data.length, "over the client's limit: refused before it is read");
});

test("nothing serving: control says so at once; narrate retries until its deadline and says why", async () => {
  const retries = [];
  const other = new Client(nc, { prefix: "other", onRetry: (r) => retries.push(r) });
  const t = Date.now();
  const err = await other.narrate({ sessionId: "s", text: "hi" }, { timeoutMs: budget(1500) }).catch((e) => e);
  assert.ok(err instanceof TimeoutError, `${err}`);
  assert.ok(err.lastError instanceof NoRespondersError, "the last error says no responders");
  assert.equal(err.lastError.subject, "other.narrate");
  assert.ok(Date.now() - t < budget(4500), "narrate kept to its deadline");
  assert.ok(retries.length >= 2 && retries.every((r) => r.call === "narrate" && r.error instanceof NoRespondersError));
  await assert.rejects(other.listPlans(), (e) => e instanceof NoRespondersError && e.subject === "other.control.list");
  await assert.rejects(other.resetSession("s"), NoRespondersError);
  assert.throws(() => new Client(nc, { prefix: "a.b" }), ValidationError);

  const ac = new AbortController();
  const p = other.narrate({ sessionId: "s", text: "hi" }, { signal: ac.signal });
  ac.abort(new Error("player left"));
  await assert.rejects(p, /player left/, "an aborted call rejects with the signal's reason");
});
