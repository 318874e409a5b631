// Client: the Go client's surface (pkg/client) in TypeScript's idiom.
import { createHash } from "node:crypto";
import type { Msg, NatsConnection } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";
import type { JetStreamClient, JetStreamPublishOptions } from "@nats-io/jetstream";
import {
  AssetChangedError,
  BadRequestError,
  NoAssetObjectError,
  NoRespondersError,
  NotInFlightError,
  RateLimitedError,
  RefusedError,
  ServiceError,
  TimeoutError,
  UnavailableError,
  natsNoResponders,
  natsTimeout,
  permissionOf,
  publishError,
  transient,
} from "./errors.js";
import type {
  Approval,
  Asset,
  CancelRequest,
  ControlReply,
  Narration,
  PlanListRequest,
  PlanStatus,
  PlanSummary,
  Prompt,
  SessionReset,
  SessionResetReply,
} from "./generated/index.js";
import { readAssetObject, type AssetObject } from "./asset.js";
import {
  ASSET_MAX_SIZE,
  STREAM_APPROVALS,
  STREAM_PROMPTS,
  Subjects,
  checkPrompt,
  checkToken,
} from "./subjects.js";
import { startWatch, type Update, type Watcher, type WatchOptions } from "./watch.js";

/** Options of a Client. */
export interface ClientOptions {
  /** The deployment's subject prefix (its nats.prefix); default "narratoria". */
  prefix?: string;
  /** Bound of the short calls (control, reset, approvals, assets) given no timeoutMs. Default 10 s. */
  requestTimeoutMs?: number;
  /** Bound of narrate given no timeoutMs: a narration takes as long as its plans. Default 60 s. */
  narrateTimeoutMs?: number;
  /** Bound of one narrate request before it is sent again (joining the first). Default 30 s. */
  narrateAttemptMs?: number;
  /** Bound of submit given no timeoutMs (it retries through a stream leader election). Default 30 s. */
  submitTimeoutMs?: number;
  /**
   * The largest asset object read; a larger one is an AssetTooLargeError,
   * refused before any of it is read. Default 16 MiB, what workers store at
   * most unless the deployment's nats.assetMaxSize says otherwise.
   */
  assetMaxSize?: number;
  /**
   * Told of each retry narrate and the JetStream publishes make, with the
   * error that caused it (for a log line or a metric).
   */
  onRetry?: (info: RetryInfo) => void;
}

/** One retry of a call. */
export interface RetryInfo {
  /** The call that retried. */
  call: "narrate" | "submit" | "approve" | "deny";
  /** The attempt that failed (1 for the first). */
  attempt: number;
  /** Why it failed: a NoRespondersError, an UnavailableError, a TimeoutError, a JetStream error. */
  error: unknown;
  /** How long the client waits before the next attempt. */
  delayMs: number;
}

/** Options every call takes. */
export interface CallOptions {
  /** The call's deadline, in milliseconds from now (each call has a default). */
  timeoutMs?: number;
  /** Ends the call early: it rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Who decided, and why (kept with an approval decision or a cancellation). */
export interface Decision {
  by?: string;
  reason?: string;
}

/** What a session reset did. */
export interface ResetResult {
  /** The skills made healthy again. */
  changedSkills: number;
  /** The session state was emptied. */
  clearedState: boolean;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(ms, 0));
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

// race settles with p, or rejects with the signal's reason when it aborts
// first (p then settles unobserved: its own timeout bounds it).
function race<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

function json(m: Msg, what: string, subject: string): unknown {
  try {
    return JSON.parse(decoder.decode(m.data));
  } catch (err) {
    throw new ServiceError("", `unreadable ${what}: ${(err as Error).message}`, subject);
  }
}

/**
 * Client talks to a Narratoria deployment over one NATS connection, which it
 * does not own: the connection carries the credentials, TLS and inbox
 * prefix (the shipped accounts give a game server its own, _INBOX_game),
 * and every request the client makes uses it. A Client is safe to share.
 *
 *     const nc = await connect({ servers, authenticator: credsAuthenticator(creds), inboxPrefix: "_INBOX_game" });
 *     const c = new Client(nc);
 *     const n = await c.narrate({ sessionId: "s1", text: "I look around" });
 */
export class Client {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly #js: JetStreamClient;
  readonly #opts: Required<Omit<ClientOptions, "onRetry" | "prefix">> & Pick<ClientOptions, "onRetry">;

