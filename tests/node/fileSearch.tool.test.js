/**
 * The file_search tool against a local stand-in for the RAG API: request plan, attribution,
 * ranking, V2 routing, refusal and the artifact LibreChat renders citations from.
 */
'use strict';

const { test, before, after, beforeEach } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { MODULE_PATH } = require('./support/hook');
const { state, resetState, logLines } = require('./support/state');
const { startFakeRagApi, v1Row } = require('./support/server');

const { createFileSearchTool, fileSearchJsonSchema } = require(MODULE_PATH);

const SECRET = 'node-suite-secret';
const AGENT = 'agent_kb';
const NOT_FOUND = { status: 404, json: { detail: 'No documents found for the given query' } };

/** @type {import('./support/server').FakeRagApi} */
let api;

before(async () => {
  api = await startFakeRagApi();
  process.env.RAG_API_URL = api.url;
  process.env.JWT_SECRET = SECRET;
});

after(async () => {
  await api.close();
});

beforeEach(() => {
  resetState();
  api.reset();
  delete process.env.RAG_V2_AGENT_IDS;
  delete process.env.RAG_API_TIMEOUT_MS;
});

/**
 * @param {string} prefix
 * @param {number} count
 * @param {boolean | undefined} fromAgent
 * @returns {Array<{file_id: string, filename: string, fromAgent?: boolean}>}
 */
const makeFiles = (prefix, count, fromAgent) =>
  Array.from({ length: count }, (_, i) => ({
    file_id: `${prefix}-${i}`,
    filename: `${prefix}-file-${i}.pdf`,
    ...(fromAgent === undefined ? {} : { fromAgent }),
  }));

/**
 * Runs one search and returns the tool's `[text, artifact]`.
 * @param {Object} options
 * @param {string} [query]
 * @returns {Promise<[string, any]>}
 */
const search = async (options, query = 'what is the refund policy?') => {
  const fileSearch = await createFileSearchTool({ userId: 'user-1', ...options });
  return fileSearch.func({ query });
};

/**
 * Requests the fake API received on a path.
 * @param {string} path
 */
const requestsTo = (path) => api.requests.filter((request) => request.path === path);

/**
 * The V1 request of a group, told apart by whether it carries entity_id.
 * @param {boolean} withEntity
 */
const v1Request = (withEntity) =>
  requestsTo('/query_multiple').find((request) => ('entity_id' in request.body) === withEntity);

test('knowledge-base and conversation files go out as two concurrent /query_multiple requests', async () => {
  const kb = makeFiles('kb', 3, true);
  const convo = makeFiles('conv', 2, false);
  api.setHandler(() => ({ ...NOT_FOUND, delayMs: 150 }));

  const [text, artifact] = await search({ files: [...kb, ...convo], entity_id: AGENT }, 'refund window');

  assert.equal(api.requests.length, 2);
  assert.equal(api.maxInFlight(), 2, 'the two groups must run concurrently');
  assert.deepEqual(v1Request(true).body, {
    query: 'refund window',
    file_ids: ['kb-0', 'kb-1', 'kb-2'],
    k: 10,
    entity_id: AGENT,
  });
  assert.deepEqual(v1Request(false).body, { query: 'refund window', file_ids: ['conv-0', 'conv-1'], k: 10 });
  for (const request of api.requests) {
    assert.equal(request.method, 'POST');
    assert.equal(request.headers['content-type'], 'application/json');
  }
  // Both 404: "no results", not an outage.
  assert.match(text, /^No content found in the files/);
  assert.equal(artifact, undefined);
});

test('the user token is a valid HS256 {id, iat, exp} with a five-minute life, sent as Bearer', async () => {
  api.setHandler(() => NOT_FOUND);
  await search({ files: makeFiles('conv', 1, false) });
  const auth = api.requests[0].headers.authorization;
  assert.match(auth, /^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);
  const [header, payload, signature] = auth.slice('Bearer '.length).split('.');
  const expected = crypto.createHmac('sha256', SECRET).update(`${header}.${payload}`).digest('base64url');
  assert.equal(signature, expected);
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  assert.equal(claims.id, 'user-1');
  assert.equal(claims.exp - claims.iat, 300);
});

