// Load test for clipfn's POST /v1/embed (or /v1/analyze, ENDPOINT): the seed team's profile.
//
// Each virtual user sends one request with MIN_PHOTOS..MAX_PHOTOS random photo
// keys, checks the answer, then thinks for THINK_MIN_S..THINK_MAX_S seconds.
// Defaults: 30 VUs for 10 minutes, 30-50 photos, 3-5 s think time.
//
//   k6 run -e BASE_URL=https://clipfn-xyz-uc.a.run.app \
//          -e AUTH_TOKEN="$(gcloud auth print-identity-token)" \
//          -e PHOTOS_FILE=/abs/path/photos.txt infra/k6/load.js
//
// Environment (all optional except BASE_URL and one of PHOTOS / PHOTOS_FILE):
//   BASE_URL         service URL, no trailing slash needed
//   VUS, DURATION    virtual users (30) and test length (10m)
//   PHOTOS           comma-separated keys or URIs
//   PHOTOS_FILE      file with one key or URI per line (# comments allowed);
//                    a relative path is resolved against this script's folder
//   MIN_PHOTOS, MAX_PHOTOS    photos per request (30, 50)
//   THINK_MIN_S, THINK_MAX_S  sleep between requests in seconds (3, 5)
//   AUTH_TOKEN       bearer token, e.g. a Cloud Run identity token
//   REQUEST_TIMEOUT  per-request timeout (120s)
//   CHECKS_RATE      least passing rate of the checks (0.99)
//   ITEM_OK_RATE     least rate of items that come back with an embedding (0.99)
//   EXPECT_DIM       embedding length every item must have (512 for ViT-B/32;
//                    0 accepts whatever "dim" the response states)
//   SUMMARY_JSON     also write k6's end-of-test data as JSON to this path
//   ENDPOINT         the path posted to (/v1/embed); /v1/analyze answers an embedding per photo too

import http from "k6/http";
import { check, sleep } from "k6";
import { Counter, Rate, Trend } from "k6/metrics";

function envNum(name, fallback) {
  const raw = __ENV[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value)) throw new Error(`${name}=${raw} is not a number`);
  return value;
}

function envStr(name, fallback) {
  const raw = __ENV[name];
  return raw === undefined || raw === "" ? fallback : raw;
}

const BASE_URL = envStr("BASE_URL", "").replace(/\/+$/, "");
if (!BASE_URL) throw new Error("set BASE_URL, e.g. -e BASE_URL=http://127.0.0.1:8080");

const VUS = envNum("VUS", 30);
const DURATION = envStr("DURATION", "10m");
const MIN_PHOTOS = envNum("MIN_PHOTOS", 30);
const MAX_PHOTOS = envNum("MAX_PHOTOS", 50);
const THINK_MIN_S = envNum("THINK_MIN_S", 3);
const THINK_MAX_S = envNum("THINK_MAX_S", 5);
const REQUEST_TIMEOUT = envStr("REQUEST_TIMEOUT", "120s");
const CHECKS_RATE = envNum("CHECKS_RATE", 0.99);
const ITEM_OK_RATE = envNum("ITEM_OK_RATE", 0.99);
const EXPECT_DIM = envNum("EXPECT_DIM", 512);
const AUTH_TOKEN = envStr("AUTH_TOKEN", "");
const ENDPOINT = envStr("ENDPOINT", "/v1/embed");

if (MIN_PHOTOS < 1 || MAX_PHOTOS < MIN_PHOTOS) {
  throw new Error(`need 1 <= MIN_PHOTOS <= MAX_PHOTOS, got ${MIN_PHOTOS}..${MAX_PHOTOS}`);
}
if (THINK_MIN_S < 0 || THINK_MAX_S < THINK_MIN_S) {
  throw new Error(`need 0 <= THINK_MIN_S <= THINK_MAX_S, got ${THINK_MIN_S}..${THINK_MAX_S}`);
}

function loadPhotos() {
  let raw = [];
  if (__ENV.PHOTOS) {
    raw = __ENV.PHOTOS.split(",");
  } else if (__ENV.PHOTOS_FILE) {
    raw = open(__ENV.PHOTOS_FILE).split(/\r?\n/);
  } else {
    throw new Error("set PHOTOS (comma-separated keys) or PHOTOS_FILE (one key per line)");
  }
  const photos = raw.map((p) => p.trim()).filter((p) => p && !p.startsWith("#"));
  if (photos.length === 0) throw new Error("the photo list is empty");
  return photos;
}

// Read once in the init context; every VU shares the list.
const PHOTOS = loadPhotos();

const itemErrors = new Counter("embed_item_errors");
const itemOk = new Rate("embed_item_ok");
const overloaded = new Counter("embed_overloaded");
const imagesPerRequest = new Trend("embed_images_per_request");
const serverTotalMs = new Trend("embed_server_total_ms", true);

export const options = {
  scenarios: {
    embed: {
      executor: "constant-vus",
      vus: VUS,
      duration: DURATION,
      gracefulStop: "30s",
    },
  },
  thresholds: {
    checks: [`rate>=${CHECKS_RATE}`],
    embed_item_ok: [`rate>=${ITEM_OK_RATE}`],
    http_req_failed: [`rate<=${(1 - CHECKS_RATE).toFixed(4)}`],
  },
  summaryTrendStats: ["avg", "min", "med", "p(90)", "p(95)", "p(99)", "max"],
  // Images are fetched by the service, not by k6: nothing to discard but be explicit.
  discardResponseBodies: false,
};

