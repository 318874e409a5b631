// A production-shaped deployment: nats-server with the shipped accounts
// (deploy/nats/accounts.conf: one user per role, each with its own inbox
// prefix, and a worker pool of the skills used here) over mutual TLS (when openssl is there to make the certificates),
// provisioned by `narratoria provision` as the operator, the scheduler,
// skill worker and narrators as processes of their own. The game server
// connects as the game role: its inbox prefix _INBOX_game, its grants only.
// Here a narrator dies (SIGKILL) while narrate waits for its narration.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { Client, PermissionError, connectionOptions } from "../dist/index.js";
import { Proc, bin, budget, connectRetry, long, queue, repoDir, skillsDir, tempDir, waitFor } from "./helpers.mjs";

// The roles the suite connects as, with their inbox prefixes: the shipped
// ones, and a worker pool of the skills the suite's plans use, added to the
// accounts as `narratoria creds worker --conf` prints it.
const POOL = "ts";
const POOL_SKILLS = ["storyteller", "scene-art", "tarry"];
const roles = { game: "_INBOX_game", narrator: "_INBOX_narrator", scheduler: "_INBOX_scheduler", [`worker_${POOL}`]: `_INBOX_worker_${POOL}`, operator: "" };

let dir;
let url;
let tls; // {ca, cert, key} of a client, or undefined without openssl
let server;
let skills;
const procs = [];
let game;
let c;

