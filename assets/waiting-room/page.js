/*
 * page.js: keeps waitgate's waiting page up to date.
 *
 * The server renders the page with the visitor's place and a JSON config
 * (#waitgate-config: queue, return path, status, rank, startRank,
 * pollAfterMs and the localized strings). From there this script polls the
 * queue API through WaitgateClient in cookie mode (the HttpOnly queue cookie
 * says who the visitor is), updates the page in place, and once the visitor
 * is admitted exchanges the place for a token and goes to the return path.
 *
 * Every visible word comes from config.strings; this file has none of its
 * own. The live region (#wg-message) is written only when its text changes,
 * so a screen reader announces changes, not every poll.
 *
 * Polling goes on while the tab is hidden: polling is the heartbeat that
 * keeps the place. Each poll is scheduled from the previous answer, so there
 * is never more than one request at a time. A closed queue (status CLOSED)
 * ends it: the page shows the operator's message and neither polls nor
 * reloads.
 *
 * A queue that asks a proof of work (status CHALLENGE), or a page opened
 * from an invitation's link (status JOIN), is joined from here: the client
 * solves a challenge in Web Workers (proof-worker.js) where one is asked,
 * the progress bar shows how it goes, and the register that carries the
 * proof and the invite sets the queue cookie; then the page polls as above.
 */
