// The full waitgate flow for k6 users (k6 is what many ticketing teams
// load-test with): register -> poll rank until ACTIVE -> token -> protected call ->
// dropout. The same flow as examples/load_driver.rs.
//
//   k6 run -e TARGET=http://127.0.0.1:8080 -e USERS=2000 -e RATE=200 examples/k6/flow.js
//
// Reports per-endpoint latency (http_req_duration{endpoint:...}), the wait
// and its estimate, and the estimate's error.
import http from 'k6/http';
import { check, sleep } from 'k6';
import { Trend, Counter } from 'k6/metrics';

const TARGET = __ENV.TARGET || 'http://127.0.0.1:8080';
const PATH = __ENV.PROTECTED_PATH || '/api/v1/follow-up/access';
const POLL_S = Number(__ENV.POLL_MS || 500) / 1000;
const MAX_WAIT_S = Number(__ENV.MAX_WAIT_S || 600);

const waitSeconds = new Trend('waitgate_wait_seconds');
const estimateError = new Trend('waitgate_estimate_error_seconds');
const flowErrors = new Counter('waitgate_flow_errors');

export const options = {
  scenarios: {
    arrivals: {
      executor: 'shared-iterations',
      vus: Number(__ENV.VUS || 500),
      iterations: Number(__ENV.USERS || 1000),
      maxDuration: __ENV.MAX_DURATION || '30m',
    },
  },
};

const json = { headers: { 'Content-Type': 'application/json' } };

export default function () {
  const user = `k6-${__VU}-${__ITER}`;
  const registered = Date.now();
  let r = http.post(`${TARGET}/api/v1/queue/register`, JSON.stringify({ userId: user }),
    Object.assign({ tags: { endpoint: 'register' } }, json));
  if (!check(r, { 'register 200': (x) => x.status === 200 })) { flowErrors.add(1); return; }
  const estimate = r.json('estimatedWaitSeconds');
  const credential = r.json('queueCredential');

  for (;;) {
    if ((Date.now() - registered) / 1000 > MAX_WAIT_S) { flowErrors.add(1); return; }
    r = http.get(`${TARGET}/api/v1/queue/rank?userId=${user}`, { tags: { endpoint: 'rank' } });
    if (!check(r, { 'rank 200': (x) => x.status === 200 })) { flowErrors.add(1); return; }
    if (r.json('status') === 'ACTIVE') break;
    sleep(POLL_S);
  }
  const waited = (Date.now() - registered) / 1000;
  waitSeconds.add(waited);
  estimateError.add(estimate - waited);

  r = http.post(`${TARGET}/api/v1/queue/active/token`,
    JSON.stringify({ userId: user, queueCredential: credential }),
    Object.assign({ tags: { endpoint: 'token' } }, json));
  if (!check(r, { 'token 200': (x) => x.status === 200 })) { flowErrors.add(1); return; }
  const token = r.json('accessToken');

  r = http.get(`${TARGET}${PATH}`, { headers: { Authorization: `Bearer ${token}` }, tags: { endpoint: 'protected' } });
  check(r, { 'protected 200': (x) => x.status === 200 }) || flowErrors.add(1);

  r = http.del(`${TARGET}/api/v1/queue/dropout?userId=${user}`, null,
    { headers: { 'X-Queue-Credential': credential }, tags: { endpoint: 'dropout' } });
  check(r, { 'dropout 204': (x) => x.status === 204 }) || flowErrors.add(1);
}
