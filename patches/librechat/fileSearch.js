/**
 * ragoverlay replacement for LibreChat's `api/app/clients/tools/util/fileSearch.js`.
 *
 * Same exports, signatures and return shapes as upstream (see ragoverlay CONTRACT.md section 8), but:
 * - the model-visible note never lists knowledge-base file names, only how many documents there are;
 * - one search sends at most two requests, concurrently: the Agent's knowledge-base files (with
 *   `entity_id`) and the conversation attachments (without), each to `POST /query_multiple`;
 *   Agents listed in `RAG_V2_AGENT_IDS` send their knowledge-base group to `POST /query_v2`;
 * - every result is attributed by its own file id and dropped when that id was not asked for;
 * - an empty V2 answer hands its `safe_refusal` sentence to the model.
 *
 * Installed by ragoverlay's `scripts/apply_patches.py`; pinned by hash in `checksums.txt`.
 */
'use strict';

const axios = require('axios');
const { logger } = require('@librechat/data-schemas');
const { tool } = require('@librechat/agents/langchain/tools');
const { generateShortLivedToken, logAxiosError } = require('@librechat/api');
const { Tools, EToolResources } = require('librechat-data-provider');
const { filterFilesByAgentAccess } = require('~/server/services/Files/permissions');
const { getFiles } = require('~/models');

/** The service refuses more distinct file ids than this in one request (CONTRACT section 4). */
const MAX_FILES = 1000;
/** Chunks asked of `/query_multiple`; the service applies k across all files of the request. */
const V1_K = 10;
/** Evidence items asked of `/query_v2` (the service allows 1..10). */
const V2_K = 8;
/** Results the model reads, as upstream. */
const RESULT_LIMIT = 10;
/** Conversation attachments named in the model-visible note before "…and N more". */
const ATTACHMENT_LIST_LIMIT = 10;
/** Longest attachment name (in characters) shown to the model. */
const NAME_LIMIT = 160;
/** axios has no default timeout: without one a hung service would hold the chat turn open. */
const DEFAULT_TIMEOUT_MS = 30000;
/** A reply larger than this is a fault, not search results. */
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

const LOG_PREFIX = `[${Tools.file_search}]`;

const NO_FILES_CONTEXT = `- Note: Semantic search is available through the ${Tools.file_search} tool but no files are currently loaded. Request the user to upload documents to search through.`;
const NO_FILES_MESSAGE = 'No files to search. Instruct the user to add files for the search.';
const AUTH_ERROR_MESSAGE = 'There was an error authenticating the file search request.';
const EMPTY_QUERY_MESSAGE = 'The file search needs a non-empty query.';
const UNAVAILABLE_MESSAGE =
  'The document search service could not be reached, so no files were searched. Tell the user the search is unavailable right now and suggest trying again shortly.';
const NO_CONTENT_MESSAGE =
  'No content found in the files. The files may not have been processed correctly or you may need to refine your query.';
const PARTIAL_NO_CONTENT_MESSAGE =
  'No content found in the files that could be searched; part of the document search was unavailable, so you may want to try again shortly.';

/** Characters that must never reach the model from a file name: controls, invisible formatting
 * (bidi overrides, zero-width) and line separators, all of which can smuggle instructions. */
const UNSAFE_NAME_CHARS = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;

const fileSearchJsonSchema = {
  type: 'object',
  properties: {
    query: {
      type: 'string',
      description:
        'A natural language query describing the information to find in the files. Be specific and include keywords likely to appear in the text; it is matched by meaning against the file contents.',
    },
  },
  required: ['query'],
};

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
 * The request timeout in milliseconds, from `RAG_API_TIMEOUT_MS` when it is a positive integer.
 * @returns {number}
 */
const requestTimeoutMs = () => {
  const parsed = Number.parseInt(process.env.RAG_API_TIMEOUT_MS ?? '', 10);
  return Number.isFinite(parsed) && parsed > 0 ? parsed : DEFAULT_TIMEOUT_MS;
};

/**
 * Agent ids whose knowledge base is searched through `/query_v2` (env `RAG_V2_AGENT_IDS`).
 * Read on every search so an operator's change needs no code reload.
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
 * Builds the model-visible note about searchable files.
 * @param {number} knowledgeBaseCount
 * @param {Array<{ filename?: string }>} attachments
 * @returns {string}
 */
