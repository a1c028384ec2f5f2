/**
 * The file_search tool against a local stand-in for the RAG API: request plan and batching,
 * attribution, ranking, honest failures, V2 routing and refusal, pages, and the artifact LibreChat
 * renders citations from.
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
  delete process.env.RAG_FILE_SEARCH_CONCURRENCY;
  delete process.env.RAG_FILE_SEARCH_MAX_BATCHES;
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

/**
 * Rows for the files of a request, one per file id, at the distances the callback gives.
 * @param {string[]} fileIds
 * @param {(fileId: string, index: number) => number | null} distanceOf - null: no row for that file
 */
const rowsFor = (fileIds, distanceOf) =>
  fileIds.flatMap((fileId, index) => {
    const distance = distanceOf(fileId, index);
    return distance === null ? [] : [v1Row({ fileId, content: `text of ${fileId}`, distance })];
  });

test('2,500 knowledge-base files: three requests of at most 1,000 ids, merged into one global top-k', async () => {
  process.env.RAG_FILE_SEARCH_CONCURRENCY = '2';
  const kb = makeFiles('kb', 2500, true);
  // Each request answers its own ten best. The global best ten interleave across the batches:
  // kb-7 (0.01), kb-1500 (0.02), kb-2400 (0.03), kb-8 (0.04), ... so no single batch holds them.
  const best = ['kb-7', 'kb-1500', 'kb-2400', 'kb-8', 'kb-1501', 'kb-2401', 'kb-9', 'kb-1502', 'kb-2402', 'kb-10'];
  api.setHandler((request) => ({
    delayMs: 100,
    json: rowsFor(request.body.file_ids, (fileId) => {
      const rank = best.indexOf(fileId);
      if (rank >= 0) {
        return 0.01 * (rank + 1);
      }
      const n = Number(fileId.split('-')[1]);
      return n % 97 === 0 ? 0.5 + n / 100000 : null;
    }).slice(0, 10),
  }));

  const [text, artifact] = await search({ files: kb, entity_id: AGENT, fileCitations: true });

  const requests = requestsTo('/query_multiple');
  assert.equal(requests.length, 3);
  assert.deepEqual(
    requests.map((request) => request.body.file_ids.length),
    [1000, 1000, 500],
  );
  assert.deepEqual(
    requests.flatMap((request) => request.body.file_ids),
    kb.map((file) => file.file_id),
    'every knowledge-base file is asked for exactly once, in order',
  );
  for (const request of requests) {
    assert.equal(request.body.entity_id, AGENT);
    assert.equal(request.body.k, 10);
  }
  assert.equal(api.maxInFlight(), 2, 'RAG_FILE_SEARCH_CONCURRENCY bounds the requests in flight');

  const sources = artifact.file_search.sources;
  assert.deepEqual(
    sources.map((source) => source.fileId),
    best,
  );
  const blocks = text.split('\n---\n');
  assert.equal(blocks.length, 10);
  blocks.forEach((block, index) => {
    // Anchor i names the file of source i: LibreChat resolves turn0file<i> to sources[i].
    assert.ok(block.startsWith(`File: ${sources[index].fileName}\nAnchor: \\ue202turn0file${index} (${sources[index].fileName})\n`));
  });
});

test('by default four requests run at once; the fifth waits', async () => {
  api.setHandler(() => ({ ...NOT_FOUND, delayMs: 120 }));
  await search({ files: [...makeFiles('kb', 4500, true), ...makeFiles('conv', 3, false)], entity_id: AGENT });
  assert.equal(api.requests.length, 6);
  assert.equal(api.maxInFlight(), 4);
});

test('990 knowledge-base files and 11 attachments are two requests within the cap, both answered', async () => {
  api.setHandler((request) => ({
    json: rowsFor(request.body.file_ids, (fileId, index) => (index === 0 ? 0.2 : null)),
  }));
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 990, true), ...makeFiles('conv', 11, false)],
    entity_id: AGENT,
  });
  assert.equal(v1Request(true).body.file_ids.length, 990);
  assert.equal(v1Request(false).body.file_ids.length, 11);
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.fileId),
    ['kb-0', 'conv-0'],
  );
  assert.ok(!text.includes('could not'));
});

