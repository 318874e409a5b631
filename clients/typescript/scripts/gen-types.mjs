#!/usr/bin/env node
// gen-types writes the package's message types, src/generated/*.ts, from the
// wire contract: the JSON Schemas of docs/schemas/ (one TypeScript module per
// schema file, and an index). It understands the subset of JSON Schema those
// files use and refuses anything else, naming the keyword and where, so a
// schema that grows a new construct fails here rather than being read wrong.
//
//   node scripts/gen-types.mjs           write src/generated/
//   node scripts/gen-types.mjs --check   exit 1 naming each stale, missing or
//                                        extra file (what the staleness test runs)
//
// Options: --schemas DIR (default ../../docs/schemas), --out DIR (default
// src/generated). generate(dir) returns the files as a Map of name to text.
import { readdirSync, readFileSync, writeFileSync, mkdirSync, existsSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const defaultSchemas = resolve(here, "../../../docs/schemas");
export const defaultOut = resolve(here, "../src/generated");

const SUFFIX = ".schema.json";

// Names that the rule (PascalCase of the file or the $defs key) would make
// too vague once every module is re-exported from one index.
const NAMES = {
  "event.schema.json": "ProtocolEvent",
  "manifest.schema.json": "SkillManifest",
  "manifest.schema.json#/$defs/limits": "ScriptLimits",
  "health-transition.schema.json#/$defs/state": "HealthState",
  "plan.schema.json#/$defs/session": "SessionId",
  "plan.schema.json#/$defs/token": "Token",
};

// Keywords read for the types, and those only carried into the comments.
const TYPE_KEYWORDS = new Set([
  "type", "properties", "required", "items", "$ref", "enum", "const", "anyOf", "oneOf", "allOf", "$defs",
]);
const DOC_KEYWORDS = new Set([
  "$schema", "$id", "title", "description", "pattern", "format", "minimum", "maximum", "minLength",
  "maxLength", "minItems", "maxItems", "examples", "default", "not",
  // Constrains the spelling of keys (exact, no case variants), never a type.
  "propertyNames",
]);

function pascal(s) {
  return s
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((w) => w[0].toUpperCase() + w.slice(1))
    .join("");
}

// singular names an array's item type after the array ("tools" → "Tool").
function singular(s) {
  if (/ies$/.test(s)) return s.slice(0, -3) + "y";
  if (/(ches|shes|sses|xes)$/.test(s)) return s.slice(0, -2);
  if (/[^s]s$/.test(s)) return s.slice(0, -1);
  if (/y$/.test(s)) return s; // "history": its items are entries of it
  return s + "Item";
}

function rootName(file) {
  return NAMES[file] ?? pascal(file.slice(0, -SUFFIX.length));
}

function defName(file, def) {
  return NAMES[`${file}#/$defs/${def}`] ?? pascal(def);
}

function moduleOf(file) {
  return file.slice(0, -SUFFIX.length);
}

function comment(schema, indent) {
  const lines = [];
  if (schema.title && schema.description) lines.push(schema.title + ".", "");
  else if (schema.title) lines.push(schema.title + ".");
  if (schema.description) lines.push(...schema.description.split("\n"));
  const facts = [];
  for (const k of ["format", "pattern", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"]) {
    if (schema[k] !== undefined) facts.push(`@${k} ${schema[k]}`);
  }
  if (schema.not?.pattern) facts.push(`@notPattern ${schema.not.pattern}`);
  if (schema.propertyNames) facts.push("@exactKeys a key spelled in another case than its field's is refused");
  if (facts.length && lines.length) lines.push("");
  lines.push(...facts);
  if (!lines.length) return "";
  const body = lines.map((l) => `${indent} *${l ? " " + l.replaceAll("*/", "*\\/") : ""}`).join("\n");
  return `${indent}/**\n${body}\n${indent} */\n`;
}

class Module {
  constructor(file, schema, all) {
    this.file = file;
    this.schema = schema;
    this.all = all;
    this.decls = []; // [name, text]
    this.names = new Set();
    this.imports = new Map(); // module → Set of names
  }

  fail(where, msg) {
    throw new Error(`${this.file}${where}: ${msg}`);
  }

  check(schema, where) {
    if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
      this.fail(where, "a schema must be an object");
    }
    for (const k of Object.keys(schema)) {
      if (!TYPE_KEYWORDS.has(k) && !DOC_KEYWORDS.has(k) && k !== "if" && k !== "then") {
        this.fail(where, `keyword ${JSON.stringify(k)} is not understood by gen-types.mjs (extend it)`);
      }
    }
  }

  // declare reserves a declaration's place (a parent before the types of
  // its properties) and returns the function that gives its text.
  declare(name, where) {
    if (this.names.has(name)) this.fail(where, `type name ${name} is made twice`);
    this.names.add(name);
    const decl = [name, ""];
    this.decls.push(decl);
    return (text) => {
      decl[1] = text;
    };
  }

  ref(target, where) {
    const [file, frag = ""] = target.split("#");
    const targetFile = file || this.file;
    const other = this.all.get(targetFile);
    if (!other) this.fail(where, `$ref ${target}: no schema ${targetFile}`);
    let name;
    if (frag === "") name = rootName(targetFile);
    else {
      const m = /^\/\$defs\/([A-Za-z0-9_-]+)$/.exec(frag);
      if (!m) this.fail(where, `$ref ${target}: only #/$defs/<name> fragments are understood`);
      if (!other.$defs?.[m[1]]) this.fail(where, `$ref ${target}: ${targetFile} has no $defs/${m[1]}`);
      name = defName(targetFile, m[1]);
    }
    if (targetFile !== this.file) {
      const mod = moduleOf(targetFile);
      if (!this.imports.has(mod)) this.imports.set(mod, new Set());
      this.imports.get(mod).add(name);
    }
    return name;
  }

  // type returns the TypeScript type of schema; name is what a nested object
  // type would be called.
  type(schema, name, where) {
    this.check(schema, where);
    if (schema.$ref) {
      for (const k of Object.keys(schema)) {
        if (TYPE_KEYWORDS.has(k) && k !== "$ref") this.fail(where, `$ref beside ${k} is not understood`);
      }
      return this.ref(schema.$ref, where);
    }
    if (schema.const !== undefined) return JSON.stringify(schema.const);
    if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
    if (schema.anyOf || schema.oneOf) {
      const alts = schema.anyOf ?? schema.oneOf;
      return alts.map((s, i) => this.type(s, `${name}${i + 1}`, `${where}/anyOf/${i}`)).join(" | ");
    }
    if (schema.allOf) this.fail(where, "allOf is understood only at a schema's root, as if/then variants");
    const types = schema.type === undefined ? [] : Array.isArray(schema.type) ? schema.type : [schema.type];
    if (types.length === 0) {
      if (schema.properties || schema.items) this.fail(where, "properties or items without a type");
      return "unknown";
    }
    const parts = types.map((t) => {
      switch (t) {
        case "string":
          return "string";
        case "integer":
        case "number":
          return "number";
        case "boolean":
          return "boolean";
        case "null":
          return "null";
        case "array": {
          if (!schema.items) return "unknown[]";
          const item = this.type(schema.items, name, `${where}/items`);
          return /[ |&]/.test(item) ? `Array<${item}>` : `${item}[]`;
        }
        case "object":
          if (!schema.properties) return "Record<string, unknown>";
          this.object(schema, name, where);
          return name;
        default:
          return this.fail(where, `type ${JSON.stringify(t)} is not understood`);
      }
    });
    return parts.join(" | ");
  }

  // object declares an interface for an object schema with properties.
  object(schema, name, where, extra = {}) {
    const set = this.declare(name, where);
    const required = new Set([...(schema.required ?? []), ...Object.keys(extra)]);
    const props = { ...(schema.properties ?? {}) };
    let body = "";
    for (const [key, type] of Object.entries(extra)) {
      body += `  ${key}: ${type};\n`;
      delete props[key];
    }
    for (const [key, prop] of Object.entries(props)) {
      const nested = name + pascal(prop.type === "array" || (Array.isArray(prop.type) && prop.type.includes("array")) ? singular(key) : key);
      const t = this.type(prop, nested, `${where}/properties/${key}`);
      const id = /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? key : JSON.stringify(key);
      body += comment(prop, "  ") + `  ${id}${required.has(key) ? "" : "?"}: ${t};\n`;
    }
    for (const r of required) {
      if (!(r in (schema.properties ?? {})) && !(r in extra)) this.fail(where, `required ${r} has no property`);
    }
    set(comment(schema, "") + `export interface ${name} {\n${body}}\n`);
  }

  // variants reads a root allOf of if/then pairs, each naming one value of
  // a discriminating property, as a union of one interface per value.
  variants(schema, name) {
    const byValue = new Map();
    let key;
    schema.allOf.forEach((branch, i) => {
      const where = `/allOf/${i}`;
      const ifProps = branch.if?.properties;
      const keys = ifProps ? Object.keys(ifProps) : [];
      if (Object.keys(branch).some((k) => k !== "if" && k !== "then") || keys.length !== 1 || ifProps[keys[0]].const === undefined || !branch.then) {
        this.fail(where, 'allOf is understood only as {"if": {"properties": {"<key>": {"const": v}}}, "then": {...}}');
      }
      if (key !== undefined && key !== keys[0]) this.fail(where, `variants discriminated by both ${key} and ${keys[0]}`);
      key = keys[0];
      this.check(branch.then, `${where}/then`);
      byValue.set(ifProps[key].const, branch.then);
    });
    const set = this.declare(name, "");
    const values = schema.properties?.[key]?.enum ?? [...byValue.keys()];
    for (const v of byValue.keys()) {
      if (!values.includes(v)) this.fail("/allOf", `variant ${JSON.stringify(v)} is not in ${key}'s enum`);
    }
    const names = values.map((v) => {
      const then = byValue.get(v) ?? {};
      const variant = name + pascal(String(v));
      const merged = {
        description: then.description ?? `${schema.title ?? name} with ${key} ${JSON.stringify(v)}.`,
        type: "object",
        required: [...(schema.required ?? []), ...(then.required ?? [])].filter((r) => r !== key),
        properties: { ...(schema.properties ?? {}), ...(then.properties ?? {}) },
      };
      this.object(merged, variant, `/allOf(${key}=${v})`, { [key]: JSON.stringify(v) });
      return variant;
    });
    set(comment(schema, "") + `export type ${name} =\n${names.map((n) => `  | ${n}`).join("\n")};\n`);
  }

  alias(schema, name, where) {
    const set = this.declare(name, where);
    set(comment(schema, "") + `export type ${name} = ${this.type(schema, name + "Item", where)};\n`);
  }

  render() {
    const name = rootName(this.file);
    const s = this.schema;
    this.check(s, "");
    if (s.allOf) this.variants(s, name);
    else if (s.type === "object" && s.properties) this.object(s, name, "");
    else this.alias(s, name, "");
    for (const [def, ds] of Object.entries(s.$defs ?? {})) {
      const dn = defName(this.file, def);
      const where = `/$defs/${def}`;
      this.check(ds, where);
      if (ds.type === "object" && ds.properties && !ds.$ref) this.object(ds, dn, where);
      else this.alias(ds, dn, where);
    }
    let out = `// Code generated by scripts/gen-types.mjs from docs/schemas/${this.file}; DO NOT EDIT.\n`;
    out += `// Regenerate with \`npm run gen\` after changing a schema (\`make schemas\` copies them to docs/schemas).\n\n`;
    for (const [mod, names] of [...this.imports].sort(([a], [b]) => a.localeCompare(b))) {
      out += `import type { ${[...names].sort().join(", ")} } from "./${mod}.js";\n`;
    }
    if (this.imports.size) out += "\n";
    out += this.decls.map(([, text]) => text).join("\n");
    return out;
  }
}

// generate reads every *.schema.json of dir and returns the generated files
// by name (one module per schema and index.ts).
export function generate(dir = defaultSchemas) {
  const files = readdirSync(dir).filter((f) => f.endsWith(SUFFIX)).sort();
  if (files.length === 0) throw new Error(`no *${SUFFIX} in ${dir}`);
  const all = new Map(files.map((f) => [f, JSON.parse(readFileSync(join(dir, f), "utf8"))]));
  const out = new Map();
  const owner = new Map(); // type name → module, across modules
  for (const f of files) {
    const m = new Module(f, all.get(f), all);
    const text = m.render();
    for (const n of m.names) {
      if (owner.has(n)) throw new Error(`type ${n} is made by both ${owner.get(n)} and ${f}: add a name to NAMES in gen-types.mjs`);
      owner.set(n, f);
    }
    out.set(moduleOf(f) + ".ts", text);
  }
  let index = "// Code generated by scripts/gen-types.mjs from docs/schemas; DO NOT EDIT.\n\n";
  for (const f of files) index += `export type * from "./${moduleOf(f)}.js";\n`;
  out.set("index.ts", index);
  return out;
}

// stale compares generated files with those in outDir and returns one line
// per difference (empty when up to date).
export function stale(files, outDir = defaultOut) {
  const problems = [];
  for (const [name, text] of files) {
    const p = join(outDir, name);
    if (!existsSync(p)) problems.push(`${name}: missing`);
    else if (readFileSync(p, "utf8") !== text) problems.push(`${name}: differs from its schema's`);
  }
  if (existsSync(outDir)) {
    for (const name of readdirSync(outDir)) {
      if (!files.has(name)) problems.push(`${name}: no schema makes it`);
    }
  }
  return problems;
}

function main(argv) {
  let schemas = defaultSchemas;
  let out = defaultOut;
  let check = false;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--check") check = true;
    else if (argv[i] === "--schemas") schemas = resolve(argv[++i]);
    else if (argv[i] === "--out") out = resolve(argv[++i]);
    else {
      console.error(`gen-types: unknown argument ${argv[i]}`);
      return 2;
    }
  }
  const files = generate(schemas);
  if (check) {
    const problems = stale(files, out);
    if (problems.length) {
      console.error(`gen-types: ${out} is stale (run npm run gen):\n  ${problems.join("\n  ")}`);
      return 1;
    }
    return 0;
  }
  if (existsSync(out)) rmSync(out, { recursive: true });
  mkdirSync(out, { recursive: true });
  for (const [name, text] of files) writeFileSync(join(out, name), text);
  console.log(`gen-types: wrote ${files.size} files to ${out}`);
  return 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = main(process.argv.slice(2));
}
