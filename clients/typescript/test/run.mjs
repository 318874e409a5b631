// npm test: builds the Go commands the suites run (narratoria, the sample
// skills' binary, narrator, scheduler, skillworker, nats-server) once, then
// runs every test/*.test.mjs with node --test. NARRATORIA_LONG=1 adds the
// slow cases (make test-long).
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildBinaries, pkgDir } from "./helpers.mjs";

const started = Date.now();
const root = mkdtempSync(join(process.env.NARRATORIA_TS_TMP || tmpdir(), "narratoria-ts-"));
let code = 1;
try {
  process.env.NARRATORIA_TS_TMP = root;
  const t = Date.now();
  buildBinaries(join(root, "bin"));
  console.log(`# Go commands built in ${((Date.now() - t) / 1000).toFixed(1)} s`);
  process.env.NARRATORIA_TS_BIN = join(root, "bin");
  // The longest files first, so the short ones fill the end.
  const first = ["pack", "secured", "client", "tenants", "prefix"];
  const rank = (f) => {
    const i = first.indexOf(f.replace(/\.test\.mjs$/, ""));
    return i < 0 ? first.length : i;
  };
  const files = process.argv.slice(2).length
    ? process.argv.slice(2)
    : readdirSync(join(pkgDir, "test")).filter((f) => f.endsWith(".test.mjs"))
      .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b)).map((f) => join("test", f));
  // The files run side by side (each starts its own system; most of their
  // time is spent waiting on it): NARRATORIA_TS_CONCURRENCY, default 3.
  const concurrency = Number(process.env.NARRATORIA_TS_CONCURRENCY) || 3;
  const r = spawnSync(process.execPath, ["--test", "--test-reporter=spec", `--test-concurrency=${concurrency}`, ...files],
    { cwd: pkgDir, stdio: "inherit", env: process.env });
  code = r.status ?? 1;
} finally {
  if (!process.env.NARRATORIA_TS_KEEP) rmSync(root, { recursive: true, force: true });
  console.log(`# TypeScript suites: ${code === 0 ? "pass" : "FAIL"} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
process.exit(code);
