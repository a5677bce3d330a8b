/*
 * waitgate-client.js: a small, dependency-free client of waitgate's queue API
 * (/api/v1/queue). Plain ES2020; works in browsers and in Node 18+ (fetch).
 *
 *   const client = new WaitgateClient({ queue: "baseball" });
 *   await client.register();                      // join (or keep the place)
 *   const { accessToken } = await client.waitUntilAdmitted({ onUpdate: show });
 *
 * Two ways to say who the visitor is:
 *
 * - Cookie mode, for a page on waitgate's own origin. waitgate keeps the
 *   userId and queueCredential in an HttpOnly cookie; the client knows
 *   neither and the browser sends the cookie (credentials: "same-origin").
 * - Explicit mode, for a single-page app on another origin. Such an app
 *   cannot rely on waitgate's SameSite=Lax cookies, so it keeps the userId
 *   and the queueCredential of the register answer itself (the credential
 *   is given once, on the first registration), passes them to the
 *   constructor (or lets register() remember them), and the client sends
 *   them with every call. waitgate must list the app's origin in
 *   cors.allowed-origins.
 *
 * Methods (each returns a Promise of the JSON answer):
 *   register({ userId, prove, onProof, invite })
 *                         POST   /api/v1/queue/register; where the queue asks
 *       a proof of work (403 proof_required or proof_invalid), it gets a
 *       challenge, solves it and registers again with the proof, up to
 *       three times. `prove: true` solves one before the first try (the
 *       queue is known to ask one); onProof({ tried, expected }) is called
 *       about every 200 ms while solving. `invite`: the enqueue token of an
 *       invite-only queue (X-Waitgate-Invite).
 *       Its answer's `receipt` (a signed statement of the user's arrival,
 *       docs/fairness.md) is kept as client.receipt.
 *   fairness()            GET    /api/v1/queue/fairness: the draw's
 *       commitment, its seed once open, and the order figures
 *   challenge()           GET    /api/v1/queue/challenge
 *   solve(challengeAnswer, { onProof })
 *       the X-Waitgate-Proof value for a challenge answer: SHA-256 of
 *       "<challenge>:<nonce>" with difficultyBits leading zero bits, by
 *       Web Crypto, in Web Workers (one a core, at most 8) when
 *       `proofWorker` (the URL of proof-worker.js, served by waitgate at
 *       /waiting-room/assets/proof-worker.js) is given and Workers exist,
 *       else on this thread (Node 20+ too).
 *   rank()                GET    /api/v1/queue/rank
 *   token()               POST   /api/v1/queue/active/token
 *   dropout()             DELETE /api/v1/queue/dropout (resolves to null)
 *   waitUntilAdmitted({ onUpdate, signal, delayMs })
 *       polls rank at the advised pollAfterMs (never faster than 0.1 s), calls
 *       onUpdate(answer) on each answer, and once ACTIVE exchanges it for a
 *       token and resolves with the token answer. A 502/503/504 or a request
 *       that got no answer is retried after 1 s, 2 s, 4 s, then every 8 s
 *       (never sooner than Retry-After), each give or take a fifth at random
 *       so that the pages of a whole queue do not come back at once, with
 *       onUpdate({ status: "RECONNECTING", retryInMs }) first. A closed
 *       queue (rank answers CLOSED) stops it: onUpdate gets that answer, then
 *       the promise rejects with an Error whose .code is "queue_closed" and
 *       .message the operator's message, as register() rejects with 410
 *       queue_closed while the queue is closed.
 *
 * A non-2xx answer rejects with an Error carrying .status (the HTTP status;
 * 0 when no answer came: .code is then "network_error" or "timeout"), .code
 * (the answer's JSON "error" field), .body (the whole JSON answer) and
 * .retryAfterMs (from Retry-After). A challenge that cannot be solved here
 * (no Web Crypto: a page not served over HTTPS or from localhost) rejects
 * with .code "proof_unsupported".
 * Aborting `signal` rejects with the signal's reason.
 */
