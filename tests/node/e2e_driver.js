#!/usr/bin/env node
/**
 * Drives the overlay module once for tests/overlay/test_overlay_e2e.py: reads a JSON scenario on
 * stdin, runs primeFiles and/or the file_search tool against RAG_API_URL (the real service, or a
 * test proxy in front of it), and prints one JSON object on stdout.
 *
 * Scenario: {
 *   userId: string, entity_id?: string, query: string, fileCitations?: boolean,
 *   files?: [{file_id, filename, fromAgent?}],                 // searched as given, or
 *   prime?: {db: [file records], tool_resources, role?},       // primed first, then searched
 *   repeat?: number                                            // searches to run and time (1)
 * }
 * Output: {files, toolContext, text, artifact, logs, axiosErrors, timingsMs}; text and artifact are
 * the last search's, timingsMs the wall time of each `func` call (token, requests, merge).
 * The token is the HS256 `{id, iat, exp}` LibreChat signs, with JWT_SECRET from the environment.
 */
'use strict';

const { MODULE_PATH } = require('./support/hook');
const { state, resetState } = require('./support/state');

/**
 * Reads all of stdin as text.
 * @returns {Promise<string>}
 */
const readStdin = async () => {
  const chunks = [];
  for await (const chunk of process.stdin) {
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
};

/** Runs the scenario and prints the outcome. */
const main = async () => {
  const scenario = JSON.parse(await readStdin());
  resetState();
  const { primeFiles, createFileSearchTool } = require(MODULE_PATH);

  let files = scenario.files ?? [];
  let toolContext = null;
  if (scenario.prime) {
    state.db = scenario.prime.db ?? [];
    const primed = await primeFiles({
      tool_resources: scenario.prime.tool_resources,
      req: { user: { id: scenario.userId, role: scenario.prime.role ?? 'USER' } },
      agentId: scenario.entity_id,
    });
    files = primed.files;
    toolContext = primed.toolContext;
  }

  const fileSearch = await createFileSearchTool({
    userId: scenario.userId,
    files,
    entity_id: scenario.entity_id,
    fileCitations: scenario.fileCitations ?? false,
  });
  const timingsMs = [];
  let text;
  let artifact;
  for (let run = 0; run < Math.max(1, scenario.repeat ?? 1); run += 1) {
    const started = performance.now();
    [text, artifact] = await fileSearch.func({ query: scenario.query });
    timingsMs.push(performance.now() - started);
  }
  process.stdout.write(
    JSON.stringify({
      files,
      toolContext,
      text,
      artifact: artifact ?? null,
      logs: state.logs,
      axiosErrors: state.axiosErrors,
      timingsMs,
    }),
  );
};

main().catch((error) => {
  process.stderr.write(`${error?.stack ?? error}\n`);
  process.exit(1);
});
