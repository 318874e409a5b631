// What needs no running system: subjects and checks, narrate's retries and
// the mapping of every answer to a typed error (over a scripted connection),
// update decoding, connection options.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { errors as natsErrors } from "@nats-io/nats-core";
import {
  BadRequestError,
  Client,
  NoRespondersError,
  NotInFlightError,
  PermissionError,
  RateLimitedError,
  RefusedError,
  ServiceError,
  Subjects,
  TimeoutError,
  UnavailableError,
  ValidationError,
  checkPrompt,
  connectionOptions,
  decodeUpdate,
  settingsFromEnv,
} from "../dist/index.js";
import { tempDir } from "./helpers.mjs";

const enc = new TextEncoder();
const dec = new TextDecoder();
const PLAN = "6ba7b810-9dad-11d1-80b4-00c04fd430c8";

function headers(h = {}) {
  return { get: (k) => h[k] ?? "", has: (k) => k in h };
}

function msg(subject, body, h) {
  const data = typeof body === "string" ? enc.encode(body) : enc.encode(JSON.stringify(body));
  return { subject, data, headers: h ? headers(h) : undefined, json: () => JSON.parse(dec.decode(data)), string: () => dec.decode(data) };
}

// FakeConnection answers each request with the next of its answers (a Msg,
// or an Error to throw), recording what was sent.
class FakeConnection {
  options = {};
  info = { max_payload: 1024 };
  sent = [];
  constructor(...answers) {
    this.answers = answers;
  }
  async request(subject, data, opts) {
    this.sent.push({ subject, body: data?.length ? JSON.parse(dec.decode(data)) : undefined, opts });
    const a = this.answers.length > 1 ? this.answers.shift() : this.answers[0];
    const v = typeof a === "function" ? a(subject) : a;
    if (v instanceof Error) throw v;
    return v;
  }
}

const noResponders = (s = "narratoria.narrate") => new natsErrors.RequestError("no responders", { cause: new natsErrors.NoRespondersError(s) });
const narration = (over = {}) => msg("_INBOX.x", { sessionId: "s1", promptId: "p", text: "It happens.", planId: PLAN, attempts: 1, ...over });

describe("subjects and checks", () => {
  test("subjects under the prefix; tokens and plan IDs checked", () => {
    const s = new Subjects();
    assert.equal(s.narrate(), "narratoria.narrate");
    assert.equal(s.prompts("demo"), "narratoria.prompts.demo");
    assert.equal(s.approvals(PLAN, "t"), `narratoria.approvals.${PLAN}.t`);
    assert.equal(s.planStatus(PLAN), `narratoria.control.status.${PLAN}`);
    assert.equal(s.planCancel(PLAN), `narratoria.control.cancel.${PLAN}`);
    assert.equal(s.planList(), "narratoria.control.list");
    assert.equal(s.sessionReset("demo"), "narratoria.sessions.demo.reset");
    assert.deepEqual(new Subjects("game").watched("s1"), ["game.narrations.s1", "game.progress.s1.*", "game.events.s1.>", "game.health.s1.*"]);
    assert.deepEqual(s.watched(), ["narratoria.narrations.*", "narratoria.progress.*.*", "narratoria.events.*.>", "narratoria.health.*.*"]);
    for (const bad of ["", "a".repeat(65), "a.b", "a b", "*", ">", "é"]) {
      assert.throws(() => s.prompts(bad), (e) => e instanceof ValidationError && e.problems[0].field === "sessionId", bad);
      assert.throws(() => s.approvals(PLAN, bad), ValidationError, bad);
    }
    assert.throws(() => s.planStatus("not-a-uuid"), (e) => e instanceof ValidationError && e.problems[0].field === "planId");
    assert.throws(() => new Subjects("a.b"), ValidationError);
    assert.doesNotThrow(() => s.prompts("A-z_0" + "a".repeat(59)));
  });

  test("checkPrompt trims as the narrator does, counts characters, names every problem, gives an ID", () => {
    const p = checkPrompt({ sessionId: "s1", text: "  hi  " }, () => "id-1");
    assert.equal(p.promptId, "id-1");
    assert.equal(p.text, "  hi  ", "sent as given; the narrator trims");
    assert.equal(checkPrompt({ sessionId: "s1", text: "x", promptId: "mine" }, () => "no").promptId, "mine");
    assert.doesNotThrow(() => checkPrompt({ sessionId: "s", text: "🐉".repeat(4000) }, () => "x"), "4000 characters, 8000 UTF-16 units");
    assert.throws(() => checkPrompt({ sessionId: "s", text: "🐉".repeat(4001) }, () => "x"), /4001 characters/);
    assert.throws(() => checkPrompt({ sessionId: "s", text: "\u00a0\t\n" }, () => "x"), /text must not be empty/);
    const err = (() => {
      try {
        checkPrompt({ sessionId: "a b", text: "", promptId: "p.1" }, () => "x");
      } catch (e) {
        return e;
      }
    })();
    assert.deepEqual(err.problems.map((p) => p.field), ["text", "sessionId", "promptId"]);
  });
});