const buildToolContext = (knowledgeBaseCount, attachments) => {
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
 * Loads the Agent's knowledge-base files the user may search, adds the conversation attachments and
 * describes them for the model without naming knowledge-base files.
 * @param {Object} options
 * @param {ServerRequest} options.req
 * @param {Agent['tool_resources']} options.tool_resources
 * @param {string} [options.agentId] - The agent ID for file access control
 * @returns {Promise<{
 *   files: Array<{ file_id: string; filename: string; fromAgent: boolean }>,
 *   toolContext: string
 * }>}
 */
const primeFiles = async (options) => {
  const { tool_resources, req, agentId } = options ?? {};
  const resource = tool_resources?.[EToolResources.file_search];
  const knowledgeBaseIds = Array.isArray(resource?.file_ids) ? resource.file_ids : [];
  const attachments = Array.isArray(resource?.files) ? resource.files : [];

  let knowledgeBaseFiles = [];
  if (knowledgeBaseIds.length > 0) {
    knowledgeBaseFiles =
      (await getFiles({ file_id: { $in: knowledgeBaseIds } }, null, { text: 0 })) ?? [];
  }
  if (req?.user?.id && agentId) {
    knowledgeBaseFiles = await filterFilesByAgentAccess({
      files: knowledgeBaseFiles,
      userId: req.user.id,
      role: req.user.role,
      agentId,
    });
  }

  const seen = new Set();
  const files = [];
  const shownAttachments = [];
  let knowledgeBaseCount = 0;
  const add = (file, fromAgent) => {
    if (!file || typeof file.file_id !== 'string' || !file.file_id || seen.has(file.file_id)) {
      return false;
    }
    seen.add(file.file_id);
    files.push({ file_id: file.file_id, filename: file.filename, fromAgent });
    return true;
  };
  for (const file of knowledgeBaseFiles ?? []) {
    if (add(file, true)) {
      knowledgeBaseCount += 1;
    }
  }
  for (const file of attachments) {
    if (add(file, false)) {
      shownAttachments.push(file);
    }
  }

  return { files, toolContext: buildToolContext(knowledgeBaseCount, shownAttachments) };
};

/**
 * Keeps the first entry of each file id and drops entries without one.
 * @param {Array<{ file_id: string; filename?: string; fromAgent?: boolean }>} files
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
 * @typedef {Object} SearchGroup
 * @property {'knowledge base' | 'conversation'} label
 * @property {'v1' | 'v2'} route
 * @property {string} path
 * @property {Object} body
 * @property {Map<string, string | undefined>} names - file id -> LibreChat file name
 */

/**
 * Splits the files into at most two requests: knowledge-base files searched in the Agent's
 * namespace and conversation files searched in the user's own.
 * @param {Array<{ file_id: string; filename?: string; fromAgent?: boolean }>} files
 * @param {string | undefined} entityId
 * @param {string} query
 * @returns {SearchGroup[]}
 */
const planGroups = (files, entityId, query) => {
  const knowledgeBase = [];
  const conversation = [];
  for (const file of files) {
    // A file without the flag comes from a caller that predates primeFiles' split: treat it as
    // upstream did, i.e. searched with the Agent's entity_id.
    if (entityId && file.fromAgent !== false) {
      knowledgeBase.push(file);
    } else {
      conversation.push(file);
    }
  }
  const groups = [];
  if (knowledgeBase.length > 0) {
    const file_ids = knowledgeBase.map((file) => file.file_id);
    const names = new Map(knowledgeBase.map((file) => [file.file_id, file.filename]));
    if (v2AgentIds().has(entityId)) {
      groups.push({
        label: 'knowledge base',
        route: 'v2',
        path: '/query_v2',
        body: { query, file_ids, entity_id: entityId, k: V2_K, debug: false },
        names,
      });
    } else {
      groups.push({
        label: 'knowledge base',
        route: 'v1',
        path: '/query_multiple',
        body: { query, file_ids, k: V1_K, entity_id: entityId },
        names,
      });
    }
  }
  if (conversation.length > 0) {
    groups.push({
      label: 'conversation',
      route: 'v1',
      path: '/query_multiple',
      body: { query, file_ids: conversation.map((file) => file.file_id), k: V1_K },
      names: new Map(conversation.map((file) => [file.file_id, file.filename])),
    });
  }
  return groups;
};

/**
 * @typedef {Object} SearchItem
 * @property {string} fileId
 * @property {string} filename
 * @property {string} content
 * @property {number} distance - 1 - relevance
 * @property {number | null} page
 * @property {boolean} v2
 * @property {number} rank - position in its reply
 * @property {string} [citationId]
 * @property {string} [section]
 */

/**
 * @typedef {Object} GroupOutcome
 * @property {boolean} failed
 * @property {SearchItem[]} items
 * @property {string | null} refusal - V2's safe_refusal when its reply was empty
 */

/**
 * The last path segment of a stored source, which upstream shows as the file name.
 * @param {unknown} source
 * @returns {string}
 */
const baseName = (source) =>
  typeof source === 'string' ? (source.split('/').pop() ?? '') : '';

/**
 * Reads a `/query_multiple` reply: `[[document, distance], ...]`.
 * @param {SearchGroup} group
 * @param {unknown} data
 * @returns {{ items: SearchItem[], dropped: number } | null} null when the reply is malformed
 */
const readV1Reply = (group, data) => {
  if (!Array.isArray(data)) {
    return null;
  }
  const items = [];
  let dropped = 0;
  data.forEach((row, rank) => {
    const doc = Array.isArray(row) ? row[0] : undefined;
    const distance = Array.isArray(row) ? row[1] : undefined;
    const fileId = doc?.metadata?.file_id;
    if (!group.names.has(fileId)) {
      dropped += 1;
      return;
    }
    if (typeof doc.page_content !== 'string' || !Number.isFinite(distance)) {
      dropped += 1;
      return;
    }
    items.push({
      fileId,
      filename: group.names.get(fileId) || baseName(doc.metadata.source) || 'unknown',
      content: doc.page_content,
      distance,
      // Upstream drops page 0 the same way; kept so citations render identically.
      page: doc.metadata.page || null,
      v2: false,
      rank,
    });
  });
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
 * @param {SearchGroup} group
 * @param {unknown} data
 * @returns {{ items: SearchItem[], dropped: number, refusal: string | null } | null}
 */
const readV2Reply = (group, data) => {
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
    if (!group.names.has(fileId)) {
      dropped += 1;
      return;
    }
    if (typeof result.content !== 'string' || !Number.isFinite(result.score)) {
      dropped += 1;
      return;
    }
    items.push({
      fileId,
      filename: group.names.get(fileId) || baseName(result.filename) || 'unknown',
      content: result.content,
      distance: 1 - result.score,
      page: Number.isFinite(result.page) ? result.page : null,
      v2: true,
      rank,
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
 * Sends one group's request and reads its reply; never throws.
 * @param {SearchGroup} group
 * @param {string} jwtToken
 * @returns {Promise<GroupOutcome>}
 */
const searchGroup = async (group, jwtToken) => {
  const fileCount = group.body.file_ids.length;
  let data;
  try {
    const response = await axios.post(`${process.env.RAG_API_URL}${group.path}`, group.body, {
      headers: {
        Authorization: `Bearer ${jwtToken}`,
        'Content-Type': 'application/json',
      },
      timeout: requestTimeoutMs(),
      maxContentLength: MAX_RESPONSE_BYTES,
    });
    data = response.data;
  } catch (error) {
    if (error?.response?.status === 404) {
      // The service answers 404 when nothing matched: an empty result, not a failure.
      return { failed: false, items: [], refusal: null };
    }
    logAxiosError({
      message: `${LOG_PREFIX} ${group.path} failed for the ${group.label} group (${fileCount} files); its results are skipped`,
      error,
    });
    return { failed: true, items: [], refusal: null };
  }
  const reply = group.route === 'v2' ? readV2Reply(group, data) : readV1Reply(group, data);
  if (!reply) {
    logger.error(
      `${LOG_PREFIX} ${group.path} returned a malformed reply for the ${group.label} group; its results are skipped`,
    );
    return { failed: true, items: [], refusal: null };
  }
  if (reply.dropped > 0) {
    logger.warn(
      `${LOG_PREFIX} dropped ${reply.dropped} result(s) from ${group.path} (${group.label} group): file id not among the ${fileCount} authorised files, or malformed`,
    );
  }
  return { failed: false, items: reply.items, refusal: reply.refusal ?? null };
};

/**
 * Orders results across groups: V2 evidence first in the service's own rank order, then the rest by
 * ascending distance; duplicates keep their best-placed copy.
 * @param {SearchItem[]} items
 * @returns {SearchItem[]}
 */
const rankResults = (items) => {
  const ordered = [...items].sort((a, b) => {
    if (a.v2 !== b.v2) {
      return a.v2 ? -1 : 1;
    }
    return a.v2 ? a.rank - b.rank : a.distance - b.distance;
  });
  const seen = new Set();
  const unique = [];
  for (const item of ordered) {
    const key = `${item.fileId}\u0000${item.content}`;
    if (seen.has(key)) {
      continue;
    }
    seen.add(key);
    unique.push(item);
  }
  return unique.slice(0, RESULT_LIMIT);
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
    if (item.page != null) {
      lines.push(`Page: ${item.page}`);
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
 * Creates the `file_search` tool over the primed files.
 * @param {Object} options
 * @param {string} options.userId
 * @param {Array<{ file_id: string; filename: string; fromAgent?: boolean }>} options.files
 * @param {string} [options.entity_id]
 * @param {boolean} [options.fileCitations=false] - Whether to include citation instructions
 * @returns {Promise<ReturnType<typeof tool>>}
 */
const createFileSearchTool = async ({ userId, files, entity_id, fileCitations = false }) => {
  return tool(
    async ({ query }) => {
      const searchable = uniqueFiles(files);
      if (searchable.length === 0) {
        return [NO_FILES_MESSAGE, undefined];
      }
      if (searchable.length > MAX_FILES) {
        logger.warn(
          `${LOG_PREFIX} search not started: ${searchable.length} files exceed the limit of ${MAX_FILES}`,
        );
        return [
          `The search could not start: ${searchable.length} files are selected, and at most ${MAX_FILES} can be searched at once. Ask the user to search fewer files.`,
          undefined,
        ];
      }
      if (typeof query !== 'string' || !query.trim()) {
        return [EMPTY_QUERY_MESSAGE, undefined];
      }
      const jwtToken = generateShortLivedToken(userId);
      if (!jwtToken) {
        return [AUTH_ERROR_MESSAGE, undefined];
      }

      const groups = planGroups(searchable, entity_id, query);
      const outcomes = await Promise.all(groups.map((group) => searchGroup(group, jwtToken)));
      const failures = outcomes.filter((outcome) => outcome.failed).length;
      if (failures === outcomes.length) {
        return [UNAVAILABLE_MESSAGE, undefined];
      }

      const results = rankResults(outcomes.flatMap((outcome) => outcome.items));
      if (results.length === 0) {
        const refusal = outcomes.find((outcome) => outcome.refusal)?.refusal;
        if (refusal) {
          // The service's own sentence says why there is no evidence; a generic text would not.
          return [refusal, undefined];
        }
        return [failures > 0 ? PARTIAL_NO_CONTENT_MESSAGE : NO_CONTENT_MESSAGE, undefined];
      }

      const formattedString = results
        .map((item, index) => formatResult(item, index, fileCitations))
        .join('\n---\n');
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
      return [formattedString, { [Tools.file_search]: { sources, fileCitations } }];
    },
    {
      name: Tools.file_search,
      responseFormat: 'content_and_artifact',
      description: `Performs semantic search across the "${Tools.file_search}" documents available to you (the Agent's knowledge base and files the user attached), using natural language queries. Use it to find facts, quotes and passages in those documents; search by topic, since the knowledge base's file names are not listed.${
        fileCitations
          ? `

**CITE FILE SEARCH RESULTS:**
Each result carries an anchor marker. Copy the EXACT anchor marker shown with a result (verbatim) immediately after the statement it supports, and name the file in your text:
- File citation: "The document.pdf states that... \\ue202turn0file0"
- Page reference: "According to report.docx... \\ue202turn0file1"
- Multi-file: "Multiple sources confirm... \\ue200\\ue202turn0file0\\ue202turn0file1\\ue201"

**Output the escape sequences exactly as shown (e.g. \\ue202turn0file0); never replace them with other symbols, markdown links or footnotes.**`
          : ''
      }`,
      schema: fileSearchJsonSchema,
    },
  );
};

module.exports = { createFileSearchTool, primeFiles, fileSearchJsonSchema };