test('more files than RAG_FILE_SEARCH_MAX_BATCHES requests hold: the knowledge base is refused, logged, attachments still searched', async () => {
  process.env.RAG_FILE_SEARCH_MAX_BATCHES = '2';
  api.setHandler(() => ({ json: [v1Row({ fileId: 'conv-0', content: 'attachment text', distance: 0.3 })] }));
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 2500, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.equal(api.requests.length, 1, 'no knowledge-base request is sent');
  assert.ok(!('entity_id' in api.requests[0].body));
  assert.match(text, /^The knowledge base could not be searched: too many documents \(2,500; this deployment searches at most 2,000 at once\)/);
  assert.match(text, /The results below do not come from the knowledge base\./);
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.fileId),
    ['conv-0'],
  );
  const [logged] = logLines('error');
  assert.match(logged, /knowledge base was not searched: 2500 files/);
  assert.match(logged, /RAG_FILE_SEARCH_MAX_BATCHES=2/);
  assert.match(logged, new RegExp(AGENT));
});

test('the default bound is ten requests: 10,000 files are searched, 10,001 are not', async () => {
  api.setHandler(() => NOT_FOUND);
  const [allowed] = await search({ files: makeFiles('kb', 10000, true), entity_id: AGENT });
  assert.equal(api.requests.length, 10);
  assert.match(allowed, /^No content found/);

  api.reset();
  const [refused, artifact] = await search({ files: makeFiles('kb', 10001, true), entity_id: AGENT });
  assert.equal(api.requests.length, 0);
  assert.match(refused, /^The knowledge base could not be searched: too many documents \(10,001; this deployment searches at most 10,000 at once\)/);
  assert.equal(artifact, undefined);
});

test('a failed knowledge base is said to the model even when attachment results exist', async () => {
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

  const [notes, ...blocks] = text.split('\n---\n');
  assert.equal(
    notes,
    'The knowledge base could not be searched: temporarily unavailable. Tell the user the search is unavailable right now and suggest trying again shortly. Do not answer as if the knowledge base had been searched.\nThe results below do not come from the knowledge base.',
  );
  assert.equal(blocks.length, 2);
  assert.ok(blocks[0].startsWith('File: conv-file-2.pdf\n'));
  assert.deepEqual(
    artifact.file_search.sources.map((source) => [source.fileId, source.fileName, source.content]),
    [
      ['conv-2', 'conv-file-2.pdf', 'text of conv 2'],
      ['conv-0', 'conv-file-0.pdf', 'text of conv 0'],
    ],
  );
  assert.equal(state.axiosErrors.length, 1);
  assert.equal(state.axiosErrors[0].status, 500);
  assert.match(state.axiosErrors[0].message, /\/query_multiple for the knowledge base \(request 1 of 1, 2 files\) failed \(500\): temporarily unavailable/);
});

test('when every request fails, each half is named with its reason and there is no artifact', async () => {
  api.setHandler(() => ({ status: 502, json: { detail: 'bad gateway' } }));
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.deepEqual(text.split('\n').map((line) => line.split(':')[0]), [
    'The knowledge base could not be searched',
    'The attached files could not be searched',
  ]);
  assert.ok(text.split('\n').every((line) => line.includes(': temporarily unavailable.')));
  assert.equal(artifact, undefined);
  assert.equal(state.axiosErrors.length, 2);
});

