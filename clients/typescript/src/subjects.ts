// The deployment's public subjects (docs/subjects.md) under a prefix, and
// the checks the runtime makes of the tokens in them.
import { randomUUID } from "node:crypto";
import { ValidationError } from "./errors.js";
import type { Prompt } from "./generated/index.js";

/** The subject prefix of a deployment that sets none. */
export const DEFAULT_PREFIX = "narratoria";

/** Streams and buckets a game server's calls reach (their names take no prefix). */
export const STREAM_PROMPTS = "NARRATORIA_PROMPTS";
export const STREAM_APPROVALS = "NARRATORIA_APPROVALS";
export const BUCKET_ASSETS = "narratoria_assets";

/** The default limit of one asset object (the workers' nats.assetMaxSize default): 16 MiB. */
export const ASSET_MAX_SIZE = 16 << 20;

/** The longest prompt text, in characters once trimmed. */
export const PROMPT_TEXT_MAX = 4000;

const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** validToken reports whether s is a subject token: ^[A-Za-z0-9_-]{1,64}$. */
export function validToken(s: string): boolean {
  return typeof s === "string" && TOKEN.test(s);
}

function clip(s: string, n: number): string {
  const cs = [...String(s)];
  return cs.length <= n ? String(s) : cs.slice(0, n).join("") + "…";
}

/** checkToken throws a ValidationError when value is not a subject token. */
export function checkToken(kind: string, value: string): void {
  if (!validToken(value)) {
    throw new ValidationError([{ field: kind, message: `${JSON.stringify(clip(value, 80))} must match ^[A-Za-z0-9_-]{1,64}$` }]);
  }
}

/** checkPlanId throws a ValidationError when id is not a UUID. */
export function checkPlanId(id: string): void {
  if (typeof id !== "string" || !UUID.test(id)) {
    throw new ValidationError([{ field: "planId", message: `${JSON.stringify(clip(id, 80))} must be a UUID` }]);
  }
}

// Go's strings.TrimSpace: Unicode white space, as the narrator trims.
const SPACE = /^[\s\u0085]+|[\s\u0085]+$/gu;

/**
 * checkPrompt checks a prompt as the narrator will (its text 1..4000
 * characters once trimmed, its session and prompt IDs subject tokens, a
 * session named), so a prompt it would drop is refused before it is sent.
 * It returns a copy with a promptId (newId's, a UUID by default, when it
 * had none).
 */
export function checkPrompt(p: Prompt, newId: () => string = randomUUID): Prompt & { sessionId: string; promptId: string } {
  if (typeof p !== "object" || p === null) {
    throw new ValidationError([{ field: "", message: "a prompt must be an object {sessionId, text}" }]);
  }
  const problems = [];
  const text = typeof p.text === "string" ? p.text.replace(SPACE, "") : "";
  const n = [...text].length;
  if (n === 0) problems.push({ field: "text", message: "must not be empty" });
  else if (n > PROMPT_TEXT_MAX) problems.push({ field: "text", message: `is ${n} characters; the limit is ${PROMPT_TEXT_MAX}` });
  if (!p.sessionId) problems.push({ field: "sessionId", message: "is required" });
  else if (!validToken(p.sessionId)) {
    problems.push({ field: "sessionId", message: `${JSON.stringify(clip(p.sessionId, 80))} must match ^[A-Za-z0-9_-]{1,64}$` });
  }
  if (p.promptId !== undefined && p.promptId !== "" && !validToken(p.promptId)) {
    problems.push({ field: "promptId", message: `${JSON.stringify(clip(p.promptId, 80))} must match ^[A-Za-z0-9_-]{1,64}$` });
  }
  if (problems.length) throw new ValidationError(problems);
  return { ...p, sessionId: p.sessionId as string, promptId: p.promptId || newId() };
}

/**
 * Subjects names the deployment's public subjects under a prefix; a
 * tenant's game server uses them as they are (its account's imports put the
 * tenant in).
 */
export class Subjects {
  readonly prefix: string;

  constructor(prefix: string = DEFAULT_PREFIX) {
    checkToken("prefix", prefix);
    this.prefix = prefix;
  }

  /** <prefix>.narrate: a prompt in, its narration back. */
  narrate(): string {
    return `${this.prefix}.narrate`;
  }

  /** <prefix>.prompts.<session>: prompts, stored in NARRATORIA_PROMPTS. */
  prompts(session: string): string {
    checkToken("sessionId", session);
    return `${this.prefix}.prompts.${session}`;
  }

  /** <prefix>.narrations.<session>: every narration of the session. */
  narrations(session: string): string {
    checkToken("sessionId", session);
    return `${this.prefix}.narrations.${session}`;
  }

  /** <prefix>.approvals.<plan>.<tool>: decisions on a tool waiting for approval. */
  approvals(planId: string, toolId: string): string {
    checkPlanId(planId);
    checkToken("toolId", toolId);
    return `${this.prefix}.approvals.${planId}.${toolId}`;
  }

  /** <prefix>.control.status.<plan>. */
  planStatus(planId: string): string {
    checkPlanId(planId);
    return `${this.prefix}.control.status.${planId}`;
  }

  /** <prefix>.control.list. */
  planList(): string {
    return `${this.prefix}.control.list`;
  }

  /** <prefix>.control.cancel.<plan>. */
  planCancel(planId: string): string {
    checkPlanId(planId);
    return `${this.prefix}.control.cancel.${planId}`;
  }

  /** <prefix>.sessions.<session>.reset. */
  sessionReset(session: string): string {
    checkToken("sessionId", session);
    return `${this.prefix}.sessions.${session}.reset`;
  }

  /**
   * The subjects watch follows for a session (every session when it is
   * undefined): narrations, progress, script events, health transitions.
   */
  watched(session?: string): string[] {
    let tok = "*";
    if (session !== undefined && session !== "") {
      checkToken("sessionId", session);
      tok = session;
    }
    const p = this.prefix;
    return [`${p}.narrations.${tok}`, `${p}.progress.${tok}.*`, `${p}.events.${tok}.>`, `${p}.health.${tok}.*`];
  }
}