describe("narrate over a scripted connection", () => {
  test("no responders, then a narrator: retried with the same prompt ID, told to onRetry", async () => {
    const retries = [];
    const nc = new FakeConnection(noResponders(), noResponders(), narration());
    const n = await new Client(nc, { onRetry: (r) => retries.push(r) }).narrate({ sessionId: "s1", text: "hi" });
    assert.equal(n.text, "It happens.");
    assert.equal(nc.sent.length, 3);
    assert.equal(new Set(nc.sent.map((s) => s.body.promptId)).size, 1, "one prompt ID across the retries");
    assert.deepEqual(retries.map((r) => [r.call, r.attempt, r.error.constructor.name]), [["narrate", 1, "NoRespondersError"], ["narrate", 2, "NoRespondersError"]]);
  });

  test("a narrator stopping (503), or no answer within the attempt: retried", async () => {
    const stopping = msg("_INBOX.x", "", { "Nats-Service-Error-Code": "503", "Nats-Service-Error": "narrator stopping; retry with the same promptId" });
    const nc = new FakeConnection(stopping, new natsErrors.TimeoutError(), narration());
    const retries = [];
    await new Client(nc, { narrateAttemptMs: 100, onRetry: (r) => retries.push(r.error) }).narrate({ sessionId: "s1", text: "hi" });
    assert.ok(retries[0] instanceof UnavailableError && retries[0].code === "503");
    assert.ok(retries[1] instanceof TimeoutError);
    assert.equal(nc.sent[1].opts.timeout, 100, "each attempt bounded by narrateAttemptMs");
  });

  test("other service errors are not retried; each has its class", async () => {
    for (const [code, cls] of [["400", BadRequestError], ["429", RateLimitedError], ["500", ServiceError]]) {
      const nc = new FakeConnection(msg("_INBOX.x", "", { "Nats-Service-Error-Code": code, "Nats-Service-Error": "no" }));
      await assert.rejects(new Client(nc).narrate({ sessionId: "s1", text: "hi" }), (e) => e instanceof cls && e.code === code);
      assert.equal(nc.sent.length, 1);
    }
  });

  test("the deadline ends the retries: TimeoutError with the last error", async () => {
    const nc = new FakeConnection(noResponders());
    const t = Date.now();
    const err = await new Client(nc).narrate({ sessionId: "s1", text: "hi" }, { timeoutMs: 300 }).catch((e) => e);
    assert.ok(err instanceof TimeoutError);
    assert.ok(err.lastError instanceof NoRespondersError);
    assert.ok(Date.now() - t < 1500);
    assert.ok(nc.sent.length >= 3, `backoff from 50 ms: ${nc.sent.length} attempts`);
  });
});

