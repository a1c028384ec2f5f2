/**
 * ragoverlay's search logic for LibreChat's `file_search` tool. No upstream counterpart: the patched
 * `api/app/clients/tools/util/fileSearch.js` stays close to upstream and calls into this module.
 *
 * What it does that upstream does not (each difference is listed in ragoverlay's README, "What
 * changes"):
 * - the model-visible note counts the knowledge base instead of naming every file;
 * - one search sends one `POST /query_multiple` (or `/query_v2` for Agents in `RAG_V2_AGENT_IDS`)
 *   per 1,000 knowledge-base files, with `entity_id`, and one per 1,000 attachments, without it,
 *   at most `RAG_FILE_SEARCH_CONCURRENCY` at a time, and merges them into one global top-k;
 * - every result is attributed by its own `metadata.file_id` and dropped when that id was not asked
 *   for;
 * - a half of the search that failed or was refused is said so to the model, with a reason class.
 *
 * It needs ragoverlay: stock rag_api does not scope `/query_multiple` by `entity_id`.
 * Installed by ragoverlay's `scripts/apply_patches.py`; pinned by hash in `checksums.txt`.
 */
'use strict';

const axios = require('axios');
const { logger } = require('@librechat/data-schemas');
const { logAxiosError } = require('@librechat/api');
const { Tools } = require('librechat-data-provider');

/** The service refuses more distinct file ids than this in one request (CONTRACT section 4). */
const MAX_IDS_PER_REQUEST = 1000;
/** Requests in flight at once for one search, unless `RAG_FILE_SEARCH_CONCURRENCY` says otherwise. */
const DEFAULT_CONCURRENCY = 4;
/** Requests per half (knowledge base, attachments) before the search refuses that half. */
const DEFAULT_MAX_BATCHES = 10;
/** Chunks asked of `/query_multiple`; the service applies k across all files of the request. */
const V1_K = 10;
/** Evidence items asked of `/query_v2` (the service allows 1..10). */
const V2_K = 8;
/** Results the model reads, as upstream. */
const RESULT_LIMIT = 10;
/** Conversation attachments named in the model-visible note before "…and N more". */
const ATTACHMENT_LIST_LIMIT = 10;
/** Longest file name (in characters) shown to the model. */
const NAME_LIMIT = 160;
/** axios has no default timeout: without one a hung service would hold the chat turn open. */
const DEFAULT_TIMEOUT_MS = 30000;
/** A reply larger than this is a fault, not search results. */
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

const LOG_PREFIX = `[${Tools.file_search}]`;

const NO_FILES_CONTEXT = `- Note: Semantic search is available through the ${Tools.file_search} tool but no files are currently loaded. Request the user to upload documents to search through.`;
const NO_FILES_MESSAGE = 'No files to search. Instruct the user to add files for the search.';
const EMPTY_QUERY_MESSAGE = 'The file search needs a non-empty query.';
const NO_CONTENT_MESSAGE =
  'No content found in the files. The files may not have been processed correctly or you may need to refine your query.';

/**
 * Why a half of the search could not be searched, as the model reads it, with what to tell the user.
 * @type {Record<string, {reason: string, advice: string}>}
 */
const FAILURES = {
  configuration: {
    reason: 'configuration problem',
    advice: 'Tell the user the document search is misconfigured and an administrator must fix it.',
  },
  request: {
    reason: 'request problem',
    advice: 'Tell the user the search service rejected the request; a shorter or simpler query may help.',
  },
  unavailable: {
    reason: 'temporarily unavailable',
    advice: 'Tell the user the search is unavailable right now and suggest trying again shortly.',
  },
  reply: {
    reason: 'unexpected reply from the search service',
    advice: 'Tell the user the search failed and an administrator should check the search service.',
  },
  tooLarge: {
    reason: 'too many documents',
    advice: 'Tell the user this is more than the deployment searches at once; an administrator can raise the limit.',
  },
};
/** When batches of one half fail for different reasons, the first of these is reported. */
const FAILURE_PRIORITY = ['configuration', 'request', 'reply', 'unavailable'];

