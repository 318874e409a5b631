// Errors of the client: classes a caller branches on with instanceof, each
// carrying what a program needs (a code, the subject, the problems), never
// a message to parse.
import { errors as natsErrors } from "@nats-io/nats-core";
import { JetStreamApiError } from "@nats-io/jetstream";

/** The base class of every error this client throws. */
export class NarratoriaError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** One field at fault, as the runtime names it. */
export interface Problem {
  /** The field ("text", "sessionId", …); empty for the whole value. */
  field: string;
  message: string;
}

/**
 * A value the runtime would refuse, caught before sending: a prompt with no
 * text, a session or tool ID that is not a subject token, a plan ID that is
 * not a UUID, a prefix with a dot.
 */
export class ValidationError extends NarratoriaError {
  readonly problems: Problem[];
  constructor(problems: Problem[]) {
    super(problems.map((p) => (p.field ? `${p.field} ${p.message}` : p.message)).join("; "));
    this.problems = problems;
  }
}

/**
 * Nothing serves the subject: no narrator for narrate (after narrate's
 * retries), no active scheduler for plan control and resets.
 */
export class NoRespondersError extends NarratoriaError {
  readonly subject: string;
  constructor(subject: string, what: string, options?: ErrorOptions) {
    super(`no responders on ${subject}: ${what}`, options);
    this.subject = subject;
  }
}

/**
 * The call's deadline passed (its timeoutMs, or the client's default).
 * lastError is why the last attempt failed, when a call retried (narrate,
 * submit, approvals): a NoRespondersError, an UnavailableError, a stream
 * leader election.
 */
export class TimeoutError extends NarratoriaError {
  readonly lastError?: unknown;
  constructor(message: string, lastError?: unknown) {
    super(lastError instanceof Error ? `${message} (last error: ${lastError.message})` : message, {
      cause: lastError,
    });
    this.lastError = lastError;
  }
}

/**
 * An error a service answered: a micro service error (code "400", "429",
 * "500", "503" of the narrate endpoint) or a control or reset reply's error
 * (code as the reply gives it, empty when it gives none).
 */
export class ServiceError extends NarratoriaError {
  readonly code: string;
  readonly subject: string;
  constructor(code: string, message: string, subject: string) {
    super(code ? `${code}: ${message}` : message);
    this.code = code;
    this.subject = subject;
  }
}

/** The narrator refused the prompt as invalid (400). */
export class BadRequestError extends ServiceError {}

/** The tenant is over its prompt rate (429): send it again later. */
export class RateLimitedError extends ServiceError {}

/**
 * The narrator could not answer now (503: stopping, or the session's
 * partition moved) and narrate's retries did not get an answer in time.
 */
export class UnavailableError extends ServiceError {}

/**
 * A plan control request named a plan that is not in flight: one no
 * scheduler runs and no result names (control reply code unknown_plan), or
 * a finished one that cannot take the action (plan_finished); schedulers
 * of earlier versions answered not_in_flight for both. `code` says which.
 */
export class NotInFlightError extends ServiceError {
  readonly planId: string;
  constructor(code: string, message: string, subject: string, planId: string) {
    super(code, message, subject);
    this.planId = planId;
  }
}

/**
 * The server refused a message for a reason that sending it again does not
 * change: a stream or bucket at its limit, a message over the stream's
 * maximum size or the connection's maximum payload, no room on the server.
 * errCode is JetStream's error code when it gave one.
 */
export class RefusedError extends NarratoriaError {
  readonly errCode?: number;
  constructor(message: string, errCode?: number, options?: ErrorOptions) {
    super(message, options);
    this.errCode = errCode;
  }
}

/**
 * The connection's account may not publish or subscribe where the call
 * needs: a role without the grant, or a connection without the inbox prefix
 * its account requires (the shipped accounts give the game role _INBOX_game).
 */
export class PermissionError extends NarratoriaError {
  readonly operation: "publish" | "subscription";
  readonly subject: string;
  constructor(operation: "publish" | "subscription", subject: string, options?: ErrorOptions) {
    const hint = operation === "subscription" && /INBOX/.test(subject)
      ? " (connect with the inbox prefix the account allows, e.g. inboxPrefix: \"_INBOX_game\")"
      : "";
    super(`permission denied to ${operation === "publish" ? "publish to" : "subscribe to"} ${subject}${hint}`, options);
    this.operation = operation;
    this.subject = subject;
  }
}

/**
 * An asset's content is not the one its worker listed: its digest or size
 * differs (an object overwritten, or corrupted, since).
 */