test('hundreds of files still make at most two requests, each with its whole group', async () => {
  const kb = makeFiles('kb', 600, true);
  const convo = makeFiles('conv', 350, false);
  api.setHandler(() => NOT_FOUND);
  await search({ files: [...kb, ...convo], entity_id: AGENT });
  assert.equal(api.requests.length, 2);
  assert.equal(v1Request(true).body.file_ids.length, 600);
  assert.equal(v1Request(false).body.file_ids.length, 350);
});

test('1,001 distinct files never reach the network; 1,000 do', async () => {
  api.setHandler(() => NOT_FOUND);
  const [text, artifact] = await search({ files: makeFiles('kb', 1001, true), entity_id: AGENT });
  assert.equal(api.requests.length, 0);
  assert.match(text, /could not start/);
  assert.match(text, /1001 files/);
  assert.equal(artifact, undefined);

  // Duplicates do not count against the limit: the search de-duplicates first.
  const thousand = makeFiles('kb', 1000, true);
  await search({ files: [...thousand, thousand[0], thousand[1]], entity_id: AGENT });
  assert.equal(api.requests.length, 1);
  assert.equal(api.requests[0].body.file_ids.length, 1000);
});

test('duplicate files are searched once', async () => {
  const [a, b] = makeFiles('conv', 2, false);
  api.setHandler(() => NOT_FOUND);
  await search({ files: [a, b, a, { ...b }] });
  assert.deepEqual(api.requests[0].body.file_ids, ['conv-0', 'conv-1']);
});

test('a result for a file id that was not asked for is dropped and counted in the log', async () => {
  api.setHandler(() => ({
    json: [
      v1Row({ fileId: 'someone-elses-file', content: 'FOREIGN SECRET', distance: 0.01 }),
      v1Row({ fileId: 'conv-0', content: 'our refund text', distance: 0.2 }),
      v1Row({ fileId: 'also-foreign', content: 'OTHER SECRET', distance: 0.05 }),
    ],
  }));
  const [text, artifact] = await search({ files: makeFiles('conv', 1, false) });

  assert.ok(!text.includes('SECRET'));
  const sources = artifact.file_search.sources;
  assert.deepEqual(
    sources.map((source) => source.fileId),
    ['conv-0'],
  );
  assert.ok(logLines('warn').some((line) => /dropped 2 result/.test(line)));
});

test('a knowledge-base result is not accepted from the conversation group, and vice versa', async () => {
  api.setHandler((request) => ({
    // Each group's reply names a file that belongs to the other group.
    json:
      'entity_id' in request.body
        ? [v1Row({ fileId: 'conv-0', content: 'crossed into kb', distance: 0.1 })]
        : [v1Row({ fileId: 'kb-0', content: 'crossed into conversation', distance: 0.1 })],
  }));
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.equal(artifact, undefined);
  assert.match(text, /^No content found/);
});

test('a failed group is skipped and logged; the other group keeps its own attribution', async () => {
  api.setHandler((request) =>
    'entity_id' in request.body
      ? { status: 500, json: { detail: 'Internal error' } }
      : {
          // Out of file order on purpose: attribution must come from each result's own file id.
          json: [
            v1Row({ fileId: 'conv-2', content: 'text of conv 2', distance: 0.1 }),
            v1Row({ fileId: 'conv-0', content: 'text of conv 0', distance: 0.3 }),
          ],
        },
  );
  const files = [...makeFiles('kb', 2, true), ...makeFiles('conv', 3, false)];
  const [text, artifact] = await search({ files, entity_id: AGENT });

  const sources = artifact.file_search.sources;
  assert.deepEqual(
    sources.map((source) => [source.fileId, source.fileName, source.content]),
    [
      ['conv-2', 'conv-file-2.pdf', 'text of conv 2'],
      ['conv-0', 'conv-file-0.pdf', 'text of conv 0'],
    ],
  );
  assert.ok(text.startsWith('File: conv-file-2.pdf\n'));
  assert.equal(state.axiosErrors.length, 1);
  assert.equal(state.axiosErrors[0].status, 500);
  assert.match(state.axiosErrors[0].message, /knowledge base/);
});