/** Characters that must never reach the model from a file name: controls, invisible formatting
 * (bidi overrides, zero-width) and line separators, all of which can smuggle instructions. */
const UNSAFE_NAME_CHARS = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;

/**
 * Removes characters that can hide or inject text and trims the name to NAME_LIMIT characters.
 * @param {unknown} name
 * @returns {string}
 */
const sanitizeFileName = (name) => {
  const cleaned = String(name ?? '')
    .replace(UNSAFE_NAME_CHARS, '')
    .trim();
  // Count code points, not UTF-16 units, so a cut never splits a surrogate pair.
  const chars = Array.from(cleaned);
  if (chars.length <= NAME_LIMIT) {
    return cleaned;
  }
  return `${chars.slice(0, NAME_LIMIT - 1).join('')}…`;
};

/**
 * A positive integer from the environment, or the default when unset or invalid.
 * Read on every search so an operator's change needs no code reload.
 * @param {string} name
 * @param {number} fallback
 * @returns {number}
 */
const positiveIntEnv = (name, fallback) => {
  const raw = process.env[name] ?? '';
  const parsed = /^\s*\d+\s*$/.test(raw) ? Number.parseInt(raw, 10) : Number.NaN;
  return Number.isSafeInteger(parsed) && parsed > 0 ? parsed : fallback;
};

/**
 * Agent ids whose knowledge base is searched through `/query_v2` (env `RAG_V2_AGENT_IDS`).
 * @returns {Set<string>}
 */
const v2AgentIds = () =>
  new Set(
    (process.env.RAG_V2_AGENT_IDS ?? '')
      .split(',')
      .map((id) => id.trim())
      .filter(Boolean),
  );

/**
 * Keeps the first entry of each file id and drops entries without one.
 * @param {Array<{ file_id?: unknown; filename?: string; fromAgent?: boolean }>} files
 * @returns {Array<{ file_id: string; filename?: string; fromAgent?: boolean }>}
 */
const uniqueFiles = (files) => {
  const seen = new Set();
  const unique = [];
  for (const file of Array.isArray(files) ? files : []) {
    if (!file || typeof file.file_id !== 'string' || !file.file_id || seen.has(file.file_id)) {
      continue;
    }
    seen.add(file.file_id);
    unique.push(file);
  }
  return unique;
};

/**
 * The model-visible note about searchable files: a count for the knowledge base, sanitised names
 * for the attachments.
 * @param {Array<{ file_id: string; filename?: string; fromAgent?: boolean }>} files
 * @returns {string}
 */
const buildToolContext = (files) => {
  const knowledgeBaseCount = files.filter((file) => file.fromAgent === true).length;
  const attachments = files.filter((file) => file.fromAgent !== true);
  if (knowledgeBaseCount === 0 && attachments.length === 0) {
    return NO_FILES_CONTEXT;
  }
  const lines = [];
  if (knowledgeBaseCount > 0) {
    // Only a count: listing hundreds of names cost thousands of tokens before the question.
    const noun = knowledgeBaseCount === 1 ? 'document' : 'documents';
    lines.push(
      `- Note: Use the ${Tools.file_search} tool to find relevant information in this Agent's knowledge base (${knowledgeBaseCount} ${noun}). Its file names are not listed; search by topic.`,
    );
  }
  if (attachments.length > 0) {
    lines.push(
      knowledgeBaseCount > 0
        ? `- Files just attached by the user, also searchable with ${Tools.file_search}:`
        : `- Note: Use the ${Tools.file_search} tool to find relevant information within the files just attached by the user:`,
    );
    for (const file of attachments.slice(0, ATTACHMENT_LIST_LIMIT)) {
      // JSON quoting keeps a name on one line and makes its boundaries unambiguous to the model.
      lines.push(`\t- ${JSON.stringify(sanitizeFileName(file.filename) || 'unnamed file')}`);
    }
    if (attachments.length > ATTACHMENT_LIST_LIMIT) {
      lines.push(`\t- …and ${attachments.length - ATTACHMENT_LIST_LIMIT} more`);
    }
  }
  return lines.join('\n');
};

