// Ferroute's soak for operators who run k6: sustained load on the health endpoint with the same
// thresholds as the goose soak (`cargo run --release -p load --bin soak`), which reads the same
// variables and, like k6, exits with 99 when a threshold is breached.
//
//   BASE_URL=http://127.0.0.1:8787 SOAK_DURATION=30m SOAK_VUS=10 k6 run load/k6-soak.js
//
// Point it at a gateway you run yourself, on a machine you own.
import http from 'k6/http';
import { check } from 'k6';

const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8787').replace(/\/+$/, '');

export const options = {
  vus: Number(__ENV.SOAK_VUS || 10),
  duration: __ENV.SOAK_DURATION || '30s',
  thresholds: {
    http_req_failed: ['rate<0.01'],
    http_req_duration: ['p(95)<500'],
  },
};

export default function () {
  const res = http.get(`${BASE_URL}/api/monitoring/health`);
  check(res, {
    'status is 200': (r) => r.status === 200,
    'gateway is healthy': (r) => {
      try {
        return r.json('status') === 'healthy';
      } catch (_) {
        return false;
      }
    },
  });
}
