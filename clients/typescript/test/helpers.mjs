// Test helpers: the Go binaries (built once by test/run.mjs, or here when a
// file runs alone), temporary folders other users reach (a root skill worker
// runs each script as a user of its own), `narratoria up`, nats-server and
// the components as processes of their own.
import { spawn, execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, chmodSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";
import { credsAuthenticator } from "@nats-io/nats-core";

export const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const repoDir = resolve(pkgDir, "../..");

/** Budgets scale as the Go tests' do (NARRATORIA_TEST_SCALE, e.g. 2 on a slow machine). */
export const scale = Number(process.env.NARRATORIA_TEST_SCALE) > 0 ? Number(process.env.NARRATORIA_TEST_SCALE) : 1;
export const budget = (ms) => Math.round(ms * scale);
export const long = process.env.NARRATORIA_LONG === "1";

const children = new Set();
process.on("exit", () => {
  for (const c of children) {
    try {
      process.kill(c.pid, "SIGKILL");
    } catch {
      // gone already
    }
  }
});

// openUp makes dir, and every folder above it that this process owns, reachable
// by other users (o+x), as the scripts a root worker runs as users of their
// own must reach their skill folder.
function openUp(dir, mode = 0o755) {
  chmodSync(dir, mode);
  for (let d = dirname(dir); d !== dirname(d); d = dirname(d)) {
    const st = statSync(d);
    if ((st.mode & 0o001) === 0 && st.uid === process.getuid?.()) chmodSync(d, st.mode | 0o011);
  }
}

/** tempDir makes a temporary folder (removed when the process exits, unless NARRATORIA_TS_KEEP is set). */
export function tempDir(name) {
  const root = process.env.NARRATORIA_TS_TMP || tmpdir();
  const dir = mkdtempSync(join(root, `${name}-`));
  openUp(dir);
  if (!process.env.NARRATORIA_TS_KEEP) {
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return dir;
}

const BINARIES = ["narratoria", "narratoria-skills", "narrator", "scheduler", "skillworker", "nats-server"];

/** buildBinaries builds the commands the suites run into dir (one go build). */
export function buildBinaries(dir) {
  mkdirSync(dir, { recursive: true });
  const go = process.env.GO || "go";
  execFileSync(go, ["build", "-o", dir + "/", "./cmd/narratoria", "./cmd/narratoria-skills", "./cmd/narrator",
    "./cmd/scheduler", "./cmd/skillworker", "github.com/nats-io/nats-server/v2"], { cwd: repoDir, stdio: "inherit" });
  openUp(dir);
  return dir;
}

let binDir;
/** bin returns the path of a built command. */
export function bin(name) {
  if (!binDir) {
    binDir = process.env.NARRATORIA_TS_BIN;
    if (!binDir || !BINARIES.every((b) => existsSync(join(binDir, b)))) binDir = buildBinaries(join(tempDir("narratoria-ts-bin"), "bin"));
  }
  return join(binDir, name);
}

// Test skills beside the samples: a shell script each, and a manifest no
// rule of the planner picks (no examples), but tarry, which the planner
// picks for "I tarry …" and which lingers a few seconds.
const testSkills = {
  slow: {
    script: `#!/bin/sh
cat >/dev/null
printf '%s\\n' '{"version":"0","type":"ui_event","event":"progress","payload":{"percent":40,"message":"digging"}}'
sleep 60
printf '%s\\n' '{"version":"0","type":"done","ok":true,"output":{}}'
`,
    timeout: 90000,
  },
  step: {
    script: `#!/bin/sh
cat >/dev/null
printf '%s\\n' '{"version":"0","type":"done","ok":true,"output":{"narration":"The step is taken."}}'
`,
  },
  broken: {
    script: `#!/bin/sh
cat >/dev/null
printf '%s\\n' '{"version":"0","type":"error","errorCode":"broken","errorMessage":"always fails"}'
printf '%s\\n' '{"version":"0","type":"done","ok":false,"summary":"broken"}'
`,
  },
  tarry: {
    script: `#!/bin/sh
cat >/dev/null
printf '%s\\n' '{"version":"0","type":"ui_event","event":"progress","payload":{"percent":10,"message":"lingering"}}'
sleep 4
printf '%s\\n' '{"version":"0","type":"done","ok":true,"output":{"narration":"You tarry a while, and time passes."}}'
`,
    keywords: ["tarry", "linger"],
    examples: ["I tarry by the well", "We linger at the gate a while", "I tarry here", "Let us linger"],
    timeout: 30000,
  },
};

/**
 * skillsDir copies the repository's sample skills (without their .bin and
 * data) and the test skills into dir/skills, with the sample skills' binary.
 */
export function skillsDir(dir) {
  const skills = join(dir, "skills");
  cpSync(join(repoDir, "skills"), skills, {
    recursive: true,
    filter: (src) => !/\/skills\/(\.bin|[^/]+\/data)(\/|$)/.test(src),
  });
  mkdirSync(join(skills, ".bin"), { recursive: true });
  cpSync(bin("narratoria-skills"), join(skills, ".bin", "narratoria-skills"));
  for (const [name, s] of Object.entries(testSkills)) {
    mkdirSync(join(skills, name, "scripts"), { recursive: true });
    writeFileSync(join(skills, name, "skill.json"), JSON.stringify({
      name,
      version: "1.0.0",
      description: `Test skill ${name} of the TypeScript client's suites.`,
      ...(s.keywords ? { keywords: s.keywords, examples: s.examples, priority: 90 } : {}),
      scripts: [{ name: "run", path: "scripts/run", description: `${name} (test)`, timeout: s.timeout ?? 10000 }],
    }, null, 2));
    writeFileSync(join(skills, name, "prompt.md"), `Test skill ${name}.\n`);
    writeFileSync(join(skills, name, "scripts", "run"), s.script, { mode: 0o755 });
  }
  execFileSync("chmod", ["-R", "a+rX", skills]);
  return skills;
}

/** waitFor polls fn until it returns a truthy value, or throws after ms. */
export async function waitFor(fn, ms, what) {
  const end = Date.now() + budget(ms);
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`${what}: not within ${budget(ms)} ms${last ? ` (last error: ${last.message})` : ""}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// baseEnv is this process's environment without the NARRATORIA_ settings
// of the shell that started the tests (a NARRATORIA_NATS_URL would send
// `narratoria up` to another server): each process gets only those given.
function baseEnv() {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("NARRATORIA_")));
}

/**
 * Proc is a process the test started: its output goes to a log file; stop
 * sends SIGTERM and waits for it (SIGKILL after a while), kill sends SIGKILL.
 */
export class Proc {
  constructor(name, cmd, args, opts = {}) {
    this.name = name;
    this.log = opts.log;
    const out = opts.log ? ["ignore", "pipe", "pipe"] : ["ignore", "ignore", "ignore"];
    this.child = spawn(cmd, args, { cwd: opts.cwd, env: { ...baseEnv(), ...opts.env }, stdio: out });
    children.add(this.child);
    this.output = "";
    const keep = (b) => {
      this.output += b.toString();
      if (this.output.length > 1 << 20) this.output = this.output.slice(-(1 << 19));
    };
    this.child.stdout?.on("data", keep);
    this.child.stderr?.on("data", keep);
    this.exited = new Promise((res) => this.child.on("exit", (code, signal) => {
      children.delete(this.child);
      this.exitCode = code ?? signal;
      res(code ?? signal);
    }));
  }

  get running() {
    return this.exitCode === undefined;
  }

  tail(n = 30) {
    return this.output.split("\n").slice(-n).join("\n");
  }

  async waitLog(re, ms) {
    await waitFor(() => {
      if (!this.running) throw new Error(`${this.name} exited (${this.exitCode}):\n${this.tail()}`);
      return re.test(this.output);
    }, ms, `${this.name} to log ${re}`);
  }

  kill() {
    if (this.running) this.child.kill("SIGKILL");
    return this.exited;
  }

  async stop(ms = 15000) {
    if (!this.running) return this.exitCode;
    this.child.kill("SIGTERM");
    const t = setTimeout(() => this.child.kill("SIGKILL"), ms);
    const code = await this.exited;
    clearTimeout(t);
    return code;
  }
}

/**
 * startUp runs `narratoria up` (extra: more flags, e.g. ["--tenants",
 * "acme,globex"]) on an embedded server on a free port and resolves once
 * its ready file names the URL. creds(name) reads <data-dir>/narratoria.creds,
 * or a tenant's.
 */
export async function startUp(extra = [], env = {}) {
  const dir = tempDir("narratoria-ts-up");
  const skills = skillsDir(dir);
  const data = join(dir, "data");
  const ready = join(dir, "ready");
  const up = new Proc("narratoria up", bin("narratoria"), ["up", "--data-dir", data, "--nats-port", "-1", "--metrics-port", "0",
    "--console-port", "0", "--skills-dir", skills, "--ready-file", ready, ...extra], { cwd: dir, env, log: true });
  const url = await waitFor(() => {
    if (!up.running) throw new Error(`narratoria up exited (${up.exitCode}):\n${up.tail()}`);
    return existsSync(ready) && readFileSync(ready, "utf8").split("\n")[0].trim();
  }, 30000, "narratoria up to be ready");
  return {
    url,
    dir,
    data,
    proc: up,
    creds: (tenant) => readFileSync(tenant ? join(data, "tenants", `${tenant}.creds`) : join(data, "narratoria.creds")),
    stop: () => up.stop(),
  };
}

/**
 * connectRetry connects with these options, again (up to 5 times) when the
 * server refuses the first try: on a machine loaded far past its cores the
 * client can miss the server's authentication timeout (2 s).
 */
export async function connectRetry(opts) {
  for (let i = 1; ; i++) {
    try {
      return await connect(opts);
    } catch (err) {
      if (i >= 5) throw err;
      await new Promise((r) => setTimeout(r, 200 * i));
    }
  }
}

/** connectWith connects to url with creds (the bytes of a .creds file) and more options. */
export function connectWith(url, creds, more = {}) {
  return connectRetry({ servers: url, ...(creds ? { authenticator: credsAuthenticator(new Uint8Array(creds)) } : {}), ...more });
}

/** uuid makes a plan ID. */
export function uuid() {
  return crypto.randomUUID();
}

/** next resolves with the next value pushed to a queue (see queue), or rejects after ms. */
export function queue() {
  const items = [];
  const waiters = [];
  return {
    push(v) {
      const w = waiters.shift();
      if (w) w(v);
      else items.push(v);
    },
    next(ms, what = "a message") {
      if (items.length) return Promise.resolve(items.shift());
      return new Promise((res, rej) => {
        const t = setTimeout(() => {
          const i = waiters.indexOf(done);
          if (i >= 0) waiters.splice(i, 1);
          rej(new Error(`${what}: none within ${budget(ms)} ms`));
        }, budget(ms));
        const done = (v) => {
          clearTimeout(t);
          res(v);
        };
        waiters.push(done);
      });
    },
    get length() {
      return items.length;
    },
  };
}

/** listDir lists a folder, or [] when it is missing. */
export function listDir(d) {
  return existsSync(d) ? readdirSync(d) : [];
}