/**
 * Deduplicates primed files, knowledge-base copy first, and flags each one's origin.
 * @param {Array<Object>} knowledgeBaseFiles - records that passed the Agent access filter
 * @param {Array<Object>} attachments - conversation files
 * @returns {Array<{ file_id: string; filename: string; fromAgent: boolean }>}
 */
const primedFiles = (knowledgeBaseFiles, attachments) =>
  uniqueFiles([
    ...(knowledgeBaseFiles ?? []).map((file) => file && { ...file, fromAgent: true }),
    ...(attachments ?? []).map((file) => file && { ...file, fromAgent: false }),
  ]).map((file) => ({ file_id: file.file_id, filename: file.filename, fromAgent: file.fromAgent }));

/**
 * @typedef {Object} Batch
 * @property {'v1' | 'v2'} route
 * @property {string} path
 * @property {Object} body
 * @property {Map<string, string | undefined>} names - file id -> LibreChat file name
 */

/**
 * @typedef {Object} Half
 * @property {'knowledge base' | 'attached files'} label
 * @property {number} fileCount
 * @property {Batch[]} batches - empty when the half is refused for its size
 * @property {boolean} tooLarge
 */

/**
 * Splits the files into the knowledge-base half (`fromAgent`, searched with `entity_id`) and the
 * attachments half (everything else, without it), each cut into requests of at most 1,000 ids.
 * @param {Array<{ file_id: string; filename?: string; fromAgent?: boolean }>} files
 * @param {string | undefined} entityId
 * @param {string} query
 * @param {number} maxBatches
 * @returns {Half[]}
 */
const planSearch = (files, entityId, query, maxBatches) => {
  // Upstream's safe default: only files primeFiles flagged as the Agent's carry its entity_id.
  const knowledgeBase = files.filter((file) => file.fromAgent === true);
  const attachments = files.filter((file) => file.fromAgent !== true);
  const useV2 = Boolean(entityId) && v2AgentIds().has(entityId);
  /** @type {Half[]} */
  const halves = [];
  const plan = (label, group, makeBatch) => {
    if (group.length === 0) {
      return;
    }
    const count = Math.ceil(group.length / MAX_IDS_PER_REQUEST);
    const half = { label, fileCount: group.length, batches: [], tooLarge: count > maxBatches };
    if (!half.tooLarge) {
      for (let start = 0; start < group.length; start += MAX_IDS_PER_REQUEST) {
        const slice = group.slice(start, start + MAX_IDS_PER_REQUEST);
        half.batches.push({
          ...makeBatch(slice.map((file) => file.file_id)),
          names: new Map(slice.map((file) => [file.file_id, file.filename])),
        });
      }
    }
    halves.push(half);
  };
  plan('knowledge base', knowledgeBase, (file_ids) => {
    if (useV2) {
      return {
        route: 'v2',
        path: '/query_v2',
        body: { query, file_ids, entity_id: entityId, k: V2_K, debug: false },
      };
    }
    const body = { query, file_ids, k: V1_K };
    if (entityId) {
      body.entity_id = entityId;
    }
    return { route: 'v1', path: '/query_multiple', body };
  });
  plan('attached files', attachments, (file_ids) => ({
    route: 'v1',
    path: '/query_multiple',
    body: { query, file_ids, k: V1_K },
  }));
  return halves;
};

/**
 * Runs the tasks with at most `limit` in flight and returns their results in task order.
 * @template T
 * @param {Array<() => Promise<T>>} tasks
 * @param {number} limit
 * @returns {Promise<T[]>}
 */
const runLimited = async (tasks, limit) => {
  const results = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const index = next;
      next += 1;
      results[index] = await tasks[index]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, worker));
  return results;
};

/**
 * @typedef {Object} SearchItem
 * @property {string} fileId
 * @property {string} filename
 * @property {string} content
 * @property {number} distance - 1 - relevance
 * @property {number | null} page - LibreChat's convention: the V1 (0-based) page; 0 counts as none
 * @property {number | null} viewerPage - V2's 1-based page in the file (what a viewer shows), shown to the model
 * @property {boolean} v2
 * @property {string} [citationId]
 * @property {string} [section]
 */