(() => {
  "use strict";

  const MIN_POLL_MS = 1000;
  const MAX_RELOAD_DELAY_MS = 30000;
  const RELOAD_KEY = "waitgate-reloads";

  const $ = (id) => document.getElementById(id);

  function readConfig() {
    const el = $("waitgate-config");
    try {
      const config = el ? JSON.parse(el.textContent) : null;
      return config && typeof config === "object" ? config : null;
    } catch (_) {
      return null;
    }
  }

  const config = readConfig();
  const fallbackPollMs = Math.max(MIN_POLL_MS, Number(config && config.pollAfterMs) || 3000);

  // Reloading asks the server again: it registers the visitor anew when the
  // place is gone, and answers with a redirect once admitted. Reloads that
  // follow each other quickly (an error that does not go away) are spaced
  // out, 1 s, 2 s, 4 s ... up to 30 s.
  let reloading = false;
  function reload({ soon = false } = {}) {
    if (reloading) return;
    reloading = true;
    let delay = soon ? 0 : fallbackPollMs;
    try {
      const last = JSON.parse(sessionStorage.getItem(RELOAD_KEY) || "null");
      const count = last && Date.now() - last.at < 60000 ? last.count + 1 : 0;
      if (count > 0) delay = Math.max(delay, Math.min(MAX_RELOAD_DELAY_MS, MIN_POLL_MS * 2 ** (count - 1)));
      sessionStorage.setItem(RELOAD_KEY, JSON.stringify({ at: Date.now() + delay, count }));
    } catch (_) {
      delay = Math.max(delay, fallbackPollMs); // no storage: never reload faster than a poll
    }
    setTimeout(() => location.reload(), delay);
  }

  // A good answer ends a run of reloads.
  let reloadsForgotten = false;
  function forgetReloads() {
    if (reloadsForgotten) return;
    reloadsForgotten = true;
    try { sessionStorage.removeItem(RELOAD_KEY); } catch (_) { /* no storage */ }
  }

  // Without a config or the client, behave as the page does without
  // JavaScript: reload now and then, and let the server show the place.
  if (!config || typeof window.WaitgateClient !== "function") {
    reload();
    return;
  }

  const strings = config.strings && typeof config.strings === "object" ? config.strings : {};
  const root = $("waitgate");
  const heading = $("wg-heading");
  const message = $("wg-message");
  const place = $("wg-place");
  const wait = $("wg-wait");
  const progress = $("wg-progress");
  const progressText = $("wg-progress-text");
  const note = $("wg-note");

  let numberFormat = null;
  try {
    numberFormat = new Intl.NumberFormat(config.lang || document.documentElement.lang || undefined);
  } catch (_) {
    numberFormat = null;
  }
  const num = (n) => (numberFormat ? numberFormat.format(n) : String(n));

  // The localized string `key` with {n} replaced, or null when there is none.
  function text(key, n) {
    const s = strings[key];
    if (typeof s !== "string") return null;
    return n === undefined ? s : s.replace(/\{n\}/g, num(n));
  }

  function setText(el, value) {
    if (el && value != null && el.textContent !== value) el.textContent = value;
  }

  // What the page shows when there is no number (before the open): the
  // template's own placeholder, kept in data-empty.
  const empty = (el) => (el && el.dataset.empty) || "";

  function setStatus(status) {
    if (root && root.dataset.status !== status) root.dataset.status = status;
  }

  let startRank = Number.isFinite(config.startRank) ? config.startRank : null;

  function setProgress(rank) {
    if (!Number.isFinite(rank)) return;
    if (startRank === null) startRank = rank; // first place seen after the open
    // 100% is for once admitted: the next in line is not in yet.
    const pct = startRank <= 0 ? 99
      : Math.min(99, Math.max(0, Math.floor((100 * (startRank - rank)) / startRank)));
    showProgress(pct);
  }

  function showProgress(pct) {
    if (!progress) return;
    if (Number(progress.value) !== pct) progress.value = pct;
    const label = text("progress", pct);
    if (label !== null) {
      if (progress.getAttribute("aria-valuetext") !== label) progress.setAttribute("aria-valuetext", label);
      setText(progressText, label);
    }
  }

  function waitText(seconds) {
    if (!Number.isFinite(seconds)) return null;
    if (seconds < 60) return text("wait_soon");
    if (seconds < 90) return text("wait_minute");
    if (seconds < 120 * 60) return text("wait_minutes", Math.floor((seconds + 30) / 60));
    return text("wait_hours", Math.floor((seconds + 1800) / 3600));
  }

  function aheadText(rank) {
    if (rank === 0) return text("next");
    if (rank === 1) return text("ahead_one");
    return text("ahead", rank);
  }

  function opensText(seconds) {
    const s = Math.max(0, Math.ceil(Number(seconds) || 0));
    if (s === 1) return text("opens_in_second");
    return s < 120 ? text("opens_in_seconds", s) : text("opens_in_minutes", Math.round(s / 60));
  }

  let connectionLost = false;
  function setConnection(lost) {
    connectionLost = lost;
    if (!root) return;
    if (lost) root.dataset.connection = "lost";
    else delete root.dataset.connection;
  }

  // One rank answer (or the client's RECONNECTING notice) onto the page.
  function render(answer) {
    if (!answer || typeof answer !== "object") return;
    if (answer.status === "RECONNECTING") {
      setConnection(true);
      setText(message, text("reconnecting"));
      return;
    }
    if (connectionLost) setConnection(false);
    forgetReloads();

    const rank = Number.isFinite(answer.rank) ? answer.rank : null;
    switch (answer.status) {
      case "WAITING":
        if (answer.paused) {
          setStatus("PAUSED");
          setText(heading, text("heading_paused"));
          setText(message, text("paused"));
          setText(wait, text("wait_unknown"));
        } else {
          setStatus("WAITING");
          setText(heading, text("heading_waiting"));
          if (rank !== null) setText(message, aheadText(rank));
          setText(wait, waitText(answer.estimatedWaitSeconds));
        }
        if (rank !== null) {
          setText(place, num(rank + 1));
          setProgress(rank);
        }
        break;
      case "PREQUEUE":
        setStatus("PREQUEUE");
        setText(heading, text("heading_prequeue"));
        setText(message, opensText(answer.opensInSeconds));
        setText(place, empty(place));
        setText(wait, empty(wait));
        showProgress(0);
        break;
      case "ACTIVE":
        showProgress(100); // the token exchange follows
        break;
      case "CLOSED":
        closed(answer.message);
        break;
      default:
        break;
    }
  }

  // The operator closed the queue: their message, and the page's own line
  // (the client stops polling with it).
  function closed(words) {
    setStatus("CLOSED");
    setText(heading, text("heading_closed"));
    if (typeof words === "string" && words !== "") setText(message, words);
    setText(note, text("closed"));
    setText(place, empty(place));
    setText(wait, empty(wait));
    showProgress(0);
    forgetReloads();
  }

  function admitted() {
    setConnection(false);
    setStatus("ACTIVE");
    setText(heading, text("heading_admitted"));
    setText(message, text("admitted"));
    showProgress(100);
    forgetReloads();
    location.replace(returnPath(config.return));
  }

  // Only a path on this site: "/x", never "//host" or "/\host".
  function returnPath(value) {
    return typeof value === "string" && /^\/(?![/\\])/.test(value) ? value : "/";
  }

  // Whether the browser refuses this site's cookies. navigator.cookieEnabled
  // says so only when cookies are off everywhere (Chromium answers true
  // when they are blocked by its settings), so a cookie is set and read
  // back, then removed.
  function cookiesRefused() {
    if (navigator.cookieEnabled === false) return true;
    try {
      document.cookie = "wg-cookie-probe=1; path=/; SameSite=Lax";
      const kept = document.cookie.indexOf("wg-cookie-probe=1") !== -1;
      document.cookie = "wg-cookie-probe=; path=/; max-age=0; SameSite=Lax";
      return !kept;
    } catch (_) {
      return false;
    }
  }

  // A closed queue (the server shows the operator's message), or an
  // invite-only one without a good invite: nothing the page could do
  // changes it.
  if (config.status === "CLOSED" || config.status === "INVITE_REQUIRED") {
    forgetReloads();
    return;
  }
  // A browser that refuses cookies never sends the queue cookie back: every
  // load would join anew, at the tail, and never reach the head. Say so,
  // and neither poll nor reload.
  if (cookiesRefused()) {
    setStatus("COOKIES_REQUIRED");
    setText(heading, text("heading_cookies"));
    setText(message, text("cookies_required"));
    setText(place, empty(place));
    setText(wait, empty(wait));
    return;
  }

  // Before the queue opens to registration the visitor has no place to poll:
  // reload after the advised interval, and the server tries again.
  if (config.status === "NOT_OPEN") {
    // The opening in the visitor's own time zone (the server can only say
    // UTC).
    const opensAt = Number(config.opensAtMs);
    const template = text("not_open");
    if (Number.isFinite(opensAt) && template !== null) {
      try {
        const when = new Intl.DateTimeFormat(config.lang || undefined, {
          dateStyle: "full",
          timeStyle: "short",
        }).format(new Date(opensAt));
        setText(message, template.replace("{t}", when));
      } catch (_) {
        // The server's UTC stays.
      }
    }
    setTimeout(() => location.reload(), fallbackPollMs);
    return;
  }
  // Nor is there one when the page could not place the visitor (Redis was
  // unavailable) or needs a login first: polling would only be refused.
  // Reload instead, backing off while it goes on.
  if (config.status === "UNAVAILABLE" || config.status === "LOGIN_REQUIRED") {
    reload();
    return;
  }

  const client = new window.WaitgateClient({
    queue: config.queue,
    credentials: "same-origin",
    pollAfterMs: fallbackPollMs,
    proofWorker: typeof config.proofWorker === "string" ? config.proofWorker : null,
  });

  // Polls until admitted, from the first poll after `delayMs`.
  function follow(delayMs) {
    client
      .waitUntilAdmitted({ onUpdate: render, delayMs })
      .then(admitted)
      .catch((err) => {
        // Closed: shown by render; the page stops there.
        if (err && err.code === "queue_closed") return;
        // 404 (the place is gone), 403 (not admitted after all) and any other
        // 4xx: reload at once, the server sorts it out. Anything else: reload
        // after a poll interval.
        const status = err && err.status;
        reload({ soon: status >= 400 && status < 500 });
      });
  }

  // The chance that a proof would be found by now, as the progress bar's
  // value: finding one is luck, so no count of tries is ever "done".
  function proofProgress({ tried, expected }) {
    const pct = Math.min(99, Math.floor(100 * (1 - Math.exp(-tried / expected))));
    if (progress && Number(progress.value) !== pct) progress.value = pct;
    const label = text("checking_progress", pct);
    if (label !== null) {
      if (progress) progress.setAttribute("aria-valuetext", label);
      setText(progressText, label);
    }
  }

  // Proof of my place: the receipt register signs (docs/fairness.md),
  // offered as a file once the visitor has a place. The page's own
  // register gives one; a page that joined on the server asks for it with
  // a register when the link is first used (registering again keeps the
  // place and names the same arrival).
  let receipt = null;
  let receiptLink = null;
  function receiptFile() {
    const origin = location.origin;
    return JSON.stringify({
      queue: config.queue,
      receipt,
      keys: origin + "/.well-known/waitgate/keys",
      fairness: origin + "/api/v1/queue/fairness?queue=" + encodeURIComponent(config.queue),
    }, null, 2) + "\n";
  }
  function fillReceiptLink() {
    receiptLink.href = "data:application/json;charset=utf-8," + encodeURIComponent(receiptFile());
    receiptLink.setAttribute("data-receipt", receipt);
  }
  function offerReceipt() {
    if (receiptLink || !note || !note.parentNode) return;
    receiptLink = document.createElement("a");
    receiptLink.id = "wg-receipt";
    receiptLink.className = "wg-receipt";
    receiptLink.download = "waitgate-receipt-" + config.queue + ".json";
    receiptLink.href = "#";
    receiptLink.textContent = text("save_receipt");
    receiptLink.addEventListener("click", (event) => {
      if (receipt) return; // the file is in the link already
      event.preventDefault();
      client.register().then((answer) => {
        if (!answer || typeof answer.receipt !== "string") return;
        receipt = answer.receipt;
        fillReceiptLink();
        receiptLink.click();
      }).catch(() => {
        // No receipt now (an outage, say): the link stays for a later try.
      });
    });
    note.parentNode.insertBefore(receiptLink, note.nextSibling);
    if (receipt) fillReceiptLink();
  }
  function keepReceipt(answer) {
    if (answer && typeof answer.receipt === "string") receipt = answer.receipt;
    offerReceipt();
  }

  if (config.status === "CHALLENGE" || config.status === "JOIN") {
    const prove = config.status === "CHALLENGE";
    setText(note, text("note"));
    if (prove) proofProgress({ tried: 0, expected: 1 });
    // The invite stays out of the address bar (and of the Referer of the
    // pages that follow) once the page has it.
    if (typeof config.invite === "string") {
      try {
        const url = new URL(location.href);
        url.searchParams.delete("invite");
        history.replaceState(history.state, "", url.pathname + url.search + url.hash);
      } catch (_) {
        // The invite stays in the address; nothing else changes.
      }
    }
    client
      .register({
        prove,
        onProof: proofProgress,
        invite: typeof config.invite === "string" ? config.invite : undefined,
      })
      .then((answer) => {
        if (answer && Number.isFinite(answer.rank)) startRank = answer.rank;
        if (answer && (answer.status === "WAITING" || answer.status === "PREQUEUE")) {
          keepReceipt(answer);
        }
        render(answer);
        follow(Math.max(MIN_POLL_MS, Number(answer && answer.pollAfterMs) || fallbackPollMs));
      })
      .catch((err) => {
        if (err && err.code === "queue_closed") {
          closed(err.message);
          return;
        }
        if (err && (err.code === "invite_required" || err.code === "invite_invalid")) {
          setStatus("INVITE_REQUIRED");
          setText(heading, text("heading_invite"));
          setText(message, text(err.code));
          setText(note, text("invite_note"));
          return;
        }
        if (err && err.code === "proof_unsupported") {
          setStatus("CHALLENGE_FAILED");
          setText(message, text("checking_failed"));
          return;
        }
        if (err && err.code === "queue_not_open") {
          // Come back when registration opens (the proof of work is not
          // spent on this answer, but it expires): a reload then, spread
          // over a few seconds so that the whole queue does not come at
          // once, and at least every ten minutes.
          setStatus("NOT_OPEN");
          setText(heading, text("heading_not_open"));
          setText(message, err.message);
          setText(note, text("note"));
          const opensAt = Date.parse(err.body && err.body.opensAt);
          const until = Number.isFinite(opensAt) ? opensAt - Date.now() : fallbackPollMs;
          const delay = Math.min(600000, Math.max(fallbackPollMs, until)) + Math.random() * 3000;
          setTimeout(() => location.reload(), delay);
          return;
        }
        // A login needed, an outage: the server says which.
        const status = err && err.status;
        reload({ soon: status >= 400 && status < 500 });
      });
    return;
  }

  if (["WAITING", "PAUSED", "PREQUEUE"].includes(config.status)) offerReceipt();
  // The progress bar's spoken value, which the template cannot know.
  if (config.status === "PREQUEUE") showProgress(0);
  else if (Number.isFinite(config.rank)) setProgress(config.rank);
  follow(fallbackPollMs);

  // A page restored from the back/forward cache may hold a stale state.
  window.addEventListener("pageshow", (event) => {
    if (event.persisted && !reloading) {
      reloading = true;
      location.reload();
    }
  });
})();