function randomInt(min, max) {
  return min + Math.floor(Math.random() * (max - min + 1));
}

// `count` random photos, without repeats while the list is long enough.
function samplePhotos(count) {
  if (count >= PHOTOS.length) {
    const out = [];
    for (let i = 0; i < count; i++) out.push(PHOTOS[randomInt(0, PHOTOS.length - 1)]);
    return out;
  }
  const pool = PHOTOS.slice();
  for (let i = 0; i < count; i++) {
    const j = randomInt(i, pool.length - 1);
    [pool[i], pool[j]] = [pool[j], pool[i]];
  }
  return pool.slice(0, count);
}

function parse(res) {
  try {
    return res.json();
  } catch (_) {
    return null;
  }
}

export default function () {
  const images = samplePhotos(randomInt(MIN_PHOTOS, MAX_PHOTOS));
  imagesPerRequest.add(images.length);

  const headers = { "Content-Type": "application/json" };
  if (AUTH_TOKEN) headers.Authorization = `Bearer ${AUTH_TOKEN}`;

  const res = http.post(`${BASE_URL}${ENDPOINT}`, JSON.stringify({ images }), {
    headers,
    timeout: REQUEST_TIMEOUT,
    tags: { name: `POST ${ENDPOINT}` },
  });

  if (res.status === 503 || res.status === 429) overloaded.add(1);

  const body = res.status === 200 ? parse(res) : null;
  const data = body && Array.isArray(body.data) ? body.data : null;
  let withEmbedding = 0;
  let dimOk = true;
  if (data) {
    const dim = EXPECT_DIM > 0 ? EXPECT_DIM : body.dim;
    for (const item of data) {
      const ok = Array.isArray(item.embedding) && item.embedding.length > 0;
      itemOk.add(ok);
      if (ok) {
        withEmbedding++;
        if (item.embedding.length !== dim) dimOk = false;
      } else {
        itemErrors.add(1, { code: (item.error && item.error.code) || "missing" });
      }
    }
    if (body.timings_ms && typeof body.timings_ms.total === "number") serverTotalMs.add(body.timings_ms.total);
  } else {
    // A failed request counts every image it carried as not embedded.
    for (let i = 0; i < images.length; i++) itemOk.add(false);
  }

  check(res, {
    "status is 200": (r) => r.status === 200,
    "one result per image, in order": () =>
      data !== null && data.length === images.length && data.every((item, i) => item.index === i),
    "every image has an embedding": () => data !== null && withEmbedding === images.length,
    "embedding length matches dim": () =>
      data !== null && dimOk && (EXPECT_DIM === 0 || body.dim === EXPECT_DIM),
  });

  sleep(THINK_MIN_S + Math.random() * (THINK_MAX_S - THINK_MIN_S));
}

export function handleSummary(data) {
  const out = {};
  if (__ENV.SUMMARY_JSON) out[__ENV.SUMMARY_JSON] = JSON.stringify(data, null, 2);
  // Keep k6's own end-of-test summary on stdout: returning no "stdout" key
  // would suppress it.
  out.stdout = textSummary(data);
  return out;
}

// A compact text summary (jslib's textSummary is a remote import, which
// offline machines cannot fetch).
function textSummary(data) {
  const m = data.metrics;
  const val = (name, key) => (m[name] && m[name].values[key] !== undefined ? m[name].values[key] : 0);
  const lines = [
    "",
    `clipfn load: ${BASE_URL}  vus=${VUS} duration=${DURATION} photos/request=${MIN_PHOTOS}-${MAX_PHOTOS} think=${THINK_MIN_S}-${THINK_MAX_S}s`,
    `  requests ........ ${val("http_reqs", "count")} (${val("http_reqs", "rate").toFixed(2)}/s), failed ${(100 * val("http_req_failed", "rate")).toFixed(2)}%`,
    `  checks .......... ${val("checks", "passes")} passed, ${val("checks", "fails")} failed (${(100 * val("checks", "rate")).toFixed(2)}%)`,
    `  items ........... ${(100 * val("embed_item_ok", "rate")).toFixed(2)}% embedded, ${val("embed_item_errors", "count")} item errors, ${val("embed_overloaded", "count")} overloaded (503/429)`,
    `  latency ms ...... avg ${val("http_req_duration", "avg").toFixed(0)}  p50 ${val("http_req_duration", "med").toFixed(0)}  p95 ${val("http_req_duration", "p(95)").toFixed(0)}  p99 ${val("http_req_duration", "p(99)").toFixed(0)}  max ${val("http_req_duration", "max").toFixed(0)}`,
    `  server total ms . avg ${val("embed_server_total_ms", "avg").toFixed(0)}  p95 ${val("embed_server_total_ms", "p(95)").toFixed(0)}`,
  ];
  for (const [name, metric] of Object.entries(m)) {
    if (metric.thresholds) {
      for (const [expr, result] of Object.entries(metric.thresholds)) {
        lines.push(`  threshold ${name} ${expr}: ${result.ok ? "ok" : "FAILED"}`);
      }
    }
  }
  return lines.join("\n") + "\n";
}