/**
 * The last path segment of a stored source, which upstream shows as the file name.
 * @param {unknown} source
 * @returns {string}
 */
const baseName = (source) => (typeof source === 'string' ? (source.split('/').pop() ?? '') : '');

/**
 * Reads a `/query_multiple` reply: `[[document, distance], ...]`.
 * @param {Batch} batch
 * @param {unknown} data
 * @returns {{ items: SearchItem[], dropped: number } | null} null when the reply is malformed
 */
const readV1Reply = (batch, data) => {
  if (!Array.isArray(data)) {
    return null;
  }
  // A request for a single file can only be answered from that file, so a row without its own
  // file id is that file's (upstream attributes every row this way).
  const onlyId = batch.names.size === 1 ? [...batch.names.keys()][0] : undefined;
  const items = [];
  let dropped = 0;
  for (const row of data) {
    const doc = Array.isArray(row) && row[0] && typeof row[0] === 'object' ? row[0] : null;
    const distance = Array.isArray(row) ? row[1] : undefined;
    const fileId = doc?.metadata?.file_id ?? onlyId;
    if (!doc || !batch.names.has(fileId) || typeof doc.page_content !== 'string' || !Number.isFinite(distance)) {
      dropped += 1;
      continue;
    }
    items.push({
      fileId,
      filename: batch.names.get(fileId) || baseName(doc.metadata?.source) || 'unknown',
      content: doc.page_content,
      distance,
      // Upstream's `page || null`: the 0-based page as stored, page 0 shown as none.
      page: Number.isInteger(doc.metadata?.page) && doc.metadata.page > 0 ? doc.metadata.page : null,
      viewerPage: null,
      v2: false,
    });
  }
  return { items, dropped };
};

/**
 * Joins a V2 section path (list of headings) into one line.
 * @param {unknown} section
 * @returns {string}
 */
const sectionText = (section) => {
  if (Array.isArray(section)) {
    return section
      .filter((heading) => typeof heading === 'string' && heading.trim())
      .map((heading) => heading.replace(UNSAFE_NAME_CHARS, ' ').trim())
      .join(' > ');
  }
  return typeof section === 'string' ? section.replace(UNSAFE_NAME_CHARS, ' ').trim() : '';
};

/**
 * Reads a `/query_v2` reply: `{route, index_version, results, degraded, safe_refusal}`.
 * @param {Batch} batch
 * @param {unknown} data
 * @returns {{ items: SearchItem[], dropped: number, refusal: string | null } | null}
 */
const readV2Reply = (batch, data) => {
  if (!data || typeof data !== 'object' || !Array.isArray(data.results)) {
    return null;
  }
  if (data.degraded === true) {
    logger.warn(`${LOG_PREFIX} /query_v2 answered in degraded mode`);
  }
  const items = [];
  let dropped = 0;
  data.results.forEach((result, rank) => {
    const fileId = result?.file_id;
    if (!batch.names.has(fileId) || typeof result.content !== 'string' || !Number.isFinite(result.score)) {
      dropped += 1;
      return;
    }
    const inFile = Number.isInteger(result.page) && result.page >= 1 ? result.page : null;
    items.push({
      fileId,
      filename: batch.names.get(fileId) || baseName(result.filename) || 'unknown',
      content: result.content,
      distance: 1 - result.score,
      // V2 pages are 1-based; the artifact uses V1's 0-based numbering, with page 0 shown as none.
      page: inFile && inFile > 1 ? inFile - 1 : null,
      viewerPage: inFile,
      v2: true,
      citationId: typeof result.citation_id === 'string' ? result.citation_id : `V2-${rank + 1}`,
      section: sectionText(result.section),
    });
  });
  const refusal =
    data.results.length === 0 && typeof data.safe_refusal === 'string' && data.safe_refusal.trim()
      ? data.safe_refusal.trim()
      : null;
  return { items, dropped, refusal };
};

/**
 * Sorts a request failure into a reason class, and says what an operator should check.
 * @param {any} error
 * @param {Batch} batch
 * @returns {{ kind: string | null, hint: string }} kind null: an empty result, not a failure
 */