export class AssetChangedError extends NarratoriaError {
  readonly object: string;
  constructor(object: string, what: string) {
    super(`asset object ${object}: ${what}`);
    this.object = object;
  }
}

/**
 * An asset object larger than the client's limit (assetMaxSize): refused
 * before any of it is read.
 */
export class AssetTooLargeError extends NarratoriaError {
  readonly object: string;
  readonly size: number;
  readonly max: number;
  constructor(object: string, size: number, max: number) {
    super(`asset object ${object} is ${size} bytes, over the client's limit of ${max} (assetMaxSize)`);
    this.object = object;
    this.size = size;
    this.max = max;
  }
}

/**
 * The asset store has no such object: expired after the history window, or
 * never stored.
 */
export class AssetNotFoundError extends NarratoriaError {
  readonly object: string;
  constructor(object: string) {
    super(`asset object ${object} is not in narratoria_assets (expired after the history window, or never stored)`);
    this.object = object;
  }
}

/**
 * The asset has no object: its worker could not store it (only the path on
 * the worker's host is known).
 */
export class NoAssetObjectError extends NarratoriaError {
  readonly assetId: string;
  constructor(assetId: string) {
    super(`asset ${assetId} has no object (its worker could not store it)`);
    this.assetId = assetId;
  }
}

// is matches an error of a nats.js class, also from another copy of the
// nats.js modules than this package's (classes set their name).
function is(err: unknown, cls: { name: string; prototype: Error }): boolean {
  return err instanceof (cls as unknown as typeof Error) || (err instanceof Error && err.name === cls.name);
}

/** natsNoResponders reports a nats.js request error that means no responders. */
export function natsNoResponders(err: unknown): boolean {
  if (is(err, natsErrors.NoRespondersError)) return true;
  return is(err, natsErrors.RequestError) && is((err as Error).cause, natsErrors.NoRespondersError);
}

/** natsTimeout reports a nats.js request that got no answer in time. */
export function natsTimeout(err: unknown): boolean {
  return is(err, natsErrors.TimeoutError);
}

/** permissionOf returns the permission violation behind a nats.js error. */
export function permissionOf(err: unknown): PermissionError | undefined {
  let e: unknown = err;
  for (let i = 0; i < 3 && e instanceof Error; i++, e = e.cause) {
    if (is(e, natsErrors.PermissionViolationError)) {
      const pe = e as InstanceType<typeof natsErrors.PermissionViolationError>;
      return new PermissionError(pe.operation, pe.subject, { cause: err });
    }
  }
  return undefined;
}

// JetStream error codes (nats-server's jetstream_errors_generated.go).
const errStreamMessageExceedsMaximum = 10054;
const errInsufficientResources = 10023;
const errStoreFailed = 10077;

/**
 * refused reports whether a JetStream publish was refused for a reason that
 * sending it again does not change (see RefusedError), as the Go client's
 * Refused does: the store-failed code means a limit only with the
 * server's limit descriptions.
 */
export function refused(err: unknown): boolean {
  if (!isApiError(err)) return false;
  const api = err.apiError();
  switch (api.err_code) {
    case errStreamMessageExceedsMaximum:
    case errInsufficientResources:
      return true;
    case errStoreFailed:
      return ["maximum bytes exceeded", "maximum messages exceeded", "maximum messages per subject exceeded"].includes(api.description);
  }
  return false;
}

/**
 * transient reports whether a JetStream publish may succeed if sent again:
 * no stream leader (503), no answer, no responders (a stream electing a
 * leader), a connection reconnecting. A refusal is not.
 */
export function transient(err: unknown): boolean {
  if (refused(err)) return false;
  if (isApiError(err)) return err.status === 503;
  if (natsTimeout(err) || natsNoResponders(err)) return true;
  // nats.js reports a publish nothing answered as "JetStream not enabled"
  // with the no-responders request error as its cause.
  if (typeof err === "object" && err !== null) return natsNoResponders((err as { cause?: unknown }).cause);
  return false;
}

/** isApiError matches a JetStream API error (and its subclasses) of any copy of nats.js. */
export function isApiError(err: unknown): err is JetStreamApiError {
  return err instanceof JetStreamApiError ||
    (err instanceof Error && typeof (err as { apiError?: unknown }).apiError === "function");
}

/** publishError turns a failed JetStream publish into this client's errors. */
export function publishError(err: unknown, subject: string): unknown {
  const perm = permissionOf(err);
  if (perm) return perm;
  if (refused(err)) {
    const e = err as JetStreamApiError;
    return new RefusedError(`${subject}: ${e.message}`, e.code, { cause: err });
  }
  if (isApiError(err)) return new ServiceError(String(err.code), err.message, subject);
  return err;
}