function openssl(...args) {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

// makeCerts makes a CA, a server certificate for 127.0.0.1 and a client
// certificate, or returns undefined when openssl is missing.
function makeCerts() {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
  } catch {
    return undefined;
  }
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  openssl("req", "-x509", ...ec, "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "1", "-subj", "/CN=narratoria test CA");
  for (const [name, ext] of [["server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"], ["client", "extendedKeyUsage=clientAuth\n"]]) {
    writeFileSync(join(dir, `${name}.ext`), ext);
    openssl("req", ...ec, "-keyout", `${name}-key.pem`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
    openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial", "-days", "1",
      "-out", `${name}.pem`, "-extfile", `${name}.ext`);
  }
  return { ca: join(dir, "ca.pem"), cert: join(dir, "client.pem"), key: join(dir, "client-key.pem") };
}

// Every password the accounts name ($GAME_PASSWORD, …) is set, as
// pw-<variable>; password(user) is that user's.
let passwords = {};
let userVars = {};
const password = (user) => `pw-${userVars[user]}`;

function accounts() {
  let conf = readFileSync(join(repoDir, "deploy/nats/accounts.conf"), "utf8");
  const before = "      # Operators: everything";
  assert.ok(conf.includes(before), "deploy/nats/accounts.conf has its operators' line");
  const pool = execFileSync(bin("narratoria"), ["creds", "worker", "--conf", "--pool", POOL, "--skills", POOL_SKILLS.join(",")], { encoding: "utf8" });
  conf = conf.replace(before, pool + before);
  userVars = Object.fromEntries([...conf.matchAll(/user:\s*(\w+),\s*password:\s*\$([A-Z][A-Z0-9_]*)/g)].map((m) => [m[1], m[2]]));
  passwords = Object.fromEntries([...conf.matchAll(/password:\s*\$([A-Z][A-Z0-9_]*)/g)].map((m) => [m[1], `pw-${m[1]}`]));
  for (const r of Object.keys(roles)) assert.ok(userVars[r], `the accounts have a user ${r}`);
  return conf;
}

// roleEnv is a component's connection: its user, password, inbox prefix and
// TLS, and "check" (an operator provisioned).
function roleEnv(role) {
  return {
    NARRATORIA_NATS_URL: url,
    NARRATORIA_NATS_USER: role,
    NARRATORIA_NATS_PASSWORD: password(role),
    NARRATORIA_NATS_INBOXPREFIX: roles[role],
    NARRATORIA_NATS_PROVISION: "check",
    ...(tls ? { NARRATORIA_NATS_TLSCA: tls.ca, NARRATORIA_NATS_TLSCERT: tls.cert, NARRATORIA_NATS_TLSKEY: tls.key } : {}),
  };
}

async function component(name, role, args = [], env = {}) {
  const p = new Proc(name, bin(name.replace(/-[ab]$/, "")), args, { cwd: dir, env: { ...roleEnv(role), ...env }, log: true });
  procs.push(p);
  await p.waitLog(/running/, 20000);
  return p;
}

// gameConnection connects as the game role, with its inbox prefix unless
// told otherwise, through connectionOptions (as a game server would).
function gameConnection(inboxPrefix = roles.game) {
  return connectRetry(connectionOptions({
    url,
    user: "game",
    password: password("game"),
    inboxPrefix,
    ...(tls ? { tlsCA: tls.ca, tlsCert: tls.cert, tlsKey: tls.key } : {}),
    name: "ts-game",
  }));
}

before(async () => {
  dir = tempDir("narratoria-ts-secured");
  tls = makeCerts();
  skills = skillsDir(dir);
  writeFileSync(join(dir, "accounts.conf"), accounts());
  writeFileSync(join(dir, "server.conf"), [
    "listen: 127.0.0.1:-1",
    `ports_file_dir: "${dir}"`,
    `jetstream { store_dir: "${join(dir, "js")}" }`,
    ...(tls ? [`tls { cert_file: "${join(dir, "server.pem")}", key_file: "${join(dir, "server-key.pem")}", ca_file: "${tls.ca}", verify: true, timeout: 5 }`] : []),
    "include accounts.conf",
    "",
  ].join("\n"));
  server = new Proc("nats-server", bin("nats-server"), ["-c", join(dir, "server.conf")], { cwd: dir, env: passwords, log: true });
  procs.push(server);
  const ports = await waitFor(() => {
    if (!server.running) throw new Error(`nats-server exited:\n${server.tail()}`);
    const f = readdirSync(dir).find((n) => n.endsWith(".ports"));
    return f && JSON.parse(readFileSync(join(dir, f), "utf8"));
  }, 10000, "nats-server's ports file");
  url = ports.nats[0].replace(/^tls:/, "nats:");
  const prov = ["provision", "--nats-url", url, "--user", "operator", "--password", password("operator"),
    ...(tls ? ["--tls-ca", tls.ca, "--tls-cert", tls.cert, "--tls-key", tls.key] : [])];
  execFileSync(bin("narratoria"), prov, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
  await Promise.all([
    component("scheduler", "scheduler"),
    component("skillworker", `worker_${POOL}`, ["--skills-dir", skills, "--skills", POOL_SKILLS.join(",")]),
  ]);
  game = await gameConnection();
  c = new Client(game);
});

after(async () => {
  await game?.close();
  for (const p of procs.reverse()) await p.stop(5000);
});

test("the game role (inbox prefix _INBOX_game, mutual TLS) narrates, watches and fetches assets", async (t) => {
  t.diagnostic(tls ? `TLS: ${url} with a client certificate` : "openssl not found: this suite runs without TLS");
  const a = await component("narrator-a", "narrator");
  try {
    const kinds = new Set();
    const w = await c.watch("g1", (u) => kinds.add(u.kind));
    const n = await c.narrate({ sessionId: "g1", text: "Draw the castle gate" });
    assert.ok(n.text.length > 0);
    await waitFor(() => kinds.has("narration") && kinds.has("progress"), 5000, "updates as the game role");
    w.stop();
    const asset = (n.assets ?? []).find((x) => x.object);
    assert.ok(asset, `a stored asset: ${JSON.stringify(n.assets)}`);
    const data = await c.asset(asset);
    assert.equal(createHash("sha256").update(data).digest("hex"), asset.sha256, "read through the game role's grants");
    assert.deepEqual(await c.listPlans("g1"), []);
  } finally {
    await a.stop();
  }
});

test("without the inbox prefix its account requires, a call says so (PermissionError)", async () => {
  const nc = await gameConnection("");
  try {
    const err = await new Client(nc).listPlans(undefined, { timeoutMs: 3000 }).catch((e) => e);
    assert.ok(err instanceof PermissionError, `${err}`);
    assert.equal(err.operation, "subscription");
    assert.match(err.subject, /^_INBOX\./);
  } finally {
    await nc.close();
  }
});

// failover sends a prompt that lingers (the tarry test skill) to narrator A
// alone, ends A mid-narration (how: "kill" or "stop"), starts narrator B, and
// checks that narrate's retry got the narration once, from the plan that was
// running.
async function failover(how, session) {
  const retries = [];
  // Killed, A never answers: the attempt's timeout is the cue. Stopping, A
  // answers 503 once it has let go of the prompt: the attempt waits for that.
  const client = new Client(game, { narrateAttemptMs: how === "kill" ? 2000 : budget(20000), onRetry: (r) => retries.push(r) });
  const plans = new Set();
  const narrations = [];
  const running = queue();
  const w = await client.watch(session, (u) => {
    if (u.kind === "progress" && u.progress.state === "started") plans.add(u.planId);
    if (u.kind === "progress" && u.progress.toolId && u.progress.state === "running") running.push(u);
    if (u.kind === "narration") narrations.push(u.narration);
  });
  // Stopping, a narrator lets its prompts finish for a grace (5 s by
  // default, longer than the lingering tool): A's is short here, so it lets
  // go of the prompt and answers 503.
  const a = await component("narrator-a", "narrator", [], how === "stop" ? { NARRATORIA_NARRATOR_SHUTDOWNGRACE: "100ms" } : {});
  let b;
  try {
    const pending = client.narrate({ sessionId: session, text: "I tarry by the well" }, { timeoutMs: budget(60000) });
    pending.catch(() => {});
    await running.next(15000, "the lingering tool running");
    // A dies (SIGKILL: no answer), or stops (SIGTERM: it answers what it
    // holds 503), while its plan runs; then B starts and takes its
    // partitions over once A's leases lapse.
    await (how === "kill" ? a.kill() : a.stop());
    b = await component("narrator-b", "narrator");
    const n = await pending;
    assert.match(n.text, /You tarry a while/);
    assert.ok(retries.length >= 1, "narrate retried");
    assert.equal(n.trace?.length, 1, `one plan attempt: ${JSON.stringify(n.trace)}`);
    assert.equal(plans.size, 1, "the prompt's plan ran once");
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(narrations.filter((x) => x.promptId === n.promptId).length, 1, "narrated once");
    return retries;
  } finally {
    w.stop();
    await a.stop();
    await b?.stop();
  }
}

const errorsOf = (retries) => retries.map((r) => r.error.constructor.name);

test("a narrator killed during narrate: the retry gets the narration from the narrator that takes over", async (t) => {
  const retries = await failover("kill", "f1");
  t.diagnostic(`retried after: ${errorsOf(retries).join(", ")}`);
  assert.equal(errorsOf(retries)[0], "TimeoutError", "the dead narrator's attempt got no answer");
});

test("a narrator stopped (SIGTERM) during narrate answers 503: the retry gets the narration from the next one", { skip: !long && "NARRATORIA_LONG=1 (make test-long)" }, async (t) => {
  const retries = await failover("stop", "f2");
  t.diagnostic(`retried after: ${errorsOf(retries).join(", ")}`);
  assert.equal(errorsOf(retries)[0], "UnavailableError", "the stopping narrator answered 503");
});