test('when every group fails the model is told the search service is unavailable', async () => {
  api.setHandler(() => ({ status: 502, json: { detail: 'bad gateway' } }));
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.match(text, /could not be reached/);
  assert.equal(artifact, undefined);
  assert.equal(state.axiosErrors.length, 2);
});

test('a request that exceeds the timeout counts as a failed group', async () => {
  process.env.RAG_API_TIMEOUT_MS = '200';
  api.setHandler((request) =>
    'entity_id' in request.body
      ? { ...NOT_FOUND, delayMs: 1500 }
      : { json: [v1Row({ fileId: 'conv-0', content: 'fast answer', distance: 0.4 })] },
  );
  const started = Date.now();
  const [, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.ok(Date.now() - started < 1400, 'the tool waited for the slow request');
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.content),
    ['fast answer'],
  );
  assert.equal(state.axiosErrors.length, 1);
  assert.equal(state.axiosErrors[0].code, 'ECONNABORTED');
});

test('a malformed reply skips its group instead of throwing', async () => {
  api.setHandler((request) =>
    'entity_id' in request.body
      ? { json: { unexpected: true } }
      : { json: [v1Row({ fileId: 'conv-0', content: 'fine', distance: 0.2 }), ['garbage'], null] },
  );
  const [, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.content),
    ['fine'],
  );
  assert.ok(logLines('error').some((line) => /malformed/.test(line)));
});

test('results are ranked globally by distance, de-duplicated and cut to ten', async () => {
  // Distances interleave across the two groups; the same chunk comes back twice in one group.
  api.setHandler((request) => {
    const rows = [];
    const kbSide = 'entity_id' in request.body;
    for (let i = 0; i < 8; i += 1) {
      const distance = kbSide ? 0.1 + i * 0.1 : 0.15 + i * 0.1;
      const fileId = kbSide ? `kb-${i % 2}` : 'conv-0';
      rows.push(v1Row({ fileId, content: `${fileId} chunk at ${distance.toFixed(2)}`, distance }));
    }
    if (kbSide) {
      rows.push(v1Row({ fileId: 'kb-0', content: 'kb-0 chunk at 0.10', distance: 0.1 }));
    }
    return { json: rows.reverse() };
  });
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 2, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  const sources = artifact.file_search.sources;
  assert.equal(sources.length, 10);
  const relevances = sources.map((source) => source.relevance);
  assert.deepEqual(relevances, [...relevances].sort((a, b) => b - a));
  // Expected order: 0.10 (kb), 0.15 (conv), 0.20 (kb), 0.25 (conv), ... five of each.
  assert.deepEqual(
    sources.map((source) => source.fileId.split('-')[0]),
    ['kb', 'conv', 'kb', 'conv', 'kb', 'conv', 'kb', 'conv', 'kb', 'conv'],
  );
  assert.equal(new Set(sources.map((source) => source.content)).size, 10);
  assert.equal(text.split('\n---\n').length, 10);
  for (const source of sources) {
    assert.ok(source.content.startsWith(source.fileId), 'content attributed to another file');
  }
});

test('text and artifact keep upstream shapes, anchors included', async () => {
  api.setHandler(() => ({
    json: [
      v1Row({ fileId: 'conv-1', content: 'Refunds within 30 days.', distance: 0.25, page: 2, source: '/tmp/x/ignored.pdf' }),
      v1Row({ fileId: 'conv-0', content: 'Shipping is free.', distance: 0.5 }),
    ],
  }));
  const files = makeFiles('conv', 2, false);
  const [text, artifact] = await search({ files, fileCitations: true });

  const first = 'File: conv-file-1.pdf\nAnchor: \\ue202turn0file0 (conv-file-1.pdf)\nRelevance: 0.7500\nContent: Refunds within 30 days.\n';
  const second = 'File: conv-file-0.pdf\nAnchor: \\ue202turn0file1 (conv-file-0.pdf)\nRelevance: 0.5000\nContent: Shipping is free.\n';
  assert.equal(text, `${first}\n---\n${second}`);
  assert.deepEqual(artifact, {
    file_search: {
      sources: [
        {
          type: 'file',
          fileId: 'conv-1',
          content: 'Refunds within 30 days.',
          fileName: 'conv-file-1.pdf',
          relevance: 0.75,
          pages: [2],
          pageRelevance: { 2: 0.75 },
        },
        {
          type: 'file',
          fileId: 'conv-0',
          content: 'Shipping is free.',
          fileName: 'conv-file-0.pdf',
          relevance: 0.5,
          pages: [],
          pageRelevance: {},
        },
      ],
      fileCitations: true,
    },
  });

  const [plain, plainArtifact] = await search({ files, fileCitations: false });
  assert.ok(!plain.includes('Anchor:'));
  assert.equal(plainArtifact.file_search.fileCitations, false);
});