const classifyFailure = (error, batch) => {
  const status = error?.response?.status;
  if (status === 404) {
    if (batch.route === 'v1') {
      // `/query_multiple` answers 404 when nothing matched (CONTRACT section 4).
      return { kind: null, hint: '' };
    }
    // V2 answers "nothing found" with 200 and a safe_refusal: a 404 means the route is missing.
    return {
      kind: 'configuration',
      hint: 'The service has no /query_v2 route: point RAG_API_URL at ragoverlay with V2, or remove this Agent from RAG_V2_AGENT_IDS.',
    };
  }
  if (status === 401 || status === 403) {
    const v2 =
      batch.route === 'v2' && status === 403
        ? ' For /query_v2 also check that the service lists this Agent in RAG_V2_NAMESPACE_IDS.'
        : '';
    return {
      kind: 'configuration',
      hint: `Check that LibreChat and ragoverlay use the same JWT_SECRET, and that entity_id values match the service's ENTITY_ID_PATTERN.${v2}`,
    };
  }
  if (status === 408 || status === 429 || (status >= 500 && status <= 599)) {
    return { kind: 'unavailable', hint: '' };
  }
  if (status >= 400 && status <= 499) {
    return { kind: 'request', hint: '' };
  }
  if (status !== undefined || error?.code === 'ERR_BAD_RESPONSE' || error?.code === 'ERR_FR_MAX_BODY_LENGTH_EXCEEDED') {
    return { kind: 'reply', hint: '' };
  }
  // No reply at all: timeout, refused connection, DNS.
  return { kind: 'unavailable', hint: '' };
};

/**
 * @typedef {Object} BatchOutcome
 * @property {string | null} failure - a FAILURES key, or null when the batch was searched
 * @property {SearchItem[]} items
 * @property {string | null} refusal
 */

/**
 * Sends one request and reads its reply; never throws.
 * @param {Half} half
 * @param {Batch} batch
 * @param {number} index - batch number within the half, from 0
 * @param {string} jwtToken
 * @returns {Promise<BatchOutcome>}
 */
const searchBatch = async (half, batch, index, jwtToken) => {
  const where = `${batch.path} for the ${half.label} (request ${index + 1} of ${half.batches.length}, ${batch.names.size} files)`;
  let data;
  try {
    const response = await axios.post(`${process.env.RAG_API_URL}${batch.path}`, batch.body, {
      headers: {
        Authorization: `Bearer ${jwtToken}`,
        'Content-Type': 'application/json',
      },
      timeout: positiveIntEnv('RAG_API_TIMEOUT_MS', DEFAULT_TIMEOUT_MS),
      maxContentLength: MAX_RESPONSE_BYTES,
    });
    data = response?.data;
  } catch (error) {
    const { kind, hint } = classifyFailure(error, batch);
    if (!kind) {
      return { failure: null, items: [], refusal: null };
    }
    const status = error?.response?.status ?? error?.code ?? 'no reply';
    logAxiosError({
      message: `${LOG_PREFIX} ${where} failed (${status}): ${FAILURES[kind].reason}; its results are skipped.${hint ? ` ${hint}` : ''}`,
      error,
    });
    return { failure: kind, items: [], refusal: null };
  }
  const reply = batch.route === 'v2' ? readV2Reply(batch, data) : readV1Reply(batch, data);
  if (!reply) {
    logger.error(`${LOG_PREFIX} ${where} returned a malformed reply; its results are skipped`);
    return { failure: 'reply', items: [], refusal: null };
  }
  if (reply.dropped > 0) {
    logger.warn(
      `${LOG_PREFIX} dropped ${reply.dropped} result(s) from ${where}: file id not among the files asked for, or malformed`,
    );
  }
  return { failure: null, items: reply.items, refusal: reply.refusal ?? null };
};

/**
 * @typedef {Object} HalfOutcome
 * @property {Half} half
 * @property {SearchItem[]} items
 * @property {string | null} failure - reason class when nothing of the half was searched
 * @property {string | null} partial - reason class when some of its requests failed
 * @property {number} failedFiles
 * @property {string | null} refusal - V2's safe_refusal when the half found nothing
 */

