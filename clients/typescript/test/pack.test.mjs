// The package as a user gets it: npm pack, the tarball installed into an
// empty project beside @nats-io/transport-node, used there from ESM, from
// CommonJS and from TypeScript against `narratoria up`; and the README's
// game server, taken from the packed README, run there.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer, connect as tcpConnect } from "node:net";
import http from "node:http";
import { join } from "node:path";
import { Proc, pkgDir, startUp, tempDir, waitFor, budget } from "./helpers.mjs";

const npm = process.platform === "win32" ? "npm.cmd" : "npm";
let sys;
let proj;
let tarball;
let credsFile;

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: "utf8", ...opts });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

before(async () => {
  const dir = tempDir("narratoria-ts-pack");
  // npm pack runs prepack (the build) and writes the tarball.
  const out = JSON.parse(run(npm, ["pack", "--json", "--pack-destination", dir], { cwd: pkgDir }));
  tarball = join(dir, out[0].filename);
  proj = join(dir, "consumer");
  run("mkdir", ["-p", proj]);
  writeFileSync(join(proj, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }, null, 2));
  const lock = JSON.parse(readFileSync(join(pkgDir, "package-lock.json"), "utf8"));
  const natsVersion = lock.packages["node_modules/@nats-io/transport-node"].version;
  // What npm ci fetched is in npm's cache: offline first.
  run(npm, ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", tarball, `@nats-io/transport-node@${natsVersion}`],
    { cwd: proj });
  sys = await startUp();
  credsFile = join(sys.data, "narratoria.creds");
});

after(async () => {
  await sys?.stop();
});