test('a file name from the service is used only when LibreChat gave none', async () => {
  api.setHandler(() => ({
    json: [v1Row({ fileId: 'conv-0', content: 'x', distance: 0.1, source: '/uploads/user/Stored Name.txt' })],
  }));
  const [text, artifact] = await search({ files: [{ file_id: 'conv-0', fromAgent: false }] });
  assert.ok(text.startsWith('File: Stored Name.txt\n'));
  assert.equal(artifact.file_search.sources[0].fileName, 'Stored Name.txt');
});

test('tool definition: name, response format, schema, citation instructions', async () => {
  const withCitations = await createFileSearchTool({ userId: 'u', files: [], fileCitations: true });
  const without = await createFileSearchTool({ userId: 'u', files: [] });
  assert.equal(withCitations.name, 'file_search');
  assert.equal(withCitations.responseFormat, 'content_and_artifact');
  assert.equal(withCitations.schema, fileSearchJsonSchema);
  assert.deepEqual(fileSearchJsonSchema.required, ['query']);
  assert.equal(fileSearchJsonSchema.properties.query.type, 'string');
  assert.match(withCitations.description, /verbatim/);
  assert.ok(withCitations.description.includes('\\ue202turn0file0'));
  assert.ok(!without.description.includes('\\ue202'));
});

test('no files and no token give upstream messages without any request', async () => {
  const [noFiles, noArtifact] = await search({ files: [] });
  assert.match(noFiles, /^No files to search/);
  assert.equal(noArtifact, undefined);

  state.tokenOverride = null;
  const [noToken, tokenArtifact] = await search({ files: makeFiles('conv', 1, false) });
  assert.match(noToken, /error authenticating/);
  assert.equal(tokenArtifact, undefined);
  assert.equal(api.requests.length, 0);
});

test('files without the fromAgent flag are searched with entity_id, as upstream did', async () => {
  api.setHandler(() => NOT_FOUND);
  await search({ files: makeFiles('legacy', 2, undefined), entity_id: AGENT });
  assert.equal(api.requests.length, 1);
  assert.equal(api.requests[0].body.entity_id, AGENT);

  api.reset();
  // Without an Agent there is no namespace to widen to: everything goes out without entity_id.
  await search({ files: makeFiles('kb', 2, true) });
  assert.equal(api.requests.length, 1);
  assert.ok(!('entity_id' in api.requests[0].body));
});

/**
 * A `/query_v2` reply (CONTRACT.md section 6).
 * @param {Array<Object>} results
 * @param {string | null} [refusal]
 */
const v2Reply = (results, refusal = null) => ({
  json: { route: 'v2', index_version: 'v2-test', results, degraded: false, safe_refusal: refusal },
});

/**
 * One V2 result with the fields the overlay reads.
 * @param {Object} fields
 */
const v2Result = ({ rank, fileId, content, score, page = null, section = [] }) => ({
  citation_id: `V2-${rank}`,
  file_id: fileId,
  filename: `${fileId}.pdf`,
  title: 'Handbook',
  content,
  page,
  section,
  chunk_kind: 'prose',
  score,
  channels: ['dense'],
  metadata: {},
});