/**
 * Folds one half's batch outcomes into what the model is told about that half.
 * @param {Half} half
 * @param {BatchOutcome[]} outcomes
 * @returns {HalfOutcome}
 */
const summariseHalf = (half, outcomes) => {
  if (half.tooLarge) {
    return { half, items: [], failure: 'tooLarge', partial: null, failedFiles: half.fileCount, refusal: null };
  }
  const failed = outcomes.map((outcome, i) => [outcome, half.batches[i]]).filter(([outcome]) => outcome.failure);
  const worst = FAILURE_PRIORITY.find((kind) => failed.some(([outcome]) => outcome.failure === kind)) ?? null;
  const items = outcomes.flatMap((outcome) => outcome.items);
  const all = failed.length === outcomes.length;
  return {
    half,
    items,
    failure: all ? worst : null,
    partial: all ? null : worst,
    failedFiles: failed.reduce((sum, [, batch]) => sum + batch.names.size, 0),
    refusal: items.length === 0 ? (outcomes.find((outcome) => outcome.refusal)?.refusal ?? null) : null,
  };
};

/**
 * Orders results from every request by relevance (best first), drops repeated chunks and keeps the
 * best RESULT_LIMIT. The sort is stable, so equal relevance keeps request order.
 * @param {SearchItem[]} items
 * @returns {SearchItem[]}
 */
const rankResults = (items) => {
  const ordered = [...items].sort((a, b) => a.distance - b.distance);
  const seen = new Set();
  const unique = [];
  for (const item of ordered) {
    const key = `${item.fileId}\u0000${item.content}`;
    if (!seen.has(key)) {
      seen.add(key);
      unique.push(item);
    }
  }
  return unique.slice(0, RESULT_LIMIT);
};

/**
 * What the model is told about a half that was not fully searched, or null when it was.
 * @param {HalfOutcome} outcome
 * @param {number} maxBatches
 * @returns {string | null}
 */
const describeHalf = (outcome, maxBatches) => {
  const { half } = outcome;
  const name = half.label === 'knowledge base' ? 'the knowledge base' : 'the attached files';
  const title = name.charAt(0).toUpperCase() + name.slice(1);
  if (outcome.failure === 'tooLarge') {
    const limit = (maxBatches * MAX_IDS_PER_REQUEST).toLocaleString('en-US');
    return `${title} could not be searched: ${FAILURES.tooLarge.reason} (${half.fileCount.toLocaleString('en-US')}; this deployment searches at most ${limit} at once). ${FAILURES.tooLarge.advice}`;
  }
  if (outcome.failure) {
    const { reason, advice } = FAILURES[outcome.failure];
    return `${title} could not be searched: ${reason}. ${advice} Do not answer as if ${name} had been searched.`;
  }
  const lines = [];
  if (outcome.partial) {
    lines.push(
      `Part of ${name} could not be searched (${outcome.failedFiles} of ${half.fileCount} documents): ${FAILURES[outcome.partial].reason}. Results from ${name} may be incomplete.`,
    );
  }
  if (outcome.refusal) {
    lines.push(
      `${title} was searched and holds no evidence for this query. The search service says: ${outcome.refusal} Do not answer this query from ${name}.`,
    );
  }
  return lines.length > 0 ? lines.join('\n') : null;
};

/**
 * Renders one result block for the model, in upstream's layout plus V2's citation, page and section.
 * @param {SearchItem} item
 * @param {number} index
 * @param {boolean} fileCitations
 * @returns {string}
 */
const formatResult = (item, index, fileCitations) => {
  const name = sanitizeFileName(item.filename);
  const lines = [`File: ${name}`];
  if (fileCitations) {
    // Literal backslash sequence, exactly as upstream: LibreChat's renderer parses this text.
    lines.push(`Anchor: \\ue202turn0file${index} (${name})`);
  }
  if (item.v2) {
    lines.push(`Citation: ${item.citationId}`);
    if (item.viewerPage != null) {
      lines.push(`Page: ${item.viewerPage}`);
    }
    if (item.section) {
      lines.push(`Section: ${item.section}`);
    }
  }
  lines.push(`Relevance: ${(1.0 - item.distance).toFixed(4)}`);
  lines.push(`Content: ${item.content}`);
  return `${lines.join('\n')}\n`;
};