for (const status of [401, 403]) {
  test(`${status} is a configuration problem for the model and a JWT_SECRET hint in the log`, async () => {
    api.setHandler((request) =>
      'entity_id' in request.body
        ? { status, json: { detail: 'Invalid token: Signature verification failed' } }
        : { json: [v1Row({ fileId: 'conv-0', content: 'attachment text', distance: 0.3 })] },
    );
    const [text, artifact] = await search({
      files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
      entity_id: AGENT,
    });
    assert.match(
      text,
      /^The knowledge base could not be searched: configuration problem\. Tell the user the document search is misconfigured and an administrator must fix it\./,
    );
    assert.ok(!/try again|could not be reached/.test(text), 'a configuration problem is not temporary');
    assert.equal(artifact.file_search.sources.length, 1);
    assert.equal(state.axiosErrors.length, 1);
    assert.equal(state.axiosErrors[0].status, status);
    assert.match(state.axiosErrors[0].message, /configuration problem/);
    assert.match(state.axiosErrors[0].message, /same JWT_SECRET/);
  });
}

for (const status of [400, 422]) {
  test(`${status} is a request problem`, async () => {
    api.setHandler(() => ({ status, json: { detail: 'entity_id does not match ENTITY_ID_PATTERN' } }));
    const [text, artifact] = await search({ files: makeFiles('kb', 1, true), entity_id: AGENT });
    assert.match(text, /^The knowledge base could not be searched: request problem\. Tell the user the search service rejected the request/);
    assert.equal(artifact, undefined);
    assert.equal(state.axiosErrors[0].status, status);
  });
}

for (const status of [408, 429, 503]) {
  test(`${status} is temporarily unavailable`, async () => {
    api.setHandler(() => ({ status, json: { detail: 'later' } }));
    const [text] = await search({ files: makeFiles('conv', 1, false) });
    assert.match(text, /^The attached files could not be searched: temporarily unavailable\. Tell the user the search is unavailable right now/);
  });
}

test('a reply over 16 MiB is an unexpected reply, not results', async () => {
  const big = 'x'.repeat(17 * 1024 * 1024);
  api.setHandler(() => ({ json: [v1Row({ fileId: 'conv-0', content: big, distance: 0.1 })] }));
  const [text, artifact] = await search({ files: makeFiles('conv', 1, false) });
  assert.match(text, /^The attached files could not be searched: unexpected reply from the search service\./);
  assert.equal(artifact, undefined);
  assert.equal(state.axiosErrors.length, 1);
});

test('a request that exceeds the timeout is temporarily unavailable; the other half still answers', async () => {
  process.env.RAG_API_TIMEOUT_MS = '200';
  api.setHandler((request) =>
    'entity_id' in request.body
      ? { ...NOT_FOUND, delayMs: 1500 }
      : { json: [v1Row({ fileId: 'conv-0', content: 'fast answer', distance: 0.4 })] },
  );
  const started = Date.now();
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.ok(Date.now() - started < 1400, 'the tool waited for the slow request');
  assert.match(text, /^The knowledge base could not be searched: temporarily unavailable\./);
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.content),
    ['fast answer'],
  );
  assert.equal(state.axiosErrors.length, 1);
  assert.equal(state.axiosErrors[0].code, 'ECONNABORTED');
});

test('a malformed reply is an unexpected reply for its half, never a throw', async () => {
  api.setHandler((request) =>
    'entity_id' in request.body
      ? { json: { unexpected: true } }
      : { json: [v1Row({ fileId: 'conv-0', content: 'fine', distance: 0.2 }), ['garbage'], null] },
  );
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.match(text, /^The knowledge base could not be searched: unexpected reply from the search service\./);
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.content),
    ['fine'],
  );
  assert.ok(logLines('error').some((line) => /malformed/.test(line)));
});

test('one failed batch out of three: the rest is answered and the gap is said', async () => {
  api.setHandler((request) =>
    request.body.file_ids[0] === 'kb-1000'
      ? { status: 503, json: { detail: 'busy' } }
      : { json: rowsFor(request.body.file_ids, (fileId, index) => (index < 2 ? 0.1 + index / 10 : null)) },
  );
  const [text, artifact] = await search({ files: makeFiles('kb', 2500, true), entity_id: AGENT });
  assert.match(
    text,
    /^Part of the knowledge base could not be searched \(1000 of 2500 documents\): temporarily unavailable\. Results from the knowledge base may be incomplete\.\n---\n/,
  );
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.fileId),
    ['kb-0', 'kb-2000', 'kb-1', 'kb-2001'],
  );
  assert.match(state.axiosErrors[0].message, /request 2 of 3, 1000 files/);
});