describe("answers mapped to typed errors", () => {
  test("control replies: not_in_flight, another error, no responders", async () => {
    const notInFlight = msg("_INBOX.x", { ok: false, code: "not_in_flight", error: "plan … is not in flight" });
    let err = await new Client(new FakeConnection(notInFlight)).planStatus(PLAN).catch((e) => e);
    assert.ok(err instanceof NotInFlightError && err instanceof ServiceError);
    assert.equal(err.planId, PLAN);
    assert.equal(err.subject, `narratoria.control.status.${PLAN}`);
    err = await new Client(new FakeConnection(msg("_INBOX.x", { ok: false, error: "the plan's actor did not answer in time" }))).cancel(PLAN).catch((e) => e);
    assert.ok(err instanceof ServiceError && !(err instanceof NotInFlightError));
    assert.equal(err.code, "");
    err = await new Client(new FakeConnection(noResponders("narratoria.control.list"))).listPlans().catch((e) => e);
    assert.ok(err instanceof NoRespondersError);
    const nc = new FakeConnection(msg("_INBOX.x", { ok: true, list: { plans: [{ planId: PLAN, sessionId: "s1" }] } }));
    assert.deepEqual(await new Client(nc).listPlans("s1"), [{ planId: PLAN, sessionId: "s1" }]);
    assert.deepEqual(nc.sent[0].body, { sessionId: "s1" });
    const cnc = new FakeConnection(msg("_INBOX.x", { ok: true }));
    await new Client(cnc).cancel(PLAN, { by: "gm", reason: "enough" });
    assert.deepEqual(cnc.sent[0].body, { by: "gm", reason: "enough" });
  });

  test("a permission violation names what was refused, and the inbox prefix when it is the inbox", async () => {
    const pv = new natsErrors.PermissionViolationError("Permissions Violation for Subscription to \"_INBOX.abc.*\"", "subscription", "_INBOX.abc.*");
    const err = await new Client(new FakeConnection(new natsErrors.RequestError("x", { cause: pv }))).listPlans().catch((e) => e);
    assert.ok(err instanceof PermissionError);
    assert.equal(err.operation, "subscription");
    assert.match(err.message, /inboxPrefix/);
  });

  test("submit: message ID and expected stream; a leader election retried; a refusal not; over the payload limit not sent", async () => {
    const ack = msg("_INBOX.x", { stream: "NARRATORIA_PROMPTS", seq: 7 });
    const election = msg("_INBOX.x", { error: { code: 503, err_code: 10008, description: "JetStream system temporarily unavailable" } });
    let nc = new FakeConnection(election, ack);
    const retries = [];
    const id = await new Client(nc, { onRetry: (r) => retries.push(r) }).submit({ sessionId: "s1", promptId: "p-1", text: "hi" });
    assert.equal(id, "p-1");
    assert.equal(nc.sent.length, 2);
    assert.equal(nc.sent[1].subject, "narratoria.prompts.s1");
    assert.equal(nc.sent[1].opts.headers.get("Nats-Msg-Id"), "s1.p-1");
    assert.equal(nc.sent[1].opts.headers.get("Nats-Expected-Stream"), "NARRATORIA_PROMPTS");
    assert.equal(retries[0].call, "submit");

    const full = msg("_INBOX.x", { error: { code: 503, err_code: 10077, description: "maximum bytes exceeded" } });
    nc = new FakeConnection(full);
    const err = await new Client(nc).submit({ sessionId: "s1", text: "hi" }).catch((e) => e);
    assert.ok(err instanceof RefusedError, `${err}`);
    assert.equal(err.errCode, 10077);
    assert.equal(nc.sent.length, 1, "a refusal is not retried");

    nc = new FakeConnection(ack);
    await assert.rejects(new Client(nc).submit({ sessionId: "s1", text: "x".repeat(2000) }), RefusedError);
    assert.equal(nc.sent.length, 0, "over the connection's max_payload: not sent");

    nc = new FakeConnection(election);
    const t = await new Client(nc).approve(PLAN, "gate", { by: "gm", timeoutMs: 300 }).catch((e) => e);
    assert.ok(t instanceof TimeoutError && t.lastError instanceof ServiceError, `${t}`);
    assert.deepEqual(nc.sent[0].body, { approved: true, by: "gm" });
    assert.equal(nc.sent[0].opts.headers.get("Nats-Expected-Stream"), "NARRATORIA_APPROVALS");
  });

  test("resetSession: the reply's numbers; an error reply", async () => {
    let nc = new FakeConnection(msg("_INBOX.x", { ok: true, changedSkills: 2, clearedState: true }));
    assert.deepEqual(await new Client(nc).resetSession("s1", { clearState: true }), { changedSkills: 2, clearedState: true });
    assert.deepEqual(nc.sent[0].body, { clearState: true });
    nc = new FakeConnection(msg("_INBOX.x", { ok: false, error: "no" }));
    await assert.rejects(new Client(nc).resetSession("s1"), ServiceError);
  });
});

