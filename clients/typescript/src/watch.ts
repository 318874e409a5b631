// watch: a session's narrations, progress, script events and health
// transitions, live, decoded.
import type { Msg, NatsConnection, Subscription } from "@nats-io/nats-core";
import { permissionOf } from "./errors.js";
import type { HealthTransition, Narration, Progress, ProtocolEvent } from "./generated/index.js";

interface UpdateBase {
  /** The NATS subject it came on. */
  subject: string;
  /** The session (as the subject names it). */
  sessionId: string;
  /** The message as it came (JSON). */
  data: Uint8Array;
}

/** A prompt's narration. */
export interface NarrationUpdate extends UpdateBase {
  kind: "narration";
  narration: Narration;
}

/** A plan's or a tool's progress (with progress.progress, the percentage a script reported). */
export interface ProgressUpdate extends UpdateBase {
  kind: "progress";
  planId: string;
  progress: Progress;
}

/** One protocol event a script wrote, with the plan, tool and attempt it came from. */
export interface EventUpdate extends UpdateBase {
  kind: "event";
  planId: string;
  toolId: string;
  event: ProtocolEvent;
  /** The attempt (1 for the first run), from the Narratoria-Attempt header. */
  attempt?: number;
  /** The worker that ran it, from the Narratoria-Worker header. */
  worker?: string;
}

/** A skill's health transition in the session. */
export interface HealthUpdate extends UpdateBase {
  kind: "health";
  skill: string;
  health: HealthTransition;
}

/** One message watch delivers; kind says which. */
export type Update = NarrationUpdate | ProgressUpdate | EventUpdate | HealthUpdate;

/** What watch does with an error of the callback (thrown, or a rejected promise). */
export interface WatchOptions {
  /**
   * Called with what the callback threw. Without it the error is thrown
   * again outside the connection's read loop, as an uncaught exception (as
   * an EventEmitter listener's would be).
   */
  onError?: (err: unknown, update: Update) => void;
}

function object(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * decodeUpdate reads a message of a watched subject; undefined when it does
 * not decode (watch skips it, as the Go client does).
 */
export function decodeUpdate(m: Msg): Update | undefined {
  const parts = m.subject.split(".");
  if (parts.length < 3) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder().decode(m.data));
  } catch {
    return undefined;
  }
  if (!object(body)) return undefined;
  const base = { subject: m.subject, sessionId: parts[2], data: m.data };
  switch (parts[1]) {
    case "narrations":
      if (typeof body.text !== "string" && typeof body.refused !== "string") return undefined;
      return { ...base, kind: "narration", narration: body as unknown as Narration };
    case "progress":
      if (parts.length !== 4 || typeof body.state !== "string") return undefined;
      return { ...base, kind: "progress", planId: parts[3], progress: body as unknown as Progress };
    case "events": {
      if (parts.length !== 5 || typeof body.type !== "string") return undefined;
      const attempt = Number(m.headers?.get("Narratoria-Attempt"));
      const worker = m.headers?.get("Narratoria-Worker");
      return {
        ...base,
        kind: "event",
        planId: parts[3],
        toolId: parts[4],
        event: body as unknown as ProtocolEvent,
        ...(Number.isInteger(attempt) && attempt > 0 ? { attempt } : {}),
        ...(worker ? { worker } : {}),
      };
    }
    case "health":
      if (parts.length !== 4 || typeof body.to !== "string") return undefined;
      return { ...base, kind: "health", skill: parts[3], health: body as unknown as HealthTransition };
  }
  return undefined;
}

/** A running watch; stop ends it. */
export class Watcher {
  #subs: Subscription[];
  #stopped = false;

  /** @internal */
  constructor(subs: Subscription[]) {
    this.#subs = subs;
  }

  /** @internal */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** stop unsubscribes; no update is delivered once it is called. */
  stop(): void {
    this.#stopped = true;
    for (const s of this.#subs) {
      if (!s.isClosed()) s.unsubscribe();
    }
  }
}

/**
 * startWatch subscribes to the subjects and resolves once the server has
 * the subscriptions (a flush), or rejects naming a refused one.
 */
export async function startWatch(
  nc: NatsConnection,
  subjects: string[],
  fn: (u: Update) => void | Promise<void>,
  opts: WatchOptions = {},
): Promise<Watcher> {
  const subs: Subscription[] = [];
  const watcher = new Watcher(subs);
  const fail = (err: unknown, u: Update) => {
    if (opts.onError) opts.onError(err, u);
    else setImmediate(() => {
      throw err;
    });
  };
  try {
    for (const subject of subjects) {
      subs.push(nc.subscribe(subject, {
        callback: (err, m) => {
          if (err || watcher.stopped) return;
          const u = decodeUpdate(m);
          if (!u) return;
          try {
            const r = fn(u);
            if (r && typeof (r as Promise<void>).catch === "function") (r as Promise<void>).catch((e) => fail(e, u));
          } catch (e) {
            fail(e, u);
          }
        },
      }));
    }
    // The server answers a subscription it refuses before the flush's pong.
    await nc.flush();
  } catch (err) {
    watcher.stop();
    throw permissionOf(err) ?? err;
  }
  for (const s of subs) {
    if (s.isClosed()) {
      watcher.stop();
      const err = await s.closed;
      throw permissionOf(err) ?? err ?? new Error(`watch: the subscription to ${s.getSubject()} was closed`);
    }
  }
  return watcher;
}
