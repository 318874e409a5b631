// connectionOptions builds nats.js connection options from the settings the
// narratoria CLI takes (--nats-url, --creds, --nkey, --user/--password,
// --tls-ca/--tls-cert/--tls-key, --inbox-prefix) or their
// NARRATORIA_NATS_* environment variables; pass them to connect() of
// @nats-io/transport-node.
import { readFileSync } from "node:fs";
import {
  credsAuthenticator,
  nkeyAuthenticator,
  type ConnectionOptions,
} from "@nats-io/nats-core";

/** How to reach and sign in to a deployment (each setting optional). */
export interface NatsSettings {
  /** Server URL(s), comma-separated; default nats://127.0.0.1:4222. */
  url?: string;
  /** A .creds file (JWT and seed), e.g. <data-dir>/narratoria.creds of `narratoria up`, or a tenant's. */
  credsFile?: string;
  /** A file holding an nkey seed. */
  nkeyFile?: string;
  user?: string;
  password?: string;
  token?: string;
  /** The CA to trust, and a client certificate and key (PEM files). */
  tlsCA?: string;
  tlsCert?: string;
  tlsKey?: string;
  /** The inbox prefix the account allows (the shipped game role: _INBOX_game). */
  inboxPrefix?: string;
  /** The connection's name, shown by the server. */
  name?: string;
}

/**
 * settingsFromEnv reads NARRATORIA_NATS_URL, _CREDSFILE, _NKEYFILE, _USER,
 * _PASSWORD, _TOKEN, _TLSCA, _TLSCERT, _TLSKEY and _INBOXPREFIX, as the
 * components and the CLI do.
 */
export function settingsFromEnv(env: Record<string, string | undefined> = process.env): NatsSettings {
  const get = (k: string) => env[`NARRATORIA_NATS_${k}`] || undefined;
  return {
    url: get("URL"),
    credsFile: get("CREDSFILE"),
    nkeyFile: get("NKEYFILE"),
    user: get("USER"),
    password: get("PASSWORD"),
    token: get("TOKEN"),
    tlsCA: get("TLSCA"),
    tlsCert: get("TLSCERT"),
    tlsKey: get("TLSKEY"),
    inboxPrefix: get("INBOXPREFIX"),
  };
}

/**
 * connectionOptions turns settings into nats.js connection options: a creds
 * or nkey file becomes an authenticator (read now), TLS files become
 * tls: {caFile, certFile, keyFile}.
 */
export function connectionOptions(s: NatsSettings): ConnectionOptions {
  const o: ConnectionOptions = {
    servers: (s.url ?? "nats://127.0.0.1:4222").split(",").map((u) => u.trim()).filter(Boolean),
  };
  if (s.name) o.name = s.name;
  if (s.inboxPrefix) o.inboxPrefix = s.inboxPrefix;
  if (s.credsFile) o.authenticator = credsAuthenticator(new Uint8Array(readFileSync(s.credsFile)));
  else if (s.nkeyFile) o.authenticator = nkeyAuthenticator(new TextEncoder().encode(readFileSync(s.nkeyFile, "utf8").trim()));
  if (s.user) {
    o.user = s.user;
    o.pass = s.password ?? "";
  }
  if (s.token) o.token = s.token;
  if ((s.tlsCert === undefined) !== (s.tlsKey === undefined)) {
    throw new TypeError("connectionOptions: tlsCert and tlsKey must be given together");
  }
  if (s.tlsCA || s.tlsCert) {
    o.tls = {
      ...(s.tlsCA ? { caFile: s.tlsCA } : {}),
      ...(s.tlsCert ? { certFile: s.tlsCert, keyFile: s.tlsKey } : {}),
    };
  }
  return o;
}