test("decodeUpdate reads each watched subject; what does not decode is skipped", () => {
  const n = decodeUpdate(msg("narratoria.narrations.s1", { sessionId: "s1", text: "t" }));
  assert.equal(n.kind, "narration");
  assert.equal(n.sessionId, "s1");
  const p = decodeUpdate(msg(`narratoria.progress.s1.${PLAN}`, { planId: PLAN, state: "running", at: "2026-01-01T00:00:00Z", progress: 40 }));
  assert.deepEqual([p.kind, p.planId, p.progress.progress], ["progress", PLAN, 40]);
  const e = decodeUpdate(msg(`narratoria.events.s1.${PLAN}.roll`, { version: "0", type: "done", ok: true }, { "Narratoria-Attempt": "2", "Narratoria-Worker": "w1" }));
  assert.deepEqual([e.kind, e.toolId, e.event.type, e.attempt, e.worker], ["event", "roll", "done", 2, "w1"]);
  const h = decodeUpdate(msg("narratoria.health.s1.dice-roller", { skill: "dice-roller", from: "healthy", to: "degraded" }));
  assert.deepEqual([h.kind, h.skill, h.health.to], ["health", "dice-roller", "degraded"]);
  assert.equal(decodeUpdate(msg("narratoria.narrations.s1", "not json")), undefined);
  assert.equal(decodeUpdate(msg("narratoria.events.s1.x", { type: "log" })), undefined, "an event subject names plan and tool");
  assert.equal(decodeUpdate(msg("narratoria.other.s1", {})), undefined);
});

test("connectionOptions: creds, user and password, TLS files, inbox prefix; from the environment", () => {
  const dir = tempDir("narratoria-ts-unit");
  const creds = join(dir, "x.creds");
  writeFileSync(creds, "(read when the connection signs in: any bytes do here)\n");
  const o = connectionOptions({ url: "nats://a:1,nats://b:2", credsFile: creds, inboxPrefix: "_INBOX_game", tlsCA: "ca.pem", tlsCert: "c.pem", tlsKey: "k.pem", name: "g" });
  assert.deepEqual(o.servers, ["nats://a:1", "nats://b:2"]);
  assert.equal(typeof o.authenticator, "function");
  assert.equal(o.inboxPrefix, "_INBOX_game");
  assert.deepEqual(o.tls, { caFile: "ca.pem", certFile: "c.pem", keyFile: "k.pem" });
  const u = connectionOptions({ user: "game", password: "pw" });
  assert.deepEqual([u.user, u.pass, u.servers[0]], ["game", "pw", "nats://127.0.0.1:4222"]);
  assert.throws(() => connectionOptions({ tlsCert: "c.pem" }), /together/);
  assert.deepEqual(settingsFromEnv({ NARRATORIA_NATS_URL: "nats://x:1", NARRATORIA_NATS_INBOXPREFIX: "_INBOX_game", NARRATORIA_NATS_USER: "game" }),
    { url: "nats://x:1", credsFile: undefined, nkeyFile: undefined, user: "game", password: undefined, token: undefined,
      tlsCA: undefined, tlsCert: undefined, tlsKey: undefined, inboxPrefix: "_INBOX_game" });
});