test('a 404 from /query_multiple is "no results": nothing logged, nothing said', async () => {
  api.setHandler(() => NOT_FOUND);
  const [text] = await search({ files: makeFiles('kb', 1, true), entity_id: AGENT });
  assert.equal(text, 'No content found in the files. The files may not have been processed correctly or you may need to refine your query.');
  assert.equal(state.axiosErrors.length, 0);
});

test('fromAgent decides entity_id, as upstream: knowledge-base files only, never without an Agent', async () => {
  api.setHandler(() => NOT_FOUND);
  // Upstream's own test cases, on the batched route.
  await search({
    entity_id: 'agent_123',
    files: [
      { file_id: 'kb-1', filename: 'kb.pdf', fromAgent: true },
      { file_id: 'user-1', filename: 'attachment.txt', fromAgent: false },
    ],
  });
  const bodyWith = (fileId) => api.requests.find((request) => request.body.file_ids.includes(fileId)).body;
  assert.equal(bodyWith('kb-1').entity_id, 'agent_123');
  assert.ok(!('entity_id' in bodyWith('user-1')));

  api.reset();
  // Without the flag: upstream's safe default, no entity_id.
  await search({ entity_id: 'agent_123', files: [{ file_id: 'legacy-1', filename: 'legacy.pdf' }] });
  assert.equal(api.requests.length, 1);
  assert.ok(!('entity_id' in api.requests[0].body));

  api.reset();
  await search({ files: [{ file_id: 'f1', filename: 'a.txt', fromAgent: true }] });
  assert.ok(!('entity_id' in api.requests[0].body));
});

test('a single-file request attributes rows without metadata.file_id to that file; a multi-file one drops them', async () => {
  const bare = (content, distance, page) => [{ page_content: content, metadata: { source: '/x/y.pdf', page } }, distance];
  api.setHandler(() => ({ json: [bare('only file', 0.2, 1)] }));
  const [, artifact] = await search({ files: [{ file_id: 'one', filename: 'one.pdf' }] });
  assert.deepEqual(
    artifact.file_search.sources.map((source) => [source.fileId, source.fileName, source.pages]),
    [['one', 'one.pdf', [1]]],
  );

  api.setHandler(() => ({ json: [bare('whose?', 0.2, 1)] }));
  const [text, none] = await search({ files: makeFiles('conv', 2, false) });
  assert.equal(none, undefined);
  assert.match(text, /^No content found/);
  assert.ok(logLines('warn').some((line) => /dropped 1 result/.test(line)));
});

