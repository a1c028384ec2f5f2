/**
 * ragoverlay's version of LibreChat's `api/app/clients/tools/util/fileSearch.js`.
 *
 * Kept to upstream's layout (the same exports, the same steps in the same order) so a LibreChat
 * upgrade is a small diff; the search itself lives in `./ragoverlaySearch.js`, which has no upstream
 * counterpart. Every behaviour that differs from upstream is listed in ragoverlay's README ("What
 * changes"). Needs ragoverlay as the RAG API: it relies on `entity_id` scoping of `/query_multiple`.
 *
 * Installed by ragoverlay's `scripts/apply_patches.py`; pinned by hash in `checksums.txt`.
 */
'use strict';

const { tool } = require('@librechat/agents/langchain/tools');
const { generateShortLivedToken } = require('@librechat/api');
const { Tools, EToolResources } = require('librechat-data-provider');
const { filterFilesByAgentAccess } = require('~/server/services/Files/permissions');
const { getFiles } = require('~/models');
const { buildToolContext, primedFiles, searchFiles } = require('./ragoverlaySearch');

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
 * Loads the Agent's knowledge-base files the user may search, adds the conversation attachments and
 * describes them for the model (a count for the knowledge base, names for the attachments).
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
  const file_ids = Array.isArray(resource?.file_ids) ? resource.file_ids : [];
  const resourceFiles = Array.isArray(resource?.files) ? resource.files : [];

  const allFiles = (await getFiles({ file_id: { $in: file_ids } }, null, { text: 0 })) ?? [];

  let dbFiles = allFiles;
  if (req?.user?.id && agentId) {
    dbFiles = await filterFilesByAgentAccess({
      files: allFiles,
      userId: req.user.id,
      role: req.user.role,
      agentId,
    });
  }

  const files = primedFiles(dbFiles, resourceFiles);
  return { files, toolContext: buildToolContext(files) };
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
      if (!Array.isArray(files) || files.length === 0) {
        return ['No files to search. Instruct the user to add files for the search.', undefined];
      }
      const jwtToken = generateShortLivedToken(userId);
      if (!jwtToken) {
        return ['There was an error authenticating the file search request.', undefined];
      }
      return searchFiles({ query, files, entity_id, jwtToken, fileCitations });
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