(function (root) {
  "use strict";

  const API = "/api/v1/queue";
  const MIN_POLL_MS = 1000; // the first retry after an error
  // The advice is followed as given (the server promises the place for it
  // plus its heartbeat timeout); this floor only guards against a hot loop.
  const MIN_ADVICE_MS = 100;
  // The longest wait between tries: waitgate keeps a place through an
  // outage and gives clients heartbeat.outage-grace-ms (10 s by default)
  // to come back after it, so a client must try at least this often.
  const MAX_RETRY_MS = 8000;

  class WaitgateClient {
    constructor({ base = "", queue, userId, queueCredential, credentials = "same-origin",
      pollAfterMs = 3000, timeoutMs = 10000, proofWorker = null } = {}) {
      this.base = String(base).replace(/\/+$/, "");
      this.queue = queue;
      this.userId = userId;
      this.queueCredential = queueCredential;
      this.credentials = credentials;
      this.pollAfterMs = pollAfterMs; // the last advised interval (a fallback until one is)
      this.timeoutMs = timeoutMs;     // a request that takes longer counts as no answer
      this.proofWorker = proofWorker; // proof-worker.js's URL, to solve off this thread
    }

    async register({ userId, signal, prove = false, onProof, invite } = {}) {
      if (userId) this.userId = userId;
      let proof = null;
      for (let attempt = 0; ; attempt += 1) {
        if (prove || attempt > 0) {
          const challenge = await this.challenge({ signal });
          // A queue that asks none: register as is.
          proof = challenge.challenge ? await this.solve(challenge, { onProof, signal }) : null;
        }
        try {
          const answer = await this._request("POST", "/register", {
            body: { queue: this.queue, userId: this.userId }, proofOfWork: proof, invite, signal });
          if (answer && answer.userId) this.userId = answer.userId;
          if (answer && answer.queueCredential) this.queueCredential = answer.queueCredential;
          if (answer && typeof answer.receipt === "string") this.receipt = answer.receipt;
          return answer;
        } catch (err) {
          const asked = err && err.status === 403
            && (err.code === "proof_required" || err.code === "proof_invalid");
          if (!asked || attempt >= 2) throw err;
        }
      }
    }

    fairness({ signal } = {}) {
      return this._request("GET", "/fairness", { query: { queue: this.queue }, signal });
    }

    challenge({ signal } = {}) {
      return this._request("GET", "/challenge", { query: { queue: this.queue }, signal });
    }

    async solve({ challenge, difficultyBits }, { onProof, signal } = {}) {
      const expected = 2 ** Number(difficultyBits);
      const progress = (tried) => { if (onProof) onProof({ tried, expected }); };
      if (this.proofWorker && typeof Worker === "function") {
        try {
          return await solveInWorker(this.proofWorker, challenge, difficultyBits, progress, signal);
        } catch (err) {
          // A worker that could not start or run: solve on this thread.
          if (!err || err.code !== "proof_unsupported") throw err;
        }
      }
      return solveHere(challenge, Number(difficultyBits), progress, signal);
    }

    rank({ signal } = {}) {
      return this._request("GET", "/rank", {
        query: { queue: this.queue, userId: this.userId }, credential: true, signal });
    }

    token({ signal } = {}) {
      return this._request("POST", "/active/token", { body: {
        queue: this.queue, userId: this.userId, queueCredential: this.queueCredential }, signal });
    }

    dropout({ signal } = {}) {
      return this._request("DELETE", "/dropout", {
        query: { queue: this.queue, userId: this.userId }, credential: true, signal });
    }

    async waitUntilAdmitted({ onUpdate = () => {}, signal, delayMs = 0 } = {}) {
      let wait = delayMs;
      let failures = 0;
      let active = false; // rank said ACTIVE: only the token exchange is left
      for (;;) {
        await sleep(wait, signal);
        try {
          if (!active) {
            const answer = await this.rank({ signal });
            failures = 0;
            onUpdate(answer);
            if (answer.status === "CLOSED") {
              // Nothing a poll does changes that: stop, and say why.
              throw apiError(200, "queue_closed", answer.message || "The queue is closed.");
            }
            active = answer.status === "ACTIVE";
            wait = Math.max(MIN_ADVICE_MS, Number(this.pollAfterMs) || MIN_POLL_MS);
            if (!active) continue;
          }
          return await this.token({ signal });
        } catch (err) {
          if (!isTransient(err)) throw err;
          failures += 1;
          // Backing off even when the server says when to retry: its
          // Retry-After is the least wait, and a queue's worth of clients
          // retrying every second is what an outage cannot use.
          const backoff = MIN_POLL_MS * 2 ** Math.min(failures - 1, 5);
          const jittered = Math.round(backoff * (0.8 + 0.4 * Math.random()));
          const retryInMs = Math.min(MAX_RETRY_MS,
            Math.max(jittered, err.retryAfterMs != null ? err.retryAfterMs : 0));
          onUpdate({ status: "RECONNECTING", retryInMs });
          wait = retryInMs;
        }
      }
    }

    async _request(method, path, { query = {}, body, credential = false, proofOfWork, invite,
      signal } = {}) {
      const params = new URLSearchParams();
      for (const [key, value] of Object.entries(query)) {
        if (value != null && value !== "") params.set(key, value);
      }
      const url = this.base + API + path + (params.toString() ? "?" + params : "");
      const headers = { Accept: "application/json" };
      if (credential && this.queueCredential) headers["X-Queue-Credential"] = this.queueCredential;
      if (proofOfWork) headers["X-Waitgate-Proof"] = proofOfWork;
      if (invite) headers["X-Waitgate-Invite"] = invite;
      const init = { method, headers, credentials: this.credentials, cache: "no-store" };
      if (body !== undefined) {
        headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(body); // undefined fields are left out
      }

      if (signal && signal.aborted) throw abortReason(signal);
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), this.timeoutMs);
      const forward = () => controller.abort();
      if (signal) signal.addEventListener("abort", forward, { once: true });
      init.signal = controller.signal;
      let response, text;
      try {
        response = await fetch(url, init);
        text = await response.text();
      } catch (cause) {
        if (signal && signal.aborted) throw abortReason(signal);
        throw apiError(0, controller.signal.aborted ? "timeout" : "network_error", String(cause));
      } finally {
        clearTimeout(timer);
        if (signal) signal.removeEventListener("abort", forward);
      }

      let data = null;
      try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
      const advised = data && Number(data.pollAfterMs);
      if (advised > 0) this.pollAfterMs = advised;
      if (!response.ok) {
        const err = apiError(response.status, data && data.error,
          (data && data.message) || `HTTP ${response.status}`);
        err.retryAfterMs = retryAfterMs(response.headers.get("Retry-After"));
        err.body = data; // the whole answer (queue_not_open's opensAt, say)
        throw err;
      }
      if (data === null && response.status !== 204) {
        throw apiError(response.status, "invalid_response", "The answer is not JSON.");
      }
      return data;
    }
  }

  // How many leading zero bits a digest has.
  function zeroBits(bytes) {
    let bits = 0;
    for (let i = 0; i < bytes.length; i += 1) {
      if (bytes[i] !== 0) return bits + Math.clz32(bytes[i]) - 24;
      bits += 8;
    }
    return bits;
  }

  // Solves on this thread: Web Crypto's digest is asynchronous, so a batch
  // of them is kept in flight (one at a time, the round trip costs more
  // than the hash), and the page stays responsive between batches.
  async function solveHere(challenge, bits, progress, signal) {
    const subtle = globalThis.crypto && globalThis.crypto.subtle;
    if (!subtle) throw apiError(0, "proof_unsupported", "Web Crypto is not available here.");
    const encoder = new TextEncoder();
    let lastProgress = Date.now();
    for (let next = 0; ; next += 512) {
      if (signal && signal.aborted) throw abortReason(signal);
      const digests = [];
      for (let n = next; n < next + 512; n += 1) {
        digests.push(subtle.digest("SHA-256", encoder.encode(challenge + ":" + n)));
      }
      const done = await Promise.all(digests);
      for (let i = 0; i < done.length; i += 1) {
        if (zeroBits(new Uint8Array(done[i])) >= bits) return challenge + ":" + (next + i);
      }
      if (Date.now() - lastProgress >= 200) {
        lastProgress = Date.now();
        progress(next + 512);
      }
    }
  }

  // Solves in proof-worker.js, one worker a core (at most 8), each trying
  // every n-th nonce; each posts { tried } now and then, and the one that
  // finds it { proof } (or { error }).
  function solveInWorker(url, challenge, difficultyBits, progress, signal) {
    return new Promise((resolve, reject) => {
      if (signal && signal.aborted) return reject(abortReason(signal));
      const cores = typeof navigator === "object" && Number(navigator.hardwareConcurrency);
      const n = Math.max(1, Math.min(8, cores || 1));
      const workers = [];
      const tried = new Array(n).fill(0);
      const finish = (error, proof) => {
        for (const worker of workers) worker.terminate();
        if (signal) signal.removeEventListener("abort", onAbort);
        if (error) reject(error); else resolve(proof);
      };
      const onAbort = () => finish(abortReason(signal));
      try {
        for (let k = 0; k < n; k += 1) workers.push(new Worker(url));
      } catch (err) {
        return finish(apiError(0, "proof_unsupported", String(err)));
      }
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
      workers.forEach((worker, k) => {
        worker.onmessage = (event) => {
          const data = event.data || {};
          if (typeof data.proof === "string") finish(null, data.proof);
          else if (data.error) finish(apiError(0, "proof_unsupported", String(data.error)));
          else if (Number.isFinite(data.tried)) {
            tried[k] = data.tried;
            progress(tried.reduce((a, b) => a + b, 0));
          }
        };
        worker.onerror = () => finish(apiError(0, "proof_unsupported", "The proof worker failed."));
        worker.postMessage({ challenge, difficultyBits, start: k, step: n });
      });
    });
  }

  function apiError(status, code, message) {
    const err = new Error(message);
    err.status = status;
    err.code = code;
    return err;
  }

  // No answer at all, or an answer that says "try again shortly".
  function isTransient(err) {
    return err != null && [0, 502, 503, 504].includes(err.status);
  }

  // Retry-After is seconds or an HTTP date; null when absent or unreadable.
  function retryAfterMs(value) {
    if (value == null || value.trim() === "") return null;
    const seconds = Number(value);
    if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
    const at = Date.parse(value);
    return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
  }

  function abortReason(signal) {
    return signal.reason !== undefined ? signal.reason
      : new DOMException("The operation was aborted.", "AbortError");
  }

  // Waits `ms`; ends early (without error) when the browser comes back online,
  // and rejects when `signal` is aborted.
  function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal && signal.aborted) return reject(abortReason(signal));
      if (!(ms > 0)) return resolve();
      const online = typeof window !== "undefined" && typeof window.addEventListener === "function";
      const finish = (error) => {
        clearTimeout(timer);
        if (signal) signal.removeEventListener("abort", onAbort);
        if (online) window.removeEventListener("online", onOnline);
        if (error) reject(error); else resolve();
      };
      const onAbort = () => finish(abortReason(signal));
      const onOnline = () => finish();
      const timer = setTimeout(finish, ms);
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
      if (online) window.addEventListener("online", onOnline, { once: true });
    });
  }

  if (typeof module === "object" && module && module.exports) module.exports = WaitgateClient;
  if (root) root.WaitgateClient = WaitgateClient;
})(typeof globalThis !== "undefined" ? globalThis : this);