/**
 * Runs one file search and returns the tool's `[text, artifact]`; never throws for a service fault.
 * @param {Object} options
 * @param {string} options.query
 * @param {Array<{ file_id: string; filename?: string; fromAgent?: boolean }>} options.files
 * @param {string} [options.entity_id]
 * @param {string} options.jwtToken
 * @param {boolean} options.fileCitations
 * @returns {Promise<[string, Object | undefined]>}
 */
const searchFiles = async ({ query, files, entity_id, jwtToken, fileCitations }) => {
  const searchable = uniqueFiles(files);
  if (searchable.length === 0) {
    return [NO_FILES_MESSAGE, undefined];
  }
  if (typeof query !== 'string' || !query.trim()) {
    return [EMPTY_QUERY_MESSAGE, undefined];
  }
  const maxBatches = positiveIntEnv('RAG_FILE_SEARCH_MAX_BATCHES', DEFAULT_MAX_BATCHES);
  const concurrency = positiveIntEnv('RAG_FILE_SEARCH_CONCURRENCY', DEFAULT_CONCURRENCY);
  const halves = planSearch(searchable, entity_id, query, maxBatches);
  for (const half of halves.filter((candidate) => candidate.tooLarge)) {
    logger.error(
      `${LOG_PREFIX} the ${half.label} was not searched: ${half.fileCount} files need more than RAG_FILE_SEARCH_MAX_BATCHES=${maxBatches} requests of ${MAX_IDS_PER_REQUEST} files (Agent ${entity_id ?? 'none'}). Raise RAG_FILE_SEARCH_MAX_BATCHES or split the knowledge base.`,
    );
  }

  const tasks = halves.flatMap((half) =>
    half.batches.map((batch, index) => () => searchBatch(half, batch, index, jwtToken)),
  );
  const flat = await runLimited(tasks, concurrency);
  let offset = 0;
  const outcomes = halves.map((half) => {
    const mine = flat.slice(offset, offset + half.batches.length);
    offset += half.batches.length;
    return summariseHalf(half, mine);
  });

  const results = rankResults(outcomes.flatMap((outcome) => outcome.items));
  const notes = outcomes.map((outcome) => describeHalf(outcome, maxBatches)).filter(Boolean);
  const unsearched = outcomes.filter((outcome) => outcome.failure || outcome.refusal);
  if (results.length > 0 && unsearched.length > 0) {
    const names = unsearched.map((outcome) => `the ${outcome.half.label}`).join(' and ');
    notes.push(`The results below do not come from ${names}.`);
  }

  if (results.length === 0) {
    if (notes.length === 0) {
      return [NO_CONTENT_MESSAGE, undefined];
    }
    const refusedOnly = outcomes.length === 1 && outcomes[0].refusal && !outcomes[0].partial;
    if (refusedOnly) {
      // Only the knowledge base was searched and V2 refused: its own sentence says it best.
      return [outcomes[0].refusal, undefined];
    }
    const searchedEmpty = outcomes.filter((outcome) => !outcome.failure && !outcome.refusal);
    for (const outcome of searchedEmpty) {
      notes.push(`No content found in the ${outcome.half.label}.`);
    }
    return [notes.join('\n'), undefined];
  }

  const blocks = results.map((item, index) => formatResult(item, index, fileCitations)).join('\n---\n');
  const text = notes.length > 0 ? `${notes.join('\n')}\n---\n${blocks}` : blocks;
  const sources = results.map((item) => {
    const relevance = 1.0 - item.distance;
    return {
      type: 'file',
      fileId: item.fileId,
      content: item.content,
      fileName: item.filename,
      relevance,
      pages: item.page ? [item.page] : [],
      pageRelevance: item.page ? { [item.page]: relevance } : {},
    };
  });
  return [text, { [Tools.file_search]: { sources, fileCitations } }];
};

module.exports = {
  buildToolContext,
  primedFiles,
  searchFiles,
  sanitizeFileName,
  planSearch,
  rankResults,
  MAX_IDS_PER_REQUEST,
};
