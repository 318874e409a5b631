// Reading an object of the asset store (narratoria_assets) the way the
// shipped game role may: the object's meta by a direct get of its last
// message, its chunks through an ordered push consumer of its own (delivered
// to the connection's inbox prefix). nats.js's object store reads the meta
// with STREAM.MSG.GET, which that role is not granted.
import { createHash } from "node:crypto";
import type { NatsConnection } from "@nats-io/nats-core";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { ConsumerMessages } from "@nats-io/jetstream";
import {
  AssetChangedError,
  AssetNotFoundError,
  AssetTooLargeError,
  NoRespondersError,
  TimeoutError,
  ValidationError,
  natsNoResponders,
  permissionOf,
} from "./errors.js";
import { BUCKET_ASSETS } from "./subjects.js";

const STREAM = "OBJ_" + BUCKET_ASSETS;
const NAME = /^sha256-([0-9a-f]{64})$/;

/** An object of the asset store: its content and media type. */
export interface AssetObject {
  data: Uint8Array;
  /** The Content-Type the worker stored it with ("" when none). */
  mediaType: string;
}

interface ObjectMeta {
  name: string;
  nuid: string;
  size: number;
  chunks: number;
  digest: string;
  deleted?: boolean;
  headers?: Record<string, string[]>;
}

// The meta subject names the object in base64url with padding, as every
// NATS object store client does.
function metaSubject(name: string): string {
  let b = Buffer.from(name, "utf8").toString("base64url");
  while (b.length % 4) b += "=";
  return `$O.${BUCKET_ASSETS}.M.${b}`;
}

function header(meta: ObjectMeta, key: string): string {
  for (const [k, v] of Object.entries(meta.headers ?? {})) {
    if (k.toLowerCase() === key.toLowerCase() && v.length) return v[0];
  }
  return "";
}

/**
 * readAssetObject fetches an object by name ("sha256-<hex>") and checks its
 * content hashes to the name; within timeoutMs. An object over maxSize
 * bytes is refused before any of it is read.
 */
export async function readAssetObject(nc: NatsConnection, name: string, timeoutMs: number, maxSize: number): Promise<AssetObject> {
  const m = NAME.exec(typeof name === "string" ? name : "");
  if (!m) throw new ValidationError([{ field: "object", message: `${JSON.stringify(name)}: an asset object is named sha256-<64 hex digits>` }]);
  const want = m[1];
  const deadline = Date.now() + timeoutMs;
  let stored;
  try {
    const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: timeoutMs });
    stored = await jsm.direct.getMessage(STREAM, { last_by_subj: metaSubject(name) });
  } catch (err) {
    if (natsNoResponders(err)) {
      throw new NoRespondersError(`$JS.API.DIRECT.GET.${STREAM}`, `no asset store (${BUCKET_ASSETS}) answers`, { cause: err });
    }
    throw permissionOf(err) ?? err;
  }
  if (stored === null) throw new AssetNotFoundError(name);
  const meta = stored.json<ObjectMeta>();
  if (meta.deleted) throw new AssetNotFoundError(name);
  if (meta.size > maxSize) throw new AssetTooLargeError(name, meta.size, maxSize);
  const data = meta.size === 0 ? new Uint8Array(0) : await readChunks(nc, meta, deadline - Date.now());
  if (data.length !== meta.size) throw new AssetChangedError(name, `${data.length} bytes read, ${meta.size} stored`);
  const sum = createHash("sha256").update(data).digest("hex");
  if (sum !== want) throw new AssetChangedError(name, `its content hashes to ${sum}`);
  return { data, mediaType: header(meta, "Content-Type") };
}

async function readChunks(nc: NatsConnection, meta: ObjectMeta, timeoutMs: number): Promise<Uint8Array> {
  const js = jetstream(nc, { timeout: Math.max(timeoutMs, 1) });
  let iter: ConsumerMessages | undefined;
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  try {
    const c = await js.consumers.getPushConsumer(STREAM, {
      filter_subjects: `$O.${BUCKET_ASSETS}.C.${meta.nuid}`,
      deliver_policy: DeliverPolicy.All,
    });
    iter = await c.consume();
    const it = iter;
    timer = setTimeout(() => {
      timedOut = true;
      it.stop();
    }, Math.max(timeoutMs, 1));
    const parts: Uint8Array[] = [];
    let size = 0;
    for await (const jm of iter) {
      if (jm.data.length > 0) {
        parts.push(jm.data);
        size += jm.data.length;
      }
      if (jm.info.pending === 0) break;
    }
    if (timedOut) throw new TimeoutError(`asset object ${meta.name}: not read within ${timeoutMs} ms`);
    return Buffer.concat(parts, size);
  } catch (err) {
    throw permissionOf(err) ?? err;
  } finally {
    clearTimeout(timer);
    iter?.stop();
  }
}