test('results are ranked globally by distance, de-duplicated and cut to ten', async () => {
  // Distances interleave across the two halves; the same chunk comes back twice in one half.
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

test('text and artifact keep upstream shapes, anchors and file names included', async () => {
  api.setHandler(() => ({
    json: [
      v1Row({ fileId: 'conv-1', content: 'Refunds within 30 days.', distance: 0.25, page: 2, source: '/tmp/x/ignored.pdf' }),
      v1Row({ fileId: 'conv-0', content: 'Shipping is free.', distance: 0.5, page: 0 }),
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
          // Page 0 (the first page) gives no page, exactly as upstream's `page || null`.
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

test('knowledge-base file names appear in results, sanitised, so the model can name its source', async () => {
  api.setHandler(() => ({ json: [v1Row({ fileId: 'kb-0', content: 'x', distance: 0.1 })] }));
  const [text, artifact] = await search({
    files: [{ file_id: 'kb-0', filename: 'Handbook\u202E\n2024.pdf', fromAgent: true }],
    entity_id: AGENT,
    fileCitations: true,
  });
  assert.ok(text.startsWith('File: Handbook2024.pdf\nAnchor: \\ue202turn0file0 (Handbook2024.pdf)\n'));
  // The artifact keeps LibreChat's record of the name: LibreChat renders it, not the model.
  assert.equal(artifact.file_search.sources[0].fileName, 'Handbook\u202E\n2024.pdf');
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
  assert.match(withCitations.description, /name the file/);
  assert.ok(withCitations.description.includes('\\ue202turn0file0'));
  assert.ok(!without.description.includes('\\ue202'));
});

test('no files, no token and an empty query give a message without any request', async () => {
  const [noFiles, noArtifact] = await search({ files: [] });
  assert.equal(noFiles, 'No files to search. Instruct the user to add files for the search.');
  assert.equal(noArtifact, undefined);

  const [blank] = await search({ files: makeFiles('conv', 1, false) }, '   ');
  assert.match(blank, /non-empty query/);

  state.tokenOverride = null;
  const [noToken, tokenArtifact] = await search({ files: makeFiles('conv', 1, false) });
  assert.equal(noToken, 'There was an error authenticating the file search request.');
  assert.equal(tokenArtifact, undefined);
  assert.equal(api.requests.length, 0);
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

test('an allow-listed Agent sends its knowledge base to /query_v2; all results rank by relevance', async () => {
  process.env.RAG_V2_AGENT_IDS = ` other_agent , ${AGENT} `;
  api.setHandler((request) =>
    request.path === '/query_v2'
      ? v2Reply([
          v2Result({ rank: 1, fileId: 'kb-1', content: 'Evidence one.', score: 0.62, page: 3, section: ['Policies', 'Refunds'] }),
          v2Result({ rank: 2, fileId: 'kb-0', content: 'Evidence two.', score: 0.55, page: 1 }),
        ])
      : {
          json: [
            v1Row({ fileId: 'conv-0', content: 'Closer conversation chunk.', distance: 0.05 }),
            v1Row({ fileId: 'conv-0', content: 'Weaker conversation chunk.', distance: 0.6, page: 4 }),
          ],
        },
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

  const sources = artifact.file_search.sources;
  // Relevance order across routes (0.95, 0.62, 0.55, 0.40), not V2 first.
  assert.deepEqual(
    sources.map((source) => [source.fileId, source.relevance.toFixed(2)]),
    [
      ['conv-0', '0.95'],
      ['kb-1', '0.62'],
      ['kb-0', '0.55'],
      ['conv-0', '0.40'],
    ],
  );
  const blocks = text.split('\n---\n');
  assert.match(blocks[0], /^File: conv-file-0\.pdf\nAnchor: \\ue202turn0file0 \(conv-file-0\.pdf\)\nRelevance: 0\.9500\n/);
  // The model reads V2's 1-based page in the file; the artifact gets LibreChat's 0-based numbering.
  assert.equal(
    blocks[1],
    'File: kb-file-1.pdf\nAnchor: \\ue202turn0file1 (kb-file-1.pdf)\nCitation: V2-1\nPage: 3\nSection: Policies > Refunds\nRelevance: 0.6200\nContent: Evidence one.\n',
  );
  assert.match(blocks[2], /^File: kb-file-0\.pdf\nAnchor: \\ue202turn0file2 \(kb-file-0\.pdf\)\nCitation: V2-2\nPage: 1\nRelevance: 0\.5500\n/);
  assert.deepEqual(sources[1], {
    type: 'file',
    fileId: 'kb-1',
    content: 'Evidence one.',
    fileName: 'kb-file-1.pdf',
    relevance: 0.62,
    pages: [2],
    pageRelevance: { 2: 0.62 },
  });
  // V2 page 1 is V1 page 0: no page, as for a V1 result on the first page.
  assert.deepEqual(sources[2].pages, []);
  // A V1 page passes through unchanged.
  assert.deepEqual(sources[3].pages, [4]);
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

test("an empty V2 answer alone hands the model the service's safe_refusal sentence", async () => {
  process.env.RAG_V2_AGENT_IDS = AGENT;
  const refusal = 'The knowledge base holds no evidence for this question; answer that you cannot confirm it.';
  api.setHandler(() => v2Reply([], refusal));
  const [text, artifact] = await search({ files: makeFiles('kb', 2, true), entity_id: AGENT });
  assert.equal(text, refusal);
  assert.equal(artifact, undefined);
});

test('a V2 refusal reaches the model alongside attachment results', async () => {
  process.env.RAG_V2_AGENT_IDS = AGENT;
  const refusal = 'No evidence in the knowledge base supports an answer.';
  api.setHandler((request) =>
    request.path === '/query_v2'
      ? v2Reply([], refusal)
      : { json: [v1Row({ fileId: 'conv-0', content: 'weak attachment match', distance: 0.7 })] },
  );
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 2, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  const [notes, block] = text.split('\n---\n');
  assert.equal(
    notes,
    `The knowledge base was searched and holds no evidence for this query. The search service says: ${refusal} Do not answer this query from the knowledge base.\nThe results below do not come from the knowledge base.`,
  );
  assert.match(block, /^File: conv-file-0\.pdf\n/);
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.fileId),
    ['conv-0'],
  );
});

test('a V2 refusal with empty attachments says both', async () => {
  process.env.RAG_V2_AGENT_IDS = AGENT;
  api.setHandler((request) => (request.path === '/query_v2' ? v2Reply([], 'Nothing supports it.') : NOT_FOUND));
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.equal(
    text,
    'The knowledge base was searched and holds no evidence for this query. The search service says: Nothing supports it. Do not answer this query from the knowledge base.\nNo content found in the attached files.',
  );
  assert.equal(artifact, undefined);
});

test('a 404 from /query_v2 is a failure: logged with the route and said to the model', async () => {
  process.env.RAG_V2_AGENT_IDS = AGENT;
  api.setHandler((request) =>
    request.path === '/query_v2'
      ? { status: 404, json: { detail: 'Not Found' } }
      : { json: [v1Row({ fileId: 'conv-0', content: 'attachment answer', distance: 0.3 })] },
  );
  const [text, artifact] = await search({
    files: [...makeFiles('kb', 1, true), ...makeFiles('conv', 1, false)],
    entity_id: AGENT,
  });
  assert.equal(api.requests.length, 2, 'no fallback request');
  assert.match(text, /^The knowledge base could not be searched: configuration problem\./);
  assert.match(text, /The results below do not come from the knowledge base\./);
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.fileId),
    ['conv-0'],
  );
  assert.equal(state.axiosErrors.length, 1);
  assert.equal(state.axiosErrors[0].status, 404);
  assert.match(state.axiosErrors[0].message, /\/query_v2 for the knowledge base .* failed \(404\): configuration problem/);
  assert.match(state.axiosErrors[0].message, /RAG_V2_AGENT_IDS/);
});

test('V2 results for files outside the knowledge-base request are dropped', async () => {
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

test('a large V2 knowledge base is batched too, and a refusal counts only when no batch found evidence', async () => {
  process.env.RAG_V2_AGENT_IDS = AGENT;
  api.setHandler((request) =>
    request.body.file_ids.includes('kb-1200')
      ? v2Reply([v2Result({ rank: 1, fileId: 'kb-1200', content: 'found in batch two', score: 0.5 })])
      : v2Reply([], 'nothing here'),
  );
  const [text, artifact] = await search({ files: makeFiles('kb', 2500, true), entity_id: AGENT });
  assert.equal(requestsTo('/query_v2').length, 3);
  assert.ok(requestsTo('/query_v2').every((request) => request.body.k === 8 && request.body.entity_id === AGENT));
  assert.ok(!text.includes('nothing here'));
  assert.deepEqual(
    artifact.file_search.sources.map((source) => source.fileId),
    ['kb-1200'],
  );
});