test("the tarball ships compiled JavaScript and .d.ts files, no sources or tests", () => {
  const files = execFileSync("tar", ["-tzf", tarball], { encoding: "utf8" }).split("\n").filter(Boolean);
  for (const f of ["package/package.json", "package/README.md", "package/dist/index.js", "package/dist/index.d.ts",
    "package/dist/client.d.ts", "package/dist/errors.d.ts", "package/dist/generated/narration.d.ts"]) {
    assert.ok(files.includes(f), `${f} in the tarball`);
  }
  assert.deepEqual(files.filter((f) => /\.ts$/.test(f) && !/\.d\.ts$/.test(f)), [], "no TypeScript sources");
  assert.deepEqual(files.filter((f) => /\/(src|test|scripts)\//.test(f)), []);
});

test("in an empty project: narrate, watch sees a later submit's narration, listPlans, planStatus's typed error", async () => {
  writeFileSync(join(proj, "check.mjs"), `
import { readFileSync } from "node:fs";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { Client, NotInFlightError, NarratoriaError } from "@narratoria/client";

// Connected again when a loaded machine misses the server's authentication timeout.
let nc;
for (let i = 1; !nc; i++) {
  try {
    nc = await connect({ servers: process.env.NATS_URL, authenticator: credsAuthenticator(readFileSync(process.env.NATS_CREDS)) });
  } catch (err) {
    if (i >= 5) throw err;
    await new Promise((r) => setTimeout(r, 200 * i));
  }
}
const out = {};
const n = await new Client(nc).narrate({ sessionId: "pk1", text: "I roll to pick the lock" });
out.narration = n.text;
const c = new Client(nc);
let resolveSeen;
const seen = new Promise((r) => (resolveSeen = r));
const w = await c.watch("pk1", (u) => { if (u.kind === "narration" && u.narration.promptId === "pk-2") resolveSeen(u.narration.text); });
out.submitted = await c.submit({ sessionId: "pk1", promptId: "pk-2", text: "I look around" });
let timer;
out.watched = await Promise.race([seen, new Promise((_, rej) => (timer = setTimeout(() => rej(new Error("no narration on watch")), ${budget(30000)})))]);
clearTimeout(timer);
w.stop();
out.plans = await c.listPlans();
try {
  await c.planStatus("6ba7b810-9dad-11d1-80b4-00c04fd430c8");
  out.status = "resolved";
} catch (err) {
  out.status = { notInFlight: err instanceof NotInFlightError, narratoria: err instanceof NarratoriaError, code: err.code };
}
await nc.close();
console.log(JSON.stringify(out));
`);
  const r = run(process.execPath, ["check.mjs"], { cwd: proj, env: { ...process.env, NATS_URL: sys.url, NATS_CREDS: credsFile }, timeout: budget(90000) });
  const out = JSON.parse(r.trim().split("\n").pop());
  assert.ok(out.narration.length > 0, "narrate returned a narration with text");
  assert.equal(out.submitted, "pk-2");
  assert.ok(out.watched.length > 0, "watch saw the submitted prompt's narration");
  assert.ok(Array.isArray(out.plans), "listPlans answered");
  assert.deepEqual(out.status, { notInFlight: true, narratoria: true, code: "unknown_plan" });

  const cjs = run(process.execPath, ["-e", `const m = require("@narratoria/client"); console.log(typeof m.Client, typeof m.NotInFlightError, m.DEFAULT_PREFIX)`], { cwd: proj });
  assert.equal(cjs.trim(), "function function narratoria", "require() works too");
});

test("a TypeScript file using the package type-checks against its .d.ts", () => {
  writeFileSync(join(proj, "game.ts"), `
import { connect } from "@nats-io/transport-node";
import { Client, NotInFlightError, type Narration, type Update, type PlanStatus, type ProtocolEvent } from "@narratoria/client";

const nc = await connect({ servers: "nats://127.0.0.1:4222" });
const c = new Client(nc, { prefix: "narratoria", onRetry: (r) => console.log(r.call, r.attempt) });
const n: Narration = await c.narrate({ sessionId: "s1", text: "I look around" });
const text: string = n.text;
const w = await c.watch("s1", (u: Update) => {
  if (u.kind === "event") {
    const e: ProtocolEvent = u.event;
    if (e.type === "done") console.log(e.ok, u.toolId);
  }
  if (u.kind === "narration") console.log(u.narration.choices);
});
w.stop();
try {
  const st: PlanStatus = await c.planStatus("6ba7b810-9dad-11d1-80b4-00c04fd430c8");
  console.log(st.tools.map((t) => t.state), text);
} catch (err) {
  if (err instanceof NotInFlightError) console.log(err.planId, err.code);
}
// @ts-expect-error a prompt has text
await c.narrate({ sessionId: "s1" });
// @ts-expect-error an update's kind is one of four
await c.watch("s1", (u) => u.kind === "nothing");
// @ts-expect-error a Client takes a NATS connection
new Client("nats://127.0.0.1:4222");
`);
  // The libraries' own .d.ts are not checked again (skipLibCheck, for time);
  // the @ts-expect-error lines fail if the package's types fell to any.
  const tsc = join(pkgDir, "node_modules", "typescript", "bin", "tsc");
  run(process.execPath, [tsc, "--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext",
    "--skipLibCheck", "--typeRoots", join(pkgDir, "node_modules", "@types"), "--types", "node", "game.ts"], { cwd: proj });
});

// freePort asks the kernel for a port nobody listens on.
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

test("the README's game server, taken from the packed README, answers a player and streams the narration", async () => {
  const readme = readFileSync(join(proj, "node_modules", "@narratoria", "client", "README.md"), "utf8");
  const m = /## A game server in 20 lines[\s\S]*?```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(m, "the README has the game server");
  const lines = m[1].trim().split("\n").length;
  assert.ok(lines <= 24, `about 20 lines (${lines})`);
  writeFileSync(join(proj, "server.mjs"), m[1]);
  const port = await freePort();
  // Started again (up to 3 times) when it exits before it listens: its one
  // connect can miss the server's authentication timeout on a loaded machine.
  let server;
  for (let i = 1; ; i++) {
    server = new Proc("the README's game server", process.execPath, ["server.mjs"], {
      cwd: proj, env: { NATS_URL: sys.url, NATS_CREDS: credsFile, PORT: String(port) }, log: true,
    });
    const up = await waitFor(() => new Promise((res, rej) => {
      if (!server.running) return i < 3 ? res("exited") : rej(new Error(`the server exited:\n${server.tail()}`));
      const s = tcpConnect({ port, host: "127.0.0.1" }, () => {
        s.destroy();
        res("listening");
      });
      s.on("error", () => res(false));
    }), 10000, "the game server listening");
    if (up === "listening") break;
  }
  try {
    const events = [];
    const sse = http.get({ host: "127.0.0.1", port, path: "/?session=rd1" }, (res) => {
      res.setEncoding("utf8");
      res.on("data", (d) => events.push(d));
    });
    await new Promise((r) => setTimeout(r, 300)); // the watch subscribes
    const answer = await new Promise((resolve, reject) => {
      const req = http.request({ host: "127.0.0.1", port, path: "/?session=rd1", method: "POST" }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d) => (body += d));
        res.on("end", () => resolve({ status: res.statusCode, body }));
      });
      req.on("error", reject);
      req.end("I roll to pick the lock");
    });
    assert.equal(answer.status, 200, answer.body);
    const n = JSON.parse(answer.body);
    assert.ok(n.text.length > 0 && Array.isArray(n.choices));
    await waitFor(() => events.join("").includes(JSON.stringify(n.text).slice(1, 30)), 5000, "the narration on the event stream");
    sse.destroy();
    const bad = await new Promise((resolve) => {
      const req = http.request({ host: "127.0.0.1", port, path: "/?session=a%20b", method: "POST" }, (res) => resolve(res.statusCode));
      req.end("hello");
    });
    assert.equal(bad, 400, "a ValidationError is the player's mistake");
  } finally {
    await server.stop();
  }
});
