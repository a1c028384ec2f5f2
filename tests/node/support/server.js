/**
 * A local stand-in for the RAG API: records every request and answers through a per-test handler.
 */
'use strict';

const http = require('node:http');

/**
 * @typedef {Object} RecordedRequest
 * @property {string} method
 * @property {string} path
 * @property {Record<string, string | string[] | undefined>} headers
 * @property {any} body - parsed JSON, or the raw text when it is not JSON
 */

/**
 * @typedef {Object} Reply
 * @property {number} [status] - 200 by default
 * @property {unknown} [json]
 * @property {number} [delayMs] - wait before answering, to observe concurrency and timeouts
 */

/**
 * @typedef {Object} FakeRagApi
 * @property {string} url - base URL without a trailing slash
 * @property {RecordedRequest[]} requests
 * @property {() => number} maxInFlight - most requests being handled at the same moment
 * @property {(handler: (req: RecordedRequest) => Reply | Promise<Reply>) => void} setHandler
 * @property {() => void} reset
 * @property {() => Promise<void>} close
 */

/**
 * Starts the server on a free loopback port.
 * @returns {Promise<FakeRagApi>}
 */
async function startFakeRagApi() {
  /** @type {RecordedRequest[]} */
  const requests = [];
  let inFlight = 0;
  let peak = 0;
  /** @type {(req: RecordedRequest) => Reply | Promise<Reply>} */
  let handler = () => ({ status: 404, json: { detail: 'No documents found for the given query' } });

  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', async () => {
      inFlight += 1;
      peak = Math.max(peak, inFlight);
      const text = Buffer.concat(chunks).toString('utf8');
      let body = text;
      try {
        body = JSON.parse(text);
      } catch {
        // keep the raw text: a test may assert on a non-JSON body
      }
      const recorded = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body };
      requests.push(recorded);
      try {
        const reply = await handler(recorded);
        if (reply.delayMs) {
          await new Promise((resolve) => setTimeout(resolve, reply.delayMs));
        }
        if (!res.destroyed) {
          res.writeHead(reply.status ?? 200, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify(reply.json ?? null));
        }
      } catch (error) {
        res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ detail: String(error) }));
      } finally {
        inFlight -= 1;
      }
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    maxInFlight: () => peak,
    setHandler: (next) => {
      handler = next;
    },
    reset: () => {
      requests.length = 0;
      peak = 0;
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}

/**
 * One `/query_multiple` row as the service serialises it.
 * @param {{fileId: string, content: string, distance: number, source?: string, page?: number}} row
 * @returns {[Object, number]}
 */
function v1Row({ fileId, content, distance, source, page }) {
  const metadata = { file_id: fileId, user_id: 'owner', digest: 'd', source: source ?? `${fileId}.txt` };
  if (page !== undefined) {
    metadata.page = page;
  }
  return [{ id: null, page_content: content, metadata, type: 'Document' }, distance];
}

module.exports = { startFakeRagApi, v1Row };
