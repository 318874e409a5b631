// @narratoria/client: the TypeScript client of Narratoria Runtime for game
// servers on Node (the Go client is pkg/client). Message types are generated
// from the JSON Schemas of docs/schemas/ (src/generated/).
export { Client } from "./client.js";
export type { AssetObject, CallOptions, ClientOptions, Decision, ResetResult, RetryInfo } from "./client.js";
export { Watcher, decodeUpdate } from "./watch.js";
export type { EventUpdate, HealthUpdate, NarrationUpdate, ProgressUpdate, Update, WatchOptions } from "./watch.js";
export {
  AssetChangedError,
  AssetNotFoundError,
  AssetTooLargeError,
  BadRequestError,
  NarratoriaError,
  NoAssetObjectError,
  NoRespondersError,
  NotInFlightError,
  PermissionError,
  RateLimitedError,
  RefusedError,
  ServiceError,
  TimeoutError,
  UnavailableError,
  ValidationError,
} from "./errors.js";
export type { Problem } from "./errors.js";
export {
  ASSET_MAX_SIZE,
  BUCKET_ASSETS,
  DEFAULT_PREFIX,
  PROMPT_TEXT_MAX,
  STREAM_APPROVALS,
  STREAM_PROMPTS,
  Subjects,
  checkPlanId,
  checkPrompt,
  checkToken,
  validToken,
} from "./subjects.js";
export { connectionOptions, settingsFromEnv } from "./connect.js";
export type { NatsSettings } from "./connect.js";
export type * from "./generated/index.js";