test('an allow-listed Agent sends its knowledge base to /query_v2; evidence ranks first', async () => {
  process.env.RAG_V2_AGENT_IDS = ` other_agent , ${AGENT} `;
  api.setHandler((request) =>
    request.path === '/query_v2'
      ? v2Reply([
          v2Result({ rank: 1, fileId: 'kb-1', content: 'Evidence one.', score: 0.62, page: 3, section: ['Policies', 'Refunds'] }),
          v2Result({ rank: 2, fileId: 'kb-0', content: 'Evidence two.', score: 0.55 }),
        ])
      : { json: [v1Row({ fileId: 'conv-0', content: 'Closer conversation chunk.', distance: 0.05 })] },
  );
  const [text, artifact] = await search(
    { files: [...makeFiles('kb', 2, true), ...makeFiles('conv', 1, false)], entity_id: AGENT, fileCitations: true },
    'refunds',
  );

  assert.equal(api.requests.length, 2);
  assert.deepEqual(requestsTo('/query_v2')[0].body, {
    query: 'refunds',
    file_ids: ['kb-0', 'kb-1'],
    entity_id: AGENT,
    k: 8,
    debug: false,
  });
  assert.deepEqual(requestsTo('/query_multiple')[0].body, { query: 'refunds', file_ids: ['conv-0'], k: 10 });

  const blocks = text.split('\n---\n');
  assert.equal(
    blocks[0],
    'File: kb-file-1.pdf\nAnchor: \\ue202turn0file0 (kb-file-1.pdf)\nCitation: V2-1\nPage: 3\nSection: Policies > Refunds\nRelevance: 0.6200\nContent: Evidence one.\n',
  );
  assert.match(blocks[1], /^File: kb-file-0\.pdf\n.*\nCitation: V2-2\nRelevance: 0\.5500\n/);
  assert.match(blocks[2], /^File: conv-file-0\.pdf\n/);
  assert.ok(!blocks[2].includes('Citation:'));

  const sources = artifact.file_search.sources;
  assert.deepEqual(
    sources.map((source) => source.fileId),
    ['kb-1', 'kb-0', 'conv-0'],
  );
  assert.deepEqual(sources[0], {
    type: 'file',
    fileId: 'kb-1',
    content: 'Evidence one.',
    fileName: 'kb-file-1.pdf',
    relevance: 0.62,
    pages: [3],
    pageRelevance: { 3: 0.62 },
  });
});

test('an Agent not on the V2 list keeps /query_multiple', async () => {
  process.env.RAG_V2_AGENT_IDS = 'agent_other';
  api.setHandler(() => NOT_FOUND);
  await search({ files: makeFiles('kb', 1, true), entity_id: AGENT });
  assert.deepEqual(
    api.requests.map((request) => request.path),
    ['/query_multiple'],
  );
});

test("an empty V2 answer hands the model the service's safe_refusal sentence", async () => {
  process.env.RAG_V2_AGENT_IDS = AGENT;
  const refusal = 'The knowledge base holds no evidence for this question; answer that you cannot confirm it.';
  api.setHandler((request) => (request.path === '/query_v2' ? v2Reply([], refusal) : NOT_FOUND));
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 2, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.equal(text, refusal);
  assert.equal(artifact, undefined);
});

test('V2 results for files outside the knowledge-base group are dropped', async () => {
  process.env.RAG_V2_AGENT_IDS = AGENT;
  api.setHandler(() =>
    v2Reply([
      v2Result({ rank: 1, fileId: 'not-ours', content: 'FOREIGN', score: 0.9 }),
      v2Result({ rank: 2, fileId: 'kb-0', content: 'ours', score: 0.4 }),
    ]),
  );
  const [text, artifact] = await search({ files: makeFiles('kb', 1, true), entity_id: AGENT });
  assert.ok(!text.includes('FOREIGN'));
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.fileId),
    ['kb-0'],
  );
  assert.ok(logLines('warn').some((line) => /dropped 1 result/.test(line)));
});

test('a failing V2 route does not fall back to a third request', async () => {
  process.env.RAG_V2_AGENT_IDS = AGENT;
  api.setHandler((request) =>
    request.path === '/query_v2'
      ? { status: 503, json: { detail: 'V2 disabled' } }
      : { json: [v1Row({ fileId: 'conv-0', content: 'conversation only', distance: 0.3 })] },
  );
  const [, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.equal(api.requests.length, 2);
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.fileId),
    ['conv-0'],
  );
  assert.equal(state.axiosErrors[0].status, 503);
});
