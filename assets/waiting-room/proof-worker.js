/*
 * proof-worker.js: solves waitgate's proof-of-work challenge in a Web Worker,
 * so that the page stays responsive while it runs.
 *
 * Posted { challenge, difficultyBits, start, step }, it tries nonces start,
 * start + step, start + 2 step ... (several workers share the search, one a
 * core) until SHA-256 of "<challenge>:<nonce>" starts with difficultyBits
 * zero bits, and posts { proof: "<challenge>:<nonce>", tried } (the
 * X-Waitgate-Proof value). On the way it posts { tried } (its own count)
 * about every 200 ms, for a progress line.
 * With no Web Crypto (a page not served over HTTPS or from localhost) it
 * posts { error }.
 *
 * Web Crypto's digest is asynchronous, so the worker keeps a batch of digests
 * in flight at once: one at a time, the promise round trip costs more than
 * the hash.
 */
"use strict";

const BATCH = 512;
const PROGRESS_MS = 200;

function leadingZeroBits(bytes) {
  let bits = 0;
  for (let i = 0; i < bytes.length; i += 1) {
    if (bytes[i] === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(bytes[i]) - 24;
  }
  return bits;
}

// The bytes of "<prefix><n>": the prefix is ASCII (base64url and ':').
function withNonce(prefix, n) {
  const digits = String(n);
  const bytes = new Uint8Array(prefix.length + digits.length);
  bytes.set(prefix);
  for (let i = 0; i < digits.length; i += 1) bytes[prefix.length + i] = digits.charCodeAt(i);
  return bytes;
}

async function solve(challenge, bits, start, step) {
  const subtle = self.crypto && self.crypto.subtle;
  if (!subtle) throw new Error("Web Crypto is not available here.");
  const prefix = new TextEncoder().encode(challenge + ":");
  let tried = 0;
  let lastProgress = Date.now();
  for (let next = start; ; ) {
    const nonces = [];
    const digests = [];
    for (let i = 0; i < BATCH; i += 1) {
      nonces.push(next);
      digests.push(subtle.digest("SHA-256", withNonce(prefix, next)));
      next += step;
    }
    const done = await Promise.all(digests);
    for (let i = 0; i < done.length; i += 1) {
      if (leadingZeroBits(new Uint8Array(done[i])) >= bits) {
        return { proof: challenge + ":" + nonces[i], tried: tried + i + 1 };
      }
    }
    tried += BATCH;
    if (Date.now() - lastProgress >= PROGRESS_MS) {
      lastProgress = Date.now();
      self.postMessage({ tried });
    }
  }
}

self.onmessage = (event) => {
  const data = event.data || {};
  const bits = Number(data.difficultyBits);
  const start = data.start === undefined ? 0 : Number(data.start);
  const step = data.step === undefined ? 1 : Number(data.step);
  if (typeof data.challenge !== "string" || !Number.isInteger(bits) || bits < 0 || bits > 32
      || !Number.isInteger(start) || start < 0 || !Number.isInteger(step) || step < 1) {
    self.postMessage({ error: "Not a challenge." });
    return;
  }
  solve(data.challenge, bits, start, step).then(
    (answer) => self.postMessage(answer),
    (err) => self.postMessage({ error: String((err && err.message) || err) }),
  );
};