  constructor(nc: NatsConnection, opts: ClientOptions = {}) {
    if (!nc) throw new TypeError("Client: a NATS connection is required");
    this.nc = nc;
    this.subjects = new Subjects(opts.prefix);
    this.#opts = {
      requestTimeoutMs: opts.requestTimeoutMs ?? 10_000,
      narrateTimeoutMs: opts.narrateTimeoutMs ?? 60_000,
      narrateAttemptMs: opts.narrateAttemptMs ?? 30_000,
      submitTimeoutMs: opts.submitTimeoutMs ?? 30_000,
      assetMaxSize: opts.assetMaxSize ?? ASSET_MAX_SIZE,
      onRetry: opts.onRetry,
    };
    this.#js = jetstream(nc, { timeout: this.#opts.requestTimeoutMs });
  }

  // request sends a core request and turns no responders, a timeout, a
  // permission violation and a micro service error into this client's
  // errors.
  async #request(subject: string, body: Uint8Array, timeoutMs: number, what: string): Promise<Msg> {
    let m: Msg;
    try {
      m = await this.nc.request(subject, body, { timeout: Math.max(1, Math.round(timeoutMs)) });
    } catch (err) {
      if (natsNoResponders(err)) throw new NoRespondersError(subject, what, { cause: err });
      if (natsTimeout(err)) throw new TimeoutError(`${subject}: no answer within ${Math.round(timeoutMs)} ms`);
      throw permissionOf(err) ?? err;
    }
    const code = m.headers?.get("Nats-Service-Error-Code");
    if (code) {
      const message = m.headers?.get("Nats-Service-Error") ?? "";
      switch (code) {
        case "400":
          throw new BadRequestError(code, message, subject);
        case "429":
          throw new RateLimitedError(code, message, subject);
        case "503":
          throw new UnavailableError(code, message, subject);
        default:
          throw new ServiceError(code, message, subject);
      }
    }
    return m;
  }

  #retry(call: RetryInfo["call"], attempt: number, error: unknown, delayMs: number): void {
    try {
      this.#opts.onRetry?.({ call, attempt, error, delayMs });
    } catch {
      // an observer's error does not change the call
    }
  }

  /**
   * narrate sends a prompt and resolves with its narration (request/reply
   * on <prefix>.narrate). The prompt gets an ID when it has none, so narrate
   * can retry across a narrator restart or a failover — no responders, a
   * narrator stopping (503), or no answer within narrateAttemptMs — and a
   * retry joins the first request (or reads its stored narration) instead
   * of running the prompt twice. It rejects with a ValidationError before
   * sending a prompt the narrator would refuse, and with a TimeoutError
   * (lastError saying why the last attempt failed) when no narration came
   * in time.
   */
  async narrate(prompt: Prompt, opts: CallOptions = {}): Promise<Narration> {
    const p = checkPrompt(prompt);
    const body = encoder.encode(JSON.stringify(p));
    const subject = this.subjects.narrate();
    const timeoutMs = opts.timeoutMs ?? this.#opts.narrateTimeoutMs;
    const deadline = Date.now() + timeoutMs;
    let last: unknown;
    let backoff = 50;
    for (let attempt = 1; ; attempt++) {
      const left = deadline - Date.now();
      if (left <= 0) throw new TimeoutError(`narrate: no narration within ${timeoutMs} ms`, last);
      try {
        const m = await race(
          this.#request(subject, body, Math.min(this.#opts.narrateAttemptMs, left), "no narrator answers"),
          opts.signal,
        );
        return json(m, "narration", subject) as Narration;
      } catch (err) {
        if (opts.signal?.aborted) throw err;
        // No narrator, one stopping, or no answer in this attempt: send it
        // again (the loop's top ends it at the deadline).
        const again = err instanceof NoRespondersError || err instanceof UnavailableError || err instanceof TimeoutError;
        if (!again) throw err;
        // An attempt cut short by the call's deadline says less than the
        // error before it (no narrator, one stopping): that one is kept.
        if (!(err instanceof TimeoutError && Date.now() >= deadline && last)) last = err;
      }
      const wait = Math.min(backoff, Math.max(deadline - Date.now(), 0));
      this.#retry("narrate", attempt, last, wait);
      await sleep(wait, opts.signal);
      backoff = Math.min(backoff * 2, 2000);
    }
  }

  /**
   * submit publishes a prompt durably on <prefix>.prompts.<session> and
   * resolves with its promptId (generated when it had none) once the stream
   * stored it. It retries through a stream leader election or a server
   * restart until its deadline, deduplicated by the message ID
   * <session>.<promptId>, so the prompt is stored once, and calling submit
   * again with the same promptId is safe. The narration comes on
   * <prefix>.narrations.<session> (see watch).
   */
  async submit(prompt: Prompt, opts: CallOptions = {}): Promise<string> {
    const p = checkPrompt(prompt);
    const subject = this.subjects.prompts(p.sessionId);
    await this.#publish("submit", subject, JSON.stringify(p), {
      msgID: `${p.sessionId}.${p.promptId}`,
      expect: { streamName: STREAM_PROMPTS },
    }, opts.timeoutMs ?? this.#opts.submitTimeoutMs, opts.signal);
    return p.promptId;
  }

  // publish sends a message to JetStream and waits for its ack, sending it
  // again with backoff (100 ms doubling to 1 s) through transient errors
  // until the deadline; a refusal ends it at once.
  async #publish(call: RetryInfo["call"], subject: string, body: string, po: Partial<JetStreamPublishOptions>,
    timeoutMs: number, signal?: AbortSignal): Promise<void> {
    const data = encoder.encode(body);
    const max = this.nc.info?.max_payload;
    if (max && data.length > max) {
      throw new RefusedError(`${subject}: ${data.length} bytes is over the connection's maximum payload (${max})`);
    }
    const deadline = Date.now() + timeoutMs;
    let wait = 100;
    for (let attempt = 1; ; attempt++) {
      const left = deadline - Date.now();
      let err: unknown;
      try {
        await race(this.#js.publish(subject, data, { ...po, timeout: Math.max(1, Math.min(5000, left)) }), signal);
        return;
      } catch (e) {
        if (signal?.aborted) throw e;
        err = e;
      }
      if (!transient(err)) throw publishError(err, subject);
      if (Date.now() + wait >= deadline) {
        throw new TimeoutError(`${call}: ${subject} not stored within ${timeoutMs} ms`, publishError(err, subject));
      }
      this.#retry(call, attempt, err, wait);
      await sleep(wait, signal);
      wait = Math.min(2 * wait, 1000);
    }
  }

  /**
   * watch follows a session (every session when sessionId is undefined)
   * live: narrations, progress, script events and health transitions, each
   * decoded into an Update and given to fn, one at a time, in the order
   * each subject delivers them. A message that does not decode is skipped.
   * It resolves once the server has the subscriptions.
   */
  watch(sessionId: string | undefined, fn: (u: Update) => void | Promise<void>, opts: WatchOptions = {}): Promise<Watcher> {
    let subjects: string[];
    try {
      subjects = this.subjects.watched(sessionId);
    } catch (err) {
      return Promise.reject(err);
    }
    return startWatch(this.nc, subjects, fn, opts);
  }

  /**
   * approve grants a tool waiting for approval (SPEC §9.3). A scheduler
   * checks the decision and stores it durably, where the scheduler running
   * the plan applies it; a plan not in flight, a tool that takes no
   * decision, or no scheduler to check it rejects, and nothing is stored.
   */
  approve(planId: string, toolId: string, d: Decision & CallOptions = {}): Promise<void> {
    return this.#decide("approve", planId, toolId, true, d);
  }

  /** deny refuses a tool waiting for approval: it is skipped and its dependents fail (SPEC §9.3). */
  deny(planId: string, toolId: string, d: Decision & CallOptions = {}): Promise<void> {
    return this.#decide("deny", planId, toolId, false, d);
  }

  async #decide(call: "approve" | "deny", planId: string, toolId: string, approved: boolean, d: Decision & CallOptions): Promise<void> {
    const subject = this.subjects.approvals(planId, toolId);
    const a: Approval = { approved, ...(d.by ? { by: d.by } : {}), ...(d.reason ? { reason: d.reason } : {}) };
    await this.#publish(call, subject, JSON.stringify(a), { expect: { streamName: STREAM_APPROVALS } },
      d.timeoutMs ?? this.#opts.requestTimeoutMs, d.signal);
  }

  // control sends a plan control request and returns its reply, or throws
  // the error it names.
  async #control(subject: string, body: unknown, opts: CallOptions, planId = ""): Promise<ControlReply> {
    const data = body === undefined ? new Uint8Array(0) : encoder.encode(JSON.stringify(body));
    const m = await race(this.#request(subject, data, opts.timeoutMs ?? this.#opts.requestTimeoutMs,
      "no active scheduler answers plan control"), opts.signal);
    const r = json(m, "control reply", subject) as ControlReply;
    if (!r || typeof r !== "object") throw new ServiceError("", "unreadable control reply", subject);
    if (!r.ok) {
      if (r.code === "not_in_flight" || r.code === "unknown_plan" || r.code === "plan_finished") {
        throw new NotInFlightError(r.code, r.error ?? "", subject, planId);
      }
      throw new ServiceError(r.code ?? "", r.error ?? "the control request failed", subject);
    }
    return r;
  }

  /**
   * planStatus returns the status of a plan: one in flight, its tools with
   * state, attempt and timings, and its versions (SPEC §9.4); one that
   * finished, from its stored result (phase "published", with `result`).
   * A plan never accepted rejects with a NotInFlightError (code
   * unknown_plan).
   */
  async planStatus(planId: string, opts: CallOptions = {}): Promise<PlanStatus> {
    const subject = this.subjects.planStatus(planId);
    const r = await this.#control(subject, undefined, opts, planId);
    if (!r.status) throw new ServiceError("", "control reply without a status", subject);
    return r.status;
  }

  /** listPlans returns the plans in flight, of one session when sessionId is given. */
  async listPlans(sessionId?: string, opts: CallOptions = {}): Promise<PlanSummary[]> {
    const req: PlanListRequest = {};
    if (sessionId !== undefined && sessionId !== "") {
      checkToken("sessionId", sessionId);
      req.sessionId = sessionId;
    }
    const r = await this.#control(this.subjects.planList(), req, opts);
    return r.list?.plans ?? [];
  }

  /**
   * cancel cancels a plan in flight: its running scripts are killed, its
   * unfinished tools end cancelled and its result says failureReason
   * "cancelled" (never replanned). A plan not in flight rejects with a
   * NotInFlightError.
   */
  async cancel(planId: string, d: Decision & CallOptions = {}): Promise<void> {
    const subject = this.subjects.planCancel(planId);
    const req: CancelRequest = { ...(d.by ? { by: d.by } : {}), ...(d.reason ? { reason: d.reason } : {}) };
    await this.#control(subject, req, d, planId);
  }

  /** resetSession makes every skill of a session healthy again; clearState also empties its state. */
  async resetSession(sessionId: string, opts: { clearState?: boolean } & CallOptions = {}): Promise<ResetResult> {
    const subject = this.subjects.sessionReset(sessionId);
    const req: SessionReset = { clearState: opts.clearState === true };
    const m = await race(this.#request(subject, encoder.encode(JSON.stringify(req)),
      opts.timeoutMs ?? this.#opts.requestTimeoutMs, "no active scheduler answers session resets"), opts.signal);
    const r = json(m, "reset reply", subject) as SessionResetReply;
    if (!r || typeof r !== "object") throw new ServiceError("", "unreadable reset reply", subject);
    if (!r.ok) throw new ServiceError("", r.error ?? "the reset failed", subject);
    return { changedSkills: r.changedSkills ?? 0, clearedState: r.clearedState ?? false };
  }

  /**
   * asset fetches an asset of a narration or result from the asset object
   * store, from any host that reaches NATS. The content is checked against
   * the asset's digest and size (and the object's name, which is its
   * digest): an object that changed since rejects with an
   * AssetChangedError, never its content. An asset its worker could not
   * store rejects with a NoAssetObjectError.
   */
  async asset(a: Asset, opts: CallOptions = {}): Promise<Uint8Array> {
    if (!a.object) throw new NoAssetObjectError(a.assetId);
    const { data } = await this.assetObject(a.object, opts);
    if (a.sha256 && createHash("sha256").update(data).digest("hex") !== a.sha256) {
      throw new AssetChangedError(a.object, `its content is not the sha256 ${a.sha256} the worker listed`);
    }
    if (a.size !== undefined && a.size !== 0 && data.length !== a.size) {
      throw new AssetChangedError(a.object, `${data.length} bytes, not the ${a.size} the worker listed`);
    }
    return data;
  }

  /**
   * assetObject fetches an object of the asset store by name
   * ("sha256-<hex>", an asset's object) with its media type. The content
   * must hash to the name; an unknown object rejects with an
   * AssetNotFoundError, one over assetMaxSize with an AssetTooLargeError.
   */
  assetObject(name: string, opts: CallOptions = {}): Promise<AssetObject> {
    return race(readAssetObject(this.nc, name, opts.timeoutMs ?? this.#opts.requestTimeoutMs, this.#opts.assetMaxSize), opts.signal);
  }
}

export type { AssetObject };
